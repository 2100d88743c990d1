"""Where TensorBoard runs are: event files, run directories, and log dirs of runs.

TensorBoard's own model: a run is a directory holding event files (one per process or
restart, read together); a log dir is a tree of such directories, each one a run, named by
its path below the log dir (`version_0`, `version_1`). A leaf module (no protobuf): the
detection pass, `check`'s "which run?" answer and the live watch all ask it.
"""

from __future__ import annotations

import glob
import os

FILE_MARK = "events.out.tfevents."
# How deep a log dir's runs are looked for: Lightning's `logs/NAME/version_N` and the
# hparams subdirectory transformers writes into a run sit within it; a deeper search of a
# large tree (a home directory passed by mistake) would cost a detection pass seconds.
MAX_DEPTH = 4
# Trees that hold event files of another family's run (wandb's `sync_tensorboard` copies)
# or nothing of ours: never searched for runs.
_SKIPPED = ("wandb", "mlruns", "node_modules", "__pycache__")


def is_event_file(path: str) -> bool:
    return os.path.basename(path).startswith(FILE_MARK)


def event_files(directory: str) -> list[str]:
    """The event files directly in `directory` in name order, TensorBoard's reading order
    (`directory_watcher` sorts the paths): the writer's 10-digit timestamp comes first in
    the name, so a restart's file follows the first run's."""
    found = [p for p in glob.glob(os.path.join(glob.escape(directory), FILE_MARK + "*"))
             if os.path.isfile(p)]
    return sorted(found)


def is_run_dir(path: str) -> bool:
    return os.path.isdir(path) and bool(event_files(path))


def runs_in(logdir: str, *, strict: bool = False) -> list[str]:
    """The run directories below `logdir` (not `logdir` itself), as paths relative to it in
    name order: TensorBoard's runs of that log dir. `strict`: a directory of the tree that
    cannot be listed raises its OSError (absent: none), where a run missed would be
    taken for a new one later (the runs there before a watch began)."""
    found: list[str] = []
    top = os.path.normpath(logdir)
    depth0 = top.count(os.sep)
    for directory, subdirs, _ in os.walk(top, onerror=_raise_unlisted if strict else None):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in _SKIPPED)
        if directory.count(os.sep) - depth0 >= MAX_DEPTH:
            subdirs[:] = []
        if directory != top and event_files(directory):
            found.append(os.path.relpath(directory, top))
    return sorted(found)


def _raise_unlisted(exc: OSError) -> None:
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        raise exc


def is_log_dir_of_runs(path: str) -> bool:
    """A directory with no event files or records of its own (`*.jsonl`, a wandb run's
    `*.wandb`, a wandb folder's `latest-run`), runs below it."""
    if not os.path.isdir(path) or event_files(path) or holds_wandb(path):
        return False
    return not glob.glob(os.path.join(glob.escape(path), "*.jsonl")) and bool(runs_in(path))


def holds_wandb(path: str) -> bool:
    """A wandb folder or run: its `sync_tensorboard` copies of event files are wandb's."""
    base = os.path.basename(os.path.normpath(os.path.abspath(path)))
    return (
        base == "wandb"
        or os.path.exists(os.path.join(path, "latest-run"))
        or bool(glob.glob(os.path.join(glob.escape(path), "*.wandb")))
    )


def new_run(logdir: str, before: frozenset[str]) -> str | None:
    """The run below `logdir` (relative to it) that was not there `before` (when a watch
    began): the newest by modification time among those not inside another new one (the
    hparams subdirectory transformers writes into its run is part of that run, not a new
    one). None until one appears; never one in a wandb tree."""
    if not os.path.isdir(logdir) or holds_wandb(logdir):
        return None
    fresh = [r for r in runs_in(logdir) if r not in before]
    tops = [r for r in fresh if not any(r.startswith(other + os.sep) for other in fresh)]
    newest = sorted(tops, key=lambda r: (os.path.getmtime(os.path.join(logdir, r)), r))
    return newest[-1] if newest else None
