"""The check contract. A check kind is one module in `gatekeeper/checks/` defining one
subclass of `MaskCheck` or `AggregateCheck` with a `kind`; the registry finds it.

- `MaskCheck`: judged point by point. `violations()` returns, for each new point, whether
  it violates — optionally looking back over `context` earlier points (rolling windows).
  The engine handles step selection, reduction, non-finite values, debounce (`for: N`)
  and reporting, so a pointwise check is a few lines.
- `AggregateCheck`: judged over the selected sequence as a whole (`reach`, `fraction`).
  It keeps its own small state, fed chunk by chunk, so a live poll costs O(new points).

Both are pydantic models of the check's parameters (frozen, unknown fields rejected).
A check's YAML value may be a mapping of its fields, or a shorthand: a scalar or list
that `from_shorthand` turns into fields (`abs_max: 1e-9`, `between: [0, 1]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from gatekeeper.fmt import fmt
from gatekeeper.statedata import decode_record, encode
from gatekeeper.verdict import Status


@dataclass(frozen=True)
class Outcome:
    """What a check concluded; the engine adds policy, rule, severity and source."""

    status: Status
    message: str
    step: int | None = None
    value: float | None = None
    violations: int = 0
    judged: int = 0
    # a skip because the source cannot carry the metric at all: why (the verdict counts
    # these apart, so a skip that no run of this source could avoid never looks judged)
    not_judged: str | None = None


@dataclass(frozen=True)
class EvalContext:
    """What a check may know beyond its points: run metadata and stored history.

    `now` and `last_arrival` (wall-clock seconds) are set by a live watcher only: the
    engine has no clock, so `stale` learns the time from whoever polls.
    """

    run: Any = None
    history: Any = None
    rule_key: Any = None
    now: float | None = None
    last_arrival: float | None = None  # when a new point of the rule's metric last arrived
    metric: str | None = None  # the metric the rule reads (isclose finds it in a reference)
    references: Any = None  # name -> an earlier Run, for isclose (read at the edge)


class Check(BaseModel):
    """Base of every check kind: the parameters, validated at policy load."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: ClassVar[str]
    # The EvalContext fields the check's code reads (`outcome`, `overlay`, and `idle`
    # where it has one): a live verdict gives a rule its last result again while its
    # state and these fields are unchanged (engine: `Evaluation.verdict`). None: not
    # declared, so any of them may be read: the rule is judged again on every verdict.
    context_fields: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        """Turn a non-mapping YAML value into fields. Default: a single `value` field."""
        return {"value": value}

    @classmethod
    def parse(cls, raw: Any) -> Check:
        data = raw if isinstance(raw, dict) else cls.from_shorthand(raw)
        return cls.model_validate(data)

    def describe(self) -> str:
        """The bound as a person reads it, e.g. `|x| <= 1e-09`."""
        raise NotImplementedError


class MaskCheck(Check):
    """A check judged point by point (over finite values; the engine handles NaN/Inf)."""

    context_fields: ClassVar[tuple[str, ...] | None] = ()  # its code is given no context
    # True: `violations` is also given `first=`, the point number of values[0] among the
    # rule's selected points (0 is the first the rule judged), so a window's figures can
    # be made from its own points alone, the same floats whatever the polls (`flat`)
    numbered: ClassVar[bool] = False

    def context(self) -> int:
        """How many earlier points `violations` needs to judge a point (window - 1)."""
        return 0

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        """Boolean mask over values[n_context:]: True where the point violates (a
        `numbered` check takes `first: int` too, by keyword)."""
        raise NotImplementedError

    def explain(self, value: float) -> str:
        """Why a violating value violates, e.g. `|x| = 0.3 > 1e-09`."""
        return f"x = {fmt(value)}, expected {self.describe()}"


class AggregateCheck(Check):
    """A check judged over the whole selected sequence, fed incrementally."""

    # The EvalContext field ("history", "references") the check judges its points
    # against, if any. Without it `outcome` reads no point but the first (a SKIP or an
    # ERROR saying it is missing), so an evaluation whose verdicts never give it (the
    # daemon's) feeds the check its first point only.
    reads: ClassVar[str | None] = None

    def start(self) -> Any:
        """Fresh state for one rule on one run."""
        raise NotImplementedError

    def feed(self, state: Any, steps: np.ndarray, values: np.ndarray) -> Any:
        """Fold new selected points (sorted by step) into the state; return the state."""
        raise NotImplementedError

    def outcome(self, state: Any, *, final: bool, ctx: EvalContext) -> Outcome:
        """Judge what has been fed. Live (`final=False`): PENDING when it cannot tell yet."""
        raise NotImplementedError

    def dump_state(self, state: Any) -> Any:
        """The state as plain data (the daemon saves it). The default saves a dataclass
        state field by field; a check with another kind of state overrides both."""
        return encode(state)

    def load_state(self, data: Any, where: str) -> Any:
        """The state `dump_state` saved, decoded by the declared field types of the state
        `start()` makes; StateDataError when `data` is not of that shape."""
        return decode_record(data, type(self.start()), where)

    def overlay(self, state: Any, ctx: EvalContext) -> dict[str, list[float]] | None:
        """What a plot of the rule may draw besides the points and the parameters (history's
        per-step corridor), as short parallel lists; None: nothing. Reporters only draw."""
        return None


def mean_rows(rows: np.ndarray) -> np.ndarray:
    """The mean of each row of finite values, never made NaN or Inf by overflow: numpy's
    float sum overflows where the mean cannot (1e308 + 1e308 is Inf, and Inf - Inf a NaN,
    in a mean of 0). Such a row is averaged again scaled down by a power of two above its
    length: exact but for subnormals, whose share of the mean is a few subnormal ulps."""
    with np.errstate(over="ignore", invalid="ignore"):
        means = np.asarray(rows.mean(axis=-1), dtype=np.float64)
        bad = ~np.isfinite(means)
        if bad.any():
            e = int(rows.shape[-1]).bit_length()
            means[bad] = np.ldexp(np.ldexp(rows[bad], -e).mean(axis=-1), e)
    return means


def window_means(values: np.ndarray, k: int, first: int) -> np.ndarray:
    """The mean of every k consecutive values (len(values) - k + 1 of them, in order),
    `values[0]` being point number `first` of the sequence: `window_sums` / k, so a
    window's mean is within k ulps of its points' and the same whatever the chunks the
    sequence is fed in (a difference of running sums cancelled: after a 1e16 a 0.7 came
    out 0.0). O(len(values))."""
    if k == 1:
        return values.astype(np.float64, copy=True)
    if values.size < k:
        return np.empty(0)
    with np.errstate(over="ignore", invalid="ignore"):
        means = window_sums(values, k, first) / k
    bad = ~np.isfinite(means)
    if bad.any():  # an overflow inside a window of finite points
        view = np.lib.stride_tricks.sliding_window_view(values, k)
        means[bad] = mean_rows(view[bad])
    return means


def window_sums(
    values: np.ndarray, k: int, first: int, tails: np.ndarray | None = None
) -> np.ndarray:
    """The sum of every k consecutive values along the last axis (n - k + 1 of them,
    n >= k), `values[..., 0]` being point number `first` of the sequence. Each window is
    summed from its own points -- the suffix of one k-block plus the prefix of the next,
    blocks aligned to the point numbers -- never as a difference of running sums: so a
    window's sum is the same float whatever the chunks the sequence is fed in, and within
    k ulps of its points' (a running sum carries the error of all before it). O(n).
    `tails` (the shape of `values`): what the prefix of the next block is summed from,
    when it differs from `values` (flat centres each block on its own point); a window
    that is one block whole is then its suffix. Overflow is the caller's to mind."""
    n = values.shape[-1]
    lead = first % k  # zeros before values[0] align the blocks: x + 0 is x
    nb = -(-(lead + n) // k)

    def blocked(a: np.ndarray) -> np.ndarray:
        padded = np.zeros(a.shape[:-1] + (nb * k,))
        padded[..., lead : lead + n] = a
        return padded.reshape(padded.shape[:-1] + (nb, k))

    blocks = blocked(values)
    shape = blocks.shape[:-2] + (nb * k,)
    prefix = np.cumsum(blocks if tails is None else blocked(tails), axis=-1).reshape(shape)
    rev = blocks[..., ::-1].copy()  # suffix sums: a contiguous reversed copy's prefix sums
    np.cumsum(rev, axis=-1, out=rev)
    suffix = rev[..., ::-1].reshape(shape)
    # window i starts at lead + i: the suffix of its block plus the prefix of the next;
    # one block whole (its start a block's) is the prefix alone, or with `tails` the
    # suffix alone (+ -0.0 is exact)
    whole = np.s_[..., (-lead) % k :: k]
    out = suffix[..., lead : lead + n - k + 1]  # a view of a copy made here
    tail = prefix[..., lead + k - 1 : lead + n]
    if tails is None:
        out[whole] = -0.0
    else:
        tail = tail.copy()
        tail[whole] = -0.0
    out += tail
    return out
