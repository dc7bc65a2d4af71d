"""Kafka's own Java clients across a leader kill on three tierlog brokers: Kafka's VerifiableProducer
(idempotent, acks=all) writes to a topic with three replicas and min.insync.replicas=2 while the leader of
one partition is SIGKILLed; every write it reports acknowledged is then read back exactly once by Kafka's
console consumer (the Java consumer), and nothing is read that was not written."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from tests.harness import apache_kafka, rawclient
from tests.harness.rawclient import unique
from tests.harness.tierlog_cluster import start_cluster

MESSAGES = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper, kafka_jars):
    c = start_cluster(tmp_path_factory.mktemp("java-failover"), zookeeper, brokers=3)
    yield c
    c.stop()


def test_java_producer_and_consumer_across_a_leader_kill(cluster, kafka_tool, tmp_path):
    topic = unique("java-failover")
    rawclient.create_topic_in_cluster(cluster.bootstrap, topic, 3, 3, {"min.insync.replicas": "2"})
    victim = rawclient.metadata(cluster.bootstrap, [topic]).topics[0].partitions[0].leader_id
    config = tmp_path / "producer.properties"
    # VerifiableProducer sets retries=0 unless told otherwise; an idempotent producer retries.
    config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\n")
    cmd = apache_kafka.kafka_peer_module.java_command(
        "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
        "--max-messages", str(MESSAGES), "--throughput", "300", "--acks", "-1", "--producer.config", str(config))
    producer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    acked: dict[str, tuple[int, int]] = {}
    errors: list[str] = []
    halfway = threading.Event()
    other: list[str] = []

    def read() -> None:
        for line in producer.stdout:
            if not line.startswith("{"):
                other.append(line)
                continue
            event = json.loads(line)
            if event.get("name") == "producer_send_success":
                acked[event["value"]] = (event["partition"], event["offset"])
                if len(acked) >= MESSAGES // 3:
                    halfway.set()
            elif event.get("name") == "producer_send_error":
                errors.append(line.strip())
    reader = threading.Thread(target=read)
    reader.start()
    killed = False
    try:
        for _ in range(240):
            if halfway.wait(1) or producer.poll() is not None:
                break
        assert halfway.is_set(), f"the Java producer did not get going: {''.join(other)[-2000:]}"
        cluster.brokers[victim].kill()
        killed = True
        assert producer.wait(300) == 0
    finally:
        if producer.poll() is None:
            producer.kill()
        reader.join(30)
        if killed:
            cluster.start([victim])
            cluster.wait_formed()
    assert not errors, errors[:5]
    assert len(acked) == MESSAGES  # every send acknowledged: the other replicas took over
    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                     "--from-beginning", "--max-messages", str(MESSAGES), "--timeout-ms", "60000").stdout
    values = out.split()
    assert sorted(values, key=int) == sorted(acked, key=int)  # each acknowledged write once, nothing else
    print(f"\nJava producer across the kill of leader {victim}: {len(acked)} acknowledged, all read back once by "
          f"the Java consumer")
