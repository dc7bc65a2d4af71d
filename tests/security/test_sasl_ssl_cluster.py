"""A ZooKeeper cluster of three tierlog brokers whose inter-broker listener is SASL_SSL with
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512. The brokers' user and its SCRAM credential are written to
ZooKeeper before any broker starts, by Kafka 3.9's kafka-configs with --zookeeper, as Kafka's ZooKeeper-mode
documentation bootstraps inter-broker SCRAM. Everything that crosses brokers runs over SCRAM on TLS: replication,
the controller's pushes, forwarding, transaction markers and KIP-890 verification, and the topic-based remote log
metadata manager's clients (tiering is on). A broker given the wrong password cannot replicate: it stays out of
the ISR and says why, without stopping.

One cluster serves the module; its tests run in file order and leave brokers 1-3 running (the last one adds
broker 4)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from kazoo.client import KazooClient

from tests.cluster import txn_cluster
from tests.harness import rawclient
from tests.harness.broker import log_lines
from tests.harness.tiered import tier_status, tiered_settings
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tests.harness.writer import BackgroundWriter
from tests.harness.zookeeper import connect_string, unique_chroot
from tests.security.sasllib import SCRAM_MODULE, eventually, jaas

PASSWORD = "admin-scram-secret"


def _server_jaas(password: str = PASSWORD) -> str:
    return jaas(SCRAM_MODULE, username="admin", password=password)


@pytest.fixture(scope="module")
def cluster(pki, zookeeper, tmp_path_factory, kafka_zk_tool_runner):
    root = tmp_path_factory.mktemp("sasl-ssl-cluster")
    chroot = unique_chroot()
    connect = connect_string(zookeeper, chroot)
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=30)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
    # Kafka's way to bootstrap inter-broker SCRAM in ZooKeeper mode: the credential exists before the brokers.
    kafka_zk_tool_runner.run("ConfigCommand", "--zookeeper", connect, "--alter", "--add-config",
                             f"SCRAM-SHA-512=[iterations=8192,password={PASSWORD}]", "--entity-type", "users",
                             "--entity-name", "admin")
    settings = tiered_settings(root, **{
        **txn_cluster.SETTINGS,
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _server_jaas(),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
        "replica.lag.time.max.ms": "8000",
    })
    c = start_cluster(root, zookeeper, 3, settings, chroot=chroot, extra_listeners=",SASL_SSL://127.0.0.1:0")
    try:
        yield c
    finally:
        c.stop()


def _auth_failures(cluster, i: int) -> list[str]:
    return [m["message"] for m in log_lines(cluster.brokers[i].output, "WARNING")
            if "Failed authentication" in m["message"]]


def test_the_credential_kafka_configs_wrote_is_the_one_the_brokers_use(cluster):
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        entity = json.loads(zk.get("/config/users/admin")[0])
    finally:
        zk.stop()
    assert entity["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
    name = rawclient.unique("scram-replicated")
    create(cluster, name, 1, {"min.insync.replicas": "3"})
    wait_isr(cluster, name, 3)
    leader = partition(cluster, name, 0).leader_id
    # acks=all with min.insync.replicas=3: answered only once both followers fetched over SCRAM on TLS
    answer = rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, [b"r0", b"r1", b"r2"], acks=-1)
    assert answer.error_code == 0, answer
    for i in cluster.running_ids():
        assert not _auth_failures(cluster, i), i


def test_forwarded_requests_reach_the_controller(cluster):
    """CreateTopics sent to a broker that does not control travels in an Envelope over SASL_SSL."""
    controller = cluster.controller_id()
    other = next(i for i in cluster.running_ids() if i != controller)
    name = rawclient.unique("scram-forwarded")
    raw = rawclient.RawClient(cluster.brokers[other].bootstrap)
    try:
        resp = raw.request(rawclient.ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": 2, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
    finally:
        raw.close()
    assert resp.topics[0].error_code == 0, resp
    for i in cluster.running_ids():
        rawclient.wait_for_leaders_on(cluster.brokers[i].bootstrap, name, 2, 30)


def test_tiering_publishes_its_metadata_over_scram(cluster):
    """The topic-based metadata manager's producer and consumer authenticate on the SASL_SSL listener as the
    broker's user: segments are uploaded and their metadata read back by leader and followers."""
    name = rawclient.unique("scram-tiered")
    create(cluster, name, 1, {"remote.storage.enable": "true", "segment.bytes": "4000",
                              "local.retention.bytes": "1", "min.insync.replicas": "2"})
    leader = partition(cluster, name, 0).leader_id
    for n in range(30):
        batch = [b"%06d" % (n * 10 + j) + b"m" * 100 for j in range(10)]
        assert rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, batch, acks=-1).error_code == 0

    def uploaded():
        rows = tier_status(cluster.brokers[leader], name)["partitions"]
        return rows and rows[0]["ready"] and (rows[0]["remote_segments"] or 0) >= 3
    try:
        cluster.wait_until(uploaded, 120, f"{name}'s segments uploaded")
    except AssertionError:
        raise AssertionError(f"{tier_status(cluster.brokers[leader], name)}\n"
                             f"{''.join(cluster.brokers[leader].output[-60:])}") from None
    highest = tier_status(cluster.brokers[leader], name)["partitions"][0]["highest_offset_in_remote_storage"]
    assert highest is not None and highest > 0
    # the followers learn how far the uploads go from the metadata topic (their consumers authenticate too)
    for i in cluster.running_ids():
        if i != leader:
            cluster.wait_until(lambda i=i: (r := tier_status(cluster.brokers[i], name)["partitions"])
                               and r[0]["ready"] and (r[0]["highest_offset_in_remote_storage"] or -1) >= highest,
                               120, f"broker {i} following the tier")


def test_a_transaction_across_brokers_commits(cluster):
    """Three partitions led by three brokers: the coordinator's markers and the leaders' verification
    questions to the coordinator cross brokers over SASL_SSL."""
    name = rawclient.unique("scram-txn")
    create(cluster, name, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    tid = rawclient.unique("scram-tid")
    producer = txn_cluster.producer(cluster.bootstrap, tid)
    txn_cluster.commit_and_abort(cluster, producer, name, tid, [True, False, True], 3, b"t")
    for i in cluster.running_ids():
        assert not _auth_failures(cluster, i), i


def test_a_new_leader_serves_every_acknowledged_record(cluster):
    name = rawclient.unique("scram-failover")
    create(cluster, name, 1, {"min.insync.replicas": "2"})
    wait_isr(cluster, name, 3)
    leader = partition(cluster, name, 0).leader_id
    writer = BackgroundWriter(cluster.bootstrap, name, b"k").start()
    try:
        cluster.wait_until(lambda: len(writer.acked) >= 300, 120, "300 records acknowledged")
        cluster.brokers[leader].kill()  # SIGKILL
        seen = len(writer.acked)
        cluster.wait_until(lambda: len(writer.acked) >= seen + 300, 120, "300 more after the leader died")
    finally:
        writer.stop()
    new_leader = cluster.wait_until(lambda: (p := partition(cluster, name, 0)).leader_id not in (-1, leader)
                                    and p.leader_id, 60, "a new leader")
    acked = {v for _, _, v in writer.acked}
    consumer = Consumer({"bootstrap.servers": cluster.brokers[new_leader].bootstrap, "group.id": name,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(name, 0, 0)])

        def read_all():
            for m in consumer.consume(500, 1):
                if m.error() is None:
                    got.add(m.value())
            return acked <= got
        cluster.wait_until(read_all, 120, "every acknowledged record read from the new leader")
    finally:
        consumer.close()
    cluster.start([leader])
    wait_isr(cluster, name, 3, timeout=120)


def test_a_broker_with_the_wrong_password_stays_out_of_the_isr(cluster):
    """Broker 4 authenticates with a wrong SCRAM password: its fetches are refused, the ISR drops it after
    replica.lag.time.max.ms and never takes it back; both sides log why; broker 4 keeps running."""
    cluster.add_brokers([4], per_broker={4: {"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                                             _server_jaas("not-the-password")}}, shared=True)
    name = rawclient.unique("scram-outsider")
    create(cluster, name, assignment=[[1, 2, 4]], configs={"min.insync.replicas": "2"})
    four = cluster.brokers[4]

    def fetch_refused():
        return [m["message"] for m in log_lines(four.output, "WARNING")
                if "fetching from broker" in m["message"] and "SASL_AUTHENTICATION_FAILED" in m["message"]]
    assert eventually(fetch_refused, 60), "".join(four.output[-40:])
    assert "invalid credentials" in fetch_refused()[0].lower(), fetch_refused()[0]
    assert "SCRAM-SHA-512" in fetch_refused()[0], fetch_refused()[0]
    wait_isr(cluster, name, 2, timeout=90)
    assert sorted(partition(cluster, name, 0).isr_nodes) == [1, 2]
    leader = partition(cluster, name, 0).leader_id
    assert rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, [b"a", b"b"], acks=-1).error_code == 0
    refused = [m for m in _auth_failures(cluster, 1) + _auth_failures(cluster, 2) if "user admin" in m]
    assert refused and "SCRAM-SHA-512" in refused[0], refused
    # still refused after the produce, still out of the ISR, still running
    count = len(fetch_refused())
    assert eventually(lambda: len(fetch_refused()) > count or _repeated(four), 60)
    assert sorted(partition(cluster, name, 0).isr_nodes) == [1, 2]
    assert four.proc.poll() is None
    assert not [m for m in log_lines(four.output, "ERROR") if "Traceback" in m["message"]]


def _repeated(broker) -> bool:
    """The fetcher's warning is rate-limited: a later '(repeated N times ...)' line counts as another one."""
    return any("repeated" in line and "fetching from broker" in line for line in broker.output)
