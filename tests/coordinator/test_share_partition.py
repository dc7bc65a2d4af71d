"""A share-partition's delivery state (acquisition, locks, delivery counts, the start offset) and Kafka's
``__share_group_state`` records, without a broker."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tierlog.coordinator.share.group import ShareGroupCoordinator, ShareMember, simple_assign
from tierlog.coordinator.share.records import (
    ShareSnapshot,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot,
    java_string_hash,
)
from tierlog.coordinator.share.share_partition import AcknowledgeType, RecordState, SharePartition

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def partition(clock=None, limit=3, locks=100) -> SharePartition:
    sp = SharePartition("g", "t", 0, lock_duration_ms=1000, delivery_count_limit=limit, max_record_locks=locks,
                        clock=clock or Clock())
    sp.initialize(10)
    return sp


def test_acquire_at_most_max_records():
    sp = partition()
    got = sp.acquire("m1", [(10, 14), (15, 19)], max_records=3)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(10, 12, 1)]  # a batch split
    got = sp.acquire("m2", [(10, 14), (15, 19)], max_records=4)
    assert [(a.first_offset, a.last_offset) for a in got] == [(13, 16)]
    assert sp.end_offset == 17


def test_release_redelivers_with_a_higher_count_until_the_limit_archives():
    sp = partition(limit=2)
    sp.acquire("m1", [(10, 10)], 10)
    assert sp.acknowledge("m1", 10, 10, [RELEASE]) == ErrorCode.none
    assert sp.next_fetch_offset() == 10
    assert sp.acquire("m2", [(10, 10)], 10)[0].delivery_count == 2
    assert sp.acknowledge("m2", 10, 10, [RELEASE]) == ErrorCode.none
    assert sp.start_offset == 11  # archived at the limit: the start offset moves past it
    assert sp.in_flight == {}


def test_expired_lock_makes_the_record_available():
    clock = Clock()
    sp = partition(clock)
    sp.acquire("m1", [(10, 11)], 10)
    clock.now += 0.5
    assert sp.next_fetch_offset() == 12
    clock.now += 0.6
    assert sp.next_fetch_offset() == 10
    assert sp.in_flight[10].state is RecordState.AVAILABLE
    assert sp.acknowledge("m1", 10, 10, [ACCEPT]) == ErrorCode.invalid_record_state  # its lock is gone


def test_acknowledge_checks_owner_and_input_and_changes_nothing_on_error():
    sp = partition()
    sp.acquire("m1", [(10, 12)], 10)
    assert sp.acknowledge("m2", 10, 10, [ACCEPT]) == ErrorCode.invalid_record_state
    assert sp.acknowledge("m1", 10, 12, [ACCEPT, REJECT]) == ErrorCode.invalid_request  # 2 types for 3 offsets
    assert sp.acknowledge("m1", 10, 12, [9]) == ErrorCode.invalid_request
    assert sp.acknowledge("m1", 10, 13, [ACCEPT]) == ErrorCode.invalid_record_state  # 13 was never acquired
    assert sp.acknowledge("m1", 10, 2**62, [ACCEPT]) == ErrorCode.invalid_record_state  # answered at once
    assert all(r.state is RecordState.ACQUIRED for r in sp.in_flight.values())
    assert sp.acknowledge("m1", 10, 12, [ACCEPT, REJECT, ACCEPT]) == ErrorCode.none
    assert sp.start_offset == 13


def test_max_record_locks_bounds_the_in_flight_records():
    sp = partition(locks=100)
    got = sp.acquire("m1", [(10, 209)], 1000)
    assert got[-1].last_offset == 109 and not sp.can_acquire()


def test_snapshot_writes_acquired_as_available_and_reloads():
    sp = partition()
    sp.acquire("m1", [(10, 13)], 10)
    sp.acknowledge("m1", 11, 11, [ACCEPT])
    batches = sp.snapshot_batches()
    assert batches == [StateBatch(10, 10, 0, 1), StateBatch(11, 11, 2, 1), StateBatch(12, 13, 0, 1)]
    again = partition()
    again.initialize(10, batches)
    assert again.next_fetch_offset() == 10
    assert again.acquire("m2", [(10, 13)], 10)[0].delivery_count == 2
    assert 11 not in {o for o, r in again.in_flight.items() if r.state is RecordState.ACQUIRED}


def test_records_as_kafka_reads_them():
    """Bytes Kafka 4.4's ShareSnapshotKey/ShareSnapshotValue classes read back as these values (checked with
    the share-coordinator jar); Java's String.hashCode for the partition key."""
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    snapshot = ShareSnapshot(3, 1, 2, 100, 1700000000000, 1700000001000,
                             [StateBatch(100, 104, 0, 2), StateBatch(105, 105, 4, 5)], 7)
    key = encode_key("grp", topic_id, 4)
    value = encode_snapshot(snapshot)
    assert key.hex() == "000000036772701234567812345678123456781234567800000004"
    assert value.hex() == ("000000000003000000010000000200000000000000640000018bcfe568000000018bcfe56be80300000000"
                           "00000064000000000000006800000200000000000000006900000000000000690400050001000400000007")
    assert decode_key(key) == (0, "grp", topic_id, 4)
    assert decode_value(0, value) == snapshot
    assert java_string_hash("grp:abc:1") == 1996919876


def test_simple_assignor_spreads_members_over_partitions():
    tid = uuid.uuid4()
    members = [ShareMember(f"m{i}", "", "", None, ["t"]) for i in range(3)]
    assert simple_assign(members, {"t": (tid, 6)}) == {"m0": {tid: [0, 3]}, "m1": {tid: [1, 4]}, "m2": {tid: [2, 5]}}
    assert simple_assign(members, {"t": (tid, 1)}) == {f"m{i}": {tid: [0]} for i in range(3)}


def test_heartbeat_epochs():
    tid = uuid.uuid4()
    clock = Clock()
    c = ShareGroupCoordinator(lambda: {"t": (tid, 2)}, session_timeout_ms=45000, heartbeat_interval_ms=5000,
                              max_size=2, clock=clock)
    joined = c.heartbeat("g", "a", 0, None, ["t"], "client", "/127.0.0.1")
    assert joined["member_epoch"] == 1 and joined["assignment"]["topic_partitions"] == [
        {"topic_id": tid, "partitions": [0, 1]}]
    assert c.heartbeat("g", "a", 5, None, None, "", "")["error_code"] == ErrorCode.fenced_member_epoch
    assert c.heartbeat("g", "zz", 1, None, None, "", "")["error_code"] == ErrorCode.unknown_member_id
    assert c.heartbeat("g", "b", 0, None, ["t"], "", "")["member_epoch"] == 2
    assert c.heartbeat("g", "c", 0, None, ["t"], "", "")["error_code"] == ErrorCode.group_max_size_reached
    assert c.heartbeat("g", "a", 1, None, None, "", "")["assignment"]["topic_partitions"][0]["partitions"] == [0]
    clock.now += 46
    assert c.expire() == 2 and c.describe("g", {})["group_state"] == "Empty"


def test_a_leaving_members_delivery_does_not_count():
    sp = partition(limit=2)
    sp.acquire("m1", [(10, 11)], 10)
    sp.acknowledge("m1", 11, 11, [RELEASE])
    sp.acquire("m1", [(11, 11)], 10)  # second delivery of 11
    assert sp.release_member("m1") == 2
    assert sp.in_flight[10].delivery_count == 0 and sp.in_flight[10].state is RecordState.AVAILABLE
    assert sp.in_flight[11].state is RecordState.ARCHIVED  # it had reached the limit


def test_dlq_rejected_and_past_the_limit_wait_in_archiving_then_archive_and_survive_a_reload():
    """KIP-1191: with a DLQ, a rejected record and one past the delivery limit (by a release or an expired lock)
    go to ARCHIVING, handed to the DLQ writer once, holding the start offset until archived; a GAP archives at
    once; ARCHIVING is persisted as state 3 and handed over again after a reload."""
    clock = Clock()
    sp = partition(clock, limit=2)
    sp.dlq_enabled = lambda: True
    assert [r.last_offset for r in sp.acquire("m", [(10, 13)], 10)] == [13]
    assert sp.acknowledge("m", 10, 13, [REJECT, RELEASE, AcknowledgeType.GAP, RELEASE]) == ErrorCode.none
    assert [(b.first_offset, b.rejected) for b in sp.take_dlq_pending()] == [(10, True)]
    sp.acquire("m", [(10, 13)], 10)  # 11 and 13 again, their second delivery
    sp.acknowledge("m", 11, 11, [RELEASE])  # past the limit: to the DLQ
    clock.now += 2  # 13's lock expires past the limit
    sp.expire_locks()
    pending = sp.take_dlq_pending()
    assert [(b.first_offset, b.last_offset, b.delivery_count, b.rejected) for b in pending] == [
        (11, 11, 2, False), (13, 13, 2, False)]
    assert sp.take_dlq_pending() == [] and sp.start_offset == 10
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in sp.snapshot_batches()] == [
        (10, 10, 3), (11, 11, 3), (12, 12, 4), (13, 13, 3)]
    reloaded = partition(limit=2)
    reloaded.start_offset = reloaded.end_offset = -1
    reloaded.initialize(10, sp.snapshot_batches())
    assert [(b.first_offset, b.last_offset, b.rejected) for b in reloaded.take_dlq_pending()] == [
        (10, 10, True), (11, 11, False), (13, 13, False)]  # at the limit: resumed as exceeded, as Kafka
    for first, last in ((10, 10), (11, 11), (13, 13)):
        sp.finish_archiving(first, last)
    assert sp.start_offset == 14 and not sp.in_flight
    plain = partition(limit=2)  # no DLQ: rejected straight to ARCHIVED
    plain.acquire("m", [(10, 10)], 1)
    plain.acknowledge("m", 10, 10, [REJECT])
    assert plain.start_offset == 11 and plain.take_dlq_pending() == []


def test_records_delivered_often_are_throttled_as_kafka_44():
    """Kafka 4.4's throttling (limit 5: from delivery count 3, max(2, ceil(5 / 2))): a batch with such records is
    acquired alone and only in part, half of it at count 3; a record on its last attempt goes alone."""
    sp = partition(limit=5)
    batches = [(10, 19), (20, 23)]

    def acquire(member: str, max_records: int = 100) -> list[tuple[int, int, int]]:
        return [(a.first_offset, a.last_offset, a.delivery_count) for a in sp.acquire(member, batches, max_records)]

    def release(member: str, first: int, last: int) -> None:
        assert sp.acknowledge(member, first, last, [RELEASE]) == ErrorCode.none

    for count in (1, 2, 3):  # below the throttle: both batches whole in one acquisition
        assert acquire("m1") == [(10, 23, count)]
        release("m1", 10, 23)
    # delivered 3 times: batch 10-19 throttled, half of its 10 records, nothing of the next batch
    assert acquire("m1") == [(10, 14, 4)]
    assert acquire("m2") == [(15, 19, 4)]  # the rest of it, alone again
    assert acquire("m3") == [(20, 21, 4)]  # the second batch is throttled too: half of its 4
    release("m1", 10, 14)
    # on the last attempt (count 4 of 5): one record per acquisition
    assert acquire("m1") == [(10, 10, 5)]
    assert acquire("m1") == [(11, 11, 5)]


def test_throttling_with_the_smallest_limits():
    """Limit 3: throttled from count 2 (max(2, ceil(3 / 2))), where count 2 is also the last attempt."""
    sp = partition(limit=3)
    assert [(a.first_offset, a.last_offset) for a in sp.acquire("m1", [(10, 17)], 100)] == [(10, 17)]
    assert sp.acknowledge("m1", 10, 17, [RELEASE]) == ErrorCode.none
    assert [(a.first_offset, a.last_offset) for a in sp.acquire("m1", [(10, 17)], 100)] == [(10, 17)]
    assert sp.acknowledge("m1", 10, 17, [RELEASE]) == ErrorCode.none
    # count 2: throttled (at most 8 >> 1 records), and the last attempt: one record alone
    got = sp.acquire("m1", [(10, 17)], 100)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(10, 10, 3)]
