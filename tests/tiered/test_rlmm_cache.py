"""The remote log metadata cache and store, reproducing Kafka's RemoteLogSegmentLifecycleTest,
RemoteLogMetadataCacheTest, RemoteLogLeaderEpochStateTest and RemoteLogMetadataManagerTest scenarios
(without the network: events go through the serde into the store, as the consumer task does)."""

import logging
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import ReplicaNotAvailableError, RetriableError
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm import serde
from tierlog.tiered.rlmm.cache import (
    PartitionNotLoadedError,
    RemoteLogLeaderEpochState,
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
)

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
PARTITION_MARKED = RemotePartitionDeleteState.DELETE_PARTITION_MARKED
PARTITION_STARTED = RemotePartitionDeleteState.DELETE_PARTITION_STARTED
PARTITION_FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED

TP = TopicIdPartition(uuid.uuid4(), "foo", 0)
SEG_SIZE = 1048576
BROKER_0, BROKER_1 = 0, 1


def new_id(tp=TP):
    return RemoteLogSegmentId(tp, uuid.uuid4())


def segment(start, end, epochs, tp=TP, segment_id=None):
    return RemoteLogSegmentMetadata(segment_id or new_id(tp), start, end, -1, BROKER_0, 1000, SEG_SIZE, epochs)


def update_of(md, state, custom=None):
    return RemoteLogSegmentMetadataUpdate(md.segment_id, 2000, custom, state, BROKER_1)


def apply(store, event):
    """What the consumer task does with an event: read it back from its record value and apply it."""
    store.handle(serde.deserialize(serde.serialize(event)))


def upsert(store, epochs, start, end, state):
    """Kafka's upsertSegmentState: add the segment, then one update to ``state``."""
    md = segment(start, end, epochs)
    apply(store, md)
    upd = update_of(md, state)
    apply(store, upd)
    return md.with_update(upd)


@pytest.fixture
def store():
    s = RemotePartitionMetadataStore()
    s.maybe_load_partition(TP)
    s.mark_initialized(TP)
    return s


@pytest.fixture
def cache():
    return RemoteLogMetadataCache()


def check_list_segments(store, epoch, expected):
    assert store.list_remote_log_segments(TP, epoch)[0] == expected
    assert store.all_segments(TP)[0] == expected


# ---------------------------------------------------------------------- RemoteLogSegmentLifecycleTest

def test_remote_log_segment_life_cycle(store):
    # segment 0: offsets 0-100, epochs (0, 0), (1, 20), (2, 80)
    seg0 = segment(0, 100, {0: 0, 1: 20, 2: 80})
    apply(store, seg0)
    # Not readable while being copied, and its epochs do not count for highest offsets.
    assert store.remote_log_segment_metadata(TP, 1, 40) is None
    for epoch in range(3):
        assert store.highest_offset_for_epoch(TP, epoch) is None
    upd0 = update_of(seg0, FINISHED)
    apply(store, upd0)
    seg0 = seg0.with_update(upd0)

    seg1 = upsert(store, {2: 101}, 101, 200, FINISHED)                 # no leadership change inside
    seg2 = upsert(store, {2: 201, 3: 240}, 201, 300, FINISHED)         # epoch 3 starts inside
    seg3 = upsert(store, {3: 250, 4: 370}, 250, 400, FINISHED)         # overlaps segment 2

    expected = {
        (1, 40): seg0, (2, 110): seg1, (3, 240): seg2, (3, 250): seg3, (4, 375): seg3,
        (1, 110): None,   # offset of another epoch
        (4, 401): None,   # beyond the last segment
        (5, 301): None,   # unknown epoch
    }
    for (epoch, offset), md in expected.items():
        assert store.remote_log_segment_metadata(TP, epoch, offset) == md, (epoch, offset)

    apply(store, update_of(seg0, DELETE_STARTED))
    assert store.remote_log_segment_metadata(TP, 0, 10) is None
    apply(store, update_of(seg0, DELETE_FINISHED))
    assert store.remote_log_segment_metadata(TP, 0, 10) is None

    # Highest offsets stay where copied segments took them, also after segment 0 was deleted.
    for epoch, offset in {0: 19, 1: 79, 2: 239, 3: 369, 4: 400}.items():
        assert store.highest_offset_for_epoch(TP, epoch) == offset
    assert store.highest_offset_for_epoch(TP, 5) is None


def test_cache_segment_with_copy_segment_started_state(store):
    md = segment(0, 50, {0: 0})
    apply(store, md)
    assert store.remote_log_segment_metadata(TP, 0, 0) is None
    check_list_segments(store, 0, md)


def test_cache_segment_with_copy_segment_finished_state(store):
    md = upsert(store, {0: 101}, 101, 200, FINISHED)
    assert store.remote_log_segment_metadata(TP, 0, 150) == md
    check_list_segments(store, 0, md)


def test_cache_segment_with_delete_segment_started_state(store):
    md = upsert(store, {0: 201}, 201, 300, DELETE_STARTED)
    assert store.remote_log_segment_metadata(TP, 0, 250) is None
    check_list_segments(store, 0, md)


def test_cache_segments_with_delete_segment_finished_state(store):
    md = upsert(store, {0: 301}, 301, 400, DELETE_STARTED)
    assert store.remote_log_segment_metadata(TP, 0, 350) is None
    apply(store, update_of(md, DELETE_FINISHED))
    assert store.list_remote_log_segments(TP, 0) == []
    assert store.all_segments(TP) == []


def test_cache_list_segments(store):
    seg0 = upsert(store, {0: 0}, 0, 100, FINISHED)
    seg1 = upsert(store, {0: 101}, 101, 200, FINISHED)
    seg2 = upsert(store, {0: 201, 1: 301}, 201, 400, FINISHED)
    assert store.list_remote_log_segments(TP, 0) == [seg0, seg1, seg2]
    assert sorted(store.all_segments(TP), key=lambda md: md.start_offset) == [seg0, seg1, seg2]
    assert store.list_remote_log_segments(TP, 1) == [seg2]


# ---------------------------------------------------------------------------- visibility matrix

@pytest.mark.parametrize(("state", "readable", "listed"), [
    (STARTED, False, True),
    (FINISHED, True, True),
    (DELETE_STARTED, False, True),
    (DELETE_FINISHED, False, False),
])
def test_visibility_matrix(store, state, readable, listed):
    md = segment(10, 20, {3: 10})
    apply(store, md)
    path = {STARTED: [], FINISHED: [FINISHED], DELETE_STARTED: [FINISHED, DELETE_STARTED],
            DELETE_FINISHED: [FINISHED, DELETE_STARTED, DELETE_FINISHED]}[state]
    for target in path:
        upd = update_of(md, target)
        apply(store, upd)
        md = md.with_update(upd)
    assert store.remote_log_segment_metadata(TP, 3, 15) == (md if readable else None)
    assert store.list_remote_log_segments(TP, 3) == ([md] if listed else [])
    assert store.all_segments(TP) == ([md] if listed else [])
    assert store.remote_log_size(TP, 3) == (SEG_SIZE if listed else 0)


# ------------------------------------------------------------------------ RemoteLogMetadataCacheTest

def test_cache_add_metadata_on_invalid_args(cache):
    cache.mark_initialized()
    with pytest.raises(TypeError):
        cache.add_copy_in_progress_segment(None)
    for state in (FINISHED, DELETE_STARTED, DELETE_FINISHED):
        md = segment(0, 100, {0: 0})
        with pytest.raises(ValueError):
            cache.add_copy_in_progress_segment(md.with_update(update_of(md, state)))
    assert cache.list_remote_log_segments() == []


@pytest.mark.parametrize("initialized", [True, False])
def test_cache_update_metadata_on_invalid_args(cache, initialized):
    if initialized:
        cache.mark_initialized()
    with pytest.raises(TypeError):
        cache.update_remote_log_segment_metadata(None)
    for state in (FINISHED, DELETE_STARTED, DELETE_FINISHED):
        upd = RemoteLogSegmentMetadataUpdate(new_id(), 0, None, state, BROKER_1)
        if initialized:
            with pytest.raises(RemoteResourceNotFoundError):
                cache.update_remote_log_segment_metadata(upd)
        else:
            # The base record may be gone with the metadata topic's retention: dropped quietly.
            cache.update_remote_log_segment_metadata(upd)
    assert cache.list_remote_log_segments() == []


def test_drop_event_on_invalid_state_transition(cache, caplog):
    cache.mark_initialized()
    epoch, offset = 5, 10
    md = segment(offset, 100, {epoch: offset})
    cache.add_copy_in_progress_segment(md)

    def update_and_verify(target, expected_state):
        cache.update_remote_log_segment_metadata(update_of(md, target))
        listed = cache.list_remote_log_segments(epoch)
        if expected_state == DELETE_FINISHED:
            assert listed == []
        else:
            assert [m.state for m in listed] == [expected_state]

    with caplog.at_level(logging.ERROR, logger="tierlog.tiered.rlmm.cache"):
        update_and_verify(DELETE_FINISHED, STARTED)        # invalid
    assert "dropping the event" in caplog.text
    update_and_verify(FINISHED, FINISHED)                  # valid
    update_and_verify(DELETE_FINISHED, FINISHED)           # invalid
    update_and_verify(STARTED, FINISHED)                   # invalid (backwards)
    update_and_verify(DELETE_STARTED, DELETE_STARTED)      # valid
    update_and_verify(FINISHED, DELETE_STARTED)            # invalid
    update_and_verify(STARTED, DELETE_STARTED)             # invalid
    update_and_verify(DELETE_FINISHED, DELETE_FINISHED)    # valid


def test_invalid_add_transition_is_dropped(cache):
    md = segment(0, 10, {0: 0})
    cache.add_copy_in_progress_segment(md)
    upd = update_of(md, FINISHED)
    cache.update_remote_log_segment_metadata(upd)
    cache.add_copy_in_progress_segment(md)  # FINISHED -> STARTED: dropped
    assert cache.list_remote_log_segments(0) == [md.with_update(upd)]
    assert cache.remote_log_segment_metadata(0, 5) == md.with_update(upd)


def test_repeated_events_are_idempotent(cache):
    md = segment(0, 10, {0: 0})
    cache.add_copy_in_progress_segment(md)
    cache.add_copy_in_progress_segment(md)
    upd = update_of(md, FINISHED)
    cache.update_remote_log_segment_metadata(upd)
    cache.update_remote_log_segment_metadata(upd)
    assert cache.list_remote_log_segments(0) == [md.with_update(upd)]
    assert cache.list_remote_log_segments() == [md.with_update(upd)]


def test_update_to_copy_started_is_an_argument_error(cache):
    md = segment(0, 10, {0: 0})
    cache.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError):
        cache.update_remote_log_segment_metadata(update_of(md, STARTED))


def test_update_replaces_broker_time_and_custom_metadata(cache):
    md = segment(0, 10, {0: 0})
    cache.add_copy_in_progress_segment(md)
    cache.update_remote_log_segment_metadata(update_of(md, FINISHED, custom=b"rsm"))
    got = cache.remote_log_segment_metadata(0, 0)
    assert (got.broker_id, got.event_timestamp_ms, got.custom_metadata, got.state) == (BROKER_1, 2000, b"rsm", FINISHED)
    cache.update_remote_log_segment_metadata(update_of(md, DELETE_STARTED))
    assert cache.list_remote_log_segments(0)[0].custom_metadata is None  # replaced, not merged


# ---------------------------------------------------------------------- RemoteLogLeaderEpochStateTest

def metadata_map(*pairs):
    return {sid: segment(start, start, {0: start}, segment_id=sid) for sid, start in pairs}


def test_epoch_state_list_on_empty():
    assert RemoteLogLeaderEpochState().list_all_segments({}) == []


def test_epoch_state_list_unknown_segment_id():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(0, id1, 10)
    with pytest.raises(RemoteResourceNotFoundError):
        state.list_all_segments(metadata_map((id2, 0)))


def test_epoch_state_list_is_sorted_by_start_offset():
    state = RemoteLogLeaderEpochState()
    id1, id2, id3, id4 = (new_id() for _ in range(4))
    state.handle_copy_started(id1)                 # copy never finished: unreferenced
    state.handle_copy_finished(5, id2, 10)
    state.handle_copy_finished(11, id3, 100)       # superseded by id4 below: unreferenced
    state.handle_copy_finished(9, id4, 150)
    listed = state.list_all_segments(metadata_map((id1, 0), (id2, 5), (id3, 11), (id4, 9)))
    assert [md.segment_id for md in listed] == [id1, id2, id4, id3]


def test_epoch_state_copy_started():
    state = RemoteLogLeaderEpochState()
    sid = new_id()
    state.handle_copy_started(sid)
    assert state.unreferenced_segment_ids() == [sid]


def test_epoch_state_copy_finished():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(101, id2, 200)
    assert len(state.referenced_segment_ids()) == 2
    assert state.floor_entry(90) == id1
    assert state.floor_entry(150) == id2
    assert state.floor_entry(9) is None
    assert state.unreferenced_segment_ids() == []
    assert state.highest_log_offset == 200


def test_epoch_state_copy_finished_overlapping():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(5, id2, 150)
    assert state.referenced_segment_ids() == [id2]
    assert state.floor_entry(11) == id2
    assert state.unreferenced_segment_ids() == [id1]
    assert state.highest_log_offset == 150


def test_epoch_state_copy_finished_multiple_overlapping():
    state = RemoteLogLeaderEpochState()
    id1, id2, id3, id4 = (new_id() for _ in range(4))
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(5, id2, 150)
    state.handle_copy_finished(148, id3, 155)
    state.handle_copy_finished(4, id4, 200)
    assert state.referenced_segment_ids() == [id4]
    assert state.floor_entry(11) == id4
    assert set(state.unreferenced_segment_ids()) == {id1, id2, id3}
    assert state.highest_log_offset == 200


def test_epoch_state_copy_finished_duplicate():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(10, id2, 100)
    assert state.floor_entry(11) == id2
    assert state.unreferenced_segment_ids() == [id1]
    assert state.highest_log_offset == 100


def test_epoch_state_copy_finished_same_start_offset():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(10, id2, 150)
    assert state.floor_entry(11) == id2
    assert state.floor_entry(111) == id2
    assert state.unreferenced_segment_ids() == [id1]
    assert state.highest_log_offset == 150


def test_epoch_state_delete_started():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_copy_finished(101, id2, 200)
    state.handle_delete_started(10, id1)
    state.handle_delete_started(101, id2)
    assert state.referenced_segment_ids() == []
    assert set(state.unreferenced_segment_ids()) == {id1, id2}


def test_epoch_state_delete_started_leaves_other_segment_at_same_offset():
    state = RemoteLogLeaderEpochState()
    id1, id2 = new_id(), new_id()
    state.handle_copy_finished(10, id1, 100)
    state.handle_delete_started(10, id2)  # not the segment mapped at 10
    assert state.floor_entry(10) == id1


def test_epoch_state_delete_finished():
    state = RemoteLogLeaderEpochState()
    sid = new_id()
    state.handle_copy_started(sid)
    state.handle_delete_finished(sid)
    assert state.unreferenced_segment_ids() == []


# ---------------------------------------------------------------- re-uploads after leader failover

def test_reupload_by_new_leader_supersedes_old_segment(store):
    old = upsert(store, {0: 10}, 10, 90, FINISHED)       # old leader
    new = upsert(store, {0: 5, 1: 95}, 5, 100, FINISHED)  # new leader re-uploads a superset
    assert store.remote_log_segment_metadata(TP, 0, 50) == new
    assert store.remote_log_segment_metadata(TP, 1, 97) == new
    # The old one stays listed (for retention to delete it) but is never read.
    assert store.list_remote_log_segments(TP, 0) == [new, old]
    assert store.highest_offset_for_epoch(TP, 0) == 94
    assert store.remote_log_size(TP, 0) == 2 * SEG_SIZE


def test_same_start_smaller_segment_replaces_mapping_as_kafka_does(cache):
    # Kafka's map put when no de-duplication happens: the bigger segment drops out of the epoch.
    big = segment(10, 200, {0: 10})
    small = segment(10, 100, {0: 10})
    for md in (big, small):
        cache.add_copy_in_progress_segment(md)
        cache.update_remote_log_segment_metadata(update_of(md, FINISHED))
    assert cache.remote_log_segment_metadata(0, 50).segment_id == small.segment_id
    assert cache.remote_log_segment_metadata(0, 150) is None
    assert [md.segment_id for md in cache.list_remote_log_segments(0)] == [small.segment_id]
    assert {md.segment_id for md in cache.list_remote_log_segments()} == {big.segment_id, small.segment_id}
    assert cache.highest_offset_for_epoch(0) == 200


def test_lookup_past_epoch_end_inside_segment(cache):
    md = segment(0, 100, {0: 0, 2: 50})
    cache.add_copy_in_progress_segment(md)
    cache.update_remote_log_segment_metadata(update_of(md, FINISHED))
    assert cache.remote_log_segment_metadata(0, 49) is not None
    assert cache.remote_log_segment_metadata(0, 50) is None   # offset 50 was written in epoch 2
    assert cache.remote_log_segment_metadata(2, 100) is not None
    assert cache.remote_log_segment_metadata(1, 10) is None


# ---------------------------------------------------------------- RemoteLogMetadataManagerTest

def test_fetch_segments(store):
    md = segment(101, 200, {0: 101})
    apply(store, md)
    assert store.remote_log_segment_metadata(TP, 0, 150) is None
    upd = update_of(md, FINISHED)
    apply(store, upd)
    assert store.remote_log_segment_metadata(TP, 0, 150) == md.with_update(upd)


def test_remote_partition_deletion(store):
    md = upsert(store, {0: 0, 1: 20, 2: 50, 3: 80}, 0, 100, FINISHED)
    assert store.remote_log_segment_metadata(TP, 1, 30) == md
    # Segments stay readable until the partition's deletion has finished.
    for state in (PARTITION_MARKED, PARTITION_STARTED):
        apply(store, RemotePartitionDeleteMetadata(TP, state, 3000, BROKER_0))
        assert store.remote_log_segment_metadata(TP, 1, 30) == md
    apply(store, RemotePartitionDeleteMetadata(TP, PARTITION_FINISHED, 3000, BROKER_0))
    with pytest.raises(RemoteResourceNotFoundError):
        store.remote_log_segment_metadata(TP, 1, 30)
    assert not store.is_initialized(TP)


# ---------------------------------------------------------------------------------- readiness

def test_reads_wait_for_initialization():
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(TP)
    md = segment(0, 10, {0: 0})
    apply(store, md)  # events are applied while the partition is loading
    upd = update_of(md, FINISHED)
    apply(store, upd)
    assert not store.is_initialized(TP)
    reads = [lambda: store.remote_log_segment_metadata(TP, 0, 5), lambda: store.highest_offset_for_epoch(TP, 0),
             lambda: store.list_remote_log_segments(TP, 0), lambda: store.all_segments(TP),
             lambda: store.remote_log_size(TP, 0)]
    for read in reads:
        with pytest.raises(ReplicaNotAvailableError) as exc:
            read()
        assert exc.value.code == 9 and isinstance(exc.value, RetriableError)
    store.mark_initialized(TP)
    assert store.is_initialized(TP)
    assert store.remote_log_segment_metadata(TP, 0, 5) == md.with_update(upd)
    assert store.highest_offset_for_epoch(TP, 0) == 10


def test_maybe_load_partition_keeps_existing_cache(store):
    md = upsert(store, {0: 0}, 0, 10, FINISHED)
    store.maybe_load_partition(TP)
    assert store.is_initialized(TP)
    assert store.all_segments(TP) == [md]


def test_unknown_partition():
    store = RemotePartitionMetadataStore()
    assert not store.is_initialized(TP)
    with pytest.raises(RemoteResourceNotFoundError):
        store.remote_log_segment_metadata(TP, 0, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        store.list_remote_log_segments(TP)
    with pytest.raises(PartitionNotLoadedError):
        store.mark_initialized(TP)
    md = segment(0, 10, {0: 0})
    for event in (md, update_of(md, FINISHED)):
        with pytest.raises(PartitionNotLoadedError):
            store.handle(event)
    # A partition delete for a partition without a cache is recorded nowhere and harms nothing.
    store.handle(RemotePartitionDeleteMetadata(TP, PARTITION_FINISHED, 0, 0))


def test_update_for_unknown_segment_is_logged_by_the_store(store, caplog):
    with caplog.at_level(logging.WARNING, logger="tierlog.tiered.rlmm.cache"):
        apply(store, RemoteLogSegmentMetadataUpdate(new_id(), 0, None, FINISHED, BROKER_1))
    assert "No remote log segment metadata found" in caplog.text


def test_store_rejects_unsupported_events(store):
    with pytest.raises(TypeError):
        store.handle(TP)


def test_clear_partition_and_close(store):
    store.clear_partition(TP)
    with pytest.raises(RemoteResourceNotFoundError):
        store.all_segments(TP)
    store.maybe_load_partition(TP)
    store.close()
    assert not store.is_initialized(TP)


def test_partitions_are_independent(store):
    other = TopicIdPartition(TP.topic_id, TP.topic, 1)
    store.maybe_load_partition(other)
    md = upsert(store, {0: 0}, 0, 10, FINISHED)
    assert store.all_segments(TP) == [md]
    with pytest.raises(ReplicaNotAvailableError):
        store.all_segments(other)
    store.mark_initialized(other)
    assert store.all_segments(other) == []
    apply(store, RemotePartitionDeleteMetadata(other, PARTITION_FINISHED, 0, 0))
    assert store.all_segments(TP) == [md]


def test_remote_log_size_counts_the_epoch_listing(store):
    upsert(store, {0: 0}, 0, 10, FINISHED)
    upsert(store, {0: 11, 1: 15}, 11, 20, DELETE_STARTED)
    apply(store, segment(21, 30, {1: 21}))
    gone = upsert(store, {1: 31}, 31, 40, DELETE_STARTED)
    apply(store, update_of(gone, DELETE_FINISHED))
    assert store.remote_log_size(TP, 0) == 2 * SEG_SIZE
    assert store.remote_log_size(TP, 1) == 2 * SEG_SIZE
    assert store.remote_log_size(TP, 7) == 0


# ---------------------------------------------------------------------------------- snapshots

def state_of(store, epochs):
    """Everything a reader of TP's cache can observe for ``epochs`` and offsets 0..200."""
    return (
        {md.segment_id: md for md in store.all_segments(TP)},
        {e: sorted((md.start_offset, str(md.segment_id)) for md in store.list_remote_log_segments(TP, e))
         for e in epochs},
        {e: store.highest_offset_for_epoch(TP, e) for e in epochs},
        {(e, o): store.remote_log_segment_metadata(TP, e, o) for e in epochs for o in range(0, 201, 3)},
    )


def restored(store, tp=TP):
    """Snapshot ``tp`` through the snapshot record encoding into a fresh store."""
    values = [serde.serialize_snapshot(md) for md in store.snapshot(tp)]
    fresh = RemotePartitionMetadataStore()
    fresh.restore(tp, [serde.deserialize_snapshot(v, tp) for v in values])
    return fresh


def test_snapshot_restore_keeps_deduplication(store):
    upsert(store, {0: 10}, 10, 90, FINISHED)
    upsert(store, {0: 100}, 100, 150, FINISHED)
    upsert(store, {0: 5, 1: 155}, 5, 160, FINISHED)     # supersedes both
    apply(store, segment(161, 170, {1: 161}))           # still copying
    upsert(store, {1: 171}, 171, 180, DELETE_STARTED)
    assert [md.start_offset for md in store.list_remote_log_segments(TP, 0)] == [5, 10, 100]
    assert store.remote_log_segment_metadata(TP, 0, 120).start_offset == 5
    fresh = restored(store)
    assert not fresh.is_initialized(TP)  # events after the snapshot are still to be read
    fresh.mark_initialized(TP)
    assert state_of(fresh, [0, 1]) == state_of(store, [0, 1])


def test_snapshot_works_before_initialization():
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(TP)
    md = segment(0, 10, {0: 0})
    apply(store, md)
    assert store.snapshot(TP) == [md]
    with pytest.raises(PartitionNotLoadedError):
        store.snapshot(TopicIdPartition(uuid.uuid4(), "bar", 0))


def test_restore_replaces_the_partition_cache(store):
    upsert(store, {0: 0}, 0, 10, FINISHED)
    md = segment(20, 30, {0: 20})
    store.restore(TP, [md])
    assert not store.is_initialized(TP)
    store.mark_initialized(TP)
    assert store.all_segments(TP) == [md]


def test_restore_rejects_bad_input(store):
    other = TopicIdPartition(uuid.uuid4(), "bar", 0)
    with pytest.raises(ValueError):
        store.restore(TP, [segment(0, 1, {0: 0}, tp=other)])
    md = segment(0, 1, {0: 0})
    gone = md.with_update(update_of(md, DELETE_FINISHED))
    with pytest.raises(ValueError):
        store.restore(TP, [gone])
    cache = RemoteLogMetadataCache()
    cache.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError):
        cache.restore([md])


@st.composite
def histories(draw):
    """Random uploads of overlapping segments, some finished (once each), in a random order."""
    events = []
    for _ in range(draw(st.integers(1, 12))):
        start = draw(st.integers(0, 100))
        end = draw(st.integers(start, 120))
        epochs = {draw(st.integers(0, 2)): start}
        if end > start and draw(st.booleans()):
            epochs[max(epochs) + 1] = draw(st.integers(start + 1, end))
        events.append((segment(start, end, epochs), draw(st.booleans())))
    order = draw(st.permutations(range(len(events))))
    return events, order


@settings(max_examples=60, deadline=None)
@given(histories())
def test_snapshot_restore_is_exact_without_deletions(history):
    events, order = history
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(TP)
    store.mark_initialized(TP)
    for md, _ in events:
        store.handle(md)
    for i in order:  # finish uploads in an order unrelated to the adds
        md, finish = events[i]
        if finish:
            store.handle(update_of(md, FINISHED))
    fresh = restored(store)
    fresh.mark_initialized(TP)
    assert state_of(fresh, [0, 1, 2, 3]) == state_of(store, [0, 1, 2, 3])


def test_a_compacted_replacement_takes_over_the_segments_it_contains_also_in_the_middle():
    # A compacted topic's replacement (docs/tiered-storage.md, "Compacted topics"): [0, 19] replaces [0, 9] and
    # [10, 19], which are not the epoch's last segments; reads of their offsets go to it at once.
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    olds = [segment(0, 9, {0: 0}), segment(10, 19, {0: 10}), segment(20, 29, {0: 20})]
    for md in olds:
        cache.add_copy_in_progress_segment(md)
        cache.update_remote_log_segment_metadata(update_of(md, FINISHED))
    replacement = segment(0, 19, {0: 0})
    cache.add_copy_in_progress_segment(replacement)
    assert cache.remote_log_segment_metadata(0, 15).segment_id == olds[1].segment_id  # not finished yet
    cache.update_remote_log_segment_metadata(update_of(replacement, FINISHED))
    assert cache.remote_log_segment_metadata(0, 5).segment_id == replacement.segment_id
    assert cache.remote_log_segment_metadata(0, 15).segment_id == replacement.segment_id
    assert cache.remote_log_segment_metadata(0, 25).segment_id == olds[2].segment_id
    assert cache.highest_offset_for_epoch(0) == 29
    for md in olds[:2]:  # the replaced ones are still listed (so they can be deleted), and deleting them
        cache.update_remote_log_segment_metadata(update_of(md, DELETE_STARTED))  # changes no read
        cache.update_remote_log_segment_metadata(update_of(md, DELETE_FINISHED))
    assert cache.remote_log_segment_metadata(0, 15).segment_id == replacement.segment_id
    assert {md.segment_id for md in cache.list_remote_log_segments(0)} == {replacement.segment_id, olds[2].segment_id}
