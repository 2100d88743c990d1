"""A CI run's verdicts as one chat card, through the daemon's grouping and delivery.

Every job of a CI run is a "run" of the card: its label and its link. A gate job stamps
its verdict with them (`JobInfo`, kept in the JSON report's `run.ci_job`); the card is
built from the verdicts exactly as the daemon builds its messages: each enforce-mode
result whose status the notifier lists becomes one alert (`grouping.alert_payload`), a
gate that judged nothing becomes one ERROR alert (never a silent pass), and
`grouping.group_alerts` folds alerts with the same policy, rule, status and reason
(numbers aside) into one group that keeps a line and a link per job. One `Channel` posts
it: the notifier's rate limits, retries with backoff, Retry-After, and errors with the
webhook URL and secret scrubbed. Shadow results are reported, never carded (as the daemon
never pages them).

Why one final step reads every job's report (`gatekeeper notify`) instead of each job
posting: Lark custom bots and Slack incoming webhooks can only post, never edit, so jobs
could fold into one card only through a message store they all reach and an app token
to edit the message. A last job that `needs:` the gate jobs is the only writer: no
shared state, no race, one card per CI run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekeeper.errors import GatekeeperError
from gatekeeper.notify.grouping import alert_payload, group_alerts
from gatekeeper.verdict import GateStatus, Mode, RuleResult, Severity, Status, Verdict

if TYPE_CHECKING:  # pydantic and httpx: imported only to post (`deliver`)
    from gatekeeper.notify.settings import NotifierSettings

JOB_KEY = "ci_job"  # where a verdict's run summary keeps its job's label and link
RETRY_FOR = 60.0  # a CI step retries a failing post this long, not the daemon's hour


@dataclass(frozen=True)
class JobInfo:
    """A CI job as a card shows it: its label, and the link to its page."""

    name: str | None = None
    url: str | None = None


def github_job(env: Mapping[str, str]) -> JobInfo:
    """GitHub Actions' defaults: the job id (`GITHUB_JOB`) and the run's page (this
    attempt). A job's own page needs `job.check_run_id`, which only an expression sees:
    pass it as `--job-url`."""
    name = env.get("GITHUB_JOB") or None
    server, repo, run_id = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                                                  "GITHUB_RUN_ID"))
    url = f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None
    attempt = env.get("GITHUB_RUN_ATTEMPT")
    if url and attempt and attempt != "1":
        url += f"/attempts/{attempt}"
    return JobInfo(name, url)


def stamp(verdict: Verdict, job: JobInfo) -> None:
    """Keep the job's label and link in the verdict (its JSON report carries them)."""
    if job.name or job.url:
        verdict.run[JOB_KEY] = {"name": job.name, "url": job.url}


def alerts_of(
    verdicts: Sequence[tuple[str, Verdict]], statuses: frozenset[str], now: float | None = None
) -> list[dict[str, Any]]:
    """The alerts of a CI run: per job (`key`: its report, unique), each enforce-mode
    result with a status in `statuses`, and a gate that judged nothing."""
    now = time.time() if now is None else now
    out: list[dict[str, Any]] = []
    for key, verdict in verdicts:
        job = verdict.run.get(JOB_KEY) or {}
        run = {"name": job.get("name") or verdict.run.get("name") or key,
               "url": job.get("url") or verdict.run.get("url")}
        for res in _carded(verdict, statuses):
            out.append(alert_payload(res, run, key, "firing", now, False))
    return out


def _carded(verdict: Verdict, statuses: frozenset[str]) -> list[RuleResult]:
    found = [r for r in verdict.results if r.mode is Mode.ENFORCE and r.status.value in statuses]
    if verdict.status is GateStatus.NOTHING:
        found.append(RuleResult(
            policy="gate", rule="nothing-judged", status=Status.ERROR, severity=Severity.FAIL,
            mode=Mode.ENFORCE, metric="", source="",
            message="nothing judged: every gating rule was skipped (exit 5)",
        ))
    return found


@dataclass(frozen=True)
class Delivery:
    alerts: int
    groups: int
    outcome: str  # sent, failed, expired, or "nothing" (no alert: no card)
    detail: str = ""


def deliver(settings: NotifierSettings, alerts: list[dict[str, Any]]) -> Delivery:
    """Post the alerts as one card through a `Channel` (the daemon's delivery), waiting
    until it is sent or given up; the detail of a failure never holds the URL or secret."""
    if not alerts:
        return Delivery(0, 0, "nothing")
    from gatekeeper.notify import build_notifier
    from gatekeeper.notify.channel import Channel, ChannelHooks

    notifier = build_notifier(settings)  # ConfigError when the URL's variable is unset
    outcomes: dict[int, tuple[str, str]] = {}
    done = threading.Event()

    def mark(ids: list[int], outcome: str, detail: str) -> None:
        outcomes.update(dict.fromkeys(ids, (outcome, detail)))
        if len(outcomes) >= len(alerts):
            done.set()

    channel = Channel(
        notifier, ChannelHooks(mark=mark, count=lambda *_: None), queue_size=len(alerts),
        group_wait=0.0, retry_for=settings.retry_for, retry_backoff=settings.retry_backoff,
        retry_backoff_max=settings.retry_backoff_max,
    )
    for i, alert in enumerate(alerts):  # queued before the worker starts: one batch
        channel.offer(i, alert)
    channel.start()
    finished = done.wait(settings.retry_for + 2 * settings.timeout + 5)
    channel.stop()
    groups = len(group_alerts(alerts))
    if not finished:
        return Delivery(len(alerts), groups, "failed", "no outcome in time")
    worst = next((o for o in outcomes.values() if o[0] != "sent"), ("sent", ""))
    return Delivery(len(alerts), groups, worst[0], worst[1])


class NotDelivered(GatekeeperError):
    """The card could not be posted (after retries): exit 2, the URL never shown."""
