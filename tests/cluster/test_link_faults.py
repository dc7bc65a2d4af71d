"""The links between brokers, through the harness's fault-injecting proxies: a broker the controller cannot
reach (a cut link, or a link holding its bytes) does not learn of a new topic until the link heals, then
does, with nothing lost; the other brokers are not held up longer than the controller's propagation wait."""

from __future__ import annotations

import socket

import pytest

from tests.harness import rawclient
from tests.harness.rawclient import unique
from tests.harness.tierlog_cluster import TierlogCluster, start_cluster
from tierlog.protocol import ApiKey

UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("link-faults"), zookeeper, brokers=3, proxies=True)
    yield c
    c.stop()


def knows(cluster, broker_id: int, topic: str) -> bool:
    t = cluster.metadata(broker_id, [topic]).topics[0]
    return t.error_code == 0 and all(p.leader_id >= 0 for p in t.partitions)


@pytest.mark.parametrize("fault", ["cut", "hold"])
def test_a_broker_cut_off_from_the_controller_catches_up_when_the_link_heals(cluster, fault):
    controller = cluster.controller_id()
    target = max(i for i in cluster.running_ids() if i != controller)
    proxy = cluster.proxies[target]
    assert proxy.connections_seen.get(f"broker-{controller}"), "the controller reaches brokers through the proxy"
    getattr(proxy, fault)(source=controller)
    topic = unique(f"link-{fault}")
    try:
        raw = rawclient.RawClient(cluster.brokers[controller].bootstrap)
        try:
            created = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
                "name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                "assignments": [{"partition_index": 0, "broker_ids": [target]}]}], "timeout_ms": 30000,
                "validate_only": False})
            assert created.topics[0].error_code == 0, created
        finally:
            raw.close()
        others = [i for i in cluster.running_ids() if i != target]
        cluster.wait_until(lambda: all(knows(cluster, i, topic) for i in others), 30, "the others knowing the topic")
        assert cluster.metadata(target, [topic]).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        refused = rawclient.produce(cluster.brokers[target].bootstrap, topic, 0, [b"early"])
        assert refused.error_code == UNKNOWN_TOPIC_OR_PARTITION  # retriable: clients ask again
    finally:
        proxy.heal(source=controller)
    cluster.wait_until(lambda: knows(cluster, target, topic), 30, f"broker {target} learning the topic")
    assert rawclient.produce(cluster.brokers[target].bootstrap, topic, 0, [b"after"]).error_code == 0


def test_an_internal_port_taken_before_the_broker_binds_it_is_picked_again(tmp_path, zookeeper):
    """The harness picks a broker's INTERNAL port free and the broker binds it later; another process can
    take it in between (CI failed once this way). The broker then starts on a new port behind its proxy."""
    c = TierlogCluster(tmp_path, zookeeper, 1, None, None, proxies=True)
    taken = socket.create_server(("127.0.0.1", c._internal_ports[1]))
    try:
        c.start()
        assert c._internal_ports[1] != taken.getsockname()[1]
        assert c.proxies[1].target[1] == c._internal_ports[1]
        assert "address already in use" in c.output(1)
        c.wait_formed()
        topic = unique("port-again")  # the controller reaches the broker through the proxy's new target
        rawclient.create_topic_in_cluster(c.brokers[1].bootstrap, topic)
        assert rawclient.produce(c.brokers[1].bootstrap, topic, 0, [b"x"]).error_code == 0
    finally:
        taken.close()
        c.stop()
