"""Kafka's consumer protocol: the bytes a classic group carries for protocol type ``consumer``.

A member puts a ``ConsumerProtocolSubscription`` in its JoinGroup protocol metadata; the leader
sends each member a ``ConsumerProtocolAssignment`` through SyncGroup. Both are an int16 version
followed by the message body in Kafka's *non-flexible* encoding (no compact lengths, no tagged
fields), as ``ConsumerProtocolSubscription.json`` / ``ConsumerProtocolAssignment.json`` define:

* subscription v0: ``topics [string]``, ``user_data nullable bytes``; v1 adds ``owned_partitions
  [topic string, partitions [int32]]``; v2 adds ``generation_id int32`` (default -1); v3 adds
  ``rack_id nullable string``;
* assignment v0-v3 (all alike): ``assigned_partitions [topic string, partitions [int32]]``,
  ``user_data nullable bytes``.

Versions newer than 3 are read with the v3 layout and anything after it is ignored: Kafka promises
never to remove or reorder fields of these two messages so that old members can read new ones.
Encoding sorts topics and owned partitions as Java's ``ConsumerProtocol`` does, so equal
subscriptions give equal bytes (the coordinator compares metadata bytes to spot a changed member).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tierlog.client.types import TopicPartition

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "HIGHEST_VERSION",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "java_string_key",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3
DEFAULT_GENERATION = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MAX_STRING = 0x7FFF


class ConsumerProtocolError(ValueError):
    """Bytes that are not a valid consumer-protocol message (Java's ``SchemaException``)."""


def java_string_key(s: str) -> bytes:
    """Sort key ordering strings as Java's ``String.compareTo`` does (by UTF-16 code unit).

    Python orders by code point; the two differ only beyond the BMP, but member ids embed the
    user's ``client.id``, so the assignors and the encoder use this to stay identical to Java."""
    return s.encode("utf-16-be", "surrogatepass")


@dataclass
class Subscription:
    """A decoded ``ConsumerProtocolSubscription`` (fields absent in ``version`` have their defaults).

    ``group_instance_id`` is not part of the bytes: the JoinGroup response carries it beside each
    member's metadata, and the assignors use it to order static members (KIP-345)."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    version: int = HIGHEST_VERSION
    group_instance_id: str | None = None

    def owned_topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, ps in self.owned_partitions.items() for p in ps]


@dataclass
class Assignment:
    """A decoded ``ConsumerProtocolAssignment``: topic -> partitions, in wire order."""

    partitions: dict[str, list[int]] = field(default_factory=dict)
    user_data: bytes | None = None
    version: int = HIGHEST_VERSION

    def topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, ps in self.partitions.items() for p in ps]


# ---------------------------------------------------------------------------------------- writing


def _check_version(version: int) -> None:
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"consumer protocol version must be 0..{HIGHEST_VERSION}, not {version}")


def _string(out: bytearray, s: str | None, what: str, nullable: bool = False) -> None:
    if s is None:
        if not nullable:
            raise ValueError(f"{what} must not be None")
        out += _I16.pack(-1)
        return
    data = s.encode("utf-8")
    if len(data) > _MAX_STRING:
        raise ValueError(f"{what} is longer than {_MAX_STRING} bytes")
    out += _I16.pack(len(data))
    out += data


def _bytes(out: bytearray, b: bytes | bytearray | memoryview | None) -> None:
    if b is None:
        out += _I32.pack(-1)
    else:
        b = bytes(b)
        out += _I32.pack(len(b))
        out += b


def _topic_partitions(out: bytearray, items: list[tuple[str, list[int]]]) -> None:
    out += _I32.pack(len(items))
    for topic, partitions in items:
        _string(out, topic, "topic")
        out += _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)


def _owned_by_topic(owned: Mapping[str, Iterable[int]] | Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    pairs = ([(t, p) for t, ps in owned.items() for p in ps] if isinstance(owned, Mapping)
             else [(t, p) for t, p in owned])
    # Java sorts by (topic, partition) and starts a new entry whenever the topic changes.
    pairs.sort(key=lambda tp: (java_string_key(tp[0]), tp[1]))
    grouped: list[tuple[str, list[int]]] = []
    for topic, p in pairs:
        if not grouped or grouped[-1][0] != topic:
            grouped.append((topic, []))
        grouped[-1][1].append(p)
    return grouped


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None,
                        owned_partitions: Mapping[str, Iterable[int]] | Iterable[tuple[str, int]] = (),
                        generation_id: int = DEFAULT_GENERATION, rack_id: str | None = None,
                        version: int = HIGHEST_VERSION) -> bytes:
    """Version-prefixed ``ConsumerProtocolSubscription``; fields newer than ``version`` are dropped.

    ``owned_partitions`` is a topic -> partitions mapping or an iterable of (topic, partition)."""
    _check_version(version)
    out = bytearray(_I16.pack(version))
    names = sorted(topics, key=java_string_key)
    out += _I32.pack(len(names))
    for t in names:
        _string(out, t, "topic")
    _bytes(out, user_data)
    if version >= 1:
        _topic_partitions(out, _owned_by_topic(owned_partitions))
    if version >= 2:
        out += _I32.pack(generation_id)
    if version >= 3:
        _string(out, rack_id, "rack_id", nullable=True)
    return bytes(out)


def encode_assignment(partitions: Mapping[str, Iterable[int]], user_data: bytes | None = None,
                      version: int = HIGHEST_VERSION) -> bytes:
    """Version-prefixed ``ConsumerProtocolAssignment``; topics and partitions keep the given order
    (Java's serializer keeps the assignor's order too). Topics with no partitions are kept."""
    _check_version(version)
    out = bytearray(_I16.pack(version))
    _topic_partitions(out, [(t, list(ps)) for t, ps in partitions.items()])
    _bytes(out, user_data)
    return bytes(out)


# ---------------------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self.buf = bytes(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise ConsumerProtocolError(f"Buffer underflow while parsing consumer protocol's {self.what}")
        chunk = self.buf[self.pos:end]
        self.pos = end
        return chunk

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def string(self, name: str, nullable: bool = False) -> str | None:
        n = self.i16()
        if n < 0:
            if nullable:
                return None
            raise ConsumerProtocolError(f"non-nullable field {name} was serialized as null")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConsumerProtocolError(f"field {name} is not valid UTF-8") from e

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def array_length(self, name: str) -> int:
        n = self.i32()
        if n < 0:
            raise ConsumerProtocolError(f"non-nullable field {name} was serialized as null")
        # Every element takes at least one byte; refuse absurd counts before allocating (as Java does).
        remaining = len(self.buf) - self.pos
        if n > remaining:
            raise ConsumerProtocolError(
                f"Tried to allocate a collection of size {n}, but there are only {remaining} bytes remaining.")
        return n

    def topic_partitions(self, name: str) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for _ in range(self.array_length(name)):
            topic = self.string("topic")
            partitions = [self.i32() for _ in range(self.array_length("partitions"))]
            # A topic repeated on the wire is merged, so no partition is lost (Java flattens them all).
            result.setdefault(topic, []).extend(partitions)
        return result


def _read_version(r: _Reader) -> int:
    try:
        version = r.i16()
    except ConsumerProtocolError:
        raise ConsumerProtocolError("Buffer underflow while parsing consumer protocol's header") from None
    if version < 0:
        raise ConsumerProtocolError(f"Unsupported {r.what} version: {version}")
    return version


def decode_subscription(data: bytes | bytearray | memoryview, *,
                        group_instance_id: str | None = None) -> Subscription:
    """Parse a version-prefixed ``ConsumerProtocolSubscription``; versions above 3 are read as v3.

    ``version`` in the result is the one on the wire. A ``rack_id`` that is empty reads as None,
    as Java's ``ConsumerProtocol`` treats it."""
    r = _Reader(data, "subscription")
    wire_version = _read_version(r)
    version = min(wire_version, HIGHEST_VERSION)
    topics = [r.string("topics") for _ in range(r.array_length("topics"))]
    sub = Subscription(topics=topics, user_data=r.nullable_bytes(), version=wire_version,
                       group_instance_id=group_instance_id)
    if version >= 1:
        sub.owned_partitions = r.topic_partitions("ownedPartitions")
    if version >= 2:
        sub.generation_id = r.i32()
    if version >= 3:
        sub.rack_id = r.string("rackId", nullable=True) or None
    return sub


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Parse a version-prefixed ``ConsumerProtocolAssignment``; versions above 3 are read as v3.

    Zero bytes decode as an empty assignment (version 0, no partitions): the coordinator hands
    that to members the leader left out of its SyncGroup, and to members of an early generation.
    Java's consumer refuses fewer than 2 bytes instead; the caller decides whether to rejoin."""
    if len(data) == 0:
        return Assignment(version=0)
    r = _Reader(data, "assignment")
    version = _read_version(r)
    partitions = r.topic_partitions("assignedPartitions")
    return Assignment(partitions=partitions, user_data=r.nullable_bytes(), version=version)
