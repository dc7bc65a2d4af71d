"""``__transaction_state`` records in Kafka's format (``TransactionLogKey`` and ``TransactionLogValue``).

Key: version 0, then the transactional id (int16-length string). Value: version 0 (what Kafka writes for
transaction versions 0 and 1): producer id (int64), producer epoch (int16), transaction timeout (int32),
status (int8), the partitions (nullable int32-count array of topic and int32 partition ids; null when the
state is Empty), last update and start timestamps (int64). Version 1 (transaction version 2) is flexible:
compact strings and arrays and tagged fields (previous and next producer id, client transaction version);
it is read, never written here. A null value is a tombstone (an expired transactional id).

The partition of a transactional id is Kafka's ``Utils.abs(transactionalId.hashCode()) % partitions``, the
group coordinator's rule.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from tierlog.coordinator.records import partition_for

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


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", 0, len(raw)) + raw


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key of an unknown version (Kafka skips those too)."""
    version, length = struct.unpack_from(">hh", data, 0)
    if version != 0:
        return None
    return bytes(data[4:4 + length]).decode()


def encode_value(v: TxnLogValue) -> bytes:
    out = bytearray(struct.pack(">hqhib", 0, v.producer_id, v.producer_epoch, v.timeout_ms, int(v.state)))
    if v.state == TxnState.EMPTY:
        out += struct.pack(">i", -1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(v.partitions):
            by_topic.setdefault(topic, []).append(p)
        out += struct.pack(">i", len(by_topic))
        for topic, ids in by_topic.items():
            raw = topic.encode()
            out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
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
    return TxnLogValue(pid, epoch, timeout, TxnState(state), frozenset(partitions), last_update, start)
