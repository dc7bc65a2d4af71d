"""The membership manager of one partition on its own: its writer, its timers, load and unload."""

from __future__ import annotations

import pytest

from tierlog.coordinator import GroupMetadataManager, GroupState, ScopedTimer
from tierlog.coordinator.group_metadata_manager import map_append_error
from tierlog.coordinator.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from tierlog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    KafkaStorageError,
    MemberIdRequiredError,
    MessageTooLargeError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RebalanceInProgressError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)

from .support import Answer, ManagerParts


class Setup(ManagerParts):
    def __init__(self, **config) -> None:
        super().__init__(**config)
        self.manager = GroupMetadataManager(self.config, ScopedTimer(self.timer, 7), self.writer, self.clock)

    def join(self, group="g", member_id="", *, version=5, session=10_000) -> Answer:
        answer = Answer()
        self.manager.classic_group_join(
            group_id=group, member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[("range", b"meta")], session_timeout_ms=session, rebalance_timeout_ms=30_000,
            client_id="client", client_host="/127.0.0.1", api_version=version, respond=answer)
        return answer

    def sync(self, group, member_id, generation, assignments=()) -> Answer:
        answer = Answer()
        self.manager.classic_group_sync(group_id=group, generation_id=generation, member_id=member_id,
                                        group_instance_id=None, protocol_type=None, protocol_name=None,
                                        assignments=list(assignments), respond=answer)
        return answer


def stored_group(generation=3, members=("m1", "m2"), session=10_000) -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="consumer", generation=generation, protocol="range" if members else None,
        leader=members[0] if members else None,
        current_state_timestamp=1_600_000_000_000,
        members=tuple(MemberMetadata(m, "client", "/127.0.0.1", session, b"meta", m.encode(), 30_000)
                      for m in members))


def test_join_and_sync_write_group_metadata_through_the_partition_writer():
    s = Setup()
    first = s.join()
    assert first["error_code"] == MemberIdRequiredError.code
    joined = s.join("g", first["member_id"])
    s.advance()
    assert joined["error_code"] == NO_ERROR and joined["generation_id"] == 1
    member = joined["member_id"]
    synced = s.sync("g", member, 1, [(member, b"A")])
    assert synced["error_code"] == NO_ERROR and synced["assignment"] == b"A"
    assert s.manager.group("g").state is GroupState.STABLE
    # The writer got decoded records: the new group's empty metadata, then the assignment.
    keys = [k for k, _ in s.writer.records]
    assert keys == [GroupMetadataKey("g"), GroupMetadataKey("g")]
    last = s.writer.records[-1][1]
    assert last.generation == 1 and [(m.member_id, m.assignment) for m in last.members] == [(member, b"A")]


def test_replay_builds_groups_and_on_loaded_starts_their_sessions():
    s = Setup()
    s.manager.replay(GroupMetadataKey("g"), stored_group())
    group = s.manager.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == 3 and set(group.members) == {"m1", "m2"}
    assert group.member("m2").assignment == b"m2"
    assert len(s.timer) == 0  # replaying starts nothing
    s.manager.on_loaded()
    assert len(s.timer) == 2  # one session per loaded member
    for _ in range(2):  # only m1 heartbeats
        s.advance(4_000)
        assert s.manager.classic_group_heartbeat(group_id="g", generation_id=3, member_id="m1") == NO_ERROR
    assert group.has_member("m2")
    s.advance(2_001)  # m2's session (10 s from the load) is over
    assert not group.has_member("m2") and group.state is GroupState.PREPARING_REBALANCE
    assert s.manager.classic_group_heartbeat(group_id="g", generation_id=3, member_id="m1") == \
        RebalanceInProgressError.code


def test_tombstone_replay_removes_the_group_and_its_timers():
    s = Setup()
    s.manager.replay(GroupMetadataKey("g"), stored_group())
    s.manager.on_loaded()
    group = s.manager.group("g")
    s.manager.replay(GroupMetadataKey("g"), None)
    assert s.manager.group("g") is None and group.state is GroupState.DEAD
    assert len(s.timer) == 0


def test_on_unloaded_answers_parked_joins_and_syncs_with_not_coordinator():
    s = Setup(initial_rebalance_delay_ms=1_000)
    # "b": two members; the follower's SyncGroup is parked until the leader's assignment.
    one, two = s.join("b"), s.join("b")
    joins = [s.join("b", one["member_id"]), s.join("b", two["member_id"])]
    s.advance(1_000)  # the initial delay, extended once by the second member
    s.advance(1_000)
    assert all(j.done for j in joins)
    leader = joins[0]["leader"]
    follower = next(j["member_id"] for j in joins if j["member_id"] != leader)
    parked_sync = s.sync("b", follower, joins[0]["generation_id"])
    # "a": a parked JoinGroup (its initial rebalance delay has not passed).
    first = s.join("a")
    parked_join = s.join("a", first["member_id"])
    assert not parked_sync.done and not parked_join.done
    groups = dict(s.manager.groups)

    s.manager.on_unloaded()

    assert parked_sync["error_code"] == NotCoordinatorError.code
    assert parked_join["error_code"] == NotCoordinatorError.code
    assert all(g.state is GroupState.DEAD for g in groups.values())
    assert s.manager.groups == {}


def test_a_failed_write_creates_no_group():
    s = Setup()
    s.writer.fail_with = KafkaStorageError("disk gone")
    assert s.join("g")["error_code"] == NotCoordinatorError.code
    assert s.manager.group("g") is None
    s.writer.fail_with = NotEnoughReplicasError("too few")
    assert s.join("g")["error_code"] == CoordinatorNotAvailableError.code
    assert s.manager.group("g") is None


@pytest.mark.parametrize(("error", "answer"), [
    (UnknownTopicOrPartitionError, CoordinatorNotAvailableError),
    (NotEnoughReplicasError, CoordinatorNotAvailableError),
    (NotLeaderOrFollowerError, NotCoordinatorError),
    (KafkaStorageError, NotCoordinatorError),
    (MessageTooLargeError, UnknownServerError),
    (RebalanceInProgressError, RebalanceInProgressError),
])
def test_append_errors_map_as_kafkas(error, answer):
    assert map_append_error(error("x")) is answer


def test_delete_group_checks_and_tombstones():
    s = Setup()
    with pytest.raises(GroupIdNotFoundError):
        s.manager.validate_delete_group("missing")
    s.manager.replay(GroupMetadataKey("busy"), stored_group())
    with pytest.raises(NonEmptyGroupError):
        s.manager.validate_delete_group("busy")
    s.manager.replay(GroupMetadataKey("idle"), stored_group(members=()))
    s.manager.validate_delete_group("idle")
    records: list = []
    assert not s.manager.maybe_delete_group("busy", records)
    assert s.manager.maybe_delete_group("idle", records)
    assert records == [(GroupMetadataKey("idle"), None)]


def test_list_and_describe_this_partitions_groups():
    s = Setup()
    s.manager.replay(GroupMetadataKey("busy"), stored_group())
    s.manager.replay(GroupMetadataKey("idle"), stored_group(members=()))
    assert [g["group_id"] for g in s.manager.list_groups(set(), set())] == ["busy", "idle"]
    assert [g["group_id"] for g in s.manager.list_groups({"empty"}, set())] == ["idle"]
    assert s.manager.list_groups(set(), {"consumer"}) == []
    described = s.manager.describe_group("busy")
    assert described["group_state"] == "Stable" and len(described["members"]) == 2
    assert s.manager.describe_group("missing")["group_state"] == "Dead"
