"""The replica manager assembled in-process from the broker's own services, no subprocess and no socket:
real logs in a temporary folder, the controller, and tiered storage with the filesystem store and the
in-memory metadata manager. Reads of both tiers, long polling and offsets are checked at the service's
interface (``fetch_messages``, ``fetch_offsets``), which the Fetch and ListOffsets handlers only translate.
The fetch tests run both ways: as an ordinary fetch and as a big one (``fetch_path``), which reads and
waits a slice at a time, yielding to the event loop in between.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from tests.harness.inprocess import TS0, assemble, produce, tier
from tierlog.errors import (
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    InvalidProducerIdMappingError,
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from tierlog.protocol.offload import Pacer
from tierlog.records import build_batch, iter_batches
from tierlog.server import replica_manager
from tierlog.server.fetch_types import FetchIsolation, FetchParams, OffsetLookup, PartitionFetch
from tierlog.server.partition import Partition


def big_fetches(monkeypatch) -> None:
    """Every fetch takes the big fetch's path, in slices of one partition, yielding after each."""
    monkeypatch.setattr(replica_manager, "BIG_FETCH", 1)
    monkeypatch.setattr(replica_manager, "FETCH_SLICE", 1)
    monkeypatch.setattr(replica_manager, "Pacer", lambda: Pacer(0))


@pytest.fixture(params=["ordinary", "big"])
def fetch_path(request, monkeypatch) -> str:
    if request.param == "big":
        big_fetches(monkeypatch)
    return request.param


def consumer(max_bytes: int = 1 << 20, min_bytes: int = 1, max_wait_ms: int = 0) -> FetchParams:
    return FetchParams(-1, max_wait_ms, min_bytes, max_bytes, FetchIsolation.HIGH_WATERMARK)


def offsets_in(records) -> list[int]:
    data = records.read() if hasattr(records, "read") else bytes(records)
    return [o for _, h in iter_batches(data) for o in range(h.base_offset, h.last_offset + 1)]


def count_reads(partition: Partition) -> list[int]:
    """Count the local log's reads of ``partition`` (the fetch offsets asked for)."""
    calls: list[int] = []
    read = partition.log.read

    def counted(offset, *args, **kwargs):
        calls.append(offset)
        return read(offset, *args, **kwargs)
    partition.log.read = counted
    return calls


def test_a_fetch_reads_the_remote_tier_below_the_local_start_and_the_local_log_above(tmp_path, fetch_path):
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("t", 2, 1, configs={
                "remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
                "retention.ms": "-1"})
            produce(node, "t", 40, partition=0)
            produce(node, "t", 5, partition=1)
            p0 = node.rm.get_partition("t", 0)
            await tier(node, p0)
            local_start = p0.log.local_log_start_offset
            assert local_start > 0 and p0.log.log_start_offset == 0
            reads0, reads1 = count_reads(p0), count_reads(node.rm.get_partition("t", 1))
            # Partition 0 from offset 0 is in remote storage only: read there, not locally; partition 1 is
            # local. The local read goes first and takes what it needs (5 batches); the remote read gets its
            # partition limit within what is left of max_bytes, whole batches only.
            fetches = [PartitionFetch("t", 0, 0, 1 << 20), PartitionFetch("t", 1, 0, 1 << 20)]
            r0, r1 = await node.rm.fetch_messages(consumer(max_bytes=2500), fetches)
            assert r0.error_code == r1.error_code == 0
            assert offsets_in(r1.records) == [0, 1, 2, 3, 4]
            got0 = offsets_in(r0.records)
            assert got0[0] == 0 and got0[-1] < local_start and r0.size + r1.size <= 2500
            assert 2500 - r1.size - r0.size < 300  # the next batch would not have fitted
            assert reads0 == [0] and reads1 == [0]  # the local log of partition 0 refused at once, read once
            assert (r0.log_start_offset, r0.high_watermark) == (0, 40)
            # From the local start on, the local log answers.
            (r,) = await node.rm.fetch_messages(consumer(), [PartitionFetch("t", 0, local_start, 1 << 20)])
            assert offsets_in(r.records) == list(range(local_start, 40))
        finally:
            await node.close()
    asyncio.run(scenario())


def test_long_polling_rereads_only_the_partitions_that_changed(tmp_path, fetch_path):
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("lp", 2, 1)
            quiet, busy = node.rm.get_partition("lp", 0), node.rm.get_partition("lp", 1)
            quiet_reads, busy_reads = count_reads(quiet), count_reads(busy)
            fetch = asyncio.ensure_future(node.rm.fetch_messages(
                consumer(min_bytes=1, max_wait_ms=30_000),
                [PartitionFetch("lp", 0, 0, 1 << 20), PartitionFetch("lp", 1, 0, 1 << 20)]))
            while not node.rm._waiters:  # the fetch read both partitions empty and now waits for data
                await asyncio.sleep(0)
            assert quiet_reads == [0] and busy_reads == [0]
            produce(node, "lp", 1, partition=1)  # wakes the fetch
            r_quiet, r_busy = await asyncio.wait_for(fetch, 10)
            assert offsets_in(r_busy.records) == [0] and r_quiet.size == 0
            assert busy_reads == [0, 0] and quiet_reads == [0], "an unchanged empty partition is not read again"
            assert not node.rm._waiters
        finally:
            await node.close()
    asyncio.run(scenario())


def test_a_big_fetch_is_woken_by_an_append_made_while_it_yielded(tmp_path, monkeypatch):
    """The big fetch yields between its reads and its registration for the wait: an append then, which wakes
    nobody, still ends the wait at once (the fetch compares each partition with its state at its read)."""
    big_fetches(monkeypatch)

    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("y", 2, 1)
            reads = count_reads(node.rm.get_partition("y", 1))
            started = time.monotonic()
            fetch = asyncio.ensure_future(node.rm.fetch_messages(
                consumer(min_bytes=1, max_wait_ms=30_000),
                [PartitionFetch("y", 0, 0, 1 << 20), PartitionFetch("y", 1, 0, 1 << 20)]))
            while not reads:  # the fetch has read both partitions (empty) and yields
                await asyncio.sleep(0)
            assert not node.rm._waiters
            produce(node, "y", 2, partition=0)
            r0, r1 = await asyncio.wait_for(fetch, 10)
            assert time.monotonic() - started < 5
            assert offsets_in(r0.records) == [0, 1] and r1.size == 0 and r0.error_code == r1.error_code == 0
            assert not node.rm._waiters
        finally:
            await node.close()
    asyncio.run(scenario())


def test_a_cancelled_big_fetch_leaves_no_waiter(tmp_path, monkeypatch):
    big_fetches(monkeypatch)

    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("c", 3, 1)
            fetch = asyncio.ensure_future(node.rm.fetch_messages(
                consumer(min_bytes=1, max_wait_ms=30_000), [PartitionFetch("c", p, 0, 1 << 20) for p in range(3)]))
            while len(node.rm._waiters) < 3:
                await asyncio.sleep(0)
            await asyncio.sleep(0.05)  # waiting now
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)
            assert not node.rm._waiters
        finally:
            await node.close()
    asyncio.run(scenario())


def test_remote_reads_over_the_fetch_quota_answer_empty_without_error(tmp_path, fetch_path):
    async def scenario():
        node = await assemble(tmp_path, **{"remote.log.manager.fetch.max.bytes.per.second": "1"})
        try:
            node.controller.create_topic("q", 1, 1, configs={
                "remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
                "retention.ms": "-1"})
            produce(node, "q", 30)
            p = node.rm.get_partition("q", 0)
            await tier(node, p)
            (first,) = await node.rm.fetch_messages(consumer(), [PartitionFetch("q", 0, 0, 1 << 20)])
            assert first.error_code == 0 and first.size > 0  # the first read goes, and uses up the quota
            (second,) = await node.rm.fetch_messages(consumer(), [PartitionFetch("q", 0, 0, 1 << 20)])
            assert second.error_code == 0 and second.size == 0 and second.high_watermark == 30
            assert node.rlm.metrics.fetch_throttled.value(topic="q") == 1
        finally:
            await node.close()
    asyncio.run(scenario())


def test_offsets_by_timestamp_search_the_remote_tier_first(tmp_path):
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("ts", 1, 1, configs={
                "remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
                "retention.ms": "-1"})
            produce(node, "ts", 30)
            p = node.rm.get_partition("ts", 0)
            await tier(node, p)
            assert p.log.local_log_start_offset > 3
            lookups = [OffsetLookup("ts", 0, TS0 + 3), OffsetLookup("ts", 0, -2), OffsetLookup("ts", 0, -4),
                       OffsetLookup("ts", 0, TS0 + 1000), OffsetLookup("nope", 0, -1)]
            by_ts, earliest, earliest_local, future, unknown = await node.rm.fetch_offsets(
                lookups, FetchIsolation.HIGH_WATERMARK, timeout_s=10)
            assert (by_ts.error_code, by_ts.offset, by_ts.timestamp) == (0, 3, TS0 + 3)
            assert earliest.offset == 0 and earliest_local.offset == p.log.local_log_start_offset
            assert future.offset == -1 and future.error_code == 0
            assert unknown.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await node.close()
    asyncio.run(scenario())


def test_a_follower_checks_the_current_leader_epoch_first(tmp_path):
    """Kafka's getLocalLog, for OffsetsForLeaderEpoch and ListOffsets: a replica that follows answers a stale or
    future current_leader_epoch with FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, and NOT_LEADER_OR_FOLLOWER
    only for the current one (or none)."""
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("ep", 1, 1)
            p = node.rm.get_partition("ep", 0)
            p.leader_id, p.leader_epoch = 2, 3  # as a pushed image makes this broker a follower

            def code(current: int) -> int:
                try:
                    node.rm.last_offset_for_leader_epoch("ep", 0, 0, current)
                except KafkaError as e:
                    return e.code
                return 0
            expected = [FencedLeaderEpochError.code, UnknownLeaderEpochError.code, NotLeaderOrFollowerError.code,
                        NotLeaderOrFollowerError.code]
            assert [code(c) for c in (2, 4, 3, -1)] == expected
            lookups = [OffsetLookup("ep", 0, -1, current_leader_epoch=c) for c in (2, 4, 3, -1)]
            listed = await node.rm.fetch_offsets(lookups, FetchIsolation.HIGH_WATERMARK, timeout_s=10)
            assert [r.error_code for r in listed] == expected
        finally:
            await node.close()
    asyncio.run(scenario())


def test_a_duplicate_batch_is_answered_as_such_whatever_the_isr(tmp_path):
    """acks=all and an ISR below min.insync.replicas: a retried idempotent batch already in the log gets its
    original offset (Kafka refuses it NOT_ENOUGH_REPLICAS, "not written", which let librdkafka renumber and write
    it again), a new one is refused; a duplicate's wait ends NONE once the high watermark passed it, where an
    append's ends NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank after the high watermark moved)."""
    from tierlog.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError, RequestTimedOutError
    from tierlog.records import build_batch
    from tierlog.server.partition import FollowerState

    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("dup", 1, 1, configs={"min.insync.replicas": "2"})
            rm = node.rm
            p = rm.get_partition("dup", 0)
            p.replicas, p.isr = (1, 2), (1, 2)  # a follower, broker 2, that has nothing yet
            p.followers = {2: FollowerState(log_end_offset=0)}

            def batch(seq: int) -> bytes:
                return build_batch([(None, b"v%d" % seq, [], TS0)], producer_id=7, producer_epoch=0,
                                   base_sequence=seq)

            def wait(appended: dict) -> tuple:  # what the Produce handler waits on for acks=all
                return "dup", 0, appended["leader_epoch"], appended["last_offset"], appended["duplicate"]

            first = rm.append_records("dup", 0, batch(0), acks=-1)
            assert (first["base_offset"], first["duplicate"]) == (0, False)
            p.isr = (1,)  # the follower left the ISR
            retry = rm.append_records("dup", 0, batch(0), acks=-1)
            assert (retry["base_offset"], retry["duplicate"]) == (0, True)
            with pytest.raises(NotEnoughReplicasError):
                rm.append_records("dup", 0, batch(1), acks=-1)
            # The high watermark stands still below min.insync.replicas: the duplicate waits, as an append does.
            p.followers[2].log_end_offset = 1
            assert not p.maybe_increment_high_watermark()
            assert await rm.wait_for_acks([wait(retry)], 0.05) == [RequestTimedOutError.code]
            p.isr = (1, 2)
            assert p.maybe_increment_high_watermark() and p.log.high_watermark == 1
            p.isr = (1,)
            assert await rm.wait_for_acks([wait(first), wait(retry)], 5) == [
                NotEnoughReplicasAfterAppendError.code, 0]
            assert p.log.log_end_offset == 1  # one record, not two
        finally:
            await node.close()
    asyncio.run(scenario())


class _Coordinators:
    """A stand-in AddPartitionsToTxnManager: guards taken from the real logs, the coordinator's answer made up."""

    def __init__(self, rm, answers: dict):
        self.rm = rm
        self.answers = answers
        self.questions: list[tuple] = []

    async def verify_for_append(self, transactional_id, producer_id, producer_epoch, sequences, abortable_supported,
                                add=False):
        self.questions.append((transactional_id, producer_id, producer_epoch, dict(sequences), add))
        guards = {tp: self.rm.maybe_start_transaction_verification(*tp, producer_id, seq, producer_epoch)
                  for tp, seq in sequences.items()}
        return {tp: code for tp, code in self.answers.items() if tp in sequences}, guards


def test_produce_append_verifies_a_transaction_before_appending(tmp_path):
    """KIP-890 part 1 in the replica manager (Kafka's handleProduceAppend): one question for the request's
    transactional partitions, a coordinator that cannot answer yet becomes NOT_ENOUGH_REPLICAS with Kafka's
    message and no log start offset; no question when verification is off; two producers refuse the request."""
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("t", 2, 1)
            rm = node.rm
            coordinators = _Coordinators(rm, {("t", 1): CoordinatorNotAvailableError.code})
            rm.add_partitions_to_txn_manager = coordinators

            def batch(producer_id=7):
                return build_batch([(b"k", b"v", [], TS0)], producer_id=producer_id, producer_epoch=0,
                                   base_sequence=0, is_transactional=True)
            entries = [("t", 0, batch()), ("t", 1, batch())]
            ok, refused = await rm.handle_produce_append(entries, 1, 1.0, "txn")
            assert coordinators.questions == [("txn", 7, 0, {("t", 0): 0, ("t", 1): 0}, False)]
            assert ok["index"] == 0 and ok["error_code"] == 0 and ok["base_offset"] == 0
            assert refused == {"index": 1, "error_code": NotEnoughReplicasError.code, "base_offset": -1,
                               "log_append_time_ms": -1, "log_start_offset": -1,
                               "error_message": "Unable to verify the partition has been added to the transaction"}
            with pytest.raises(InvalidProducerIdMappingError):
                await rm.handle_produce_append([("t", 0, batch(8)), ("t", 1, batch(9))], 1, 1.0, "txn")
            rm.transaction_verification_enabled = lambda: False
            (unverified,) = await rm.handle_produce_append([("t", 1, batch(10))], 1, 1.0, "txn")
            assert unverified["error_code"] == 0 and len(coordinators.questions) == 1  # two producers: not asked
            # Transaction version 2 (Produce v12) adds the partition whatever the config says.
            await rm.handle_produce_append([("t", 1, batch(11))], 1, 1.0, "txn", transaction_version_2=True)
            assert coordinators.questions[-1][4] is True
        finally:
            await node.close()
    asyncio.run(scenario())


def test_a_push_of_the_same_partition_epoch_keeps_an_isr_change_in_flight(tmp_path):
    """A leader adding a replica to the ISR counts it for the high watermark until the controller answers (Kafka's
    maximal ISR). A metadata push carrying the ISR of the same partition epoch (sent before the controller took
    the change) must not end that: the high watermark would pass the joining replica, which, once in the ISR,
    could be elected leader without records acknowledged in between."""
    from tierlog.cluster.image import MetadataDelta, PartitionImage
    from tierlog.server.partition import FollowerState

    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("isr", 1, 1)
            rm = node.rm
            p = rm.get_partition("isr", 0)
            p.replicas, p.isr, p.partition_epoch = (1, 2, 3), (1, 2), 1
            for i in range(10):
                rm.append_records("isr", 0, build_batch([(None, b"v%d" % i, [], TS0)]), acks=1)
            p.followers = {2: FollowerState(log_end_offset=10), 3: FollowerState(log_end_offset=4)}
            p.log.update_high_watermark(4)
            p.pending_isr = (1, 2, 3)  # replica 3 joins: it had reached the high watermark
            topic = node.controller.image.topics["isr"]
            stale = dataclasses.replace(topic, partitions={0: PartitionImage(0, 1, p.leader_epoch, (1, 2, 3), (1, 2),
                                                                             partition_epoch=1)})
            rm.on_metadata_update(MetadataDelta(partitions_changed=(stale,)), node.controller.image)
            assert p.pending_isr == (1, 2, 3) and p.isr == (1, 2)
            assert not p.maybe_increment_high_watermark() and p.log.high_watermark == 4  # replica 3 holds it
            rm.isr_updated(p, p.leader_epoch, (1, 2, 3), 2)  # the controller's answer
            assert p.pending_isr is None and p.isr == (1, 2, 3) and p.log.high_watermark == 4
            p.followers[3].log_end_offset = 10
            assert p.maybe_increment_high_watermark() and p.log.high_watermark == 10
        finally:
            await node.close()
    asyncio.run(scenario())
