"""The rules of `tierlog tier restore` without processes: which remote segments a partition is rebuilt from,
how the controller takes a restore (original topic id, leader epochs above the restored ones, restore points
kept across restarts, the reserved configs never stored), what it refuses, and that a restore point moves
only a log that never held a record."""

from __future__ import annotations

import uuid

import pytest

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, ensure_meta_properties
from tierlog.cluster.image import RestorePoint
from tierlog.cluster.restore import RESTORE_POINTS, RESTORE_TOPIC_ID, restore_configs
from tierlog.config import BrokerConfig
from tierlog.errors import InvalidConfigError, InvalidPartitionsError, InvalidRequestError
from tierlog.records import build_batch
from tierlog.storage import Log, LogConfig
from tierlog.tiered.rsm.layout import SegmentManifest
from tierlog.tools.restore import FoundSegment, plan_partition

TOPIC_ID = uuid.UUID(int=0x1234)


def seg(start: int, end: int, epochs: dict[int, int], written: int = 0) -> FoundSegment:
    return FoundSegment("cluster/", SegmentManifest(
        topic="t", topic_id=TOPIC_ID, partition=0, segment_id=uuid.uuid4(), start_offset=start, end_offset=end,
        max_timestamp_ms=0, leader_epochs=epochs, log_size=1, log_stored_size=1, indexes_size=0, indexes={},
        written_ms=written))


def offsets(plan) -> list[tuple[int, int]]:
    return [(s.manifest.start_offset, s.manifest.end_offset) for s in plan.chain]


def test_contiguous_segments_are_restored_with_their_epochs():
    plan = plan_partition(0, [seg(100, 199, {1: 100, 2: 150}), seg(0, 99, {0: 0, 1: 60}), seg(200, 299, {2: 200})])
    assert offsets(plan) == [(0, 99), (100, 199), (200, 299)] and not plan.skipped
    assert plan.point == RestorePoint(0, 300, ((0, 0), (1, 60), (2, 150)))


def test_a_segment_uploaded_again_whole_by_a_new_leader_overlaps_its_predecessor():
    # The old leader uploaded 0..149; the new one's local segment 100..249 went up whole.
    plan = plan_partition(0, [seg(0, 149, {0: 0}), seg(100, 249, {0: 100, 1: 200})])
    assert offsets(plan) == [(0, 149), (100, 249)]
    assert plan.point == RestorePoint(0, 250, ((0, 0), (1, 200)))


def test_a_fenced_leaders_upload_is_left_out_and_the_newest_lineage_wins():
    # Epoch 1's leader uploaded 100..299 but was fenced (an unclean election): epoch 2 rewrote from 100.
    fenced = seg(100, 299, {1: 100})
    plan = plan_partition(0, [seg(0, 99, {0: 0}), fenced, seg(100, 179, {2: 100})])
    assert offsets(plan) == [(0, 99), (100, 179)] and [s.manifest for s in plan.skipped] == [fenced.manifest]
    assert plan.point.latest_epoch == 2 and plan.point.log_end_offset == 180


def test_the_restored_log_starts_after_a_gap():
    plan = plan_partition(0, [seg(0, 99, {0: 0}), seg(200, 299, {0: 200}), seg(300, 399, {0: 300})])
    assert offsets(plan) == [(200, 299), (300, 399)] and len(plan.skipped) == 1
    assert plan.point == RestorePoint(200, 400, ((0, 200),))


@pytest.fixture
def make_controller(tmp_path):
    def make():
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "remote.log.storage.system.enable": "true",
                                       "rsm.config.dir": str(tmp_path / "remote")})
        cid = ensure_meta_properties([str(tmp_path)], cfg["node.id"], None)
        return Controller(cfg, FileMetadataStore(str(tmp_path)), BrokerImage(cfg["node.id"], "127.0.0.1", 9092), cid)
    return make


POINTS = {0: RestorePoint(0, 500, ((0, 0), (4, 300))), 1: RestorePoint(40, 90, ((2, 40),))}


def test_the_controller_restores_a_topic_with_its_id_and_restore_points(make_controller):
    c = make_controller()
    t = c.create_topic("orders", 3, configs={"remote.storage.enable": "true", "retention.ms": "-1",
                                            **restore_configs(TOPIC_ID, POINTS)})
    assert t.topic_id == TOPIC_ID and t.restored == POINTS
    assert {p.leader_epoch for p in t.partitions.values()} == {5}  # above every restored epoch, in every partition
    assert t.configs == {"remote.storage.enable": "true", "retention.ms": "-1"}  # no reserved key stored
    again = make_controller().image.topics["orders"]
    assert again.topic_id == TOPIC_ID and again.restored == POINTS


@pytest.mark.parametrize("configs, error", [
    ({"remote.storage.enable": "false", **restore_configs(TOPIC_ID, POINTS)}, InvalidConfigError),
    ({"remote.storage.enable": "true", RESTORE_TOPIC_ID: "AAAAAAAAAAAAAAAAAAASNA"}, InvalidRequestError),
    ({"remote.storage.enable": "true", RESTORE_TOPIC_ID: "nonsense", RESTORE_POINTS: "{}"}, InvalidRequestError),
    ({"remote.storage.enable": "true", **restore_configs(TOPIC_ID, {7: POINTS[0]})}, InvalidPartitionsError),
])
def test_the_controller_refuses_a_restore_it_cannot_honour(make_controller, configs, error):
    with pytest.raises(error):
        make_controller().create_topic("orders", 3, configs=configs)


def test_a_restore_cannot_take_the_id_of_another_topic(make_controller):
    c = make_controller()
    other = c.create_topic("other", 1)
    with pytest.raises(InvalidRequestError, match="another topic"):
        c.create_topic("orders", 1, configs={"remote.storage.enable": "true",
                                             **restore_configs(other.topic_id, {0: POINTS[0]})})


def test_a_restore_point_moves_only_a_log_that_never_held_a_record(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(remote_storage_enable=True))
    assert lg.start_at_restore_point(0, 500, ((0, 0), (4, 300)))
    assert (lg.log_start_offset, lg.local_log_start_offset, lg.log_end_offset) == (0, 500, 500)
    assert lg.leader_epoch_cache.entries == [(0, 0), (4, 300)]
    assert not lg.start_at_restore_point(0, 900, ((5, 0),))  # a second push, or a restart: nothing moves
    assert lg.log_end_offset == 500

    used = Log.open(str(tmp_path / "t-1"), "t", 1, LogConfig(remote_storage_enable=True))
    used.append_as_leader(build_batch([(b"k", b"v", [], 1)]))
    assert not used.start_at_restore_point(0, 500, ((0, 0),)) and used.log_end_offset == 1
