"""The poll loop's last poll under `run`: once CMD has exited, the final verdict is judged
only on a poll that read what CMD last wrote (a real trainer child, a real JSONL source)."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from gatekeeper.errors import SourceError
from gatekeeper.live.gate import LiveGate
from gatekeeper.live.loop import Follower, LoopSettings
from gatekeeper.live.process import ChildGroup
from gatekeeper.live.progress import Printer
from gatekeeper.policy.loader import load_policies
from gatekeeper.sources.base import Poll
from gatekeeper.sources.jsonl.live import LiveJsonlSource
from tests.helpers import write_policy

WRITER = str(Path(__file__).with_name("writer.py"))


class UnreadableOnceAfterExit(LiveJsonlSource):
    """The JSONL source, its file briefly unreadable just after CMD exits (the first
    poll then fails, as an open() failing with EIO or ESTALE would)."""

    def __init__(self, path: str, child: ChildGroup):
        super().__init__(path)
        self.child, self.failed = child, False

    def poll(self) -> Poll:
        if self.child.exited() and not self.failed:
            self.failed = True
            raise SourceError(f"{self.path}: cannot read: Stale file handle")
        return super().poll()


def test_a_failed_poll_after_the_command_exits_is_retried_before_the_final_verdict(
    tmp_path: Path,
) -> None:
    """CMD logs two good points, then a bad one, and exits. The loop read the good ones;
    its first poll after the exit fails. The bad point must still decide the verdict (the
    loop judged the final verdict without it: a pass, exit 0)."""
    record = tmp_path / "m.jsonl"
    policy = write_policy(tmp_path / "p.yaml", """
        version: 1
        name: live
        rules:
          - {id: kl-zero, metric: train/ppo_kl, check: {abs_max: 1.0e-6}}
    """)
    child = ChildGroup([sys.executable, WRITER, str(record), "--steps", "3", "--delay", "1.0",
                        "--bad-at", "2"])
    deadline = time.monotonic() + 60
    while not (record.exists() and record.read_bytes().count(b"\n") >= 2):  # steps 0 and 1
        assert time.monotonic() < deadline, "the writer wrote nothing"
        time.sleep(0.01)
    source = UnreadableOnceAfterExit(str(record), child)
    gate = LiveGate(source, load_policies([str(policy)]), started=time.time())
    printer = Printer(io.StringIO(), quiet=True)
    # the wait between polls outlasts the writer: its next poll comes after CMD's exit
    outcome = Follower(gate, LoopSettings(interval=3.0), printer, child).run()
    assert source.failed
    assert (outcome.reason, outcome.exit_code) == ("exited", 1)
    result = outcome.verdict.results[0]
    assert result.status.value == "fail" and result.step == 2, result.message


def test_a_signal_before_the_command_has_started_is_forwarded_once_it_has() -> None:
    """`run` enters the forwarding before CMD starts: a SIGINT that reaches gatekeeper
    between the two is kept and sent to CMD's group at `attach`. Before, it was
    gatekeeper's own KeyboardInterrupt (CMD stopped, no report written); CI's load made
    that window long enough once (the SIGINT test of test_run.py)."""
    import os
    import signal

    from gatekeeper.live.process import Forwarding

    seen: list[int] = []
    with Forwarding(on_forward=seen.append) as forwarding:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: kept for the group
        child = forwarding.attach(ChildGroup([sys.executable, "-c", "import time; "
                                               "time.sleep(30)"]))
        assert child.wait(20), "the command never got the SIGINT"
    assert seen == [signal.SIGINT] and child.forwarded == [signal.SIGINT]
    assert child.exit_code() == 128 + signal.SIGINT
