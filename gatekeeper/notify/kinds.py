"""The notifier kinds, by the `kind:` a daemon config names: the built-in ones (every
module of notify/ that defines one), plus any a third-party package adds through the
`gatekeeper.notifiers` entry point (the one registry every pluggable kind uses); and
`NotifierEntry`, a `notifiers:` entry validated by the settings model of its kind.

The modules form a DAG: settings.py (the data) <- base.py (the contract) <- kinds.py
(the registry, and the validation that needs it), so the settings never look a kind up.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

from gatekeeper.errors import ConfigError
from gatekeeper.notify.base import Notifier
from gatekeeper.notify.settings import NotifierSettings
from gatekeeper.registry import Registry, scan_package, subclass_of


def _builtins() -> dict[str, type[Notifier]]:
    """Every module of this package defining a Notifier with a `kind` (lark.py, slack.py,
    webhook.py): a new notifier kind is one new module, nothing else."""
    return scan_package("gatekeeper.notify", Notifier)


NOTIFIERS: Registry[type[Notifier]] = Registry("notifier", _builtins, subclass_of(Notifier))


def notifier_kind(kind: str) -> type[Notifier]:
    """The Notifier class of a config `kind`; ValueError naming the known kinds."""
    found = NOTIFIERS.get(kind)
    if found is None:
        raise ValueError(f"unknown notifier kind {kind!r}; known: {', '.join(NOTIFIERS.names())}")
    return found


def _of_its_kind(value: Any, handler: ValidatorFunctionWrapHandler) -> NotifierSettings:
    """Validate an entry with the settings model of its `kind:` (errors stay located at
    the entry; an unknown kind at its `kind`, naming the known kinds; a kind without
    fields of its own: the common model), then the kind's own `check_settings`."""
    if isinstance(value, NotifierSettings):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "model_type", "Input should be a valid dictionary or instance of Notifier"
        )
    kind = value.get("kind")
    try:
        found = notifier_kind(kind) if isinstance(kind, str) else None
    except ValueError as exc:
        raise ValidationError.from_exception_data(
            "NotifierSettings",
            [{"type": "value_error", "loc": ("kind",), "input": kind, "ctx": {"error": exc}}],
        ) from None
    model = found.settings_model if found is not None else None
    if model is None or model is NotifierSettings:
        settings: NotifierSettings = handler(value)
    elif isinstance(model, type) and issubclass(model, NotifierSettings):
        settings = model.model_validate(value)
    else:
        raise ConfigError(
            f"notifier kind {kind!r}: its settings_model {model!r} is not a "
            "gatekeeper.notify.NotifierSettings subclass"
        )
    if found is not None:
        found.check_settings(settings)  # ValueError: shown at the entry's line
    return settings


# A `notifiers:` item of the daemon config: validated by the settings model of its kind.
NotifierEntry = Annotated[NotifierSettings, WrapValidator(_of_its_kind)]
