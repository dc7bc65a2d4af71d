"""KIP-848's online migration in the group coordinator, driven with a manual clock: a classic group with
members upgraded by a consumer-protocol member, its classic members served through JoinGroup/SyncGroup/Heartbeat
inside the consumer group, the ClassicMemberMetadata records replayed after a reload, the downgrade when the last
consumer-protocol member leaves, and ``group.consumer.migration.policy``."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode as E

from tierlog.client.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from tierlog.coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from tierlog.coordinator.consumer_group_manager import TopicInfo
from tierlog.coordinator.consumer_group_records import (
    ClassicMemberMetadata,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)
from tierlog.coordinator.records import decode_key, decode_value, encode_key, encode_value
from tierlog.errors import GroupIdNotFoundError

from .support import Answer, Clock

T1 = uuid.UUID("00000000-0000-0000-0000-000000000001")
TOPICS = {"t1": TopicInfo("t1", T1, 4)}
SUBSCRIPTION = encode_subscription(["t1"])


class Env:
    def __init__(self, store: MemoryStore | None = None, **config) -> None:
        self.clock = Clock()
        self.store = store or MemoryStore(num_partitions=1)
        self.config = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, **config)
        self.coord = GroupCoordinator(self.config, self.store, wall_clock=self.clock, timer_clock=self.clock)
        self.coord.topics = lambda: TOPICS
        self.coord.load_all()

    def advance(self, ms: int = 0) -> None:
        self.clock.now += ms
        self.coord.timer.poll()

    def join(self, member_id: str, owned=(), instance: str | None = None) -> Answer:
        answer = Answer()
        metadata = encode_subscription(["t1"], owned_partitions={"t1": list(owned)}) if owned else SUBSCRIPTION
        self.coord.join_group(group_id="g", member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                              protocols=[("range", metadata)], session_timeout_ms=10_000,
                              rebalance_timeout_ms=30_000, client_id="classic", client_host="/127.0.0.1",
                              api_version=5, respond=answer)
        return answer

    def sync(self, member_id: str, generation: int, assignments=()) -> Answer:
        answer = Answer()
        self.coord.sync_group(group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None,
                              protocol_type="consumer", protocol_name="range", assignments=list(assignments),
                              respond=answer)
        return answer

    def heartbeat(self, member_id: str, generation: int) -> int:
        return self.coord.heartbeat(group_id="g", generation_id=generation, member_id=member_id)

    def consumer_hb(self, member_id: str, epoch: int, owned=()):
        return self.coord.consumer_group_heartbeat(
            group_id="g", member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000 if epoch == 0 else -1, subscribed_topic_names=("t1",) if epoch == 0 else None,
            subscribed_topic_regex=None, server_assignor=None, owned=[(T1, list(owned))] if owned else [],
            client_id="new", client_host="/127.0.0.1", api_version=1)

    def classic_group_of_two(self) -> tuple[str, str, int]:
        """Members a (leader: partitions 0, 1) and b (2, 3), stable."""
        a = self.join("")
        a = self.join(a["member_id"])
        self.advance()
        a_id, generation = a["member_id"], a["generation_id"]
        b = self.join("")
        b = self.join(b["member_id"])
        assert self.heartbeat(a_id, generation) == E.rebalance_in_progress
        a = self.join(a_id)
        self.advance()
        b_id, generation = b["member_id"], b["generation_id"]
        assignment = {a_id: encode_assignment({"t1": [0, 1]}), b_id: encode_assignment({"t1": [2, 3]})}
        self.sync(b_id, generation)
        self.sync(a_id, generation, assignment.items())
        return a_id, b_id, generation


def assigned(answer: Answer) -> list[int]:
    return decode_assignment(answer["assignment"]).partitions.get("t1", [])


def test_classic_member_metadata_record_round_trips():
    key = ConsumerGroupMemberMetadataKey("g", "m")
    value = ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t1",), None, 300, None,
                                             ClassicMemberMetadata(10_000, (("range", SUBSCRIPTION),)))
    assert decode_value(decode_key(encode_key(key)), encode_value(value)) == value


def test_upgrade_serve_classic_members_and_downgrade():
    env = Env()
    a, b, generation = env.classic_group_of_two()
    # A consumer-protocol member joins: the group is converted at the classic generation, then bumped.
    c = env.consumer_hb("c-member", 0)
    assert (c["error_code"], c["member_epoch"]) == (E.none, generation + 1)
    assert "g" not in env.coord.groups
    [d] = env.coord.consumer_group_describe(["g"])
    assert d["group_epoch"] == generation + 1
    assert sorted((m["member_id"], m["member_type"]) for m in d["members"]) == sorted([(a, 0), (b, 0),
                                                                                     ("c-member", 1)])
    # The classic members rejoin at the new epoch (eager: they gave up everything) and sync their share.
    assert env.heartbeat(a, generation) == E.rebalance_in_progress
    assert env.heartbeat("x", generation) == E.unknown_member_id
    assert env.heartbeat(a, generation - 1) == E.illegal_generation
    joined = {m: env.join(m) for m in (a, b)}
    assert {j["generation_id"] for j in joined.values()} == {generation + 1}
    assert all(j["leader"] == "" and j["members"] == [] and j["protocol_name"] == "range" for j in joined.values())
    synced = {m: assigned(env.sync(m, generation + 1)) for m in (a, b)}
    c = env.consumer_hb("c-member", generation + 1)
    held = sorted(sum(synced.values(), []) + list(dict(c["assignment"] or ()).get(T1, ())))
    assert held == [0, 1, 2, 3] and all(synced.values())
    assert env.heartbeat(a, generation + 1) == E.none
    # A classic member commits at its generation (the member epoch), as in a classic group.
    for gen, code in ((generation, E.illegal_generation), (generation + 1, E.none)):
        result = env.coord.commit_offsets(group_id="g", generation_id=gen, member_id=a, group_instance_id=None,
                                          api_version=8, retention_time_ms=-1, partitions=[("t1", 0, 5, -1, "")])
        assert result == {("t1", 0): code}
    # A reload replays the classic members with their session timeout and protocols.
    again = GroupCoordinator(env.config, env.store, wall_clock=env.clock, timer_clock=env.clock)
    again.topics = lambda: TOPICS
    again.load_all()
    [d2] = again.consumer_group_describe(["g"])
    assert sorted(m["member_type"] for m in d2["members"]) == [0, 0, 1]
    # The consumer-protocol member leaves: a classic group again, rebalancing at once.
    left = env.consumer_hb("c-member", -1)
    assert left["error_code"] == E.none
    group = env.coord.groups["g"]
    assert str(group.state) == "PreparingRebalance" and sorted(group.members) == sorted([a, b])
    assert env.heartbeat(a, group.generation_id) == E.rebalance_in_progress
    err, listed = env.coord.list_groups(types_filter=["classic"])
    assert [g["group_id"] for g in listed] == ["g"]
    # The downgrade is in the partition: a reload finds the classic group and no consumer group.
    reloaded = GroupCoordinator(env.config, env.store, wall_clock=env.clock, timer_clock=env.clock)
    reloaded.topics = lambda: TOPICS
    reloaded.load_all()
    assert sorted(reloaded.groups["g"].members) == sorted([a, b])
    [d3] = reloaded.consumer_group_describe(["g"])
    assert d3["error_code"] == GroupIdNotFoundError.code


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_upgrade_needs_the_policy(policy):
    env = Env(consumer_migration_policy=policy)
    env.classic_group_of_two()
    c = env.consumer_hb("c-member", 0)
    assert c["error_code"] == GroupIdNotFoundError.code
    assert "g" in env.coord.groups


def test_no_downgrade_under_upgrade_policy():
    env = Env(consumer_migration_policy="upgrade")
    env.classic_group_of_two()
    c = env.consumer_hb("c-member", 0)
    assert env.consumer_hb("c-member", -1)["error_code"] == E.none
    [d] = env.coord.consumer_group_describe(["g"])
    assert d["error_code"] == E.none and len(d["members"]) == 2 and c["error_code"] == E.none


def test_static_classic_member_rejoins_a_consumer_group_under_a_new_member_id():
    env = Env()
    env.classic_group_of_two()
    env.consumer_hb("c-member", 0)
    first = env.join("", instance="i-1")
    assert first["error_code"] == E.none
    again = env.join("", instance="i-1")  # restarted: a new member id takes the instance id over
    assert again["error_code"] == E.none and again["member_id"] != first["member_id"]
    assert env.heartbeat(first["member_id"], first["generation_id"]) == E.unknown_member_id
    stale = Answer()
    env.coord.join_group(group_id="g", member_id=first["member_id"], group_instance_id="i-1",
                         protocol_type="consumer", protocols=[("range", SUBSCRIPTION)], session_timeout_ms=10_000,
                         rebalance_timeout_ms=30_000, client_id="classic", client_host="/127.0.0.1", api_version=5,
                         respond=stale)
    assert stale["error_code"] == E.fenced_instance_id
    [d] = env.coord.consumer_group_describe(["g"])
    assert sorted(m["instance_id"] or "" for m in d["members"]) == ["", "", "", "i-1"]
