"""Judging state as plain data: numbers, strings, lists and string-keyed mappings, for
JSON. Decoding is driven by the declared type of each field, so a stored state can only
ever become the numbers, arrays and small records the engine itself declares — a
tampered payload fails with `StateDataError` saying where, it is never executed.

Arrays are `{"dtype": "i8"|"f8"|"b1", "b64": "..."}`: base64 of the little-endian
values (a poll saves its state each time: number lists cost ~10x more to write and read).
Non-finite scalar floats are the strings "NaN", "Infinity", "-Infinity" (JSON has none).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

_DTYPES: dict[str, np.dtype[Any]] = {
    "i8": np.dtype("<i8"),
    "f8": np.dtype("<f8"),
    "b1": np.dtype("u1"),  # bytes 0/1, checked on decode
}
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class StateDataError(ValueError):
    """A stored state does not have the shape its type declares."""


# ---- encoding ---------------------------------------------------------------------------
def encode(value: Any) -> Any:
    """Plain JSON data for a value of a declared state type."""
    kind = type(value)  # the commonest exact types first: the daemon encodes on every poll
    if kind in _AS_IS:
        return value
    if kind is float:
        return _float_out(value)
    if isinstance(value, np.ndarray):
        return _array_out(value)
    if value is None or isinstance(value, (bool, str, int)) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (float, np.floating)):
        return _float_out(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [encode(v) for v in items]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: encode(getattr(value, name)) for name in _field_names(kind)}
    raise TypeError(f"{type(value).__name__} is not state data")


_AS_IS = frozenset({int, str, bool, type(None)})  # exactly these (not enums, not numpy's)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # a state dataclass -> its fields' names


def _field_names(cls: type) -> tuple[str, ...]:
    """`dataclasses.fields(cls)`'s names, found once per class (fields() builds them on
    each call)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _float_out(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


_ARRAY_KINDS = {"i": "i8", "u": "i8", "f": "f8", "b": "b1"}  # numpy's dtype.kind -> ours


def _array_out(a: np.ndarray) -> dict[str, Any]:
    kind = _ARRAY_KINDS.get(a.dtype.kind)
    if kind is None:
        raise TypeError(f"array of {a.dtype} is not state data")
    if not a.size:  # a mask check's lead-in without a window: on every poll
        return {"dtype": kind, "b64": ""}
    raw = np.ascontiguousarray(a.ravel(), dtype=_DTYPES[kind]).tobytes()
    return {"dtype": kind, "b64": base64.b64encode(raw).decode("ascii")}


# ---- decoding ---------------------------------------------------------------------------
def decode(data: Any, hint: Any, where: str = "state") -> Any:
    """The value of type `hint` that `data` encodes; StateDataError when it does not."""
    origin = typing.get_origin(hint)
    if hint is Any:
        raise StateDataError(f"{where}: untyped field")  # never guess a type from data
    if origin in (typing.Union, types.UnionType):
        return _union(data, typing.get_args(hint), where)
    if hint is type(None):
        return _expect(data is None, data, where, "null")
    if hint is bool:
        return _expect(isinstance(data, bool), data, where, "a boolean")
    if hint is int:
        exact = isinstance(data, int) and not isinstance(data, bool)
        return _expect(exact, data, where, "an integer")
    if hint is float:
        return _float_in(data, where)
    if hint is str:
        return _expect(isinstance(data, str), data, where, "a string")
    if hint is np.ndarray:
        return _array_in(data, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise StateDataError(f"{where}: {data!r} is not a {hint.__name__}") from None
    if origin in (list, tuple, set, dict):
        return _container(data, origin, typing.get_args(hint), where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode_record(data, hint, where)
    raise StateDataError(f"{where}: type {hint!r} cannot be restored")


def decode_record(data: Any, cls: type, where: str) -> Any:
    """A dataclass from a mapping holding exactly its fields."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    fields = decode_fields(data, {n: hints[n] for n in names}, where)
    return cls(**fields)


def decode_fields(data: Any, hints: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A mapping with exactly the keys of `hints`, each decoded to its type."""
    if not isinstance(data, dict):
        raise StateDataError(f"{where}: expected a mapping, found {type(data).__name__}")
    if set(data) != set(hints):
        extra, missing = sorted(set(data) - set(hints)), sorted(set(hints) - set(data))
        raise StateDataError(f"{where}: unexpected keys {extra}, missing keys {missing}")
    return {k: decode(data[k], h, f"{where}.{k}") for k, h in hints.items()}


def _expect(ok: bool, data: Any, where: str, what: str) -> Any:
    if not ok:
        raise StateDataError(f"{where}: expected {what}, found {_show(data)}")
    return data


def _show(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 40 else text[:37] + "..."


def _float_in(data: Any, where: str) -> float:
    if isinstance(data, str) and data in _NONFINITE:
        return _NONFINITE[data]
    _expect(isinstance(data, (int, float)) and not isinstance(data, bool), data, where, "a number")
    return float(data)


def _array_in(data: Any, where: str) -> np.ndarray:
    if not isinstance(data, dict) or set(data) != {"dtype", "b64"}:
        raise StateDataError(f"{where}: expected an array {{dtype, b64}}, found {_show(data)}")
    kind, text = data["dtype"], data["b64"]
    if kind not in _DTYPES or not isinstance(text, str):
        raise StateDataError(f"{where}: bad array dtype {kind!r} or data")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StateDataError(f"{where}: array data is not base64") from None
    dtype = _DTYPES[kind]
    if len(raw) % dtype.itemsize:
        raise StateDataError(f"{where}: array data is not whole {kind} values")
    values = np.frombuffer(raw, dtype=dtype)
    if kind == "b1":
        if values.size and values.max() > 1:
            raise StateDataError(f"{where}: a boolean array holds a value other than 0/1")
        return values.astype(np.bool_)
    return values.astype(dtype.newbyteorder("="))  # a writable, native-order copy


def _union(data: Any, options: tuple[Any, ...], where: str) -> Any:
    if data is None and type(None) in options:
        return None
    errors = []
    for opt in options:
        if opt is type(None):
            continue
        try:
            return decode(data, opt, where)
        except StateDataError as exc:
            errors.append(str(exc))
    raise StateDataError(errors[0] if len(errors) == 1 else f"{where}: matches no declared type")


def _container(data: Any, origin: type, args: tuple[Any, ...], where: str) -> Any:
    if origin is dict:
        if not isinstance(data, dict):
            raise StateDataError(f"{where}: expected a mapping, found {_show(data)}")
        return {str(k): decode(v, args[1], f"{where}.{k}") for k, v in data.items()}
    if not isinstance(data, list):
        raise StateDataError(f"{where}: expected a list, found {_show(data)}")
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(data) != len(args):
            raise StateDataError(f"{where}: expected {len(args)} items, found {len(data)}")
        pairs = enumerate(zip(data, args, strict=True))
        return tuple(decode(v, h, f"{where}[{i}]") for i, (v, h) in pairs)
    item = args[0]
    items = [decode(v, item, f"{where}[{i}]") for i, v in enumerate(data)]
    return origin(items) if origin is not list else items
