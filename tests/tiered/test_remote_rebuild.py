"""The pieces of a compacted topic's remote run rebuild (tierlog.tiered.remote_rebuild; docs/tiered-storage.md,
"When the boundaries differ") on a real local log: runs of overlapping segments, where a range lies in the
local segments (batch-aligned or not at all), the rebuilt segment file and its indexes, and the epochs and
lineage rules. The rebuild across a real leader change is tests/cluster/test_tiered_compacted_boundaries.py."""

from __future__ import annotations

import os

import pytest

from tierlog.records.record import build_batch
from tierlog.storage import LogSegment
from tierlog.storage.log import Log
from tierlog.storage.log_config import LogConfig
from tierlog.storage.transaction_index import AbortedTxn
from tierlog.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.remote_rebuild import (
    Run,
    aborted_in,
    build,
    checkpoint_through,
    ends_before_upload,
    local_pieces,
    overlap_runs,
    run_epochs,
    within_lineage,
)

TP = TopicIdPartition(b"\x01" * 16, "t", 0)


def md(start: int, end: int, epochs: dict[int, int], size: int = 100) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, end, 0, 1, 0, size, epochs)


def batch(base: int, count: int, epoch: int = 0) -> bytes:
    return build_batch([(b"k%d" % (base + i), b"v" * 50, [], 1000 + base + i) for i in range(count)],
                       base_offset=base, partition_leader_epoch=epoch)


@pytest.fixture
def lg(tmp_path):
    """A follower log shaped like a compacted one: batches of 2 records with offsets missing between them,
    segments [0, 8), [8, 20), [20, ...) (a roll starts at the log end)."""
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(index_interval_bytes=1))
    for base in (0, 4, 6):
        log.append_as_follower(batch(base, 2))
    log.roll()
    for base in (10, 14, 18):
        log.append_as_follower(batch(base, 2, epoch=1))
    log.roll()
    log.append_as_follower(batch(20, 2, epoch=1))
    yield log
    log.close()


def test_runs_chain_overlapping_segments_and_keep_adjacent_ones_apart():
    runs = overlap_runs([md(14, 27, {1: 14}), md(0, 13, {0: 0}), md(0, 23, {0: 0}), md(24, 41, {1: 24}),
                         md(42, 55, {1: 42})])
    assert [(r.start, r.end, len(r.members)) for r in runs] == [(0, 41, 4), (42, 55, 1)]


def test_a_range_is_located_between_batches_across_local_segments(lg):
    pieces = local_pieces(lg.segments, 4, 16)
    assert [(seg.base_offset, p0 < p1) for seg, p0, p1 in pieces] == [(0, True), (8, True)]
    first, second = pieces
    assert [h.base_offset for _, h in first[0].batches(first[1], first[2])] == [4, 6]
    assert [h.base_offset for _, h in second[0].batches(second[1], second[2])] == [10, 14]
    # 8 and 9 hold nothing (compacted away): the range may end there.
    assert local_pieces(lg.segments, 0, 9) is not None
    assert local_pieces(lg.segments, 5, 16) is None, "a batch (4-5) reaches across the start"
    assert local_pieces(lg.segments, 4, 15) is None, "a batch (14-15) reaches across the end"


def test_a_run_ending_inside_a_local_segment_not_uploaded_yet_awaits_that_upload():
    # The old leader uploaded up to 125; this leader's segments start at 108, 122 and 136 (active, log end 150).
    bases = [108, 122, 136]
    assert ends_before_upload(bases, 150, 125, 125), "122..135 is not uploaded: its upload will overlap 112..125"
    assert not ends_before_upload(bases, 150, 125, 135), "uploaded: the overlap is there, a stale run now"
    assert not ends_before_upload(bases, 150, 121, 125), "the run ends at a local boundary"
    assert ends_before_upload(bases, 150, 140, 140), "inside the active segment, never uploaded yet"
    assert not ends_before_upload(bases, 141, 140, 140), "ends at the log end"


def test_a_range_the_local_log_no_longer_holds_is_not_located(lg):
    assert local_pieces(lg.segments[1:], 4, 16) is None, "the segment [0, 8) is gone (local retention)"


def test_the_rebuilt_segment_holds_the_range_with_indexes_and_state(lg, tmp_path):
    pieces = local_pieces(lg.segments, 4, 20)
    want = sum(p1 - p0 for _, p0, p1 in pieces)
    txn = AbortedTxn(producer_id=7, first_offset=5, last_offset=15, last_stable_offset=5)
    built = build(str(tmp_path / "r"), 4, pieces, index_interval_bytes=1, max_index_size=1 << 20,
                  aborted=[txn], snapshot=b"state")
    try:
        seg = built.segment
        assert built.size == want == seg.size
        assert [h.base_offset for _, h in seg.batches()] == [4, 6, 10, 14, 18]
        pos, h = seg.translate_offset(14)
        assert h.base_offset == 14 and pos > 0
        assert built.max_timestamp == 1019
        assert seg.txn_index.entries == [txn]
        with open(built.snapshot, "rb") as f:
            assert f.read() == b"state"
        assert os.path.basename(seg.log_path) == "00000000000000000004.log"
    finally:
        built.segment.close()
    reopened = LogSegment(str(tmp_path / "r"), 4, index_interval_bytes=1, max_index_size=1 << 20)
    assert [h.base_offset for _, h in reopened.batches()] == [4, 6, 10, 14, 18]
    reopened.close()


def test_aborted_transactions_are_those_whose_markers_lie_in_the_range(lg):
    seg = lg.segments[1]
    seg.txn_index.append(AbortedTxn(7, 10, 14, 10))
    seg.txn_index.append(AbortedTxn(8, 18, 19, 18))
    seg.txn_index.fsync()
    assert [t.producer_id for t in aborted_in(lg.segments, 4, 15)] == [7]


def test_a_rebuild_starts_each_epoch_where_the_earliest_replica_does():
    run = Run(0, 41, [md(0, 13, {0: 0, 1: 10}), md(14, 27, {1: 14}), md(28, 41, {1: 28})])
    # The leader's cache starts epoch 1 at 20: it fetched after 10-19 were cleaned away.
    epochs = run_epochs({0: 0, 1: 20}, run)
    assert epochs == {0: 0, 1: 10}
    assert checkpoint_through([(0, 0), (1, 20)], run_epochs({1: 24}, Run(24, 41, [md(24, 41, {1: 24})])), 24) \
        == [(0, 0), (1, 20)]
    assert run_epochs({0: 5, 1: 5, 2: 9}, Run(5, 20, [])) == {1: 5, 2: 9}, "an empty epoch gives way"


def test_the_lineage_allows_an_earlier_epoch_start_never_a_later_end():
    entries = [(0, 0), (1, 20), (2, 50)]
    assert within_lineage(md(14, 27, {1: 14}), 100, entries)
    assert within_lineage(md(0, 13, {0: 0, 1: 10}), 100, entries)
    assert not within_lineage(md(40, 55, {1: 40}), 100, entries), "epoch 1 ends at 49 in the lineage"
    assert not within_lineage(md(40, 55, {3: 40}), 100, entries), "an epoch the lineage does not know"
    assert not within_lineage(md(90, 120, {2: 90}), 100, entries), "past the log end"
