"""``CompactionRebuild``: the copy task's part for compacted topics (docs/tiered-storage.md, "Compacted topics").
The log cleaner rewrites segments after their upload; the copy task then replaces their stale remote copies:
a local segment whose remote offsets lie within it is uploaded again whole, and a run of remote segments
that crosses this leader's segment boundaries ("When the boundaries differ") is rebuilt as one segment from
the cleaned local batches of its range (``tiered/remote_rebuild.py``). A replaced segment is retired
(DELETE_SEGMENT_STARTED, deleted by the expiration task) only once its replacement is finished.

Local retention asks ``remote_copy_check`` before it deletes a copied segment of a led compacted log: not
while the cleaner's latest version of it still waits for its upload."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.kafka_uuid import uuid_to_str
from tierlog.storage import LogSegment
from tierlog.storage.producer_state import snapshot_path
from tierlog.tiered import remote_rebuild
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.lineage import epochs_in_range, filtered_epochs
from tierlog.tiered.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)
from tierlog.tiered.remote_rebuild import (
    Run,
    checkpoint_through,
    ends_before_upload,
    local_pieces,
    overlap_runs,
    run_epochs,
    within_lineage,
)
from tierlog.tiered.tasks.base import leader_epoch_checkpoint_bytes
from tierlog.tiered.tasks.state import log, now_ms

if TYPE_CHECKING:
    from tierlog.tiered.tasks.copy import RLMCopyTask

S = RemoteLogSegmentState


class CompactionRebuild:
    """The replacements of one led compacted partition's stale remote segments, uploaded by ``copy``."""

    def __init__(self, copy: RLMCopyTask) -> None:
        self.copy = copy
        self.rlm = copy.rlm
        self.st = copy.st

    async def rebuild_and_replace(self, candidates: list[tuple[LogSegment, int]]
                                  ) -> list[tuple[LogSegment, int]] | None:
        """Before a compacted log's new segments (``candidates``) go: retire what a finished replacement
        superseded (a crash may have come between the two), rebuild the runs that cross this leader's segment
        boundaries, then return the stale local segments to upload again followed by ``candidates``; None
        when the round stops (copying turned off, or the leadership ended)."""
        # Replacements first (they are older offsets), then the new segments. The local segments the rebuilt
        # runs touch are not replaced whole.
        st = self.st
        await self.retire_replaced()
        runs = [r for r in self.rebuild_runs() if r.replaceable]
        for run in runs:
            if st.stop_copy or not await self.copy.within_copy_quota(run.local_bytes):
                return None
            if not await self.rebuild_run(run):
                return None
            await self.retire_replaced()
        aligned = [(seg, end) for seg, end in self.replacement_candidates()
                   if not any(r.overlaps(seg.base_offset, end) for r in runs)]
        return aligned + candidates

    def serving(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The finished segment a remote read of ``offset`` gets (the metadata cache's answer for the
        offset's leader epoch): the newest upload holding it, in the order uploads finished."""
        st = self.st
        epoch = st.log.leader_epoch_cache.epoch_for_offset(offset)
        return None if epoch < 0 else self.rlm.rlmm.remote_log_segment_metadata(st.tp, epoch, offset)

    def remote_copy_state(self, base: int, end: int, size: int) -> str:
        """How the remote tier holds the local segment ``[base, end)`` of ``size`` bytes: ``current`` (the
        segments reads get for its offsets lie within it and their sizes add up), ``stale`` (the cleaner
        changed it after its upload, or part of it is missing), ``unaligned`` (a remote segment reaches
        outside it: never replaced)."""
        cur, total = base, 0
        while cur < end:
            md = self.serving(cur)
            if md is None:
                return "stale"
            if md.start_offset < base or md.end_offset >= end:
                return "unaligned"
            total += md.segment_size_in_bytes
            cur = md.end_offset + 1
        return "current" if total == size else "stale"

    def replacement_candidates(self) -> list[tuple[LogSegment, int]]:
        """(segment, next base) of each cleaned local segment already uploaded whose remote copy is stale:
        the log cleaner rewrote it after its upload (docs/tiered-storage.md, "Compacted topics")."""
        st = self.st
        lg = st.log
        cleaned = self.rlm.cleaned_up_to(lg.topic, lg.partition) or 0
        highest = lg.highest_offset_in_remote_storage
        if lg.offline is not None or highest < 0:
            return []
        segments = list(lg.segments)
        out = []
        for seg, nxt in zip(segments, segments[1:]):
            end = nxt.base_offset
            if end - 1 > highest or end > cleaned:
                break
            if end <= lg.log_start_offset or not seg.is_intact():
                continue
            if self.remote_copy_state(seg.base_offset, end, seg.size) == "stale":
                out.append((seg, end))
        return out

    def remote_copy_check(self) -> Callable[[LogSegment, int], bool]:
        """Local retention's question, for one pass, for each copied segment of a led compacted log: may it go?
        Not while the cleaner's latest version of it still waits for its upload. The rebuild runs are worked
        out once per pass, at the first segment that needs them."""
        st = self.st
        lg = st.log
        if not lg.config.compact or self.rlm.partitions.get(st.tp) is not st:
            return lambda seg, end: True
        runs: list[Run] | None = None

        def current(seg: LogSegment, end: int) -> bool:
            nonlocal runs
            try:
                if self.remote_copy_state(seg.base_offset, end, seg.size) == "stale":
                    return False
                if runs is None:
                    runs = [r for r in self.rebuild_runs() if r.stale or r.awaits_upload]
                # A stale run of remote segments touching it waits for its rebuild from the local data, and so
                # does one whose last local segment is still to be uploaded (and will overlap it).
                return not any(r.overlaps(seg.base_offset, end) for r in runs)
            except Exception:  # noqa: BLE001 - metadata still loading or unavailable: keep it, ask next pass
                return False
        return current

    def rebuild_runs(self) -> list[Run]:
        """The runs of finished remote segments (overlapping ranges chained, docs/tiered-storage.md, "When the
        boundaries differ") that touch a local segment whose remote offsets are not served by segments lying
        within it: this leader's boundaries differ from the uploader's. Each says whether it is stale
        (overlapping segments, or fewer local bytes than remote) and replaceable (the local log holds its
        whole range between batches, cleaned, below the last stable offset and the highest remote offset)."""
        st = self.st
        lg = st.log
        highest = lg.highest_offset_in_remote_storage
        if lg.offline is not None or highest < 0:
            return []
        segments = list(lg.segments)
        unaligned = [(seg.base_offset, nxt.base_offset) for seg, nxt in zip(segments, segments[1:])
                     if seg.base_offset <= highest
                     and self.remote_copy_state(seg.base_offset, nxt.base_offset, seg.size) == "unaligned"]
        entries = filtered_epochs(lg.leader_epoch_cache.entries)
        leo = lg.log_end_offset
        finished = [md for md in self.rlm.rlmm.list_remote_log_segments(st.tp)
                    if md.state == S.COPY_SEGMENT_FINISHED and md.segment_id not in st.being_copied
                    and within_lineage(md, leo, entries)]
        limit = min(self.rlm.cleaned_up_to(lg.topic, lg.partition) or 0, lg.last_stable_offset, highest + 1)
        out = []
        for run in overlap_runs(finished):
            if len(run.members) == 1 and not any(run.overlaps(base, end) for base, end in unaligned) \
                    or run.start < lg.log_start_offset:
                continue
            run.pieces = local_pieces(segments, run.start, run.end + 1)
            if run.pieces is None:
                continue  # the local log does not hold the range (or not between batches): stays as it is
            run.awaits_upload = ends_before_upload([seg.base_offset for seg in segments], lg.log_end_offset,
                                                   run.end, highest)
            # A member covering the whole run is an earlier rebuild whose replaced segments wait for their
            # retirement: the run is stale only if the cleaner shrank the range since.
            whole = [m for m in run.members if m.start_offset == run.start and m.end_offset == run.end]
            newest = max(whole or run.members, key=lambda m: m.event_timestamp_ms)
            run.stale = (len(run.members) > 1 and not whole) or run.local_bytes < newest.segment_size_in_bytes
            run.replaceable = run.stale and run.end + 1 <= limit and all(seg.is_intact() for seg, _, _ in run.pieces)
            out.append(run)
        return out

    async def rebuild_run(self, run: Run) -> bool:
        """Upload one segment covering exactly ``run``'s range, written from the cleaned local batches of that
        range; the run's segments are retired after it finished (:meth:`retire_replaced`). False when the
        upload was abandoned because the leadership ended meanwhile."""
        st = self.st
        lg, tp = st.log, st.tp
        entries = lg.leader_epoch_cache.entries
        epochs = run_epochs(epochs_in_range(entries, run.start, run.end + 1), run)
        if not epochs:
            raise RuntimeError(f"no leader epoch covers offsets {run.start}..{run.end} of {tp}")
        root = os.path.join(os.path.dirname(lg.dir), remote_rebuild.FOLDER)
        prefix = f"{os.path.basename(lg.dir)}."
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.rlm.copier_pool, remote_rebuild.clear_leftovers, root, prefix)
        local = [seg for seg, _, _ in run.pieces]
        snapshot = None
        local_snapshot = snapshot_path(lg.dir, run.end + 1)
        try:
            snapshot = await self.copy.in_pool(self.rlm.copier_pool, Path(local_snapshot).read_bytes)
        except FileNotFoundError:
            last = max((md for md in run.members if md.end_offset == run.end), key=lambda md: md.event_timestamp_ms)
            try:
                snapshot = await self.copy.in_pool(self.rlm.copier_pool, self.rlm.rsm.fetch_index, last,
                                               IndexType.PRODUCER_SNAPSHOT)
            except RemoteResourceNotFoundError:
                snapshot = None  # uploaded without one (no idempotent producer yet)
        aborted = await self.copy.in_pool(self.rlm.copier_pool, remote_rebuild.aborted_in, local, run.start, run.end)
        directory = os.path.join(root, prefix + uuid_to_str(RemoteLogSegmentId.generate(tp).id))
        cfg = lg.config
        built = await self.copy.in_pool(self.rlm.copier_pool, functools.partial(
            remote_rebuild.build, directory, run.start, run.pieces, index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes, aborted=aborted, snapshot=snapshot))
        built.segment.close()
        cancelled = False
        try:
            current = list(lg.segments)
            if any(not any(seg is c for c in current) for seg in local):
                log.debug("Local segments of %s changed while rebuilding offsets %d-%d; trying again next round",
                          tp, run.start, run.end)
                return True
            max_ts = built.max_timestamp if built.max_timestamp >= 0 else max(
                md.max_timestamp_ms for md in run.members)
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), run.start, run.end, max_ts,
                                          self.rlm.broker_id, now_ms(), built.size, epochs)
            seg = built.segment
            data = LogSegmentData(
                log_segment=Path(seg.log_path), offset_index=Path(seg.offset_index.path),
                time_index=Path(seg.time_index.path),
                producer_snapshot_index=Path(built.snapshot) if built.snapshot else None,
                leader_epoch_index=leader_epoch_checkpoint_bytes(checkpoint_through(entries, epochs, run.start)),
                transaction_index=Path(built.txn_index) if built.txn_index else None)
            log.info("Rebuilding remote offsets %d-%d of %s (%d segment(s), %d bytes) from the cleaned local log "
                     "as one segment of %d bytes", run.start, run.end, tp, len(run.members),
                     sum(m.segment_size_in_bytes for m in run.members), built.size)
            return await self.copy.upload(md, data)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # Left in place when cancelled mid-upload (the store call may still read them): the next rebuild
            # of the partition removes them.
            if not cancelled:
                remote_rebuild.remove(directory)

    def replaced_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Finished segments that reads no longer get because a segment finished after them contains them (a
        compacted segment's replacement): the metadata cache's order decides, as for readers, never clocks."""
        st = self.st
        out = []
        for md in self.rlm.rlmm.list_remote_log_segments(st.tp):
            if md.state != S.COPY_SEGMENT_FINISHED:
                continue
            epoch, start = next(iter(md.segment_leader_epochs.items()))
            serving = self.rlm.rlmm.remote_log_segment_metadata(st.tp, epoch, start)
            if serving is not None and serving.segment_id != md.segment_id \
                    and serving.start_offset <= md.start_offset and serving.end_offset >= md.end_offset:
                out.append(md)
        return out

    async def retire_replaced(self) -> None:
        """Mark replaced segments DELETE_SEGMENT_STARTED (the expiration task deletes their objects). Only
        ever after their replacement is COPY_SEGMENT_FINISHED, so a crash between the two leaves both
        readable and the next run (of whichever broker leads) comes back here."""
        st = self.st
        for md in self.replaced_segments():
            if md.segment_id in st.being_copied:
                continue
            log.info("Remote segment %s (offsets %d-%d) of %s was replaced by a newer compacted upload",
                     md.segment_id.id, md.start_offset, md.end_offset, st.tp)
            await self.copy.update(md, S.DELETE_SEGMENT_STARTED)
