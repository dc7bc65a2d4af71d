"""The topic-based remote log metadata manager's in-memory view of remote segments.

``RemoteLogMetadataCache`` holds one user partition's segments with the exact semantics of Kafka's
``RemoteLogMetadataCache`` and ``RemoteLogLeaderEpochState``; ``RemotePartitionMetadataStore`` holds
the caches of every partition this broker follows and applies the events its consumer task reads from
``__remote_log_metadata``. Reads only ever see COPY_SEGMENT_FINISHED segments through the
(epoch, offset) lookup; listings also show segments being copied or deleted, so that retention can
clean them up.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter

from tierlog.errors import ReplicaNotAvailableError
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    valid_segment_transition,
)

log = logging.getLogger(__name__)

_START_OFFSET = attrgetter("start_offset")


class PartitionNotLoadedError(RuntimeError):
    """An event or call for a user partition the store holds no cache for (Kafka's IllegalStateException
    "No partition metadata found"): the consumer task only reads events of assigned partitions, so this
    signals a bug."""


def _epoch_ranges(md: RemoteLogSegmentMetadata) -> Iterator[tuple[int, int, int]]:
    """(epoch, first offset, last offset) of each leader epoch inside the segment."""
    items = list(md.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else md.end_offset
        yield epoch, start, end


class RemoteLogLeaderEpochState:
    """One leader epoch's segments in a partition (Kafka's ``RemoteLogLeaderEpochState``).

    Referenced segments are the COPY_SEGMENT_FINISHED ones reads may use, by the first offset of this
    epoch in them (two parallel sorted lists, searched with bisect). Unreferenced ones are being copied,
    being deleted, or were superseded by a re-upload; they stay listed so they can be deleted.
    """

    __slots__ = ("_offsets", "_ids", "_unreferenced", "highest_log_offset")

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._ids: list[RemoteLogSegmentId] = []
        # A dict as an insertion-ordered set, so listings do not depend on hash order.
        self._unreferenced: dict[RemoteLogSegmentId, None] = {}
        # Highest offset of this epoch among segments that reached COPY_SEGMENT_FINISHED; never lowered.
        self.highest_log_offset: int | None = None

    def handle_copy_started(self, segment_id: RemoteLogSegmentId) -> None:
        self._unreferenced[segment_id] = None

    def handle_copy_finished(self, start_offset: int, segment_id: RemoteLogSegmentId, epoch_end_offset: int,
                             end_of: Callable[[RemoteLogSegmentId], int] | None = None) -> None:
        # A new leader may re-upload a superset of, or a range overlapping, what the previous leader
        # uploaded: the newer upload wins, the older ones become unreferenced (cleaned up by retention).
        offsets, ids = self._offsets, self._ids
        if end_of is not None:
            # A compacted topic's replacement (docs/tiered-storage.md, "Compacted topics") may contain
            # segments that are not the epoch's last: reads of their offsets go to it from now on.
            j = bisect_right(offsets, start_offset)
            while j < len(offsets) and offsets[j] <= epoch_end_offset and end_of(ids[j]) <= epoch_end_offset:
                offsets.pop(j)
                self._unreferenced[ids.pop(j)] = None
        while offsets and offsets[-1] >= start_offset and self.highest_log_offset <= epoch_end_offset:
            offsets.pop()
            self._unreferenced[ids.pop()] = None
        i = bisect_left(offsets, start_offset)
        if i < len(offsets) and offsets[i] == start_offset:
            # Kafka's map put: the segment it replaces is forgotten by this epoch (not made unreferenced).
            ids[i] = segment_id
        else:
            offsets.insert(i, start_offset)
            ids.insert(i, segment_id)
        self._unreferenced.pop(segment_id, None)
        if self.highest_log_offset is None or epoch_end_offset > self.highest_log_offset:
            self.highest_log_offset = epoch_end_offset

    def handle_delete_started(self, start_offset: int, segment_id: RemoteLogSegmentId) -> None:
        i = bisect_left(self._offsets, start_offset)
        if i < len(self._offsets) and self._offsets[i] == start_offset and self._ids[i] == segment_id:
            del self._offsets[i], self._ids[i]
        # Listed as unreferenced so that a failed deletion is retried.
        self._unreferenced[segment_id] = None

    def handle_delete_finished(self, segment_id: RemoteLogSegmentId) -> None:
        self._unreferenced.pop(segment_id, None)

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        """The referenced segment with the greatest start offset <= ``offset``."""
        i = bisect_right(self._offsets, offset)
        return self._ids[i - 1] if i else None

    def referenced_segment_ids(self) -> list[RemoteLogSegmentId]:
        return list(self._ids)

    def unreferenced_segment_ids(self) -> list[RemoteLogSegmentId]:
        return list(self._unreferenced)

    def list_all_segments(self, id_to_metadata: Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata]
                          ) -> list[RemoteLogSegmentMetadata]:
        """Referenced and unreferenced segments, sorted by start offset."""
        result = []
        for segment_id in (*self._ids, *self._unreferenced):
            md = id_to_metadata.get(segment_id)
            if md is None:
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for: {segment_id}")
            result.append(md)
        if self._unreferenced:  # referenced ones alone are already in offset order
            result.sort(key=_START_OFFSET)
        return result


class RemoteLogMetadataCache:
    """One user partition's remote segments (Kafka's ``RemoteLogMetadataCache``). Thread safe: the
    consumer task writes while the remote log manager reads."""

    def __init__(self) -> None:
        # Every segment not yet DELETE_SEGMENT_FINISHED. Insertion order is kept meaningful for
        # snapshot(): a segment moves to the end when it reaches COPY_SEGMENT_FINISHED.
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        # Epochs are never pruned when they become empty (Kafka's known TODO, KAFKA-12641).
        self._epochs: dict[int, RemoteLogLeaderEpochState] = {}
        self._initialized = False
        self._lock = threading.Lock()

    def mark_initialized(self) -> None:
        """The consumer task has caught up with this partition's events: reads are allowed from now on."""
        self._initialized = True

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    # ----------------------------------------------------------------------------------------- reads

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``, if any."""
        with self._lock:
            state = self._epochs.get(leader_epoch)
            if state is None:
                return None
            segment_id = state.floor_entry(offset)
            if segment_id is None:
                return None
            md = self._segments[segment_id]
        # The floor segment may end this epoch (or itself) before the offset.
        return None if offset > md.epoch_end_offset(leader_epoch) else md

    def list_remote_log_segments(self, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """With an epoch: that epoch's segments in any state but DELETE_SEGMENT_FINISHED, by start offset.
        Without: every segment of the partition not yet DELETE_SEGMENT_FINISHED, in no particular order."""
        with self._lock:
            if leader_epoch is None:
                return list(self._segments.values())
            state = self._epochs.get(leader_epoch)
            return [] if state is None else state.list_all_segments(self._segments)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` copied (COPY_SEGMENT_FINISHED at some point), if any."""
        with self._lock:
            state = self._epochs.get(leader_epoch)
            return None if state is None else state.highest_log_offset

    # ---------------------------------------------------------------------------------------- writes

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose upload started: listed, not yet readable. ``md`` must be COPY_SEGMENT_STARTED."""
        if md is None:
            raise TypeError("remote log segment metadata can not be None")
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"{md} should have state {RemoteLogSegmentState.COPY_SEGMENT_STARTED.name} "
                             f"but has {md.state.name}")
        with self._lock:
            existing = self._segments.get(md.segment_id)
            if not self._check_transition(existing.state if existing else None, md.state, md.segment_id):
                return
            for epoch in md.segment_leader_epochs:
                self._epoch(epoch).handle_copy_started(md.segment_id)
            self._segments[md.segment_id] = md

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a segment's state change. An invalid transition is logged and dropped; an update for an
        unknown segment is dropped while the partition is still loading (its base record may have been
        lost to the metadata topic's retention) and raises RemoteResourceNotFoundError afterwards."""
        if update is None:
            raise TypeError("remote log segment metadata update can not be None")
        with self._lock:
            existing = self._segments.get(update.segment_id)
            if existing is None:
                if not self._initialized:
                    log.debug("Dropping %s: the segment's base metadata is unknown", update)
                    return
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for: {update.segment_id}")
            if not self._check_transition(existing.state, update.state, update.segment_id):
                return
            target = update.state
            if target == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError(f"{update} with state {target.name} can not be updated; add the segment instead")
            md = existing.with_update(update)
            if target == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                self._apply_copy_finished(md)
            elif target == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                self._apply_delete_started(md)
            else:
                self._apply_delete_finished(md)

    # ------------------------------------------------------------------------------------- snapshots

    def snapshot(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, in the order :meth:`restore` needs: those that
        reached COPY_SEGMENT_FINISHED in the order they did, so replaying them redoes the de-duplication."""
        with self._lock:
            return list(self._segments.values())

    def restore(self, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
        """Load segments saved by :meth:`snapshot` into this (empty) cache, as Kafka 3.5 loaded its
        snapshot files: COPY_SEGMENT_FINISHED ones are re-applied with de-duplication, DELETE_SEGMENT_STARTED
        ones are tracked as unreferenced. What the snapshot cannot carry: de-duplication done by segments
        that were since deleted, and epochs' highest offsets reached only by deleted segments."""
        with self._lock:
            if self._segments:
                raise ValueError("restore needs an empty cache")
            for md in segments:
                if md.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                    for epoch in md.segment_leader_epochs:
                        self._epoch(epoch).handle_copy_started(md.segment_id)
                    self._segments[md.segment_id] = md
                elif md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    self._apply_copy_finished(md)
                elif md.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                    self._apply_delete_started(md)
                else:
                    raise ValueError(f"a snapshot can not hold a {md.state.name} segment: {md}")

    def export_state(self) -> tuple[list[RemoteLogSegmentMetadata], dict[int, tuple]]:
        """The cache exactly, for a snapshot: its segments, and per epoch (highest offset, referenced
        (start offset, segment index) pairs, unreferenced segment indexes), indexes into the segments."""
        with self._lock:
            segments = list(self._segments.values())
            index = {md.segment_id: i for i, md in enumerate(segments)}
            epochs = {}
            for epoch, st in self._epochs.items():
                refs = [(o, index[i]) for o, i in zip(st._offsets, st._ids) if i in index]
                unref = [index[i] for i in st._unreferenced if i in index]
                epochs[epoch] = (st.highest_log_offset, refs, unref)
            return segments, epochs

    def import_state(self, segments: list[RemoteLogSegmentMetadata], epochs: Mapping[int, tuple]) -> None:
        """Load what :meth:`export_state` gave into this (empty) cache; it is not initialised, since the
        events after the snapshot still have to be read."""
        with self._lock:
            if self._segments:
                raise ValueError("import needs an empty cache")
            self._segments = {md.segment_id: md for md in segments}
            for epoch, (highest, refs, unref) in epochs.items():
                st = self._epoch(epoch)
                st.highest_log_offset = highest
                st._offsets = [o for o, _ in refs]
                st._ids = [segments[i].segment_id for _, i in refs]
                st._unreferenced = {segments[i].segment_id: None for i in unref}

    # -------------------------------------------------------------------------------------- internals

    def _epoch(self, epoch: int) -> RemoteLogLeaderEpochState:
        state = self._epochs.get(epoch)
        if state is None:
            state = self._epochs[epoch] = RemoteLogLeaderEpochState()
        return state

    def _apply_copy_finished(self, md: RemoteLogSegmentMetadata) -> None:
        segments = self._segments
        for epoch, start, end in _epoch_ranges(md):
            self._epoch(epoch).handle_copy_finished(
                start, md.segment_id, end, lambda sid, e=epoch: segments[sid].epoch_end_offset(e))
        self._segments.pop(md.segment_id, None)  # re-insert at the end: see snapshot()
        self._segments[md.segment_id] = md

    def _apply_delete_started(self, md: RemoteLogSegmentMetadata) -> None:
        for epoch, start in md.segment_leader_epochs.items():
            self._epoch(epoch).handle_delete_started(start, md.segment_id)
        self._segments[md.segment_id] = md

    def _apply_delete_finished(self, md: RemoteLogSegmentMetadata) -> None:
        for epoch in md.segment_leader_epochs:
            self._epoch(epoch).handle_delete_finished(md.segment_id)
        del self._segments[md.segment_id]

    @staticmethod
    def _check_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState,
                          segment_id: RemoteLogSegmentId) -> bool:
        if valid_segment_transition(src, dst):
            return True
        log.error("Current state %s can not be transitioned to target state %s, segment %s; dropping the event",
                  src.name if src is not None else None, dst.name, segment_id)
        return False


class RemotePartitionMetadataStore:
    """The caches of all user partitions this broker's metadata manager follows (Kafka's
    ``RemotePartitionMetadataStore``). Reads raise RemoteResourceNotFoundError for a partition without a
    cache and the retriable ReplicaNotAvailableError while its cache is still loading."""

    def __init__(self) -> None:
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}

    # ------------------------------------------------------------------------------------ lifecycle

    def maybe_load_partition(self, tp: TopicIdPartition) -> None:
        """Give ``tp`` an empty, not yet initialised cache unless it has one."""
        if tp not in self._caches:  # not setdefault: no throwaway cache on every call
            self._caches.setdefault(tp, RemoteLogMetadataCache())

    def mark_initialized(self, tp: TopicIdPartition) -> None:
        cache = self._caches.get(tp)
        if cache is None:
            raise PartitionNotLoadedError(f"No partition metadata found for: {tp}")
        cache.mark_initialized()
        log.debug("Remote log metadata is initialized for user partition %s", tp)

    def is_initialized(self, tp: TopicIdPartition) -> bool:
        cache = self._caches.get(tp)
        return cache is not None and cache.is_initialized

    def clear_partition(self, tp: TopicIdPartition) -> None:
        """Forget ``tp`` (it is no longer assigned to this broker)."""
        self._caches.pop(tp, None)

    def close(self) -> None:
        self._caches.clear()

    # --------------------------------------------------------------------------------------- events

    def handle(self, event: RemoteLogMetadata) -> None:
        """Apply one event read from ``__remote_log_metadata``."""
        if isinstance(event, RemoteLogSegmentMetadata):
            self._loaded(event.topic_id_partition).add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            cache = self._loaded(event.topic_id_partition)
            try:
                cache.update_remote_log_segment_metadata(event)
            except RemoteResourceNotFoundError as e:
                log.warning("Error occurred while updating the remote log segment: %s", e)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            log.debug("Received partition delete state %s", event)
            if event.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._caches.pop(event.topic_id_partition, None)
        else:
            raise TypeError(f"remote log metadata {event!r} is not supported")

    def _loaded(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self._caches.get(tp)
        if cache is None:
            raise PartitionNotLoadedError(f"No partition metadata found for: {tp}")
        return cache

    # ---------------------------------------------------------------------------------------- reads

    def _readable(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self._caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No resource found for partition: {tp}")
        if not cache.is_initialized:
            raise ReplicaNotAvailableError(f"Remote log metadata cache is not initialized for partition: {tp}")
        return cache

    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return self._readable(tp).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        return self._readable(tp).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        return self._readable(tp).list_remote_log_segments(leader_epoch)

    def all_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` not yet DELETE_SEGMENT_FINISHED (Kafka's ``listRemoteLogSegments(tp)``)."""
        return self._readable(tp).list_remote_log_segments()

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        """Bytes of the segments listed for ``leader_epoch`` (Kafka's ``remoteLogSize``: segments being
        copied or deleted count too)."""
        return sum(md.segment_size_in_bytes for md in self._readable(tp).list_remote_log_segments(leader_epoch))

    # ------------------------------------------------------------------------------------ snapshots

    def snapshot(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """``tp``'s segments for a snapshot file; works before the partition is initialised too."""
        return self._loaded(tp).snapshot()

    def export_state(self, tp: TopicIdPartition) -> tuple[list[RemoteLogSegmentMetadata], dict[int, tuple]]:
        return self._loaded(tp).export_state()

    def import_state(self, tp: TopicIdPartition, segments: list[RemoteLogSegmentMetadata],
                     epochs: Mapping[int, tuple]) -> None:
        """Replace ``tp``'s cache by one holding exactly this exported state (not initialised)."""
        cache = RemoteLogMetadataCache()
        cache.import_state(segments, epochs)
        self._caches[tp] = cache

    def restore(self, tp: TopicIdPartition, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
        """Replace ``tp``'s cache by one loaded from a snapshot; it is not initialised, since the events
        after the snapshot still have to be read."""
        cache = RemoteLogMetadataCache()
        segments = list(segments)
        for md in segments:
            if md.topic_id_partition != tp:
                raise ValueError(f"segment {md.segment_id} does not belong to {tp}")
        cache.restore(segments)
        self._caches[tp] = cache
