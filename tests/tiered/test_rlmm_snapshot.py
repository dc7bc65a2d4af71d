"""Snapshots of the metadata cache: exact round trips (de-duplication state included), and every kind of
damage detected so the manager replays instead."""

from __future__ import annotations

import os
import uuid

import pytest

from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm import snapshot as S
from tierlog.tiered.rlmm.cache import RemotePartitionMetadataStore

ST = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID("0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"), "orders", 2)
OTHER = TopicIdPartition(uuid.UUID("11111111-2222-4333-8444-555555555555"), "pay-ments", 0)


def segment(tp, start, end, epochs, custom=None):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, end, 1_700_000_000_000 + start, 3,
                                    1_700_000_000_500, 1000 + start, epochs)


def update(md, state, custom=None):
    return RemoteLogSegmentMetadataUpdate(md.segment_id, 1_700_000_001_000, custom, state, 3)


def populated() -> RemotePartitionMetadataStore:
    """Finished, superseded (a new leader re-uploaded a superset), being copied, being deleted, deleted."""
    store = RemotePartitionMetadataStore()
    for tp in (TP, OTHER):
        store.maybe_load_partition(tp)
    a = segment(TP, 0, 99, {0: 0})
    b = segment(TP, 100, 199, {0: 100, 1: 150})
    b2 = segment(TP, 100, 249, {0: 100, 1: 150})  # superset of b by a later leader: b becomes unreferenced
    c = segment(TP, 250, 299, {1: 250})
    d = segment(TP, 300, 349, {2: 300})
    gone = segment(TP, 350, 399, {2: 350})
    for md in (a, b, b2, c, d, gone):
        store.handle(md)
    for md, custom in ((a, b"\x00custom"), (b, None), (b2, b""), (gone, None)):
        store.handle(update(md, ST.COPY_SEGMENT_FINISHED, custom))
    store.handle(update(c, ST.DELETE_SEGMENT_STARTED))  # from COPY_SEGMENT_STARTED (a failed upload)
    store.handle(update(gone, ST.DELETE_SEGMENT_STARTED))
    store.handle(update(gone, ST.DELETE_SEGMENT_FINISHED))
    o = segment(OTHER, 0, 9, {5: 0})
    store.handle(o)
    store.handle(update(o, ST.COPY_SEGMENT_FINISHED, b"x" * 128))
    for tp in (TP, OTHER):
        store.mark_initialized(tp)
    return store


def snapshot_of(store) -> S.Snapshot:
    return S.Snapshot(7, 1234, {tp: S.PartitionState(tp, 99 + i, *store.export_state(tp))
                                for i, tp in enumerate((TP, OTHER))})


def restored(snap: S.Snapshot) -> RemotePartitionMetadataStore:
    store = RemotePartitionMetadataStore()
    for tp, state in snap.partitions.items():
        store.import_state(tp, state.segments, state.epochs)
        store.mark_initialized(tp)
    return store


def test_round_trip_keeps_the_cache_exactly():
    original = populated()
    snap = S.decode(S.encode(snapshot_of(original)))
    assert (snap.metadata_partition, snap.read_offset) == (7, 1234)
    assert [s.last_applied_offset for s in snap.partitions.values()] == [99, 100]
    copy = restored(snap)
    for tp in (TP, OTHER):
        assert sorted(copy.list_remote_log_segments(tp), key=str) == sorted(original.list_remote_log_segments(tp),
                                                                            key=str)
        for epoch in range(4):
            assert copy.list_remote_log_segments(tp, epoch) == original.list_remote_log_segments(tp, epoch)
            assert copy.highest_offset_for_epoch(tp, epoch) == original.highest_offset_for_epoch(tp, epoch)
    for offset in range(0, 400, 7):
        for epoch in (0, 1, 2):
            assert copy.remote_log_segment_metadata(TP, epoch, offset) == \
                original.remote_log_segment_metadata(TP, epoch, offset)
    # The superseded upload stays unreferenced (listed for deletion, never read): de-duplication survived.
    readable = {md.start_offset: md.end_offset for md in
                (copy.remote_log_segment_metadata(TP, 0, o) for o in (50, 120)) if md}
    assert readable == {0: 99, 100: 249}
    assert copy.remote_log_segment_metadata(OTHER, 5, 3).custom_metadata == b"x" * 128
    assert copy.remote_log_segment_metadata(TP, 0, 5).custom_metadata == b"\x00custom"


def test_restored_cache_keeps_applying_events():
    copy = restored(S.decode(S.encode(snapshot_of(populated()))))
    e = segment(TP, 400, 449, {2: 400})
    copy.handle(e)
    copy.handle(update(e, ST.COPY_SEGMENT_FINISHED))
    assert copy.remote_log_segment_metadata(TP, 2, 420).segment_id == e.segment_id
    assert copy.highest_offset_for_epoch(TP, 2) == 449


@pytest.mark.parametrize("damage", ["truncate", "flip", "version", "trailing", "empty"])
def test_damaged_files_are_refused(tmp_path, damage, caplog):
    data = bytearray(S.encode(snapshot_of(populated())))
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data[len(data) // 3] ^= 0x40
    elif damage == "version":
        data[5] = 9
    elif damage == "trailing":
        data += b"\0"
    else:
        data = bytearray()
    with pytest.raises(ValueError):
        S.decode(bytes(data))
    os.makedirs(tmp_path / S.FOLDER)
    (tmp_path / S.FOLDER / "7.snapshot").write_bytes(bytes(data))
    assert S.read(str(tmp_path), 7) is None
    assert "replaying the partition" in caplog.text


def test_write_and_read_back(tmp_path):
    snap = snapshot_of(populated())
    S.write(str(tmp_path), snap)
    assert S.read(str(tmp_path), 7).read_offset == 1234
    assert S.read(str(tmp_path), 8) is None  # no file: a full replay, silently
    os.replace(tmp_path / S.FOLDER / "7.snapshot", tmp_path / S.FOLDER / "8.snapshot")
    assert S.read(str(tmp_path), 8) is None  # a file of another partition is not trusted
