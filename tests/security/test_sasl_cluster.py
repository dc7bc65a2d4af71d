"""A ZooKeeper cluster of three tierlog brokers whose inter-broker listener is SASL_PLAINTEXT with
sasl.mechanism.inter.broker.protocol=PLAIN: followers fetch, the controller pushes metadata and ISR changes travel
over authenticated connections; SCRAM credentials altered through any broker are kept in ZooKeeper under
/config/users/<user> as Kafka's ZooKeeper mode stores them and serve logins on every broker."""

from __future__ import annotations

import json

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kazoo.client import KazooClient

from tests.harness import rawclient
from tests.harness.broker import log_lines
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tests.security.sasllib import plain_server_jaas
from tests.security.tlslib import listener_addresses


@pytest.fixture(scope="module")
def sasl_cluster(zookeeper, tmp_path_factory):
    settings = {
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_server_jaas(),
    }
    cluster = start_cluster(tmp_path_factory.mktemp("sasl-cluster"), zookeeper, 3, settings,
                            extra_listeners=",SASL_PLAINTEXT://127.0.0.1:0")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_replication_runs_over_the_sasl_inter_broker_listener(sasl_cluster):
    cluster = sasl_cluster
    name = rawclient.unique("sasl-replicated")
    create(cluster, name, 1, {"min.insync.replicas": "3"})
    wait_isr(cluster, name, 3)
    leader = partition(cluster, name, 0).leader_id
    # acks=all with min.insync.replicas=3: answered only once both followers fetched the batch (authenticated)
    answer = rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, [b"r0", b"r1", b"r2"], acks=-1)
    assert answer.error_code == 0, answer
    wait_isr(cluster, name, 3)
    for i in cluster.running_ids():
        output = cluster.brokers[i].output
        assert not [m for m in log_lines(output, "WARNING") if "Failed authentication" in m["message"]], i


def test_scram_credentials_live_in_zookeeper_and_serve_every_broker(sasl_cluster):
    cluster = sasl_cluster
    first = cluster.brokers[cluster.running_ids()[0]]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    up = UserScramCredentialUpsertion("zoe", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"zoe-secret")
    admin.alter_user_scram_credentials([up])["zoe"].result(timeout=60)
    zk = KazooClient(hosts=cluster.zookeeper_connect)  # the cluster's chroot
    zk.start(timeout=30)
    try:
        data, _ = zk.get("/config/users/zoe")
    finally:
        zk.stop()
    entity = json.loads(data)
    assert entity["version"] == 1
    text = entity["config"]["SCRAM-SHA-256"]
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=4096") and "zoe-secret" not in text
    name = rawclient.unique("sasl-scram")
    create(cluster, name, 3)
    for i in cluster.running_ids():  # every broker knows the credential (the controller pushed it)
        address = listener_addresses(cluster.brokers[i])["SASL_PLAINTEXT"]
        producer = confluent_kafka.Producer({
            "bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "zoe", "sasl.password": "zoe-secret", "acks": "all"})
        for p in range(3):
            producer.produce(name, f"b{i}p{p}".encode(), partition=p)
        assert producer.flush(60) == 0


def test_a_users_quota_and_scram_credential_share_its_znode(sasl_cluster):
    """Kafka keeps a user's SCRAM credentials and its quotas in one znode, /config/users/<user>: changing either
    keeps the other, the quota is no credential and the credential no quota."""
    cluster = sasl_cluster
    first = cluster.brokers[cluster.running_ids()[0]]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    up = UserScramCredentialUpsertion("quinn", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"q-secret")
    admin.alter_user_scram_credentials([up])["quinn"].result(timeout=60)
    quota = {"entries": [{"entity": [{"entity_type": "user", "entity_name": "quinn"}],
                          "ops": [{"key": "producer_byte_rate", "value": 2048.0, "remove": False}]}],
             "validate_only": False}
    raw = rawclient.RawClient(first.bootstrap)
    try:
        assert raw.request(rawclient.ApiKey.ALTER_CLIENT_QUOTAS, 1, quota).entries[0].error_code == 0
        up2 = UserScramCredentialUpsertion("quinn", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                           b"q-secret-2")
        admin.alter_user_scram_credentials([up2])["quinn"].result(timeout=60)

        def described():
            resp = raw.request(rawclient.ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
                {"entity_type": "user", "match_type": 0, "match": "quinn"}], "strict": True})
            return {v.key: v.value for e in resp.entries for v in e.values} or None
        assert cluster.wait_until(described, 30, "quinn's quota") == {"producer_byte_rate": 2048.0}
    finally:
        raw.close()
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        config = json.loads(zk.get("/config/users/quinn")[0])["config"]
    finally:
        zk.stop()
    assert config["producer_byte_rate"] == "2048.0"
    assert config["SCRAM-SHA-256"].endswith(",iterations=8192")
    creds = admin.describe_user_scram_credentials(["quinn"])["quinn"].result(timeout=60)
    assert [(c.mechanism, c.iterations) for c in creds.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    address = listener_addresses(cluster.brokers[cluster.running_ids()[-1]])["SASL_PLAINTEXT"]
    producer = confluent_kafka.Producer({
        "bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "quinn", "sasl.password": "q-secret-2", "acks": "all"})
    name = rawclient.unique("sasl-quota")
    create(cluster, name, 1)
    producer.produce(name, b"ok", partition=0)
    assert producer.flush(60) == 0
