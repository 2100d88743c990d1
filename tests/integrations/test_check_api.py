"""`gatekeeper.check(source, policies)`: the typed library call for a finished run,
exported from the package (issue 29). In a child process, as a CI script would call it:
the verdict equals `gatekeeper check`'s JSON rule by rule, nothing is printed, overrides
apply, and a bad policy raises the error the CLI turns into exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers import REPO, gatekeeper, write_policy

SCRIPT = """
import json, sys
import gatekeeper
verdict = gatekeeper.check(sys.argv[1], sys.argv[2:] or "policies", overrides=OVERRIDES)
rows = [[r.policy, r.rule, r.status.value, r.step] for r in verdict.results]
print(json.dumps({"exit": verdict.exit_code, "status": verdict.status.value, "rows": rows}))
"""


def _library(source: str, *policies: str, overrides: tuple[str, ...] = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    code = SCRIPT.replace("OVERRIDES", repr(list(overrides)))
    out = subprocess.run([sys.executable, "-c", code, source, *policies], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (line,) = out.stdout.splitlines()  # the script's one line: check() printed nothing
    result: dict = json.loads(line)
    return result


def _cli(source: str, tmp_path, *extra: str) -> dict:
    out = gatekeeper("check", source, "-p", "policies", "-q", "--json",
                     str(tmp_path / "v.json"), *extra, cwd=REPO)
    report = json.loads((tmp_path / "v.json").read_text())
    rows = [[r["policy"], r["rule"], r["status"], r["step"]] for r in report["results"]]
    return {"exit": out.returncode, "status": report["status"], "rows": rows}


def test_check_equals_the_cli_on_the_shipped_examples(tmp_path):
    for run, code in (("examples/runs/healthy", 0), ("examples/runs/broken-kl", 1)):
        lib = _library(run)
        assert lib["exit"] == code and lib == _cli(run, tmp_path), run


def test_check_takes_overrides_with_their_reason(tmp_path):
    rule = "miles-ci-consistency/ppo-kl-rollout-start"
    relaxed = _library("examples/runs/broken-kl", overrides=(f"{rule}=off:MLA kernels, #123",))
    kl = [r for r in relaxed["rows"] if f"{r[0]}/{r[1]}" == rule]
    assert kl and kl[0][2] == "skip"
    cli = _cli("examples/runs/broken-kl", tmp_path, "--override", f"{rule}=off:MLA kernels, #123")
    assert relaxed == cli


def test_a_bad_policy_raises_the_clis_exit_2_error(tmp_path):
    bad = write_policy(tmp_path / "bad.yaml", "version: 1\nname: p\nrules:\n  - id: r\n"
                       "    metric: m\n    check: {abs_max: -1}\n")
    code = textwrap.dedent(f"""
        import gatekeeper
        from gatekeeper.errors import PolicyError
        try:
            gatekeeper.check("examples/runs/healthy", {str(bad)!r})
        except PolicyError as exc:
            print(exc.exit_code, exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("2 ") and "bad.yaml:6: rules[0].check.abs_max" in out.stdout


def test_check_is_exported_typed_and_documented():
    """Exported lazily; the type stub beside the package names every lazy name (what a
    type checker sees of `gatekeeper.check` is gate.check's signature); documented."""
    import ast
    import re

    import gatekeeper
    from gatekeeper import gate

    assert "check" in gatekeeper.__all__ and gatekeeper.check is gate.check
    stub = (REPO / "gatekeeper" / "__init__.pyi").read_text()
    stubbed = {a.asname for node in ast.parse(stub).body if isinstance(node, ast.ImportFrom)
               for a in node.names}
    assert stubbed == set(gatekeeper._LAZY) and "check" in stubbed
    assert 'gatekeeper = ["py.typed", "__init__.pyi"]' in (REPO / "pyproject.toml").read_text()
    assert re.search(r"^## `gatekeeper\.check`$", (REPO / "docs" / "api.md").read_text(), re.M)
