"""Kafka's ``__share_group_state`` records, as its share coordinator writes them (Kafka 4.4's
``ShareSnapshotKey``/``ShareSnapshotValue`` and ``ShareUpdateKey``/``ShareUpdateValue``).

A key is an int16 record type (0 snapshot, 1 update) followed by the key fields (not flexible); a value is an
int16 version (0) followed by the value fields, flexible: compact strings and arrays, tagged fields
(``DeliveryCompleteCount`` is tag 0, written only when not its default -1). A share-partition's key is
``"<group>:<topic id>:<partition>"``, hashed to a partition of the topic as Kafka's ``SharePartitionKey`` is
(Java's ``String.hashCode``, absolute value, modulo the partition count).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1  # the key's record type

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # RecordState id: 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED
    delivery_count: int


@dataclass(slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


def java_string_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The ``__share_group_state`` partition holding a share-partition's state."""
    h = java_string_hash(f"{group_id}:{_kafka_uuid(topic_id)}:{partition}")
    return (abs(h) if h != -(1 << 31) else 0) % num_partitions


def _kafka_uuid(u: uuid.UUID) -> str:
    import base64  # Kafka prints topic ids in URL-safe base64 without padding
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def encode_key(group_id: str, topic_id: uuid.UUID, partition: int, record_type: int = SNAPSHOT) -> bytes:
    g = group_id.encode()
    return _I16.pack(record_type) + _I16.pack(len(g)) + g + topic_id.bytes + _I32.pack(partition)


def decode_key(data: bytes) -> tuple[int, str, uuid.UUID, int]:
    """(record type, group id, topic id, partition)."""
    rtype = _I16.unpack_from(data, 0)[0]
    n = _I16.unpack_from(data, 2)[0]
    group = bytes(data[4:4 + n]).decode()
    pos = 4 + n
    return rtype, group, uuid.UUID(bytes=bytes(data[pos:pos + 16])), _I32.unpack_from(data, pos + 16)[0]


def _encode_batches(batches: list[StateBatch]) -> bytes:
    out = [_uvarint(len(batches) + 1)]
    for b in batches:
        out.append(_I64.pack(b.first_offset) + _I64.pack(b.last_offset) + _I8.pack(b.delivery_state)
                   + _I16.pack(b.delivery_count) + b"\x00")
    return b"".join(out)


def _tags(delivery_complete_count: int) -> bytes:
    if delivery_complete_count == -1:
        return b"\x00"
    return b"\x01" + b"\x00" + _uvarint(4) + _I32.pack(delivery_complete_count)


def encode_snapshot(s: ShareSnapshot) -> bytes:
    return (_I16.pack(0) + _I32.pack(s.snapshot_epoch) + _I32.pack(s.state_epoch) + _I32.pack(s.leader_epoch)
            + _I64.pack(s.start_offset) + _I64.pack(s.create_timestamp) + _I64.pack(s.write_timestamp)
            + _encode_batches(s.state_batches) + _tags(s.delivery_complete_count))


def _decode_batches(data: bytes, pos: int) -> tuple[list[StateBatch], int]:
    n, pos = _read_uvarint(data, pos)
    out = []
    for _ in range(max(n - 1, 0)):
        first, last = _I64.unpack_from(data, pos)[0], _I64.unpack_from(data, pos + 8)[0]
        state, count = _I8.unpack_from(data, pos + 16)[0], _I16.unpack_from(data, pos + 17)[0]
        pos += 19
        pos = _skip_tags(data, pos)[1]
        out.append(StateBatch(first, last, state, count))
    return out, pos


def _skip_tags(data: bytes, pos: int) -> tuple[int, int]:
    """Reads a tagged-field section; returns (DeliveryCompleteCount or -1, position after it)."""
    count, pos = _read_uvarint(data, pos)
    complete = -1
    for _ in range(count):
        tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        if tag == 0 and size == 4:
            complete = _I32.unpack_from(data, pos)[0]
        pos += size
    return complete, pos


def decode_value(record_type: int, data: bytes) -> ShareSnapshot:
    """A snapshot, or an update as a snapshot without state epoch and timestamps (-1)."""
    pos = 2  # version
    if record_type == SNAPSHOT:
        snap_epoch, state_epoch, leader_epoch = struct.unpack_from(">iii", data, pos)
        start, created, written = struct.unpack_from(">qqq", data, pos + 12)
        batches, pos = _decode_batches(data, pos + 36)
        complete, _ = _skip_tags(data, pos)
        return ShareSnapshot(snap_epoch, state_epoch, leader_epoch, start, created, written, batches, complete)
    snap_epoch, leader_epoch = struct.unpack_from(">ii", data, pos)
    start = _I64.unpack_from(data, pos + 8)[0]
    batches, pos = _decode_batches(data, pos + 16)
    complete, _ = _skip_tags(data, pos)
    return ShareSnapshot(snap_epoch, -1, leader_epoch, start, -1, -1, batches, complete)
