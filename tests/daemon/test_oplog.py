"""What an operator sees of the daemon (issue 29): one log line per alert raised (firing,
resolved) and per delivery outcome (sent at INFO; failed, expired at WARNING), naming
run, rule and channel and never a webhook URL; a line when it stops; and chat texts with
real values, never the grouping key's masked numbers (`|x| = # > # at step #`). The real
daemon runs as a child process against local receivers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.daemon.harness import DaemonProcess, free_port, write_config
from tests.daemon.recorder import Recorder

# kl-small fires and stays open; share fires at 1 high point in 3 (over 30 %) and
# resolves when two more low points bring the share to 20 %
RULES = """\
version: 1
name: kl
rules:
  - id: kl-small
    metric: train/ppo_kl
    check: {abs_max: 0.1}
  - id: share
    metric: train/ppo_kl
    check: {fraction: {above: 0.1, max: 0.3, live: true}}
"""


def append(path: Path, *rows: tuple[int, float]) -> None:
    with path.open("a") as fh:
        for step, kl in rows:
            fh.write(json.dumps({"train/step": step, "train/ppo_kl": kl, "train/loss": 1.0}) + "\n")


def test_alerts_and_shutdown_are_logged_and_chat_texts_hold_real_values(tmp_path: Path) -> None:
    slack = Recorder()
    refuse = Recorder(script=lambda n: (400, {}, b"no such hook"))
    down = f"http://127.0.0.1:{free_port()}/down-hook-path"  # nobody listens
    config = write_config(tmp_path, [
        {"name": "team", "kind": "slack", "url_env": "T_SLACK", "group_wait": 0.2},
        {"name": "refuse", "kind": "webhook", "url_env": "T_REFUSE", "group_wait": 0.2},
        {"name": "down", "kind": "webhook", "url_env": "T_DOWN", "group_wait": 0.2,
         "retry_for": 1, "retry_backoff": 0.2},
    ])
    (tmp_path / "kl.yaml").write_text(RULES)
    env = {"T_SLACK": slack.url, "T_REFUSE": refuse.url, "T_DOWN": down}
    daemon = DaemonProcess(config, env).start()
    run = tmp_path / "runs" / "r1.jsonl"
    try:
        append(run, (0, 0.001), (1, 0.001), (2, 0.5))
        assert daemon.wait(lambda: "alert firing sent: run r1, rule kl/share" in daemon.log
                           .read_text()), daemon.tail()
        append(run, (3, 0.001), (4, 0.001))
        assert daemon.wait(lambda: "alert resolved sent" in daemon.log.read_text()), daemon.tail()
        assert daemon.wait(lambda: "expired" in daemon.log.read_text()), daemon.tail()
    finally:
        assert daemon.stop() == 0
        slack.close(), refuse.close()
    log = daemon.log.read_text()

    def line(level: str, text: str) -> str:
        hits = [x for x in log.splitlines() if f" {level} " in x and text in x]
        assert hits, f"no {level} line with {text!r} in:\n{log}"
        return hits[0]

    who = "run r1, rule kl/kl-small, channel"
    line("INFO", f"alert firing: {who} team")
    line("INFO", f"alert firing sent: {who} team")
    line("INFO", "alert resolved: run r1, rule kl/share, channel team")
    line("INFO", "alert resolved sent: run r1, rule kl/share, channel team")
    assert "400" in line("WARNING", f"alert firing failed: {who} refuse")
    line("WARNING", f"alert firing expired: {who} down")
    line("INFO", "stopping: polls end")
    assert re.search(r" INFO gatekeeper\.daemon: stopped", log), log
    for secret in (slack.url, refuse.url, down, "/down-hook-path"):
        assert secret not in log, secret

    texts = [b["text"] for body in slack.bodies for b in body["blocks"]
             if b["type"] == "section" for b in [b["text"]]]
    kl = next(t for t in texts if "FAIL: kl/kl-small on 1 run" in t)
    assert "0.5" in kl, kl  # the value itself, where the grouping key had `#`
    assert any("resolved: kl/share on 1 run" in t for t in texts), texts
    for text in texts:  # no masked number, no grouping-key line in _italics_
        assert not re.search(r"(?<![\w&<])#(?![\w])", text), text
        assert "\n_" not in text, text
