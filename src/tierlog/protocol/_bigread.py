"""A reader for big request bodies that never holds the GIL for long.

kio's native ``entity_reader`` decodes a whole request in one call and holds the GIL throughout: a
16 MB OffsetFetch (4 million partition indexes) takes 250-400 ms, during which no other thread, the
event loop's included, runs a single bytecode. This reader produces the same kio objects, but splits
the work into many short native calls:

- fields that are not arrays (and structs without arrays inside) are read by kio's own field
  readers (``get_field_reader``), one call each;
- an array of structs without arrays is read one element at a time by kio's ``entity_reader`` for
  the element class; an array of structs with arrays inside is walked recursively;
- an array of fixed-size integers is unpacked with :mod:`struct` in slices of :data:`SLICE` items,
  other primitive arrays one element at a time.

Arrays longer than :data:`SLICE` come back as lists rather than tuples (kio's writers and the
handlers only need a sequence), so they can be freed a slice at a time too.

Between two native calls the interpreter can switch threads (``sys.getswitchinterval()``, 1 ms in the broker), so
running :func:`big_reader` in a worker thread leaves the event loop responsive. Callers run the
array-length guard first (:mod:`tierlog.protocol._guard`), which bounds every array by the bytes that
remain, as kio's own reader needs too.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio._kio_native import entity_reader, get_field_reader, get_reader, read_unsigned_varint

__all__ = ["SLICE", "big_reader", "read_body"]

#: Integers unpacked per native call (about 0.3 ms of work).
SLICE = 32768

_INT_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q",
                "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q"}
_i32 = struct.Struct(">i").unpack_from

Reader = Callable[[Any, int], tuple[Any, int]]


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _array_inner(tp: Any) -> Any | None:
    """The element type of a ``tuple[X, ...]`` field type (possibly optional), else None."""
    tp, _ = _unwrap(tp)
    if get_origin(tp) is tuple:
        inner = [a for a in get_args(tp) if a is not Ellipsis]
        return _unwrap(inner[0])[0]
    return None


_has_arrays_cache: dict[type, bool] = {}


def _has_arrays(cls: type) -> bool:
    """Whether an entity class holds an array anywhere (so one kio call could read a big one)."""
    cached = _has_arrays_cache.get(cls)
    if cached is None:
        cached = False
        for f in dataclasses.fields(cls):
            if f.metadata.get("tag") is not None:
                continue  # tagged fields are read whole by kio; requests barely use them
            tp, _ = _unwrap(f.type)
            if _array_inner(f.type) is not None or (dataclasses.is_dataclass(tp) and _has_arrays(tp)):
                cached = True
                break
        _has_arrays_cache[cls] = cached
    return cached


def _array_length(flexible: bool) -> Reader:
    if flexible:
        def read(b, pos):
            n, size = read_unsigned_varint(b, pos)
            return n - 1, pos + size
    else:
        def read(b, pos):
            return _i32(b, pos)[0], pos + 4
    return read


def _array_reader(inner: Any, kafka_type: str, flexible: bool) -> Reader:
    read_length = _array_length(flexible)
    if dataclasses.is_dataclass(inner):
        return _items_reader(read_length, big_reader(inner) if _has_arrays(inner) else entity_reader(inner))
    code = _INT_FORMATS.get(kafka_type)
    if code is not None:
        size = struct.calcsize(code)

        def read_ints(b, start):
            n, pos = read_length(b, start)
            if n < 0:
                return None, pos - start
            if n * size > len(b) - pos:
                raise ValueError(f"array of {n} {kafka_type} announced, {len(b) - pos} bytes left")
            parts = []
            done = 0
            while done < n:
                k = min(SLICE, n - done)
                parts.append(struct.unpack_from(f">{k}{code}", b, pos))
                pos += k * size
                done += k
            if len(parts) <= 1:
                return (parts[0] if parts else ()), pos - start
            items = []
            for part in parts:
                items += part
            return items, pos - start

        return read_ints
    return _items_reader(read_length, get_reader(kafka_type, flexible, False))


def _items_reader(read_length: Reader, read_item: Reader) -> Reader:
    """An array read item by item (entities, strings, other non-integer primitives)."""
    def read_items(b, start):
        n, pos = read_length(b, start)
        if n < 0:
            return None, pos - start
        items = [None] * n
        for i in range(n):
            items[i], size = read_item(b, pos)
            pos += size
        return _seal(items), pos - start

    return read_items


def _nullable_struct(read: Reader) -> Reader:
    def read_nullable(b, pos):
        marker = b[pos]
        if marker == 0xFF:  # KIP-893: -1 for null
            return None, 1
        value, size = read(b, pos + 1)
        return value, size + 1
    return read_nullable


def _seal(items: list) -> tuple | list:
    """A tuple, as kio makes, for arrays up to :data:`SLICE` items; a big array stays a list, so that
    it can be freed a slice at a time (:func:`tierlog.protocol.offload.dismantle`): freeing a tuple of
    a million objects is one native call."""
    return tuple(items) if len(items) <= SLICE else items


_readers: dict[type, Reader] = {}


def big_reader(cls: type) -> Reader:
    """``read(buffer, offset) -> (entity, bytes read)`` for a kio entity class, like kio's
    ``entity_reader``, in short native calls."""
    read = _readers.get(cls)
    if read is None:
        read = _readers[cls] = _build(cls)
    return read


def _build(cls: type) -> Reader:
    flexible = cls.__flexible__
    steps: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for f in dataclasses.fields(cls):
        tag = f.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = (f.name, get_field_reader(cls, f, False, True))
            continue
        inner = _array_inner(f.type)
        tp, optional = _unwrap(f.type)
        if inner is not None:
            steps.append((f.name, _array_reader(inner, f.metadata.get("kafka_type"), flexible)))
        elif dataclasses.is_dataclass(tp) and _has_arrays(tp):
            read = big_reader(tp)
            steps.append((f.name, _nullable_struct(read) if optional else read))
        else:
            steps.append((f.name, get_field_reader(cls, f, False, False)))

    def read_entity(b, start):
        values = {}
        pos = start
        for name, read in steps:
            values[name], size = read(b, pos)
            pos += size
        if flexible:
            count, size = read_unsigned_varint(b, pos)
            pos += size
            for _ in range(count):
                tag, size = read_unsigned_varint(b, pos)
                pos += size
                length, size = read_unsigned_varint(b, pos)
                pos += size
                field = tagged.get(tag)
                if field is not None:
                    values[field[0]], _size = field[1](b, pos)
                pos += length
        return cls(**values), pos - start

    return read_entity


def read_body(cls: type, buffer, offset: int) -> tuple[Any, int]:
    """``(entity, bytes read)`` like kio's ``entity_reader(cls)(buffer, offset)``."""
    entity, size = big_reader(cls)(buffer, offset)
    if offset + size > len(buffer):
        raise ValueError(f"{cls.__qualname__} runs past the end of the frame")
    return entity, size
