"""``RLMCopyTask`` (Kafka's): uploads a led partition's rolled segments to remote storage, and the pure
decisions it runs on: which segments may go (``copy_candidates``) and how many of the newest wait for
``remote.copy.lag.*`` (``copy_delayed``).

Safety rules, as Kafka's:
- a segment is uploaded only once the next segment starts at or below the last stable offset, so only
  complete, committed data is tiered; the active segment never is;
- every upload is bracketed by COPY_SEGMENT_STARTED / COPY_SEGMENT_FINISHED; only then does the log's
  ``highest_offset_in_remote_storage`` move, which is what lets local retention delete the local copy; a
  failed upload is abandoned (DELETE_SEGMENT_STARTED, deleted by the expiration task) and retried later
  under a new segment id.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from tierlog.storage import Log, LogSegment
from tierlog.storage.producer_state import snapshot_path
from tierlog.tiered.lineage import epochs_in_range, find_highest_remote_offset
from tierlog.tiered.metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from tierlog.tiered.tasks.base import RLMTask, leader_epoch_checkpoint_bytes
from tierlog.tiered.tasks.compaction_rebuild import CompactionRebuild
from tierlog.tiered.tasks.expiration import dangling_uploads
from tierlog.tiered.tasks.state import log, now_ms

S = RemoteLogSegmentState

_QUOTA_RECHECK_MS = 1000  # a throttled copy looks at the quota again at least this often (Kafka: 1 s)


class CustomMetadataSizeLimitExceededError(Exception):
    """KIP-917: the storage plugin returned more custom metadata than
    ``remote.log.metadata.custom.metadata.max.bytes``; copying stops for the partition."""


class _Segment(Protocol):
    """What the copy decisions read of a local segment."""

    base_offset: int
    size: int
    log_path: str

    def is_intact(self) -> bool: ...

    def largest_timestamp(self) -> int: ...


# ------------------------------------------------------------------------------------------ decisions

def copy_candidates(segments: Sequence[_Segment], start: int, last_stable_offset: int
                    ) -> list[tuple[_Segment, int]]:
    """(segment, next segment's base offset) of each rolled segment of ``segments`` (the log's, oldest first)
    holding offsets from ``start`` on (the first offset not copied yet) whose data is all below
    ``last_stable_offset``, oldest first. Nothing from a segment whose file holds more than its batches (a
    torn write) on: a torn segment is never uploaded."""
    if last_stable_offset <= 0:
        return []
    out = []
    for seg, nxt in zip(segments, segments[1:]):
        if nxt.base_offset <= start:
            continue  # wholly copied (or below the log start offset)
        if nxt.base_offset > last_stable_offset:
            break
        if not seg.is_intact():
            log.warning("Not copying segment %s: the file holds more than its %d bytes of batches",
                        seg.log_path, seg.size)
            break
        out.append((seg, nxt.base_offset))
    return out


def log_copy_candidates(lg: Log, cleaned_up_to: Callable[[str, int], int | None]) -> list[tuple[LogSegment, int]]:
    """:func:`copy_candidates` of a log: nothing of an offline log, and of a compacted log only what the log
    cleaner cleaned (``cleaned_up_to(topic, partition)``; docs/tiered-storage.md, "Compacted topics")."""
    lso = lg.last_stable_offset
    if lg.config.compact:
        lso = min(lso, cleaned_up_to(lg.topic, lg.partition) or 0)
    if lso <= 0 or lg.offline is not None:
        return []
    start = max(lg.highest_offset_in_remote_storage + 1, lg.log_start_offset)
    return copy_candidates(list(lg.segments), start, lso)


def copy_lag_limits(cfg) -> tuple[int, int]:
    """(ms, bytes) of ``remote.copy.lag.ms`` / ``remote.copy.lag.bytes`` of a topic configuration, -1 standing
    for the local retention value."""
    lag_ms = cfg.effective_local_retention_ms if cfg.remote_copy_lag_ms == -1 else cfg.remote_copy_lag_ms
    lag_bytes = cfg.effective_local_retention_bytes if cfg.remote_copy_lag_bytes == -1 else cfg.remote_copy_lag_bytes
    return lag_ms, lag_bytes


def copy_delayed(segments: Sequence[_Segment], candidates: Sequence[_Segment], now_ms: float, lag_ms: int,
                 lag_bytes: int) -> int:
    """How many of the newest ``candidates`` (some of the log's ``segments``) wait for the copy lag
    (KIP-1241 as Kafka 4.4 released it, :func:`copy_lag_limits`): either limit at 0 uploads at once;
    otherwise a segment is uploaded once it is at least ``lag_ms`` old (by its largest timestamp; one from
    the future at once) *or* at least ``lag_bytes`` of the log follow it, a negative limit (-1 over an
    unlimited local retention) taking no part. Both negative: nothing is uploaded, as on Kafka 4.4."""
    if lag_ms == 0 or lag_bytes == 0:
        return 0
    after = {id(seg): 0 for seg in candidates}
    behind = 0
    for seg in reversed(segments):  # bytes of the log after each segment
        if id(seg) in after:
            after[id(seg)] = behind
        behind += seg.size
    for i, seg in enumerate(candidates):  # oldest first: once one waits, every later one waits
        age = now_ms - seg.largest_timestamp()
        by_time = lag_ms > 0 and (age < 0 or age >= lag_ms)
        by_size = lag_bytes > 0 and after[id(seg)] >= lag_bytes
        if not (by_time or by_size):
            return len(candidates) - i
    return 0


# ---------------------------------------------------------------------------------------------- task

class RLMCopyTask(RLMTask):
    """Each run uploads the partition's eligible segments, oldest first, within the broker-wide copy quota
    (KIP-956); its first run of a leadership reads the remote offsets and abandons the uploads an earlier
    leadership or life of this broker left unfinished. Compacted topics also replace stale remote copies
    (:class:`CompactionRebuild`)."""

    kind = "copy"

    def __init__(self, rlm, st) -> None:
        super().__init__(rlm, st)
        self.compaction = CompactionRebuild(self)

    def stopped(self) -> bool:
        return self.st.stop_copy

    def stops_for_good(self, error: Exception) -> bool:
        if not isinstance(error, CustomMetadataSizeLimitExceededError):
            return False
        st = self.st
        st.record_error(self.kind, str(error))
        log.error("Stopping the copy task of %s: %s", st.tp, error)
        st.copy_stopped = str(error)
        st.copy_task = None
        return True

    async def execute(self) -> None:
        st, rlm = self.st, self.rlm
        if st.copy_stopped or self.term() is None:  # fenced: nothing until the controller's next term
            return
        lg = st.log
        if st.first_copy_run:
            # Every event of the previous leader first (a broker that followed may not have read its last
            # uploads yet), then the highest offset already remote in this lineage.
            await rlm.rlmm.catch_up(st.tp)
            self.init_remote_offsets()
            await self.clean_dangling_uploads()
            st.first_copy_run = False
        # A segment copied only up to its middle (by an earlier leader) is uploaded whole again; the
        # metadata cache then serves each offset from the newest upload.
        candidates = rlm.copy_candidates(lg)
        delayed = copy_delayed(list(lg.segments), [seg for seg, _ in candidates], time.time() * 1000,
                               *copy_lag_limits(lg.config))
        candidates = candidates[:len(candidates) - delayed]
        if lg.config.compact:
            candidates = await self.compaction.rebuild_and_replace(candidates)
            if candidates is None:
                return
        for seg, next_base in candidates:
            if st.stop_copy or not await self.within_copy_quota(seg.size):
                return
            if not await self.copy_segment(seg, next_base):
                return  # abandoned: the next round starts again from the highest finished offset
            if lg.config.compact:
                await self.compaction.retire_replaced()
        self.update_copy_lag()

    def init_remote_offsets(self) -> None:
        """First run as leader: the log start offset from the oldest remote segment in the lineage,
        and the highest offset already copied."""
        st, rlmm = self.st, self.rlm.rlmm
        lg = st.log
        entries = lg.leader_epoch_cache.entries
        for epoch, _ in entries:
            listed = rlmm.list_remote_log_segments(st.tp, epoch)
            if listed:
                start = listed[0].start_offset
                if start > lg.log_start_offset:
                    lg.increment_log_start_offset_from_remote(start)
                break
        offset, _ = find_highest_remote_offset(entries, lg.log_end_offset,
                                               lambda e: rlmm.highest_offset_for_epoch(st.tp, e))
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, offset)

    async def clean_dangling_uploads(self) -> None:
        """Abandon the :func:`dangling_uploads` (deleted by the next expiration run). Runs before the first
        upload of a leadership, so no upload of this leadership is in flight."""
        st, rlm = self.st, self.rlm
        log_start = st.log.log_start_offset
        for md in dangling_uploads(rlm.rlmm.list_remote_log_segments(st.tp), st.being_copied, st.abandoned,
                                   rlm.broker_id, log_start, own=True):
            log.info("Removing the unfinished upload %s of segment %d of %s", md.segment_id.id, md.start_offset,
                     st.tp)
            await self.abandon(md)

    async def abandon_cut_short(self) -> None:
        """Uploads of a leadership that ended mid-copy (a leader paused past its ZooKeeper session, say,
        woken while its upload still ran): their objects are complete now, but this broker no longer
        leads that epoch, so it never publishes them COPY_SEGMENT_FINISHED. The new leader counted
        nothing of them (it resumed after the highest *finished* offset) and uploads those offsets
        itself; marked DELETE_SEGMENT_STARTED here, the leader's expiration task deletes their objects.
        Left COPY_SEGMENT_STARTED, they would wait for remote retention (another broker's unfinished
        upload above the log start is never taken for dangling)."""
        st = self.st
        for md in st.cut_short:
            log.info("Abandoning the upload %s of segment %d of %s: its leadership ended before it finished",
                     md.segment_id.id, md.start_offset, st.tp)
            await self.abandon(md)
        st.cut_short.clear()

    async def within_copy_quota(self, size: int) -> bool:
        """Wait until the broker-wide copy quota allows another upload, then count the segment against it
        before the upload starts (Kafka's order: one segment may overshoot, the next one waits). False
        when copying was turned off meanwhile."""
        st, rlm = self.st, self.rlm
        while (throttle_ms := rlm.copy_quota.throttle_time_ms()) > 0:
            wait_s = min(throttle_ms, _QUOTA_RECHECK_MS) / 1000
            log.debug("Copy quota exceeded; %s waits %.3f s before its next upload", st.tp, wait_s)
            await asyncio.sleep(wait_s)
            rlm.metrics.copy_throttle_seconds.inc(wait_s)
            if st.stop_copy:
                return False
        rlm.copy_quota.record(size)  # no await between the check and this: copy tasks cannot both pass
        return True

    async def copy_segment(self, seg: LogSegment, next_base: int) -> bool:
        """Upload one segment; True once it is COPY_SEGMENT_FINISHED, False when it was abandoned because
        the leadership it belongs to ended meanwhile."""
        lg, tp = self.st.log, self.st.tp
        entries = lg.leader_epoch_cache.entries
        epochs = epochs_in_range(entries, seg.base_offset, next_base)
        if not epochs:
            raise RuntimeError(f"no leader epoch covers offsets {seg.base_offset}..{next_base - 1} of {tp}")
        size = seg.size
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), seg.base_offset, next_base - 1,
                                      seg.largest_timestamp(), self.rlm.broker_id, now_ms(), size, epochs)
        snapshot = snapshot_path(lg.dir, next_base)
        if not os.path.exists(snapshot):
            log.warning("No producer snapshot at offset %d for %s; uploading segment %d without one", next_base,
                        tp, seg.base_offset)
            snapshot = None
        # The transaction index exists only once a transaction was aborted in the segment (Kafka uploads it then).
        txn_index = Path(seg.txn_index.path) if seg.txn_index.exists() else None
        data = LogSegmentData(
            log_segment=Path(seg.log_path), offset_index=Path(seg.offset_index.path),
            time_index=Path(seg.time_index.path), producer_snapshot_index=Path(snapshot) if snapshot else None,
            leader_epoch_index=leader_epoch_checkpoint_bytes((e, o) for e, o in entries if o < next_base),
            transaction_index=txn_index)
        return await self.upload(md, data, seg.flush_indexes)

    async def upload(self, md: RemoteLogSegmentMetadata, data: LogSegmentData, before=None) -> bool:
        """COPY_SEGMENT_STARTED, the store call, COPY_SEGMENT_FINISHED; True once finished, False when it was
        abandoned because the leadership it belongs to ended meanwhile. ``before`` runs once the upload is
        announced, before the store reads the files."""
        st, rlm = self.st, self.rlm
        lg, tp = st.log, st.tp
        size = md.segment_size_in_bytes
        term = self.term()
        if term is None:
            return False  # fenced: the caller stops the round
        epoch, session = term
        st.being_copied.add(md.segment_id)
        finishing = False
        try:
            await rlm.rlmm.add_remote_log_segment_metadata(md)
            rlm.metrics.copy_requests.inc(topic=tp.topic)
            if before is not None:
                before()
            try:
                custom = await self.in_pool(rlm.copier_pool, rlm.rsm.copy_log_segment_data, md, data)
            except Exception as e:
                rlm.metrics.copy_errors.inc(topic=tp.topic)
                log.debug("Copy of segment %d of %s (%s) failed: %s; what was uploaded is removed",
                          md.start_offset, tp, md.segment_id.id, e)
                await self.abandon(md)
                raise
            if custom is not None and len(custom) > rlm.custom_metadata_max_bytes:
                rlm.metrics.copy_errors.inc(topic=tp.topic)
                finished = md.with_update(RemoteLogSegmentMetadataUpdate(
                    md.segment_id, now_ms(), custom, S.COPY_SEGMENT_FINISHED, rlm.broker_id))
                await self.abandon(finished)
                raise CustomMetadataSizeLimitExceededError(
                    f"custom metadata of {len(custom)} bytes for segment {md.start_offset} of {tp} exceeds "
                    f"remote.log.metadata.custom.metadata.max.bytes={rlm.custom_metadata_max_bytes}")
            fenced = self.fenced(epoch, session)
            if fenced is not None:
                # The leadership this upload belongs to ended while the store call ran (the replica
                # manager moved the epoch; stop_tasks has not cancelled this task yet). Kafka checks
                # isLeader() before each upload only; tierlog also checks after it: publishing
                # FINISHED now would race the new leader, which resumes after the highest finished
                # offset it read and may upload these offsets again (two live segments over the same
                # offsets). Abandoned, the new leader's expiration deletes the objects. When this broker
                # still leads (only the epoch moved: a follower left the ISR), the caller stops the round
                # and the next one uploads these offsets again in the new epoch: going on with the next
                # segment would leave a gap that local retention then makes permanent. A lost ZooKeeper
                # session fences the same way: the broker learns of it before the controller's push.
                log.info("Abandoning the upload %s of segment %d of %s: %s during it",
                         md.segment_id.id, md.start_offset, tp, fenced)
                await self.abandon(md)
                return False
            finishing = True
            await self.update(md, S.COPY_SEGMENT_FINISHED, custom)
        except asyncio.CancelledError:
            if not finishing:  # FINISHED maybe published: the new leader may count it, so it stays
                st.cut_short.append(md)
            raise
        finally:
            st.being_copied.discard(md.segment_id)
        rlm.metrics.copy_bytes.inc(size, topic=tp.topic)
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, md.end_offset)
        log.debug("Copied segment %d-%d of %s (%d bytes)", md.start_offset, md.end_offset, tp, size)
        return True

    def update_copy_lag(self) -> None:
        st, metrics = self.st, self.rlm.metrics
        lag = self.rlm.copy_candidates(st.log)
        # Rolled segments beyond the last stable offset are not eligible yet but still count as lag.
        metrics.copy_lag_segments.set(len(lag), topic=st.tp.topic, partition=st.tp.partition)
        metrics.copy_lag_bytes.set(sum(s.size for s, _ in lag), topic=st.tp.topic, partition=st.tp.partition)
