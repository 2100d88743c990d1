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

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
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
    rules: tuple[RuleView, ...]
    ended: bool = False  # ended runs are not polled: no last-poll time to go stale
    metrics: tuple[MetricView, ...] = ()


def rule_code(rule: RuleView) -> int:
    """The rule's status as a number; a warn-severity rule counts as warn at most."""
    code = STATUS_CODES.get(rule.status, STATUS_CODES["error"])
    return min(code, STATUS_CODES["warn"]) if rule.severity == "warn" else code


def policy_codes(rules: Iterable[RuleView]) -> dict[str, int]:
    """Per policy, the highest code of its rules."""
    out: dict[str, int] = {}
    for r in rules:
        out[r.policy] = max(out.get(r.policy, 0), rule_code(r))
    return out


class StateCollector(Collector):
    """Yields the current status of every watched run and policy (rule and metric detail
    when `settings` asks) when scraped."""

    def __init__(
        self, snapshot: Callable[[], Iterable[RunView]], settings: MetricsSettings | None = None
    ):
        self.snapshot = snapshot
        self.settings = settings or MetricsSettings()

    def collect(self) -> Iterator[Metric]:
        run_status = GaugeMetricFamily(
            "gatekeeper_run_status",
            f"Gate status of a watched run's latest verdict: {_CODES_HELP}",
            labels=["run"],
        )
        policy_status = GaugeMetricFamily(
            "gatekeeper_policy_status",
            f"Worst (debounced) rule status of a policy on a watched run: {_CODES_HELP}",
            labels=["run", "policy"],
        )
        rule_status = GaugeMetricFamily(
            "gatekeeper_rule_status_code",
            f"(Debounced) status of a rule on a watched run: {_CODES_HELP}",
            labels=["run", "policy", "rule", "severity"],
        )
        by_status = GaugeMetricFamily(
            "gatekeeper_runs", "Watched runs by gate status", labels=["status"]
        )
        last_ok = GaugeMetricFamily(
            "gatekeeper_last_successful_poll_timestamp_seconds",
            "Unix time of the last successful poll of a run still being watched",
            labels=["run"],
        )
        # the names `gatekeeper export prometheus` reads by default (toolkit/promql.py)
        value = GaugeMetricFamily(
            "gatekeeper_metric_value",
            "Latest value of a metric of a watched run (at the highest step read so far)",
            labels=["run", "metric"],
        )
        step = GaugeMetricFamily(
            "gatekeeper_metric_step",
            "Step of the latest value of a metric of a watched run",
            labels=["run", "metric"],
        )
        rules, values = self.settings.rules, self.settings.values
        counts = {s.value: 0 for s in GateStatus}
        for run in self.snapshot():
            counts[run.status] = counts.get(run.status, 0) + 1
            run_status.add_metric([run.name], STATUS_CODES.get(run.status, STATUS_CODES["error"]))
            if run.last_success is not None and not run.ended:
                last_ok.add_metric([run.name], run.last_success)
            for policy, code in policy_codes(run.rules).items():
                policy_status.add_metric([run.name, policy], code)
            for r in run.rules if rules else ():
                rule_status.add_metric([run.name, r.policy, r.rule, r.severity], rule_code(r))
            for m in run.metrics if values else ():
                value.add_metric([run.name, m.metric], m.value)
                step.add_metric([run.name, m.metric], m.step)
        for status, n in counts.items():
            by_status.add_metric([status], n)
        yield from (run_status, policy_status, by_status, last_ok)
        if rules:
            yield rule_status
        if values:
            yield value
            yield step


class DaemonMetrics:
    """The daemon's event metrics plus the state collector, on one registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        snapshot: Callable[[], Iterable[RunView]],
        settings: MetricsSettings | None = None,
    ):
        self.registry = registry
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
        registry.register(StateCollector(snapshot, settings))

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
        for outcome in ("ok", "error", "skipped"):
            self.polls.labels(outcome=outcome)
