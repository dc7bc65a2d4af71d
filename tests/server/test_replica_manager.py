"""The replica manager assembled in-process from the broker's own services, no subprocess and no socket:
real logs in a temporary folder, the controller, and tiered storage with the filesystem store and the
in-memory metadata manager. Reads of both tiers, long polling and offsets are checked at the service's
interface (``fetch_messages``, ``fetch_offsets``), which the Fetch and ListOffsets handlers only translate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, ensure_meta_properties
from tierlog.config import BrokerConfig
from tierlog.records import build_batch, iter_batches
from tierlog.server.fetch_types import FetchIsolation, FetchParams, OffsetLookup, PartitionFetch
from tierlog.server.partition import Partition
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage import LogManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.rlmm.memory import InMemoryRemoteLogMetadataManager
from tierlog.tiered.rsm import create_remote_storage_manager

NODE = 1
TS0 = 1_700_000_000_000


@dataclass
class Node:
    controller: Controller
    log_manager: LogManager
    rlm: RemoteLogManager
    rm: ReplicaManager

    async def close(self) -> None:
        await self.rlm.close()
        self.rlm.rsm.close()
        self.rm.shutdown()
        self.log_manager.shutdown()


async def assemble(tmp_path, **settings) -> Node:
    """What the broker's composition root builds, minus the network: on the running event loop."""
    log_dir = str(tmp_path / "logs")
    cfg = BrokerConfig({"node.id": str(NODE), "log.dirs": log_dir, "remote.log.storage.system.enable": "true",
                        "rsm.config.dir": str(tmp_path / "remote"), "remote.log.manager.task.interval.ms": "3600000",
                        **settings})
    cluster_id = ensure_meta_properties([log_dir], NODE, None)
    controller = Controller(cfg, FileMetadataStore(log_dir), BrokerImage(NODE, "127.0.0.1", 9092), cluster_id)
    lm = LogManager([log_dir], controller.log_config)
    lm.startup()
    rsm = create_remote_storage_manager("filesystem", {"dir": str(tmp_path / "remote"), "fsync.enable": "false"})
    rlm = build_remote_log_manager(cfg, NODE, rsm, InMemoryRemoteLogMetadataManager(), log_dir,
                                   effective_config=lambda: controller.effective_config)
    rm = ReplicaManager(NODE, lm, controller, rlm, lambda: controller.effective_config)
    rm.load(controller.image)
    controller.add_listener(rm.on_metadata_update)
    return Node(controller, lm, rlm, rm)


def produce(node: Node, topic: str, count: int, partition: int = 0, size: int = 200) -> None:
    for i in range(count):
        batch = build_batch([(b"k%d" % i, bytes([i % 251]) * size, [], TS0 + i)])
        assert node.rm.append_records(topic, partition, batch, acks=-1)["base_offset"] == i


async def tier(node: Node, partition: Partition) -> None:
    """Copy every rolled segment now and let local retention drop what was copied."""
    st = node.rlm.partitions[node.rlm.topic_id_partition(partition)]
    node.rlm._cancel(st)  # the periodic tasks would race the explicit run
    await node.rlm._copy_once(st)
    partition.log.delete_old_segments()


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


def test_a_fetch_reads_the_remote_tier_below_the_local_start_and_the_local_log_above(tmp_path):
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


def test_long_polling_rereads_only_the_partitions_that_changed(tmp_path):
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
        finally:
            await node.close()
    asyncio.run(scenario())


def test_remote_reads_over_the_fetch_quota_answer_empty_without_error(tmp_path):
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
