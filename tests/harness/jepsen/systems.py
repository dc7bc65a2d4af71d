"""The clusters a process-fault run (run.py) can drive: tierlog's, Apache Kafka 3.9's in ZooKeeper mode, and
Apache Kafka 4.4's in KRaft mode, each behind the interface the nemesis uses (``brokers[i]`` with ``bootstrap``,
``kill()``, ``stop(timeout)``, ``output``; ``start([ids])``, ``running_ids()``, ``pause``/``resume``, ``proxies``
(a LinkProxy in front of every broker's inter-broker listener), ``zookeeper_proxies``, ``wait_formed()``,
``stop()``).

- ``tierlog``: tests/harness/tierlog_cluster.py's cluster, unchanged;
- ``kafka39``: tests/harness/apache_kafka.py's ``KafkaZkCluster`` with its LinkProxies, and a TcpProxy of its
  own between each broker and ZooKeeper (``zk-cut``), its brokers' folders ``<work_dir>/broker-<id>``, as
  tierlog's (the ``disk-full`` tmpfs is mounted there; a Kafka broker whose only log dir fails halts, and the
  run's settle starts it again);
- ``kafka44``: ``KafkaKRaftCluster`` (three combined nodes, each broker and controller, the three voters of
  the quorum), an INTERNAL listener per node advertised at a LinkProxy so replication can be cut; the
  controller quorum talks on its own listener, outside the proxies. A fault without a counterpart in KRaft
  (``COUNTERPARTS``) is left out of its schedule: no ZooKeeper to cut or restart, and one log dir per node
  holding the metadata log too, so a full disk is not the same fault.

What differs between ZooKeeper and KRaft for the nemesis is in :class:`KRaftRig`: the controller is the
quorum's leader (DescribeQuorum; KRaft's Metadata names a random broker as controller), and a paused broker's
"session expired" is its being fenced (gone from the brokers Metadata lists), after ``broker.session.timeout.ms``.
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import rawclient
from tests.harness.apache_kafka import PausableBrokers
from tests.harness.jepsen.nemesis import KINDS, Rig
from tests.harness.link_proxy import LinkProxy
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.threads import in_parallel
from tests.harness.tierlog_cluster import start_cluster, wait_until
from tierlog.protocol import ApiKey

SYSTEMS = ("tierlog", "kafka39", "kafka44")
TITLES = {"tierlog": "tierlog", "kafka39": "Kafka 3.9.1 (ZK)", "kafka44": "Kafka 4.4.0 (KRaft)"}
_ZOOKEEPER_KINDS = ("zk-cut", "zk-restart")
COUNTERPARTS = {
    "tierlog": KINDS,
    "kafka39": KINDS,
    "kafka44": tuple(k for k in KINDS if k not in (*_ZOOKEEPER_KINDS, "disk-full")),
}



def uses_zookeeper(system: str) -> bool:
    return system != "kafka44"


class _Node:
    """A Kafka broker process (kafka_peer's) as the nemesis sees a tierlog broker: ``output`` as a list of lines."""

    def __init__(self, process):
        self.process = process

    def __getattr__(self, name):
        return getattr(self.process, name)

    @property
    def output(self) -> list[str]:
        return self.process.output().splitlines(keepends=True)


class _KafkaSide(PausableBrokers):
    """What the Kafka clusters share here: nodes as ``_Node``, ``start(ids)`` in parallel, pause and resume by PID."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.brokers = {i: _Node(b) for i, b in cluster.brokers.items()}
        self.proxies: dict[int, LinkProxy] = {}
        self.zookeeper_proxies: dict[int, TcpProxy] = {}
        self.paused: set[int] = set()

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def running_ids(self) -> list[int]:
        return self.cluster.running_ids()

    def start(self, ids: list[int] | None = None, timeout: float = 180):
        ids = [i for i in (ids or list(self.brokers)) if not self.brokers[i].running()]
        in_parallel(lambda i: self.brokers[i].process.start(timeout), ids)
        return self

    def stop(self) -> None:
        for i in list(self.paused):
            self.resume(i)
        self.cluster.stop()
        for proxy in [*self.proxies.values(), *self.zookeeper_proxies.values()]:
            proxy.close()


class KafkaZkSide(_KafkaSide):
    def __init__(self, cluster):
        super().__init__(cluster)
        self.proxies = cluster.proxies
        self.zookeeper_connect = cluster.zookeeper_connect

    def wait_formed(self, timeout: float = 60) -> int:
        return self.cluster.wait_formed(timeout)


class KafkaKRaftSide(_KafkaSide):
    def wait_formed(self, timeout: float = 60) -> int:
        """Every running node lists every running node; returns the quorum's leader (the active controller)."""
        ids = sorted(self.running_ids())

        def formed():
            for i in ids:
                md = rawclient.metadata(self.brokers[i].bootstrap)
                if sorted(b.node_id for b in md.brokers) != ids:
                    return None
            leader = quorum_leader(self.brokers[ids[0]].bootstrap)
            return leader if leader in ids else None
        return wait_until(formed, timeout, "every node seeing every node and a quorum leader")


def quorum_leader(address: str, timeout: float = 5) -> int:
    """The KRaft quorum's leader (the active controller) as DescribeQuorum through ``address`` answers it."""
    raw = rawclient.RawClient(address, timeout=timeout)
    try:
        resp = raw.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": [{
            "topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
    finally:
        raw.close()
    return resp.topics[0].partitions[0].leader_id


class KRaftRig(Rig):
    """The nemesis's view of a KRaft cluster: no ZooKeeper; the controller is the quorum's leader."""

    def controller(self) -> int:
        for i in self.responsive():
            try:
                return quorum_leader(self.addresses[i])
            except Exception:  # noqa: BLE001 - ask another
                continue
        return -1

    def session_expired(self, broker_id: int) -> bool:
        """The controller fenced ``broker_id`` (no heartbeat within ``broker.session.timeout.ms``): the other
        nodes' Metadata no longer lists it."""
        others = [i for i in self.responsive() if i != broker_id]
        return any(broker_id not in {b.node_id for b in rawclient.metadata(self.addresses[i]).brokers}
                   for i in others[:1])


def _kraft_settings(settings: dict) -> dict:
    """ZooKeeper-mode settings left out; the broker's heartbeat session as long as the ZooKeeper session the
    other systems have, so a paused node is fenced after the same time."""
    out = {k: v for k, v in settings.items() if not k.startswith("zookeeper.")}
    out.setdefault("broker.session.timeout.ms", settings.get("zookeeper.session.timeout.ms", "6000"))
    return out


def start(system: str, work_dir: Path, zookeeper, brokers: int, settings: dict, timeout: float = 180):
    """A started, formed cluster of ``system`` with LinkProxies between brokers (and, with ZooKeeper, a TcpProxy
    from each broker to it), brokers 1..N."""
    if system == "tierlog":
        return start_cluster(work_dir, zookeeper, brokers=brokers, settings=settings, proxies=True,
                             zookeeper_proxies=True, timeout=min(timeout, 90))
    if system == "kafka39":
        return _start_kafka39(work_dir, zookeeper, brokers, settings, timeout)
    if system == "kafka44":
        return _start_kafka44(work_dir, brokers, settings, timeout)
    raise ValueError(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")


def _start_kafka39(work_dir: Path, zookeeper, brokers: int, settings: dict, timeout: float) -> KafkaZkSide:
    from tests.harness import zookeeper as zk
    from tests.harness.apache_kafka import KafkaZkCluster, resolve_zk_jars
    resolve_zk_jars()
    chroot = zk.unique_chroot("kafka39")
    cluster = KafkaZkCluster(work_dir, zk.connect_string(zookeeper, chroot), brokers, settings, proxies=True)
    side = KafkaZkSide(cluster)
    for i, b in cluster.brokers.items():
        proxy = side.zookeeper_proxies[i] = TcpProxy(zookeeper.port, zookeeper.host)
        b.zookeeper_connect = f"{proxy.address}{chroot}"
    try:
        cluster.start(timeout)
        cluster.wait_formed(timeout)
    except BaseException:
        side.stop()
        raise
    return side


def _start_kafka44(work_dir: Path, brokers: int, settings: dict, timeout: float) -> KafkaKRaftSide:
    from tests.harness import zookeeper as zk
    from tests.harness.apache_kafka import KafkaKRaftCluster, resolve_jars
    resolve_jars()
    cluster = KafkaKRaftCluster(work_dir / "kraft", brokers, settings=_kraft_settings(settings))
    side = KafkaKRaftSide(cluster)
    for i, b in cluster.brokers.items():
        internal = zk.free_port()
        proxy = side.proxies[i] = LinkProxy(internal)
        b.overrides.update({
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT",
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CONTROLLER://127.0.0.1:{b.controller_port},"
                         f"INTERNAL://127.0.0.1:{internal}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{proxy.port}",
            "inter.broker.listener.name": "INTERNAL"})
    try:
        side.start(timeout=timeout)
        side.wait_formed(timeout)
    except BaseException:
        side.stop()
        raise
    return side


def make_rig(system: str, *args, **kwargs) -> Rig:
    return KRaftRig(*args, **kwargs) if system == "kafka44" else Rig(*args, **kwargs)


def seen_clients(cluster) -> dict[int, dict[str, int]]:
    """Broker id -> the client ids that connected through its LinkProxy (which inter-broker links a cut broke)."""
    return {i: dict(p.connections_seen) for i, p in getattr(cluster, "proxies", {}).items()}

