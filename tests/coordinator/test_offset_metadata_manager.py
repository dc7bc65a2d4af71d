"""The committed-offsets manager of one partition on its own (beside the membership manager it asks)."""

from __future__ import annotations

from tierlog.coordinator import (
    GroupMetadataManager,
    GroupState,
    OffsetMetadataManager,
    ScopedTimer,
)
from tierlog.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from tierlog.errors import (
    NO_ERROR,
    GroupIdNotFoundError,
    IllegalGenerationError,
    KafkaStorageError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
)

from .support import ManagerParts


class Setup(ManagerParts):
    def __init__(self, **config) -> None:
        super().__init__(**config)
        self.groups = GroupMetadataManager(self.config, ScopedTimer(self.timer, 0), self.writer, self.clock)
        self.offsets = OffsetMetadataManager(self.config, self.groups, self.writer, self.clock)

    def commit(self, group, offsets, *, generation=-1, member_id="", retention=-1, metadata=""):
        return self.offsets.commit_offset(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
            partitions=[(t, p, o, -1, metadata) for (t, p), o in offsets.items()], api_version=8,
            retention_time_ms=retention)

    def load_member_group(self, group="g", member="m1", generation=3) -> None:
        self.groups.replay(GroupMetadataKey(group), GroupMetadataValue(
            "consumer", generation, "range", member, 1_600_000_000_000,
            (MemberMetadata(member, "c", "/127.0.0.1", 10_000, b"meta", b"", 30_000),)))
        self.groups.on_loaded()


def test_a_commit_is_written_then_applied_and_creates_a_simple_group():
    s = Setup()
    assert s.commit("simple", {("t", 0): 10, ("t", 1): 20}) == {("t", 0): NO_ERROR, ("t", 1): NO_ERROR}
    assert s.writer.records == [
        (OffsetCommitKey("simple", "t", 0), OffsetCommitValue(10, "", s.clock.now, -1, -1)),
        (OffsetCommitKey("simple", "t", 1), OffsetCommitValue(20, "", s.clock.now, -1, -1))]
    assert s.offsets.committed("simple", "t", 1).offset == 20
    group = s.groups.group("simple")
    assert group.state is GroupState.EMPTY and group.protocol_type is None


def test_a_failed_write_applies_nothing():
    s = Setup()
    s.writer.fail_with = KafkaStorageError("disk gone")
    assert s.commit("g", {("t", 0): 1}) == {("t", 0): NotCoordinatorError.code}
    assert s.offsets.committed("g", "t", 0) is None
    assert s.groups.group("g") is None  # the simple group it created is gone again
    assert s.offsets.offsets == {}


def test_commit_validations():
    s = Setup(offset_metadata_max_bytes=4)
    assert s.commit("nope", {("t", 0): 1}, generation=2, member_id="m") == {("t", 0): IllegalGenerationError.code}
    assert s.commit("g", {("t", 0): 1}, metadata="12345") == {("t", 0): OffsetMetadataTooLargeError.code}
    assert s.writer.records == []


def test_replay_applies_values_and_tombstones():
    s = Setup()
    s.offsets.replay(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5, "m", 111, 2, -1))
    assert s.groups.group("g") is not None  # offsets without group metadata: a simple group
    om = s.offsets.committed("g", "t", 0)
    assert (om.offset, om.metadata, om.commit_timestamp, om.leader_epoch) == (5, "m", 111, 2)
    s.offsets.replay(OffsetCommitKey("g", "t", 0), None)
    assert s.offsets.committed("g", "t", 0) is None and "g" not in s.offsets.offsets


def test_a_members_commit_keeps_its_session_alive():
    s = Setup()
    s.load_member_group()
    for _ in range(3):
        s.advance(8_000)  # the session is 10 s
        assert s.commit("g", {("t", 0): 1}, generation=3, member_id="m1") == {("t", 0): NO_ERROR}
    assert s.groups.group("g").has_member("m1")


def test_fetch_offsets():
    s = Setup()
    s.commit("g", {("t", 0): 7, ("u", 1): 9})
    assert [(t, [(p["partition_index"], p["committed_offset"]) for p in ps])
            for t, ps in s.offsets.fetch_offsets("g", None)] == [("t", [(0, 7)]), ("u", [(1, 9)])]
    assert s.offsets.fetch_offsets("unknown", [("t", [0])])[0][1][0]["committed_offset"] == -1


def test_delete_offsets():
    s = Setup()
    assert s.offsets.delete_offsets("missing", [("t", 0)]) == (GroupIdNotFoundError.code, {})
    s.commit("g", {("t", 0): 1, ("t", 1): 2})
    s.writer.records.clear()
    assert s.offsets.delete_offsets("g", [("t", 0), ("t", 9)]) == (NO_ERROR, {("t", 0): NO_ERROR, ("t", 9): NO_ERROR})
    assert s.writer.records == [(OffsetCommitKey("g", "t", 0), None)]
    assert s.offsets.committed("g", "t", 0) is None and s.offsets.committed("g", "t", 1).offset == 2


def test_expired_offsets_become_tombstones():
    s = Setup(offsets_retention_ms=60_000)
    s.commit("simple", {("t", 0): 1})
    s.commit("simple", {("t", 1): 2}, retention=5_000)  # OffsetCommit v2-v4 retention: expires on its own
    s.advance(5_000)
    records: list = []
    assert not s.offsets.cleanup_expired_offsets("simple", records)  # t-0 is kept
    assert records == [(OffsetCommitKey("simple", "t", 1), None)]
    s.advance(55_000)
    records = []
    assert s.offsets.cleanup_expired_offsets("simple", records)
    assert OffsetCommitKey("simple", "t", 0) in [k for k, _ in records]
    # Nothing is applied before the shard writes the tombstones.
    assert s.offsets.committed("simple", "t", 0) is not None


def test_offsets_of_a_stable_group_with_an_unknown_subscription_do_not_expire():
    s = Setup(offsets_retention_ms=1_000)
    s.load_member_group()
    s.commit("g", {("t", 0): 1}, generation=3, member_id="m1")
    s.clock.now += 5_000
    records: list = []
    assert not s.offsets.cleanup_expired_offsets("g", records)
    assert records == []


def test_group_deletion_and_deleted_topics_produce_tombstones():
    s = Setup()
    s.commit("a", {("t", 0): 1, ("u", 0): 2})
    s.commit("b", {("u", 1): 3})
    records: list = []
    assert s.offsets.delete_all_offsets("a", records) == 2
    assert set(records) == {(OffsetCommitKey("a", "t", 0), None), (OffsetCommitKey("a", "u", 0), None)}
    assert s.offsets.on_partitions_deleted({"u"}) == {
        "a": [(OffsetCommitKey("a", "u", 0), None)], "b": [(OffsetCommitKey("b", "u", 1), None)]}
