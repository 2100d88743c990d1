"""The option groups several commands share, and the typed options they become.

Each command turns its argparse Namespace into frozen options here, once, at the edge:
nothing below `gatekeeper.cli` sees argparse. Imports of the library stay inside the
functions so that building the parser (`gatekeeper --version`) stays cheap.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekeeper.errors import UsageError

if TYPE_CHECKING:
    from gatekeeper.baselines import HistoryOptions
    from gatekeeper.cli.configschema import ProjectConfig
    from gatekeeper.gate import ReportOptions
    from gatekeeper.policy.overrides import CliOverride
    from gatekeeper.sources.base import RunOverrides
    from gatekeeper.verdict import Verdict


@dataclass(frozen=True)
class PolicyOptions:
    """`-p POLICY` and `--override` of a judging command."""

    paths: tuple[str, ...]
    overrides: tuple[CliOverride, ...]


@dataclass(frozen=True)
class PlotOptions:
    """The reports that draw the run's series: `--html FILE` and the step-summary charts."""

    html_path: str | None = None
    github: str = "auto"


def add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-p", "--policy", action="append", metavar="POLICY",
        help="policy file or directory of *.yaml (repeatable; default: the policies of the "
        "project config, [tool.gatekeeper] in pyproject.toml or gatekeeper.yaml)",
    )
    p.add_argument(
        "--override", action="append", default=[], metavar="POLICY/RULE=ACTION:REASON",
        help="relax one rule with a recorded reason: =off:REASON, =warn:REASON, "
        "=abs_max=1e-8:REASON (repeatable)",
    )
    p.add_argument(
        "--no-config", action="store_true",
        help="read no project config (gatekeeper.yaml, [tool.gatekeeper], $GATEKEEPER_CONFIG)",
    )


def project_config(args: argparse.Namespace) -> ProjectConfig | None:
    """The project config (docs/config.md), found once per command; which file it is goes
    on stderr, one line, so a log says where the settings came from."""
    if getattr(args, "no_config", False):
        return None
    if not hasattr(args, "project_config"):
        from gatekeeper.cli.projectconfig import discover

        args.project_config = discover()
        if args.project_config is not None:
            print(f"gatekeeper: config {args.project_config.shown}", file=sys.stderr)
    found: ProjectConfig | None = args.project_config
    return found


WEEK = 7 * 86400.0  # the longest duration a flag takes (a sleep of inf overflows)


def bounded(
    low: float, high: float, *, above: bool = False, below: bool = False, like: str = "",
    parse: Callable[[str], float] = float,
) -> Callable[[str], float]:
    """An argparse type: a finite number from `low` to `high` (`above`/`below`: not the
    end itself), read by `parse`. NaN, an infinity or a number out of range is argparse's
    usage error (exit 2, naming the flag), not a value that breaks the command later."""
    lo, hi = ("(" if above else "[") + f"{low:g}", f"{high:g}" + (")" if below else "]")

    def number(text: str) -> float:
        try:
            value = parse(text)
        except ValueError:
            value = math.nan
        fits = (value > low if above else value >= low) and (
            value < high if below else value <= high)  # NaN fits neither
        if not fits:
            raise argparse.ArgumentTypeError(
                f"expected a number in {lo}, {hi}{like}, got {text!r}")
        return value

    return number


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high` (exit 2 naming the flag)."""

    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high}, got {text!r}")
        return value

    return number


def seconds(*, zero: bool = False) -> Callable[[str], float]:
    """An argparse type for a duration (`30`, `30s`, `5m`, `250ms`: the config files'
    grammar): above 0 (or from 0), at most a week."""
    return bounded(0.0, WEEK, above=not zero, like=" seconds (or 30s, 5m)", parse=_duration)


def _duration(text: str) -> float:
    from gatekeeper.yamlfile import seconds as duration  # pydantic: only for a flag given

    return float(duration(text))


def add_tuning_arg(
    p: argparse.ArgumentParser, flag: str, default: float, metavar: str, help: str,
    kind: Callable[[str], float],
) -> None:
    """A number that tunes a policy-writing command; its help ends with its default."""
    p.add_argument(
        flag, type=kind, default=default, metavar=metavar, help=f"{help} (default {default:g})"
    )


def policy_options(args: argparse.Namespace) -> PolicyOptions:
    """`-p` and `--override`; without `-p`, the project config's policies. The config's
    overrides go with its policies (a `-p` replacing them drops them); an `--override`
    replaces the config's override of the rule it names (flags win)."""
    from gatekeeper.policy.overrides import parse_override

    config = project_config(args)
    paths = tuple(args.policy or ())
    given = tuple(parse_override(o) for o in args.override)
    configured: tuple[CliOverride, ...] = ()
    if config is not None and not (paths and config.policies):
        paths = paths or config.policies
        named = {(o.policy, o.rule) for o in given}
        configured = tuple(
            o for o in (parse_override(text, origin) for text, origin in config.overrides)
            if (o.policy, o.rule) not in named
        )
    if not paths:
        raise UsageError(
            "no policy: pass -p POLICY, or set policies in [tool.gatekeeper] of pyproject.toml "
            "or in a gatekeeper.yaml (docs/config.md)"
        )
    return PolicyOptions(paths=paths, overrides=configured + given)


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="run name (default: from the sidecar or the file name)")
    p.add_argument("--tag", action="append", metavar="TAG", help="add a run tag (repeatable)")
    p.add_argument(
        "--config", action="append", metavar="KEY=VALUE",
        help="set a run config key, dotted for nesting; VALUE is read as YAML (8, true, x; "
        "quote text YAML reads otherwise: 'key=\"a: b\"')",
    )
    p.add_argument(
        "--allow-state", action="append", metavar="STATE:REASON",
        help="let a failed/crashed/killed/incomplete run pass on its data, with a reason "
        "every report shows (repeatable)",
    )
    p.add_argument(
        "--allow-nothing-judged", metavar="REASON",
        help="let a gate whose every gating rule is skipped (or that has none) pass, with "
        "a reason every report shows; without it that verdict is 'nothing judged', exit 5",
    )


def _yaml_value(item: str, text: str) -> Any:
    """A `--config` value read by the one YAML reader, as in a policy file: what it
    refuses (a tag, a syntax error) is a usage error, never kept as text unnoticed."""
    from gatekeeper.errors import PolicyError
    from gatekeeper.yamlfile import load_text, to_plain

    if not text:
        return ""
    try:
        return to_plain(load_text(text, "--config"), "--config")
    except PolicyError as exc:
        raise UsageError(
            f"--config {item!r}: cannot read value {text!r}: {exc}; or quote it for text, "
            "e.g. --config 'key=\"a: b\"'"
        ) from None


def run_overrides(args: argparse.Namespace) -> RunOverrides:
    """`--name`, `--tag`, `--config`, `--state`, `--allow-state` as RunOverrides."""
    from gatekeeper.model import RunState
    from gatekeeper.run_state import parse_allow_state
    from gatekeeper.sources.base import RunOverrides

    config: dict[str, Any] = {}
    for item in args.config or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE, e.g. --config lora_rank=8")
        config[key.removeprefix("config.")] = _yaml_value(item, value)
    state = RunState(args.state) if getattr(args, "state", None) else None
    allowed: dict[str, str] = {}
    for item in getattr(args, "allow_state", None) or []:
        try:
            key, reason = parse_allow_state(item)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        allowed[key] = reason
    nothing = getattr(args, "allow_nothing_judged", None)
    if nothing is not None and not nothing.strip():
        raise UsageError("--allow-nothing-judged: give the reason, e.g. 'nightly-only policy'")
    return RunOverrides(
        name=args.name, tags=tuple(args.tag or ()), config=config, state=state,
        allowed_states=allowed, allow_nothing_judged=nothing and nothing.strip(),
    )


def add_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the verdict as JSON")
    p.add_argument("--junit", dest="junit_path", metavar="FILE", help="write JUnit XML")
    p.add_argument(
        "--html", dest="html_path", metavar="FILE",
        help="write a self-contained HTML report with a plot per rule (opens offline)",
    )
    p.add_argument(
        "--github", choices=("auto", "always", "never"),
        help="GitHub annotations and step summary (auto, the default: when GITHUB_ACTIONS=true)",
    )
    volume = p.add_mutually_exclusive_group()
    volume.add_argument(
        "-q", "--quiet", action="store_true",
        help="print only the verdict line and the failed or errored rules",
    )
    volume.add_argument(
        "-v", "--verbose", action="store_true",
        help="add the table of every rule (default: the verdict line, the failed, errored, "
        "warning and overridden rules, and the counts)",
    )
    p.add_argument(
        "--hide-skipped", action="store_true",
        help="leave skipped rules out of the -v table (a rule an override switched off stays)",
    )
    p.add_argument(
        "--color", choices=("auto", "always", "never"),
        help="colour the console report (auto, the default: not when NO_COLOR is set, "
        "always when FORCE_COLOR is, else on a terminal)",
    )


def _report_setting(args: argparse.Namespace, flag: str, key: str) -> str | None:
    """A report flag's value, else the project config's `reports.<key>` (flags win)."""
    given: str | None = getattr(args, flag)
    if given is not None:
        return given
    config = project_config(args)
    return config.reports.get(key) if config is not None else None


def report_options(args: argparse.Namespace) -> ReportOptions:
    from gatekeeper.gate import ReportOptions

    return ReportOptions(
        json_path=_report_setting(args, "json_path", "json"),
        junit_path=_report_setting(args, "junit_path", "junit"),
        github=_report_setting(args, "github", "github") or "auto",
        quiet=args.quiet,
        verbose=args.verbose,
        show_skipped=not args.hide_skipped,
        color=_report_setting(args, "color", "color") or "auto",
    )


def try_report_paths(args: argparse.Namespace) -> None:
    """Exit 2 now, naming it, for a report path that could not be written when the verdict
    is in (`run` and `watch` may work for hours before it is)."""
    from gatekeeper.gate import github_enabled
    from gatekeeper.report.files import appendable, writable

    opts = report_options(args)
    for path in (opts.json_path, opts.junit_path, plot_options(args).html_path):
        if path:
            writable(path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and github_enabled(opts.github):
        appendable(summary, "the step summary ($GITHUB_STEP_SUMMARY)")


def plot_options(args: argparse.Namespace) -> PlotOptions:
    return PlotOptions(
        html_path=_report_setting(args, "html_path", "html"),
        github=_report_setting(args, "github", "github") or "auto",
    )


def add_annotate_arg(parser: argparse.ArgumentParser) -> None:
    """The `--annotate` option of `check` and `watch` (off by default)."""
    parser.add_argument(
        "--annotate", action="store_true",
        help="write the verdict onto the run: wandb:// runs get a gate:pass/gate:fail tag and "
        "gatekeeper/* summary keys; a local run directory gets gatekeeper-verdict.json",
    )


def add_history_args(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument(
        "--history",
        metavar="URL",
        help="baseline store for history rules: a SQLite path / sqlite:///path, or "
        "postgresql://... (default: $GATEKEEPER_HISTORY)"
        + ("" if required else "; without it history rules are inactive"),
    )
    p.add_argument(
        "--series-key",
        action="append",
        metavar="KEY",
        help="run metadata that identifies which runs share a baseline, e.g. "
        "config.test_path (repeatable; default: the history rules' `series`, else name)",
    )
    p.add_argument("--run-id", help="id to record the run under (default: the run's id or name)")
    p.add_argument("--commit", help="commit to record (default: config.commit or $GITHUB_SHA)")


def store_url(args: argparse.Namespace, *, required: bool) -> str | None:
    """`--history` or $GATEKEEPER_HISTORY (so a PostgreSQL password can stay a CI secret)."""
    url = getattr(args, "history", None) or os.environ.get("GATEKEEPER_HISTORY")
    if required and not url:
        raise UsageError("no history store: pass --history URL or set GATEKEEPER_HISTORY")
    return url or None


def history_options(
    args: argparse.Namespace, *, record: bool | None = None
) -> HistoryOptions | None:
    """HistoryOptions from `check`/`history record` arguments, or None without a store."""
    want_record = bool(getattr(args, "record", False)) if record is None else record
    url = store_url(args, required=want_record)
    if url is None:
        return None
    from gatekeeper.baselines import HistoryOptions

    return HistoryOptions(
        url=url,
        record=want_record,
        series_keys=tuple(getattr(args, "series_key", None) or ()) or None,
        run_id=getattr(args, "run_id", None),
        commit=getattr(args, "commit", None),
    )


def print_summary(verdict: Verdict, quiet: bool) -> None:
    """The history store's one-line summary (baseline used, run recorded), unless quiet."""
    if quiet or not verdict.run.get("history"):
        return  # no store was used: nothing to say, and no store code to import
    from gatekeeper.baselines import summary

    line = summary(verdict)
    if line and not quiet:
        print(line)


@dataclass(frozen=True)
class NotifyOptions:
    """`--notify KIND:URL_ENV[:SECRET_ENV]` (repeatable), `--notify-on`, and the CI job a
    verdict belongs to (`--job`, `--job-url`; GitHub's defaults)."""

    targets: tuple[Any, ...]  # NotifierSettings, one per --notify
    statuses: frozenset[str]
    job_name: str | None
    job_url: str | None


def notify_target(item: str) -> Any:
    """`--notify KIND:URL_ENV[:SECRET_ENV]` as the NotifierSettings of its kind, checked
    while the arguments are parsed (before a `run` starts CMD)."""
    from gatekeeper.notify import NotifierSettings, notifier_kind
    from gatekeeper.notify.ci import RETRY_FOR

    kind, _, rest = item.partition(":")
    url_env, _, secret_env = rest.partition(":")
    if not kind or not url_env:
        raise argparse.ArgumentTypeError(
            f"{item!r}: expected KIND:URL_ENV[:SECRET_ENV], e.g. lark:LARK_WEBHOOK_URL:LARK_SECRET"
        )
    try:
        model = notifier_kind(kind).settings_model or NotifierSettings
        return model(name=kind, kind=kind, url_env=url_env, secret_env=secret_env or None,
                     retry_for=RETRY_FOR)
    except ValueError as exc:  # an unknown kind; a value pydantic refuses
        errs = getattr(exc, "errors", None)
        why = str(exc) if errs is None else "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errs())
        raise argparse.ArgumentTypeError(f"{item!r}: {why}") from None


def notify_statuses(text: str) -> frozenset[str]:
    statuses = frozenset(s.strip() for s in text.split(","))
    if not statuses <= {"fail", "error", "warn"}:
        raise argparse.ArgumentTypeError(f"{text!r}: a list of fail, error, warn")
    return statuses


def add_notify_args(p: argparse.ArgumentParser, *, job: bool = True) -> None:
    p.add_argument(
        "--notify", action="append", default=[], type=notify_target,
        metavar="KIND:URL_ENV[:SECRET_ENV]",
        help="post a card of the failing rules (grouped as the daemon groups them) to a "
        "lark, slack or webhook receiver whose URL is in environment variable URL_ENV "
        "(never given or shown itself); SECRET_ENV: a Lark signing secret (repeatable)",
    )
    p.add_argument(
        "--notify-on", default=frozenset({"fail", "error"}), type=notify_statuses,
        metavar="STATUSES",
        help="rule statuses that go on the card: fail, error, warn (default fail,error)",
    )
    if job:
        p.add_argument(
            "--job", dest="job_name", metavar="NAME",
            help="this CI job's label on a card, kept in the JSON report (default $GITHUB_JOB)",
        )
        p.add_argument(
            "--job-url", metavar="URL",
            help="link to this CI job's page, kept in the JSON report (default: the GitHub "
            "run's page; a job's own page is .../actions/runs/RUN/job/${{ job.check_run_id }})",
        )


def notify_options(args: argparse.Namespace) -> NotifyOptions:
    from gatekeeper.notify.ci import github_job

    default = github_job(os.environ)
    return NotifyOptions(
        targets=tuple(args.notify), statuses=args.notify_on,
        job_name=getattr(args, "job_name", None) or default.name,
        job_url=getattr(args, "job_url", None) or default.url,
    )


def add_output_format(p: argparse.ArgumentParser) -> None:
    """`--output-format` of the toolkit commands (lint, test, validate)."""
    p.add_argument(
        "--output-format",
        choices=("text", "json", "github"),
        default="text",
        help="text (default); json: one document; github: ::error file=,line=:: annotations",
    )
