"""Daemon discovery of TensorBoard runs: every directory holding event files under a glob."""

from __future__ import annotations

import glob
import os

from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.sources.tensorboard.logdir import is_run_dir, runs_in


class TensorBoardFilter(BaseModel):
    """`tensorboard: {logdir: "logs/*"}`: each match that holds event files is a run, and
    so is each directory below a match that does (a log dir of runs, TensorBoard's way)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    logdir: str = Field(min_length=1, pattern=r"\S")  # "" globbed nothing, silently

    def runs(self) -> list[str]:
        found: set[str] = set()
        for match in glob.glob(self.logdir):
            if not os.path.isdir(match):
                continue
            runs = [os.path.join(match, r) for r in runs_in(match)]
            for directory in [match, *runs] if is_run_dir(match) else runs:
                found.add(f"tensorboard://{os.path.normpath(directory)}")
        return sorted(found)

    def describe(self) -> str:
        return f"TensorBoard runs under {self.logdir}"
