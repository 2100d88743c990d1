"""A local MLflow file store (`mlruns/`) read through mlflow's own `FileStore`, under the
rules every gatekeeper input follows: regular files only, bounded reads, and damage is an
error naming the file (and the line of a metric file), never a traceback or a hang.

mlflow opens each file with a plain `open()` and reads it whole: a FIFO blocks it forever,
a link to /dev/zero reads until memory runs out, and what it cannot parse raises whatever
Python raised (`ValueError` for a step `1.5`, `UnicodeDecodeError`, a YAML error, a bare
`Exception` for `status: -1`). So `GuardedFileStore` checks every file mlflow is about to
read for a run (meta.yaml, metrics/, params/, tags/, inputs/, outputs/ — not artifacts/)
before it reads any, and turns a failure of mlflow's reader into a `RecordError` naming
the file. The parsing stays mlflow's: a metric file's bad line is found by running
mlflow's own line parser over the lines, on the error path only.

Written against mlflow 3.x's FileStore (hooks: `_get_run_info`, `_get_run_info_from_dir`,
`_get_metric_from_file`, `get_metric_history`, `_get_param_from_file`, `_get_tag_from_file`,
`_get_all_inputs`, `_get_all_outputs`, `_get_experiment`); `HOOKS` lists them and the
client refuses a FileStore lacking one, rather than read unguarded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from mlflow.exceptions import MlflowException
from mlflow.store.tracking.file_store import FileStore
from mlflow.utils.file_utils import local_file_uri_to_path

from gatekeeper.errors import GatekeeperError, RecordError, SourceError, SourceNotFound, quote
from gatekeeper.safe_open import check_regular, open_regular
from gatekeeper.sources.base import env_number

T = TypeVar("T")
INT64 = (-(2**63), 2**63 - 1)
MAX_OTHER_BYTES = 16 << 20  # meta.yaml, a param, a tag: mlflow caps values at kilobytes
READ_DIRS = ("metrics", "params", "tags", "inputs", "outputs")
HOOKS = (
    "_get_run_info", "_get_run_info_from_dir", "_get_metric_from_file", "get_metric_history",
    "_get_param_from_file", "_get_tag_from_file", "_get_all_inputs", "_get_all_outputs",
    "_get_experiment",
)
_FIX = "repair the file or remove it"


def max_metric_bytes() -> int:
    """The largest metric file read (`GATEKEEPER_MLFLOW_MAX_FILE_BYTES`, 256 MiB): mlflow
    reads a metric file whole into Python objects, ~10 M points in 256 MiB."""
    return int(env_number("GATEKEEPER_MLFLOW_MAX_FILE_BYTES", 256 << 20, 1024, 1 << 40))


def _damaged(path: str, exc: BaseException, line: int | None = None) -> NoReturn:
    text = f"no key {exc}" if isinstance(exc, KeyError) else (str(exc) or type(exc).__name__)
    what = quote(text, 160)
    raise RecordError(f"mlflow cannot read this file: {what}; {_FIX}", file=path, line=line)


def _passes(exc: BaseException) -> bool:
    """Raised as it is, not as the file's damage: a gatekeeper error (a file checked or
    read further in) or mlflow's own "not found"."""
    return isinstance(exc, GatekeeperError) or (
        isinstance(exc, MlflowException) and "RESOURCE_DOES_NOT_EXIST" in str(exc.error_code)
    )


def _read(path: str, fn: Callable[[], T]) -> T:
    """mlflow's read of `path`; what it raises is the file's damage, with its name."""
    try:
        return fn()
    except Exception as exc:  # ValueError, UnicodeError, YAMLError, a bare Exception...
        if _passes(exc):
            raise
        _damaged(path, exc)


def check_files(run_dir: str) -> None:
    """Every file mlflow reads for the run in `run_dir`: regular, and not too large. The walk
    is mlflow's (os.walk, links to directories listed but not entered)."""
    def refuse(path: str) -> Callable[[str], Exception]:
        return lambda why: RecordError(f"{why}; {_FIX}", file=path)

    meta = os.path.join(run_dir, "meta.yaml")
    if os.path.lexists(meta):
        check_regular(meta, MAX_OTHER_BYTES, refuse(meta))
    for sub in READ_DIRS:
        cap = max_metric_bytes() if sub == "metrics" else MAX_OTHER_BYTES
        for root, _dirs, files in os.walk(os.path.join(run_dir, sub)):
            for name in files:
                path = os.path.join(root, name)
                check_regular(path, cap, refuse(path))


def locate(path: str, run_id: str, key: str, exc: BaseException | None) -> NoReturn:
    """The first line of metric file `path` that mlflow's line parser refuses, or whose step
    or timestamp is outside int64 (gatekeeper's step type), as an error naming that line."""
    with open_regular(path) as fh:  # checked by `check_files`, so bounded
        raw = fh.read(max_metric_bytes() + 1)
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise RecordError(f"metric {quote(key)} holds no points; {_FIX}", file=path)
    for number, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise RecordError(
                f"not UTF-8 at byte {bad.start} of the line; {_FIX}", file=path, line=number
            ) from None
        try:
            metric = FileStore._get_metric_from_line(run_id, key, text, "")
        except Exception as bad:
            raise RecordError(
                f"{quote(text)} is not `TIMESTAMP VALUE STEP` as mlflow writes it "
                f"({quote(str(bad), 100)}); {_FIX}", file=path, line=number,
            ) from None
        for name, field in (("step", metric.step), ("timestamp", metric.timestamp)):
            if not INT64[0] <= field <= INT64[1]:
                raise RecordError(
                    f"{name} {quote(field)} is outside int64; {_FIX}", file=path, line=number
                )
    _damaged(path, exc or ValueError("unreadable"))


def _in_int64(metrics: Any) -> bool:
    return all(
        INT64[0] <= m.step <= INT64[1] and INT64[0] <= m.timestamp <= INT64[1] for m in metrics
    )


class GuardedFileStore(FileStore):
    """mlflow's FileStore, each file checked before mlflow reads it and named when it fails."""

    def _get_run_info(self, run_uuid: str) -> Any:
        try:
            return super()._get_run_info(run_uuid)
        except MlflowException as exc:
            # meta.yaml names another run or experiment than the folders it lies in
            if "INVALID_STATE" not in str(exc.error_code):
                raise
            _exp, run_dir = self._find_run_root(run_uuid)
            _damaged(os.path.join(run_dir or self.root_directory, "meta.yaml"), exc)

    def _get_run_info_from_dir(self, run_dir: str) -> Any:
        check_files(run_dir)
        meta = os.path.join(run_dir, "meta.yaml")
        try:
            info = super()._get_run_info_from_dir(run_dir)
        except MlflowException:
            raise  # a folder that is no run (no meta.yaml): mlflow's search skips it
        except Exception as exc:
            _damaged(meta, exc)
        # mlflow keeps meta.yaml's values as YAML typed them (`start_time: 17x96` a
        # string) and fails only when the run is sent on: converted here, as the client
        # will, so a wrong type is this file's damage, not a TypeError further in
        _read(meta, info.to_proto)
        return info

    @staticmethod
    def _get_metric_from_file(parent_path: str, metric_name: str, run_id: str,
                              exp_id: str) -> Any:
        path = os.path.join(parent_path, metric_name)
        try:
            metric = FileStore._get_metric_from_file(parent_path, metric_name, run_id, exp_id)
        except Exception as exc:
            locate(path, run_id, metric_name, exc)
        if not _in_int64([metric]):
            locate(path, run_id, metric_name, None)
        return metric

    def get_metric_history(self, run_id: str, metric_key: str, max_results: int | None = None,
                           page_token: str | None = None) -> Any:
        try:
            page = super().get_metric_history(run_id, metric_key, max_results, page_token)
        except Exception as exc:
            if _passes(exc):
                raise
            locate(self._metric_path(run_id, metric_key), run_id, metric_key, exc)
        if not _in_int64(page):
            locate(self._metric_path(run_id, metric_key), run_id, metric_key, None)
        return page

    def _metric_path(self, run_id: str, key: str) -> str:
        info = self._get_run_info(run_id)
        return os.path.join(self._get_run_dir(info.experiment_id, run_id), "metrics", key)

    @staticmethod
    def _get_param_from_file(parent_path: str, param_name: str) -> Any:
        return _read(
            os.path.join(parent_path, param_name),
            lambda: FileStore._get_param_from_file(parent_path, param_name),
        )

    @staticmethod
    def _get_tag_from_file(parent_path: str, tag_name: str) -> Any:
        return _read(
            os.path.join(parent_path, tag_name),
            lambda: FileStore._get_tag_from_file(parent_path, tag_name),
        )

    def _get_all_inputs(self, run_info: Any) -> Any:
        run_dir = self._get_run_dir(run_info.experiment_id, run_info.run_id)
        return _read(
            os.path.join(run_dir, "inputs"),
            lambda: super(GuardedFileStore, self)._get_all_inputs(run_info),
        )

    def _get_all_outputs(self, run_info: Any) -> Any:
        run_dir = self._get_run_dir(run_info.experiment_id, run_info.run_id)
        return _read(
            os.path.join(run_dir, "outputs"),
            lambda: super(GuardedFileStore, self)._get_all_outputs(run_info),
        )

    def _get_experiment(self, experiment_id: str, view_type: Any = None) -> Any:
        args = (experiment_id,) if view_type is None else (experiment_id, view_type)
        exp_dir = self._get_experiment_path(experiment_id, *args[1:])
        if exp_dir is not None:
            check_files(exp_dir)  # its meta.yaml and tags/ (runs are checked when read)
        meta = os.path.join(exp_dir or self.root_directory, "meta.yaml")
        return _read(meta, lambda: super(GuardedFileStore, self)._get_experiment(*args))


def guarded_file_store(uri: str) -> GuardedFileStore:
    missing = [name for name in HOOKS if not callable(getattr(FileStore, name, None))]
    if missing:
        raise SourceError(
            f"{uri}: this mlflow's FileStore lacks {', '.join(missing)}, which gatekeeper "
            "guards to read file stores safely; use mlflow 3.x or a sqlite:/// store"
        )
    root = local_file_uri_to_path(uri)
    if not os.path.isdir(root):  # mlflow's FileStore would create it: a read writes nothing
        raise SourceNotFound(f"{uri}: no MLflow file store (an mlruns/ folder) at {root}")
    return GuardedFileStore(uri)
