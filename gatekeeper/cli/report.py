"""`gatekeeper report verdict.json --run SOURCE --html report.html`: the HTML report from a
saved JSON verdict (a CI artifact) plus the run it judged, without judging again.

Also `write_plot_reports`, which `check`, `watch` and `run` call for `--html FILE` and
the step-summary charts (the reports that draw the run's series).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gatekeeper.cli.args import PlotOptions

if TYPE_CHECKING:
    from gatekeeper.model import Run
    from gatekeeper.policy.spec import PolicySpec
    from gatekeeper.sources.base import RunOverrides
    from gatekeeper.verdict import Verdict


def read_run(
    source: str | None,
    overrides: RunOverrides | None,
    policies: list[PolicySpec] | None = None,
) -> Run | None:
    """The run's series for the plots; None when no source was given or it is gone
    (the report is then written without charts, and says so)."""
    if not source or not os.path.exists(source) and "://" not in source:
        return None
    from gatekeeper.gate import read_run as read_whole

    run = read_whole(source, policies)
    return overrides.apply(run) if overrides is not None else run


def _summary_path(plots: PlotOptions) -> str | None:
    from gatekeeper.gate import github_enabled

    return os.environ.get("GITHUB_STEP_SUMMARY") if github_enabled(plots.github) else None


def wants_run(plots: PlotOptions) -> bool:
    """True when a report that plots the run's series is asked for: --html, or the charts
    under the GitHub step summary."""
    return bool(plots.html_path or _summary_path(plots))


def write_plot_reports(
    verdict: Verdict,
    plots: PlotOptions,
    run: Run | None,
    source: str | None = None,
    overrides: RunOverrides | None = None,
) -> None:
    """--html FILE and the step-summary charts. `run` None: read it from `source`
    (watch/run keep only new points, so the whole run is read once, at the end)."""
    if not wants_run(plots):
        return
    if run is None:
        run = read_run(source, overrides)
    if plots.html_path:
        from gatekeeper.report import html

        html.write(verdict, plots.html_path, run)
    summary = _summary_path(plots)
    if summary and run is not None:
        from gatekeeper.report import github

        github.append_charts(verdict, run, summary)


def cmd_report(args: argparse.Namespace) -> int:
    from gatekeeper.report import html
    from gatekeeper.report.json_report import read

    verdict = read(args.verdict)
    source = args.run or verdict.run.get("source")
    run = read_run(source, None)  # only its series are drawn; the verdict has the metadata
    html.write(verdict, args.html_path, run)
    note = "" if run is not None else f"; no run at {source or '(none given)'}, so no plots"
    print(f"gatekeeper: wrote {args.html_path} ({verdict.status.value}, "
          f"{len(verdict.results)} rules{note})")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="write the HTML report from a saved JSON verdict and the run it judged"
    )
    p.add_argument("verdict", metavar="VERDICT.json", help="a verdict written by --json")
    p.add_argument(
        "--run", metavar="SOURCE",
        help="the run's metrics, for the plots (default: the source the verdict names)",
    )
    p.add_argument(
        "--html", dest="html_path", metavar="FILE", required=True, help="write the HTML report"
    )
    p.set_defaults(func=cmd_report)

