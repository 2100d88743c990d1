"""The source contract, in one place: what a source family provides to the rest.

A source family (a package under `gatekeeper/sources/`: `jsonl/`, `wandb/`, ...) owns
everything about one kind of run storage, and exposes it as a `SourceFamily` named
`KIND` in its `__init__`:

- `Source`: opened from a SOURCE string (a path, or `scheme://...`); `read()` returns the
  whole run as it is now.
- `LiveSource`: a `Source` that can be followed while the run is written; `poll()` returns
  only the points new since its cursor, so a poll costs O(new points), never O(history);
  the cursor is plain JSON-able data (`cursor()`/`restore()`), never a pickled object.
- `Annotator`: writes a verdict back onto the run it judged (`--annotate`).
- `Discovery`: lists the runs a daemon target covers right now (`gatekeeper serve`).

Third-party errors are translated at this boundary into `SourceError`s (`SourceNotFound`,
`SourceUnavailable` for "try again later"), so a reader's failure is never a crash.
A source may also offer `read_summary(wanted) -> dict[str, float]`: step-less summary
values for metrics without history points (wandb's summary); callers probe for it.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import SplitResult, urlsplit

from gatekeeper.errors import SourceError, UsageError, one_line, shown_url
from gatekeeper.fmt import fmt
from gatekeeper.model import Run, RunState, set_dotted

if TYPE_CHECKING:
    from gatekeeper.verdict import Verdict

T = TypeVar("T")


@dataclass(frozen=True)
class RunOverrides:
    """Metadata given on the command line; applied over what the source says."""

    name: str | None = None
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    state: RunState | None = None
    allowed_states: dict[str, str] = field(default_factory=dict)  # state -> reason
    allow_nothing_judged: str | None = None  # reason a gate that judged nothing may pass

    def apply(self, run: Run) -> Run:
        if self.name:
            run.name = self.name
        if self.tags:
            run.tags = tuple(dict.fromkeys((*run.tags, *self.tags)))
        for key, value in self.config.items():
            set_dotted(run.config, key, value)
        if self.state is not None:
            run.state = self.state
        run.allowed_states = {**run.allowed_states, **self.allowed_states}
        if self.allow_nothing_judged is not None:
            run.allow_nothing_judged = self.allow_nothing_judged
        return run


class Source(ABC):
    """Reads one run. Subclasses register a `kind` and say which SOURCE strings they open."""

    kind: ClassVar[str]

    def __init__(self, spec: str):
        self.spec = spec

    @classmethod
    @abstractmethod
    def accepts(cls, spec: str) -> bool:
        """True when this source kind understands `spec` (cheap: no network, no parsing)."""

    @abstractmethod
    def read(self) -> Run:
        """The whole run as it is now. Raises SourceError when it cannot be read whole."""


@dataclass
class Poll:
    """What one poll of a live source found: only the points new since the last poll."""

    series: dict[str, Any]  # metric -> Series of new points (sorted by step)
    run: Run  # current metadata (name, tags, config, state); its `series` may be empty
    ended: bool = False  # the run has ended: end marker, a final state, or gone for good
    points: int = 0  # how many new points this poll read
    # `series` is the whole run again, and what earlier polls brought is withdrawn: a
    # TensorBoard restart discarded points already delivered (sources/tensorboard/restarts.py)
    reset: bool = False


class LiveSource(Source):
    """A source that can be followed while the run is written: each poll costs O(new data).

    The cursor is a JSON-serializable position (byte offsets, counts, page tokens) so a
    daemon can persist it and resume after a restart without re-reading history.
    """

    @abstractmethod
    def poll(self) -> Poll:
        """Read what is new since the last poll. A source that does not exist yet, or a
        partial trailing record, is not an error: the poll returns nothing new."""

    @abstractmethod
    def cursor(self) -> dict[str, Any]:
        """The current read position, JSON-serializable."""

    @abstractmethod
    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a position `cursor()` returned earlier."""

    def rewind(self) -> bool:
        """Make the next poll read the run again from its start; False when this source
        cannot. A live gate asks when the run's config changed which points a rule selects
        (`steps: {every: config.k}`), as `check`, reading the run with the new config,
        judges them. Only a source whose run config may change while it runs (wandb,
        MLflow) needs to: the others' config is fixed when the watch starts."""
        return False


def decoded(where: str, what: str, fn: Callable[[], T], fix: str) -> T:
    """`fn`'s decoding of what a store or a server answered. A value of another type or
    shape than the tool's (a text in a sqlite INTEGER column, a server on the URL that is
    not MLflow or Prometheus) is that source's damage: a SourceError naming it and saying
    `fix` (exit 2), never a bug (exit 70)."""
    try:
        return fn()
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
        raise SourceError(f"{where}: {what}: {fix} ({why})") from None


def checked_url(url: str, kind: str) -> SplitResult:
    """`urlsplit` of a URL the user wrote, its port read: a malformed one (`http://[::1`,
    a port past 65535) is a UsageError (exit 2), not a ValueError deep in a client. The
    message names `kind` and the URL without its user:password@."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsed on reading: it raises for a bad port
    except ValueError as exc:
        raise UsageError(f"{kind} URL {shown_url(url)!r}: {exc}; fix the host or port") from None
    return parts


def env_number(name: str, default: float, low: float, high: float) -> float:
    """A limit from the environment (`GATEKEEPER_WANDB_TIMEOUT`, `..._MAX_BYTES`): a
    finite number from `low` to `high`, `default` when unset or empty. Anything else is
    a UsageError naming the variable (exit 2), never a ValueError or a limit of NaN."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN too
        raise UsageError(
            f"{name}={one_line(text)[:40]}: expected a number from {fmt(low)} to {fmt(high)}; "
            f"fix or unset it (default {fmt(default)})")
    return value


def check_cursor_version(cursor: dict[str, Any], version: int, where: str) -> None:
    """Refuse a saved cursor of another layout than `version` (this source's): a
    SourceError naming `where`, so the saved position is dropped and the run re-read."""
    if cursor.get("version") != version:
        raise SourceError(
            f"{where}: saved cursor version {cursor.get('version')!r} is not "
            f"{version}; drop the saved position to re-read the run"
        )


class StepTops:
    """Each metric's highest step a live source delivered. A poll whose points land below
    it (a run resumed from an earlier checkpoint, its step logged again) is not `check`'s
    order: `check` sorts a metric's points by step, a session would judge these after
    the later ones (`for`, windows, `last`). The source then reads the run again whole
    (`Poll.reset`). Kept in the cursor; a cursor saved before it was: unknown until the
    next point."""

    def __init__(self, saved: Any = None):
        self.top: dict[str, int] = {str(k): int(v) for k, v in dict(saved or {}).items()}

    def reaches_below(self, metric: str, low: int) -> bool:
        """Whether a new point of `metric` at step `low` lands below its top."""
        top = self.top.get(metric)
        return top is not None and low < top

    def raise_to(self, metric: str, high: int) -> None:
        self.top[metric] = max(self.top.get(metric, high), high)

    def below(self, series: dict[str, Any]) -> bool:
        """Whether a metric's new points (sorted by step) reach below its top."""
        return any(len(s) and self.reaches_below(m, int(s.steps[0])) for m, s in series.items())

    def note(self, series: dict[str, Any]) -> None:
        for m, s in series.items():
            if len(s):
                self.raise_to(m, int(s.steps[-1]))

    def to_json(self) -> dict[str, int]:
        return dict(self.top)


class Annotator(ABC):
    """Writes a verdict onto the run it judged: a tag and summary keys on a server, or a
    `gatekeeper-verdict.json` next to local records. Only ever adds gatekeeper's own
    marks; never rewrites the run's data, config or name."""

    @abstractmethod
    def accepts(self, spec: str) -> bool:
        """True when this family annotates the run `spec` names (cheap, no network)."""

    @abstractmethod
    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        """Write `verdict` (and a link to the full `report`, if any) onto the run; return
        one line saying what was written. Raises SourceError when it cannot be written."""


class Discovery(ABC):
    """The runs one daemon target covers right now; asked every `discovery_interval`."""

    @abstractmethod
    def runs(self) -> list[str]:
        """SOURCE strings of the runs covered now, sorted. Raises SourceUnavailable when
        the listing failed this time (the daemon counts it and asks again later)."""

    @abstractmethod
    def describe(self) -> str:
        """What the target covers, for logs and `serve --check-config`."""


@dataclass(frozen=True)
class SourceFamily:
    """What a source family registers: one frozen descriptor per package (its `KIND`).

    `sources` are tried in order by `open_source` (remote schemes before local paths);
    `live_sources` are the kinds only `open_live_source` uses (a tail that may start
    before the run exists). `target_key` is the daemon target field this family's
    `discovery` reads (`glob:`, `wandb:`); `discovery` builds a `Discovery` from its value;
    `target_model` validates that value for a family added as a package of its own.
    """

    name: str
    examples: tuple[str, ...]  # SOURCE strings as a user writes them, for help and docs
    sources: tuple[type[Source], ...]
    live_sources: tuple[type[LiveSource], ...] = ()
    annotator: Annotator | None = None
    target_key: str | None = None
    discovery: Callable[[Any], Discovery] | None = None
    # The pydantic model of the target filter under `target_key`, for a family the daemon
    # config does not name (the built-in ones are typed fields of daemon/config.Target).
    target_model: Any = None
    # The gatekeeper extra its readers need (gatekeeper/extras.py); None: the core's.
    extra: str | None = None


def filter_lists_itself(value: Any) -> Any:
    """`SourceFamily.discovery` for a family whose daemon target filter (a pydantic model
    with `runs()` and `describe()`) is its own Discovery."""
    return value


def lazy_family(
    namespace: dict[str, Any], kind: Callable[[], SourceFamily], names: dict[str, str]
) -> Callable[[str], Any]:
    """A family package's module `__getattr__`: `KIND` built by `kind()` once (then bound
    in `namespace`, the package's globals), each of `names` imported from its module when
    first asked for, so importing the package imports none of its readers."""

    def __getattr__(name: str) -> Any:
        if name == "KIND":
            namespace["KIND"] = built = kind()
            return built
        if name in names:
            import importlib

            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    return __getattr__
