"""Loading and unloading ``__consumer_offsets`` partitions: a partition's groups and offsets move with it.

Most tests run the coordinator over the in-memory store; the last ones run it over
:class:`OffsetsTopicStore` on real logs in a temporary folder, through an :class:`OffsetsTopicLog`
made of :class:`tierlog.storage.Log` objects.
"""

from __future__ import annotations

import asyncio

import pytest

from tierlog.coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    MemoryStore,
    OffsetsTopicStore,
    partition_for,
)
from tierlog.coordinator import storage as storage_module
from tierlog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    KafkaStorageError,
    NonEmptyGroupError,
    NotCoordinatorError,
)

from .support import Answer, Clock, LocalTopicLog

PARTITIONS = 5
NOT_COORDINATOR = NotCoordinatorError.code


def group_on(partition: int, prefix: str) -> str:
    """A group id of ``partition`` (of PARTITIONS)."""
    return next(f"{prefix}{i}" for i in range(1000) if partition_for(f"{prefix}{i}", PARTITIONS) == partition)


G = group_on(1, "g")        # a consumer group with two members, on partition 1
SIMPLE = group_on(1, "s")   # a simple group (offsets only), on partition 1
OTHER = group_on(3, "o")    # a consumer group on partition 3


class Env:
    def __init__(self, store=None, **config) -> None:
        self.clock = Clock()
        self.store = store if store is not None else MemoryStore(num_partitions=PARTITIONS)
        settings = dict(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60_000)
        settings.update(config)
        self.coord = GroupCoordinator(CoordinatorConfig(**settings), self.store, wall_clock=self.clock,
                                      timer_clock=self.clock)
        self.coord.load_all()

    def advance(self, ms: int = 0) -> None:
        self.clock.now += ms
        self.coord.timer.poll()

    def join(self, group, member_id="") -> Answer:
        answer = Answer()
        self.coord.join_group(group_id=group, member_id=member_id, group_instance_id=None, protocol_type="consumer",
                              protocols=[("range", b"meta")], session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                              client_id="client", client_host="/127.0.0.1", api_version=5, respond=answer)
        return answer

    def sync(self, group, member_id, generation, assignments=()) -> Answer:
        answer = Answer()
        self.coord.sync_group(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                              protocol_type=None, protocol_name=None, assignments=list(assignments), respond=answer)
        return answer

    def stable_group(self, group, n=2) -> tuple[str, list[str], int]:
        firsts = [self.join(group) for _ in range(n)]
        joins = [self.join(group, f["member_id"]) for f in firsts]
        self.advance()
        ids = [j["member_id"] for j in joins]
        generation, leader = joins[0]["generation_id"], joins[0]["leader"]
        for mid in ids:
            if mid != leader:
                self.sync(group, mid, generation)
        assert self.sync(group, leader, generation, [(m, m.encode()) for m in ids])["error_code"] == NO_ERROR
        return leader, ids, generation

    def commit(self, group, offsets, *, generation=-1, member_id=""):
        return self.coord.commit_offsets(group_id=group, generation_id=generation, member_id=member_id,
                                         group_instance_id=None, api_version=8,
                                         partitions=[(t, p, o, -1, "") for (t, p), o in offsets.items()])

    def state(self, partition: int):
        """What partition ``partition`` holds: its groups (state, generation, leader, protocol, members
        and their assignments) and its committed offsets."""
        shard = self.coord.shards[partition]
        groups = {gid: (g.state, g.generation_id, g.leader_id, g.protocol_type, g.protocol_name,
                        {m.member_id: (m.assignment, m.session_timeout_ms) for m in g.members.values()})
                  for gid, g in shard.group_metadata_manager.groups.items()}
        offsets = {gid: {tp: (om.offset, om.commit_timestamp) for tp, om in o.items()}
                   for gid, o in shard.offset_metadata_manager.offsets.items()}
        return groups, offsets


@pytest.fixture
def env() -> Env:
    return Env()


def populate(env: Env):
    leader, ids, generation = env.stable_group(G)
    env.commit(G, {("t", 0): 11}, generation=generation, member_id=leader)
    env.commit(SIMPLE, {("t", 1): 22})
    env.stable_group(OTHER, 1)
    return leader, ids, generation


def test_unload_drops_a_partitions_groups_and_offsets_and_a_reload_replays_them(env):
    leader, ids, generation = populate(env)
    before = env.state(1)
    assert set(before[0]) == {G, SIMPLE} and set(before[1]) == {G, SIMPLE}

    env.coord.unload(1)
    assert 1 not in env.coord.loaded_partitions()
    assert G not in env.coord.groups and SIMPLE not in env.coord.groups
    assert env.coord.committed(G, "t", 0) is None and env.coord.committed(SIMPLE, "t", 1) is None
    assert [g["group_id"] for g in env.coord.list_groups()[1]] == [OTHER]
    assert env.coord.groups[OTHER].state is GroupState.STABLE  # partition 3 is untouched

    env.coord.load(1)
    assert env.state(1) == before
    assert env.coord.committed(G, "t", 0).offset == 11 and env.coord.committed(SIMPLE, "t", 1).offset == 22
    # The reloaded members go on in their generation.
    assert env.coord.heartbeat(group_id=G, generation_id=generation, member_id=leader) == NO_ERROR
    follower = next(m for m in ids if m != leader)
    assert env.sync(G, follower, generation)["assignment"] == follower.encode()


def test_requests_for_an_unloaded_partition_get_not_coordinator(env):
    leader, ids, generation = populate(env)
    env.coord.unload(1)
    c = env.coord
    assert env.join(G)["error_code"] == NOT_COORDINATOR
    assert env.sync(G, leader, generation)["error_code"] == NOT_COORDINATOR
    assert c.heartbeat(group_id=G, generation_id=generation, member_id=leader) == NOT_COORDINATOR
    assert c.leave_group(group_id=G, members=[(leader, None, None)]) == (NOT_COORDINATOR, [])
    assert env.commit(SIMPLE, {("t", 0): 1}) == {("t", 0): NOT_COORDINATOR}
    assert c.fetch_offsets(G, None) == (NOT_COORDINATOR, [])
    assert c.delete_offsets(SIMPLE, [("t", 1)]) == (NOT_COORDINATOR, {})
    assert c.describe_groups([G, OTHER])[0] == {"group_id": G, "error_code": NOT_COORDINATOR}
    assert c.describe_groups([G, OTHER])[1]["group_state"] == "Stable"
    assert c.delete_groups([SIMPLE, OTHER]) == {SIMPLE: NOT_COORDINATOR, OTHER: NonEmptyGroupError.code}
    # Nothing was written for the unloaded partition.
    written = len(env.store.records[1])
    env.coord.on_topics_deleted(["t"])
    assert len(env.store.records[1]) == written


def test_unload_answers_parked_requests_and_stops_only_that_partitions_timers(env):
    leader, ids, generation = env.stable_group(G)
    other_leader, _, other_generation = env.stable_group(OTHER)
    # A rebalance of G is in progress: the leader's JoinGroup is parked until the follower rejoins.
    parked = env.join(G, leader)
    assert not parked.done
    written = len(env.store.records[1])

    env.coord.unload(1)

    assert parked["error_code"] == NOT_COORDINATOR
    # G's timers went with the partition: its members' sessions end without a write.
    env.advance(60_000)
    assert len(env.store.records[1]) == written
    # OTHER's timers still run: its members, silent for a minute, were expired and the group emptied.
    assert env.coord.groups[OTHER].state is GroupState.EMPTY
    assert env.coord.heartbeat(group_id=OTHER, generation_id=other_generation, member_id=other_leader) != NO_ERROR


def test_load_keeps_a_loaded_partition_and_needs_an_active_coordinator(env):
    populate(env)
    shard = env.coord.shards[1]
    assert env.coord.load(1) is shard
    asyncio.run(env.coord.shutdown())
    assert env.coord.loaded_partitions() == []
    with pytest.raises(CoordinatorNotAvailableError):
        env.coord.load(1)
    assert env.join(G)["error_code"] == CoordinatorNotAvailableError.code


def test_each_shard_replays_only_its_partition(env):
    populate(env)
    for p, shard in env.coord.shards.items():
        assert all(partition_for(g, PARTITIONS) == p for g in shard.group_metadata_manager.groups)
        assert all(partition_for(g, PARTITIONS) == p for g in shard.offset_metadata_manager.offsets)
    assert set(env.coord.shards[1].group_metadata_manager.groups) == {G, SIMPLE}
    assert set(env.coord.shards[3].group_metadata_manager.groups) == {OTHER}


class FailingPartitionStore(MemoryStore):
    """Reading partition ``bad`` fails as a log that cannot be read."""

    def __init__(self, records, bad: int) -> None:
        super().__init__(num_partitions=PARTITIONS)
        self.records = records
        self.bad = bad

    def read_partition(self, partition):
        if partition == self.bad:
            raise KafkaStorageError(f"cannot read {OFFSETS_TOPIC}-{partition}")
        return super().read_partition(partition)


def test_a_partition_that_fails_to_load_leaves_the_others_serving(env):
    populate(env)
    restarted = Env(FailingPartitionStore(env.store.records, bad=1))
    assert restarted.coord.active and restarted.coord.loaded_partitions() == [0, 2, 3, 4]
    assert restarted.join(G)["error_code"] == NOT_COORDINATOR
    assert restarted.coord.groups[OTHER].state is GroupState.STABLE


# ------------------------------------------------------------------ over real logs



def test_offsets_topic_store_creates_the_topic_as_kafka_does(tmp_path):
    topic = LocalTopicLog(str(tmp_path / "logs"), brokers=1)
    store = OffsetsTopicStore(topic, num_partitions=PARTITIONS, replication_factor=3, segment_bytes=1 << 20)
    assert not store.exists() and store.num_partitions() == PARTITIONS
    assert list(store.read_partition(0)) == []
    store.ensure_created()
    store.ensure_created()  # already there: nothing happens
    assert topic.created == (OFFSETS_TOPIC, PARTITIONS, 1, {  # the replication factor is capped by the brokers
        "cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(1 << 20)})
    # An existing topic's partition count wins over the setting.
    assert OffsetsTopicStore(topic, num_partitions=50, replication_factor=1).num_partitions() == PARTITIONS
    topic.close()


def test_partitions_load_from_real_logs_and_survive_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(storage_module, "_LOAD_READ_BYTES", 256)  # several reads per partition
    root = str(tmp_path / "logs")
    topic = LocalTopicLog(root)
    env = Env(OffsetsTopicStore(topic, num_partitions=PARTITIONS, replication_factor=1))
    leader, ids, generation = populate(env)
    for i in range(20):
        env.commit(SIMPLE, {("t", i % 4): 100 + i})
    before = env.state(1)
    assert topic.logs[1].log_end_offset > 20

    env.coord.unload(1)
    assert SIMPLE not in env.coord.groups
    env.coord.load(1)
    assert env.state(1) == before

    # A new coordinator on the reopened logs holds the same state.
    topic.close()
    restarted = Env(OffsetsTopicStore(LocalTopicLog(root), num_partitions=PARTITIONS, replication_factor=1))
    restarted.clock.now = env.clock.now
    assert restarted.state(1) == before
    assert restarted.coord.committed(SIMPLE, "t", 3).offset == 119
    assert restarted.coord.heartbeat(group_id=G, generation_id=generation, member_id=leader) == NO_ERROR
    restarted.store.log.close()
