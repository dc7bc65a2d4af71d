"""KIP-848 consumer groups in the group coordinator: ConsumerGroupHeartbeat's epochs, reconciliation (revoke
before reassign), static members, errors, the records written to __consumer_offsets and their replay."""

from __future__ import annotations

import uuid

import pytest

from tierlog.coordinator import GroupCoordinator, MemoryStore
from tierlog.coordinator.assignors import AssignmentMember, AssignmentTopic, range_assign, uniform_assign
from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.consumer_group_manager import TopicInfo
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from tierlog.coordinator.records import decode_key, decode_value, encode_key, encode_value
from tierlog.errors import (
    NO_ERROR,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

T1 = uuid.UUID("00000000-0000-0000-0000-000000000001")
T2 = uuid.UUID("00000000-0000-0000-0000-000000000002")
TOPICS = {"t1": TopicInfo("t1", T1, 4), "t2": TopicInfo("t2", T2, 2), "other": TopicInfo("other", uuid.uuid4(), 1)}


def make(config: CoordinatorConfig | None = None, store: MemoryStore | None = None, *, now: list[int] | None = None,
         topics: dict[str, TopicInfo] = TOPICS) -> GroupCoordinator:
    """A coordinator loaded from ``store``; ``now``: a wall clock the test moves (``now[0]``, ms)."""
    # A target assignment at every epoch bump (the assignment interval has its own tests below), so each step
    # of a reconciliation shows in the answer that caused it.
    clock = {} if now is None else {"wall_clock": lambda: now[0]}
    c = GroupCoordinator(config or CoordinatorConfig(consumer_assignment_interval_ms=0),
                         store or MemoryStore(num_partitions=3), **clock)
    c.topics = lambda: topics
    c.load_all()
    return c


def hb(c: GroupCoordinator, member: str, epoch: int, *, group: str = "g", topics=("t1",), owned=None, regex=None,
       instance: str | None = None, assignor: str | None = None, rebalance_timeout: int | None = None):
    if epoch == 0:
        owned = [] if owned is None else owned
        rebalance_timeout = 30000 if rebalance_timeout is None else rebalance_timeout
    return c.consumer_group_heartbeat(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout_ms=-1 if rebalance_timeout is None else rebalance_timeout,
        subscribed_topic_names=topics if epoch == 0 and regex is None else None, subscribed_topic_regex=regex,
        server_assignor=assignor, owned=owned, client_id="c", client_host="/127.0.0.1", api_version=1)


def parts(answer) -> dict[uuid.UUID, tuple[int, ...]]:
    return dict(answer["assignment"] or ())


def test_join_gets_every_partition_at_epoch_2():
    c = make()
    a = hb(c, "a", 0)
    # A new group is at epoch 1 (as Kafka 4.4): its first member joins at epoch 2.
    assert (a["error_code"], a["member_epoch"], a["heartbeat_interval_ms"]) == (NO_ERROR, 2, 5000)
    assert parts(a) == {T1: (0, 1, 2, 3)}
    [d] = c.consumer_group_describe(["g"])
    assert (d["group_state"], d["group_epoch"], d["assignment_epoch"], d["assignor_name"]) == ("Stable", 2, 2,
                                                                                               "uniform")


def test_second_member_waits_until_the_first_revokes():
    c = make()
    hb(c, "a", 0)
    b = hb(c, "b", 0)
    # b is at epoch 3 with nothing yet: a still owns everything.
    assert (b["member_epoch"], parts(b)) == (3, {})
    a = hb(c, "a", 2, owned=[(T1, [0, 1, 2, 3])])
    # a keeps epoch 2 and two partitions until it reports it released the other two.
    assert a["member_epoch"] == 2
    kept = parts(a)[T1]
    assert len(kept) == 2
    [d] = c.consumer_group_describe(["g"])
    assert d["group_state"] == "Reconciling"
    a = hb(c, "a", 2, owned=[(T1, list(kept))])
    # Epoch 3; the assignment is not sent again when it did not change (only to a full request).
    assert (a["member_epoch"], a["assignment"]) == (3, None)
    b = hb(c, "b", 3, owned=[])
    assert (b["member_epoch"], set(parts(b)[T1])) == (3, {0, 1, 2, 3} - set(kept))
    [d] = c.consumer_group_describe(["g"])
    assert d["group_state"] == "Stable"
    # b leaves: a gets everything back at epoch 3.
    left = hb(c, "b", -1)
    assert (left["error_code"], left["member_epoch"]) == (NO_ERROR, -1)
    a = hb(c, "a", 3, owned=[(T1, list(kept))])
    assert (a["member_epoch"], parts(a)) == (4, {T1: (0, 1, 2, 3)})


def test_epoch_errors():
    c = make()
    hb(c, "a", 0)
    assert hb(c, "a", 5, owned=[])["error_code"] == FencedMemberEpochError.code
    assert hb(c, "zz", 2)["error_code"] == UnknownMemberIdError.code
    assert hb(c, "a", 2, group="nope")["error_code"] == GroupIdNotFoundError.code
    # The previous epoch with a subset of the assignment is accepted (a lost response).
    hb(c, "b", 0)
    a = hb(c, "a", 2, owned=[(T1, [0, 1, 2, 3])])
    a = hb(c, "a", 2, owned=[(T1, list(parts(a)[T1]))])
    assert a["member_epoch"] == 3
    assert hb(c, "a", 2, owned=[(T1, [0])])["error_code"] == NO_ERROR
    assert hb(c, "a", 2, owned=[(T1, [3])])["error_code"] == FencedMemberEpochError.code


def test_invalid_requests():
    c = make()
    assert hb(c, "", 0)["error_code"] == InvalidRequestError.code
    r = c.consumer_group_heartbeat(group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                                   rebalance_timeout_ms=-1, subscribed_topic_names=["t1"],
                                   subscribed_topic_regex=None, server_assignor=None, owned=[], client_id="c",
                                   client_host="h", api_version=1)
    assert (r["error_code"], r["error_message"]) == (InvalidRequestError.code,
                                                     "RebalanceTimeoutMs must be provided in first request.")
    assert hb(c, "m", 0, assignor="sticky")["error_code"] == UnsupportedAssignorError.code
    assert hb(c, "m", 0, regex="(?=x)", topics=None)["error_code"] == InvalidRegularExpressionError.code
    assert hb(c, "m", -3)["error_code"] == InvalidRequestError.code


def test_regex_subscription_and_range_assignor():
    c = make()
    a = hb(c, "a", 0, regex="t[0-9]", assignor="range")
    assert parts(a) == {T1: (0, 1, 2, 3), T2: (0, 1)}
    [d] = c.consumer_group_describe(["g"])
    assert d["assignor_name"] == "range"
    assert d["members"][0]["subscribed_topic_regex"] == "t[0-9]"


def test_static_member_leaves_and_comes_back_without_rebalance():
    c = make()
    a = hb(c, "a", 0, instance="i1")
    assert hb(c, "x", 0, instance="i1")["error_code"] == UnreleasedInstanceIdError.code
    left = hb(c, "a", -2, instance="i1")
    assert left["member_epoch"] == -2
    back = hb(c, "a2", 0, instance="i1")
    assert (back["error_code"], back["member_epoch"], parts(back)) == (NO_ERROR, a["member_epoch"], parts(a))
    [d] = c.consumer_group_describe(["g"])
    assert [m["member_id"] for m in d["members"]] == ["a2"] and d["group_epoch"] == 2


def test_group_max_size():
    c = make(CoordinatorConfig(consumer_max_size=1))
    hb(c, "a", 0)
    assert hb(c, "b", 0)["error_code"] == GroupMaxSizeReachedError.code


def test_offset_commit_uses_the_member_epoch():
    c = make()
    hb(c, "a", 0)
    hb(c, "b", 0)
    hb(c, "a", 2, owned=[(T1, [0, 1, 2, 3])])
    hb(c, "a", 2, owned=[(T1, [0, 1])])  # a at epoch 3, holding 0 and 1 since epoch 2

    def commit(epoch: int, member: str = "a", partition: int = 0):
        return c.commit_offsets(group_id="g", generation_id=epoch, member_id=member, group_instance_id=None,
                                partitions=[("t1", partition, 5, -1, "")], api_version=9)[("t1", partition)]
    assert commit(3) == NO_ERROR
    # Kafka 4.4: an older epoch is fine for a partition held since then; a newer one never is.
    assert (commit(2), commit(1), commit(4)) == (NO_ERROR, StaleMemberEpochError.code, StaleMemberEpochError.code)
    assert commit(2, partition=3) == StaleMemberEpochError.code
    assert commit(3, member="z") == UnknownMemberIdError.code


def test_records_replay_on_load():
    store = MemoryStore(num_partitions=3)
    c = make(store=store)
    hb(c, "a", 0)
    hb(c, "b", 0)
    c.commit_offsets(group_id="g", generation_id=2, member_id="a", group_instance_id=None,
                     partitions=[("t1", 0, 7, -1, "")], api_version=9)
    before = c.consumer_group_describe(["g"])
    again = make(store=store)
    assert again.consumer_group_describe(["g"]) == before
    assert again.committed("g", "t1", 0).offset == 7
    # The reloaded group goes on: a's heartbeat at epoch 2 is still accepted, no epoch bump from the reload.
    a = hb(again, "a", 2, owned=[(T1, [0, 1, 2, 3])])
    assert a["error_code"] == NO_ERROR
    [d] = again.consumer_group_describe(["g"])
    assert d["group_epoch"] == 3
    err, listed = again.list_groups(types_filter=["consumer"])
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Reconciling",
                       "group_type": "consumer"}]


def test_regular_expression_records_written_and_replayed():
    """Kafka 4.4's ConsumerGroupRegularExpression records: one when a regex joins the group and when the topics
    it matches change, a tombstone when its last member leaves; replayed on load."""
    now = [1_000]
    topics = dict(TOPICS)
    store = MemoryStore(num_partitions=3)

    def coordinator() -> GroupCoordinator:
        return make(CoordinatorConfig(), store, now=now, topics=topics)

    def written():
        out = []
        for key_bytes, value_bytes in store.records[coordinator().partition_for("g")]:
            key = decode_key(key_bytes)
            if isinstance(key, ConsumerGroupRegularExpressionKey):
                out.append((key.group, key.regex, decode_value(key, value_bytes)))
        return out

    def resolved(c: GroupCoordinator):
        return c.shard_for("g").consumer_group_manager.groups["g"].resolved_regexes

    c = coordinator()
    a = hb(c, "a", 0, regex="t[0-9]")
    hb(c, "b", 0, regex="t[0-9]")  # the same expression, already resolved: nothing new
    first = ConsumerGroupRegularExpressionValue(("t1", "t2"), 0, 1_000)
    assert written() == [("g", "t[0-9]", first)]
    now[0] = 2_000
    topics["t3"] = TopicInfo("t3", uuid.UUID(int=3), 1)
    before = c.consumer_group_describe(["g"])[0]["group_epoch"]
    hb(c, "a", a["member_epoch"])
    second = ConsumerGroupRegularExpressionValue(("t1", "t2", "t3"), 0, 2_000)
    assert written() == [("g", "t[0-9]", first), ("g", "t[0-9]", second)]
    assert c.consumer_group_describe(["g"])[0]["group_epoch"] == before + 1  # t3 joined the subscription
    assert resolved(coordinator()) == {"t[0-9]": second}  # replayed on load
    hb(c, "c", 0, regex="other")
    assert written()[-1] == ("g", "other", ConsumerGroupRegularExpressionValue(("other",), 0, 2_000))
    hb(c, "c", -1)
    assert written()[-1] == ("g", "other", None)  # its last member left
    assert resolved(c) == resolved(coordinator()) == {"t[0-9]": second}


def test_assignment_interval_batches_joins_into_one_target_assignment():
    """group.consumer.assignment.interval.ms (Kafka 4.4's default 1000): the first member is assigned at once;
    members joining within the interval get the last target's epoch and nothing (the group is Assigning); the
    first heartbeat after the interval computes one target for all of them. The time is in the metadata
    record's tagged field, so a reloaded coordinator keeps counting from it."""
    now = [50_000]
    store = MemoryStore(num_partitions=3)

    def coordinator() -> GroupCoordinator:
        return make(CoordinatorConfig(), store, now=now)

    def target_metadata():
        return [decode_value(key, value) for key, value in (
            (decode_key(k), v) for k, v in store.records[coordinator().partition_for("g")])
            if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey)]

    c = coordinator()
    a = hb(c, "a", 0)
    assert (a["member_epoch"], parts(a)) == (2, {T1: (0, 1, 2, 3)})
    now[0] += 10
    b = hb(c, "b", 0)
    now[0] += 10
    d = hb(c, "d", 0)
    assert [(x["member_epoch"], parts(x)) for x in (b, d)] == [(2, {}), (2, {})]
    [described] = c.consumer_group_describe(["g"])
    assert (described["group_state"], described["group_epoch"], described["assignment_epoch"]) == \
        ("Assigning", 4, 2)
    assert target_metadata() == [ConsumerGroupTargetAssignmentMetadataValue(2, 50_000)]
    now[0] = 50_999
    assert hb(c, "a", 2)["member_epoch"] == 2  # still within the interval: nothing new
    c = coordinator()  # the timestamp survives a reload
    now[0] = 51_000
    a = hb(c, "a", 2)
    # A target for epoch 4 over three members: a keeps its epoch while it revokes what b and d get.
    assert (a["member_epoch"], sum(len(p) for p in parts(a).values())) == (2, 2)
    assert target_metadata()[-1] == ConsumerGroupTargetAssignmentMetadataValue(4, 51_000)
    [described] = c.consumer_group_describe(["g"])
    assert (described["group_epoch"], described["assignment_epoch"]) == (4, 4)


def test_a_rack_change_bumps_the_group_epoch():
    """KIP-1101 (Kafka 4.4): the replicas' racks are in the metadata hash, so moving a replica to another rack
    bumps the group epoch (a new target assignment is computed; the member keeps its partitions)."""
    topics = {"t1": TopicInfo("t1", T1, 4, {p: frozenset({"r1"}) for p in range(4)})}
    c = make()
    c.topics = lambda: topics
    a = hb(c, "a", 0)
    epoch = a["member_epoch"]
    topics["t1"] = TopicInfo("t1", T1, 4, {0: frozenset({"r2"}), **{p: frozenset({"r1"}) for p in range(1, 4)}})
    again = hb(c, "a", epoch, owned=[(T1, [0, 1, 2, 3])])
    assert again["member_epoch"] == epoch + 1
    assert c.consumer_group_describe(["g"])[0]["members"][0]["assignment"] == \
        {"topic_partitions": [{"topic_id": T1, "topic_name": "t1", "partitions": [0, 1, 2, 3]}]}


def test_record_formats_round_trip():
    for key, value in [
        (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(3, 12345)),
        (ConsumerGroupMemberMetadataKey("g", "m"),
         ConsumerGroupMemberMetadataValue("i", None, "c", "/h", ("a", "b"), None, 300, "range")),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
         ConsumerGroupCurrentMemberAssignmentValue(3, 2, 2, ((T1, (0, 1)),), ((T2, (1,)),))),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
         ConsumerGroupCurrentMemberAssignmentValue(3, 2, 2, ((T1, (0, 1)), (T2, (4,))), (), ((2, 3), (3,)))),
    ]:
        k = decode_key(encode_key(key))
        assert k == key
        assert decode_value(k, encode_value(value)) == value
    # Kafka's layout: type 3 key, then the flexible value v0 (epoch, then tagged field 0: the metadata hash).
    assert encode_key(ConsumerGroupMetadataKey("g")) == b"\x00\x03\x00\x01g"
    assert encode_value(ConsumerGroupMetadataValue(3)) == b"\x00\x00\x00\x00\x00\x03\x00"


@pytest.mark.parametrize("assign", [uniform_assign, range_assign])
def test_assignors_balance(assign):
    topics = {T1: AssignmentTopic(T1, "t1", 5), T2: AssignmentTopic(T2, "t2", 3)}
    members = [AssignmentMember(m, frozenset({T1, T2})) for m in ("a", "b", "c")]
    result = assign(members, topics)
    counts = sorted(sum(len(ps) for ps in result[m].values()) for m in ("a", "b", "c"))
    assert sum(counts) == 8 and counts[-1] - counts[0] <= (1 if assign is uniform_assign else 2)
    every = sorted((t, p) for a in result.values() for t, ps in a.items() for p in ps)
    assert every == sorted([(T1, p) for p in range(5)] + [(T2, p) for p in range(3)])


def test_uniform_is_sticky_and_ignores_racks():
    """As Kafka 4.4's uniform assignor: racks on members and replicas change nothing; a newcomer gets what the
    others give up beyond their quota (the first member keeps the extra partition it already holds)."""
    topics = {T1: AssignmentTopic(T1, "t1", 4, {0: frozenset({"r1"}), 1: frozenset({"r2"}),
                                                2: frozenset({"r1"}), 3: frozenset({"r2"})})}
    first = uniform_assign([AssignmentMember("a", frozenset({T1}), "r2"), AssignmentMember("b", frozenset({T1}), "r1")],
                           topics)
    assert first == {"a": {T1: (0, 1)}, "b": {T1: (2, 3)}}
    assert uniform_assign([AssignmentMember("a", frozenset({T1})), AssignmentMember("b", frozenset({T1}))],
                          {T1: AssignmentTopic(T1, "t1", 4)}) == first
    second = uniform_assign([AssignmentMember("a", frozenset({T1}), "r2", first["a"]),
                             AssignmentMember("b", frozenset({T1}), "r1", first["b"]),
                             AssignmentMember("c", frozenset({T1}))], topics)
    assert second == {"a": {T1: (0, 1)}, "b": {T1: (2,)}, "c": {T1: (3,)}}


def test_offsets_of_an_empty_consumer_group_expire_then_the_group_goes():
    now = [1_000_000]
    store = MemoryStore(num_partitions=3)
    c = make(CoordinatorConfig(offsets_retention_ms=60_000), store, now=now)
    hb(c, "a", 0)
    c.commit_offsets(group_id="g", generation_id=2, member_id="a", group_instance_id=None,
                     partitions=[("t1", 0, 7, -1, "")], api_version=9)
    now[0] += 120_000
    assert c.cleanup_group_metadata() == 0  # a member subscribes to t1: its offsets stay
    hb(c, "a", -1)
    assert c.cleanup_group_metadata() > 0
    assert c.committed("g", "t1", 0) is None
    assert c.consumer_group_describe(["g"])[0]["error_code"] == 69  # GROUP_ID_NOT_FOUND: deleted
    again = make(store=store)
    assert again.consumer_group_describe(["g"])[0]["error_code"] == 69


@pytest.mark.parametrize("settings, error", [
    ({"group.consumer.heartbeat.interval.ms": "500"}, "Must be between group.consumer.min.heartbeat.interval.ms"),
    ({"group.coordinator.rebalance.protocols": "consumer"}, "Must contain classic"),
    ({"group.consumer.min.heartbeat.interval.ms": "1000", "group.consumer.heartbeat.interval.ms": "50000",
      "group.consumer.max.heartbeat.interval.ms": "60000"}, "Must be less than group.consumer.session.timeout.ms"),
])
def test_consumer_group_settings_are_checked_at_start(tmp_path, settings, error):
    from tierlog.config.broker import BrokerConfig
    from tierlog.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=error):
        BrokerConfig({"log.dirs": str(tmp_path), **settings})
    range_class = "org.apache.kafka.coordinator.group.assignor.RangeAssignor"
    config = CoordinatorConfig.from_broker_config(BrokerConfig({"log.dirs": str(tmp_path),
                                                                "group.consumer.assignors": range_class}))
    assert config.consumer_assignors == ("range",) and config.consumer_protocol_enabled()
    classic_only = CoordinatorConfig.from_broker_config(BrokerConfig({
        "log.dirs": str(tmp_path), "group.coordinator.rebalance.protocols": "classic"}))
    assert not classic_only.consumer_protocol_enabled()


def test_the_consumer_protocol_apis_are_registered_only_when_enabled():
    from tierlog.protocol import ApiKey
    from tierlog.server.apis.consumer_groups import ConsumerGroupApis

    class Registry:
        def __init__(self):
            self.ranges = {}

        def register(self, key, low, high, handler):
            self.ranges[key] = (low, high)

    for protocols, expected in ((("classic", "consumer"), {ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
                                                           ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1)}),
                                (("classic",), {})):
        registry = Registry()
        coordinator = GroupCoordinator(CoordinatorConfig(rebalance_protocols=protocols), MemoryStore())
        ConsumerGroupApis(coordinator, controller=None).register(registry)
        assert registry.ranges == expected
