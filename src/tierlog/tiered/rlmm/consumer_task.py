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

Three pieces, kept apart so each can change alone: the positions (``read_offsets``, the next offset
to read per metadata partition), applying one event (``apply``), and the loop that polls.

It reads with tierlog's own consumer over the broker's listener, on the broker's event loop. A
retriable error keeps the loop going (assignments not yet positioned are retried); any other error
stops it for good, loudly: ``failure`` is set, writers waiting fail at once, nothing becomes ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from tierlog.client.errors import KafkaTimeoutError
from tierlog.client.types import TopicPartition
from tierlog.errors import KafkaError
from tierlog.tasks import stop_tasks
from tierlog.tiered.metadata import RemoteLogMetadata, TopicIdPartition
from tierlog.tiered.rlmm import snapshot as rlmm_snapshot
from tierlog.tiered.rlmm.cache import PartitionNotLoadedError, RemotePartitionMetadataStore
from tierlog.tiered.rlmm.partitioner import metadata_partition
from tierlog.tiered.rlmm.serde import MetadataRecordError, deserialize

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"
POLL_TIMEOUT_MS = 100
RETRY_BACKOFF_S = 0.1


class RemoteLogMetadataConsumeTimeoutError(KafkaTimeoutError, TimeoutError):
    """A write's own event was not read back within ``remote.log.metadata.consume.wait.ms``; retriable
    (Kafka raises a KafkaException here)."""


class ConsumerTaskStoppedError(KafkaError):
    """The reader of ``__remote_log_metadata`` stopped on a non-retriable error or was closed; not
    retriable: only a restart of the manager brings it back."""


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
        # Assigned user partitions whose starting point and end offset are not known yet; they are
        # positioned before the next poll, and again after a retriable failure.
        self._unpositioned: dict[TopicIdPartition, None] = {}
        self._end_at_assignment: dict[TopicIdPartition, int] = {}  # positioned, not yet caught up
        self._changes: list[tuple[str, list[TopicIdPartition]]] = []
        self._wakeup = asyncio.Event()  # assignment changes or close: the idle loop looks again
        self._progress = asyncio.Event()  # set after every poll: writers waiting for their event look
        self._task: asyncio.Task | None = None
        self._last_snapshot = time.monotonic()
        #: The name of the retriable read error last logged, until a read works again: logged once, not every retry.
        self._retrying: str | None = None
        self.failure: BaseException | None = None
        self.closed = False
        self.events_applied = 0

    # ------------------------------------------------------------------------------------- control

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rlmm-consumer-task")

    async def close(self) -> None:
        self.closed = True
        self._progress.set()
        self._wakeup.set()
        await stop_tasks(self._task)
        self._task = None
        if self.failure is None:
            self.write_snapshots()

    def add_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        self._changes.append(("add", list(partitions)))
        self._wakeup.set()

    def remove_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        self._changes.append(("remove", list(partitions)))
        self._wakeup.set()

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp.topic_id, tp.partition, self.num_partitions)

    def is_assigned(self, tp: TopicIdPartition) -> bool:
        return tp in self.assigned

    def is_pending(self, tp: TopicIdPartition) -> bool:
        """Announced but not yet picked up by the loop."""
        pending = False
        for kind, tps in self._changes:
            if tp in tps:
                pending = kind == "add"
        return pending and tp not in self.assigned

    def is_followed(self, tp: TopicIdPartition) -> bool:
        """Assigned, or about to be: the last announcement about ``tp`` added it."""
        for kind, tps in reversed(self._changes):
            if tp in tps:
                return kind == "add"
        return tp in self.assigned

    async def wait_until_consumed(self, mp: int, offset: int, timeout_s: float) -> None:
        """Return once the record at ``offset`` of metadata partition ``mp`` has been read (and applied)."""
        deadline = time.monotonic() + timeout_s
        while self.read_offsets.get(mp, -1) <= offset:
            self.check_running()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RemoteLogMetadataConsumeTimeoutError(
                    f"the record at offset {offset} of {METADATA_TOPIC}-{mp} was not consumed within "
                    f"{timeout_s * 1000:.0f} ms (remote.log.metadata.consume.wait.ms)")
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), min(remaining, 0.05))
            except TimeoutError:
                pass

    def check_running(self) -> None:
        if self.failure is not None:
            raise ConsumerTaskStoppedError(f"the {METADATA_TOPIC} consumer stopped on a non-retriable error "
                                           f"({type(self.failure).__name__}: {self.failure}); restart the broker")
        if self.closed:
            raise ConsumerTaskStoppedError(f"the {METADATA_TOPIC} consumer is closed")

    # ---------------------------------------------------------------------------------------- events

    def apply(self, mp: int, offset: int, event: RemoteLogMetadata) -> bool:
        """Apply the event read at ``offset`` of metadata partition ``mp`` if its user partition is
        assigned and has not seen it yet (a re-read after a seek back, or a snapshot that covers it)."""
        tp = event.topic_id_partition
        if tp not in self.assigned or offset <= self.last_applied.get(tp, -1):
            return False
        try:
            self.store.handle(event)
        except PartitionNotLoadedError:
            # Only after a DELETE_PARTITION_FINISHED marker dropped the partition's cache: nothing of it is kept.
            log.debug("Ignoring %s at %s-%d offset %d: the partition's metadata was deleted", event, METADATA_TOPIC,
                      mp, offset)
        self.last_applied[tp] = offset
        self.events_applied += 1
        return True

    def _process(self, mp: int, records) -> None:
        for record in records:
            try:
                event = deserialize(record.value)
            except MetadataRecordError as e:
                log.error("Skipping malformed record at %s-%d offset %d: %s", METADATA_TOPIC, mp, record.offset, e)
            else:
                self.apply(mp, record.offset, event)
            if mp in self.read_offsets:
                self.read_offsets[mp] = max(self.read_offsets[mp], record.offset + 1)

    def _mark_ready(self) -> None:
        for tp, end in list(self._end_at_assignment.items()):
            mp = self.assigned.get(tp)
            if mp is None:
                self._end_at_assignment.pop(tp, None)
            elif self.read_offsets.get(mp, 0) >= end:
                del self._end_at_assignment[tp]
                try:
                    self.store.mark_initialized(tp)
                except PartitionNotLoadedError:
                    continue  # its metadata was deleted while loading (DELETE_PARTITION_FINISHED)
                log.info("Remote log metadata of %s is loaded (up to %s-%d offset %d)", tp, METADATA_TOPIC, mp, end)

    # ---------------------------------------------------------------------------------------- loop

    async def _run(self) -> None:
        # Not only the cancel ends the loop: Python 3.11's asyncio.wait_for (under the consumer's poll) drops a
        # cancellation that lands together with the awaited result, and close() would then wait forever.
        while not self.closed:
            try:
                if self._changes:
                    self._apply_assignment_changes()
                if self._unpositioned:
                    await self._position_new_partitions()
                if not self.read_offsets:
                    # Idle only with nothing announced: the positioning above returns early when an
                    # announcement arrived meanwhile, and that one must be taken now, not at the next.
                    self._wakeup.clear()
                    if not self._changes and not self._unpositioned:
                        await self._wakeup.wait()
                    continue
                records = await self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                for tp, recs in records.items():
                    self._process(tp.partition, recs)
                for mp in self.read_offsets:
                    self.read_offsets[mp] = max(self.read_offsets[mp],
                                                await self.consumer.position(TopicPartition(METADATA_TOPIC, mp)))
                if self._retrying is not None:
                    log.info("Reading %s again (after: %s)", METADATA_TOPIC, self._retrying)
                    self._retrying = None
                self._mark_ready()
                self._progress.set()
                if time.monotonic() - self._last_snapshot >= self.snapshot_interval_s:
                    self.write_snapshots()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                if e.retriable:
                    if e.name != self._retrying:  # once per kind of error, not every retry
                        log.warning("Error reading %s (retrying every %.1f s until it works): %s", METADATA_TOPIC,
                                    RETRY_BACKOFF_S, e)
                        self._retrying = e.name
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue
                self._fail(e)
                return
            except Exception as e:  # noqa: BLE001 - surfaced through failure, never swallowed silently
                self._fail(e)
                return

    def _fail(self, e: BaseException) -> None:
        self.failure = e
        self._progress.set()
        log.error("The %s consumer stopped on a non-retriable error; partitions not yet loaded stay unavailable, "
                  "no partition reports ready and metadata writes fail until the broker restarts: %s",
                  METADATA_TOPIC, e, exc_info=e)

    def _apply_assignment_changes(self) -> None:
        """Take the announced changes: new user partitions get an empty cache (lookups answer
        REPLICA_NOT_AVAILABLE) and wait to be positioned; removed ones are forgotten."""
        changes, self._changes = self._changes, []
        removed = False
        for kind, tps in changes:
            for tp in tps:
                if kind == "add" and tp not in self.assigned:
                    self.assigned[tp] = self.metadata_partition(tp)
                    self.store.maybe_load_partition(tp)
                    self._unpositioned[tp] = None
                elif kind == "remove" and tp in self.assigned:
                    del self.assigned[tp]
                    self.last_applied.pop(tp, None)
                    self._end_at_assignment.pop(tp, None)
                    self._unpositioned.pop(tp, None)
                    self.store.clear_partition(tp)
                    removed = True
        needed = set(self.assigned.values())
        for mp in list(self.read_offsets):
            if mp not in needed:
                del self.read_offsets[mp]
        if removed and not self._unpositioned:
            self._assign_consumer({})

    def _assign_consumer(self, start: dict[int, int]) -> None:
        """Give the consumer the metadata partitions with a read offset (or a new starting point)."""
        for mp, offset in start.items():
            self.read_offsets[mp] = offset
        mps = sorted(self.read_offsets)
        if not mps:
            self.consumer.assign([])
            return
        self.consumer.assign([TopicPartition(METADATA_TOPIC, mp) for mp in mps])
        for mp in mps:
            self.consumer.seek(TopicPartition(METADATA_TOPIC, mp), self.read_offsets[mp])

    async def _position_new_partitions(self) -> None:
        """Where to (re)read each metadata partition of the user partitions just assigned from, and the
        end offsets they must reach to be ready. All network calls come before any state changes, so a
        retriable failure leaves everything as it was and the next loop iteration tries again."""
        added = list(self._unpositioned)
        snapshots: dict[int, rlmm_snapshot.Snapshot | None] = {}
        for tp in added:
            mp = self.assigned[tp]
            if mp not in snapshots:  # decoding a large snapshot takes a while: off the event loop
                snapshots[mp] = await asyncio.to_thread(rlmm_snapshot.read, self.log_dir, mp) if self.log_dir else None
        tps = [TopicPartition(METADATA_TOPIC, mp) for mp in snapshots]
        first = {tp.partition: offset for tp, offset in (await self.consumer.beginning_offsets(tps)).items()}
        ends = {tp.partition: offset for tp, offset in (await self.consumer.end_offsets(tps)).items()}
        if self._changes:
            return  # assignments changed meanwhile: take them first, then position everything together
        for mp, snap in snapshots.items():
            if snap is not None and snap.read_offset > ends[mp]:
                log.warning("Ignoring the remote log metadata snapshot of %s-%d: it is ahead of the partition "
                            "(offset %d > end %d); replaying it", METADATA_TOPIC, mp, snap.read_offset, ends[mp])
                snapshots[mp] = None
        start: dict[int, int] = {}
        for tp in added:
            mp = self.assigned[tp]
            snap = snapshots[mp]
            state = snap.partitions.get(tp) if snap is not None else None
            if state is not None:
                self.store.import_state(tp, state.segments, state.epochs)
                self.last_applied[tp] = state.last_applied_offset
                begin = snap.read_offset
            else:
                self.store.maybe_load_partition(tp)
                self.last_applied[tp] = -1
                begin = 0
            start[mp] = min(start.get(mp, begin), begin)
            self._end_at_assignment[tp] = ends[mp]
            del self._unpositioned[tp]
        for mp in start:
            if mp in self.read_offsets:  # never skip ahead of what the partitions already followed still need
                start[mp] = min(start[mp], self.read_offsets[mp])
            if start[mp] < first[mp]:
                # Retention of the metadata topic removed events these partitions need.
                log.warning("%s-%d starts at %d, after where its metadata must be read from (%d): events were "
                            "lost to retention of the metadata topic", METADATA_TOPIC, mp, first[mp], start[mp])
                start[mp] = first[mp]
        self._assign_consumer(start)
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
