"""The topic-based metadata manager's reader of ``__remote_log_metadata`` (Kafka's ``ConsumerTask``).

It follows the metadata partitions that hold the events of the user partitions this broker hosts,
applies those events to the cache, and tells when each user partition has caught up:

- a user partition newly followed starts from its snapshot (tierlog) or from the beginning of its
  metadata partition (Kafka); several user partitions share a metadata partition, so an event is
  applied only when it is past the last offset already applied *to that user partition*;
- a user partition is ready (lookups stop raising REPLICA_NOT_AVAILABLE) once the read offset of its
  metadata partition reaches the end offset captured when it was assigned;
- every ``snapshot_interval_s`` the state of each metadata partition is snapshotted so a restart
  replays only what came after.

It reads with tierlog's own consumer over the broker's listener, on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from tierlog.client.types import TopicPartition
from tierlog.errors import KafkaError
from tierlog.tiered import rlmm_snapshot
from tierlog.tiered.cache import RemotePartitionMetadataStore
from tierlog.tiered.metadata import TopicIdPartition
from tierlog.tiered.partitioner import metadata_partition
from tierlog.tiered.serde import MetadataRecordError, deserialize

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"
POLL_TIMEOUT_MS = 100


class ConsumerTask:
    def __init__(self, consumer, store: RemotePartitionMetadataStore, num_partitions: int, log_dir: str | None,
                 snapshot_interval_s: float = 60.0) -> None:
        self.consumer = consumer
        self.store = store
        self.num_partitions = num_partitions
        self.log_dir = log_dir
        self.snapshot_interval_s = snapshot_interval_s
        self.assigned: dict[TopicIdPartition, int] = {}  # user partition -> metadata partition
        self.last_applied: dict[TopicIdPartition, int] = {}  # user partition -> last metadata offset applied
        self.read_offsets: dict[int, int] = {}  # metadata partition -> next offset to read
        self._end_at_assignment: dict[TopicIdPartition, int] = {}  # user partitions not yet ready
        self._changes: list[tuple[str, list[TopicIdPartition]]] = []
        self._progress = asyncio.Event()  # set after every poll: writers waiting for their event look
        self._task: asyncio.Task | None = None
        self._last_snapshot = time.monotonic()
        self.failure: BaseException | None = None
        self.events_applied = 0

    # ------------------------------------------------------------------------------------- control

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rlmm-consumer-task")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing
                pass
            self._task = None
        if self.failure is None:
            self.write_snapshots()

    def add_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        self._changes.append(("add", list(partitions)))
        self._progress.set()

    def remove_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        self._changes.append(("remove", list(partitions)))
        self._progress.set()

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp.topic_id, tp.partition, self.num_partitions)

    def is_assigned(self, tp: TopicIdPartition) -> bool:
        return tp in self.assigned

    def is_pending(self, tp: TopicIdPartition) -> bool:
        """Announced but not yet picked up by the loop."""
        return tp not in self.assigned and any(kind == "add" and tp in tps for kind, tps in self._changes)

    async def wait_until_consumed(self, mp: int, offset: int, timeout_s: float) -> None:
        """Return once the record at ``offset`` of metadata partition ``mp`` has been read (and applied)."""
        deadline = time.monotonic() + timeout_s
        while self.read_offsets.get(mp, -1) <= offset:
            if self.failure is not None:
                raise KafkaError(f"the remote log metadata consumer stopped: {self.failure}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the record at offset {offset} of {METADATA_TOPIC}-{mp} was not consumed "
                                   f"within {timeout_s * 1000:.0f} ms (remote.log.metadata.consume.wait.ms)")
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), min(remaining, 0.05))
            except TimeoutError:
                pass

    # ---------------------------------------------------------------------------------------- loop

    async def _run(self) -> None:
        while True:
            try:
                if self._changes:
                    await self._apply_assignment_changes()
                if not self.read_offsets:
                    self._progress.clear()
                    await self._progress.wait()
                    continue
                records = await self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                for tp, recs in records.items():
                    self._process(tp.partition, recs)
                for mp in self.read_offsets:
                    self.read_offsets[mp] = max(self.read_offsets[mp],
                                                await self.consumer.position(TopicPartition(METADATA_TOPIC, mp)))
                self._mark_ready()
                self._progress.set()
                if time.monotonic() - self._last_snapshot >= self.snapshot_interval_s:
                    self.write_snapshots()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                if e.retriable:
                    log.warning("Error reading %s (retrying): %s", METADATA_TOPIC, e)
                    await asyncio.sleep(0.1)
                    continue
                self._fail(e)
                return
            except Exception as e:  # noqa: BLE001 - surfaced through failure, never swallowed silently
                self._fail(e)
                return

    def _fail(self, e: BaseException) -> None:
        self.failure = e
        self._progress.set()
        log.error("The remote log metadata consumer stopped on a non-retriable error; remote reads of the "
                  "partitions not yet loaded stay unavailable and metadata writes fail until a restart: %s", e,
                  exc_info=True)

    def _process(self, mp: int, records) -> None:
        for record in records:
            try:
                event = deserialize(record.value)
            except MetadataRecordError as e:
                log.error("Skipping malformed record at %s-%d offset %d: %s", METADATA_TOPIC, mp, record.offset, e)
                continue
            tp = event.topic_id_partition
            if tp in self.assigned and record.offset > self.last_applied.get(tp, -1):
                self.store.handle(event)
                self.last_applied[tp] = record.offset
                self.events_applied += 1
            self.read_offsets[mp] = max(self.read_offsets.get(mp, 0), record.offset + 1)

    def _mark_ready(self) -> None:
        for tp, end in list(self._end_at_assignment.items()):
            mp = self.assigned.get(tp)
            if mp is None:
                self._end_at_assignment.pop(tp, None)
            elif self.read_offsets.get(mp, 0) >= end:
                self.store.mark_initialized(tp)
                del self._end_at_assignment[tp]
                log.info("Remote log metadata of %s is loaded (up to %s-%d offset %d)", tp, METADATA_TOPIC, mp, end)

    async def _apply_assignment_changes(self) -> None:
        changes, self._changes = self._changes, []
        added: list[TopicIdPartition] = []
        for kind, tps in changes:
            for tp in tps:
                if kind == "add" and tp not in self.assigned:
                    self.assigned[tp] = self.metadata_partition(tp)
                    added.append(tp)
                elif kind == "remove" and tp in self.assigned:
                    del self.assigned[tp]
                    self.last_applied.pop(tp, None)
                    self._end_at_assignment.pop(tp, None)
                    self.store.clear_partition(tp)
                    if tp in added:
                        added.remove(tp)
        needed = set(self.assigned.values())
        for mp in list(self.read_offsets):
            if mp not in needed:
                del self.read_offsets[mp]
        # Where each metadata partition must be (re)read from: the oldest starting point of the user
        # partitions just added (their snapshot, or the beginning); events already applied to the other
        # user partitions are skipped by the per-user-partition offsets.
        start: dict[int, int] = {}
        snapshots: dict[int, rlmm_snapshot.Snapshot | None] = {}
        for tp in added:
            mp = self.assigned[tp]
            if mp not in snapshots:  # decoding a large snapshot takes a while: off the event loop
                snapshots[mp] = await asyncio.to_thread(rlmm_snapshot.read, self.log_dir, mp) if self.log_dir else None
            snap = snapshots[mp]
            self.store.maybe_load_partition(tp)
            state = snap.partitions.get(tp) if snap is not None else None
            if state is not None:
                self.store.import_state(tp, state.segments, state.epochs)
                self.last_applied[tp] = state.last_applied_offset
                begin = snap.read_offset
            else:
                self.last_applied[tp] = -1
                begin = 0
            start[mp] = min(start.get(mp, begin), begin)
        for mp in start:
            if mp in self.read_offsets:  # never skip ahead of what the partitions already followed still need
                start[mp] = min(start[mp], self.read_offsets[mp])
        tps = [TopicPartition(METADATA_TOPIC, mp) for mp in sorted(needed)]
        self.consumer.assign(tps)
        for mp in sorted(needed):
            if mp in start:
                self.consumer.seek(TopicPartition(METADATA_TOPIC, mp), start[mp])
                self.read_offsets[mp] = start[mp]
            elif mp in self.read_offsets:
                self.consumer.seek(TopicPartition(METADATA_TOPIC, mp), self.read_offsets[mp])
        if added:
            # A snapshot older than the log start (retention on the metadata topic) would skip events.
            begin = await self.consumer.beginning_offsets([TopicPartition(METADATA_TOPIC, mp) for mp in start])
            for tp_mp, first in begin.items():
                if start[tp_mp.partition] < first:
                    log.warning("%s-%d starts at %d, after where its metadata must be read from (%d): "
                                "events were lost to retention of the metadata topic", METADATA_TOPIC,
                                tp_mp.partition, first, start[tp_mp.partition])
                    self.consumer.seek(tp_mp, first)
                    self.read_offsets[tp_mp.partition] = first
            ends = await self.consumer.end_offsets([TopicPartition(METADATA_TOPIC, mp) for mp in start])
            for tp in added:
                self._end_at_assignment[tp] = ends[TopicPartition(METADATA_TOPIC, self.assigned[tp])]
            self._mark_ready()

    # ------------------------------------------------------------------------------------ snapshots

    def write_snapshots(self) -> None:
        """Snapshot every metadata partition whose user partitions are all loaded."""
        self._last_snapshot = time.monotonic()
        if not self.log_dir:
            return
        by_mp: dict[int, list[TopicIdPartition]] = {}
        for tp, mp in self.assigned.items():
            by_mp.setdefault(mp, []).append(tp)
        for mp, tps in by_mp.items():
            if mp not in self.read_offsets or any(not self.store.is_initialized(tp) for tp in tps):
                continue
            states = {tp: rlmm_snapshot.PartitionState(tp, self.last_applied.get(tp, -1), *self.store.export_state(tp))
                      for tp in tps}
            try:
                rlmm_snapshot.write(self.log_dir, rlmm_snapshot.Snapshot(mp, self.read_offsets[mp], states))
            except OSError as e:
                log.warning("Could not write the remote log metadata snapshot of %s-%d: %s", METADATA_TOPIC, mp, e)
