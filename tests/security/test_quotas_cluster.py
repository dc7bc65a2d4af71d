"""Client quotas in ZooKeeper mode: kafka-configs (through any broker, forwarded to the controller) writes Kafka's
znodes, ``/config/clients/<client-id>`` with a ``/config/changes`` notification, and every broker applies the
quota (its answers carry a throttle time)."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import start_cluster
from tests.harness.waiting import wait_until
from tierlog.protocol import ApiKey
from tierlog.records import build_batch


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("quotas-cluster"), zookeeper, brokers=2)
    yield c
    c.stop()


def _described(address: str, client: str):
    raw = RawClient(address)
    try:
        resp = raw.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
            {"entity_type": "client-id", "match_type": 0, "match": client}], "strict": True})
        return [{v.key: v.value for v in e.values} for e in resp.entries or ()]
    finally:
        raw.close()


def test_quota_stored_in_zookeeper_and_applied_on_every_broker(cluster, kafka_tool):
    client = "rawclient"  # the client id of tests.harness.rawclient's requests
    last = max(cluster.brokers)
    out = kafka_tool("ConfigCommand", "--bootstrap-server", cluster.brokers[last].bootstrap, "--alter",
                     "--entity-type", "clients", "--entity-name", client,
                     "--add-config", "producer_byte_rate=100").stdout
    assert f"Completed updating config for client {client}." in out

    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        data, _ = zk.get(f"/config/clients/{client}")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "100.0"}}
        changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": f"clients/{client}"} in changes
    finally:
        zk.stop()
        zk.close()

    topic = unique("quota-cluster")
    for i, broker in cluster.brokers.items():
        wait_until(lambda b=broker.bootstrap: _described(b, client) == [{"producer_byte_rate": 100.0}], 30,
                   interval=0.3, what=f"broker {i} to describe the quota")
        raw = RawClient(broker.bootstrap)
        try:
            # 2 KB against 100 B/s: (2000 / 10 s - 100) / 100 * 10 s of throttle, whatever the partition's answer
            resp = raw.request(ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": [{
                "name": topic, "partition_data": [{"index": 0, "records": build_batch(
                    [(None, b"x" * 2000, [], int(time.time() * 1000))])}]}]})
        finally:
            raw.close()
        assert resp.throttle_time.total_seconds() * 1000 > 5000, f"broker {i} did not throttle"
