"""``RLMExpirationTask`` (Kafka's): applies remote retention to a led partition and cleans up, and the pure
decisions it runs on: which remote segments breach retention by time, size or log start
(``retention_breaches``), which wait for their clean-up (``cleanup_candidates``), which unfinished uploads
may be abandoned (``dangling_uploads``).

Retention deletes a contiguous oldest prefix, moves the log start offset first (readers stop asking for those
offsets) and only then deletes the objects. Clean-up: every run deletes the objects of every
DELETE_SEGMENT_STARTED segment of the partition (failed uploads, deletions that failed half-way), whether
retention has reached them or not, and marks them DELETE_SEGMENT_FINISHED; until that works they are tried
again each run, and a failing clean-up never holds retention back. Only this task deletes, so no segment is
deleted twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from tierlog.tiered.lineage import filtered_epochs, segment_within_leader_epochs
from tierlog.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tierlog.tiered.tasks.base import RLMTask
from tierlog.tiered.tasks.state import log, now_ms

S = RemoteLogSegmentState
Segments = list[RemoteLogSegmentMetadata]


# ------------------------------------------------------------------------------------------ decisions

def dangling_uploads(segments: Iterable[RemoteLogSegmentMetadata], being_copied: Collection[RemoteLogSegmentId],
                     abandoned: Collection[RemoteLogSegmentId], broker_id: int, log_start_offset: int,
                     own: bool = True) -> Segments:
    """Unfinished uploads (COPY_SEGMENT_STARTED, not in ``being_copied`` nor already ``abandoned``) that may be
    removed now: those broker ``broker_id`` (this one) started in an earlier leadership or an earlier life
    (its uploads of an earlier leadership were awaited when it resigned), and, as Kafka does, any whose data
    retention has passed (below ``log_start_offset``). Another broker's unfinished upload above the log start
    stays until retention reaches it: that broker may be a paused old leader still writing it, and deleting
    its objects now could leave what it writes on waking unreferenced. ``own`` False: only the latter (while a
    copy task of this leadership runs)."""
    return [md for md in segments
            if md.state == S.COPY_SEGMENT_STARTED and md.segment_id not in being_copied
            and md.segment_id not in abandoned
            and (own and md.broker_id == broker_id or md.end_offset < log_start_offset)]


def cleanup_candidates(segments: Iterable[RemoteLogSegmentMetadata],
                       being_copied: Collection[RemoteLogSegmentId]) -> Segments:
    """The DELETE_SEGMENT_STARTED segments whose objects are still to delete (failed uploads, deletions that
    failed half-way), oldest first; not those whose upload is still being abandoned."""
    return sorted((md for md in segments if md.state == S.DELETE_SEGMENT_STARTED and md.segment_id not in being_copied),
                  key=lambda md: md.start_offset)


def size_excess(segments: Iterable[RemoteLogSegmentMetadata], entries: list[tuple[int, int]], log_end_offset: int,
                only_local_bytes: int, retention_bytes: int) -> int | None:
    """Bytes the partition holds beyond ``retention_bytes``: its finished remote segments within the leader
    lineage ``entries`` plus ``only_local_bytes`` (local segments above the highest remote offset); None when
    within it."""
    seen = set()
    remote_size = 0
    for md in segments:
        if md.state == S.COPY_SEGMENT_FINISHED and md.segment_id not in seen \
                and segment_within_leader_epochs(md, log_end_offset, entries):
            seen.add(md.segment_id)
            remote_size += md.segment_size_in_bytes
    total = remote_size + only_local_bytes
    return total - retention_bytes if total > retention_bytes else None


def retention_breaches(segments: Segments, segments_for_epoch: Callable[[int], Segments],
                       entries: list[tuple[int, int]], log_end_offset: int, log_start_offset: int,
                       being_copied: Collection[RemoteLogSegmentId], cleanup_until_ms: int | None,
                       excess_bytes: int | None) -> tuple[Segments, int | None]:
    """The finished remote segments retention deletes now and the new log start offset (if it moves), Kafka's
    rules. ``segments``: every segment of the partition; ``segments_for_epoch(epoch)``: those of one leader
    epoch, oldest first; ``entries``: the leader lineage (empty epochs filtered). Walking the lineage from the
    oldest epoch, a contiguous prefix goes: segments below the log start of the first epoch only, then those
    older than ``cleanup_until_ms`` (time retention) or within ``excess_bytes`` (size retention). It stops at
    an upload in flight and at the first segment of the lineage retention keeps. Segments of epochs older than
    the whole lineage go too (an unclean election, or epochs trimmed by a log start offset move): nothing can
    read them any more."""
    if not segments:
        return [], None
    remaining = excess_bytes
    first_epoch = entries[0][0] if entries else None
    doomed: Segments = []
    doomed_ids: set = set()
    new_start = None
    can_process = True
    for epoch, _ in entries:
        if not can_process:
            break
        for md in segments_for_epoch(epoch):
            if not can_process:
                break
            if md.segment_id in being_copied:
                can_process = False
                break
            if md.state != S.COPY_SEGMENT_FINISHED or md.segment_id in doomed_ids:
                # Deleted, being deleted or abandoned (a failed or unfinished upload): the clean-up
                # deletes those whatever retention says (see cleanup_candidates).
                continue
            delete = (first_epoch is not None and all(e <= first_epoch for e in md.segment_leader_epochs)
                      and md.end_offset < log_start_offset)
            valid = False
            if not delete:
                valid = segment_within_leader_epochs(md, log_end_offset, entries)
                if valid:
                    if cleanup_until_ms is not None and md.max_timestamp_ms <= cleanup_until_ms:
                        delete = True
                    elif remaining is not None and remaining - md.segment_size_in_bytes >= 0:
                        remaining -= md.segment_size_in_bytes
                        delete = True
                    if delete:
                        new_start = max(new_start or 0, md.end_offset + 1)
            if delete:
                doomed.append(md)
                doomed_ids.add(md.segment_id)
            can_process = delete or not valid
    if first_epoch is not None:
        for md in segments:
            if md.segment_id not in doomed_ids and md.segment_id not in being_copied \
                    and max(md.segment_leader_epochs) < first_epoch and md.state == S.COPY_SEGMENT_FINISHED:
                doomed.append(md)
                doomed_ids.add(md.segment_id)
    return doomed, new_start


# ---------------------------------------------------------------------------------------------- task

class RLMExpirationTask(RLMTask):
    """Each run writes the DELETE_SEGMENT_STARTED events the copy task could not, abandons dangling uploads,
    moves the log start offset by retention, then deletes: the clean-up's segments first, then retention's."""

    kind = "expiration"

    def retention_candidates(self, now: int | None = None) -> tuple[Segments, int | None]:
        """The remote segments retention deletes now and the new log start offset (if it moves)."""
        st, rlmm = self.st, self.rlm.rlmm
        lg, tp = st.log, st.tp
        cfg = lg.config
        now = now_ms() if now is None else now
        entries = filtered_epochs(lg.leader_epoch_cache.entries)
        leo = lg.log_end_offset
        log_start = lg.log_start_offset
        everything = rlmm.list_remote_log_segments(tp)
        if not everything:
            return [], None
        delete_policy = cfg.delete_enabled  # compact-only: no time or size retention (as a local compacted log)
        excess = None
        if cfg.retention_bytes > -1 and delete_policy:
            only_local = sum(s.size for s in lg.segments if s.base_offset > lg.highest_offset_in_remote_storage)
            excess = size_excess(everything, entries, leo, only_local, cfg.retention_bytes)
        cleanup_until = now - cfg.retention_ms if cfg.retention_ms > -1 and delete_policy else None
        return retention_breaches(everything, lambda epoch: rlmm.list_remote_log_segments(tp, epoch), entries, leo,
                                  log_start, st.being_copied, cleanup_until, excess)

    def candidates(self, find_dangling: bool) -> tuple[Segments, Segments, Segments, int | None]:
        """(clean-up, dangling uploads, retention's, new log start offset)."""
        st, rlm = self.st, self.rlm
        log_start = st.log.log_start_offset
        segments = rlm.rlmm.list_remote_log_segments(st.tp)
        dangling = dangling_uploads(segments, st.being_copied, st.abandoned, rlm.broker_id, log_start,
                                    own=find_dangling)
        return cleanup_candidates(rlm.rlmm.list_remote_log_segments(st.tp), st.being_copied), dangling, \
            *self.retention_candidates()

    async def execute(self) -> None:
        st, rlm = self.st, self.rlm
        tp, lg = st.tp, st.log
        term = self.term()
        if term is None:
            return  # fenced: nothing is deleted until the controller's next term
        epoch, session = term
        failure = await self.mark_abandoned()
        # Without a copy task (copying disabled, or stopped for good), nothing abandons the uploads a
        # previous leadership left unfinished: this task does, when no copy task started meanwhile. With one,
        # it abandons those retention passed (another broker's, which the copy task leaves alone).
        copy_tasks_started = st.copy_tasks_started
        find_dangling = st.copy_task is None
        # A scan over every remote segment of the partition (100,000s on a long-lived topic): on the
        # expiration pool, so the event loop keeps serving requests meanwhile.
        unclean, dangling, doomed, new_start = await asyncio.get_running_loop().run_in_executor(
            rlm.expiration_pool, self.candidates, find_dangling)
        if dangling and (not find_dangling or st.copy_task is None and st.copy_tasks_started == copy_tasks_started):
            for md in dangling:
                log.info("Removing the unfinished upload %s of segment %d of %s", md.segment_id.id, md.start_offset,
                         tp)
                await self.abandon(md)  # deleted by the next run
        if new_start is not None and new_start > lg.log_start_offset:
            # Readers stop asking for these offsets before the objects disappear.
            lg.increment_log_start_offset_from_remote(new_start)
            log.info("Remote retention moved the log start offset of %s to %d", tp, new_start)
        rlm.metrics.delete_lag_segments.set(len(doomed) + len(unclean), topic=tp.topic, partition=tp.partition)
        rlm.metrics.delete_lag_bytes.set(sum(md.segment_size_in_bytes for md in (*doomed, *unclean)),
                                         topic=tp.topic, partition=tp.partition)
        # Clean-up first, and never in retention's way: it stops at its first failure (the store is
        # probably down; the next run tries again) and retention still runs.
        for md in unclean:
            try:
                await self.delete_segment(md, epoch, session)
            except Exception as e:  # noqa: BLE001 - raised below, after retention had its turn
                failure = failure or e
                break
        for md in doomed:
            if self.fenced(epoch, session) is not None:
                break  # retention is the next leader's now
            md = await self.update(md, S.DELETE_SEGMENT_STARTED)
            # A failure leaves it DELETE_SEGMENT_STARTED: cleaned up later.
            await self.delete_segment(md, epoch, session)
        if failure is not None:
            raise failure
        await asyncio.get_running_loop().run_in_executor(rlm.expiration_pool, self.update_size_metrics)

    async def mark_abandoned(self) -> Exception | None:
        """Write the DELETE_SEGMENT_STARTED events the copy task could not; the first failure, if any."""
        st = self.st
        for segment_id, md in list(st.abandoned.items()):
            try:
                await self.update(md, S.DELETE_SEGMENT_STARTED)
            except Exception as e:  # noqa: BLE001 - stays abandoned: the next run tries again
                return e
            st.abandoned.pop(segment_id, None)
        return None

    async def delete_segment(self, md: RemoteLogSegmentMetadata, epoch: int, session: object) -> None:
        """Delete the objects of a DELETE_SEGMENT_STARTED segment as the leader of ``epoch`` in ``session``, then
        mark it DELETE_SEGMENT_FINISHED; a fenced leader (:meth:`fenced`) leaves it DELETE_SEGMENT_STARTED, for
        the next leader's clean-up."""
        st, rlm = self.st, self.rlm
        fenced = self.fenced(epoch, session)
        if fenced is not None:
            log.info("Leaving the deletion of remote segment %s of %s to the next leader: %s", md.segment_id.id,
                     st.tp, fenced)
            return
        rlm.metrics.delete_requests.inc(topic=st.tp.topic)
        try:
            await self.in_pool(rlm.expiration_pool, rlm.rsm.delete_log_segment_data, md)
        except Exception:
            rlm.metrics.delete_errors.inc(topic=st.tp.topic)
            raise
        rlm.reader.evict(md)
        await self.update(md, S.DELETE_SEGMENT_FINISHED)

    def update_size_metrics(self) -> None:
        st, metrics = self.st, self.rlm.metrics
        segments = self.rlm.rlmm.list_remote_log_segments(st.tp)
        metrics.log_size_bytes.set(sum(md.segment_size_in_bytes for md in segments
                                       if md.state == S.COPY_SEGMENT_FINISHED),
                                   topic=st.tp.topic, partition=st.tp.partition)
        metrics.log_metadata_count.set(len(segments), topic=st.tp.topic, partition=st.tp.partition)
        metrics.delete_lag_segments.set(0, topic=st.tp.topic, partition=st.tp.partition)
        metrics.delete_lag_bytes.set(0, topic=st.tp.topic, partition=st.tp.partition)
