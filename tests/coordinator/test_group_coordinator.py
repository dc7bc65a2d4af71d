"""The classic group state machine and committed offsets, driven with a manual clock."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from tierlog.coordinator import CoordinatorConfig, GroupCoordinator, GroupState, MemoryStore
from tierlog.coordinator.group import VALID_PREVIOUS_STATES, ClassicGroup, IllegalTransitionError, Member
from tierlog.coordinator.records import GroupMetadataKey, OffsetCommitKey, decode_key, decode_value
from tierlog.errors import error_for_code

from .support import Answer, Clock


class Env:
    def __init__(self, store: MemoryStore | None = None, **config) -> None:
        self.clock = Clock()
        self.store = store or MemoryStore(num_partitions=5)
        settings = dict(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60_000)
        settings.update(config)
        self.config = CoordinatorConfig(**settings)
        self.coord = GroupCoordinator(self.config, self.store, wall_clock=self.clock, timer_clock=self.clock)
        self.coord.load_all()

    def advance(self, ms: int = 0) -> None:
        self.clock.now += ms
        self.coord.timer.poll()

    def restart(self) -> Env:
        env = Env.__new__(Env)
        env.clock = self.clock
        env.store = self.store
        env.config = self.config
        env.coord = GroupCoordinator(self.config, self.store, wall_clock=self.clock, timer_clock=self.clock)
        env.coord.load_all()
        return env

    def join(self, group="g", member_id="", *, version=5, protocols=(("range", b"meta"),), session=10_000,
             rebalance=30_000, instance=None, client_id="client", protocol_type="consumer") -> Answer:
        answer = Answer()
        self.coord.join_group(group_id=group, member_id=member_id, group_instance_id=instance,
                              protocol_type=protocol_type, protocols=list(protocols), session_timeout_ms=session,
                              rebalance_timeout_ms=rebalance, client_id=client_id, client_host="/127.0.0.1",
                              api_version=version, respond=answer)
        return answer

    def join_new(self, group="g", **kw) -> Answer:
        """KIP-394 two-step join of a new dynamic member."""
        first = self.join(group, **kw)
        assert first["error_code"] == E.member_id_required
        return self.join(group, first["member_id"], **kw)

    def sync(self, group, member_id, generation, assignments=(), *, instance=None, protocol_type=None,
             protocol_name=None) -> Answer:
        answer = Answer()
        self.coord.sync_group(group_id=group, generation_id=generation, member_id=member_id,
                              group_instance_id=instance, protocol_type=protocol_type, protocol_name=protocol_name,
                              assignments=list(assignments), respond=answer)
        return answer

    def heartbeat(self, group, member_id, generation, instance=None):
        return self.coord.heartbeat(group_id=group, generation_id=generation, member_id=member_id,
                                    group_instance_id=instance)

    def commit(self, group, offsets, *, generation=-1, member_id="", instance=None, version=8, retention=-1):
        return self.coord.commit_offsets(group_id=group, generation_id=generation, member_id=member_id,
                                         group_instance_id=instance, api_version=version,
                                         retention_time_ms=retention,
                                         partitions=[(t, p, o, -1, "") for (t, p), o in offsets.items()])

    def group(self, group_id="g") -> ClassicGroup:
        return self.coord.groups[group_id]

    def written(self):
        """Decoded records appended so far, in order."""
        out = []
        for p in sorted(self.store.records):
            for k, v in self.store.records[p]:
                key = decode_key(k)
                out.append((key, decode_value(key, v)))
        return out


@pytest.fixture
def env() -> Env:
    return Env()


def stable_group(env: Env, n: int = 2, group: str = "g", rebalance: int = 30_000):
    """n dynamic members joined and synced; returns (leader id, [member ids], generation)."""
    answers = [env.join(group, rebalance=rebalance) for _ in range(n)]
    ids = [a["member_id"] for a in answers]
    joins = [env.join(group, mid, rebalance=rebalance) for mid in ids]
    env.advance()  # initial rebalance delay (0) fires
    assert all(j.done for j in joins), [j.value for j in joins]
    generation = joins[0]["generation_id"]
    leader = joins[0]["leader"]
    syncs = {mid: env.sync(group, mid, generation, [(m, m.encode()) for m in ids] if mid == leader else ())
             for mid in ids if mid != leader}
    syncs[leader] = env.sync(group, leader, generation, [(m, m.encode()) for m in ids])
    assert all(s["error_code"] == E.none for s in syncs.values())
    assert env.group(group).state is GroupState.STABLE
    return leader, ids, generation


# ------------------------------------------------------------------ state machine table

def test_transition_table_is_kafkas():
    allowed = {(src, dst) for dst, srcs in VALID_PREVIOUS_STATES.items() for src in srcs}
    s = GroupState
    assert (s.EMPTY, s.PREPARING_REBALANCE) in allowed
    assert (s.PREPARING_REBALANCE, s.COMPLETING_REBALANCE) in allowed
    assert (s.COMPLETING_REBALANCE, s.STABLE) in allowed
    assert (s.STABLE, s.PREPARING_REBALANCE) in allowed
    assert (s.PREPARING_REBALANCE, s.EMPTY) in allowed
    assert (s.STABLE, s.COMPLETING_REBALANCE) not in allowed
    assert (s.EMPTY, s.STABLE) not in allowed
    g = ClassicGroup("g")
    with pytest.raises(IllegalTransitionError):
        g.transition_to(GroupState.STABLE, 0)
    g.transition_to(GroupState.DEAD, 0)
    assert g.state is GroupState.DEAD


def test_protocol_selection_by_votes():
    g = ClassicGroup("g")
    prefs = [["roundrobin", "range"], ["range", "roundrobin", "sticky"], ["range", "roundrobin"]]
    for i, names in enumerate(prefs):
        g.add(Member(f"m{i}", None, "c", "h", 1000, 1000, "consumer", [(n, b"") for n in names]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "range"  # two votes to one


# ------------------------------------------------------------------ JoinGroup

def test_join_requires_known_member_id_from_v4(env):
    first = env.join("g", version=4)
    assert first["error_code"] == E.member_id_required
    assert first["member_id"].startswith("client-")
    assert env.group().is_pending_member(first["member_id"])
    second = env.join("g", first["member_id"], version=4)
    assert not second.done  # parked until the initial rebalance delay passes
    env.advance()
    assert second["error_code"] == E.none
    assert second["generation_id"] == 1
    assert second["leader"] == first["member_id"]
    assert second["protocol_name"] == "range"
    assert second["members"] == [{"member_id": first["member_id"], "group_instance_id": None, "metadata": b"meta"}]
    assert env.group().state is GroupState.COMPLETING_REBALANCE


def test_join_v3_gets_member_id_in_one_step(env):
    answer = env.join("g", version=3)
    env.advance()
    assert answer["error_code"] == E.none
    assert answer["member_id"].startswith("client-")


def test_new_group_writes_empty_group_metadata(env):
    env.join("g")
    (key, value), = env.written()
    assert key == GroupMetadataKey("g")
    assert value.generation == 0 and value.members == () and value.protocol is None


def test_join_validations(env):
    assert env.join("", version=5)["error_code"] == E.invalid_group_id
    assert env.join("g", session=5)["error_code"] == E.invalid_session_timeout
    assert env.join("g", session=60_001)["error_code"] == E.invalid_session_timeout
    assert env.join("g", protocol_type="")["error_code"] == E.inconsistent_group_protocol
    assert env.join("g", protocols=[])["error_code"] == E.inconsistent_group_protocol
    # A member id the group never handed out.
    assert env.join("g", "bogus")["error_code"] == E.unknown_member_id
    assert env.join("missing-group", "bogus")["error_code"] == E.unknown_member_id


def test_inconsistent_protocols_rejected(env):
    stable_group(env, 1)
    answer = env.join("g", protocols=[("other", b"")])
    assert answer["error_code"] == E.inconsistent_group_protocol
    answer = env.join("g", protocol_type="connect")
    assert answer["error_code"] == E.inconsistent_group_protocol


def test_initial_rebalance_delay_collects_members():
    env = Env(initial_rebalance_delay_ms=100)
    a = env.join_new("g")
    env.advance(60)
    b = env.join_new("g")  # a new member during the delay extends it
    env.advance(60)
    assert not a.done and not b.done
    env.advance(100)
    assert a.done and b.done
    assert a["generation_id"] == b["generation_id"] == 1
    leader = a["leader"]
    answers = {a["member_id"]: a, b["member_id"]: b}
    assert len(answers[leader]["members"]) == 2
    follower = next(m for m in answers if m != leader)
    assert answers[follower]["members"] == []


def test_two_members_sync_and_assignment(env):
    leader, ids, generation = stable_group(env, 2)
    follower = next(m for m in ids if m != leader)
    # The assignment was stored before anyone got it.
    key, value = env.written()[-1]
    assert key == GroupMetadataKey("g")
    assert value.generation == generation and value.leader == leader and value.protocol == "range"
    assert {m.member_id: m.assignment for m in value.members} == {m: m.encode() for m in ids}
    # A stable group answers a late SyncGroup with the stored assignment.
    again = env.sync("g", follower, generation)
    assert again["assignment"] == follower.encode()
    assert again["protocol_type"] == "consumer" and again["protocol_name"] == "range"


def test_follower_waits_for_leader_sync(env):
    a = env.join_new("g")
    b = env.join_new("g")
    env.advance()
    generation = a["generation_id"]
    leader = a["leader"]
    follower = b["member_id"] if a["member_id"] == leader else a["member_id"]
    f_sync = env.sync("g", follower, generation)
    assert not f_sync.done
    l_sync = env.sync("g", leader, generation, [(follower, b"F"), (leader, b"L")])
    assert f_sync["assignment"] == b"F" and l_sync["assignment"] == b"L"


def test_sync_errors(env):
    leader, ids, generation = stable_group(env, 1)
    assert env.sync("g", leader, generation + 1)["error_code"] == E.illegal_generation
    assert env.sync("g", "nobody", generation)["error_code"] == E.unknown_member_id
    assert env.sync("nope", leader, generation)["error_code"] == E.unknown_member_id
    assert env.sync("g", leader, generation, protocol_type="connect")["error_code"] == E.inconsistent_group_protocol
    assert env.sync("g", leader, generation, protocol_name="sticky")["error_code"] == E.inconsistent_group_protocol
    assert env.sync("", leader, generation)["error_code"] == E.invalid_group_id


def test_rejoin_of_follower_with_same_metadata_in_stable_does_not_rebalance(env):
    leader, ids, generation = stable_group(env, 2)
    follower = next(m for m in ids if m != leader)
    answer = env.join("g", follower)
    assert answer["error_code"] == E.none and answer["generation_id"] == generation
    assert env.group().state is GroupState.STABLE


def test_leader_rejoin_triggers_rebalance(env):
    leader, ids, generation = stable_group(env, 2)
    follower = next(m for m in ids if m != leader)
    lj = env.join("g", leader)
    assert env.group().state is GroupState.PREPARING_REBALANCE
    assert env.heartbeat("g", follower, generation) == E.rebalance_in_progress
    fj = env.join("g", follower)
    assert lj["generation_id"] == fj["generation_id"] == generation + 1


# ------------------------------------------------------------------ heartbeats, expiry, timeouts

def test_heartbeat_errors(env):
    leader, ids, generation = stable_group(env, 1)
    assert env.heartbeat("g", leader, generation) == E.none
    assert env.heartbeat("g", leader, generation - 1) == E.illegal_generation
    assert env.heartbeat("g", "stranger", generation) == E.unknown_member_id
    assert env.heartbeat("unknown-group", leader, generation) == E.unknown_member_id
    assert env.heartbeat("", leader, generation) == E.invalid_group_id


def test_session_expiry_removes_member_and_rebalances(env):
    leader, ids, generation = stable_group(env, 2)
    follower = next(m for m in ids if m != leader)
    for _ in range(2):  # only the leader heartbeats
        env.advance(4_000)
        assert env.heartbeat("g", leader, generation) == E.none
    env.advance(2_001)
    assert not env.group().has_member(follower)
    assert env.group().state is GroupState.PREPARING_REBALANCE
    assert env.heartbeat("g", leader, generation) == E.rebalance_in_progress
    rejoin = env.join("g", leader)
    assert rejoin["generation_id"] == generation + 1
    assert rejoin["members"] == [{"member_id": leader, "group_instance_id": None, "metadata": b"meta"}]


def test_last_member_expiry_empties_group(env):
    leader, _, generation = stable_group(env, 1)
    env.advance(10_001)
    group = env.group()
    assert group.state is GroupState.EMPTY and not group.members
    assert group.generation_id == generation + 1
    key, value = env.written()[-1]
    assert key == GroupMetadataKey("g") and value.members == () and value.generation == generation + 1


def test_rebalance_timeout_drops_members_that_do_not_rejoin(env):
    leader, ids, generation = stable_group(env, 2, rebalance=5_000)
    follower = next(m for m in ids if m != leader)
    lj = env.join("g", leader, rebalance=5_000)
    env.advance(3_000)
    env.heartbeat("g", follower, generation)  # alive, but never rejoins
    env.advance(2_001)
    assert lj.done and lj["generation_id"] == generation + 1
    assert list(env.group().members) == [leader]


def test_pending_member_expires(env):
    first = env.join("g", session=1_000)
    assert env.group().is_pending_member(first["member_id"])
    env.advance(1_001)
    assert not env.group().is_pending_member(first["member_id"])
    assert env.join("g", first["member_id"])["error_code"] == E.unknown_member_id


def test_members_that_never_sync_are_removed(env):
    a = env.join_new("g", rebalance=2_000)
    b = env.join_new("g", rebalance=2_000)
    env.advance()
    leader = a["leader"]
    follower = b["member_id"] if a["member_id"] == leader else a["member_id"]
    env.sync("g", leader, a["generation_id"], [(leader, b"x")])
    env.advance(2_001)  # follower never sent SyncGroup
    assert not env.group().has_member(follower)
    assert env.group().state is GroupState.PREPARING_REBALANCE


def test_new_member_join_during_completing_rebalance_resets_syncs(env):
    a = env.join_new("g")
    env.advance()
    leader = a["member_id"]
    pending_sync = env.sync("g", "nobody", a["generation_id"])
    assert pending_sync["error_code"] == E.unknown_member_id
    b_first = env.join("g")
    b = env.join("g", b_first["member_id"])
    assert env.group().state is GroupState.PREPARING_REBALANCE
    assert not b.done
    la = env.join("g", leader)
    assert la.done and b.done and la["generation_id"] == 2


# ------------------------------------------------------------------ LeaveGroup

def test_leave_group_batch(env):
    leader, ids, generation = stable_group(env, 2)
    error, results = env.coord.leave_group(group_id="g", members=[(ids[0], None, "bye"), ("ghost", None, None),
                                                                   (ids[1], None, None)])
    assert error == E.none
    assert [r["error_code"] for r in results] == [E.none, E.unknown_member_id, E.none]
    assert env.group().state is GroupState.EMPTY


def test_leave_unknown_group(env):
    error, results = env.coord.leave_group(group_id="nope", members=[("m", None, None)])
    assert error == E.none and results[0]["error_code"] == E.unknown_member_id


def test_leave_completes_pending_rebalance(env):
    leader, ids, generation = stable_group(env, 2)
    follower = next(m for m in ids if m != leader)
    lj = env.join("g", leader)
    assert not lj.done
    env.coord.leave_group(group_id="g", members=[(follower, None, None)])
    assert lj.done and lj["generation_id"] == generation + 1


# ------------------------------------------------------------------ static membership

def test_static_member_rejoin_replaces_and_fences(env):
    a = env.join("g", instance="inst-a")  # static members skip MEMBER_ID_REQUIRED
    env.advance()
    old_id = a["member_id"]
    assert old_id.startswith("inst-a-")
    env.sync("g", old_id, a["generation_id"], [(old_id, b"A")], instance="inst-a")
    # The same instance restarts and joins with no member id: no rebalance, same generation.
    again = env.join("g", instance="inst-a")
    assert again["error_code"] == E.none
    new_id = again["member_id"]
    assert new_id != old_id and again["generation_id"] == a["generation_id"]
    assert env.group().state is GroupState.STABLE
    assert env.sync("g", new_id, a["generation_id"], instance="inst-a")["assignment"] == b"A"
    # The old incarnation is fenced.
    assert env.heartbeat("g", old_id, a["generation_id"], instance="inst-a") == E.fenced_instance_id
    error, results = env.coord.leave_group(group_id="g", members=[("", "inst-a", None)])
    assert results[0]["error_code"] == E.none
    assert env.group().state is GroupState.EMPTY


def test_static_member_is_not_dropped_by_rebalance_timeout(env):
    a = env.join("g", instance="s1", rebalance=1_000)
    b = env.join_new("g", rebalance=1_000)
    env.advance()
    gen = a["generation_id"]
    leader = a["leader"]
    env.sync("g", leader, gen, [], instance="s1" if leader == a["member_id"] else None)
    other = b["member_id"] if leader == a["member_id"] else a["member_id"]
    env.sync("g", other, gen, instance="s1" if other == a["member_id"] else None)
    # The dynamic member rejoins, the static one does not within the rebalance timeout: it stays.
    env.join("g", b["member_id"], rebalance=1_000)
    env.heartbeat("g", a["member_id"], gen, instance="s1")
    env.advance(1_001)
    assert env.group().has_member(a["member_id"])


# ------------------------------------------------------------------ group size

def test_group_max_size():
    env = Env(max_group_size=1)
    stable_group(env, 1)
    answer = env.join("g", version=3)
    assert answer["error_code"] == E.group_max_size_reached


# ------------------------------------------------------------------ offsets

def test_simple_consumer_commit_creates_empty_group(env):
    result = env.commit("simple", {("t", 0): 10, ("t", 1): 20})
    assert result == {("t", 0): E.none, ("t", 1): E.none}
    group = env.group("simple")
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    error, topics = env.coord.fetch_offsets("simple", None)
    assert error == E.none
    assert topics == [("t", [
        {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": -1, "metadata": "",
         "error_code": E.none},
        {"partition_index": 1, "committed_offset": 20, "committed_leader_epoch": -1, "metadata": "",
         "error_code": E.none}])]
    key, value = env.written()[-1]
    assert key == OffsetCommitKey("simple", "t", 1) and value.offset == 20 and value.commit_timestamp == env.clock.now


def test_commit_to_missing_group_with_generation(env):
    assert env.commit("nope", {("t", 0): 1}, generation=3, member_id="m", version=8) == {("t", 0): E.illegal_generation}
    assert env.commit("nope", {("t", 0): 1}, generation=3, member_id="m", version=9) == {("t", 0): E.group_id_not_found}


def test_commit_by_members(env):
    leader, ids, generation = stable_group(env, 2)
    assert env.commit("g", {("t", 0): 5}, generation=generation, member_id=leader) == {("t", 0): E.none}
    assert env.commit("g", {("t", 0): 5}, generation=generation + 1, member_id=leader) == \
        {("t", 0): E.illegal_generation}
    assert env.commit("g", {("t", 0): 5}, generation=generation, member_id="x") == {("t", 0): E.unknown_member_id}
    # Generation -1 without a member id is only allowed while the group is empty.
    assert env.commit("g", {("t", 0): 5}) == {("t", 0): E.unknown_member_id}
    env.join("g", leader)
    env.join("g", next(m for m in ids if m != leader))
    assert env.group().state is GroupState.COMPLETING_REBALANCE
    assert env.commit("g", {("t", 0): 6}, generation=generation + 1, member_id=leader) == \
        {("t", 0): E.rebalance_in_progress}


def test_commit_keeps_session_alive(env):
    leader, _, generation = stable_group(env, 1)
    for _ in range(4):
        env.advance(4_000)
        env.commit("g", {("t", 0): 1}, generation=generation, member_id=leader)
    assert env.group().has_member(leader)


def test_commit_metadata_too_large():
    env = Env(offset_metadata_max_bytes=4)
    result = env.coord.commit_offsets(group_id="g", generation_id=-1, member_id="", group_instance_id=None,
                                      api_version=8, partitions=[("t", 0, 1, -1, "12345"), ("t", 1, 1, 3, "1234")])
    assert result == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none}
    assert env.coord.committed("g", "t", 1).leader_epoch == 3
    assert env.coord.committed("g", "t", 0) is None


def test_commit_append_failure_maps_errors(env):
    env.store.fail_with = error_for_code(56)("disk gone")  # KAFKA_STORAGE_ERROR
    assert env.commit("g", {("t", 0): 1}) == {("t", 0): E.not_coordinator}
    assert "g" not in env.coord.groups
    env.store.fail_with = error_for_code(10)("too large")  # MESSAGE_TOO_LARGE
    assert env.commit("g", {("t", 0): 1}) == {("t", 0): E.unknown_server_error}


def test_fetch_offsets_for_unknown_group_and_partitions(env):
    env.commit("g", {("t", 0): 7})
    error, topics = env.coord.fetch_offsets("g", [("t", [0, 1]), ("u", [0])])
    assert error == E.none
    assert [(t, [(p["partition_index"], p["committed_offset"]) for p in ps]) for t, ps in topics] == \
        [("t", [(0, 7), (1, -1)]), ("u", [(0, -1)])]
    error, topics = env.coord.fetch_offsets("unknown", [("t", [0])])
    assert error == E.none and topics[0][1][0]["committed_offset"] == -1
    assert env.coord.fetch_offsets("unknown", None) == (E.none, [])


def test_retention_time_sets_expire_timestamp(env):
    env.commit("g", {("t", 0): 1}, version=2, retention=5_000)
    key, value = env.written()[-1]
    assert value.expire_timestamp == env.clock.now + 5_000
    env.advance(5_000)
    env.coord.cleanup_group_metadata()
    assert env.coord.committed("g", "t", 0) is None
    assert "g" not in env.coord.groups  # empty simple group without offsets is deleted


def test_offsets_retention():
    env = Env(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    env.commit("simple", {("t", 0): 1})
    leader, _, generation = stable_group(env, 1)
    env.commit("g", {("t", 0): 1}, generation=generation, member_id=leader)
    for _ in range(14):
        env.advance(5_000)
        assert env.heartbeat("g", leader, generation) == E.none
    # The simple group's offsets expired and the group went with them.
    assert "simple" not in env.coord.groups
    # A stable consumer group subscribed to... nothing parseable keeps its offsets (subscription unknown).
    assert env.coord.committed("g", "t", 0) is not None
    kinds = [(type(k).__name__, v is None) for k, v in env.written()]
    assert ("OffsetCommitKey", True) in kinds and ("GroupMetadataKey", True) in kinds


def test_topic_deletion_removes_offsets(env):
    env.commit("g", {("t", 0): 1, ("u", 0): 2})
    env.coord.on_topics_deleted(["t"])
    assert env.coord.committed("g", "t", 0) is None
    assert env.coord.committed("g", "u", 0).offset == 2


# ------------------------------------------------------------------ admin

def test_list_and_describe(env):
    leader, ids, generation = stable_group(env, 2)
    env.commit("simple", {("t", 0): 1})
    error, groups = env.coord.list_groups()
    assert error == E.none
    assert groups == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"},
        {"group_id": "simple", "protocol_type": "", "group_state": "Empty", "group_type": "classic"}]
    assert [g["group_id"] for g in env.coord.list_groups(["EMPTY"])[1]] == ["simple"]
    assert [g["group_id"] for g in env.coord.list_groups([], ["Classic"])[1]] == ["g", "simple"]
    assert env.coord.list_groups([], ["consumer"])[1] == []
    described = env.coord.describe_groups(["g", "missing"])
    assert described[0]["group_state"] == "Stable" and described[0]["protocol_data"] == "range"
    assert {m["member_id"] for m in described[0]["members"]} == set(ids)
    assert all(m["member_metadata"] == b"meta" for m in described[0]["members"])
    # the coordinator says the group is not found (Kafka's message); DescribeGroups v0-5 answer it Dead, no error
    assert described[1] == {"group_id": "missing", "error_code": E.group_id_not_found,
                            "error_message": "Group missing not found.", "group_state": "Dead",
                            "protocol_type": "", "protocol_data": "", "members": []}


def test_delete_groups(env):
    stable_group(env, 1, group="busy")
    env.commit("idle", {("t", 0): 1, ("t", 1): 2})
    results = env.coord.delete_groups(["busy", "idle", "missing", "idle"])
    assert results == {"busy": E.non_empty_group, "idle": E.none, "missing": E.group_id_not_found}
    assert "idle" not in env.coord.groups and env.coord.fetch_offsets("idle", None) == (E.none, [])
    tombstones = [k for k, v in env.written() if v is None]
    assert set(tombstones) == {OffsetCommitKey("idle", "t", 0), OffsetCommitKey("idle", "t", 1),
                               GroupMetadataKey("idle")}
    assert env.restart().coord.groups.keys() == {"busy"}


# ------------------------------------------------------------------ persistence

def test_state_survives_restart(env):
    leader, ids, generation = stable_group(env, 2)
    env.commit("g", {("t", 0): 11}, generation=generation, member_id=leader)
    env.commit("simple", {("t", 1): 22})
    env.commit("simple", {("t", 1): 23})
    env2 = env.restart()
    group = env2.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert group.leader_id == leader and set(group.members) == set(ids)
    assert group.protocol_name == "range" and group.protocol_type == "consumer"
    assert {m: group.member(m).assignment for m in ids} == {m: m.encode() for m in ids}
    assert env2.coord.committed("g", "t", 0).offset == 11
    assert env2.coord.committed("simple", "t", 1).offset == 23
    # Members that keep heartbeating after the restart stay in their generation.
    assert env2.heartbeat("g", leader, generation) == E.none
    # Members that do not are expired after their session timeout.
    env2.advance(10_001)
    assert env2.group("g").state is GroupState.EMPTY


def test_group_records_go_to_the_group_partition(env):
    env.commit("simple", {("t", 0): 1})
    from tierlog.coordinator.records import partition_for
    assert list(env.store.records) == [partition_for("simple", 5)]


def test_shutdown_answers_parked_requests():
    import asyncio

    env = Env()
    a = env.join_new("g")
    env.advance()
    b = env.join("g")
    b2 = env.join("g", b["member_id"])
    assert not b2.done
    asyncio.run(env.coord.shutdown())
    assert b2["error_code"] == E.not_coordinator
    assert env.join("g")["error_code"] == E.coordinator_not_available
    assert a.done


def _subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    import struct
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def test_retention_of_a_consumer_group_spares_subscribed_topics():
    env = Env(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    first = env.join("g", protocols=[("range", _subscription("t"))])
    answer = env.join("g", first["member_id"], protocols=[("range", _subscription("t"))])
    env.advance()
    member, generation = answer["member_id"], answer["generation_id"]
    env.sync("g", member, generation, [(member, b"")])
    assert env.group().subscribed_topics == {"t"}
    env.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=generation, member_id=member)
    for _ in range(14):
        env.advance(5_000)
        assert env.heartbeat("g", member, generation) == E.none
    assert env.coord.committed("g", "t", 0) is not None
    assert env.coord.committed("g", "old", 0) is None
    # Once the group is empty, retention counts from when it became empty.
    env.coord.leave_group(group_id="g", members=[(member, None, None)])
    env.advance(50_000)
    assert env.coord.committed("g", "t", 0) is not None
    env.advance(10_000)
    assert "g" not in env.coord.groups


def test_delete_offsets():
    env = Env()
    assert env.coord.delete_offsets("missing", [("t", 0)]) == (E.group_id_not_found, {})
    env.commit("simple", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    error, results = env.coord.delete_offsets("simple", [("t", 0), ("t", 5)])
    assert error == E.none and results == {("t", 0): E.none, ("t", 5): E.none}
    assert env.coord.committed("simple", "t", 0) is None and env.coord.committed("simple", "t", 1).offset == 2
    # A running consumer group keeps the offsets of topics it subscribes to.
    first = env.join("g", protocols=[("range", _subscription("t"))])
    member = env.join("g", first["member_id"], protocols=[("range", _subscription("t"))])
    env.advance()
    env.sync("g", member["member_id"], member["generation_id"], [])
    env.commit("g", {("t", 0): 1, ("u", 0): 1}, generation=member["generation_id"], member_id=member["member_id"])
    error, results = env.coord.delete_offsets("g", [("t", 0), ("u", 0)])
    assert results == {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none}
    assert env.coord.committed("g", "u", 0) is None and env.coord.committed("g", "t", 0) is not None
    # Other protocol types cannot delete offsets while the group has members.
    a = env.join("c", protocol_type="connect")
    env.join("c", a["member_id"], protocol_type="connect")
    env.advance()
    assert env.coord.delete_offsets("c", [("t", 0)]) == (E.non_empty_group, {})
