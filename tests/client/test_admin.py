"""tierlog's asyncio Admin against a live ``tierlog broker``: every operation's result and its
errors (typed, with the broker's message), retries and timeouts, and a broker restart mid-call.

Most tests share one broker (module scope) and use their own topic and group names; records are
produced with kafka-python, a client independent of tierlog's."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

from tests.harness.broker import BrokerProcess
from tests.harness.ports import PortReservation
from tests.harness.waiting import not_yet, wait_until
from tierlog import errors
from tierlog.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    ListOffsetsResult,
    NewPartitions,
    NewTopic,
    ReplicaInfo,
)
from tierlog.client.cluster import Node
from tierlog.client.errors import IllegalStateError, KafkaConnectionError, KafkaTimeoutError
from tierlog.client.types import OffsetAndMetadata, TopicPartition

FAST = {"retry.backoff.ms": 50, "retry.backoff.max.ms": 200}
# Topics whose records carry fixed old timestamps keep them: under the default retention.ms (7 days) the broker's
# retention check, first run on its first housekeeping tick, would delete them as soon as they are written.
KEEP = {"retention.ms": "-1"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> BrokerProcess:
    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "logs", {})
    b.start()
    yield b
    b.kill()


def run_admin(bootstrap: str, scenario, **settings):
    """Run ``await scenario(admin)`` with a started Admin, closed afterwards; returns its result."""
    async def main():
        async with Admin({**FAST, "bootstrap.servers": bootstrap, **settings}) as admin:
            return await scenario(admin)

    return asyncio.run(asyncio.wait_for(main(), 90))


def produce(bootstrap: str, topic: str, timestamps: list[int], partition: int = 0) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i, ts in enumerate(timestamps):
            p.send(topic, f"v{i}".encode(), partition=partition, timestamp_ms=ts)
        p.flush()
    finally:
        p.close()


# ---------------------------------------------------------------------------------------------------
# Settings and lifecycle (no broker needed)
# ---------------------------------------------------------------------------------------------------


def test_settings_are_checked_at_construction():
    with pytest.raises(errors.InvalidConfigError, match="request.timeout.ms"):
        Admin(bootstrap_servers="127.0.0.1:9092", request_timeout_ms="soon")
    with pytest.raises(errors.InvalidConfigError, match="bootstrap.servers"):
        Admin({"bootstrap.servers": "no-port-here"})
    with pytest.raises(errors.InvalidConfigError, match="bootstrap.servers"):
        Admin()
    # dotted names and underscored keywords mean the same; keywords win
    a = Admin({"bootstrap.servers": "127.0.0.1:1", "default.api.timeout.ms": 5000}, default_api_timeout_ms=7000)
    assert a.config["default.api.timeout.ms"] == 7000 and a.config["bootstrap.servers"] == ["127.0.0.1:1"]


def test_timeouts_retries_and_closed_admin():
    nobody = PortReservation()  # nobody listens there, and no other test's broker can come to
    port = nobody.port

    async def scenario():
        async with Admin(bootstrap_servers=f"127.0.0.1:{port}", default_api_timeout_ms=1500, **{
                k.replace(".", "_"): v for k, v in FAST.items()}) as admin:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                await admin.list_topics()
            assert 1.0 < time.monotonic() - t0 < 5
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError):  # the per-call timeout overrides default.api.timeout.ms
                await admin.describe_cluster(timeout_ms=300)
            assert time.monotonic() - t0 < 1.2
            # arguments are checked before any I/O
            with pytest.raises(ValueError, match="offset spec"):
                await admin.list_offsets({TopicPartition("t", 0): "newest"})
            with pytest.raises(ValueError, match="config operation"):
                await admin.incremental_alter_configs({("topic", "t"): [("retention.ms", "replace", "1")]})
            with pytest.raises(ValueError, match="resource type"):
                await admin.describe_configs([("table", "t")])
        with pytest.raises(IllegalStateError):
            await admin.list_topics()
        # retries=0: the first retriable error is raised as it is
        async with Admin(bootstrap_servers=f"127.0.0.1:{port}", retries=0) as admin:
            t0 = time.monotonic()
            with pytest.raises(KafkaConnectionError):
                await admin.list_topics()
            assert time.monotonic() - t0 < 5

    try:
        asyncio.run(scenario())
    finally:
        nobody.close()


# ---------------------------------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------------------------------


def test_create_list_describe_delete_topics(shared):
    async def scenario(admin: Admin):
        created = await admin.create_topics([NewTopic("orders", 3, 1, {"retention.ms": 60000,
                                                                       "cleanup.policy": "compact"})])
        r = created["orders"]
        assert (r.name, r.num_partitions, r.replication_factor) == ("orders", 3, 1) and r.topic_id is not None
        assert (r.configs["retention.ms"].value, r.configs["retention.ms"].source) == (
            "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert r.configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG

        # validate_only answers as if created, and creates nothing
        dry = await admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
        assert dry["dry"].num_partitions == 2
        listed = await admin.list_topics()
        assert "orders" in listed and "dry" not in listed
        assert listed["orders"].topic_id == r.topic_id and not listed["orders"].internal

        described = (await admin.describe_topics(["orders"]))["orders"]
        assert (described.topic_id, described.internal) == (r.topic_id, False)
        assert [(p.partition, p.leader, p.replicas, p.isr) for p in described.partitions] == [
            (p, 1, (1,), (1,)) for p in range(3)]

        # manual assignment: partition count and replication factor come from it
        placed = await admin.create_topics([NewTopic("placed", assignments={0: [1], 1: [1]})])
        assert placed["placed"].num_partitions == 2

        with pytest.raises(errors.TopicAlreadyExistsError, match="Topic 'orders' already exists."):
            await admin.create_topics([NewTopic("orders", 1, 1)])
        assert await admin.create_topics(["orders"], ignore_existing=True) == {"orders": None}

        with pytest.raises(errors.InvalidPartitionsError,
                           match="Number of partitions was set to an invalid non-positive value."):
            await admin.create_topics([NewTopic("zero", 0, 1)])
        with pytest.raises(errors.InvalidReplicationFactorError, match="Unable to replicate the partition 3"):
            await admin.create_topics([NewTopic("many", 1, 3)])
        with pytest.raises(errors.InvalidConfigError) as e:
            await admin.create_topics([NewTopic("badcfg", 1, 1, {"segment.bytes": -1})])
        assert str(e.value) == "Invalid value -1 for configuration segment.bytes: Value must be at least 14"

        # several topics: the first failure is raised; every outcome is on the exception
        with pytest.raises(errors.TopicAlreadyExistsError) as e:
            await admin.create_topics([NewTopic("fresh", 1, 1), NewTopic("orders", 1, 1), NewTopic("bad/name")])
        assert list(e.value.results) == ["fresh"] and e.value.results["fresh"].num_partitions == 1
        assert {k: type(v) for k, v in e.value.errors.items()} == {
            "orders": errors.TopicAlreadyExistsError, "bad/name": errors.InvalidTopicError}

        await admin.delete_topics(["orders", "fresh"])
        assert not {"orders", "fresh"} & set(await admin.list_topics())
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.delete_topics(["orders"])
        with pytest.raises(errors.UnknownTopicOrPartitionError, match="Topic orders not found."):
            await admin.describe_topics(["orders"])

    run_admin(shared.bootstrap, scenario)


def test_list_topics_internal(shared):
    run_admin(shared.bootstrap, lambda admin: admin.create_topics([NewTopic("committed", 1, 1)]))
    # a committed offset creates __consumer_offsets
    c = KafkaConsumer(bootstrap_servers=shared.bootstrap, group_id="internal-g", enable_auto_commit=False)
    try:
        c.commit({KpTopicPartition("committed", 0): KpOffsetAndMetadata(1, "", -1)})
    finally:
        c.close()

    async def scenario(admin: Admin):
        assert "__consumer_offsets" not in await admin.list_topics()
        everything = await admin.list_topics(internal=True)
        assert everything["__consumer_offsets"].internal
        assert (await admin.describe_topics(["__consumer_offsets"]))["__consumer_offsets"].internal

    run_admin(shared.bootstrap, scenario)


def test_create_partitions(shared):
    async def scenario(admin: Admin):
        await admin.create_topics([NewTopic("grow", 2, 1)])
        await admin.create_partitions({"grow": 3}, validate_only=True)
        assert len((await admin.describe_topics(["grow"]))["grow"].partitions) == 2
        await admin.create_partitions({"grow": 4})
        await admin.create_partitions({"grow": NewPartitions(5, assignments=[[1]])})
        assert len((await admin.describe_topics(["grow"]))["grow"].partitions) == 5
        with pytest.raises(errors.InvalidPartitionsError, match=r"Topic already has 5 partition\(s\)."):
            await admin.create_partitions({"grow": 5})
        with pytest.raises(errors.InvalidPartitionsError, match="2 would not be an increase"):
            await admin.create_partitions({"grow": 2})
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.create_partitions({"no-such-topic": 2})

    run_admin(shared.bootstrap, scenario)


# ---------------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------------


def test_describe_and_alter_configs(shared):
    topic = ("topic", "conf")

    async def scenario(admin: Admin):
        await admin.create_topics([NewTopic("conf", 1, 1, {"retention.ms": "60000"})])
        got = await admin.describe_configs([topic, ConfigResource("broker", "1")], include_synonyms=True)
        entries = got[topic]
        assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
            "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert [s.source for s in entries["retention.ms"].synonyms][0] == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert entries["cleanup.policy"].type == "list" and not entries["cleanup.policy"].read_only
        broker = got[("broker", "1")]  # a ConfigResource is a tuple: either spelling finds it
        assert broker["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG
        assert broker["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG
        # an int broker id routes the same and keys the answer as given
        only = await admin.describe_configs([("broker", 1)], config_names=["num.partitions"])
        assert list(only[("broker", 1)]) == ["num.partitions"]

        await admin.incremental_alter_configs({topic: [
            ("cleanup.policy", "append", "compact"), AlterConfigOp("retention.ms", "delete"),
            ("segment.ms", "set", 3600000)]})
        entries = (await admin.describe_configs([topic]))[topic]
        assert entries["cleanup.policy"].value == "delete,compact"
        assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG
        assert (entries["segment.ms"].value, entries["segment.ms"].source) == (
            "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        await admin.incremental_alter_configs({topic: [("cleanup.policy", "subtract", "compact")]})
        assert (await admin.describe_configs([topic]))[topic]["cleanup.policy"].value == "delete"

        # validate_only changes nothing
        await admin.incremental_alter_configs({topic: [("segment.ms", "set", 1000)]}, validate_only=True)
        assert (await admin.describe_configs([topic]))[topic]["segment.ms"].value == "3600000"

        # the legacy AlterConfigs replaces the whole set: segment.ms goes back to its default
        await admin.alter_configs({topic: {"max.message.bytes": 2000000}})
        entries = (await admin.describe_configs([topic]))[topic]
        assert entries["max.message.bytes"].value == "2000000"
        assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG

        # a dynamic broker setting, sent to that broker
        await admin.incremental_alter_configs({("broker", 1): [("log.retention.ms", "set", "7200000")]})
        entry = (await admin.describe_configs([("broker", 1)], config_names=["log.retention.ms"]))[("broker", 1)]
        assert (entry["log.retention.ms"].value, entry["log.retention.ms"].source) == (
            "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        await admin.incremental_alter_configs({("broker", 1): [("log.retention.ms", "delete")]})

        # errors carry the broker's message
        with pytest.raises(errors.InvalidConfigError,
                           match="Invalid value abc for configuration retention.ms: Not a number of type long"):
            await admin.incremental_alter_configs({topic: [("retention.ms", "set", "abc")]})
        with pytest.raises(errors.InvalidConfigError, match="Value must be at least 14"):
            await admin.alter_configs({topic: {"segment.bytes": 1}})
        with pytest.raises(errors.InvalidRequestError, match="log.retention.ms"):  # Kafka: broker configs
            await admin.incremental_alter_configs({("broker", 1): [("log.retention.ms", "set", "abc")]})
        with pytest.raises(errors.UnknownTopicOrPartitionError) as e:
            await admin.describe_configs([topic, ("topic", "absent")])
        assert list(e.value.results) == [topic] and list(e.value.errors) == [("topic", "absent")]
        with pytest.raises(errors.InvalidRequestError, match="Broker id must be an integer, but it is: x"):
            await admin.describe_configs([("broker_logger", "x")])

    run_admin(shared.bootstrap, scenario)


def test_broker_resource_of_an_unknown_broker_times_out(shared):
    async def scenario(admin: Admin):
        # 3 s: with 1 s a loaded machine once spent the budget before the first metadata update came back
        with pytest.raises(KafkaTimeoutError, match="broker 7 is not in the cluster metadata"):
            await admin.describe_configs([("broker", 7)], timeout_ms=3000)

    run_admin(shared.bootstrap, scenario)


# ---------------------------------------------------------------------------------------------------
# Offsets and records
# ---------------------------------------------------------------------------------------------------


def test_list_offsets_for_every_spec_and_delete_records(shared):
    tp, empty = TopicPartition("offs", 0), TopicPartition("offs", 1)
    base = 1_700_000_000_000
    stamps = [base, base + 30, base + 90, base + 20, base + 50]  # the newest is at offset 2

    async def create(admin: Admin):
        await admin.create_topics([NewTopic("offs", 2, 1, KEEP)])

    run_admin(shared.bootstrap, create)
    produce(shared.bootstrap, "offs", stamps)

    async def scenario(admin: Admin):
        async def one(spec, part=tp, **kw):
            return (await admin.list_offsets({part: spec}, **kw))[part]

        assert await one("earliest") == ListOffsetsResult(0, -1, 0)
        assert await one(-2) == ListOffsetsResult(0, -1, 0)
        assert await one("latest") == ListOffsetsResult(5, -1, 0)
        assert await one("latest", isolation_level="read_committed") == ListOffsetsResult(5, -1, 0)
        assert await one("max_timestamp") == ListOffsetsResult(2, base + 90, 0)
        assert await one("earliest_local") == ListOffsetsResult(0, -1, 0)
        assert (await one("latest_tiered")).offset == -1  # nothing tiered
        assert await one(base + 25) == ListOffsetsResult(1, base + 30, 0)  # first offset at or after it
        assert (await one(base + 1000)).offset == -1
        assert (await one("latest", empty)).offset == 0
        both = await admin.list_offsets({tp: "earliest", empty: "max_timestamp"})
        assert list(both) == [tp, empty] and both[empty].offset == -1

        with pytest.raises(errors.UnknownTopicOrPartitionError) as e:
            await admin.list_offsets({tp: "latest", TopicPartition("offs", 9): "latest",
                                      TopicPartition("missing", 0): "latest"})
        assert e.value.results == {tp: ListOffsetsResult(5, -1, 0)} and len(e.value.errors) == 2

        # DeleteRecords moves the log start offset; earliest (and earliest local) follow it
        assert await admin.delete_records({tp: 3}) == {tp: 3}
        assert (await one("earliest")).offset == 3 and (await one("earliest_local")).offset == 3
        assert await admin.delete_records({("offs", 0): 1}) == {tp: 3}  # never backwards
        with pytest.raises(errors.OffsetOutOfRangeError):
            await admin.delete_records({tp: 99})
        assert await admin.delete_records({tp: -1}) == {tp: 5}  # -1: up to the high watermark
        assert (await one("earliest")).offset == 5
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.delete_records({TopicPartition("missing", 0): 0})

    run_admin(shared.bootstrap, scenario)


# ---------------------------------------------------------------------------------------------------
# Cluster and groups
# ---------------------------------------------------------------------------------------------------


def test_describe_cluster(shared):
    async def scenario(admin: Admin):
        return await admin.describe_cluster()

    d = run_admin(shared.bootstrap, scenario)
    assert len(d.cluster_id) == 22 and d.controller_id == 1
    assert d.brokers == [Node(1, "127.0.0.1", shared.port, None)] and d.controller == d.brokers[0]


def test_calls_wait_for_the_metadata_that_names_the_brokers(shared):
    """As Kafka's AdminClient: while only bootstrap addresses are known, a call first learns the brokers and
    then goes to one the metadata names, never to a bootstrap address (with metadata.recovery.strategy=none,
    one the cluster left: the rebootstrap test met that as a flake). The client's background metadata loop is
    held until the call is done, so the call cannot be saved by it."""
    async def main():
        admin = Admin({**FAST, "bootstrap.servers": shared.bootstrap})
        client = admin._client
        release_loop = asyncio.Event()
        sent_while_bootstrapped: list[bool] = []
        real_loop, real_send_any = client._metadata_loop, client.send_any

        async def held_loop():
            await release_loop.wait()
            await real_loop()

        async def recording_send_any(api_key, values, **kwargs):
            sent_while_bootstrapped.append(client.cluster.bootstrapped)
            return await real_send_any(api_key, values, **kwargs)

        client._metadata_loop, client.send_any = held_loop, recording_send_any
        async with admin:
            topics = await admin.list_topics()
            release_loop.set()
        return topics, sent_while_bootstrapped

    topics, sent_while_bootstrapped = asyncio.run(asyncio.wait_for(main(), 60))
    assert isinstance(topics, dict) and sent_while_bootstrapped == [False]


def test_describe_log_dirs(shared):
    """Every partition the broker hosts, in its one log dir, sized as its segment files on disk; the
    volume's bytes as statvfs gives them; a broker that is not in the cluster times out."""
    run_admin(shared.bootstrap, lambda admin: admin.create_topics([NewTopic("dirs", 2, 1, KEEP)]))
    produce(shared.bootstrap, "dirs", [1_700_000_000_000] * 3, partition=1)

    async def scenario(admin: Admin):
        every, one = await admin.describe_log_dirs(), await admin.describe_log_dirs([1])
        with pytest.raises(KafkaTimeoutError, match="broker 7 is not in the cluster metadata"):
            await admin.describe_log_dirs([7], timeout_ms=1000)
        return every, one

    every, one = run_admin(shared.bootstrap, scenario)
    log_dir = str(shared.log_dir)
    assert list(every) == [1] and list(every[1]) == [log_dir] and list(one[1]) == [log_dir]
    d = every[1][log_dir]
    assert d.error is None
    on_disk = [sum(f.stat().st_size for f in (shared.log_dir / f"dirs-{p}").glob("*.log")) for p in (0, 1)]
    assert on_disk[0] == 0 and on_disk[1] > 0
    for p in (0, 1):
        assert d.replica_infos[TopicPartition("dirs", p)] == ReplicaInfo(on_disk[p], 0, False)
    assert d.total_bytes == os.statvfs(log_dir).f_blocks * os.statvfs(log_dir).f_frsize
    assert 0 < d.usable_bytes <= d.total_bytes


def test_consumer_groups(shared):
    run_admin(shared.bootstrap, lambda admin: admin.create_topics([NewTopic("grp", 2, 1, KEEP)]))
    produce(shared.bootstrap, "grp", [1, 2, 3])
    # a simple group: offsets committed without membership
    simple = KafkaConsumer(bootstrap_servers=shared.bootstrap, group_id="simple-g", enable_auto_commit=False)
    simple.commit({KpTopicPartition("grp", 0): KpOffsetAndMetadata(2, "meta", -1)})
    simple.close()
    # a consumer group with a live member
    member = KafkaConsumer("grp", bootstrap_servers=shared.bootstrap, group_id="live-g", client_id="live-client",
                           enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        seen = [0]

        def read():
            if seen[0] >= 3:
                return True
            # A long poll: kafka-python 3.0.12 leaves a join that outlasts poll()'s timeout unfinished for good
            # (the next polls see no rejoin needed and never apply the assignment), which a loaded machine hit.
            seen[0] += sum(len(batch) for batch in member.poll(timeout_ms=10000).values())
            return not_yet(seen[0])

        wait_until(read, 30, interval=0, what="3 records (how many arrived)")
        assert seen[0] == 3
        member.commit()

        async def while_live(admin: Admin):
            listed = {g.group_id: g for g in await admin.list_consumer_groups()}
            assert listed["simple-g"].is_simple_consumer_group and listed["simple-g"].state == "Empty"
            assert (listed["live-g"].protocol_type, listed["live-g"].state) == ("consumer", "Stable")
            empty = {g.group_id for g in await admin.list_consumer_groups(states=["Empty"])}
            assert "simple-g" in empty and "live-g" not in empty

            d = await admin.describe_consumer_groups(["live-g", "simple-g"])
            live = d["live-g"]
            assert (live.state, live.protocol_type, live.protocol) == ("Stable", "consumer", "range")
            assert live.coordinator.node_id == 1 and len(live.members) == 1
            m = live.members[0]
            assert m.client_id == "live-client"
            assert sorted(m.assignment) == [TopicPartition("grp", 0), TopicPartition("grp", 1)]
            assert (d["simple-g"].state, d["simple-g"].members) == ("Empty", [])
            # DescribeGroups v6 (KIP-1043): an unknown group is an error, as Kafka 4.4's admin reports it
            with pytest.raises(errors.GroupIdNotFoundError):
                await admin.describe_consumer_groups(["never-g"])

            offsets = await admin.list_consumer_group_offsets("simple-g")
            assert offsets == {TopicPartition("grp", 0): OffsetAndMetadata(2, "meta", -1)}
            some = await admin.list_consumer_group_offsets("simple-g", [("grp", 0), ("grp", 1)])
            assert some[TopicPartition("grp", 1)] is None
            live_offsets = await admin.list_consumer_group_offsets("live-g")
            assert sum(o.offset for o in live_offsets.values()) == 3

            with pytest.raises(errors.NonEmptyGroupError) as e:
                await admin.delete_consumer_groups(["simple-g", "live-g"])
            assert list(e.value.results) == ["simple-g"]
            with pytest.raises(errors.GroupIdNotFoundError):
                await admin.delete_consumer_groups(["simple-g"])

        run_admin(shared.bootstrap, while_live)
    finally:
        member.close()

    async def after(admin: Admin):
        await admin.delete_consumer_groups(["live-g"])
        assert "live-g" not in {g.group_id for g in await admin.list_consumer_groups()}

    run_admin(shared.bootstrap, after)


# ---------------------------------------------------------------------------------------------------
# Broker restart
# ---------------------------------------------------------------------------------------------------


def test_calls_are_retried_across_a_broker_restart(broker, caplog):
    caplog.set_level(logging.DEBUG, logger="tierlog.client")

    async def scenario():
        async with Admin({**FAST, "bootstrap.servers": broker.bootstrap}) as admin:
            created = await admin.create_topics([NewTopic("durable", 2, 1)])
            restart = asyncio.ensure_future(asyncio.to_thread(broker.restart))
            while broker.port is not None:  # None between the stop and the new start
                await asyncio.sleep(0.01)
            # the broker is down: the call fails, is retried, and succeeds once it is back
            described = await admin.describe_topics(["durable"])
            await restart
            assert described["durable"].topic_id == created["durable"].topic_id
            assert len(described["durable"].partitions) == 2
            more = await admin.create_topics([NewTopic("later", 1, 1)])
            assert more["later"].num_partitions == 1

    asyncio.run(asyncio.wait_for(scenario(), 90))
    # the call did meet the dead broker and was retried (retry_until logs each retry)
    assert any(r.getMessage().startswith("describe_topics failed") for r in caplog.records)


def test_a_consumer_protocol_group_is_listed_with_its_type_and_described_with_consumer_group_describe(shared):
    """DescribeGroups answers a KIP-848 group GROUP_ID_NOT_FOUND (v6; Dead before); the admin then asks
    ConsumerGroupDescribe (as Kafka's describeConsumerGroups does), and ListGroups v5 gives each group's type."""
    from tierlog.client.consumer import Consumer

    run_admin(shared.bootstrap, lambda admin: admin.create_topics([NewTopic("grp848", 2, 1, KEEP)]))
    produce(shared.bootstrap, "grp848", [1, 2, 3])
    produce(shared.bootstrap, "grp848", [4, 5], partition=1)

    async def scenario(admin: Admin):
        async with Consumer({"bootstrap.servers": shared.bootstrap, "group.id": "g848", "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "client.id": "c848"}) as consumer:
            consumer.subscribe(["grp848"])
            read = 0
            deadline = time.monotonic() + 60
            while read < 5 and time.monotonic() < deadline:
                read += sum(len(rs) for rs in (await consumer.poll(timeout_ms=500)).values())
            assert read == 5
            listed = {g.group_id: g for g in await admin.list_consumer_groups()}
            assert (listed["g848"].group_type, listed["g848"].protocol_type) == ("consumer", "consumer")
            d = (await admin.describe_consumer_groups(["g848"]))["g848"]
            assert (d.group_type, d.state, d.protocol_type, d.protocol) == ("consumer", "Stable", "consumer", "uniform")
            assert d.group_epoch >= 1 and d.assignment_epoch == d.group_epoch
            (m,) = d.members
            assert m.client_id == "c848" and m.member_epoch == d.group_epoch
            assert sorted(m.assignment) == [TopicPartition("grp848", 0), TopicPartition("grp848", 1)]
            # a group that is not there at all: GROUP_ID_NOT_FOUND from both APIs (DescribeGroups v6, KIP-1043)
            with pytest.raises(errors.GroupIdNotFoundError):
                await admin.describe_consumer_groups(["never-848"])
    run_admin(shared.bootstrap, scenario)
