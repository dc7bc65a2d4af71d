"""KIP-848's consumer group protocol through real clients and against Apache Kafka 4.4.0.

- The same sequence of raw ConsumerGroupHeartbeats (two members with client-chosen ids, the range assignor, a
  revocation, epoch errors, a leave), OffsetCommits with member epochs, ConsumerGroupDescribe, ListGroups v5
  and DescribeGroups, sent to Kafka 4.4.0 and to tierlog: the same epochs, assignments, states and error codes.
- confluent-kafka (librdkafka, ``group.protocol=consumer``): two members share the partitions, one leaves and
  the other takes them; every record is read once; the group and its offsets survive a broker restart.
- The ConsumerGroupRegularExpression records of a regex subscription in both brokers' ``__consumer_offsets``.
- Kafka 4.4's Java consumer (``kafka-console-consumer --consumer-property group.protocol=consumer``) reads
  every record, and ``kafka-consumer-groups --describe --state/--members`` reads the group as Kafka's does.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.harness.apache_kafka import kafka_peer_module
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient, create_topic
from tests.harness.waiting import not_yet, wait_until
from tests.peer.diff import assert_same, plain
from tests.server.groupslib import ASSIGN_AT_ONCE, FAST_HEARTBEATS, committed_offsets, produce, start_kafka44, warm_up
from tierlog.protocol import ApiKey

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

LATEST = kafka_peer_module.LATEST_KAFKA_VERSION
TOPIC = "cgp-topic"
@pytest.fixture(scope="module")
def kafka44(kafka_jars, tmp_path_factory):
    server = start_kafka44(tmp_path_factory.mktemp("kafka44"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("cgp") / "logs", {**FAST_HEARTBEATS, **ASSIGN_AT_ONCE}).start()
    warm_up(b.bootstrap)
    yield b
    b.stop()


def _scenario(bootstrap: str) -> list:
    """Raw heartbeats of members "a-member" and "b-member" on a 4-partition topic, answers made comparable
    (topic ids as names)."""
    create_topic(bootstrap, TOPIC, 4)
    c = RawClient(bootstrap)
    group = "cgp-diff"
    try:
        md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
        names = {str(t.topic_id): t.name for t in md.topics}

        def named(x):
            if isinstance(x, dict):
                return {k: (names.get(v, v) if k == "topic_id" else named(v)) for k, v in x.items()
                        if k not in ("throttle_time", "client_host", "authorized_operations")}
            if isinstance(x, list):
                return [named(i) for i in x]
            return x

        topic_id = md.topics[0].topic_id

        def hb(member: str, epoch: int, owned=None, **extra):
            values = {"group_id": group, "member_id": member, "member_epoch": epoch, "rebalance_timeout": -1,
                      "subscribed_topic_names": None, "server_assignor": None,
                      "topic_partitions": None if owned is None else [{"topic_id": topic_id, "partitions": owned}]}
            if epoch == 0:
                values.update(rebalance_timeout=30000, subscribed_topic_names=[TOPIC], server_assignor="range",
                              topic_partitions=[])
            values.update(extra)
            answer = plain(c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, values))
            if answer["assignment"] is not None:
                answer["assignment"]["topic_partitions"].sort(key=lambda tp: names.get(tp["topic_id"], ""))
            return named(answer)

        def commit(member: str, epoch: int):
            r = c.request(ApiKey.OFFSET_COMMIT, 9, {
                "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member,
                "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})
            return r.topics[0].partitions[0].error_code.value

        def fetch(member: str | None, epoch: int):
            r = c.request(ApiKey.OFFSET_FETCH, 9, {"groups": [{
                "group_id": group, "member_id": member, "member_epoch": epoch,
                "topics": [{"name": TOPIC, "partition_indexes": [0]}]}], "require_stable": False})
            g = r.groups[0]
            return g.error_code.value, [p.committed_offset for t in g.topics for p in t.partitions]

        def describe():
            r = plain(c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                    "include_authorized_operations": False}))
            for g in r["groups"]:
                g["members"].sort(key=lambda m: m["member_id"])
            return named(r)

        out = [
            ("a joins", hb("a-member", 0)),
            ("b joins", hb("b-member", 0)),
            ("a keeps epoch 2 until it revokes", hb("a-member", 2, owned=[0, 1, 2, 3])),
            ("reconciling", describe()),
            ("a revoked", hb("a-member", 2, owned=[0, 1])),
            ("b gets the released partitions", hb("b-member", 3, owned=[])),
            ("stable", describe()),
            ("epoch ahead", hb("b-member", 5, owned=[2, 3])["error_code"]),
            ("unknown member", hb("z-member", 3, owned=[])["error_code"]),
            ("unknown assignor", hb("c-member", 0, server_assignor="nope")["error_code"]),
            ("no rebalance timeout", hb("c-member", 0, rebalance_timeout=-1)),
            ("commit at the member epoch", commit("a-member", 3)),
            ("commit at an older epoch holding the partition", commit("a-member", 2)),
            ("commit at an epoch before the partition", commit("a-member", 1)),
            ("commit at a newer epoch", commit("a-member", 4)),
            ("commit by a non-member", commit("z-member", 3)),
            ("fetch at the member epoch", fetch("a-member", 3)),
            ("fetch at an older epoch", fetch("a-member", 2)),
            ("fetch by a non-member", fetch("z-member", 3)),
            ("fetch with an empty member id", fetch("", -1)),
            ("fetch by an admin", fetch(None, -1)),
            ("b leaves", hb("b-member", -1)),
            ("a takes everything", hb("a-member", 3, owned=[0, 1])),
            ("a full heartbeat", hb("a-member", 4, owned=[0, 1, 2, 3], rebalance_timeout=30000,
                                    subscribed_topic_names=[TOPIC])),
            ("listed", [g for g in plain(c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                                            "types_filter": ["consumer"]}))["groups"]
                        if g["group_id"] == group]),
            ("described (classic API)", {k: v for k, v in plain(c.request(ApiKey.DESCRIBE_GROUPS, 5, {
                "groups": [group], "include_authorized_operations": False}))["groups"][0].items()
                if k in ("error_code", "group_state", "protocol_type", "protocol_data")}),
        ]
        out += [
            ("heartbeat to an unknown group", hb("a-member", 1, group_id="cgp-nope")),
            ("leave of an unknown group", hb("a-member", -1, group_id="cgp-nope")),
            ("static s1 joins", hb("s1-member", 0, instance_id="i1")),
            ("instance id held", hb("s2-member", 0, instance_id="i1")),
            ("s1 leaves for now", hb("s1-member", -2, instance_id="i1")),
            ("s2 takes i1's place", hb("s2-member", 0, instance_id="i1")),
            ("with the static member", describe()),
        ]
        hb("s2-member", -1, instance_id="i1")
        hb("a-member", -1)
        return out
    finally:
        c.close()


def test_heartbeats_epochs_assignments_and_errors_as_kafka(kafka44, tierlog):
    kafka, ours = _scenario(kafka44.bootstrap), _scenario(tierlog.bootstrap)
    assert [step for step, _ in ours] == [step for step, _ in kafka]
    for (step, k), (_, t) in zip(kafka, ours):
        assert_same(k, t, step)
    # What the comparison rests on (so that two identical wrong answers could not pass).
    steps = dict(ours)
    assert (steps["a joins"]["member_epoch"], steps["a joins"]["heartbeat_interval"]) == (2, 500)  # new group: 1
    assert steps["a keeps epoch 2 until it revokes"]["member_epoch"] == 2
    assert steps["b gets the released partitions"]["assignment"]["topic_partitions"] == [
        {"topic_id": TOPIC, "partitions": [2, 3]}]
    assert steps["stable"]["groups"][0]["group_state"] == "Stable"
    assert (steps["epoch ahead"], steps["unknown member"], steps["unknown assignor"]) == (110, 25, 112)
    assert (steps["fetch at the member epoch"], steps["fetch at an older epoch"][0]) == ((0, [1]), 113)
    assert steps["fetch by an admin"] == (0, [1])
    assert steps["instance id held"]["error_code"] == 111 and steps["s1 leaves for now"]["member_epoch"] == -2
    assert [m["member_id"] for m in steps["with the static member"]["groups"][0]["members"]] == ["a-member",
                                                                                                 "s2-member"]
    assert steps["a takes everything"]["member_epoch"] == 4
    assert steps["a full heartbeat"]["assignment"]["topic_partitions"] == [{"topic_id": TOPIC,
                                                                          "partitions": [0, 1, 2, 3]}]
    assert steps["listed"][0]["group_state"] == "Stable"
    assert (steps["commit at the member epoch"], steps["commit at an older epoch holding the partition"],
            steps["commit at an epoch before the partition"], steps["commit at a newer epoch"]) == (0, 0, 113, 113)


def _uniform_scenario(bootstrap: str) -> list:
    """Three members join one after the other (uniform assignor, two topics of 7 and 3 partitions), each step
    heartbeated until it settles, then the second leaves: who holds what after each phase, and the epochs."""
    create_topic(bootstrap, "cgp-u1", 7)
    create_topic(bootstrap, "cgp-u2", 3)
    c = RawClient(bootstrap)
    try:
        md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": "cgp-u1"}, {"name": "cgp-u2"}],
                                             "allow_auto_topic_creation": False})
        names = {t.topic_id: t.name for t in md.topics}
        owned: dict[str, dict] = {}
        epochs: dict[str, int] = {}

        def hb(member: str, epoch: int) -> None:
            held = [{"topic_id": t, "partitions": ps} for t, ps in owned.get(member, {}).items()]
            values = {"group_id": "cgp-uniform", "member_id": member, "member_epoch": epoch, "rebalance_timeout": -1,
                      "subscribed_topic_names": None, "server_assignor": None, "topic_partitions": held}
            if epoch == 0:
                values.update(rebalance_timeout=30000, subscribed_topic_names=["cgp-u1", "cgp-u2"],
                              server_assignor="uniform", topic_partitions=[])
            r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, values)
            assert r.error_code.value == 0, r
            epochs[member] = r.member_epoch
            if r.assignment is not None:
                owned[member] = {tp.topic_id: list(tp.partitions) for tp in r.assignment.topic_partitions}

        def settle() -> dict:
            for _ in range(4):  # revoke, then assign: a few rounds of every member
                for member in list(epochs):
                    hb(member, epochs[member])
            return {m: sorted((names[t], p) for t, ps in owned[m].items() for p in ps) for m in owned}

        phases = []
        for member in ("m1", "m2", "m3"):
            hb(member, 0)
            phases.append(settle())
        hb("m2", -1)
        epochs.pop("m2")
        owned.pop("m2")
        phases.append(settle())
        for member in list(epochs):
            hb(member, -1)
        return [phases, epochs]
    finally:
        c.close()


def _sticky(phases: list) -> bool:
    """Whether every member kept what it held in each phase, except what it gave to a newcomer."""
    for before, after in zip(phases, phases[1:]):
        grows = len(after) < len(before)  # a member left: the others only gain
        for member, held in before.items():
            if member in after and grows and not set(held) <= set(after[member]):
                return False
            if member in after and not grows and not set(after[member]) <= set(held):
                return False
    return True


def test_uniform_assignor_as_kafka(kafka44, tierlog):
    """The counts per member and the epochs of each phase as Kafka's, and sticky on both. (Which partitions
    Kafka's uniform assignor picks follows its hash maps of random topic ids: not comparable run to run.)"""
    kafka, ours = _uniform_scenario(kafka44.bootstrap), _uniform_scenario(tierlog.bootstrap)

    def shape(result):
        phases, epochs = result
        return [{m: len(held) for m, held in phase.items()} for phase in phases], epochs
    assert_same(shape(kafka), shape(ours), "the uniform assignor's phases")
    assert shape(ours)[0][-1] == {"m1": 5, "m3": 5}  # what the comparison rests on
    assert _sticky(kafka[0]) and _sticky(ours[0])


def _group_records(bootstrap: str, group: str) -> list:
    """The (key, value) records of ``group``'s ``__consumer_offsets`` partition, decoded by tierlog."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from tierlog.coordinator.records import decode_key, decode_value, partition_for

    c = RawClient(bootstrap)
    try:
        md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": "__consumer_offsets"}],
                                             "allow_auto_topic_creation": False})
        partition = partition_for(group, len(md.topics[0].partitions))
    finally:
        c.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cgp-reader", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        consumer.assign([TopicPartition("__consumer_offsets", partition, OFFSET_BEGINNING)])
        _, end = consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", partition), timeout=10)
        raw: list = []

        def read_to_end():
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                raw.append((m.key(), m.value()))
            return (raw and m is not None and m.offset() >= end - 1) or not_yet(len(raw))
        if end > 0:
            wait_until(read_to_end, 30, interval=0, what=f"__consumer_offsets-{partition} read to {end}")
    finally:
        consumer.close()
    out = []
    for key_bytes, value_bytes in raw:
        key = decode_key(key_bytes)
        if getattr(key, "group", None) == group:
            out.append((key, None if value_bytes is None else decode_value(key, value_bytes)))
    return out


def _regex_scenario(bootstrap: str) -> list:
    """Two members subscribe by the same regular expression, settle, and leave: the group's
    ConsumerGroupRegularExpression records in ``__consumer_offsets``, and the time window they were made in."""
    from tierlog.coordinator.consumer_group_records import ConsumerGroupRegularExpressionKey

    for name, partitions in (("cgp-re2-x1", 2), ("cgp-re2-x2", 1), ("cgp-re2-y", 1)):
        create_topic(bootstrap, name, partitions)
    group, regex = "cgp-regex", "cgp-re2-x.*"
    c = RawClient(bootstrap)
    started = int(time.time() * 1000)
    try:
        epochs: dict[str, int] = {}
        owned: dict[str, list] = {}

        def hb(member: str) -> int:
            epoch = epochs.get(member, 0)
            values = {"group_id": group, "member_id": member, "member_epoch": epoch, "rebalance_timeout": -1,
                      "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                      "topic_partitions": owned.get(member, [])}
            if epoch == 0:
                values.update(rebalance_timeout=30000, subscribed_topic_regex=regex, server_assignor="uniform")
            r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, values)
            assert r.error_code.value == 0, r
            epochs[member] = r.member_epoch
            if r.assignment is not None:
                owned[member] = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                                 for tp in r.assignment.topic_partitions]
            return sum(len(tp["partitions"]) for tp in owned.get(member, []))

        # Kafka resolves the expression asynchronously: the first member is assigned once it is resolved.
        wait_until(lambda: hb("rx-1") == 3 or not_yet(owned), 30, what="the regex resolved and assigned")
        hb("rx-2")

        def shared():
            counts = sorted(hb(m) for m in ("rx-1", "rx-2"))
            return counts == [1, 2] or not_yet(counts)
        wait_until(shared, 30, what="the two members share the three partitions")
        for member in ("rx-1", "rx-2"):
            epochs[member] = -1
            values = {"group_id": group, "member_id": member, "member_epoch": -1, "rebalance_timeout": -1,
                      "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                      "topic_partitions": None}
            assert c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, values).error_code.value == 0
    finally:
        c.close()
    ended = int(time.time() * 1000)
    return [(key, value) for key, value in _group_records(bootstrap, group)
            if isinstance(key, ConsumerGroupRegularExpressionKey)], (started, ended)


def test_regular_expression_records_as_kafka(kafka44, tierlog):
    """Kafka 4.4 and tierlog write the same ConsumerGroupRegularExpression records for the same group: the
    resolution (the matching topics) once, a tombstone when the last member leaves; the time is the
    resolution's. The version is Kafka's metadata log offset; tierlog, without a metadata log, writes 0."""
    (kafka, kafka_window), (ours, our_window) = _regex_scenario(kafka44.bootstrap), _regex_scenario(tierlog.bootstrap)

    def shape(records):
        return [(key.group, key.regex, None if value is None else value.topics) for key, value in records]
    assert_same(shape(kafka), shape(ours), "the regular expression records")
    assert shape(ours) == [("cgp-regex", "cgp-re2-x.*", ("cgp-re2-x1", "cgp-re2-x2")),
                           ("cgp-regex", "cgp-re2-x.*", None)]  # what the comparison rests on
    for (_, value), (start, end) in ((kafka[0], kafka_window), (ours[0], our_window)):
        assert start <= value.timestamp <= end
    assert kafka[0][1].version > 0 and ours[0][1].version == 0


def _consume(bootstrap: str, group: str, topic: str, seen: list, stop, name: str):
    from confluent_kafka import Consumer, KafkaException

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                  "client.id": name})
    c.subscribe([topic])
    try:
        while not stop():
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.append((name, m.partition(), m.offset()))
        with contextlib.suppress(KafkaException):  # nothing new to commit (_NO_OFFSET)
            c.commit(asynchronous=False)
    finally:
        c.close()


def test_confluent_kafka_members_share_leave_and_restart(tierlog, tmp_path):
    import threading

    import confluent_kafka

    assert confluent_kafka.libversion()[1] >= 0x02040000  # KIP-848 GA in librdkafka 2.4+
    topic, group = "cgp-ck", "cgp-ck-group"
    produce(tierlog.bootstrap, topic, 4, 10, create=True)
    seen: list = []
    stops = {"a": False, "b": False}
    threads = {n: threading.Thread(target=_consume, args=(tierlog.bootstrap, group, topic, seen,
                                                          lambda n=n: stops[n], n), daemon=True) for n in stops}
    threads["a"].start()
    wait_until(lambda: len(seen) >= 40 or not_yet(len(seen)), 30, what="a reads the 40 records")
    threads["b"].start()

    def shared():
        [g] = _describe(tierlog.bootstrap, group)
        owners = [sum(len(tp["partitions"]) for tp in m["assignment"]["topic_partitions"]) for m in g["members"]]
        return (g["group_state"] == "Stable" and owners == [2, 2]) or not_yet((g["group_state"], owners))
    wait_until(shared, 30, what="the two members hold two partitions each")
    stops["b"] = True
    threads["b"].join(30)

    def one_left():
        [g] = _describe(tierlog.bootstrap, group)
        owners = [sum(len(tp["partitions"]) for tp in m["assignment"]["topic_partitions"]) for m in g["members"]]
        return (g["group_state"] == "Stable" and owners == [4]) or not_yet((g["group_state"], owners))
    wait_until(one_left, 30, what="the member left takes every partition")
    produce(tierlog.bootstrap, topic, 4, 5, start=10)
    wait_until(lambda: len({(p, o) for _, p, o in seen}) == 60 or not_yet(len(seen)), 30, what="the new records")
    stops["a"] = True
    threads["a"].join(30)
    assert sorted({(p, o) for _, p, o in seen}) == [(p, o) for p in range(4) for o in range(15)]
    assert committed_offsets(tierlog.bootstrap, group) == {(topic, p): 15 for p in range(4)}
    [before] = _describe(tierlog.bootstrap, group)
    assert before["group_state"] == "Empty" and before["group_epoch"] >= 4

    tierlog.restart()
    warm_up(tierlog.bootstrap)
    [after] = _describe(tierlog.bootstrap, group)
    assert (after["group_state"], after["group_epoch"]) == ("Empty", before["group_epoch"])
    assert committed_offsets(tierlog.bootstrap, group) == {(topic, p): 15 for p in range(4)}
    produce(tierlog.bootstrap, topic, 4, 2, start=15)
    more: list = []
    done = {"c": False}
    t = threading.Thread(target=_consume, args=(tierlog.bootstrap, group, topic, more, lambda: done["c"], "c"),
                         daemon=True)
    t.start()
    wait_until(lambda: len(more) >= 8 or not_yet(len(more)), 30, what="the records after the committed offsets")
    done["c"] = True
    t.join(30)
    assert sorted((p, o) for _, p, o in more) == [(p, o) for p in range(4) for o in (15, 16)]


def test_confluent_kafka_regex_subscription_follows_new_topics(tierlog):
    """A SubscribedTopicRegex (RE2) subscription: matching topics only, and a topic created later that matches
    is assigned at a later heartbeat."""
    from confluent_kafka import Consumer

    produce(tierlog.bootstrap, "cgp-rx-a", 2, 5, create=True)
    produce(tierlog.bootstrap, "cgp-other", 1, 5, create=True)
    c = Consumer({"bootstrap.servers": tierlog.bootstrap, "group.id": "cgp-rx-group", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    c.subscribe(["^cgp-rx-.*"])
    got: set = set()
    try:
        def read(n: int):
            def check():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.add((m.topic(), m.partition(), m.offset()))
                return len(got) >= n or not_yet(len(got))
            return check
        wait_until(read(10), 30, what="the records of cgp-rx-a")
        produce(tierlog.bootstrap, "cgp-rx-b", 1, 5, create=True)
        wait_until(read(15), 30, what="the records of cgp-rx-b, created after the subscription")
    finally:
        c.close()
    assert {t for t, _, _ in got} == {"cgp-rx-a", "cgp-rx-b"} and len(got) == 15


def _describe(bootstrap: str, group: str) -> list:
    c = RawClient(bootstrap)
    try:
        return plain(c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                  "include_authorized_operations": False}))["groups"]
    finally:
        c.close()


def _tool_rows(bootstrap: str, *args: str) -> list[list[str]]:
    """A kafka-consumer-groups 4.4 output as rows of words, the coordinator's address (which differs by nature)
    replaced. (One JVM per call: the suite's ToolRunner does not build against 4.4's jars yet.)"""
    out = kafka_peer_module.run_tool("ConsumerGroupCommand", "--bootstrap-server", bootstrap, *args,
                                     version=LATEST).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    for row in rows:
        for i, word in enumerate(row):
            if word.startswith("127.0.0.1:"):
                row[i] = "<coordinator>"
    return rows


def test_consumer_groups_tool_as_kafka(kafka44, tierlog):
    """kafka-consumer-groups 4.4 (--describe --state: assignor, state, members) shows the group of the raw scenario the
    same on both brokers."""
    for bootstrap in (kafka44.bootstrap, tierlog.bootstrap):
        c = RawClient(bootstrap)
        try:  # the group of test_heartbeats_... when it ran first, else made here
            groups = plain(c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}))["groups"]
        finally:
            c.close()
        if not any(g["group_id"] == "cgp-diff" for g in groups):
            _scenario(bootstrap)
    args = ("--describe", "--group", "cgp-diff", "--state")
    kafka, ours = _tool_rows(kafka44.bootstrap, *args), _tool_rows(tierlog.bootstrap, *args)
    assert_same(kafka, ours, "kafka-consumer-groups " + " ".join(args))
    assert any(row[:1] == ["cgp-diff"] for row in ours), ours


def _console_consumer(bootstrap: str, count: int) -> list[str]:
    p = kafka_peer_module.run_tool(
        "ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", "cgp-java", "--group", "cgp-java-group",
        "--consumer-property", "group.protocol=consumer", "--from-beginning", "--max-messages", str(count),
        "--timeout-ms", "30000", check=False, version=LATEST)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    return sorted(line for line in p.stdout.splitlines() if not line.startswith("Option "))  # deprecation notes


def test_java_consumer_reads_every_record_across_a_restart(tierlog, kafka44):
    """Kafka 4.4's Java consumer (group.protocol=consumer) reads every record through tierlog and commits; after
    a broker restart the same group goes on from its committed offsets."""
    produce(tierlog.bootstrap, "cgp-java", 2, 10, create=True)
    started = time.monotonic()
    assert _console_consumer(tierlog.bootstrap, 20) == sorted(f"{q}-{i}" for q in range(2) for i in range(10))
    print(f"the Java consumer read 20 records in {time.monotonic() - started:.1f}s")
    assert committed_offsets(tierlog.bootstrap, "cgp-java-group") == {("cgp-java", 0): 10, ("cgp-java", 1): 10}
    tierlog.restart()
    warm_up(tierlog.bootstrap)
    produce(tierlog.bootstrap, "cgp-java", 2, 2, start=10)
    # --from-beginning applies only without committed offsets: the group's are found after the restart.
    assert _console_consumer(tierlog.bootstrap, 4) == ["0-10", "0-11", "1-10", "1-11"]


def test_group_version_below_1_turns_the_protocol_off(tierlog):
    """``kafka-features downgrade --feature group.version=0`` (UpdateFeatures): ConsumerGroupHeartbeat answers
    UNSUPPORTED_VERSION, as Kafka's; upgrading to 1 again turns it back on."""
    c = RawClient(tierlog.bootstrap)
    try:
        def set_level(level: int, upgrade_type: int) -> None:
            r = c.request(ApiKey.UPDATE_FEATURES, 1, {"timeout": 30000, "validate_only": False, "feature_updates": [
                {"feature": "group.version", "max_version_level": level, "upgrade_type": upgrade_type}]})
            assert r.error_code.value == 0, r

        def join() -> int:
            return c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
                "group_id": "cgp-gv", "member_id": "gv-member", "member_epoch": 0, "rebalance_timeout": 30000,
                "subscribed_topic_names": [TOPIC], "topic_partitions": []}).error_code.value

        set_level(0, 2)  # safe downgrade
        try:
            assert join() == 35  # UNSUPPORTED_VERSION
        finally:
            set_level(1, 1)
        assert join() == 0
    finally:
        c.close()
