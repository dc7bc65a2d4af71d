"""KIP-584 features on a two-broker ZooKeeper-mode cluster, with Kafka 4.4's ``kafka-features``: an update
sent to the broker that is not the controller is forwarded to it, lands in Kafka's ``/feature`` znode
(FeatureZNode v2, its data version the epoch) and reaches both brokers; the levels survive a restart of the
whole cluster."""

from __future__ import annotations

import json
import re

import pytest
from kazoo.client import KazooClient

from tests.harness import apache_kafka
from tests.harness.tierlog_cluster import start_cluster
from tests.harness.waiting import wait_until

LATEST = apache_kafka.kafka_peer_module.LATEST_KAFKA_VERSION
FEATURES = "org.apache.kafka.tools.FeatureCommand"


@pytest.fixture(scope="module")
def tools():
    apache_kafka.resolve_jars(LATEST)
    runner = apache_kafka.kafka_peer_module.ToolRunner(version=LATEST)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("features-zk"), zookeeper, brokers=2, controller=1)
    try:
        yield c
    finally:
        c.stop()


def _tv(tools, bootstrap: str) -> tuple[str, int]:
    """(finalized transaction.version, epoch) as ``kafka-features describe`` prints them."""
    r = tools.run(FEATURES, "--bootstrap-server", bootstrap, "describe")
    m = re.search(r"Feature: transaction.version\s.*FinalizedVersionLevel: (\S+)\s+Epoch: (\d+)", r.stdout)
    return m[1], int(m[2])


def test_features_are_forwarded_kept_in_the_feature_znode_and_survive_a_restart(cluster, zookeeper, tools):
    b1, b2 = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
    # the controller wrote a new cluster's levels to /feature when it was elected
    assert _tv(tools, b1) == _tv(tools, b2) == ("2", 0)
    r = tools.run(FEATURES, "--bootstrap-server", b2, "downgrade", "--feature", "transaction.version=1")
    assert r.stdout.strip() == "transaction.version was downgraded to 1.", r.stdout + r.stderr
    zk = KazooClient(zookeeper.connect)
    zk.start()
    try:
        data, stat = zk.get(f"{cluster.chroot}/feature")
    finally:
        zk.stop()
        zk.close()
    # group.version 1 and share.version 2 with the new cluster: the brokers serve KIP-848's ConsumerGroupHeartbeat
    # and KIP-932's ShareGroupHeartbeat with KIP-1191's DLQ (Kafka 4.4 finalizes these with a new cluster)
    assert json.loads(data) == {"version": 2, "status": 1,
                                "features": {"group.version": {"max_version_level": 1},
                                             "share.version": {"max_version_level": 2},
                                             "transaction.version": {"max_version_level": 1}}}
    assert stat.version == 1
    wait_until(lambda: _tv(tools, b1) == _tv(tools, b2) == ("1", 1), 30, what="both brokers at level 1")
    # a refused update changes nothing, on either broker
    r = tools.run(FEATURES, "--bootstrap-server", b1, "upgrade", "--feature", "transaction.version=3", check=False)
    assert r.returncode == 1 and "only supports versions 0-2" in r.stdout
    for b in cluster.brokers.values():
        b.stop()
    cluster.start()
    cluster.wait_formed()
    b1, b2 = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
    assert _tv(tools, b1) == _tv(tools, b2) == ("1", 1)
