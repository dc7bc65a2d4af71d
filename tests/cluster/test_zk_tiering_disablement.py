"""KIP-950 across a cluster: a DISABLING topic is driven to every broker hosting it, waits for a broker that
is down, survives the controller's death (the new controller resumes from ZooKeeper), and ends DISABLED
once each hosting broker deleted its remote data (delete policy), reported once."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tests.harness.tiered import tier_status, tiered_settings
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, start_cluster

SMALL = {"remote.storage.enable": "true", "segment.bytes": "10000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}
TOPIC = "kip950-cluster"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-cluster")
    c = start_cluster(root, zookeeper, brokers=3, settings=tiered_settings(root))
    c.root = root
    yield c
    c.stop()


def remote_files(cluster) -> list:
    return sorted(p for p in (cluster.root / "remote").rglob("*") if p.is_file() and f"{TOPIC}-" in str(p))


def offloaded(cluster, broker_id: int, partition: int) -> bool:
    parts = [p for p in tier_status(cluster.brokers[broker_id], TOPIC)["partitions"] if p["partition"] == partition]
    return bool(parts) and parts[0]["remote_segments"] >= 2 and parts[0]["copy_lag_segments"] == 0


def state(cluster, broker_id: int) -> tuple[str, str]:
    t = tier_status(cluster.brokers[broker_id], TOPIC)["topics"][0]
    return t["state"], t["policy"]


def test_disablement_waits_for_a_dead_broker_and_survives_controller_failover(cluster):
    boot = cluster.brokers[1].bootstrap
    admin = KafkaAdminClient(bootstrap_servers=boot)
    admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [1], 1: [2], 2: [3]}, topic_configs=SMALL)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=2, batch_size=2048)
    for i in range(900):
        producer.send(TOPIC, b"%06d" % i + b"x" * 200, partition=i % 3)
    producer.flush()
    producer.close()
    for p in range(3):
        cluster.wait_until(lambda p=p: offloaded(cluster, p + 1, p), 60, f"partition {p} offloaded by broker {p + 1}")
    assert remote_files(cluster)

    cluster.brokers[3].kill()  # broker 3 hosts partition 2
    cluster.wait_until(lambda: sorted(b.node_id for b in cluster.metadata(1).brokers) == [1, 2],
                       SESSION_TIMEOUT_MS / 1000 * 3, "broker 3 gone")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={
        "remote.log.disable.policy": "delete", "remote.storage.enable": "false"})])
    admin.close()
    # Brokers 1 and 2 act on it; the topic stays DISABLING while broker 3 cannot answer.
    cluster.wait_until(lambda: state(cluster, 1) == ("DISABLING", "delete"), 30, "DISABLING")
    cluster.wait_until(lambda: not tier_status(cluster.brokers[1], TOPIC)["partitions"]
                       and not tier_status(cluster.brokers[2], TOPIC)["partitions"], 60,
                       "brokers 1 and 2 stopped tiering")
    assert state(cluster, 2) == ("DISABLING", "delete")

    controller = cluster.controller_id()
    cluster.brokers[controller].kill()
    survivor = 2 if controller == 1 else 1
    cluster.wait_until(lambda: cluster.metadata(survivor).controller_id == survivor, SESSION_TIMEOUT_MS / 1000 * 3,
                       f"broker {survivor} the controller")
    assert state(cluster, survivor) == ("DISABLING", "delete")  # reloaded from ZooKeeper, still in progress
    cluster.start([3, controller])
    cluster.wait_formed()
    cluster.wait_until(lambda: all(state(cluster, i) == ("DISABLED", "delete") for i in (1, 2, 3)), 90,
                       "DISABLED on every broker")
    assert remote_files(cluster) == []
    outputs = "".join(cluster.output(i) for i in (1, 2, 3))
    assert outputs.count(f"Tiered storage of topic {TOPIC} is DISABLED") == 1  # completed once, by one controller
