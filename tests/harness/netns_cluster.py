"""A ZooKeeper and N brokers each in a network namespace of its own (tests/harness/netns.py), for real partitions.

``netns_cluster(work_dir, brokers=3)`` is a context manager yielding a :class:`NetnsCluster`: the ``Topology``
(namespaces ``zk``, ``b1``..``bN``), the ZooKeeper server (in ``zk``, on its address, port 2181) and the formed
``TierlogCluster`` (each broker in ``b<id>``, listening on and advertising its address, port 9092). The test
process is on the bridge, so its clients reach every broker's advertised address. On the way out, whatever
happened: brokers and ZooKeeper stopped by PID, faults healed, namespaces, veths and the bridge removed.

``partition(topic, p, via)`` reads one broker's Metadata; ``broker_name(i)`` is ``b<i>``, the namespace name the
topology's faults take.

``zookeepers=3`` runs an ensemble of three ZooKeeper servers instead, in namespaces ``zk1``..``zk3``.
``kafka_netns_cluster(work_dir, brokers=3)`` is the same with Apache Kafka 3.9's brokers (ZooKeeper mode,
tests/harness/apache_kafka.py's ``KafkaZkCluster``), so a fault schedule runs against both alike.

``inter_broker="sasl_ssl"`` (both systems): the brokers talk to each other on a second listener, SASL_SSL on port
9093 with SCRAM-SHA-512, certificates naming the brokers' addresses (tests/security/pki.py), the credential written
to ZooKeeper before any broker starts by Kafka 3.9's kafka-configs --zookeeper, as Kafka's ZooKeeper mode
bootstraps inter-broker SCRAM; clients stay on PLAINTEXT 9092. Faults cut addresses, so both listeners alike.

``latency_ms`` (both systems): every TCP connection between namespaces (broker to broker, broker to ZooKeeper,
ZooKeeper to ZooKeeper) delayed by that much each way from the start (``Topology.delay``), the faults on top.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from tests.harness import rawclient
from tests.harness import zookeeper as zk
from tests.harness.netns import Topology, sweep
from tests.harness.tierlog_cluster import TierlogCluster, start_cluster


@dataclass
class NetnsCluster:
    topology: Topology
    zookeeper: object  # a ZooKeeperServer, or an Ensemble of three
    cluster: TierlogCluster  # or apache_kafka.KafkaZkCluster: running_ids(), brokers[i].bootstrap, wait_formed()
    #: the ZooKeeper servers' namespaces: ``zk``, or ``zk1``..``zk3`` for an ensemble
    zk_names: tuple[str, ...] = ("zk",)

    @staticmethod
    def broker_name(i: int) -> str:
        return f"b{i}"

    def partition(self, topic: str, p: int = 0, via: int | None = None):
        """Partition ``p`` as broker ``via`` (else the first answering running broker) describes it."""
        ids = [via] if via is not None else self.cluster.running_ids()
        last = None
        for i in ids:
            try:
                md = rawclient.metadata(self.cluster.brokers[i].bootstrap, [topic])
                return next(x for x in md.topics[0].partitions if x.partition_index == p)
            except Exception as e:  # noqa: BLE001 - a broker cut off: ask the next one
                last = e
        raise AssertionError(f"no broker answered Metadata for {topic}-{p}: {last!r}")


#: the inter-broker SCRAM user of ``inter_broker="sasl_ssl"`` and its password
SCRAM_USER, SCRAM_PASSWORD = "broker", "inter-broker-secret"
SASL_SSL_LISTENER = ",SASL_SSL://{host}:9093"


def _sasl_ssl(work_dir: Path, topology, zk_connect: str) -> dict:
    """The brokers' settings for an inter-broker SASL_SSL listener with SCRAM-SHA-512, after writing the user's
    credential under ``zk_connect`` (its chroot made first) with Kafka 3.9's kafka-configs."""
    from kazoo.client import KazooClient

    from tests.harness.apache_kafka import resolve_zk_jars, run_zk_tool
    from tests.security.pki import make_pki
    from tests.security.sasllib import SCRAM_MODULE, jaas

    pki = make_pki(work_dir / "pki", tuple(topology.address(n) for n in topology.names if n.startswith("b")))
    hosts, _, chroot = zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    try:
        client.ensure_path("/" + chroot)
    finally:
        client.stop()
        client.close()
    resolve_zk_jars()
    run_zk_tool("ConfigCommand", "--zookeeper", zk_connect, "--alter", "--add-config",
                f"SCRAM-SHA-512=[iterations=8192,password={SCRAM_PASSWORD}]", "--entity-type", "users",
                "--entity-name", SCRAM_USER)
    return {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                jaas(SCRAM_MODULE, username=SCRAM_USER, password=SCRAM_PASSWORD),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}


@contextlib.contextmanager
def netns_cluster(work_dir: Path, brokers: int = 3, settings: dict | None = None, timeout: float = 90,
                  zookeepers: int = 1, inter_broker: str = "plaintext", latency_ms: float = 0):
    """``zookeepers=3``: an ensemble of three servers, each in a namespace of its own (``zk1``..``zk3``)."""
    def start(server, topology):
        chroot, merged, extra = "/tierlog", dict(settings or {}), ""
        if inter_broker == "sasl_ssl":
            merged.update(_sasl_ssl(work_dir, topology, zk.connect_string(server, chroot)))
            extra = SASL_SSL_LISTENER
        return start_cluster(work_dir, server, brokers, settings=merged, timeout=timeout, topology=topology,
                             chroot=chroot, extra_listeners=extra)
    with _in_namespaces(work_dir, brokers, start, timeout, zookeepers, latency_ms) as nc:
        yield nc


@contextlib.contextmanager
def kafka_netns_cluster(work_dir: Path, brokers: int = 3, settings: dict | None = None, timeout: float = 180,
                        zookeepers: int = 1, inter_broker: str = "plaintext", latency_ms: float = 0):
    """Kafka 3.9's brokers 1..N in ZooKeeper mode (``ZK_CLUSTER_SETTINGS`` under ``settings``), each in its
    namespace, on a ZooKeeper in ``zk`` under the chroot ``/kafka``."""
    from tests.harness.apache_kafka import KafkaZkCluster, resolve_zk_jars

    def start(server, topology):
        resolve_zk_jars()
        connect = zk.connect_string(server, "/kafka")
        merged = dict(settings or {})
        if inter_broker == "sasl_ssl":
            merged.update(_sasl_ssl(work_dir, topology, connect))
        cluster = KafkaZkCluster(work_dir / "kafka", connect, brokers, merged, topology=topology)
        if inter_broker == "sasl_ssl":
            for b in cluster.brokers.values():
                listeners = f"PLAINTEXT://{b.host}:9092" + SASL_SSL_LISTENER.format(host=b.host)
                b.overrides.update({"listeners": listeners, "advertised.listeners": listeners})
        try:
            cluster.start(timeout)
            cluster.wait_formed(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster
    with _in_namespaces(work_dir, brokers, start, timeout, zookeepers, latency_ms) as nc:
        yield nc


@contextlib.contextmanager
def _in_namespaces(work_dir: Path, brokers: int, start, timeout: float, zookeepers: int = 1, latency_ms: float = 0):
    zk_names = ("zk",) if zookeepers == 1 else tuple(f"zk{i}" for i in range(1, zookeepers + 1))
    topology = Topology([*zk_names, *(f"b{i}" for i in range(1, brokers + 1))])
    server = cluster = None
    try:
        if latency_ms:
            topology.delay(latency_ms)
        if zookeepers == 1:
            server = zk.start_zookeeper(work_dir / "zk", topology=topology, timeout=timeout)
        else:
            server = zk.start_ensemble(work_dir / "zk", zookeepers, timeout, topology=topology)
        cluster = start(server, topology)
        yield NetnsCluster(topology, server, cluster, zk_names)
    finally:
        topology.heal()
        if cluster is not None:
            cluster.stop()
        if isinstance(server, zk.Ensemble):
            server.stop()
        elif server is not None:
            zk.stop_zookeeper(server)
        topology.close()
        sweep(topology.prefix)
