"""When alerts fire, and how they group and cut into Slack/Lark messages."""

from __future__ import annotations

import base64
import hashlib
import hmac

from gatekeeper.notify.grouping import ChannelState, cut_lines, decide, group_alerts, reason_class
from gatekeeper.notify.lark import LarkNotifier, sign
from gatekeeper.notify.slack import MAX_BLOCKS, MAX_TEXT, SlackNotifier
from gatekeeper.verdict import Mode, RuleResult, Severity, Status

FIRING = frozenset({"fail", "error"})


def result(status: Status, message: str = "|x| = 0.3 > 1e-08 at train/step 0") -> RuleResult:
    return RuleResult(
        "miles",
        "kl-step0",
        status,
        Severity.FAIL,
        Mode.ENFORCE,
        "train/ppo_kl",
        message,
        "policies/miles.yaml:12",
    )


def alert(run: str, message: str = "|x| = 0.3 > 1e-08 at train/step 0", **kw: object) -> dict:
    base = {
        "state": "firing",
        "policy": "miles",
        "rule": "kl-step0",
        "status": "fail",
        "severity": "fail",
        "run": run,
        "run_key": f"/runs/{run}",
        "message": message,
        "reason_class": reason_class(message),
        "url": f"https://wandb.example/{run}",
    }
    return {**base, **kw}


def test_a_failing_rule_getting_worse_is_not_resolved_on_a_fail_only_channel() -> None:
    fail_only = frozenset({"fail"})
    due, st = decide(
        [(result(Status.FAIL), "fail")], {}, statuses=fail_only, repeat_interval=0, now=0
    )
    assert [s for _, s, _ in due] == ["firing"]
    due, st2 = decide(
        [(result(Status.ERROR), "error")], st, statuses=fail_only, repeat_interval=0, now=1
    )
    assert due == [] and st2 == {}  # FAIL -> ERROR got worse: still firing, nothing sent
    due, _ = decide(
        [(result(Status.WARN), "warn")], st, statuses=fail_only, repeat_interval=0, now=2
    )
    assert [s for _, s, _ in due] == ["resolved"]  # better than fail: resolved


def _episode(statuses: frozenset[str], walk: list[Status], repeat: float = 0) -> list[str]:
    """The alerts one channel sends as a rule's confirmed status walks `walk`, one poll a
    second, each poll's states carried into the next as the daemon does."""
    states: dict = {}
    sent: list[str] = []
    for now, status in enumerate(walk):
        due, updated = decide(
            [(result(status), status.value)], states, statuses=statuses,
            repeat_interval=repeat, now=float(now),
        )
        states.update(updated)
        sent += [f"{state}:{res.status.value}{'*' if again else ''}" for res, state, again in due]
    return sent


def test_an_episode_is_not_passing_whatever_the_failing_status() -> None:
    fail_only, error_only = frozenset({"fail"}), frozenset({"error"})
    flap = [Status.FAIL, Status.ERROR, Status.FAIL, Status.ERROR, Status.PASS, Status.FAIL]
    # FAIL <-> ERROR is one episode; only PASS closes it; the next FAIL is a new one
    assert _episode(fail_only, flap) == ["firing:fail", "resolved:pass", "firing:fail"]
    assert _episode(FIRING, flap) == ["firing:fail", "resolved:pass", "firing:fail"]
    assert _episode(error_only, flap) == ["firing:error", "resolved:pass"]
    # an episode that began as ERROR is announced on a fail-only channel at its first FAIL
    assert _episode(fail_only, [Status.ERROR, Status.FAIL, Status.ERROR]) == ["firing:fail"]


def test_skip_or_pending_inside_an_episode_neither_resolves_it_nor_pages_again() -> None:
    walk = [Status.FAIL, Status.SKIP, Status.FAIL, Status.PENDING, Status.ERROR, Status.PASS]
    assert _episode(frozenset({"fail"}), walk) == ["firing:fail", "resolved:pass"]


def test_an_open_episode_is_repeated_while_error_on_a_fail_only_channel() -> None:
    walk = [Status.FAIL, Status.ERROR, Status.ERROR, Status.ERROR, Status.PASS]
    assert _episode(frozenset({"fail"}), walk, repeat=2) == [
        "firing:fail", "firing:error*", "resolved:pass"
    ]


def test_a_warn_channel_keeps_firing_when_warn_turns_fail_and_resolves_on_pass() -> None:
    warn_only = frozenset({"warn"})
    _, st = decide(
        [(result(Status.WARN), "warn")], {}, statuses=warn_only, repeat_interval=0, now=0
    )
    due, _ = decide(
        [(result(Status.FAIL), "fail")], st, statuses=warn_only, repeat_interval=0, now=1
    )
    assert due == []
    due, _ = decide(
        [(result(Status.PASS), "pass")], st, statuses=warn_only, repeat_interval=0, now=2
    )
    assert [s for _, s, _ in due] == ["resolved"]


def test_one_alert_per_state_change_and_repeat_while_firing() -> None:
    fail = result(Status.FAIL)
    due, st = decide([(fail, "fail")], {}, statuses=FIRING, repeat_interval=60, now=0)
    assert [(s, r) for _, s, r in due] == [("firing", False)]
    states = {k: v for k, v in st.items()}
    due, _ = decide([(fail, "fail")], states, statuses=FIRING, repeat_interval=60, now=30)
    assert due == []  # still firing, not yet due again
    due, st2 = decide([(fail, "fail")], states, statuses=FIRING, repeat_interval=60, now=61)
    assert [(s, r) for _, s, r in due] == [("firing", True)]
    due, st3 = decide(
        [(result(Status.PASS), "pass")],
        {**states, **st2},
        statuses=FIRING,
        repeat_interval=60,
        now=70,
    )
    assert [s for _, s, _ in due] == ["resolved"]
    assert st3[("miles", "kl-step0")] == ChannelState(False, 70)


def test_pending_and_pass_never_fire() -> None:
    due, _ = decide(
        [(result(Status.PENDING), "pending"), (result(Status.PASS), "pass")],
        {},
        statuses=FIRING,
        repeat_interval=0,
        now=0,
    )
    assert due == []


def test_same_analysis_groups_one_line_per_run_but_empty_analysis_stays_alone() -> None:
    groups = group_alerts(
        [
            alert("a"),
            alert("b", "|x| = 0.7 > 1e-08 at train/step 0"),
            alert("c", "", reason_class=""),
            alert("d", "", reason_class=""),
            alert("e", "non-finite value NaN at train/step 4"),
        ]
    )
    assert [len(g.alerts) for g in groups] == [2, 1, 1, 1]
    assert [a["run"] for a in groups[0].alerts] == ["a", "b"]


def test_cut_after_grouping_says_how_many_more() -> None:
    lines = [f"run-{i}: failing" for i in range(100)]
    kept = cut_lines(lines, max_lines=10, max_chars=10_000)
    assert kept[:10] == lines[:10] and kept[10] == "+90 more runs"
    kept = cut_lines(lines, max_lines=1000, max_chars=200)
    assert sum(len(x) + 1 for x in kept) <= 201 and kept[-1].startswith("+")
    assert int(kept[-1].split()[0][1:]) == 100 - (len(kept) - 1)


def test_slack_message_stays_within_block_kit_limits() -> None:
    alerts = [alert(f"run-{i:04d}-" + "x" * 80, rule=f"rule-{i % 60}") for i in range(3000)]
    slack = SlackNotifier("s", "http://127.0.0.1:1/x", timeout=1, max_lines=1000)
    (body,) = slack.render(group_alerts(alerts))
    assert len(body["blocks"]) <= MAX_BLOCKS
    texts = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"]
    assert all(len(t) <= MAX_TEXT for t in texts)
    assert "more runs" in texts[0]
    assert body["blocks"][-1]["elements"][0]["text"].startswith("+")  # groups cut, counted
    assert "<https://wandb.example/run-0000-" in texts[0]  # one link per run


def test_lark_signature_is_hmac_of_empty_message_keyed_by_timestamp_and_secret() -> None:
    want = base64.b64encode(hmac.new(b"1700000000\ns3cret", b"", hashlib.sha256).digest()).decode()
    assert sign("1700000000", "s3cret") == want
    lark = LarkNotifier("l", "http://127.0.0.1:1/x", timeout=1, max_lines=5)
    (body,) = lark.render(group_alerts([alert("a"), alert("b")]))
    assert body["msg_type"] == "interactive"
    content = body["card"]["elements"][0]["text"]["content"]
    assert "[a](https://wandb.example/a)" in content and "[b](https://wandb.example/b)" in content
