"""The command line: parse arguments, call the library, map errors to exit codes.

Exit codes: 0 gate passed (warnings allowed), 1 gate failed, 2 could not evaluate.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gatekeeper import __version__
from gatekeeper.errors import GatekeeperError, UsageError
from gatekeeper.model import RunState
from gatekeeper.policy.overrides import parse_override
from gatekeeper.sources import RunOverrides

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits 2 itself; keep one message form
        raise UsageError(f"{self.prog}: {message}")


def _yaml_scalar(text: str) -> Any:
    from ruamel.yaml import YAML

    from gatekeeper.policy.loader import plain

    try:
        return plain(YAML(typ="rt").load(text)) if text else ""
    except Exception:
        return text


def run_overrides(args: argparse.Namespace) -> RunOverrides:
    config: dict[str, Any] = {}
    for item in args.config or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE, e.g. --config lora_rank=8")
        config[key.removeprefix("config.")] = _yaml_scalar(value)
    state = None
    if getattr(args, "state", None):
        state = RunState(args.state)
    return RunOverrides(name=args.name, tags=tuple(args.tag or ()), config=config, state=state)


def parse_references(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, eq, source = item.partition("=")
        if not eq or not name or not source:
            raise UsageError(
                f"--reference {item!r}: expected NAME=SOURCE, e.g. --reference grad-norm=ref.jsonl"
            )
        if name in out:
            raise UsageError(f"--reference {name!r} is given twice")
        out[name] = source
    return out


def add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-p", "--policy", action="append", required=True, metavar="POLICY",
        help="policy file or directory of *.yaml (repeatable)",
    )
    p.add_argument(
        "--override", action="append", default=[], metavar="POLICY/RULE=ACTION:REASON",
        help="relax one rule with a recorded reason: =off:REASON, =warn:REASON, "
        "=abs_max=1e-8:REASON (repeatable)",
    )


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="run name (default: from the sidecar or the file name)")
    p.add_argument("--tag", action="append", metavar="TAG", help="add a run tag (repeatable)")
    p.add_argument(
        "--config", action="append", metavar="KEY=VALUE",
        help="set a run config key, dotted for nesting; VALUE is read as YAML (8, true, x)",
    )


def add_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the verdict as JSON")
    p.add_argument("--junit", dest="junit_path", metavar="FILE", help="write JUnit XML")
    p.add_argument(
        "--github", choices=("auto", "always", "never"), default="auto",
        help="GitHub annotations and step summary (auto: when GITHUB_ACTIONS=true)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the one-line verdict")
    p.add_argument("--hide-skipped", action="store_true", help="leave skipped rules out of the table")


def report_options(args: argparse.Namespace) -> Any:
    from gatekeeper.gate import ReportOptions

    return ReportOptions(
        json_path=args.json_path,
        junit_path=args.junit_path,
        github=args.github,
        quiet=args.quiet,
        show_skipped=not args.hide_skipped,
    )


def cmd_check(args: argparse.Namespace) -> int:
    from gatekeeper import gate
    from gatekeeper.annotate import annotate_from_args
    from gatekeeper.report.text import summary_line

    policies = gate.load(args.policy, [parse_override(o) for o in args.override])
    from gatekeeper.commands.history import history_options, print_summary

    references = gate.read_references(parse_references(args.reference))
    verdict = gate.check(
        args.source, policies, run_overrides(args), history=history_options(args),
        references=references,
    )
    gate.write_reports(verdict, report_options(args))
    print_summary(verdict, args)
    annotate_from_args(args, verdict)
    if args.quiet:
        print(summary_line(verdict))
    return verdict.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies

    policies = load_policies(args.paths)
    for p in policies:
        base = f" (extends {p.extends})" if p.extends else ""
        print(f"{p.file}: policy {p.name}, {len(p.rules)} rules, mode {p.mode.value}{base}")
        if args.verbose:
            for r in p.rules:
                when = " when " + " and ".join(c.describe() for c in r.conditions) if r.conditions else ""
                print(f"  {r.id}: {r.metric} steps={r.steps.describe()} {r.describe_expected()}"
                      f" [{r.severity.value}]{when} ({r.source})")
    print(f"ok: {len(policies)} policies, {sum(len(p.rules) for p in policies)} rules")
    return 0


def cmd_checks(args: argparse.Namespace) -> int:
    from gatekeeper.checks import registry

    for kind, cls in registry().items():
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        print(f"{kind:10} {doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gatekeeper.annotate import add_annotate_arg

    parser = _Parser(prog="gatekeeper", description="Training-run health gate.")
    parser.add_argument("--version", action="version", version=f"gatekeeper {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("check", help="judge a finished run against policies (CI gate)")
    p.add_argument("source", metavar="SOURCE", help="JSONL record file or run directory")
    add_policy_args(p)
    add_run_args(p)
    add_report_args(p)
    add_annotate_arg(p)
    p.add_argument(
        "--reference", action="append", default=[], metavar="NAME=SOURCE",
        help="an earlier run (record file, run directory, wandb run) that isclose rules "
        "with reference: NAME compare against, step by step (repeatable)",
    )
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("validate", help="load policies and report problems (exit 2 if any)")
    p.add_argument("paths", nargs="+", metavar="POLICY")
    p.add_argument("-v", "--verbose", action="store_true", help="list every rule")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("checks", help="list the check kinds policies can use")
    p.set_defaults(func=cmd_checks)

    for register in EXTENSIONS:
        register(sub)
    return parser


# Other command modules add their subcommands here (watch, run, serve, history).
EXTENSIONS: list[Callable[[Any], None]] = []
import gatekeeper.commands.serve  # noqa: E402,F401 - registers `serve` in EXTENSIONS
import gatekeeper.commands.history  # noqa: E402,F401 - `history`, check --history
import gatekeeper.commands.live  # noqa: E402,F401 - `watch`, `run`
import gatekeeper.commands.sources  # noqa: E402,F401 - `sources`


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except GatekeeperError as exc:
        print(f"gatekeeper: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gatekeeper: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
