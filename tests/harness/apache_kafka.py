"""Apache Kafka as a reference peer for tierlog, from ``scripts/kafka_peer.py``.

``kafka_peer_module`` is that script (``KafkaServer``, ``ToolRunner``, ``run_tool``, ``resolve``...);
``resolve_jars()`` returns Kafka's jars (resolved by Maven into a cache folder outside the repository
the first time) or, when Java or Maven is missing or Maven cannot reach Maven Central, skips locally
and fails in CI. ``start_kafka`` starts a single-node KRaft broker with ``SHARED_SETTINGS``, the
static settings the session's tierlog peer starts with too, so configs and their sources compare.

Kafka 3.9 in ZooKeeper mode is the peer of tierlog's ZooKeeper clusters: ``resolve_zk_jars()`` (cached
beside 4.4's), ``start_kafka_zk_cluster(work_dir, zookeeper, brokers=3)`` starts brokers 1..N on the
ZooKeeper of tests/harness/zookeeper.py under a chroot of their own (with ``controller=i``, broker i
first and alone, so it wins the controller election) and returns a :class:`KafkaZkCluster`;
``ZK_KAFKA_VERSION`` and ``run_zk_tool`` (3.9's command-line tools). With ``proxies=True`` every broker
advertises its inter-broker listener (INTERNAL) at a ``LinkProxy`` (``cluster.proxies[i]``), as
``tierlog_cluster.start_cluster(..., proxies=True)`` does, so a test can stall one broker's replica fetchers
on both systems alike; ``pause``/``resume`` SIGSTOP and SIGCONT a broker by its PID.

A multi-node Kafka 4.4 in KRaft mode: ``start_kafka_kraft_cluster(work_dir, brokers=3, tiered=True)`` returns
a :class:`KafkaKRaftCluster` of nodes 1..N, each broker and controller, the N static voters of one quorum,
tiered (if asked) through LocalTieredStorage into one shared ``remote_dir``; ``kill(i)`` and ``start([i])``
by PID, a restarted node keeping its ports and log dir; ``per_broker`` gives nodes settings of their own.
(``KIP1023_KAFKA_VERSION``, the release the KIP-1023 cases ask for, is 4.4 too.)
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from tests.harness import rawclient
from tests.harness import zookeeper as zk
from tests.harness.link_proxy import LinkProxy
from tests.harness.prerequisites import load_script
from tests.harness.prerequisites import unavailable as _unavailable
from tests.harness.threads import in_parallel, start_together

kafka_peer_module = load_script("kafka_peer.py", "tierlog_kafka_peer")
run_tool = kafka_peer_module.run_tool
KafkaPeerError = kafka_peer_module.KafkaPeerError
ZK_KAFKA_VERSION = kafka_peer_module.ZK_KAFKA_VERSION
KAFKA_VERSION = kafka_peer_module.KAFKA_VERSION
KIP1023_KAFKA_VERSION = kafka_peer_module.KIP1023_KAFKA_VERSION
APPS_KAFKA_VERSION = kafka_peer_module.APPS_KAFKA_VERSION

# Static settings both peers start with (what Kafka's own single-node test clusters set).
SHARED_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def unavailable(reason: str):
    """The peer cannot run: skip locally, fail in CI."""
    _unavailable("Apache Kafka peer", reason)


def resolve_jars(version: str = KAFKA_VERSION) -> list[Path]:
    """A KRaft release's jars, 4.4 by default (skips locally, fails in CI, when Java or Maven is missing or
    Maven fails)."""
    missing = kafka_peer_module.missing_prerequisites(version=version)
    if missing:
        unavailable("missing " + ", ".join(missing))
    try:
        return kafka_peer_module.resolve(version=version)
    except KafkaPeerError as e:
        unavailable(str(e))


def start_kafka(work_dir: Path, name: str, tiered: bool = False, settings: dict | None = None):
    """A started ``KafkaServer`` in ``work_dir`` (tiered through Kafka's LocalTieredStorage if asked)."""
    kafka = kafka_peer_module.KafkaServer(work_dir, tiered=tiered, overrides={**SHARED_SETTINGS, **(settings or {})})
    kafka.start()
    print(f"\nApache Kafka {kafka_peer_module.KAFKA_VERSION} ({name}) ready on {kafka.bootstrap} "
          f"in {kafka.start_seconds:.1f}s (format + JVM start)")
    return kafka


# ------------------------------------------------------------------------------ Kafka 3.9, ZooKeeper mode

#: Settings of every broker of a Kafka 3.9 ZooKeeper cluster, on top of broker.id, zookeeper.connect, the
#: listener and log.dirs. A short ZooKeeper session, so a killed broker is noticed within seconds (the
#: ZooKeeper of tests/harness/zookeeper.py allows sessions from 400 ms), yet one a stall of a few seconds
#: on a busy machine does not expire (4 s did, for every broker at once); the internal topics'
#: replication factor is set per cluster size by ``start_kafka_zk_cluster``.
ZK_CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "15000",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.min.isr": "1",
}


def run_zk_tool(main_class: str, *args: str, **kw):
    """One of Kafka 3.9's command-line classes (``kafka_peer.ZK_TOOLS`` short names), in a JVM of its own."""
    return run_tool(main_class, *args, version=ZK_KAFKA_VERSION, **kw)


def resolve_zk_jars() -> list[Path]:
    """Kafka 3.9's jars (skips locally, fails in CI, when Java or Maven is missing or Maven fails)."""
    missing = kafka_peer_module.missing_prerequisites(need_maven=not kafka_peer_module.zk_resolved())
    if missing:
        unavailable("missing " + ", ".join(missing))
    try:
        return kafka_peer_module.resolve_zk()
    except KafkaPeerError as e:
        unavailable(str(e))


class PausableBrokers:
    """SIGSTOP and SIGCONT of a cluster's brokers by PID (``brokers``: id -> a process with ``pid`` and
    ``running()``; ``paused``: the ids stopped so)."""

    brokers: dict
    paused: set[int]

    def pause(self, broker_id: int) -> None:
        """SIGSTOP one broker by its PID (a stalled JVM: no fetches, no ZooKeeper pings)."""
        os.kill(self.brokers[broker_id].pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        if self.brokers[broker_id].running():
            os.kill(self.brokers[broker_id].pid, signal.SIGCONT)
        self.paused.discard(broker_id)


class KafkaZkCluster(PausableBrokers):
    """Kafka 3.9 brokers ``1..N`` in ZooKeeper mode on one ``zookeeper_connect`` (with its chroot).

    ``brokers`` maps id to ``kafka_peer.KafkaZkBroker`` (``bootstrap``, ``pid``, ``start()``, ``stop()``,
    ``kill()``, ``output()``); ``bootstrap`` lists the running ones. Every broker is stopped by its PID;
    ``KafkaZkCluster.started`` holds every cluster, so the plugin kills what a teardown did not reach.
    """

    started: set[KafkaZkCluster] = set()

    def __init__(self, work_dir: Path, zookeeper_connect: str, brokers: int = 3, settings: dict | None = None,
                 proxies: bool = False, topology=None):
        """``topology`` (a tests/harness/netns.py ``Topology`` with namespaces ``b1``..``bN``): each broker runs in
        its namespace, listening on and advertising its address, port 9092."""
        self.work_dir = Path(work_dir)
        self.zookeeper_connect = zookeeper_connect
        merged = {**ZK_CLUSTER_SETTINGS,
                  "offsets.topic.replication.factor": str(min(brokers, 3)),
                  "transaction.state.log.replication.factor": str(min(brokers, 3)),
                  **{k: str(v) for k, v in (settings or {}).items()}}
        self.settings = merged
        self.brokers = {i: kafka_peer_module.KafkaZkBroker(self.work_dir / f"broker-{i}", i, zookeeper_connect,
                                                           overrides=merged)
                        for i in range(1, brokers + 1)}
        if topology is not None:
            for i, b in self.brokers.items():
                b.host, b.port, b.argv_prefix = topology.address(f"b{i}"), 9092, topology.wrap(f"b{i}", [])
        self.proxies: dict[int, LinkProxy] = {}
        self.paused: set[int] = set()
        self.ever_started: set[int] = set()
        if proxies:
            for i in self.brokers:
                self.proxies[i] = LinkProxy(0)
                self._pick_ports(i)
        KafkaZkCluster.started.add(self)

    def _pick_ports(self, i: int) -> None:
        """Free client and INTERNAL ports for broker ``i`` behind its proxy (kept across restarts)."""
        b, proxy = self.brokers[i], self.proxies[i]
        internal = zk.free_port()
        proxy.target = (proxy.target[0], internal)
        b.port = zk.free_port()
        b.overrides.update({
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{internal}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{proxy.port}",
            "inter.broker.listener.name": "INTERNAL"})

    @property
    def chroot(self) -> str:
        return self.zookeeper_connect[self.zookeeper_connect.find("/"):] if "/" in self.zookeeper_connect else ""

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of the running brokers."""
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running())

    def running_ids(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.running()]

    def wait_formed(self, timeout: float = 60) -> int:
        """Every running broker lists every running broker and the same controller; returns its id."""
        from tests.harness.tierlog_cluster import wait_formed
        return wait_formed(self, timeout)

    def start(self, timeout: float = 180) -> KafkaZkCluster:
        """Start every broker not running, in parallel (JVM starts overlap); if one fails, stop all."""
        errors: list[BaseException] = []

        def start(i: int) -> None:
            broker = self.brokers[i]
            for attempt in range(3):
                try:
                    broker.start(timeout)
                    self.ever_started.add(i)
                    return
                except BaseException as e:  # noqa: BLE001 - reported by the caller's thread
                    # A first start whose proxied ports (picked here) were taken meanwhile picks again.
                    if attempt == 2 or i not in self.proxies or i in self.ever_started or not broker.port_clash():
                        errors.append(e)
                        return
                self._pick_ports(i)

        threads = [threading.Thread(target=start, args=(i,)) for i, b in self.brokers.items() if not b.running()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self, clean: bool = False, timeout: float = 30) -> None:
        """Stop every running broker by its PID: SIGKILL at once, or with ``clean`` SIGTERM (controlled
        shutdowns, which overlap; SIGKILL for what is left after ``timeout``). The last broker of a
        cluster cannot move its leaderships anywhere and retries its controlled shutdown for some 10 s,
        so a teardown that needs no clean logs kills."""
        for i in list(self.paused):
            self.resume(i)
        running = [b for b in self.brokers.values() if b.running()]
        if not clean:
            for b in running:
                b.kill()
            for proxy in self.proxies.values():
                proxy.close()
            return
        threads = [threading.Thread(target=b.stop, args=(timeout,)) for b in running]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for proxy in self.proxies.values():
            proxy.close()

    @classmethod
    def kill_running(cls) -> None:
        """SIGKILL every broker of every cluster still running (the end of a session)."""
        for cluster in list(cls.started):
            cluster.stop()
        cls.started.clear()

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker by its PID: its ZooKeeper session expires, the controller moves its leaderships."""
        self.brokers[broker_id].kill()



def start_kafka_zk_cluster(work_dir: Path, zookeeper, brokers: int = 3, chroot: str | None = None,
                           settings: dict | None = None, timeout: float = 180,
                           controller: int | None = None, proxies: bool = False) -> KafkaZkCluster:
    """A started Kafka 3.9 ZooKeeper-mode cluster of ``brokers`` brokers (ids 1..N) on ``zookeeper`` (a
    ``ZooKeeperServer``, e.g. the plugin's ``zookeeper`` fixture) under ``chroot`` (default: a fresh
    ``/kafka39-<hex>``); ``settings`` override ``ZK_CLUSTER_SETTINGS``. With ``controller``, that broker
    starts alone first and is the controller before the others start; with ``proxies``, the brokers talk to
    each other through LinkProxies."""
    resolve_zk_jars()
    chroot = chroot if chroot is not None else zk.unique_chroot("kafka39")
    cluster = KafkaZkCluster(work_dir, zk.connect_string(zookeeper, chroot), brokers, settings, proxies)
    if controller is not None:
        try:
            cluster.brokers[controller].start(timeout)
            rawclient.wait_for_controller(cluster.brokers[controller].bootstrap, controller, timeout)
        except BaseException:
            cluster.stop()
            raise
    cluster.start(timeout)
    slowest = max(b.start_seconds for b in cluster.brokers.values())
    print(f"\nApache Kafka {ZK_KAFKA_VERSION} (ZooKeeper mode) brokers {cluster.running_ids()} ready on "
          f"{cluster.bootstrap} under {cluster.zookeeper_connect} in {slowest:.1f}s")
    return cluster


def start_both_zk_clusters(kafka_dir, tierlog_dir, zookeeper, settings: dict, controller: int, proxies: bool = False):
    """A three-broker Kafka 3.9 cluster and a three-broker tierlog cluster on the same ZooKeeper, started at the
    same time (tierlog's on a thread), broker ``controller`` first on each; returns (kafka, tierlog, seconds the
    tierlog cluster took). If either fails, the other is stopped and the error raised."""
    import time

    from tests.harness.tierlog_cluster import start_cluster
    started = time.monotonic()

    def tierlog():
        cluster = start_cluster(tierlog_dir, zookeeper, 3, settings, controller=controller, proxies=proxies)
        return cluster, time.monotonic() - started
    both = start_together(
        {"tierlog": tierlog, "kafka": lambda: start_kafka_zk_cluster(kafka_dir, zookeeper, 3, settings=settings,
                                                                     controller=controller, proxies=proxies)},
        {"tierlog": lambda started_: started_[0].stop(), "kafka": lambda kafka: kafka.stop()})
    (cluster, seconds), kafka = both["tierlog"], both["kafka"]
    return kafka, cluster, seconds



# ------------------------------------------------------------------------------ Kafka 4.4, KRaft cluster

#: Settings of every node of a multi-node KRaft cluster (on top of node.id, the voters and the listeners):
#: the tiered ones match ``tests/harness/tiered.py``'s ``tiered_settings`` where both systems have them.
KRAFT_CLUSTER_SETTINGS = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.min.isr": "1",
    "auto.leader.rebalance.enable": "false",
}


class KafkaKRaftCluster:
    """Kafka 4.4 (or ``version``) nodes ``1..N`` in KRaft mode, each broker and controller (combined roles), the
    N static voters of one quorum, formatted with one cluster id. ``brokers`` maps id to ``kafka_peer.KafkaKRaftNode``
    (``bootstrap``, ``pid``, ``log_dir``, ``start()``, ``stop()``, ``kill()``); with ``tiered``, all tier
    into ``remote_dir`` through Kafka's LocalTieredStorage. Every node is stopped by its PID;
    ``KafkaKRaftCluster.started`` holds every cluster, so the plugin kills what a teardown did not reach.
    A restarted node keeps its ports, its log dir and its place in the quorum."""

    started: set[KafkaKRaftCluster] = set()

    def __init__(self, work_dir: Path, brokers: int = 3, tiered: bool = False, settings: dict | None = None,
                 jvm_opts: list[str] | None = None, version: str = KAFKA_VERSION,
                 per_broker: dict[int, dict] | None = None):
        self.version = version
        self.work_dir = Path(work_dir)
        self.remote_dir = self.work_dir / "remote"
        cluster_id = kafka_peer_module.random_cluster_id()
        ports = _distinct_free_ports(2 * brokers)
        voters = {i: ports[brokers + i - 1] for i in range(1, brokers + 1)}
        merged = {**KRAFT_CLUSTER_SETTINGS, **{k: str(v) for k, v in (settings or {}).items()}}
        own = {i: {k: str(v) for k, v in s.items()} for i, s in (per_broker or {}).items()}
        self.brokers = {i: kafka_peer_module.KafkaKRaftNode(
            self.work_dir / f"node-{i}", i, ports[i - 1], voters, cluster_id, remote_dir=self.remote_dir,
            tiered=tiered, overrides={**merged, **own.get(i, {})}, jvm_opts=jvm_opts, version=version)
            for i in range(1, brokers + 1)}
        KafkaKRaftCluster.started.add(self)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running())

    def running_ids(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.running()]

    def wait_formed(self, timeout: float = 60) -> int:
        """Every running broker lists every running broker and the same controller; returns its id."""
        from tests.harness.tierlog_cluster import wait_formed
        return wait_formed(self, timeout)

    def start(self, ids: list[int] | None = None, timeout: float = 180) -> KafkaKRaftCluster:
        """Start the given nodes (every one not running by default) in parallel: a node's start completes only
        once a quorum of controllers runs. If one fails, stop those started here."""
        ids = [i for i in (ids or list(self.brokers)) if not self.brokers[i].running()]
        try:
            in_parallel(lambda i: self.brokers[i].start(timeout), ids)
        except BaseException:
            for i in ids:
                self.brokers[i].kill()
            raise
        return self

    def kill(self, broker_id: int) -> None:
        """SIGKILL one node by its PID (broker and controller die together)."""
        self.brokers[broker_id].kill()

    def stop(self) -> None:
        """SIGKILL every running node by its PID (a teardown needs no clean logs)."""
        for b in self.brokers.values():
            b.kill()
        KafkaKRaftCluster.started.discard(self)

    @classmethod
    def kill_running(cls) -> None:
        for cluster in list(cls.started):
            cluster.stop()


def _distinct_free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = kafka_peer_module.free_port()
        if p not in ports:
            ports.append(p)
    return ports


def start_kafka_kraft_cluster(work_dir: Path, brokers: int = 3, tiered: bool = False, settings: dict | None = None,
                              timeout: float = 180, jvm_opts: list[str] | None = None, version: str = KAFKA_VERSION,
                              per_broker: dict[int, dict] | None = None) -> KafkaKRaftCluster:
    """A started KRaft cluster of Kafka ``version`` (4.1 by default) of ``brokers`` combined nodes (ids 1..N),
    tiered through LocalTieredStorage if asked; ``settings`` override ``KRAFT_CLUSTER_SETTINGS``, and
    ``per_broker`` (``{id: settings}``) those of one node. A start whose ports were taken meanwhile is tried
    once more with new ones."""
    resolve_jars(version)
    for attempt in range(2):
        folder = Path(work_dir) / f"try-{attempt}"
        cluster = KafkaKRaftCluster(folder, brokers, tiered, settings, jvm_opts, version, per_broker)
        try:
            cluster.start(timeout=timeout)
            break
        except KafkaPeerError:
            cluster.stop()
            if attempt == 1 or not any(b.port_clash() for b in cluster.brokers.values()):
                raise
    slowest = max(b.start_seconds for b in cluster.brokers.values())
    print(f"\nApache Kafka {version} (KRaft, {brokers} combined nodes"
          f"{', tiered' if tiered else ''}) ready on {cluster.bootstrap} in {slowest:.1f}s")
    return cluster
