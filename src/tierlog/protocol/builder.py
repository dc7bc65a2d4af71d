"""Build kio message objects of any version from plain Python values.

kio's dataclasses are frozen, keyword-only and version-specific: Metadata v0's topic has no
``topic_id``, Fetch v13+ has no topic ``name``, ``*Ms`` fields are ``timedelta`` named without
``_ms``, timestamps are timezone-aware ``datetime``, error codes are ``ErrorCode``. A handler that
answers many versions describes its answer once as nested dicts/lists, and :func:`build` turns
that into the class of the version at hand:

- keys the version does not have are dropped, so one description serves every version. With
  ``TIERLOG_CHECK_FIELDS=1`` in the environment (the test suite sets it) a key that no version of the
  message has raises ``TypeError`` (a typo); that check imports every version of the message, 0.1-0.4 s
  for a fresh broker's first Metadata answer, so a broker in service skips it. ``strict=True`` rejects
  anything this version lacks;
- fields not given keep kio's default (Kafka's JSON default) or, without one, are zero-filled:
  0, ``""``, ``b""``, ``()``, ``False``, ``ErrorCode.none``, zero UUID, ``timedelta(0)``, the epoch,
  nested structs built from ``{}``, nullable structs ``None``;
- values are converted by the field's type: ``int`` milliseconds to ``timedelta``; ``int``
  milliseconds since the epoch to ``datetime`` (-1 means null where nullable); ``int`` or a
  :class:`tierlog.errors.KafkaError` (class or instance) to ``ErrorCode``; ``str``/``bytes``/``int``
  to ``UUID``; lists and other iterables to tuples (to lists above 32768 items, which
  :func:`tierlog.protocol.offload.dismantle` can free in slices); dicts (or kio objects of another version) to
  the nested class. Integers are range-checked against their wire type.
- ``throttle_time_ms`` is accepted for ``throttle_time`` (Kafka's name for ``*Ms`` fields).

Values of the right kio type pass through unchanged; records may be any bytes-like object and
are not copied.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import os
import re
import typing
import uuid
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any, TypeVar, Union

from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.static.primitive import (
    Interval,
    Records,
    TZAware,
    TZAwareMicros,
    f64,
    i32Timedelta,
    i64Timedelta,
)

from tierlog.protocol._bigread import SLICE

__all__ = ["build", "build_response", "zero_value"]

E = TypeVar("E")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ZERO_UUID = uuid.UUID(int=0)
_MISSING = dataclasses.MISSING
_MODULE = re.compile(r"^kio\.schema\.(\w+)\.v(\d+)\.(\w+)$")
#: Whether a key this version lacks is looked up in the other versions (see the module doc).
CHECK_FIELDS = os.environ.get("TIERLOG_CHECK_FIELDS") == "1"


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _subclass(tp: Any, base: type) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)


# -- converters -----------------------------------------------------------------------------------

def _timedelta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    if isinstance(value, int | float):
        return datetime.timedelta(milliseconds=value)
    raise TypeError(f"expected milliseconds or timedelta, got {value!r}")


def _datetime(optional: bool) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        if value is None or (optional and value == -1):
            if optional:
                return None
            raise TypeError("None for a non-nullable timestamp")
        if isinstance(value, int):
            return _EPOCH + datetime.timedelta(milliseconds=value)
        raise TypeError(f"expected epoch milliseconds or datetime, got {value!r}")

    return convert


def _error_code(value: Any) -> ErrorCode:
    if isinstance(value, ErrorCode):
        return value
    if isinstance(value, int):
        return ErrorCode(value)
    code = getattr(value, "code", None)  # tierlog.errors.KafkaError class or instance
    if isinstance(code, int):
        return ErrorCode(code)
    raise TypeError(f"expected an error code, got {value!r}")


def _uuid(optional: bool) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, uuid.UUID):
            return value
        if value is None:
            return None if optional else _ZERO_UUID
        if isinstance(value, str):
            return uuid.UUID(value)
        if isinstance(value, bytes | bytearray):
            return uuid.UUID(bytes=bytes(value))
        if isinstance(value, int):
            return uuid.UUID(int=value)
        raise TypeError(f"expected a UUID, got {value!r}")

    return convert


def _interval(tp: type[Interval]) -> Callable[[Any], Any]:
    low, high = tp.__low__, tp.__high__

    def convert(value: Any) -> Any:
        if type(value) is not int:
            if not isinstance(value, int):
                raise TypeError(f"expected an integer, got {value!r}")
            value = int(value)
        if not low <= value <= high:
            raise ValueError(f"{value} out of range for {tp.__name__} [{low}, {high}]")
        return value

    return convert


def _identity(value: Any) -> Any:
    return value


def _nullable(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert_or_none(value: Any) -> Any:
        return None if value is None else convert(value)

    return convert_or_none


def _sequence(values: Any) -> tuple | list:
    """A tuple, or for more than ``SLICE`` items a list: :func:`tierlog.protocol.offload.dismantle`
    frees a big list a slice at a time, where freeing a big tuple holds the GIL for its whole length."""
    if type(values) is tuple and len(values) <= SLICE:
        return values
    items = list(values)
    return tuple(items) if len(items) <= SLICE else items


def _tuple_of(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if convert is _identity:
        return _sequence

    def convert_all(values: Any) -> tuple | list:
        items = list(map(convert, values))
        return tuple(items) if len(items) <= SLICE else items

    return convert_all


def _entity(tp: type) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if type(value) is tp:
            return value
        if isinstance(value, Mapping):
            return build(tp, value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # A kio object of another version (or any dataclass): rebuild field by field.
            as_dict = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return build(tp, as_dict, _lenient=True)
        raise TypeError(f"expected a mapping for {tp.__qualname__}, got {value!r}")

    return convert


def _converter(tp: Any, optional: bool) -> Callable[[Any], Any]:
    """Converter for one field value of (unwrapped) type ``tp``."""
    if typing.get_origin(tp) is tuple:
        inner, _inner_optional = _unwrap(typing.get_args(tp)[0])
        convert = _tuple_of(_converter(inner, False))
    elif dataclasses.is_dataclass(tp):
        convert = _entity(tp)
    elif _subclass(tp, ErrorCode):
        convert = _error_code
    elif _subclass(tp, i32Timedelta) or _subclass(tp, i64Timedelta):
        convert = _timedelta
    elif _subclass(tp, TZAware) or _subclass(tp, TZAwareMicros) or _subclass(tp, datetime.datetime):
        return _datetime(optional)
    elif _subclass(tp, uuid.UUID):
        return _uuid(optional)
    elif _subclass(tp, Interval):
        convert = _interval(tp)
    elif _subclass(tp, f64):
        convert = float
    elif tp is bool:
        convert = bool
    else:  # str and its phantoms, bytes, Records
        convert = _identity
    return _nullable(convert) if optional and convert is not _identity else convert


def zero_value(tp: Any) -> Any:
    """Kafka's implicit default for a field of type ``tp`` (used for fields a caller leaves out)."""
    tp, optional = _unwrap(tp)
    if typing.get_origin(tp) is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return None if optional else build(tp)
    if _subclass(tp, ErrorCode):
        return ErrorCode.none
    if _subclass(tp, i32Timedelta) or _subclass(tp, i64Timedelta):
        return datetime.timedelta(0)
    if _subclass(tp, TZAware) or _subclass(tp, TZAwareMicros) or _subclass(tp, datetime.datetime):
        return _EPOCH
    if _subclass(tp, uuid.UUID):
        return _ZERO_UUID
    if _subclass(tp, Interval):
        return 0
    if _subclass(tp, f64):
        return 0.0
    if tp is bool:
        return False
    if _subclass(tp, Records) or _subclass(tp, bytes):
        return b""
    if _subclass(tp, str):
        return ""
    raise TypeError(f"no zero value for {tp!r}")


# -- plans ----------------------------------------------------------------------------------------

_TIME_KINDS = ("timedelta_i32", "timedelta_i64", "datetime_i64")


class _Plan:
    __slots__ = ("cls", "converters", "aliases", "required", "_other_versions", "_zeros")

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        self.cls = cls
        self.converters: dict[str, Callable[[Any], Any]] = {}
        self.aliases: dict[str, str] = {}
        self.required: list[tuple[str, Any]] = []  # (name, type) of fields without a default
        for f in dataclasses.fields(cls):
            tp, optional = _unwrap(hints[f.name])
            self.converters[f.name] = _converter(tp, optional)
            if f.metadata.get("kafka_type") in _TIME_KINDS:
                self.aliases[f.name + "_ms"] = f.name
            if f.default is _MISSING and f.default_factory is _MISSING:
                self.required.append((f.name, hints[f.name]))
        self._other_versions: frozenset[str] | None = None
        self._zeros: dict[str, Any] | None = None

    @property
    def other_versions(self) -> frozenset[str]:
        """Names of the other versions' fields, read only when a key is not this version's: finding them
        imports every version of the message (hundreds of ms for Fetch), which a process whose requests all
        fit their version never needs."""
        if self._other_versions is None:
            self._other_versions = _names_in_other_versions(self.cls)
        return self._other_versions

    def zeros(self) -> dict[str, Any]:
        if self._zeros is None:  # lazily: nested zero structs build through their own plans
            self._zeros = {name: zero_value(tp) for name, tp in self.required}
        return self._zeros


def _names_in_other_versions(cls: type) -> frozenset[str]:
    """Field names (and ``_ms`` aliases) of the same class in every version of its message."""
    match = _MODULE.match(cls.__module__)
    if not match:
        return frozenset()
    api, _version, kind = match.groups()
    names: set[str] = set()
    for version in schema_name_map.get(api, {}):
        try:
            module = importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")
        except ImportError:
            continue
        other = getattr(module, cls.__qualname__, None)
        if other is None or not dataclasses.is_dataclass(other):
            continue
        for f in dataclasses.fields(other):
            names.add(f.name)
            if f.metadata.get("kafka_type") in _TIME_KINDS:
                names.add(f.name + "_ms")
    return frozenset(names)


_plans: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a kio entity class")
        plan = _plans[cls] = _Plan(cls)
    return plan


def build(cls: type[E], values: Mapping[str, Any] | None = None, /, *, strict: bool = False,
          _lenient: bool = False, **fields: Any) -> E:
    """An instance of kio class ``cls`` from ``values`` and/or keyword ``fields`` (see module doc)."""
    plan = _plans.get(cls) or _plan(cls)
    if values is None:
        values = fields
    elif fields:
        values = {**values, **fields}
    converters = plan.converters
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        convert = converters.get(key)
        if convert is None:
            name = plan.aliases.get(key)
            if name is not None:
                convert = converters[name]
                key = name
            else:
                if strict or (CHECK_FIELDS and not _lenient and key not in plan.other_versions):
                    raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no field {key!r}")
                continue
        try:
            kwargs[key] = convert(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{cls.__qualname__}.{key}: {exc}") from exc
    if len(kwargs) < len(converters):
        for name, zero in plan.zeros().items():
            if name not in kwargs:
                kwargs[name] = zero
    return cls(**kwargs)


def build_response(ctx_or_type: Any, values: Mapping[str, Any] | None = None, /, *, strict: bool = False,
                   **fields: Any) -> Any:
    """The response for a :class:`~tierlog.protocol.messages.RequestContext` (or a response class)."""
    cls = getattr(ctx_or_type, "response_type", ctx_or_type)
    return build(cls, values, strict=strict, **fields)
