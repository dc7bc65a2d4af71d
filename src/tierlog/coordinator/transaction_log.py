"""``__transaction_state`` records in Kafka's format (``TransactionLogKey`` and ``TransactionLogValue``).

Key: version 0, then the transactional id (int16-length string). Value: version 0 (what Kafka writes while
the finalized ``transaction.version`` is 0): producer id (int64), producer epoch (int16), transaction timeout
(int32), status (int8), the partitions (nullable int32-count array of topic and int32 partition ids; null when
the state is Empty), last update and start timestamps (int64). Version 1 (``transaction.version`` 1 and 2) is
flexible: compact strings and arrays, and tagged fields at the end: previous producer id (tag 0), next
producer id (tag 1), both -1 by default, and the client's transaction version (tag 2, int16, 0 by default).
A null value is a tombstone (an expired transactional id).

The partition of a transactional id is Kafka's ``Utils.abs(transactionalId.hashCode()) % partitions``, the
group coordinator's rule.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from tierlog.coordinator.records import partition_for
from tierlog.records.record import encode_uvarint as _uvarint

__all__ = ["TXN_STATE_TOPIC", "TxnLogValue", "TxnState", "decode_key", "decode_value", "encode_key",
           "encode_value", "partition_for"]

TXN_STATE_TOPIC = "__transaction_state"


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids as written in the log (PREPARE_EPOCH_FENCE is never written)."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", 0, len(raw)) + raw


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key of an unknown version (Kafka skips those too)."""
    version, length = struct.unpack_from(">hh", data, 0)
    if version != 0:
        return None
    return bytes(data[4:4 + length]).decode()




def encode_value(v: TxnLogValue, version: int = 0) -> bytes:
    """Version 0, or 1 (flexible, with the KIP-890 tagged fields that differ from their defaults)."""
    flexible = version >= 1
    out = bytearray(struct.pack(">hqhib", version, v.producer_id, v.producer_epoch, v.timeout_ms, int(v.state)))
    if v.state == TxnState.EMPTY:
        out += _uvarint(0) if flexible else struct.pack(">i", -1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(v.partitions):
            by_topic.setdefault(topic, []).append(p)
        out += _uvarint(len(by_topic) + 1) if flexible else struct.pack(">i", len(by_topic))
        for topic, ids in by_topic.items():
            raw = topic.encode()
            if flexible:
                out += _uvarint(len(raw) + 1) + raw + _uvarint(len(ids) + 1) + struct.pack(f">{len(ids)}i", *ids)
                out += _uvarint(0)  # the topic entry's tagged fields
            else:
                out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
    if flexible:
        tags = [(tag, value) for tag, value in ((0, struct.pack(">q", v.previous_producer_id)),
                                                (1, struct.pack(">q", v.next_producer_id)),
                                                (2, struct.pack(">h", v.client_transaction_version)))
                if value not in (struct.pack(">q", -1), struct.pack(">h", 0))]
        out += _uvarint(len(tags))
        for tag, value in tags:
            out += _uvarint(tag) + _uvarint(len(value)) + value
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str:
        n = self.varint() - 1 if flexible else self.take(">h")
        s = bytes(self.data[self.pos:self.pos + n]).decode()
        self.pos += n
        return s

    def count(self, flexible: bool) -> int:
        return self.varint() - 1 if flexible else self.take(">i")

    def skip_tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()
            self.pos += self.varint()


def decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.take(">h")
    flexible = version >= 1
    pid, epoch, timeout, state = r.take(">qhib")
    partitions = set()
    n = r.count(flexible)
    for _ in range(max(n, 0)):
        topic = r.string(flexible)
        for _ in range(r.count(flexible)):
            partitions.add((topic, r.take(">i")))
        if flexible:
            r.skip_tags()
    last_update, start = r.take(">qq")
    tagged = {}
    if flexible:
        for _ in range(r.varint()):
            tag, size = r.varint(), r.varint()
            tagged[tag] = bytes(r.data[r.pos:r.pos + size])
            r.pos += size
    prev = struct.unpack(">q", tagged[0])[0] if len(tagged.get(0, b"")) == 8 else -1
    nxt = struct.unpack(">q", tagged[1])[0] if len(tagged.get(1, b"")) == 8 else -1
    tv = struct.unpack(">h", tagged[2])[0] if len(tagged.get(2, b"")) == 2 else 0
    return TxnLogValue(pid, epoch, timeout, TxnState(state), frozenset(partitions), last_update, start, prev, nxt, tv)
