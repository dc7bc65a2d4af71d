"""Array-length guard run before kio's native reader.

kio 0.6.5's Rust reader reserves ``Vec::with_capacity(n)`` for an array whose length ``n`` comes
straight from the wire. A compact array can announce up to 2**35 elements in five bytes; the
allocation fails and Rust aborts the whole process (no Python exception). A 9-byte Metadata v12
body is enough. Kafka's own parser rejects an array longer than the bytes that remain.

This module does the same check before handing bytes to kio: for each entity class it generates
(once, with ``exec``) a small Python function that walks the wire layout, skipping fixed-size
fields, strings and bytes by their length prefixes, and raises :class:`ArrayTooLong` when an
array announces more elements than bytes remain, or more than Kafka 4.4's readers accept (a million
elements; 10,000 tagged fields in one section). It builds no objects, so it costs a fraction of
the decode. It does not validate anything else: kio reports all other malformations.
"""

from __future__ import annotations

import dataclasses
import struct
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

__all__ = ["ArrayTooLong", "guard_for"]


# Kafka 4.4's generated readers refuse a collection of more than a million elements and a tagged-field
# section of more than 10,000 fields, whatever bytes remain (the broker closes the connection); so does the guard
MAX_ARRAY_ELEMENTS = 1_000_000
MAX_TAGGED_FIELDS = 10_000


class ArrayTooLong(ValueError):
    """An array announces more elements than there are bytes left in the frame."""


_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = {"string", "bytes", "records"}

_i16 = struct.Struct(">h").unpack_from
_i32 = struct.Struct(">i").unpack_from


def _uvarint(b, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: (value, position after it)."""
    value = 0
    shift = 0
    while True:
        c = b[pos]
        pos += 1
        value |= (c & 0x7F) << shift
        if not c & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ArrayTooLong("varint too long")


def _skip_tags(b, pos: int, walkers: dict) -> int:
    """Skip a tagged-field section starting at ``pos`` (its count varint)."""
    count, pos = _uvarint(b, pos)
    if count > len(b) - pos:
        raise ArrayTooLong(f"{count} tagged fields announced, {len(b) - pos} bytes left")
    if count > MAX_TAGGED_FIELDS:
        raise ArrayTooLong(f"{count} tagged fields exceed the maximum of {MAX_TAGGED_FIELDS}")
    for _ in range(count):
        tag, pos = _uvarint(b, pos)
        size, pos = _uvarint(b, pos)
        walker = walkers.get(tag)
        if walker is not None:
            walker(b, pos)
        pos += size
    return pos


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


class _Gen:
    """Generates the walker source for one entity class and everything it contains."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[tuple[type, bool], str] = {}  # entity functions already generated
        self.namespace: dict[str, Any] = {
            "_uv": _uvarint, "_i16": _i16, "_i32": _i32, "_skip_tags": _skip_tags, "_TooLong": ArrayTooLong,
        }
        self.fixed_size_cache: dict[type, int | None] = {}
        self.tag_maps: list[dict] = []
        self.counter = 0

    # -- sizes ------------------------------------------------------------------------------
    def fixed_size(self, cls: type) -> int | None:
        """Wire size of a non-flexible entity made only of fixed-size fields, else None."""
        if cls in self.fixed_size_cache:
            return self.fixed_size_cache[cls]
        size: int | None = 0
        if cls.__flexible__:
            size = None
        else:
            for f in dataclasses.fields(cls):
                tp, optional = _unwrap_optional(f.type)
                kt = f.metadata.get("kafka_type")
                if get_origin(tp) is tuple or dataclasses.is_dataclass(tp) or kt not in _FIXED:
                    size = None
                    break
                size += _FIXED[kt]
        self.fixed_size_cache[cls] = size
        return size

    # -- code generation --------------------------------------------------------------------
    def entity(self, cls: type) -> str:
        """Name of a function ``(b, pos) -> pos`` walking one ``cls``; nested entities are inlined."""
        key = (cls, False)
        if key in self.names:
            return self.names[key]
        self.counter += 1
        name = f"_w{self.counter}_{cls.__name__}"
        self.names[key] = name
        body = self.entity_lines(cls, nullable=False)
        self.lines += [f"def {name}(b, pos):", "    end = len(b)"]
        self.lines += ["    " + line for line in body]
        self.lines.append("    return pos")
        self.lines.append("")
        return name

    def entity_lines(self, cls: type, nullable: bool) -> list[str]:
        """Statements advancing ``pos`` over one ``cls`` (inlined into the caller)."""
        body: list[str] = []
        pending_fixed = 0
        tagged: list[tuple[int, dataclasses.Field]] = []
        for f in dataclasses.fields(cls):
            tag = f.metadata.get("tag")
            if tag is not None:
                tagged.append((int(tag), f))
                continue
            size = self._fixed_field_size(f)
            if size is not None:
                pending_fixed += size
                continue
            if pending_fixed:
                body.append(f"pos += {pending_fixed}")
                pending_fixed = 0
            body += self.field(f, cls.__flexible__, is_tag=False)
        if pending_fixed:
            body.append(f"pos += {pending_fixed}")
        if cls.__flexible__:
            walkers = {}
            for tag, f in tagged:
                if self._fixed_field_size(f) is None:
                    walkers[tag] = self.value_walker(f, flexible=True)
            self.counter += 1
            tag_map = f"_t{self.counter}_{cls.__name__}"
            self.namespace[tag_map] = walkers  # names now, functions once the source is executed
            self.tag_maps.append(walkers)
            body += [
                "if b[pos]:",
                f"    pos = _skip_tags(b, pos, {tag_map})",
                "else:",
                "    pos += 1",
            ]
        if nullable:  # KIP-893 marker: -1 for null, 1 for present
            return ["n = b[pos]", "pos += 1", "if n != 0xFF:"] + ["    " + line for line in body or ["pass"]]
        return body

    def _fixed_field_size(self, f: dataclasses.Field) -> int | None:
        tp, _optional = _unwrap_optional(f.type)
        if get_origin(tp) is tuple or dataclasses.is_dataclass(tp):
            return None
        return _FIXED.get(f.metadata.get("kafka_type"))

    def value_walker(self, f: dataclasses.Field, flexible: bool) -> str:
        """A function walking one (tagged) field value; returns its name."""
        self.counter += 1
        name = f"_v{self.counter}_{f.name}"
        body = self.field(f, flexible, is_tag=True)  # may emit nested walkers first
        self.lines += [f"def {name}(b, pos):", "    end = len(b)"]
        self.lines += ["    " + line for line in body]
        self.lines.append("    return pos")
        self.lines.append("")
        return name

    def field(self, f: dataclasses.Field, flexible: bool, is_tag: bool) -> list[str]:
        tp, optional = _unwrap_optional(f.type)
        nullable_array = optional or is_tag
        if is_tag:
            optional = False  # tagged fields carry no nullability marker (kio, KIP-893)
        if get_origin(tp) is tuple:
            (inner,) = [a for a in get_args(tp) if a is not Ellipsis]
            return self.array(inner, f.metadata.get("kafka_type"), flexible, nullable_array)
        if dataclasses.is_dataclass(tp):
            return self.entity_lines(tp, nullable=optional)
        return self.primitive(f.metadata.get("kafka_type"), flexible)

    @staticmethod
    def primitive(kafka_type: str | None, flexible: bool) -> list[str]:
        if kafka_type in _FIXED:
            return [f"pos += {_FIXED[kafka_type]}"]
        if kafka_type not in _VARIABLE:
            raise TypeError(f"unknown kafka_type {kafka_type!r}")
        if flexible:
            return [
                "n = b[pos]",
                "if n < 0x80:",
                "    pos += n if n else 1",
                "else:",
                "    n, pos = _uv(b, pos)",
                "    pos += n - 1",
            ]
        if kafka_type == "string":
            return ["n = _i16(b, pos)[0]", "pos += 2 + n if n > 0 else 2"]
        return ["n = _i32(b, pos)[0]", "pos += 4 + n if n > 0 else 4"]

    def array(self, inner: type, kafka_type: str | None, flexible: bool, nullable: bool = True) -> list[str]:
        if flexible:
            lines = [
                "n = b[pos]",
                "if n < 0x80:",
                "    pos += 1",
                "else:",
                "    n, pos = _uv(b, pos)",
                "n -= 1",
            ]
        else:
            lines = ["n = _i32(b, pos)[0]", "pos += 4"]
        lines += [
            "if n > end - pos:",
            "    raise _TooLong(f'array of {n} elements announced, {end - pos} bytes left')",
            f"if n > {MAX_ARRAY_ELEMENTS}:",
            f"    raise _TooLong(f'array of {{n}} elements exceeds the maximum of {MAX_ARRAY_ELEMENTS}')",
        ]
        if not nullable:  # kio would read null, and handlers would trip over it
            lines += ["if n < 0:", "    raise _TooLong('null for an array that cannot be null')"]
        if dataclasses.is_dataclass(inner):
            size = self.fixed_size(inner)
            if size is not None:
                lines += ["if n > 0:", f"    pos += n * {size}"]
            else:
                lines += ["for _ in range(n):"] + ["    " + x for x in self.entity_lines(inner, False)]
        elif kafka_type in _FIXED:
            lines += ["if n > 0:", f"    pos += n * {_FIXED[kafka_type]}"]
        else:
            lines += ["for _ in range(n):"] + ["    " + x for x in self.primitive(kafka_type, flexible)]
        return lines


_cache: dict[type, Any] = {}


def guard_for(cls: type):
    """The guard function ``guard(buffer, offset)`` for an entity class (generated once)."""
    fn = _cache.get(cls)
    if fn is None:
        gen = _Gen()
        root = gen.entity(cls)
        namespace = gen.namespace
        exec("\n".join(gen.lines), namespace)  # noqa: S102 - source generated from kio's schema above
        for walkers in gen.tag_maps:
            for tag, walker_name in list(walkers.items()):
                walkers[tag] = namespace[walker_name]
        fn = namespace[root]
        fn.__doc__ = f"Array-length guard for {cls.__module__}.{cls.__qualname__}"
        _cache[cls] = fn
    return fn
