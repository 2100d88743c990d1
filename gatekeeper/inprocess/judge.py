"""The judge process of an asynchronous `Gate` (started by `remote.py`; by hand:
`python -m gatekeeper.inprocess.judge`, requests on standard input).

It judges off the training process, so judging never holds the trainer's GIL: the
training thread only hands values over (`handoff.py`) and writes them down a pipe. It
reads requests from standard input and answers on a private copy of standard output
(`wire.py`); its own standard output goes to standard error, so nothing it prints can
break an answer. Started and ended by `RemoteJudge` (`remote.py`): it ends
on `final` or when its input closes (the trainer ended, even by kill -9), and ignores
SIGINT, so a Ctrl-C of the trainer still gets the final verdict written.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, BinaryIO

from gatekeeper.inprocess.local import LocalJudge
from gatekeeper.inprocess.wire import (
    MAX_LINE,
    SAME,
    decode,
    encode,
    error_to_dict,
    judged_to_dict,
)
from gatekeeper.model import Run, RunState


def start(request: dict[str, Any]) -> LocalJudge:
    from gatekeeper.gate import resolve_policies

    run = request["run"]
    specs = resolve_policies(request["policies"], request["overrides"])
    return LocalJudge(
        Run(name=run["name"], source=run["source"], tags=tuple(run["tags"]),
            config=dict(run["config"]), state=RunState.RUNNING),
        specs, request["axis"], float(request["started"]),
    )


def answer(judge: LocalJudge, request: dict[str, Any]) -> dict[str, Any]:
    """The reply's `ok` part. Rows whose request says `"failing": false` (the trainer's
    gate has failed already) get `SAME` for failing rules: a failed gate under
    on_fail="report" would otherwise be sent, and decode, every failing rule (their
    messages count the violating points, so they change) on every step."""
    op = request.get("op")
    if op == "rows":
        judged = judged_to_dict(judge.observe_rows(request["rows"], float(request["now"])))
        if judged["failing"] and not request.get("failing", True):
            judged["failing"] = SAME
        return judged
    if op == "update":
        judge.update_run(request.get("name"), request.get("tags"), request.get("config"))
        return {}
    if op == "verdict":
        return judge.verdict().to_dict()
    if op == "final":
        return judge.final(RunState(request["state"]), float(request["now"])).to_dict()
    raise ValueError(f"unknown request {op!r}")


def serve(requests: BinaryIO, answers: BinaryIO) -> int:
    judge: LocalJudge | None = None
    while True:
        line = requests.readline(MAX_LINE)
        if not line:
            return 0  # the trainer closed the pipe (or ended)
        request: dict[str, Any] = {}
        try:
            request = decode(line)
            if judge is None:
                judge = start(request)
                reply: dict[str, Any] = {"ok": {}}
            else:
                reply = {"ok": answer(judge, request)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the trainer
            reply = {"error": error_to_dict(exc)}
        answers.write(encode(reply))
        answers.flush()
        if judge is not None and request.get("op") == "final" and "ok" in reply:
            return 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what anything prints goes to standard error, never into an answer
    sys.stdout = sys.stderr
    return serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    raise SystemExit(main())
