"""The miles record form: one metric's whole series on a line, turned into numpy arrays.

    {"metric": "train/ppo_kl", "series": [[0, 1e-10], [1, 0.0003]], "step_key": "train/step"}

`step_key` is optional (the axis is then `<ns>/step`, an alias, or `step`). A null step
does not stop the file: the metric alone cannot be judged (miles' own gate does the same).

A run read only from such lines, each on a key of miles' capture whitelist, is a miles CI
record (`miles_capture`): it can carry those keys and no other, so a rule on another
metric is "not captured by the CI record", never "not logged by this run".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import STEP_DTYPE, VALUE_DTYPE, Capture
from gatekeeper.sources.jsonl.values import (
    Same,
    as_steps,
    coerce_value,
    fast_floats,
    only_marker_strings,
    record_quotes,
    step_of,
)

# miles logs perf/* against rollout/step; other namespaces use "<ns>/step".
DEFAULT_STEP_ALIASES: dict[str, str] = {"perf": "rollout/step"}


# The keys miles' CiHistoryBackend keeps of every log dict (TARGET_METRIC_KEYS in
# miles/utils/tracking_utils/ci_history.py, radixark/miles 31f1ca9); any other is dropped.
MILES_CAPTURED_KEYS: frozenset[str] = frozenset({
    "train/grad_norm",
    "train/ppo_kl",
    "train/train_rollout_logprob_abs_diff",
    "train/train_rollout_kl",
    "rollout/raw_reward",
    "rollout/tito_session_mismatch_rate/v1/assistant_text",
    "rollout/tito_session_mismatch_rate/v2/assistant_text",
})
MILES_CI_RECORD = Capture(
    name="the CI record",
    keys=MILES_CAPTURED_KEYS,
    instead="the run's full log (miles --use-wandb)",
)


def miles_capture(metrics: Collection[str], record_metrics: Collection[str]) -> Capture | None:
    """MILES_CI_RECORD when the run is a miles CI record: it has metrics, every one read
    from record lines, each a key miles captures. Anything else (rows, another key: a
    later miles may capture more) is not known to be one, and None says so."""
    if not metrics or len(record_metrics) < len(metrics):
        return None
    if not all(m in record_metrics and m in MILES_CAPTURED_KEYS for m in metrics):
        return None
    return MILES_CI_RECORD


def is_step_key(key: str) -> bool:
    return key in ("step", "_step") or key.endswith("/step")


def default_step_key(metric: str, aliases: dict[str, str] | None = None) -> str:
    """The axis a metric of a record line lives on: `<ns>/step`, an alias, or `step`."""
    aliases = DEFAULT_STEP_ALIASES if aliases is None else aliases
    ns, sep, _ = metric.partition("/")
    if not sep:
        return "step"
    return aliases.get(ns, f"{ns}/step")


@dataclass
class Converted:
    """A record line's series as arrays."""

    metric: str
    step_key: str
    steps: np.ndarray
    values: np.ndarray
    null_step: str | None  # why the metric cannot be judged (a null step), if it cannot


def convert_record(
    obj: dict[str, Any], raw: bytes, path: str, line: int, aliases: dict[str, str]
) -> Converted:
    """A record line (`raw`, as the file holds it; `obj`, as parsed) as arrays."""
    metric, series = obj["metric"], obj["series"]
    if not isinstance(metric, str) or not metric:
        raise RecordError(
            f'"metric" must be a non-empty string, got {quote(metric)}', file=path, line=line
        )
    if not isinstance(series, list):
        raise RecordError(
            f'"series" of {quote(metric)} must be a list of [step, value] pairs, got '
            f"{quote(series)}",
            file=path,
            line=line,
        )
    step_key = _step_key(obj, metric, path, line, aliases)
    flat = _flat_series(series, raw, obj)
    if flat is None:
        return Converted(metric, step_key, *_series_by_point(metric, series, path, line))
    # copies: a strided view would keep the whole interleaved buffer alive
    steps = as_steps(
        flat[0::2], lambda: [p[0] for p in series], path, Same(line),
        lambda i: f"series point {i} of {quote(metric)}: step",
    )
    return Converted(metric, step_key, steps, flat[1::2].copy(), None)


def _step_key(
    obj: dict[str, Any], metric: str, path: str, line: int, aliases: dict[str, str]
) -> str:
    step_key = obj.get("step_key", None)
    if step_key is None:
        return default_step_key(metric, aliases)
    if not isinstance(step_key, str) or not step_key:
        raise RecordError(
            f'"step_key" of {quote(metric)} must be a non-empty string (the step axis, e.g. '
            f'"train/step"), got {quote(step_key)}',
            file=path,
            line=line,
        )
    return step_key


def _flat_series(series: list[Any], raw: bytes, obj: dict[str, Any]) -> np.ndarray | None:
    """The series as [step, value, step, value, ...] float64 when every point is a pair of
    numbers, nulls or markers and no step is null; None sends it point by point. The series
    holds a string only if the line has more '"' than its keys and other fields take."""
    if set(map(type, series)) != {list} or set(map(len, series)) != {2}:
        return None
    if raw.count(b'"') != record_quotes(obj) and not only_marker_strings(
        chain.from_iterable(series)
    ):
        return None
    flat = fast_floats(chain.from_iterable(series), 2 * len(series))
    if flat is None or np.isnan(flat[0::2]).any():
        return None  # a null step: point by point, it makes this metric alone unjudgeable
    return flat


def _series_by_point(
    metric: str, series: list[Any], path: str, line: int
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Point-by-point conversion, for series with malformed points or null steps; and why
    the metric cannot be judged (its first null step), if it cannot."""
    steps_l, values_l = [], []
    null_step = None
    for i, point in enumerate(series):
        if not isinstance(point, list) or len(point) != 2:
            raise RecordError(
                f"series point {i} of {quote(metric)} is not [step, value]: got {quote(point)}",
                file=path,
                line=line,
            )
        if point[0] is None:
            # miles' capture writes the step it was given; `tracking.log(..., step=None)`
            # leaves null, and miles' own gate then fails that metric only
            null_step = null_step or (
                f"series point {i} has a null step ({path}:{line}); "
                "a point without a step cannot be judged"
            )
            continue
        what = f"series point {i} of {quote(metric)}"
        steps_l.append(step_of(point[0], path, line, f"{what}: step"))
        values_l.append(coerce_value(point[1], path, line, what))
    steps, values = np.array(steps_l, dtype=STEP_DTYPE), np.array(values_l, dtype=VALUE_DTYPE)
    return steps, values, null_step
