"""The remote log manager's decisions as pure functions (``tiered/tasks/copy.py``, ``expiration.py``): plain values
in, plain values out, no log, store or metadata manager."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.tasks.copy import copy_candidates, copy_delayed, copy_lag_limits
from tierlog.tiered.tasks.expiration import cleanup_candidates, dangling_uploads, retention_breaches, size_excess

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID("0b7c41a2-8d55-4f3e-9a61-2c4d5e6f7a8b"), "t", 0)
NOW = 1_700_000_000_000


@dataclass
class Seg:
    """A local segment as the copy decisions see it."""

    base_offset: int
    size: int = 100
    intact: bool = True
    ts: int = NOW
    log_path: str = "segment.log"

    def is_intact(self) -> bool:
        return self.intact

    def largest_timestamp(self) -> int:
        return self.ts


def segs(*bases: int, **kw) -> list[Seg]:
    return [Seg(b, **kw) for b in bases]


def md(start: int, end: int, epochs: dict | None = None, state: S = S.COPY_SEGMENT_FINISHED, size: int = 100,
       ts: int = NOW, broker: int = 1) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, end, ts, broker, NOW, size,
                                    epochs or {0: start}, state=state)


# ----------------------------------------------------------------------------------------------- copy

def test_copy_candidates_are_the_rolled_segments_from_the_first_uncopied_offset_below_the_lso():
    log = segs(0, 10, 20, 30)  # 30 is the active segment
    assert [(s.base_offset, n) for s, n in copy_candidates(log, 0, 30)] == [(0, 10), (10, 20), (20, 30)]
    assert [(s.base_offset, n) for s, n in copy_candidates(log, 10, 30)] == [(10, 20), (20, 30)]
    # a segment whose successor starts above the last stable offset holds uncommitted data: it waits
    assert [(s.base_offset, n) for s, n in copy_candidates(log, 0, 25)] == [(0, 10), (10, 20)]
    # one copied up to its middle goes again whole
    assert [(s.base_offset, n) for s, n in copy_candidates(log, 15, 30)] == [(10, 20), (20, 30)]
    assert copy_candidates(log, 0, 0) == []
    assert copy_candidates(segs(0), 0, 100) == []  # only the active segment


def test_a_torn_segment_stops_the_copy_candidates():
    log = segs(0, 10, 20, 30)
    log[1].intact = False
    assert [s.base_offset for s, _ in copy_candidates(log, 0, 30)] == [0]


def test_copy_delayed_by_bytes_behind_or_by_age():
    """KIP-1241 as Kafka 4.4 released it: a segment is uploaded once it is old enough OR enough bytes follow it;
    either limit at 0 uploads at once, a negative one takes no part, both negative upload nothing."""
    log = segs(0, 10, 20, 30)
    rolled = log[:-1]  # 300, 200 and 100 bytes follow them
    assert copy_delayed(log, rolled, NOW, 0, 0) == 0
    assert copy_delayed(log, rolled, NOW, 0, 1000) == 0
    assert copy_delayed(log, rolled, NOW, 2000, 0) == 0
    # bytes alone: the newest rolled one has only 100 after it
    assert copy_delayed(log, rolled, NOW, -1, 150) == 1
    assert copy_delayed(log, rolled, NOW, -1, 1000) == 3
    # age alone: records 1 s old, a lag of 2 s holds back all; once one waits, every later one waits
    assert copy_delayed(log, rolled, NOW + 1000, 2000, -1) == 3
    log[0].ts = NOW - 5000
    assert copy_delayed(log, rolled, NOW + 1000, 2000, -1) == 2
    # either: the second one is too young but has enough bytes after it
    assert copy_delayed(log, rolled, NOW + 1000, 2000, 150) == 1
    assert copy_delayed(log, rolled, NOW, -1, -1) == 3
    log[1].ts = log[2].ts = NOW + 60000  # from the future: at once
    assert copy_delayed(log, rolled, NOW, 2000, -1) == 0


def test_copy_lag_limits_minus_one_stands_for_the_local_retention():
    @dataclass
    class Cfg:
        remote_copy_lag_ms: int = -1
        remote_copy_lag_bytes: int = -1
        effective_local_retention_ms: int = 7
        effective_local_retention_bytes: int = 9
    assert copy_lag_limits(Cfg()) == (7, 9)
    assert copy_lag_limits(Cfg(remote_copy_lag_ms=0, remote_copy_lag_bytes=5)) == (0, 5)


# ----------------------------------------------------------------------------------------- expiration

def test_dangling_uploads_are_own_unfinished_ones_or_any_below_the_log_start():
    mine, theirs, old_theirs = md(0, 9, state=S.COPY_SEGMENT_STARTED), \
        md(10, 19, state=S.COPY_SEGMENT_STARTED, broker=2), md(0, 4, state=S.COPY_SEGMENT_STARTED, broker=2)
    finished, in_flight = md(20, 29), md(30, 39, state=S.COPY_SEGMENT_STARTED)
    everything = [mine, theirs, old_theirs, finished, in_flight]
    found = dangling_uploads(everything, {in_flight.segment_id}, set(), 1, 5)
    assert found == [mine, old_theirs]
    assert dangling_uploads(everything, {in_flight.segment_id}, set(), 1, 5, own=False) == [old_theirs]
    assert dangling_uploads(everything, {in_flight.segment_id}, {mine.segment_id}, 1, 5) == [old_theirs]


def test_cleanup_candidates_are_the_deletions_started_oldest_first():
    a, b, c = md(20, 29, state=S.DELETE_SEGMENT_STARTED), md(0, 9, state=S.DELETE_SEGMENT_STARTED), md(10, 19)
    assert cleanup_candidates([a, b, c], set()) == [b, a]
    assert cleanup_candidates([a, b, c], {b.segment_id}) == [a]


def test_size_excess_counts_finished_segments_in_the_lineage_and_local_only_bytes():
    entries = [(0, 0)]
    segments = [md(0, 9), md(10, 19), md(20, 29, state=S.COPY_SEGMENT_STARTED)]
    assert size_excess(segments, entries, 100, 50, 300) is None
    assert size_excess(segments, entries, 100, 50, 200) == 50
    assert size_excess(segments, [(3, 0)], 100, 50, 0) == 50  # epochs outside the lineage do not count


def _breaches(segments, entries, log_start=0, leo=100, being_copied=(), until=None, excess=None):
    by_epoch = {e: [m for m in segments if e in m.segment_leader_epochs] for e, _ in entries}
    doomed, new_start = retention_breaches(segments, lambda e: by_epoch[e], entries, leo, log_start,
                                           set(being_copied), until, excess)
    return [(m.start_offset, m.end_offset) for m in doomed], new_start


def test_retention_by_time_deletes_a_contiguous_oldest_prefix_and_moves_the_log_start():
    old, older, new = md(0, 9, ts=NOW - 10_000), md(10, 19, ts=NOW - 9_000), md(20, 29, ts=NOW)
    late_old = md(30, 39, ts=NOW - 20_000)  # old, but after one retention keeps: stays
    assert _breaches([old, older, new, late_old], [(0, 0)], until=NOW - 5_000) == ([(0, 9), (10, 19)], 20)
    assert _breaches([old, older, new], [(0, 0)], until=NOW - 60_000) == ([], None)


def test_retention_by_size_deletes_the_oldest_segments_within_the_excess():
    segments = [md(0, 9), md(10, 19), md(20, 29)]
    assert _breaches(segments, [(0, 0)], excess=150) == ([(0, 9)], 10)
    assert _breaches(segments, [(0, 0)], excess=200) == ([(0, 9), (10, 19)], 20)


def test_retention_deletes_below_the_log_start_and_epochs_older_than_the_lineage():
    below, kept = md(0, 9), md(10, 19)
    stale = md(0, 4, {0: 0})  # epoch 0 is older than the whole lineage below
    assert _breaches([below, kept], [(0, 0)], log_start=10) == ([(0, 9)], None)
    assert _breaches([stale, md(10, 19, {1: 10})], [(1, 10)]) == ([(0, 4)], None)


def test_retention_stops_at_an_upload_in_flight_and_skips_unfinished_segments():
    a, b, c = md(0, 9, ts=0), md(10, 19, ts=0), md(20, 29, ts=0)
    assert _breaches([a, b, c], [(0, 0)], being_copied=[b.segment_id], until=NOW) == ([(0, 9)], 10)
    aborted = dataclasses.replace(b, state=S.DELETE_SEGMENT_STARTED)
    assert _breaches([a, aborted, c], [(0, 0)], until=NOW) == ([(0, 9), (20, 29)], 30)
    assert _breaches([], [(0, 0)], until=NOW) == ([], None)
