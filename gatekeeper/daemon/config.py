"""The daemon configuration file (YAML, pydantic-validated); errors name file:line:field.

Secrets never live in the file: a notifier names the environment variable that holds its
URL or signing secret (`url_env`, `secret_env`), the HTTP listener its token
(`http.token_env`). `GATEKEEPER_STATE` and `GATEKEEPER_HTTP_ADDRESS` override the state
store and listen address (handy in containers). `state` is a store URL (gatekeeper/dburl.py):
`postgresql://...` is the shared store of replicas; a path or `sqlite:` URL becomes the
SQLite file's path, anything else is refused. A `notifiers:` entry is validated by the
settings model of its kind (`gatekeeper.notify.kinds.NotifierEntry`), so a plug-in kind's
own fields get the same file:line:field errors.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gatekeeper import dburl
from gatekeeper.daemon.exporter import MetricsSettings
from gatekeeper.errors import ConfigError, PolicyError
from gatekeeper.notify.kinds import NotifierEntry
from gatekeeper.sources.mlflow.discover import MlflowFilter
from gatekeeper.sources.prometheus.discover import PrometheusFilter
from gatekeeper.sources.tensorboard.discover import TensorBoardFilter
from gatekeeper.yamlfile import (
    Duration,
    PositiveDuration,
    display_path,
    is_mapping,
    line_of,
    read_yaml,
    seconds,
    to_plain,
    validation_error,
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PollSettings(_Model):
    interval: PositiveDuration = 30.0
    jitter: Duration = 2.0  # random delay added to each poll, spreads load
    timeout: PositiveDuration = 20.0  # a poll taking longer is abandoned and counted
    backoff_max: PositiveDuration = 600.0  # ceiling of the error backoff
    discovery_interval: PositiveDuration = 30.0  # how often globs are re-expanded
    workers: int = Field(default=8, ge=1, le=256)  # concurrent polls
    debounce: int = Field(default=1, ge=1)  # polls a new rule status must hold before it counts
    # Failed polls in a row before a run that cannot be read is `error` and alerts
    # (a malformed record, which will not heal, counts at once).
    error_after: int = Field(default=3, ge=1, le=100)
    # On a PostgreSQL state: how long a replica's hold on a run lasts unless renewed
    # (every third of it, and by each commit); a replica gone this long loses its runs.
    lease: Annotated[float, BeforeValidator(seconds), Field(ge=1, le=3600)] = 30.0
    # How long a run's judging state may stay in memory, ahead of the store, while its
    # polls change nothing an operator or a channel sees (no rule's status, no alert):
    # such polls are committed together, at most this long apart (each run's period is
    # half to all of it, so runs started together spread their commits; 0: every poll is
    # committed). A crash or kill -9 then re-reads at most this much of the run from the
    # source; a status change, an alert, an ended run and a clean stop commit at once.
    checkpoint: Annotated[float, BeforeValidator(seconds), Field(ge=0, le=3600)] = 0.0


class WandbFilter(_Model):
    """Every run of a wandb project in a state, optionally with any of some tags.

    Only the schema lives here; the wandb family lists the runs it matches
    (`gatekeeper.sources.wandb.discover.ProjectRuns`)."""

    project: str  # ENTITY/PROJECT
    state: Literal["running", "finished", "crashed", "failed", "killed"] = "running"
    tags: list[str] = []

    @field_validator("project")
    @classmethod
    def _entity_project(cls, value: str) -> str:
        if not re.fullmatch(r"[^/\s]+/[^/\s]+", value):
            raise ValueError("expected ENTITY/PROJECT, e.g. my-team/rl-runs")
        return value


class Target(_Model):
    """What to watch: one `source`, every run matching `glob`, or a run filter of a source
    family (`wandb`, `tensorboard`, `mlflow`, `prometheus`)."""

    name: str | None = None
    # an empty one named the working directory (or nothing: exit 70 at discovery)
    source: str | None = Field(default=None, min_length=1, pattern=r"\S")
    glob: str | None = Field(default=None, min_length=1, pattern=r"\S")
    wandb: WandbFilter | None = None
    tensorboard: TensorBoardFilter | None = None
    mlflow: MlflowFilter | None = None
    prometheus: PrometheusFilter | None = None
    # an empty path was the config's own folder, every YAML file in it loaded as a policy
    policies: list[Annotated[str, Field(min_length=1, pattern=r"\S")]] = Field(min_length=1)
    interval: PositiveDuration | None = None
    tags: list[str] = []  # added to every run of this target
    # run filters of source families added as packages (SourceFamily.target_model), by
    # their target key; filled from the target's own keys, never written directly
    other_filters: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _other_families(cls, data: Any) -> Any:
        """Keys that are another family's target key go to `other_filters`, validated by
        that family's model; any other unknown key stays and is refused as usual."""
        if not isinstance(data, dict):
            return data
        if "other_filters" in data:
            raise ValueError("other_filters is not a target field")
        models = _other_target_models()
        found = {k: v for k, v in data.items() if k in models}
        if not found:
            return data
        rest = {k: v for k, v in data.items() if k not in found}
        filters = {}
        for key, value in found.items():
            try:
                filters[key] = models[key].model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in (key, *first["loc"]))
                raise ValueError(f"{where}: {first['msg']}") from None
        return {**rest, "other_filters": filters}

    @model_validator(mode="after")
    def _one_kind(self) -> Target:
        kinds = (self.source, self.glob, self.wandb, *self.family_filters())
        if sum(x is not None for x in kinds) != 1:
            raise ValueError(
                "a target has exactly one of source:, glob: or wandb: (or one run filter "
                "of another family: tensorboard:, mlflow:, prometheus:"
                + "".join(f", {k}:" for k in sorted(_other_target_models()))
                + ")"
            )
        return self

    def family_filters(self) -> tuple[Any, ...]:
        """The filters whose family lists its runs itself (`runs()`, `describe()`)."""
        return (self.tensorboard, self.mlflow, self.prometheus, *self.other_filters.values())

    def filter_of(self, key: str) -> Any:
        """The value under a family's target key (`glob`, `wandb`, ... or another's)."""
        return self.other_filters.get(key, getattr(self, key, None))


def _other_target_models() -> dict[str, Any]:
    """Target keys of source families that declare their own filter model."""
    from gatekeeper.sources import FAMILIES

    return {
        f.target_key: f.target_model
        for f in FAMILIES
        if f.target_key is not None and f.target_model is not None
    }


class HttpSettings(_Model):
    address: str = "127.0.0.1"
    port: int = Field(default=9464, ge=0, le=65535)
    token_env: str | None = None  # bearer token for /metrics and /api when set
    # A connection must send its request within this, and its answer is written within
    # it again: idle and trickling clients are closed instead of holding resources.
    request_timeout: Annotated[float, BeforeValidator(seconds), Field(gt=0, le=300)] = 10.0
    max_connections: int = Field(default=1024, ge=1, le=65536)  # then the oldest is closed
    workers: int = Field(default=4, ge=1, le=64)  # threads answering complete requests

    def is_loopback(self) -> bool:
        if self.address == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return False

    def token(self) -> str | None:
        return os.environ.get(self.token_env) if self.token_env else None


class DaemonConfig(_Model):
    version: Literal[1] = 1
    state: str = "gatekeeper-state.db"
    http: HttpSettings = HttpSettings()
    poll: PollSettings = PollSettings()
    metrics: MetricsSettings = MetricsSettings()  # what /metrics holds (exporter.py)
    targets: list[Target] = Field(min_length=1)
    notifiers: list[NotifierEntry] = []  # each validated by its kind's settings model
    file: str = ""  # where it was read from (set by the loader)

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str) -> str:
        dburl.parse(value)  # a ValueError names what is accepted
        return value

    @model_validator(mode="after")
    def _unique(self) -> DaemonConfig:
        names = [n.name for n in self.notifiers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"notifier names must be unique, repeated: {', '.join(sorted(dup))}")
        return self


def load_config(path: str) -> DaemonConfig:
    """Read and validate a daemon config; relative paths resolve against its directory."""
    shown = display_path(path)
    try:
        tree = read_yaml(path, "config")
        raw = to_plain(tree, shown)
    except PolicyError as exc:
        raise ConfigError(str(exc).replace("cannot read policy", "cannot read config")) from None
    if not is_mapping(tree):
        raise ConfigError(f"{shown}:1: a daemon config is a YAML mapping (state, targets, ...)")
    raw.pop("file", None)
    try:
        config = DaemonConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(str(validation_error(exc, tree, shown))) from None
    config = _resolve(config, os.path.dirname(os.path.abspath(path)), shown)
    _check_listener(config, tree, shown)
    return config


def _resolve(config: DaemonConfig, base: str, shown: str) -> DaemonConfig:
    def at(p: str) -> str:
        p = os.path.expanduser(p)
        return p if os.path.isabs(p) or "://" in p else os.path.normpath(os.path.join(base, p))

    targets = [
        t.model_copy(
            update={
                "source": at(t.source) if t.source else None,
                "glob": at(t.glob) if t.glob else None,
                "tensorboard": t.tensorboard.model_copy(
                    update={"logdir": at(t.tensorboard.logdir)}
                ) if t.tensorboard else None,
                "policies": [at(p) for p in t.policies],
            }
        )
        for t in config.targets
    ]
    state = _state(config.state, at)
    http = config.http
    if os.environ.get("GATEKEEPER_HTTP_ADDRESS"):
        http = http.model_copy(update={"address": os.environ["GATEKEEPER_HTTP_ADDRESS"]})
    return config.model_copy(
        update={"targets": targets, "state": state, "http": http, "file": shown}
    )


def _state(value: str, at: Callable[[str], str]) -> str:
    """The state store: a PostgreSQL URL as given, or the SQLite file's path (relative to
    the config file; GATEKEEPER_STATE, when set, wins and is taken as given)."""
    env = os.environ.get("GATEKEEPER_STATE")
    try:
        url = dburl.parse(env or value)
    except ValueError as exc:
        raise ConfigError(f"environment variable GATEKEEPER_STATE: {exc}") from None
    if url.engine == "postgresql":
        return url.url
    return url.path if env else at(url.path)


def _check_listener(config: DaemonConfig, tree: Any, shown: str) -> None:
    http = config.http
    if http.is_loopback():
        return
    line = line_of(tree, ("http", "address"))
    where = f"{shown}:{line}" if line else shown
    if not http.token_env:
        raise ConfigError(
            f"{where}: http.address {http.address} is not a loopback address; set "
            "http.token_env to the environment variable holding a bearer token"
        )
    if not http.token():
        raise ConfigError(
            f"{where}: http.address {http.address} needs a bearer token but environment "
            f"variable {http.token_env} is not set"
        )
