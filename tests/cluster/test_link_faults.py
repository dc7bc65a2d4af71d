"""The links between brokers, through the harness's fault-injecting proxies: a broker the controller cannot
reach (a cut link, or a link holding its bytes) does not learn of a new topic until the link heals, then
does, with nothing lost; the other brokers are not held up longer than the controller's propagation wait."""

from __future__ import annotations

import pytest

from tests.harness import rawclient
from tests.harness.rawclient import unique
from tests.harness.tierlog_cluster import start_cluster
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
