"""A child process for tests/live/test_held_files.py: the held-file snapshot and polls of
`gatekeeper run`'s JSONL follower while this process is out of file descriptors (EMFILE:
a real, transient OS error that hits a busy process), then after they are back.

Usage: python held_probe.py start|poll|detect PATH -- prints one JSON object per step."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
from collections.abc import Iterator

from gatekeeper.errors import SourceError
from gatekeeper.live.detect import DetectingSource
from gatekeeper.sources.jsonl.live import LiveJsonlSource, held_files


@contextlib.contextmanager
def no_descriptors() -> Iterator[None]:
    """Every descriptor taken until the block ends: any open() in it fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    fillers = []
    try:
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def say(step: str, **what: object) -> None:
    print(json.dumps({"step": step, **what}), flush=True)


def start(path: str) -> None:
    with no_descriptors():
        try:
            held = held_files(path)
        except SourceError as exc:
            say("start", error=str(exc))
            return
    say("start", held=sorted(os.path.basename(p) for p in held))


def polls(path: str) -> None:
    source = LiveJsonlSource(path, held=held_files(path))
    with no_descriptors():
        try:
            source.poll()
            say("exhausted")
        except SourceError as exc:
            say("exhausted", error=str(exc))
    say("after", points=source.poll().points)
    with open(path, "a") as fh:  # the command resumes the run: appends a step
        fh.write(json.dumps({"step": 10, "train/loss": 1.0}) + "\n")
    say("appended", points=source.poll().points)


def detect(path: str) -> None:
    """`watch`'s source opened: the wandb and TensorBoard runs there before it (`run`
    lists the JSONL files too, after them)."""
    with no_descriptors():
        try:
            source = DetectingSource(path, print)
        except SourceError as exc:
            say("detect", error=str(exc))
            return
    say("detect", wandb=len(source.runs_before), tensorboard=len(source.tb_before))


if __name__ == "__main__":
    {"start": start, "poll": polls, "detect": detect}[sys.argv[1]](sys.argv[2])
