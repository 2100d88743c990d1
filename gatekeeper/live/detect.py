"""Which source a live watch follows: decided when data appears, and said out loud.

`gatekeeper run --source out/ -- CMD` may name a folder that does not exist yet, or one
that will hold `wandb/`, or a reused wandb folder full of finished runs. So the kind is
not fixed when the watch opens: each poll looks again until data appears — a run
directory started after the watch began (wandb) or `*.jsonl` records — then follows that
one source and prints which kind and path it follows.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

from gatekeeper.errors import SourceError, one_line
from gatekeeper.model import Run
from gatekeeper.sources import family_of, named, open_live_source
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.sources.jsonl import LiveJsonlSource
from gatekeeper.sources.jsonl.live import held_files
from gatekeeper.sources.mlflow.scheme import names_file_store
from gatekeeper.sources.tensorboard.logdir import (
    event_files,
    is_event_file,
    is_run_dir,
    new_run,
    runs_in,
)
from gatekeeper.sources.tensorboard.scheme import SCHEMES as TB_SCHEMES
from gatekeeper.sources.wandb.local import (
    WandbLocalSource,
    names_one_run,
    new_run_dir,
    run_dirs,
    wandb_folders,
)

_CURSOR_VERSION = 1  # later keys (TensorBoard's) are optional: older cursors still read


def open_follow_source(
    spec: str, say: Callable[[str], None], *, for_command: bool = False
) -> LiveSource:
    """The live source for `watch`/`run`: remote specs as they are, local paths detected.
    An MLflow store without a run id (or an `mlruns/` folder) follows the run created
    after the watch began, and says which once it appears. `for_command` (`run`):
    `wandb/latest-run` means the run CMD is about to start, never the one the link
    points to now (an earlier run)."""
    path = named(spec).removeprefix("file://")
    if "://" not in spec and names_file_store(path):
        spec = f"mlflow+file://{os.path.abspath(path)}"  # an `mlruns/` folder
    if spec.startswith(TB_SCHEMES):  # a run, or a log dir whose new run is followed
        return DetectingSource(spec.split("://", 1)[1], say, only_tensorboard=True)
    if "://" in spec and not spec.startswith("file://"):
        source = open_live_source(spec)
        from gatekeeper.sources.mlflow.follow import NewRunSource

        if isinstance(source, NewRunSource):
            source.say = say  # it says which run once one appears
            return source
        family = family_of(spec)
        name = family.name if family is not None else type(source).__name__
        say(f"gatekeeper: following {name} {getattr(source, 'shown', spec)}")
        return source
    if for_command and os.path.basename(os.path.normpath(path)) == "latest-run":
        spec = os.path.dirname(os.path.normpath(path))
    return DetectingSource(spec, say, for_command=for_command)


class DetectingSource(LiveSource):
    """A local path whose kind (wandb run, TensorBoard run or JSONL records) is settled by
    the first data. `only_tensorboard`: a `tensorboard://` SOURCE, no other kind."""

    kind = "local run (wandb, TensorBoard or JSONL, detected when data appears)"

    def __init__(
        self,
        spec: str,
        say: Callable[[str], None],
        *,
        only_tensorboard: bool = False,
        for_command: bool = False,
    ):
        super().__init__(spec)
        self.path = spec.removeprefix("file://")
        self.say = say
        self.only_tensorboard = only_tensorboard
        # the runs already in a wandb folder or a TensorBoard log dir: a watch follows only
        # a run started after it
        try:  # what cannot be listed is an error: taken for empty, an earlier run is new
            self.runs_before = frozenset(run_dirs(self.path, strict=True))
            self.tb_before = frozenset(runs_in(self.path, strict=True))
        except OSError as exc:
            raise SourceError(
                f"{one_line(exc.filename or self.path)}: cannot read: {exc.strerror or exc}; "
                "the runs there before the watch began must be listed to be told apart "
                "from the new one (fix it or move it away)"
            ) from None
        self.tb_run: str | None = None  # the TensorBoard run followed, once one is
        self.tb_files_before = len(event_files(self.path)) + is_event_file(self.path)
        # `run`: JSONL records already there are an earlier run until CMD changes them
        self.jsonl_before = held_files(self.path) if for_command and not only_tensorboard else {}
        self.inner: LiveSource | None = None
        self._announced = False  # the waiting note was printed
        self._following = False  # the followed run was printed

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return "://" not in spec or spec.startswith("file://")

    def poll(self) -> Poll:
        inner = self.inner or self._detect()
        if inner is None:
            self._waiting()
            return Poll(series={}, run=Run(name=self.path, source=self.path), ended=False)
        poll = inner.poll()
        self._announce(inner, poll.run)
        return poll

    def rewind(self) -> bool:
        return self.inner is None or self.inner.rewind()  # nothing detected: nothing read

    def read(self) -> Run:
        spec = f"tensorboard://{self.path}" if self.only_tensorboard else self.spec
        return (self.inner or open_live_source(spec)).read()

    def cursor(self) -> dict[str, Any]:
        inner = self.inner
        kind = "wandb" if isinstance(inner, WandbLocalSource) else "jsonl" if inner else None
        if self.tb_run is not None:
            kind = "tensorboard"
        return {
            "version": _CURSOR_VERSION,
            "kind": kind,
            "inner": inner.cursor() if inner else None,
            "runs_before": sorted(self.runs_before),
            "tb_before": sorted(self.tb_before),
            "tb_run": self.tb_run,
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        self.runs_before = frozenset(cursor.get("runs_before", ()))
        self.tb_before = frozenset(cursor.get("tb_before", ()))
        kind = cursor.get("kind")
        if kind == "tensorboard":
            self._follow_tensorboard(str(cursor["tb_run"]))
        elif kind == "wandb":
            self.inner = WandbLocalSource(self.spec, runs_before=self.runs_before)
        elif kind == "jsonl":
            self.inner = LiveJsonlSource(self.spec)
        if self.inner is not None and cursor.get("inner") is not None:
            self.inner.restore(cursor["inner"])

    def read_summary(self, wanted: set[str]) -> dict[str, float]:
        read = getattr(self.inner, "read_summary", None)
        return read(wanted) if read is not None else {}

    # -- internals ----------------------------------------------------------------------

    def _detect(self) -> LiveSource | None:
        path = self.path
        if self.only_tensorboard:
            self._detect_tensorboard()
        elif path.endswith(".wandb") or names_one_run(path) and os.path.isdir(path):
            self.inner = WandbLocalSource(self.spec)
        elif is_event_file(path) or is_run_dir(path):
            self._follow_tensorboard(path)
        elif os.path.isfile(path):
            self.inner = LiveJsonlSource(self.spec, held=self.jsonl_before)
        elif new_run_dir(path, self.runs_before) is not None:
            self.inner = WandbLocalSource(self.spec, runs_before=self.runs_before)
        elif self._is_wandb_folder():
            return None  # a wandb folder without a new run yet: never read as JSONL
        elif glob.glob(os.path.join(path, "*.jsonl")):
            self.inner = LiveJsonlSource(self.spec, held=self.jsonl_before)
        else:
            self._detect_tensorboard()
        return self.inner

    def _detect_tensorboard(self) -> None:
        """The run itself (event files of its own), else a run created below it after the
        watch began."""
        if is_event_file(self.path) or is_run_dir(self.path):
            self._follow_tensorboard(self.path)
        elif (fresh := new_run(self.path, self.tb_before)) is not None:
            self._follow_tensorboard(os.path.join(self.path, fresh))

    def _follow_tensorboard(self, run: str) -> None:
        from gatekeeper.sources.tensorboard.source import TensorBoardSource

        self.tb_run = run
        self.inner = TensorBoardSource(run)

    def _is_wandb_folder(self) -> bool:
        base = os.path.basename(os.path.normpath(self.path))
        return base == "wandb" or any(
            os.path.isdir(f) and os.path.basename(f) == "wandb" for f in wandb_folders(self.path)
        )

    def _waiting(self) -> None:
        """Say once why runs already in the folder are not followed, and how to attach."""
        if self._announced or not (self.runs_before or self.tb_before):
            return
        self._announced = True
        if self.tb_before:
            earlier = sorted(self.tb_before)
            self.say(
                f"gatekeeper: waiting for a new TensorBoard run in {self.path} ({len(earlier)} "
                f"earlier run(s) there are not followed: {', '.join(earlier[:8])}; to follow "
                f"one already running, pass its directory, e.g. "
                f"{os.path.join(self.path, earlier[-1])})"
            )
            return
        latest = os.path.join(self.path, "latest-run")
        if not os.path.exists(latest):
            latest = os.path.join(self.path, "wandb", "latest-run")
        self.say(
            f"gatekeeper: waiting for a new wandb run in {self.path} ({len(self.runs_before)} "
            f"earlier run(s) there are not followed; to follow one already running, pass "
            f"its directory, e.g. {latest})"
        )

    def _announce(self, inner: LiveSource, run: Run) -> None:
        if self._following:
            return
        if isinstance(inner, WandbLocalSource):
            if inner.log_path is None:
                return  # the run directory is there, its .wandb log not yet
            started = "started after the watch began" if inner.runs_before is not None else (
                "named on the command line"
            )
            earlier = inner.segments - 1
            resumed = f"; resumed, its {earlier} earlier segment(s) read first" if earlier else ""
            self.say(
                f"gatekeeper: following wandb run {run.run_id or run.name} ({started}"
                f"{resumed}): {inner.log_path}"
            )
        elif self.tb_run is not None:
            self._announce_tensorboard(self.tb_run)
        elif isinstance(inner, LiveJsonlSource):
            if not self._announce_jsonl(inner):
                return
        self._following = True

    def _announce_jsonl(self, inner: LiveJsonlSource) -> bool:
        """Say which records are followed once some are read; False while none are (the
        files there hold an earlier run the command has not changed yet)."""
        if not inner.tails:
            if inner.held and not self._announced:
                self._announced = True
                self.say(
                    f"gatekeeper: waiting for the command to write {self.path} (its "
                    f"{len(inner.held)} record file(s) there hold an earlier run, not judged "
                    "unless the command changes them)"
                )
            return False
        how = {
            "rewritten": "rewritten by the command after the watch began: its new content "
            "is the run, read from the start",
            "appended": "appended to by the command after the watch began (a resume): the "
            "whole file is the run, its earlier lines read too, as check reads it",
        }
        notes = [f"{os.path.basename(p)} {how[c]}" for p, c in sorted(inner.changed.items())]
        extra = f" ({'; '.join(notes)})" if notes else ""
        self.say(f"gatekeeper: following JSONL records in {self.path}{extra}")
        return True

    def _announce_tensorboard(self, run: str) -> None:
        if run != self.path:
            self.say(
                f"gatekeeper: following TensorBoard run {os.path.relpath(run, self.path)} "
                f"(created in {self.path} after the watch began): {run}"
            )
            return
        before = self.tb_files_before
        self.say(
            f"gatekeeper: following TensorBoard run {run} (named on the command line; its "
            f"{before} event file(s) written before the watch began are read too, as "
            "TensorBoard reads one run)" if before else
            f"gatekeeper: following TensorBoard run {run} (created after the watch began)"
        )
