"""Apache Kafka 3.9 in ZooKeeper mode, the reference for tierlog's ZooKeeper clusters: three brokers on the
test ZooKeeper under a chroot of their own. Kafka's own tools create a replicated topic and show its
leaders spread over the brokers; a broker killed with SIGKILL loses its leaderships to the ISR and is
listed among the offline replicas. The Metadata shapes seen here are what tierlog's cluster is compared
with (tests/harness/cluster_shapes.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter

import pytest

from tests.harness import apache_kafka
from tests.harness.cluster_shapes import metadata_shape
from tests.harness.rawclient import create_topic_in_cluster, metadata, unique
from tests.harness.waiting import wait_until
from tests.peer.client_versions import round_trip, sent_versions
from tierlog.client.admin import Admin


@pytest.fixture(scope="module")
def kafka39(zookeeper, kafka_zk_jars, tmp_path_factory):
    cluster = apache_kafka.start_kafka_zk_cluster(tmp_path_factory.mktemp("kafka39"), zookeeper, brokers=3)
    yield cluster
    started = time.monotonic()
    cluster.stop()
    print(f"\nKafka {apache_kafka.ZK_KAFKA_VERSION} cluster stopped in {time.monotonic() - started:.1f}s")


def _until(probe, what: str, timeout: float = 60):
    """Poll ``probe`` (a value, or None to go on) until it returns something, or fail naming ``what``."""
    # (in a list: a falsy value other than None is an answer too)
    return wait_until(lambda: None if (v := probe()) is None else [v], timeout, interval=0.2, what=what)[0]


def _fully_replicated(bootstrap: str, topic: str, partitions: int, replicas: int):
    md = metadata(bootstrap, [topic])
    t = md.topics[0]
    if t.error_code == 0 and len(t.partitions) == partitions and all(
            p.error_code == 0 and p.leader_id >= 0 and len(p.isr_nodes) == replicas for p in t.partitions):
        return md
    return None


def test_topic_command_spreads_leaders_over_the_brokers(kafka39, kafka_zk_tool):
    topic = unique("zk-spread")
    out = kafka_zk_tool("TopicCommand", "--bootstrap-server", kafka39.bootstrap, "--create", "--topic", topic,
                        "--partitions", "6", "--replication-factor", "3").stdout
    assert out.strip() == f"Created topic {topic}."
    # every broker learns the new leaders from the controller (UpdateMetadata); wait before describing
    for broker in kafka39.brokers.values():
        _until(lambda b=broker: _fully_replicated(b.bootstrap, topic, 6, 3), f"{topic} led on {broker.bootstrap}")

    described = kafka_zk_tool("TopicCommand", "--bootstrap-server", kafka39.bootstrap, "--describe",
                              "--topic", topic).stdout
    lines = [line.strip() for line in described.splitlines() if line.strip()]
    head = dict(re.findall(r"(\w+): ([^\t]*)", lines[0]))
    parts = [dict(re.findall(r"(\w+): ([^\t]*)", line)) for line in lines[1:]]
    assert (head["Topic"], head["PartitionCount"], head["ReplicationFactor"]) == (topic, "6", "3"), described
    assert [p["Partition"] for p in parts] == [str(i) for i in range(6)], described
    for p in parts:
        assert sorted(p["Replicas"].split(",")) == ["1", "2", "3"], described
        assert sorted(p["Isr"].split(",")) == ["1", "2", "3"], described
        assert p["Leader"] == p["Replicas"].split(",")[0], described  # the preferred replica leads
    # Kafka's placement starts at a random broker and goes round: each of the three leads two partitions
    assert Counter(p["Leader"] for p in parts) == {"1": 2, "2": 2, "3": 2}, described

    shape = metadata_shape(metadata(kafka39.brokers[1].bootstrap), [topic])
    assert shape == {"brokers": 3, "controller": True, "topics": {topic: {"error": 0, "partitions": {
        i: {"leader": shape["topics"][topic]["partitions"][i]["leader"], "replicas": 3, "isr": 3, "offline": 0,
            "error": 0} for i in range(6)}}}}
    assert Counter(p["leader"] for p in shape["topics"][topic]["partitions"].values()) == {0: 2, 1: 2, 2: 2}


def test_tierlog_client_falls_back_to_the_versions_kafka39_serves(kafka39, caplog):
    """tierlog's client against Kafka 3.9 (issue 39, item 4): Produce v11 by name, Fetch v17 (topic ids are
    there from v13), OffsetFetch v9, DescribeGroups v5 (an unknown group is Dead, not an error); the same
    round trip as against Kafka 4.4 (without its KIP-848 group, which 3.9 does not serve)."""
    caplog.set_level(logging.DEBUG, logger="tierlog.client")
    versions = asyncio.run(round_trip(kafka39.bootstrap, unique("zk-versions"), unique("zk-versions-group"),
                                      kip848=False))
    assert versions == {"PRODUCE": 11, "FETCH": 17, "OFFSET_FETCH": 9, "DESCRIBE_GROUPS": 5}
    sent = sent_versions(caplog)
    assert (sent["PRODUCE"], sent["FETCH"], sent["OFFSET_FETCH"], sent["DESCRIBE_GROUPS"], sent["OFFSET_COMMIT"]
            ) == ({11}, {17}, {9}, {5}, {8})

    async def describe_unknown():
        async with Admin({"bootstrap.servers": kafka39.bootstrap}) as admin:
            return (await admin.describe_consumer_groups(["never-zk"]))["never-zk"].state
    assert asyncio.run(describe_unknown()) == "Dead"


def test_a_killed_broker_loses_its_leaderships_to_the_isr(kafka39):
    topic = unique("zk-kill")
    create_topic_in_cluster(kafka39.bootstrap, topic, 6, 3)  # sent to the controller, as Kafka's clients do
    before = _until(lambda: _fully_replicated(kafka39.brokers[1].bootstrap, topic, 6, 3), f"{topic} led")
    # a broker that leads something and is not the controller: its death is a broker failure only
    led = {p.leader_id for p in before.topics[0].partitions}
    victim = min(led - {before.controller_id})
    survivor = kafka39.brokers[min(set(kafka39.brokers) - {victim})]
    isr_before = {p.partition_index: set(p.isr_nodes) for p in before.topics[0].partitions}
    led_by_victim = sorted(p.partition_index for p in before.topics[0].partitions if p.leader_id == victim)

    kafka39.kill(victim)
    killed = time.monotonic()

    def moved():
        md = metadata(survivor.bootstrap, [topic])
        parts = md.topics[0].partitions
        if {b.node_id for b in md.brokers} == set(kafka39.brokers) - {victim} and all(
                p.leader_id not in (victim, -1) and victim not in p.isr_nodes for p in parts):
            return md
        return None

    after = _until(moved, f"broker {victim}'s partitions of {topic} to get new leaders")
    print(f"\nbroker {victim} killed: its {len(led_by_victim)} leaderships moved within "
          f"{time.monotonic() - killed:.1f}s (session timeout "
          f"{kafka39.settings['zookeeper.session.timeout.ms']} ms)")
    for p in after.topics[0].partitions:
        assert p.error_code == 0, p
        assert p.leader_id in isr_before[p.partition_index] - {victim}, p  # elected from the ISR
        assert p.leader_id in p.isr_nodes, p
        assert sorted(p.isr_nodes) == sorted(isr_before[p.partition_index] - {victim}), p
        assert list(p.offline_replicas) == [victim], p
        assert len(p.replica_nodes) == 3 and victim in p.replica_nodes, p  # the assignment stays
    assert after.controller_id in set(kafka39.brokers) - {victim}

    shape = metadata_shape(after, [topic])
    assert shape["brokers"] == 2 and shape["controller"] is True
    assert [(s["replicas"], s["isr"], s["offline"], s["error"]) for s in shape["topics"][topic]["partitions"].values()
            ] == [(3, 2, 1, 0)] * 6
    assert {s["leader"] for s in shape["topics"][topic]["partitions"].values()} <= {0, 1}

    # the broker returns on its port and logs: listed again, back in every ISR
    kafka39.brokers[victim].start()
    _until(lambda: _fully_replicated(survivor.bootstrap, topic, 6, 3), f"broker {victim} back in {topic}'s ISRs")
    assert {b.node_id for b in metadata(survivor.bootstrap).brokers} == set(kafka39.brokers)
