"""Step-less values of a wandb run: its summary, for metrics that have no history points.

HF Trainer writes `train_loss`, `train_runtime` and the like to the summary only. A rule
on such a metric judges the summary value (a point without a step) instead of calling
the metric missing. Reading the summary costs a second pass over the `.wandb` file, so
it is done only for metrics a policy asks for and the history does not have.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import orjson

from gatekeeper.errors import RecordError
from gatekeeper.sources.wandb.log import LogReader
from gatekeeper.sources.wandb.proto import sdk_record


def summary_values(path: str, wanted: Iterable[str]) -> dict[str, float]:
    """The last summary value of each wanted metric in the `.wandb` file at `path` that is
    a number (NaN/±Inf kept); non-numeric and removed entries are left out."""
    # here: `fill_summary` is called for every live source that may have a summary (a
    # watch of a path that turns out to be JSONL too), and protobuf is gatekeeper[wandb]'s
    from google.protobuf.message import DecodeError

    want = set(wanted)
    found: dict[str, float] = {}
    parse = sdk_record().FromString
    reader = LogReader(path)
    try:
        for raw in reader.records():
            rec = parse(raw)
            if rec.WhichOneof("record_type") != "summary":
                continue
            for item in rec.summary.update:
                name = ".".join(item.nested_key) if item.nested_key else item.key
                if name in want:
                    value = _number(item.value_json)
                    if value is None:
                        found.pop(name, None)
                    else:
                        found[name] = value
            for item in rec.summary.remove:
                found.pop(".".join(item.nested_key) if item.nested_key else item.key, None)
    except DecodeError as exc:
        raise RecordError(
            f"record ending at byte {reader.offset} is not a wandb protobuf Record ({exc})",
            file=path,
        ) from None
    return found


_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "null": math.nan}


def _number(text: str) -> float | None:
    if text in _SPECIAL:
        return _SPECIAL[text]
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, bool | int | float):
        return float(value)
    return None


def fill_summary(source: Any, run: Any, policies: Iterable[Any]) -> None:
    """Set `run.summary_values` for the metrics the policies ask for that have no history
    points, when the source has a summary (wandb); other sources are left as they are."""
    read = getattr(source, "read_summary", None)
    if read is None:
        return
    wanted = {r.metric for p in policies for r in p.rules if r.expr is None} - set(run.series)
    if wanted:
        run.summary_values = read(wanted)
