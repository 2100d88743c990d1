"""wandb history rows to per-metric numpy columns, each metric on its own step axis.

A metric's axis is the step metric `define_metric` declared for it (exactly by name, else
by the first matching glob such as `train/*`), `_step` otherwise. A row that lacks its
metric's step value takes the last value seen for that step metric (wandb's `step_sync`);
a point with no step value at all yet cannot be placed and is counted in `unplaced`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.errors import RecordError, one_line
from gatekeeper.model import STEP_DTYPE, VALUE_DTYPE, Series, merge_chunks

DEFAULT_AXIS = "_step"
# Sources join a nested key's parts with this (never in a logged key) so that Columns can
# tell `{"a": {"b": 1}}` from a flat `"a.b"`; both are shown as `a.b`.
NESTED = "\x1f"


@dataclass
class StepAxes:
    """The `define_metric` declarations of one run."""

    exact: dict[str, str] = field(default_factory=dict)  # metric -> step metric
    globs: dict[str, str] = field(default_factory=dict)  # glob -> step metric, in order
    _cache: dict[str, str] = field(default_factory=dict, repr=False)

    def define(self, name: str, glob: str, step_metric: str) -> None:
        if not step_metric:
            return
        if name:
            self.exact[name] = step_metric
        elif glob:
            self.globs[glob] = step_metric
        self._cache.clear()

    def axis_of(self, metric: str) -> str:
        axis = self._cache.get(metric)
        if axis is None:
            axis = self.exact.get(metric) or next(
                (s for g, s in self.globs.items() if fnmatch.fnmatchcase(metric, g)),
                DEFAULT_AXIS,
            )
            if axis == metric:  # a step metric is not on its own axis
                axis = DEFAULT_AXIS
            self._cache[metric] = axis
        return axis

    def to_json(self) -> dict[str, Any]:
        return {"exact": dict(self.exact), "globs": dict(self.globs)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepAxes:
        return cls(exact=dict(data.get("exact", {})), globs=dict(data.get("globs", {})))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> StepAxes:
        """Read the metric definitions the SDK stores in a run's `_wandb.m` config entry.

        Each entry is a MetricRecord encoded by field number: "1" name, "2" glob name,
        "4" step metric name, "5" step metric as a 1-based index into the same list.
        """
        axes = cls()
        wb = config.get("_wandb") or {}
        if isinstance(wb, dict) and isinstance(wb.get("value"), dict):
            wb = wb["value"]
        entries = wb.get("m", []) if isinstance(wb, dict) else []
        entries = [e for e in entries if isinstance(e, dict)]
        for entry in entries:
            step = entry.get("4") or ""
            index = entry.get("5")
            if not step and isinstance(index, int) and 0 < index <= len(entries):
                step = entries[index - 1].get("1", "")
            axes.define(entry.get("1", ""), entry.get("2", ""), step)
        return axes


class Columns:
    """Accumulates history items of a batch of rows, then turns them into Series chunks.

    Call `add(row, key, value)` per item (`row` counts from 0 within the batch), set
    `steps[row]` (`_step`), then `finish(axes)`. Values may be JSON text (local files) or
    Python numbers (the API); both become float64 with NaN/±Inf kept.
    """

    def __init__(
        self,
        carry: dict[str, float] | None = None,
        where: str = "wandb run",
        forms: dict[str, bool] | None = None,
    ):
        self.rows: dict[str, Any] = {}  # key -> row indices (list or int array)
        self.vals: dict[str, Any] = {}  # key -> raw values, or (float64 array, mask) done
        self.steps: list[float] = []
        self.carry = carry if carry is not None else {}  # step metric -> last value seen
        self.unplaced: dict[str, int] = {}
        self.where = where  # the file or run named in errors
        self.forms = forms if forms is not None else {}  # shown name -> logged nested?

    def finish(self, axes: StepAxes) -> dict[str, Series]:
        nrows = len(self.steps)
        values = {k: v if isinstance(v, tuple) else to_floats(v) for k, v in self.vals.items()}
        axis_cols: dict[str, np.ndarray] = {DEFAULT_AXIS: np.asarray(self.steps, VALUE_DTYPE)}
        out: dict[str, Series] = {}
        raw_of = {self._name(k): k for k in values}
        for raw, (vals, numeric) in values.items():
            if raw.startswith("_"):
                continue
            key = self._name(raw)
            axis = axes.axis_of(key)
            col = axis_cols.get(axis)
            if col is None:
                raw_axis = raw_of.get(axis, axis)
                col = axis_cols[axis] = self._axis_column(raw_axis, values.get(raw_axis), nrows)
            steps = col[np.asarray(self.rows[raw], np.intp)]
            placed = ~np.isnan(steps)
            if numeric is not None:
                if not numeric.any():
                    continue
                steps, vals, placed = steps[numeric], vals[numeric], placed[numeric]
            if not placed.all():
                self.unplaced[key] = self.unplaced.get(key, 0) + int((~placed).sum())
                steps, vals = steps[placed], vals[placed]
            self._whole_steps(key, axis, steps)
            out[key] = merge_chunks(key, [(steps.astype(STEP_DTYPE), vals)], axis)
        for axis, col in axis_cols.items():
            if axis != DEFAULT_AXIS and col.size:
                self.carry[axis] = float(col[-1])
        return out

    def _name(self, raw: str) -> str:
        """The shown name of a logged key; a flat `a.b` and a nested `{"a": {"b"}}` in one
        run are refused, never merged into one series."""
        nested = NESTED in raw
        name = raw.replace(NESTED, ".") if nested else raw
        if self.forms.setdefault(name, nested) != nested:
            parts = name.split(".")
            shape = "{" + "".join(f'"{p}": {{' for p in parts[:-1]) + f'"{parts[-1]}"'
            raise RecordError(
                f'metric {name} is logged both as the flat key "{name}" and nested as '
                f"{shape}{'}' * len(parts)}; both would be named {name} and merged into one "
                "series. Rename one of them in the trainer's wandb.log call",
                file=self.where,
            )
        return name

    def _whole_steps(self, key: str, axis: str, steps: np.ndarray) -> None:
        """Steps are integers: a step metric with fractional values (an epoch of 0.25 used
        as `step_metric`) is refused, never truncated onto the wrong step."""
        # beyond 2**53 float64 no longer holds every integer: 1e300 would be cast to INT64_MIN
        frac = ~(np.abs(steps) <= 2.0**53) | (steps != np.floor(steps))
        if frac.any():
            bad = float(steps[int(np.argmax(frac))])
            raise RecordError(
                f"metric {one_line(key)} is on step metric {one_line(axis)} (define_metric), whose "
                f"value {bad:g} is not a whole number within 2**53; gatekeeper steps are "
                "integers. Use an "
                f"integer step metric (e.g. global_step) for {key}, or log {axis} as a "
                "metric rather than a step",
                file=self.where,
            )

    def _axis_column(
        self, axis: str, vals: tuple[np.ndarray, np.ndarray | None] | None, nrows: int
    ) -> np.ndarray:
        """The step metric's value on every row, forward-filled (step_sync) from the carry."""
        col = np.full(nrows + 1, np.nan)
        col[0] = self.carry.get(axis, np.nan)
        if vals is not None:
            col[np.asarray(self.rows[axis], np.intp) + 1] = vals[0]
        known = ~np.isnan(col)
        last = np.maximum.accumulate(np.where(known, np.arange(nrows + 1), 0))
        return col[last][1:]


_SPECIAL = {"true": 1.0, "false": 0.0, "NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def to_floats(values: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """JSON texts or Python values to float64 (NaN/±Inf kept) and a mask of the points
    (None when all are). A null is a NaN point: TRL logs a metric whose values are all
    NaN as `None` (`value_json: "null"`), and dropping it would hide the broken points.
    Text, media and lists are not metric points, and nor are the nulls of a key that holds
    them in the same batch."""
    try:
        return np.array(values, dtype=VALUE_DTYPE), None  # numpy reads None as NaN
    except (ValueError, TypeError):
        pass
    nulls = [v is None or v == "null" for v in values]
    floats = [None if null else _one_float(v) for v, null in zip(values, nulls, strict=True)]
    texty = any(f is None and not null for f, null in zip(floats, nulls, strict=True))
    mask = np.array(
        [f is not None or (null and not texty) for f, null in zip(floats, nulls, strict=True)],
        dtype=bool,
    )
    return np.array([np.nan if f is None else f for f in floats], VALUE_DTYPE), mask


def _one_float(value: Any) -> float | None:
    if isinstance(value, str):
        if value in _SPECIAL:
            return float(_SPECIAL[value])
        try:
            return float(value)
        except ValueError:
            return None
    if isinstance(value, bool | int | float):
        return float(value)
    return None
