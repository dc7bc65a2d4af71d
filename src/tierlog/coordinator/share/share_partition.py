"""A share-partition on its leader (Kafka's ``SharePartition``): which records of one topic partition a share
group has delivered, to whom, and how often.

The share-partition start offset (SPSO) is the first record not yet finished (acknowledged or archived); the
end offset (SPEO) is one past the last record ever acquired. Records in between are *in flight*, each in one
of Kafka's states: AVAILABLE (may be delivered), ACQUIRED (locked by one member until its acquisition lock
expires), ACKNOWLEDGED or ARCHIVED (finished). A record's delivery count grows at each acquisition; once it
reached ``delivery_count_limit`` a release or an expired lock archives it instead of making it available again.

With a dead-letter queue (KIP-1191: the group's ``errors.deadletterqueue.topic.name``), a record the consumer
rejected or one past the delivery limit goes to ARCHIVING instead, and its range waits in :attr:`dlq_pending`
until the DLQ writer (server/share_dlq.py) wrote it and calls :meth:`finish_archiving`; ARCHIVING is persisted,
so a restarted leader writes them again (as Kafka 4.4's ``maybeResumeDlqArchiving``).
At most ``max_record_locks`` records are in flight: past that a fetch acquires nothing new until the start
offset moves.

Records delivered often are throttled as in Kafka 4.4's ``SharePartition.acquire``: a log batch holding a record
whose delivery count reached half the delivery count limit (rounded up, at least 2) is acquired only when nothing
was acquired before it in the fetch and ends the fetch, and then at most ``batch size >> (count - that + 1)``
records of it (at least one); with a limit above 2 a record on its last delivery attempt is acquired alone.

State is kept per offset (a dict of in-flight offsets), simple and exact; the persisted form
(:meth:`snapshot_batches`) groups equal neighbours into Kafka's state batches.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from tierlog.coordinator.share.records import StateBatch


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (also the persisted ``DeliveryState``)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # KIP-1191: on its way to the dead-letter queue, then ARCHIVED
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline: float = 0.0  # monotonic seconds, for ACQUIRED


@dataclass(frozen=True, slots=True)
class DlqBatch:
    """Records going to the dead-letter queue (Kafka's ``SharePartition.DlqBatch``): one offset range with its
    delivery count, and why (``rejected`` by the consumer, else past the delivery limit)."""

    first_offset: int
    last_offset: int
    delivery_count: int
    rejected: bool


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


def _clock() -> float:
    return time.monotonic()


class SharePartition:
    def __init__(self, group_id: str, topic: str, partition: int, *, lock_duration_ms: int,
                 delivery_count_limit: int, max_record_locks: int, clock=_clock, dlq_enabled=lambda: False):
        self.group_id, self.topic, self.partition = group_id, topic, partition
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.clock = clock
        self.dlq_enabled = dlq_enabled  # () -> bool: the group has a DLQ topic now
        self.dlq_pending: list[DlqBatch] = []  # ARCHIVING ranges not yet handed to the DLQ writer
        self.start_offset = -1  # -1 until initialized (loaded state or share.auto.offset.reset)
        self.end_offset = -1
        self.in_flight: dict[int, InFlight] = {}
        self._available: set[int] = set()  # the in-flight offsets in state AVAILABLE
        self._next_expiry = float("inf")  # no acquisition lock expires before this (monotonic seconds)
        self.state_epoch = 0
        self.leader_epoch = 0  # the topic partition's leader epoch when this leader loaded it (fences older leaders)
        self.version = 0  # bumped at each change of the persisted state
        self.created_ms = int(time.time() * 1000)

    @property
    def initialized(self) -> bool:
        return self.start_offset >= 0

    def initialize(self, start_offset: int, batches: Iterable[StateBatch] = ()) -> None:
        """From the persisted state (acquired records were written as AVAILABLE) or a fresh start offset."""
        self.start_offset = self.end_offset = start_offset
        for b in batches:
            state = RecordState(b.delivery_state) if b.delivery_state in (0, 2, 3, 4) else RecordState.AVAILABLE
            first = max(b.first_offset, start_offset)
            for off in range(first, b.last_offset + 1):
                self.in_flight[off] = InFlight(state, b.delivery_count)
                if state is RecordState.AVAILABLE:
                    self._available.add(off)
            if state is RecordState.ARCHIVING and first <= b.last_offset:  # the DLQ write the last leader left
                self.dlq_pending.append(DlqBatch(first, b.last_offset, b.delivery_count,
                                                 b.delivery_count < self.delivery_count_limit))
            self.end_offset = max(self.end_offset, b.last_offset + 1)
        self._advance_start()

    # ------------------------------------------------------------------ acquisition

    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first AVAILABLE in-flight record, else the end offset."""
        self.expire_locks()
        return min(self._available) if self._available else self.end_offset

    def can_acquire(self) -> bool:
        return self.end_offset - self.start_offset < self.max_record_locks or bool(self._available)

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int]], max_records: int,
                aborted: frozenset[tuple[int, int]] = frozenset()) -> list[AcquiredRange]:
        """Acquire records of the batches read (each ``(base offset, last offset)``) for ``member_id``: AVAILABLE
        in-flight ones and new ones past the end offset, at most ``max_records`` (Kafka 4.4's broker caps both
        acquire modes at MaxRecords, splitting a log batch when it must), within ``max_record_locks``. The
        batches in ``aborted`` (of aborted transactions, for a read_committed group) are archived undelivered,
        as Kafka's share-partition does."""
        now = self.clock()
        deadline = now + self.lock_duration_ms / 1000
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        archived = False
        limit = self.delivery_count_limit
        throttle_at = throttle_delivery_limit(limit)
        for base, last in batches:
            if len(taken) >= max_records:
                break
            if (base, last) in aborted:
                for off in range(max(base, self.start_offset), last + 1):
                    if off >= self.end_offset:
                        self.in_flight[off] = InFlight(RecordState.ARCHIVED, 0)
                        self.end_offset = off + 1
                    elif off in self._available:
                        self._available.discard(off)
                        self.in_flight[off].state = RecordState.ARCHIVED
                    else:
                        continue
                    archived = True
                continue
            # Kafka 4.4's throttling of redelivered records: a batch holding a record delivered throttle_at times
            # or more is acquired alone (not after another batch, nothing after it), and only part of it
            throttled = self._max_delivery_count(base, last) >= throttle_at
            if throttled and taken:
                break
            from_batch, throttle_records, stop = 0, -1, False
            for off in range(max(base, self.start_offset), last + 1):
                if len(taken) >= max_records:
                    break
                if off < self.end_offset:
                    if off not in self._available:
                        continue
                    rec = self.in_flight[off]
                    if limit > 2 and rec.delivery_count == limit - 1 and from_batch:
                        stop = True  # a record on its last delivery attempt goes alone, in the next fetch
                        break
                    if throttled and rec.delivery_count >= throttle_at and throttle_records < 0:
                        # half the batch at the throttle limit, a quarter one delivery later, ...; at least one
                        throttle_records = max(1, (last - base + 1) >> (rec.delivery_count - throttle_at + 1))
                    self._available.discard(off)
                else:
                    if off - self.start_offset >= self.max_record_locks:
                        break
                    rec = self.in_flight[off] = InFlight(RecordState.AVAILABLE, 0)
                    self.end_offset = off + 1
                rec.state, rec.member_id, rec.lock_deadline = RecordState.ACQUIRED, member_id, deadline
                rec.delivery_count += 1
                taken.append((off, rec.delivery_count))
                from_batch += 1
                if limit > 2 and rec.delivery_count == limit:
                    stop = True  # its last delivery attempt: delivered alone in this fetch
                    break
                if from_batch == throttle_records:
                    stop = True
                    break
            if stop or (throttled and from_batch):
                break
        if taken:
            self._next_expiry = min(self._next_expiry, deadline)
        if taken or archived:
            self.version += 1
        if archived:
            self._advance_start()
        return _ranges(taken)

    def _max_delivery_count(self, base: int, last: int) -> int:
        """The highest delivery count of the in-flight records of log batch ``base``..``last`` (0: none)."""
        if not self.in_flight or base >= self.end_offset:
            return 0
        lo, hi = max(base, self.start_offset), min(last, self.end_offset - 1)
        if hi - lo + 1 > len(self.in_flight):
            return max((r.delivery_count for o, r in self.in_flight.items() if lo <= o <= hi), default=0)
        return max((self.in_flight[o].delivery_count for o in range(lo, hi + 1) if o in self.in_flight), default=0)

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int]) -> int:
        """One acknowledgement batch: a single type for every offset, or one type per offset. Returns an error
        code (INVALID_RECORD_STATE when a record is not acquired by this member, INVALID_REQUEST for bad input);
        nothing changes on an error."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.invalid_request
        if any(t not in AcknowledgeType._value2member_map_ for t in types):
            return ErrorCode.invalid_request
        if first < self.start_offset or last >= self.end_offset:  # never acquired (or done): no walk over it
            return ErrorCode.invalid_record_state
        self.expire_locks()
        for off in range(first, last + 1):
            rec = self.in_flight.get(off)
            if rec is None or rec.state is not RecordState.ACQUIRED or rec.member_id != member_id:
                return ErrorCode.invalid_record_state
        deadline = self.clock() + self.lock_duration_ms / 1000
        for i, off in enumerate(range(first, last + 1)):
            kind = types[0] if len(types) == 1 else types[i]
            rec = self.in_flight[off]
            if kind == AcknowledgeType.ACCEPT:
                rec.state = RecordState.ACKNOWLEDGED
            elif kind == AcknowledgeType.RELEASE:
                self._release(rec, off)
            elif kind == AcknowledgeType.RENEW:
                rec.lock_deadline = deadline
                continue
            elif kind == AcknowledgeType.REJECT and self.dlq_enabled():
                self._to_dlq(rec, off, rejected=True)
            else:  # REJECT, GAP
                rec.state = RecordState.ARCHIVED
            rec.member_id = ""
        self.version += 1
        self._advance_start()
        return ErrorCode.none

    def release_member(self, member_id: str) -> int:
        """A member left or its share session closed: its acquired records become available again, and, as in
        Kafka, this delivery does not count (the delivery count goes back down)."""
        n = 0
        for off, rec in self.in_flight.items():
            if rec.state is RecordState.ACQUIRED and rec.member_id == member_id:
                self._release(rec, off)
                if rec.state is RecordState.AVAILABLE:
                    rec.delivery_count = max(rec.delivery_count - 1, 0)
                n += 1
        if n:
            self.version += 1
            self._advance_start()
        return n

    def expire_locks(self) -> int:
        now = self.clock()
        if now < self._next_expiry:
            return 0
        n = 0
        self._next_expiry = float("inf")
        for off, rec in self.in_flight.items():
            if rec.state is RecordState.ACQUIRED:
                if rec.lock_deadline <= now:
                    self._release(rec, off)
                    n += 1
                elif rec.lock_deadline < self._next_expiry:
                    self._next_expiry = rec.lock_deadline
        if n:
            self.version += 1
            self._advance_start()
        return n

    @property
    def next_expiry(self) -> float:
        """No acquisition lock expires before this (monotonic seconds; inf: none held)."""
        return self._next_expiry

    def _release(self, rec: InFlight, offset: int) -> None:
        rec.member_id = ""
        if rec.delivery_count >= self.delivery_count_limit:
            if self.dlq_enabled():
                self._to_dlq(rec, offset, rejected=False)
            else:
                rec.state = RecordState.ARCHIVED
        else:
            rec.state = RecordState.AVAILABLE
            self._available.add(offset)

    def _to_dlq(self, rec: InFlight, offset: int, rejected: bool) -> None:
        rec.state = RecordState.ARCHIVING
        last = self.dlq_pending[-1] if self.dlq_pending else None
        if (last is not None and last.last_offset == offset - 1 and last.delivery_count == rec.delivery_count
                and last.rejected == rejected):
            self.dlq_pending[-1] = DlqBatch(last.first_offset, offset, rec.delivery_count, rejected)
        else:
            self.dlq_pending.append(DlqBatch(offset, offset, rec.delivery_count, rejected))

    def take_dlq_pending(self) -> list[DlqBatch]:
        """The ARCHIVING ranges to write to the dead-letter queue, handed over once."""
        out, self.dlq_pending = self.dlq_pending, []
        return out

    def finish_archiving(self, first: int, last: int) -> None:
        """The DLQ write of ``first``..``last`` ended (written or given up on, as Kafka): the records are
        ARCHIVED."""
        changed = False
        for off in range(max(first, self.start_offset), last + 1):
            rec = self.in_flight.get(off)
            if rec is not None and rec.state is RecordState.ARCHIVING:
                rec.state = RecordState.ARCHIVED
                changed = True
        if changed:
            self.version += 1
            self._advance_start()

    def _advance_start(self) -> None:
        off = self.start_offset
        while off < self.end_offset:
            rec = self.in_flight.get(off)
            if rec is not None and rec.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self.in_flight.pop(off, None)
            self._available.discard(off)
            off += 1
        self.start_offset = off

    def reset_to_log_start(self, log_start_offset: int) -> None:
        """Records removed by retention are gone for the share group too (Kafka moves the SPSO)."""
        if self.start_offset < log_start_offset:
            for off in [o for o in self.in_flight if o < log_start_offset]:
                del self.in_flight[off]
                self._available.discard(off)
            self.start_offset = log_start_offset
            self.end_offset = max(self.end_offset, log_start_offset)
            self.version += 1

    # ------------------------------------------------------------------ persisted form

    def snapshot_batches(self) -> list[StateBatch]:
        """In-flight records as Kafka's state batches; an acquired record is written AVAILABLE, so after a
        restart it is delivered again (its delivery count kept); an ARCHIVING one as ARCHIVING (state 3, as
        Kafka 4.4), written to the dead-letter queue after a restart."""
        runs: list[list[int]] = []  # [first, last, state, count]
        acquired, available = RecordState.ACQUIRED, int(RecordState.AVAILABLE)
        last = None
        for off, rec in sorted(self.in_flight.items()):  # inserted in offset order but for reloads: sort
            state = available if rec.state is acquired else int(rec.state)
            if last is not None and last[1] == off - 1 and last[2] == state and last[3] == rec.delivery_count:
                last[1] = off
            else:
                last = [off, off, state, rec.delivery_count]
                runs.append(last)
        return [StateBatch(*r) for r in runs]

    def delivery_complete_count(self) -> int:
        done = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        return sum(1 for r in self.in_flight.values() if r.state in done)


def throttle_delivery_limit(delivery_count_limit: int) -> int:
    """Kafka 4.4's ``throttleRecordsDeliveryLimit``: the delivery count from which a batch's records are throttled,
    half the delivery count limit (rounded up), at least 2."""
    return max(2, -(-delivery_count_limit // 2))


def _ranges(taken: list[tuple[int, int]]) -> list[AcquiredRange]:
    """Consecutive offsets with the same delivery count as one range (Kafka's AcquiredRecords)."""
    out: list[AcquiredRange] = []
    for off, count in taken:
        if out and out[-1].last_offset == off - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRange(out[-1].first_offset, off, count)
        else:
            out.append(AcquiredRange(off, off, count))
    return out
