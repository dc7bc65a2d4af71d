"""Share groups (KIP-932) over sockets: Kafka 4.4's own KafkaShareConsumer (tests/harness/java/ShareConsumerPeer.java)
reads every record from tierlog as from Kafka 4.4, a released record comes back with its delivery count raised
until the delivery limit archives it, two share consumers split the records with none acknowledged twice, a
broker restart keeps what was acknowledged, and tierlog's asyncio ShareConsumer does the same (an unacknowledged
record comes back once its acquisition lock expired)."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import uuid
from typing import NamedTuple

import pytest

from tests.harness import ROOT
from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module
from tests.harness.broker import BrokerProcess, running_broker
from tests.harness.java_programs import java_program_command
from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.waiting import wait_until, wait_until_async
from tierlog.client.producer import Producer
from tierlog.client.share_consumer import ShareConsumer
from tierlog.protocol import ApiKey

SOURCE = ROOT / "tests" / "harness" / "java" / "ShareConsumerPeer.java"
LATEST = kafka_peer_module.LATEST_KAFKA_VERSION
LOCK_MS = 3000  # short enough to watch a lock expire, long enough for a busy JVM to acknowledge in time
OVERRIDES = {"num.partitions": "1", "offsets.topic.num.partitions": "1",
             "share.coordinator.state.topic.num.partitions": "3",
             "group.share.record.lock.duration.ms": str(LOCK_MS)}


class Delivery(NamedTuple):
    consumer: int
    offset: int
    delivery_count: int
    value: str


@pytest.fixture(scope="module")
def tierlog_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("share"), OVERRIDES) as b:
        yield b


@pytest.fixture(scope="module")
def kafka44(tmp_path_factory):
    server = kafka_peer_module.KafkaServer(tmp_path_factory.mktemp("kafka44"), version=LATEST,
                                           overrides=dict(SHARED_SETTINGS))
    try:
        server.start()
    except kafka_peer_module.KafkaPeerError as e:
        pytest.skip(f"Kafka {LATEST} cannot run here: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tools():
    """Kafka 4.4's command-line tools, run in one JVM for the module's tests."""
    runner = kafka_peer_module.ToolRunner(version=LATEST)
    try:
        yield runner.run
    finally:
        runner.close()


def share_peer(bootstrap: str, topic: str, group: str, *args) -> list[Delivery]:
    """Runs the Java share consumer to its end (the topic created first, unless it exists); its deliveries in
    order."""
    if args[0] != "consume":
        create_topic(bootstrap, topic)
    cmd = java_program_command(SOURCE, "ShareConsumerPeer", LATEST)
    proc = subprocess.run([*cmd, bootstrap, topic, group, *map(str, args)], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 0 and "DONE" in proc.stdout, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("RECORD "):
            _, who, offset, count, value = line.split(" ", 4)
            out.append(Delivery(int(who), int(offset), int(count), value))
    return out


def test_kafka_share_consumer_reads_every_record(tierlog_broker):
    _reads_every_record(tierlog_broker)


def test_kafka_share_consumer_reads_every_record_from_kafka_44(kafka44):
    """The same program against Kafka 4.4 itself: the behaviour the test above holds tierlog to."""
    _reads_every_record(kafka44)


def _reads_every_record(broker) -> None:
    deliveries = share_peer(broker.bootstrap, unique("share-read"), unique("g"), "read", 20)
    assert sorted(d.value for d in deliveries) == sorted(f"rec-{i}" for i in range(20))
    assert {d.delivery_count for d in deliveries} == {1}
    assert len({d.offset for d in deliveries}) == 20


def test_share_group_tools(tierlog_broker, tools):
    """Kafka 4.4's tools on a share group: kafka-share-groups resets a new group to the earliest offset,
    kafka-console-share-consumer then reads the 20 records already there, --describe --offsets shows the start
    offset past them (lag 0); DeleteShareGroupOffsets removes the group's state for the topic."""
    bootstrap = tierlog_broker.bootstrap
    topic, group = unique("share-tools"), unique("g")
    create_topic(bootstrap, topic)

    async def produce():
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(20):
                await producer.send(topic, f"line-{i}".encode())
            await producer.flush()

    asyncio.run(produce())

    tool = tools

    share_groups = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    reset = tool(share_groups, "--bootstrap-server", bootstrap, "--group", group, "--reset-offsets",
                 "--to-earliest", "--topic", topic, "--execute")
    assert reset.stdout.split()[-4:] == [group, topic, "0", "0"]
    out = tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server", bootstrap,
               "--topic", topic, "--group", group, "--max-messages", "20", "--timeout-ms", "60000")
    assert sorted(out.stdout.split()) == sorted(f"line-{i}" for i in range(20))
    described = tool(share_groups, "--bootstrap-server", bootstrap, "--group", group, "--describe", "--offsets")
    assert described.stdout.split()[-5:] == [group, topic, "0", "20", "0"]
    with raw_client(bootstrap) as raw:  # kafka-share-groups --delete-offsets sends this request
        deleted = raw.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group,
                                                                     "topics": [{"topic_name": topic}]})
        assert (deleted.error_code, [(t.topic_name, t.error_code) for t in deleted.responses]) == (0, [(topic, 0)])
        offsets = raw.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
            {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
        assert offsets.groups[0].topics[0].partitions[0].start_offset == -1  # no state: the group starts afresh


def test_released_record_comes_back_until_the_delivery_limit_archives_it(tierlog_broker):
    """rec-0 is released at every delivery: counts 1..5 (group.share.delivery.count.limit), then it is archived,
    so a record produced afterwards is delivered and rec-0 never again."""
    deliveries = share_peer(tierlog_broker.bootstrap, unique("share-limit"), unique("g"), "release-always", 5, 5)
    zero = [d.delivery_count for d in deliveries if d.value == "rec-0"]
    assert zero == [1, 2, 3, 4, 5]
    assert deliveries[-1].value == "tail0"
    assert sorted(d.value for d in deliveries if d.value.startswith("rec-") and d.value != "rec-0") == \
        [f"rec-{i}" for i in range(1, 5)]


def test_two_share_consumers_split_the_records(tierlog_broker):
    deliveries = share_peer(tierlog_broker.bootstrap, unique("share-split"), unique("g"), "split", 20)
    values = [d.value for d in deliveries]
    assert sorted(values) == sorted(f"rec-{i}" for i in range(20))  # every record once: none acknowledged twice
    assert len(set(d.offset for d in deliveries)) == 20


def test_broker_restart_keeps_acknowledged_state(tmp_path):
    """A consumer accepts 10 of 20 records and closes; after a restart, the group gets exactly the other 10 (from
    __share_group_state): nothing accepted comes back. A group config set before the restart is still there."""
    broker = BrokerProcess(tmp_path / "logs", OVERRIDES).start()
    try:
        topic, group = unique("share-restart"), unique("g")
        first = share_peer(broker.bootstrap, topic, group, "accept-some", 20, 10)
        accepted = [d.value for d in first][:10]
        with raw_client(broker.bootstrap) as raw:
            assert raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
                {"resource_type": 32, "resource_name": group, "configs": [
                    {"name": "share.isolation.level", "config_operation": 0, "value": "read_committed"}]}]}
                               ).responses[0].error_code == 0
        broker.restart(clean=True)
        with raw_client(broker.bootstrap) as raw:
            described = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {
                "include_synonyms": False, "include_documentation": False, "resources": [
                    {"resource_type": 32, "resource_name": group, "configuration_keys": ["share.isolation.level"]}]})
            assert [(c.value, c.config_source) for c in described.results[0].configs] == [("read_committed", 8)]
        second = share_peer(broker.bootstrap, topic, group, "consume", 10)
        assert sorted(d.value for d in second) == sorted(set(f"rec-{i}" for i in range(20)) - set(accepted))
        # released when the first consumer closed: that delivery does not count (Kafka 4.4 answers 1 too)
        assert {d.delivery_count for d in second} == {1}
        with raw_client(broker.bootstrap) as raw:  # kafka-features disable --feature share.version
            disabled = raw.request(ApiKey.UPDATE_FEATURES, 1, {"timeout_ms": 30000, "validate_only": False,
                                                               "feature_updates": [{
                                                                   "feature": "share.version",
                                                                   "max_version_level": 0, "upgrade_type": 2}]})
            assert disabled.error_code == 0, disabled
            refused = raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": "m", "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": [topic]})
            assert refused.error_code == 35  # UNSUPPORTED_VERSION: share groups are off
    finally:
        broker.stop()


async def _warm_up(producer: Producer, consumer: ShareConsumer, topic: str) -> None:
    """A share group starts at the log end: produce until one record reaches the group."""
    async def delivered() -> bool:
        await producer.send_and_wait(topic, b"warmup")
        records = await consumer.poll(500)
        for r in records:
            consumer.acknowledge(r, "ACCEPT")
        return any(r.value == b"warmup" for r in records)
    await wait_until_async(delivered, timeout=60, what="a warm-up record delivered")
    await consumer.commit_sync()


def test_tierlog_share_consumer(tierlog_broker):
    """tierlog's ShareConsumer: a record held unacknowledged by one member comes back to another once its lock
    expired, a released one comes back at once, both with delivery count 2; every other record is read once."""
    bootstrap = tierlog_broker.bootstrap
    topic, group = unique("share-py"), unique("g")
    create_topic(bootstrap, topic)

    async def main():
        async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer, \
                ShareConsumer(group, bootstrap_servers=bootstrap, acknowledgement_mode="explicit",
                              max_poll_records=3) as a, \
                ShareConsumer(group, bootstrap_servers=bootstrap, max_poll_records=3) as b, \
                ShareConsumer(group, bootstrap_servers=bootstrap, acknowledgement_mode="explicit",
                              max_poll_records=1) as holder:
            for c in (a, b, holder):
                c.subscribe([topic])
            await _warm_up(producer, a, topic)  # only a polls: the warm-up records are a's
            for i in range(10):
                await producer.send_and_wait(topic, f"rec-{i}".encode())
            held = []

            async def holds() -> bool:
                held.extend(await holder.poll(200))
                return bool(held)

            await wait_until_async(holds, timeout=30, what="the holder acquired a record")
            seen: list[tuple[str, int]] = [(held[0].value.decode(), held[0].delivery_count)]
            released: list[str] = []

            async def all_read() -> bool:
                for r in await a.poll(200):
                    if not released:
                        released.append(r.value.decode())
                        a.acknowledge(r, "RELEASE")
                    else:
                        a.acknowledge(r, "ACCEPT")
                    seen.append((r.value.decode(), r.delivery_count))
                seen.extend((r.value.decode(), r.delivery_count) for r in await b.poll(200))
                values = {v for v, _ in seen}
                return values >= {f"rec-{i}" for i in range(10)} and bool(released) and \
                    (held[0].value.decode(), 2) in seen and (released[0], 2) in seen

            await wait_until_async(all_read, timeout=60, what="every record read, the held one after its lock")
            await a.commit_sync()
            await b.commit_sync()
            return seen, held[0].value.decode(), released[0]

    seen, held, released = asyncio.run(main())
    counts: dict[str, list[int]] = {}
    for value, count in seen:
        counts.setdefault(value, []).append(count)
    assert counts[held] == [1, 2]
    assert counts[released] == [1, 2]
    assert all(c == [1] for v, c in counts.items() if v not in (held, released))


def test_bad_share_requests_get_kafkas_errors(tierlog_broker):
    """Hostile or mistaken requests are answered with the error code a client understands, the broker serving on."""
    topic, group = unique("share-bad"), unique("g")
    create_topic(tierlog_broker.bootstrap, topic)
    with raw_client(tierlog_broker.bootstrap) as raw:
        heartbeat = {"group_id": group, "member_id": "", "member_epoch": 0, "rack_id": None,
                     "subscribed_topic_names": [topic]}
        assert raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, heartbeat).error_code == 42  # INVALID_REQUEST
        joined = raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {**heartbeat, "member_id": "m1"})
        assert joined.error_code == 0 and joined.member_epoch > 0
        fenced = raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {**heartbeat, "member_id": "m1", "member_epoch": 99,
                                                                "subscribed_topic_names": None})
        assert fenced.error_code == 110  # FENCED_MEMBER_EPOCH
        topic_id = joined.assignment.topic_partitions[0].topic_id
        fetch = {"group_id": group, "member_id": "m1", "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
                 "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [],
                 "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 0, "last_offset": 2**62, "acknowledge_types": [1]}]}]}]}
        assert raw.request(ApiKey.SHARE_FETCH, 1, fetch).error_code == 42  # acknowledging in the initial request
        assert raw.request(ApiKey.SHARE_FETCH, 1, {**fetch, "share_session_epoch": 5}).error_code == 122
        opened = raw.request(ApiKey.SHARE_FETCH, 1, {**fetch, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
        assert opened.error_code == 0
        assert raw.request(ApiKey.SHARE_FETCH, 1, {**fetch, "share_session_epoch": 7}).error_code == 123
        huge = raw.request(ApiKey.SHARE_FETCH, 1, {**fetch, "share_session_epoch": 1})  # a 2**62-record ack
        assert huge.error_code == 0
        assert huge.responses[0].partitions[0].acknowledge_error_code == 121  # INVALID_RECORD_STATE, at once
        ack = {"group_id": group, "member_id": "m1", "share_session_epoch": 0, "topics": []}
        assert raw.request(ApiKey.SHARE_ACKNOWLEDGE, 1, ack).error_code == 123  # epoch 0 opens nothing
        unknown = {**fetch, "share_session_epoch": 2, "topics": [
            {"topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}
        answered = raw.request(ApiKey.SHARE_FETCH, 1, unknown)
        assert [p.error_code for t in answered.responses for p in t.partitions] == [100]  # UNKNOWN_TOPIC_ID
        assert raw.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group, "nope"],
                                                             "include_authorized_operations": False}
                           ).groups[1].error_code == 69  # GROUP_ID_NOT_FOUND
        alter = raw.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        assert alter.error_code == 68  # NON_EMPTY_GROUP: m1 is a member


def _joined_share_group(bootstrap: str, group: str) -> None:
    """A share group with one member (a raw ShareGroupHeartbeat), once the broker has its group coordinator."""
    topic = unique("share-list")
    create_topic(bootstrap, topic)
    with raw_client(bootstrap) as raw:
        def joined() -> bool:
            found = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            if found.coordinators[0].error_code:
                return False  # __consumer_offsets still being made
            return raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": [topic]}).error_code == 0

        wait_until(joined, timeout=60, what=f"a share group {group} to form")


def _group_listings(bootstrap: str, group: str, tool) -> dict:
    """What ListGroups (v3-5, with types and states filters) and DescribeGroups answer about ``group``, and
    whether kafka-share-groups --list and kafka-consumer-groups --list show it."""
    out: dict = {}
    with raw_client(bootstrap) as raw:
        for version, filters in [(5, {}), (5, {"types_filter": ["share"]}),
                                 (5, {"types_filter": ["consumer", "classic"]}),
                                 (5, {"states_filter": ["stable"]}), (5, {"states_filter": ["Empty"]}),
                                 (5, {"types_filter": ["Share"], "states_filter": ["Stable"]}), (4, {}), (3, {})]:
            listed = raw.request(ApiKey.LIST_GROUPS, version, filters)
            out[(version, str(filters))] = (listed.error_code, [g for g in listed.groups if g.group_id == group])
        described = raw.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
        out["describe"] = [(g.error_code, g.group_state, g.protocol_type, len(g.members)) for g in described.groups]
    for command in ("ShareGroupCommand", "ConsumerGroupCommand"):
        listed = tool(f"org.apache.kafka.tools.consumer.group.{command}", "--bootstrap-server", bootstrap, "--list")
        out[command] = group in listed.stdout.split()
    return out


def test_share_groups_in_the_group_listings_as_kafka_44(tierlog_broker, kafka44, tools):
    """ListGroups lists a share group as Kafka 4.4 does (group type and protocol type "share", state Stable with
    a member, the types and states filters, v3 and v4 too), DescribeGroups answers it as a group it does not
    know (Dead, no error), kafka-share-groups --list shows it and kafka-consumer-groups --list does not."""
    answers = []
    for broker in (tierlog_broker, kafka44):
        group = unique("listed")
        _joined_share_group(broker.bootstrap, group)
        answers.append(_group_listings(broker.bootstrap, group, tools))
        listed = answers[-1][(5, "{}")][1]
        assert [(g.protocol_type, g.group_state, g.group_type) for g in listed] == [("share", "Stable", "share")]
        answers[-1] = {k: (v[0], [(g.protocol_type, getattr(g, "group_state", None), getattr(g, "group_type", None))
                                  for g in v[1]]) if isinstance(v, tuple) else v for k, v in answers[-1].items()}
    assert answers[0] == answers[1]
    assert answers[0]["ShareGroupCommand"] and not answers[0]["ConsumerGroupCommand"]


def _group_configs(bootstrap: str, group: str) -> dict:
    """Kafka's GROUP config resource (type 32) on ``group``: refusals of bad values, the share configs set and
    described, then a new share group reading from the earliest offset with the group's lock duration."""
    topic = unique("share-cfg")
    create_topic(bootstrap, topic)

    async def produce():
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(4):
                await producer.send(topic, f"rec-{i}".encode())
            await producer.flush()
        # a transaction aborted (its records archived for a read_committed group), then one committed
        async with Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tid")}) as producer:
            await producer.init_transactions()
            for outcome in ("aborted", "committed"):
                producer.begin_transaction()
                await producer.send(topic, f"{outcome}-0".encode())
                await producer.send(topic, f"{outcome}-1".encode())
                await producer.flush()
                await (producer.abort_transaction() if outcome == "aborted" else producer.commit_transaction())

    asyncio.run(produce())  # before the group exists: with the default (latest) it would never see them
    out: dict = {}

    def alter(raw, *configs, op=0):
        answer = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 32, "resource_name": group,
             "configs": [{"name": n, "config_operation": op, "value": v} for n, v in configs]}]})
        return answer.responses[0].error_code, answer.responses[0].error_message

    def describe(raw):
        keys = ["share.auto.offset.reset", "share.record.lock.duration.ms", "share.isolation.level"]
        answer = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"include_synonyms": True, "include_documentation": False,
                                                          "resources": [{"resource_type": 32, "resource_name": group,
                                                                         "configuration_keys": keys}]})
        # the broker's lock duration differs (this module's tierlog sets 3000): its default is named, not valued
        return sorted((c.name, "broker's" if c.config_source == 5 and "lock" in c.name else c.value,
                       c.config_source, c.config_type, c.read_only,
                       [(s.name, s.source) for s in c.synonyms]) for c in answer.results[0].configs)

    def settled(raw, sources: dict[str, int]):
        """describe() once every named config has the wanted source: Kafka 4.4 answers an alter once its
        controller committed it, and its broker applies the metadata record a moment later."""
        seen: list = []

        def applied() -> bool:
            seen[:] = describe(raw)
            return all((c[0] not in sources) or (c[2] == 8) == (sources[c[0]] == 8) for c in seen)

        wait_until(applied, timeout=15, what=f"the group configs applied as {sources}")
        return seen

    with raw_client(bootstrap) as raw:
        out["defaults"] = describe(raw)
        out["bad reset"] = alter(raw, ("share.auto.offset.reset", "bogus"))
        out["bad duration"] = alter(raw, ("share.auto.offset.reset", "by_duration:-PT1H"))
        out["short lock"] = alter(raw, ("share.record.lock.duration.ms", "1000"))
        out["bad isolation"] = alter(raw, ("share.isolation.level", "none"))[0]
        out["unknown"] = alter(raw, ("no.such.config", "1"))
        out["set"] = alter(raw, ("share.auto.offset.reset", "earliest"), ("share.record.lock.duration.ms", "20000"),
                           ("share.isolation.level", "read_committed"))
        out["described"] = settled(raw, dict.fromkeys(
            ["share.auto.offset.reset", "share.record.lock.duration.ms", "share.isolation.level"], 8))
        out["reset back"] = alter(raw, ("share.isolation.level", ""), op=1)
        out["after delete"] = settled(raw, {"share.isolation.level": 5})
        out["committed again"] = alter(raw, ("share.isolation.level", "read_committed"))
        settled(raw, {"share.isolation.level": 8})  # before the group reads
        out["append"] = alter(raw, ("share.auto.offset.reset", "earliest"), op=2)
        out["no name"] = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 32, "resource_name": "", "configs": []}]}).responses[0].error_message
        legacy = raw.request(ApiKey.ALTER_CONFIGS, 2, {"validate_only": False, "resources": [  # kafka-configs --alter
            {"resource_type": 32, "resource_name": group + "-other",
             "configs": [{"name": "share.auto.offset.reset", "value": "by_duration:PT1H"}]}]})
        out["legacy"] = [(r.error_code, r.error_message) for r in legacy.responses]

    async def consume():
        read = []
        async with ShareConsumer(group, bootstrap_servers=bootstrap) as consumer:
            consumer.subscribe([topic])

            async def all_read() -> bool:
                read.extend((r.offset, r.delivery_count, r.value.decode()) for r in await consumer.poll(500))
                return len(read) >= 6

            await wait_until_async(all_read, timeout=60, what="the records produced before the group existed")
            await consumer.commit_sync()
        return sorted(read)

    out["read"] = asyncio.run(consume())
    with raw_client(bootstrap) as raw:  # a member's ShareFetch carries the group's lock duration
        member = uuid.uuid4().hex[:22]
        joined = raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": group, "member_id": member,
                                                                "member_epoch": 0, "rack_id": None,
                                                                "subscribed_topic_names": [topic]})
        fetched = raw.request(ApiKey.SHARE_FETCH, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [], "topics": []})
        out["lock"] = (joined.error_code, fetched.error_code, fetched.acquisition_lock_timeout)
        raw.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": -1,
                                                       "rack_id": None, "subscribed_topic_names": None})
    return out


def test_share_group_configs_as_kafka_44(tierlog_broker, kafka44):
    """kafka-configs --entity-type groups on a share group, against tierlog and Kafka 4.4 alike: the same
    defaults, refusals (INVALID_CONFIG with Kafka's messages), described overrides and DELETE; a group set to
    share.auto.offset.reset=earliest reads the records produced before it existed, with share.isolation.level
    read_committed not those of an aborted transaction, and its ShareFetch answers carry its
    share.record.lock.duration.ms."""
    answers = [_group_configs(b.bootstrap, unique("cfg")) for b in (tierlog_broker, kafka44)]
    tierlog, kafka = answers
    # offsets 4-5 aborted, 6 its marker, 7-8 committed
    assert kafka["read"] == [(i, 1, f"rec-{i}") for i in range(4)] + [(7, 1, "committed-0"), (8, 1, "committed-1")]
    assert kafka["lock"] == (0, 0, datetime.timedelta(milliseconds=20000))
    for key in kafka:
        assert (key, tierlog[key]) == (key, kafka[key])
