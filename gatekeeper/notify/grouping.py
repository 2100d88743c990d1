"""When to alert and how alerts become messages. Pure: no I/O, no clock (`now` is passed).

- One alert per episode of a rule on a run, per channel: `firing` when the rule first
  has a status the channel lists, `resolved` when it passes again (`closes`); a move among
  failing statuses (FAIL <-> ERROR) is the same episode. An open episode is re-sent once
  per `repeat_interval`. The episode lives in the daemon's SQLite state (alert_state), so
  a restart, kill -9 included, keeps it.
- Alerts with the same analysis (state, policy, rule, status and reason class) become one
  group that keeps one line and link per run. An alert with an empty analysis (no
  message) is never merged into a group.
- Cutting happens after grouping: a group keeps `max_lines` run lines then "+N more";
  a message that still does not fit keeps whole groups then "+N more groups".
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.verdict import RuleResult

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def reason_class(message: str) -> str:
    """The analysis of a result without its numbers: two runs failing the same way share it."""
    return _NUMBER.sub("#", message).strip()


def closes(status: str, statuses: frozenset[str]) -> bool:
    """An alert's episode is the rule not passing, whatever the failing status: FAIL and
    ERROR both fail the gate, so moving between them (a NaN after a failing point) is the
    same episode, on a channel listing either. Only passing again closes it: PASS, or WARN
    on a channel that does not list warn. SKIP and PENDING say nothing about the data (a
    `when:` that stopped holding, a rule not judged yet after a re-read): the episode
    stays open through them, so the next FAIL is not a new page."""
    return status == "pass" or (status == "warn" and "warn" not in statuses)


@dataclass
class ChannelState:
    firing: bool
    last_sent: float


def alert_payload(
    result: RuleResult, run: Mapping[str, Any], run_key: str, state: str, now: float, repeat: bool
) -> dict[str, Any]:
    """One alert as stored in the outbox and sent to generic webhooks (JSON-safe)."""
    data = result.to_dict()
    return {
        "state": state,
        "repeat": repeat,
        "time": now,
        "run": run.get("name") or run_key,
        "run_key": run_key,
        "url": run.get("url"),
        "policy": result.policy,
        "rule": result.rule,
        "status": result.status.value,
        "severity": result.severity.value,
        "metric": result.metric,
        "message": result.message,
        "reason_class": reason_class(result.message),
        "step": data["step"],
        "value": data["value"],
        "expected": result.expected,
        "rule_source": result.source,
    }


def alert_key(payload: Mapping[str, Any]) -> str:
    """The alert's identity for a receiver to drop a second delivery of it: a digest of
    the payload as stored in the outbox, which a re-send after a restart (or from another
    replica) reads back unchanged, and whose `time` (when it was made) tells two alerts of
    one rule apart."""
    text = json.dumps({k: v for k, v in payload.items() if k != "key"}, sort_keys=True,
                      separators=(",", ":"))  # JSON-safe: the outbox stores it with json.dumps
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def decide(
    results: Iterable[tuple[RuleResult, str]],
    states: Mapping[tuple[str, str], ChannelState],
    *,
    statuses: frozenset[str],
    repeat_interval: float,
    now: float,
) -> tuple[list[tuple[RuleResult, str, bool]], dict[tuple[str, str], ChannelState]]:
    """Alerts due for one channel: (result, 'firing'|'resolved', is_repeat) per rule.

    `results` pairs each rule result with its debounced (confirmed) status; `states` is
    the channel's memory per (policy, rule). Returns the alerts and the updated states.
    """
    due: list[tuple[RuleResult, str, bool]] = []
    updated: dict[tuple[str, str], ChannelState] = {}
    for result, confirmed in results:
        key = (result.policy, result.rule)
        prev = states.get(key)
        if prev is None or not prev.firing:  # no episode announced on this channel
            if confirmed in statuses:
                due.append((result, "firing", False))
                updated[key] = ChannelState(True, now)
        elif closes(confirmed, statuses):
            due.append((result, "resolved", False))
            updated[key] = ChannelState(False, now)
        elif repeat_interval > 0 and now - prev.last_sent >= repeat_interval:
            due.append((result, "firing", True))  # a reminder of the open episode
            updated[key] = ChannelState(True, now)
    return due, updated


@dataclass
class Group:
    """Alerts sharing one analysis; `alerts` holds one entry per run."""

    state: str
    policy: str
    rule: str
    status: str
    severity: str
    reason: str
    alerts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def title(self) -> str:
        verb = "resolved" if self.state == "resolved" else self.status.upper()
        runs = len(self.alerts)
        return f"{verb}: {self.policy}/{self.rule} on {runs} run{'s' if runs != 1 else ''}"


def group_alerts(alerts: Iterable[dict[str, Any]]) -> list[Group]:
    """Group alert payloads by analysis, in first-seen order; empty analyses stay alone."""
    groups: dict[tuple[Any, ...], Group] = {}
    for i, a in enumerate(alerts):
        reason = a.get("reason_class") or ""
        key: tuple[Any, ...] = (a["state"], a["policy"], a["rule"], a["status"], reason)
        if not reason:
            key = ("alone", i)
        if key not in groups:
            groups[key] = Group(
                a["state"], a["policy"], a["rule"], a["status"], a["severity"], reason
            )
        if all(x["run_key"] != a["run_key"] for x in groups[key].alerts):
            groups[key].alerts.append(a)
    return list(groups.values())


def run_line(alert: Mapping[str, Any], link: str = "{text}") -> str:
    """One run of a group: name (linked when it has a URL), then its own analysis."""
    name = str(alert["run"])
    text = link.format(text=name, url=alert["url"]) if alert.get("url") else name
    repeat = " (still firing)" if alert.get("repeat") else ""
    return f"{text}: {alert['message'] or alert['status']}{repeat}"


def cut_lines(lines: list[str], max_lines: int, max_chars: int) -> list[str]:
    """Keep whole lines within both limits; the rest become one "+N more" line."""
    kept: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        after = len(lines) - i - 1
        reserve = len(f"\n+{after} more runs") if after else 0
        if i == 0:  # the first line always shows, shortened when it alone is too long
            line = line[: max(0, max_chars - reserve)]
        if len(kept) >= max_lines or used + len(line) + reserve > max_chars:
            rest = len(lines) - i
            kept.append(f"+{rest} more run{'s' if rest != 1 else ''}")
            return kept
        kept.append(line)
        used += len(line) + 1
    return kept


def headline(groups: Sequence[Group]) -> str:
    """A message's title: how many of its groups fire and how many resolved."""
    firing = sum(1 for g in groups if g.state == "firing")
    return f"gatekeeper: {firing} firing, {len(groups) - firing} resolved"


def group_blocks(
    groups: Sequence[Group],
    room: int,
    block: Callable[[Group], dict[str, Any]],
    divider: dict[str, Any],
    more: Callable[[str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """A chat message's body: each of the first `room` groups as its `block` and a
    `divider`, then, when groups are left over, one `more("+N more groups")` element."""
    out: list[dict[str, Any]] = []
    for group in groups[:room]:
        out += [block(group), dict(divider)]
    if len(groups) > room:
        left = len(groups) - room
        out.append(more(f"+{left} more group{'s' if left != 1 else ''}"))
    return out


def group_text(head: str, lines: list[str], max_lines: int, max_chars: int) -> str:
    """A group's text: `head`, then its run lines cut to fit `max_chars` in all."""
    return head + "\n" + "\n".join(cut_lines(lines, max_lines, max_chars - len(head) - 1))
