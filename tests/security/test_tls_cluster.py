"""A ZooKeeper cluster of three tierlog brokers whose inter-broker listener is SSL with client certificates
required: followers fetch, the controller pushes metadata and ISR changes travel over mutual TLS; the HTTP
endpoint serves HTTPS (metrics.ssl.enable); clients reach every broker on its TLS listener."""

from __future__ import annotations

import re
import ssl
import urllib.request

import confluent_kafka
import confluent_kafka.admin
import pytest

from tests.harness import rawclient
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tests.security.tlslib import listener_addresses

_METRICS = re.compile(r"Metrics on https://127\.0\.0\.1:(\d+)/metrics")
_SSL_CONNECTIONS = re.compile(
    r'^kafka_server_socket_server_metrics_connection_creation_total\{listener="SSL"\} (\S+)$', re.M)


@pytest.fixture(scope="module")
def tls_cluster(pki, zookeeper, tmp_path_factory):
    settings = {
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "metrics.port": "0", "metrics.ssl.enable": "true",
    }
    cluster = start_cluster(tmp_path_factory.mktemp("tls-cluster"), zookeeper, 3, settings,
                            extra_listeners=",SSL://127.0.0.1:0")
    try:
        yield cluster
    finally:
        cluster.stop()


def _ssl_connections_accepted(broker, pki) -> float:
    """connection-creation-total of the SSL listener, read from the broker's /metrics over HTTPS."""
    port = next(int(m[1]) for line in broker.output if (m := _METRICS.search(line)))
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=30) as resp:
        text = resp.read().decode()
    m = _SSL_CONNECTIONS.search(text)
    assert m is not None, text[:2000]
    return float(m[1])


def test_replication_runs_over_the_tls_inter_broker_listener(tls_cluster, pki):
    cluster = tls_cluster
    name = rawclient.unique("tls-replicated")
    create(cluster, name, 1, {"min.insync.replicas": "3"})
    wait_isr(cluster, name, 3)
    leader = partition(cluster, name, 0).leader_id
    # acks=all with min.insync.replicas=3: answered only once both followers fetched the batch (over SSL)
    answer = rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, [b"r0", b"r1", b"r2"], acks=-1)
    assert answer.error_code == 0, answer
    wait_isr(cluster, name, 3)
    # no client has used a TLS listener yet: what each one accepted there came from the other brokers
    for i in cluster.running_ids():
        assert _ssl_connections_accepted(cluster.brokers[i], pki) >= 1, f"broker {i}"


def test_clients_reach_every_broker_on_its_tls_listener(tls_cluster, pki):
    cluster = tls_cluster
    name = rawclient.unique("tls-clients")
    create(cluster, name, 3)
    ssl_bootstrap = listener_addresses(cluster.brokers[1])["SSL"]
    conf = {"bootstrap.servers": ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(pki.client.key)}
    md = confluent_kafka.admin.AdminClient(conf).list_topics(timeout=30)
    tls_ports = {listener_addresses(cluster.brokers[i])["SSL"] for i in cluster.running_ids()}
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == tls_ports
    producer = confluent_kafka.Producer({**conf, "acks": "all"})
    for i in range(30):
        producer.produce(name, f"m{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": rawclient.unique("g"), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([name])
        got = []
        deadline = 40
        while len(got) < 30 and deadline:
            deadline -= 1
            got += [m.value() for m in consumer.consume(30, timeout=3) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(30))


def test_transactions_verify_partitions_across_the_tls_inter_broker_listener(tls_cluster, pki):
    """KIP-890's verification questions from partition leaders to the transaction's coordinator travel on the
    inter-broker listener too: over TLS here (a plaintext connection to it would never be answered, and the
    producer would retry NOT_ENOUGH_REPLICAS until its commit timed out)."""
    cluster = tls_cluster
    name = rawclient.unique("tls-txn")
    create(cluster, name, 3)
    leaders = {partition(cluster, name, p).leader_id for p in range(3)}
    assert len(leaders) >= 2  # at least one partition's leader is not the coordinator, wherever that is
    conf = {"bootstrap.servers": listener_addresses(cluster.brokers[1])["SSL"], "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client.cert),
            "ssl.key.location": str(pki.client.key)}
    producer = confluent_kafka.Producer({**conf, "transactional.id": rawclient.unique("tls-tx")})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(name, f"t{i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    consumer = confluent_kafka.Consumer({**conf, "group.id": rawclient.unique("g"), "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed"})
    try:
        consumer.subscribe([name])
        got = []
        for _ in range(40):
            if len(got) >= 9:
                break
            got += [m.value() for m in consumer.consume(9, timeout=3) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"t{i}".encode() for i in range(9))
