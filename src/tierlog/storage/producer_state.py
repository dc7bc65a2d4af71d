"""Idempotent-producer state per partition and Kafka's producer ``.snapshot`` files.

For each producer id the log remembers its epoch, the metadata of its last five batches (so a
retried batch is recognised and answered with its original offsets), the first offset of an
ongoing transaction (which bounds the last stable offset) and the epoch of the transaction coordinator
that wrote its last marker. Checks follow Kafka's ProducerAppendInfo: an older epoch is
INVALID_PRODUCER_EPOCH; within an epoch the first sequence must follow the last one; a new epoch must
start at sequence 0 unless the producer was unknown; a non-transactional batch while a transaction is
open is INVALID_TXN_STATE; a marker of an older coordinator epoch is TRANSACTION_COORDINATOR_FENCED.

Transactions (Kafka's ProducerStateManager): ``ongoing`` maps producer id to the first offset of its open
transaction; a marker moves it to ``unreplicated`` until the high watermark passes the marker, so the last
stable offset never passes a transaction whose outcome is not replicated yet.

Verification (KIP-890 part 1, Kafka's VerificationStateEntry): before a leader asks the transaction coordinator
whether a producer's first transactional batch may start a transaction here, it takes a
:class:`VerificationGuard` (one per producer id, made on first need and reused by concurrent requests); the
append then goes ahead only while that same guard is still the producer's. Any transactional batch or marker
of the producer clears it, so an answer that raced with an abort marker finds a different guard (or none)
and the batch is refused, never opening a transaction the coordinator does not know.

Snapshot file ``<20-digit offset>.snapshot`` (Kafka's ProducerSnapshot v1): int16 version (1),
uint32 CRC32C of everything after it, int32 entry count, then per producer: producer id (int64),
epoch (int16), last sequence (int32), last offset (int64), offset delta (int32), timestamp (int64),
coordinator epoch (int32), current transaction first offset (int64).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field

import crc32c

from tierlog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from tierlog.storage.checkpoints import write_atomically

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
INT32_MAX = 2**31 - 1


class VerificationGuard:
    """An identity: equal only to itself. ``SENTINEL`` is the guard of no verification and verifies nothing."""
    __slots__ = ()

    def verify(self, other: VerificationGuard | None) -> bool:
        return other is not None and other is not SENTINEL and other is self


SENTINEL = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    """A producer's pending verification on this partition (Kafka's VerificationStateEntry): when it started,
    its guard, and the lowest sequence and latest epoch of the batches waiting on it."""
    timestamp_ms: int
    lowest_sequence: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence
        elif epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended (Kafka's CompletedTxn), with the last stable offset to record for it in
    the transaction index when aborted."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool
    last_stable_offset: int


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def list_snapshots(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX) and name[:-len(SNAPSHOT_SUFFIX)].isdigit():
            out.append(int(name[:-len(SNAPSHOT_SUFFIX)]))
    return sorted(out)


class ProducerStateManager:
    def __init__(self, directory: str, topic_partition: str = ""):
        self.directory = directory
        self.topic_partition = topic_partition
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # state reflects every batch below this offset
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: dict[int, int] = {}  # first offset -> marker offset, until the HW passes the marker
        self.verification_states: dict[int, VerificationStateEntry] = {}  # producer id -> pending verification

    # -- KIP-890 part 1: verification guards --

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == epoch

    def maybe_create_verification_state_entry(self, producer_id: int, sequence: int, epoch: int,
                                              now_ms: int) -> VerificationStateEntry:
        entry = self.verification_states.get(producer_id)
        if entry is None:
            entry = self.verification_states[producer_id] = VerificationStateEntry(now_ms, sequence, epoch)
        else:
            entry.update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        entry = self.verification_states.get(producer_id)
        return SENTINEL if entry is None else entry.guard

    # -- checks and updates on the append path (once per batch, never per record) --

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, offset: int,
              from_leader: bool = True, is_transactional: bool = False,
              check_sequence: bool = True) -> BatchMetadata | None:
        """Validate a producer batch; returns the original batch when it is a duplicate. A coordinator's own
        write (``check_sequence`` False, Kafka's origin COORDINATOR) has its epoch checked but no sequence."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.producer_epoch:
            if from_leader:
                raise InvalidProducerEpochError(
                    f"epoch of producer {producer_id} at offset {offset} in {self.topic_partition} is {epoch}, "
                    f"which is smaller than the last seen epoch {entry.producer_epoch}")
            return None
        dup = entry.find_duplicate(epoch, first_seq, last_seq) if check_sequence else None
        if dup is not None:
            return dup
        if epoch != entry.producer_epoch:
            if check_sequence and first_seq != 0 and entry.producer_epoch != -1:
                raise OutOfOrderSequenceNumberError(
                    f"invalid sequence number for new epoch {epoch} of producer {producer_id} at offset {offset} "
                    f"in {self.topic_partition}: {first_seq} (expected 0)")
        elif check_sequence and entry.producer_epoch != -1 and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence number for producer {producer_id} at offset {offset} in "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {entry.last_seq} "
                f"(current end sequence number)")
        if entry.current_txn_first_offset >= 0 and not is_transactional and from_leader:
            raise InvalidTxnStateError(f"expected a transactional write from producer {producer_id} at offset "
                                       f"{offset} in {self.topic_partition}")
        return None

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int, timestamp: int, is_transactional: bool) -> None:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = epoch
        if first_seq >= 0:
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset, last_offset - first_offset,
                                               timestamp))
        entry.last_timestamp = timestamp
        if is_transactional:
            # The transaction is open in the log now: later batches need no guard (Kafka clears it here).
            self.verification_states.pop(producer_id, None)
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = first_offset
                self.ongoing[producer_id] = first_offset
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def check_end_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int) -> None:
        """Kafka's checks of a marker the coordinator writes (appendEndTxnMarker): the producer epoch must
        not be older than the partition's, nor the coordinator epoch older than the last marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch of producer {producer_id} at offset {offset} in {self.topic_partition} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}")
        if entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"invalid coordinator epoch for producer {producer_id} at offset {offset} in "
                f"{self.topic_partition}: {coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)")

    def complete_txn(self, producer_id: int, epoch: int, marker_offset: int, coordinator_epoch: int,
                     timestamp: int = -1, is_abort: bool = False) -> CompletedTxn | None:
        """A COMMIT or ABORT marker ends the producer's ongoing transaction; the completed transaction, or
        None when none was open (a marker without data changes neither the LSO nor the index)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch=epoch)
        completed = None
        # A marker ends whatever a pending verification was about: its answer must not let a batch in now.
        self.verification_states.pop(producer_id, None)
        first = entry.current_txn_first_offset
        if first >= 0:
            self.ongoing.pop(producer_id, None)
            # Kafka's lastStableOffset(completedTxn): the oldest other open transaction, else past the marker.
            lso = min(self.ongoing.values(), default=marker_offset + 1)
            completed = CompletedTxn(producer_id, first, marker_offset, is_abort, lso)
            self.unreplicated[first] = marker_offset
        if epoch > entry.producer_epoch:  # a bumped epoch (KIP-890) starts the producer's sequences over
            entry.batches.clear()
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.producer_epoch = max(entry.producer_epoch, epoch)
        if timestamp >= 0:
            entry.last_timestamp = timestamp
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        return completed

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the oldest transaction that is open, or ended by a marker the high watermark
        has not passed yet (Kafka's firstUnstableOffset after onHighWatermarkUpdated); None when there is
        none. Cheap when no transaction is about: it is read on every fetch."""
        unreplicated = self.unreplicated
        if unreplicated and high_watermark is not None:
            for first in [f for f, last in unreplicated.items() if last < high_watermark]:
                del unreplicated[first]
        if not unreplicated:
            return min(self.ongoing.values()) if self.ongoing else None
        return min(min(unreplicated), min(self.ongoing.values(), default=2**63))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and e.last_timestamp >= 0
                   and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        # A verification that never led to an append (Kafka expires them with the producer ids).
        stale = [pid for pid, v in self.verification_states.items() if now_ms - v.timestamp_ms >= expiration_ms]
        for pid in stale:
            del self.verification_states[pid]

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Forget state at or above the log end; keep nothing that a later replay rebuilds."""
        for offset in list_snapshots(self.directory):
            if offset > log_end_offset or offset < log_start_offset and offset != 0:
                self.delete_snapshot(offset)
        self.clear()
        self.map_end_offset = log_start_offset

    def clear(self) -> None:
        self.producers.clear()
        self.verification_states.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # -- snapshots --

    def take_snapshot(self, fsync: bool = True) -> int:
        """Write the state at ``map_end_offset``; returns that offset."""
        entries = []
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            entries.append(_ENTRY.pack(
                e.producer_id, e.producer_epoch, last.last_seq if last else -1,
                last.last_offset if last else -1, last.offset_delta if last else 0,
                e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset))
        body = len(entries).to_bytes(4, "big", signed=True) + b"".join(entries)
        data = SNAPSHOT_VERSION.to_bytes(2, "big") + crc32c.crc32c(body).to_bytes(4, "big") + body
        write_atomically(snapshot_path(self.directory, self.map_end_offset), data, fsync)
        return self.map_end_offset

    def load_snapshot(self, offset: int) -> None:
        path = snapshot_path(self.directory, offset)
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEAD.size:
            raise KafkaStorageError(f"producer snapshot {path} is truncated ({len(data)} bytes)")
        version, crc, count = _HEAD.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise KafkaStorageError(f"producer snapshot {path} has unsupported version {version}")
        if crc32c.crc32c(data[6:]) != crc:
            raise KafkaStorageError(f"producer snapshot {path} is corrupt (CRC mismatch)")
        if len(data) != _HEAD.size + count * _ENTRY.size:
            raise KafkaStorageError(f"producer snapshot {path} has {len(data)} bytes for {count} entries")
        self.clear()
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, ts, coord, txn = _ENTRY.unpack_from(
                data, _HEAD.size + i * _ENTRY.size)
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coord, current_txn_first_offset=txn,
                                       last_timestamp=ts)
            if last_seq >= 0:
                entry.batches.append(BatchMetadata(last_seq - delta, last_seq, last_offset, delta, ts))
            self.producers[pid] = entry
            if txn >= 0:  # an open transaction survives a restart (Kafka's loadFromSnapshot)
                self.ongoing[pid] = txn
        self.map_end_offset = offset

    def latest_snapshot_at_or_below(self, offset: int) -> int | None:
        candidates = [o for o in list_snapshots(self.directory) if o <= offset]
        return candidates[-1] if candidates else None

    def delete_snapshot(self, offset: int) -> None:
        try:
            os.remove(snapshot_path(self.directory, offset))
        except FileNotFoundError:
            pass

    def delete_snapshots_below(self, offset: int) -> None:
        for o in list_snapshots(self.directory):
            if o < offset:
                self.delete_snapshot(o)
