"""Run a composite action's steps the way the GitHub runner does, without GitHub.

Follows GitHub's documented behaviour (metadata syntax for composite actions; workflow
commands; `GITHUB_OUTPUT`, `GITHUB_PATH`, `GITHUB_STEP_SUMMARY` files): inputs take
their defaults when not given; `${{ ... }}` in `run`, `env`, `with` and `if` is replaced
before the step runs (here: `inputs.*`, `github.action_path`, `steps.<id>.outputs.*`,
the `github`/`runner`/`strategy` values in `CONTEXT`, `a || b` (the first non-empty),
and `always()`/`success()`/`==`/`!=`/`&&` in `if`); a `shell: bash` step runs as
`bash --noprofile --norc -eo pipefail FILE`; each step gets fresh output/summary files;
after a failed step only `always()` steps run; `uses:` steps are recorded, not run.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)
# What the runner knows of the job: a test passes its own (a matrix index, say).
CONTEXT = {"github.job": "gate", "github.action_ref": "v1", "strategy.job-index": "0",
           "runner.os": "Linux", "runner.arch": "X64"}


def load_action(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@dataclass
class StepRun:
    name: str
    code: int | None  # None: a `uses:` step (recorded, not run) or a skipped step
    stdout: str = ""
    stderr: str = ""
    skipped: bool = False
    uses: str | None = None
    with_: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    steps: list[StepRun]
    outputs: dict[str, str]  # the action's outputs, resolved
    summary: str  # everything the steps appended to GITHUB_STEP_SUMMARY

    @property
    def failed(self) -> bool:
        return any(s.code not in (0, None) for s in self.steps)

    def step(self, name: str) -> StepRun:
        return next(s for s in self.steps if s.name == name)


class Runner:
    def __init__(self, action_dir: Path, workspace: Path, inputs: dict[str, str],
                 env: dict[str, str], context: dict[str, str] | None = None):
        self.action_dir = action_dir
        self.context = {**CONTEXT, **(context or {})}
        self.workspace = workspace
        self.meta = load_action(action_dir / "action.yml")
        declared = self.meta.get("inputs") or {}
        unknown = set(inputs) - set(declared)
        assert not unknown, f"inputs not declared in action.yml: {unknown}"
        self.inputs = {k: str(v.get("default", "")) for k, v in declared.items()}
        self.inputs.update(inputs)
        self.env = env
        self.step_outputs: dict[str, dict[str, str]] = {}
        self.temp = workspace / "_runner_temp"
        self.temp.mkdir(parents=True, exist_ok=True)

    # ---- expressions ---------------------------------------------------------------
    def value(self, expr: str) -> str:
        expr = expr.strip()
        if "||" in expr:  # GitHub's `a || b`: the first value that is not empty
            values = [self.value(part) for part in expr.split("||")]
            return next((v for v in values if v), values[-1])
        if expr in self.context:
            return self.context[expr]
        if expr == "runner.temp":
            return str(self.temp)
        if expr.startswith("inputs."):
            return self.inputs[expr[len("inputs."):]]
        if expr == "github.action_path":
            return str(self.action_dir)
        m = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
        if m:
            return self.step_outputs.get(m.group(1), {}).get(m.group(2), "")
        m = re.fullmatch(r"'([^']*)'", expr)
        if m:
            return m.group(1)
        raise AssertionError(f"expression the test runner does not know: {expr!r}")

    def substitute(self, text: str) -> str:
        return EXPR.sub(lambda m: self.value(m.group(1)), text)

    def condition(self, text: str | None, failed: bool) -> bool:
        if text is None:
            return not failed
        m = EXPR.fullmatch(text.strip())
        body = m.group(1) if m else text
        terms = [t.strip() for t in body.split("&&")]
        result = True
        has_status_function = False
        for term in terms:
            if term == "always()":
                has_status_function = True
            elif term == "success()":
                has_status_function = True
                result &= not failed
            elif "!=" in term:
                left, right = (s.strip() for s in term.split("!="))
                result &= self.value(left) != self.value(right)
            elif "==" in term:
                left, right = (s.strip() for s in term.split("=="))
                result &= self.value(left) == self.value(right)
            else:
                raise AssertionError(f"condition the test runner does not know: {term!r}")
        # Without a status function GitHub adds an implicit success().
        return result and (has_status_function or not failed)

    # ---- running -------------------------------------------------------------------
    def run(self) -> ActionRun:
        runs = self.meta["runs"]
        assert runs["using"] == "composite"
        path_prefix: list[str] = []
        summary = ""
        failed = False
        done: list[StepRun] = []
        for i, step in enumerate(runs["steps"]):
            name = step.get("name", f"step {i}")
            if not self.condition(step.get("if"), failed):
                done.append(StepRun(name, None, skipped=True, uses=step.get("uses")))
                continue
            if "uses" in step:
                with_ = {k: self.substitute(str(v)) for k, v in (step.get("with") or {}).items()}
                done.append(StepRun(name, None, uses=step["uses"], with_=with_))
                continue
            assert step["shell"] == "bash", "this runner runs bash steps"
            files = {k: self.temp / f"{k.lower()}_{i}" for k in
                     ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_PATH", "GITHUB_ENV")}
            for f in files.values():
                f.write_text("")
            script = self.temp / f"step_{i}.sh"
            script.write_text(self.substitute(step["run"]))
            env = dict(self.env)
            env.update({k: self.substitute(str(v)) for k, v in (step.get("env") or {}).items()})
            env.update({k: str(v) for k, v in files.items()})
            env.update(GITHUB_ACTIONS="true", GITHUB_ACTION_PATH=str(self.action_dir),
                       GITHUB_WORKSPACE=str(self.workspace), RUNNER_TEMP=str(self.temp))
            env["PATH"] = os.pathsep.join([*path_prefix, env["PATH"]])
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=self.workspace, env=env, capture_output=True, text=True, timeout=300,
            )
            done.append(StepRun(name, proc.returncode, proc.stdout, proc.stderr))
            failed |= proc.returncode != 0
            if "id" in step:
                self.step_outputs[step["id"]] = parse_output_file(files["GITHUB_OUTPUT"])
            path_prefix = [p for p in files["GITHUB_PATH"].read_text().splitlines() if p][
                ::-1] + path_prefix
            summary += files["GITHUB_STEP_SUMMARY"].read_text()
        outputs = {k: self.substitute(v["value"]) for k, v in (self.meta.get("outputs") or
                                                                {}).items()}
        return ActionRun(done, outputs, summary)


def parse_output_file(path: Path) -> dict[str, str]:
    """`name=value` lines and `name<<DELIMITER` ... `DELIMITER` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, _, value = line.partition("=")
        out[name] = value
        i += 1
    return out
