"""Apache Kafka's own tools and Java client against three tierlog brokers in ZooKeeper mode: kafka-topics
creates and describes a replicated topic through a broker that is not the controller, the console producer
and consumer go through each broker, and kafka-leader-election runs preferred and unclean elections."""

from __future__ import annotations

import re

import pytest

from tests.harness.rawclient import unique
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, in_parallel, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("tools-cluster"), zookeeper, brokers=3)
    yield c
    c.stop()


def describe(kafka_tool, bootstrap: str, topic: str) -> list[dict]:
    out = kafka_tool("TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic).stdout
    return [dict(re.findall(r"(\w+): ([^\t]*)", line.strip())) for line in out.splitlines()
            if line.strip().startswith("Topic:") and "Partition:" in line]


def test_kafka_topics_creates_a_replicated_topic_spread_over_the_brokers(cluster, kafka_tool):
    controller = cluster.controller_id()
    other = next(i for i in cluster.running_ids() if i != controller)
    topic = unique("tools-rf3")
    out = kafka_tool("TopicCommand", "--bootstrap-server", cluster.brokers[other].bootstrap, "--create",
                     "--topic", topic, "--replication-factor", "3", "--partitions", "6").stdout
    assert out.strip() == f"Created topic {topic}."
    parts = cluster.wait_until(lambda: (d := describe(kafka_tool, cluster.bootstrap, topic)) and len(d) == 6
                               and all(p["Leader"] != "none" for p in d) and d, 30, "six led partitions")
    assert {p["Leader"] for p in parts} == {"1", "2", "3"}
    for p in parts:
        assert sorted(p["Replicas"].split(",")) == ["1", "2", "3"]
        assert sorted(p["Isr"].split(",")) == ["1", "2", "3"]  # every replica in sync


def test_console_producer_and_consumer_through_each_broker(cluster, kafka_tool):
    topic = unique("tools-console")
    kafka_tool("TopicCommand", "--bootstrap-server", cluster.brokers[1].bootstrap, "--create", "--topic", topic,
               "--replication-factor", "2", "--partitions", "3")
    for i in cluster.running_ids():
        b = cluster.brokers[i].bootstrap
        kafka_tool("ConsoleProducer", "--bootstrap-server", b, "--topic", topic,
                   input="\n".join(f"via{i}-{n}" for n in range(10)) + "\n")
    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", cluster.brokers[3].bootstrap, "--topic", topic,
                     "--from-beginning", "--max-messages", "30", "--timeout-ms", "30000")
    assert sorted(out.stdout.split()) == sorted(f"via{i}-{n}" for i in (1, 2, 3) for n in range(10))


def test_kafka_leader_election_preferred_and_unclean(cluster, kafka_tool):
    topic = unique("tools-election")
    kafka_tool("TopicCommand", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic,
               "--replica-assignment", "3:1,3:2", "--config", "unclean.leader.election.enable=false")
    cluster.wait_until(lambda: all(p["Leader"] == "3" for p in describe(kafka_tool, cluster.bootstrap, topic)), 30,
                       "broker 3 leading both partitions")
    # Every partition already led by its preferred replica: each reported so (Kafka 3.9's ZooKeeper mode).
    out = kafka_tool("LeaderElectionCommand", "--bootstrap-server", cluster.bootstrap, "--election-type",
                     "preferred", "--all-topic-partitions").stdout
    assert "Valid replica already elected for partitions" in out and f"{topic}-1" in out
    out = kafka_tool("LeaderElectionCommand", "--bootstrap-server", cluster.bootstrap, "--election-type",
                     "preferred", "--topic", topic, "--partition", "0").stdout
    assert f"Valid replica already elected for partitions {topic}-0" in out
    # The followers die first (the ISRs shrink to broker 3), then broker 3: no in-sync replica is left to lead,
    # and the followers that come back are out of sync.
    in_parallel(lambda i: cluster.brokers[i].kill(), [1, 2])
    cluster.wait_until(lambda: all(p["Isr"] == "3" for p in describe(kafka_tool, cluster.brokers[3].bootstrap, topic)),
                       SESSION_TIMEOUT_MS / 1000 * 3, "the ISRs shrinking to broker 3")
    cluster.brokers[3].kill()
    cluster.start([1, 2])
    live = ",".join(cluster.brokers[i].bootstrap for i in (1, 2))
    cluster.wait_until(lambda: all(p["Leader"] == "none" for p in describe(kafka_tool, live, topic)),
                       SESSION_TIMEOUT_MS / 1000 * 3, "both partitions without a leader")
    out = kafka_tool("LeaderElectionCommand", "--bootstrap-server", live, "--election-type", "unclean",
                     "--topic", topic, "--partition", "1").stdout
    assert f"Successfully completed leader election (UNCLEAN) for partitions {topic}-1" in out
    parts = {p["Partition"]: p for p in describe(kafka_tool, live, topic)}
    assert parts["1"]["Leader"] == "2" and parts["1"]["Isr"] == "2"
    assert parts["0"]["Leader"] == "none"  # unclean election stays off for the topic: only on request
    cluster.start([3])
    cluster.wait_formed()
    cluster.wait_until(lambda: {p["Partition"]: p["Leader"] for p in describe(kafka_tool, cluster.bootstrap, topic)}
                       == {"0": "3", "1": "2"}, 30, "broker 3 back as leader of partition 0 only")
    # Its preferred replica is back; once it caught up and rejoined the ISR it can lead again.
    cluster.wait_until(lambda: "3" in {p["Partition"]: p for p in describe(kafka_tool, cluster.bootstrap, topic)}
                       ["1"]["Isr"].split(","), 60, "broker 3 back in the ISR of partition 1")
    out = kafka_tool("LeaderElectionCommand", "--bootstrap-server", cluster.bootstrap, "--election-type",
                     "preferred", "--topic", topic, "--partition", "1").stdout
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-1" in out
