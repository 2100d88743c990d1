"""Prometheus metrics of the daemon. Current state is read at scrape time by a Collector;
events (polls, points, errors, notifications) are counters and a histogram.

What is exported per run is sized by what an operator alerts on (issue 28): by default
one status per run and one per policy on each run, each a number (`STATUS_CODES`), so a
series stays the same series when its status changes. One series per rule
(`metrics.rules`) and each metric's latest value (`metrics.values`, for rules exported
by `gatekeeper export prometheus`) are opt-in; docs/daemon.md maps the old names.

Every object that owns metrics takes a `registry`, so tests use a fresh one.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.utils import floatToGoString
from pydantic import BaseModel, ConfigDict

from gatekeeper.verdict import GateStatus

OUTCOMES = ("sent", "failed", "dropped", "expired")  # final outcomes of an alert

# A status as a number, worse is higher: `>= 4` is "error or fail" for a rule, a policy
# and a run alike. A rule of severity warn counts as warn at most (its ERROR too).
STATUS_CODES = {
    "skip": 0,
    "nothing_judged": 0,
    "pass": 1,
    "pending": 2,
    "warn": 3,
    "error": 4,
    "fail": 5,
}
_CODES_HELP = "0 skip/nothing_judged, 1 pass, 2 pending, 3 warn, 4 error, 5 fail"


class MetricsSettings(BaseModel):
    """`metrics:` in the daemon config: what /metrics holds beyond runs and policies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: bool = False  # gatekeeper_rule_status_code: one series per rule per run
    values: bool = False  # gatekeeper_metric_value/_step: one series per metric per run


class RuleLike(Protocol):
    """A rule's debounced status (`state.RuleRow` is one)."""

    policy: str
    rule: str
    severity: str
    status: str  # debounced status


@dataclass(frozen=True)
class RuleView:
    policy: str
    rule: str
    severity: str
    status: str  # debounced status


@dataclass(frozen=True)
class MetricView:
    """A metric's latest point as read by this daemon process (by step, not arrival)."""

    metric: str
    step: int
    value: float  # NaN/±Inf exported as they are: Prometheus keeps them


@dataclass(frozen=True)
class RunView:
    """What the exporter needs to know of one run, at scrape time."""

    name: str
    status: str  # gate status of the latest verdict
    last_success: float | None
    rules: Sequence[RuleLike]
    ended: bool = False  # ended runs are not polled: no last-poll time to go stale
    metrics: tuple[MetricView, ...] = ()
    held: int = 0  # polls judged and held in memory, not committed yet (poll.checkpoint)


def rule_code(severity: str, status: str) -> int:
    """A rule's status as a number; a warn-severity rule counts as warn at most."""
    code = STATUS_CODES.get(status, STATUS_CODES["error"])
    return min(code, STATUS_CODES["warn"]) if severity == "warn" else code


_RULE_CODES = {(sev, st): rule_code(sev, st) for sev in ("fail", "warn") for st in STATUS_CODES}


def policy_codes(rules: Iterable[RuleLike]) -> dict[str, int]:
    """Per policy, the highest code of its rules (45,000 rules a scrape at 1,000 runs:
    the codes are looked up, not worked out)."""
    out: dict[str, int] = {}
    codes = _RULE_CODES
    for r in rules:
        code = codes.get((r.severity, r.status))
        if code is None:
            code = rule_code(r.severity, r.status)
        if code > out.get(r.policy, -1):
            out[r.policy] = code
    return out


@functools.lru_cache(maxsize=65536)  # run and policy names recur on every scrape
def _label(value: str) -> str:
    """A label value escaped as both text formats write it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_FAMILIES = {  # name -> help; every one a gauge
    "gatekeeper_run_status": f"Gate status of a watched run's latest verdict: {_CODES_HELP}",
    "gatekeeper_policy_status": (
        f"Worst (debounced) rule status of a policy on a watched run: {_CODES_HELP}"
    ),
    "gatekeeper_rule_status_code": f"(Debounced) status of a rule on a watched run: {_CODES_HELP}",
    "gatekeeper_runs": "Watched runs by gate status",
    "gatekeeper_polls_held": (
        "Polls judged and held in memory, not committed yet (poll.checkpoint), all runs"
    ),
    "gatekeeper_last_successful_poll_timestamp_seconds": (
        "Unix time of the last successful poll of a run still being watched"
    ),
    # the names `gatekeeper export prometheus` reads by default (toolkit/promql.py)
    "gatekeeper_metric_value": (
        "Latest value of a metric of a watched run (at the highest step read so far)"
    ),
    "gatekeeper_metric_step": "Step of the latest value of a metric of a watched run",
}
_CODE_TEXT = {code: floatToGoString(code) for code in set(STATUS_CODES.values())}


class StateExposition:
    """The current status of every watched run and policy (rule and metric detail when
    `settings` asks), as exposition text made at scrape time. Written directly, not
    through prometheus_client's per-sample formatting (~25 us a sample: 0.3 s at 1,000
    runs); the text is the same in the Prometheus and OpenMetrics formats (gauges)."""

    def __init__(
        self, snapshot: Callable[[], Iterable[RunView]], settings: MetricsSettings | None = None
    ):
        self.snapshot = snapshot
        self.settings = settings or MetricsSettings()

    def text(self, names: Iterable[str] | None = None) -> str:
        """The families (only `names` when given, as `/metrics?name[]=...`)."""
        lines: dict[str, list[str]] = {name: [] for name in _FAMILIES}
        counts = {s.value: 0 for s in GateStatus}
        held = 0
        for run in self.snapshot():
            counts[run.status] = counts.get(run.status, 0) + 1
            held += run.held
            self._run(run, _label(run.name), lines)
        lines["gatekeeper_polls_held"] = [f"gatekeeper_polls_held {floatToGoString(held)}\n"]
        lines["gatekeeper_runs"] = [
            f'gatekeeper_runs{{status="{_label(s)}"}} {floatToGoString(n)}\n'
            for s, n in counts.items()
        ]
        wanted = set(names) if names is not None else None
        out = []
        for name, help_text in _FAMILIES.items():
            if not self._exported(name) or (wanted is not None and name not in wanted):
                continue
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
            out.extend(lines[name])
        return "".join(out)

    def _exported(self, name: str) -> bool:
        if name == "gatekeeper_rule_status_code":
            return self.settings.rules
        if name in ("gatekeeper_metric_value", "gatekeeper_metric_step"):
            return self.settings.values
        return True

    def _run(self, run: RunView, name: str, lines: dict[str, list[str]]) -> None:
        code = STATUS_CODES.get(run.status, STATUS_CODES["error"])
        lines["gatekeeper_run_status"].append(
            f'gatekeeper_run_status{{run="{name}"}} {_CODE_TEXT[code]}\n'
        )
        if run.last_success is not None and not run.ended:
            lines["gatekeeper_last_successful_poll_timestamp_seconds"].append(
                f'gatekeeper_last_successful_poll_timestamp_seconds{{run="{name}"}} '
                f"{floatToGoString(run.last_success)}\n"
            )
        policies = lines["gatekeeper_policy_status"]
        for policy, c in policy_codes(run.rules).items():
            policies.append(
                f'gatekeeper_policy_status{{policy="{_label(policy)}",run="{name}"}} '
                f"{_CODE_TEXT[c]}\n"
            )
        if self.settings.rules:
            self._rules(run, name, lines["gatekeeper_rule_status_code"])
        if self.settings.values:
            for m in run.metrics:
                labels = f'metric="{_label(m.metric)}",run="{name}"'
                lines["gatekeeper_metric_value"].append(
                    f"gatekeeper_metric_value{{{labels}}} {floatToGoString(m.value)}\n"
                )
                lines["gatekeeper_metric_step"].append(
                    f"gatekeeper_metric_step{{{labels}}} {floatToGoString(m.step)}\n"
                )

    @staticmethod
    def _rules(run: RunView, name: str, out: list[str]) -> None:
        for r in run.rules:
            labels = (
                f'policy="{_label(r.policy)}",rule="{_label(r.rule)}",run="{name}",'
                f'severity="{_label(r.severity)}"'
            )
            code = _CODE_TEXT[rule_code(r.severity, r.status)]
            out.append(f"gatekeeper_rule_status_code{{{labels}}} {code}\n")


class DaemonMetrics:
    """The daemon's event metrics plus the state collector, on one registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        snapshot: Callable[[], Iterable[RunView]],
        settings: MetricsSettings | None = None,
        replica: str | None = None,
    ):
        """`replica`: this replica's name on a shared store (`gatekeeper_replica_info`;
        every run series of its `/metrics` is a run it holds)."""
        self.registry = registry
        if replica is not None:
            Info("gatekeeper_replica", "The replica of a shared state store serving this "
                 "/metrics: each run it exports is one it holds", registry=registry,
                 ).info({"replica": replica})
        self.points = Counter(
            "gatekeeper_points_ingested", "Metric points read from sources", registry=registry
        )
        self.polls = Counter(
            "gatekeeper_polls", "Polls of watched runs", ["outcome"], registry=registry
        )
        self.poll_errors = Counter(
            "gatekeeper_poll_errors", "Polls that failed or timed out", ["kind"], registry=registry
        )
        self.poll_duration = Histogram(
            "gatekeeper_poll_duration_seconds",
            "Time to poll a run, evaluate it and commit the state",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.poll_lag = Histogram(
            "gatekeeper_poll_lag_seconds",
            "How late a poll started against its schedule",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.notifications = Counter(
            "gatekeeper_notifications",
            "Alerts by channel and final outcome (sent, failed, dropped, expired)",
            ["channel", "outcome"],
            registry=registry,
        )
        self.retries = Counter(
            "gatekeeper_notification_retries",
            "Delivery attempts that failed and will be retried",
            ["channel"],
            registry=registry,
        )
        self.waiting = Gauge(
            "gatekeeper_notifications_waiting",
            "Alerts queued or waiting for a retry, not yet delivered",
            ["channel"],
            registry=registry,
        )
        self.watched = Counter(
            "gatekeeper_runs_discovered", "Runs added to the watch list", registry=registry
        )
        self.state = StateExposition(snapshot, settings)

    def exposition(self, accept: str = "", names: list[str] | None = None) -> tuple[bytes, str]:
        """The whole `/metrics` body and its content type: the registry's event metrics
        (prometheus_client's encoder for `accept`) and the state families."""
        encoder, content_type = choose_encoder(accept)
        registry = self.registry.restricted_registry(names) if names else self.registry
        events = encoder(registry)
        state = self.state.text(names).encode()
        eof = b"# EOF\n"
        if events.endswith(eof):  # OpenMetrics: the state before its end marker
            return events[: -len(eof)] + state + eof, content_type
        return events + state, content_type

    def wsgi_app(self) -> Callable[..., Any]:
        """`/metrics` as prometheus_client's app answers it (format negotiation, gzip,
        `name[]=`), the state families included."""

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
            body, content_type = self.exposition(environ.get("HTTP_ACCEPT", ""), names)
            headers = [("Content-Type", content_type)]
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            start_response("200 OK", headers)
            return [body]

        return app

    def count_notification(self, channel: str, outcome: str, n: int = 1) -> None:
        self.notifications.labels(channel=channel, outcome=outcome).inc(n)

    def count_retry(self, channel: str) -> None:
        self.retries.labels(channel=channel).inc()

    def prime(self, channels: Mapping[str, Any], **_: Any) -> None:
        """Create the labelled series at 0, so rate() works from the first scrape; each
        channel's `waiting()` is read at scrape time."""
        for ch, channel in channels.items():
            for outcome in OUTCOMES:
                self.notifications.labels(channel=ch, outcome=outcome)
            self.retries.labels(channel=ch)
            if hasattr(channel, "waiting"):
                self.waiting.labels(channel=ch).set_function(channel.waiting)
        for kind in ("error", "timeout", "discovery"):
            self.poll_errors.labels(kind=kind)
        for outcome in ("ok", "error", "skipped", "overrun"):
            self.polls.labels(outcome=outcome)
