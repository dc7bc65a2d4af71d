"""A tierlog cluster for tests: N brokers in ZooKeeper mode on one ZooKeeper under a chroot of their own.

``start_cluster(work_dir, zookeeper, brokers=3)`` starts broker processes 1..N in parallel (each on
127.0.0.1 and a free port, its log dir under ``work_dir``) and waits until every broker lists all of
them and a controller; ``TierlogCluster`` then stops, kills, pauses (SIGSTOP) and restarts brokers by id
and finds the controller. ``start_cluster(..., controller=1)`` starts broker 1 alone first and waits until
it is the controller, so a test knows which broker controls (a differential test starts Kafka's cluster
so too). ``proxies=True`` puts a ``LinkProxy`` in front of every broker's inter-broker listener (faults per
link between brokers), ``zookeeper_proxies=True`` a ``TcpProxy`` between each broker and ZooKeeper (one
broker cut from ZooKeeper while the others keep it), ``client_proxies=True`` a ``TcpProxy`` in front of every
broker's client listener, which the broker advertises (the clients' own network path, cut without touching
the brokers' links). ``topology=`` (a tests/harness/netns.py ``Topology`` with namespaces ``b1``..``bN``) runs
each broker in its namespace, listening on and advertising its address (port 9092), for faults made by
nftables between namespaces instead of proxies. ``add_brokers`` starts brokers with new ids on the running
cluster's chroot (a cluster grown or replaced). Every process is a ``BrokerProcess``, so the harness's
end-of-session sweep stops what a test left running.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.harness import rawclient, waiting
from tests.harness.broker import BrokerProcess
from tests.harness.link_proxy import LinkProxy
from tests.harness.rawclient import RawClient
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.threads import in_parallel
from tests.harness.zookeeper import connect_string, free_port, unique_chroot
from tierlog.protocol import ApiKey

#: Short enough that a killed broker is noticed within seconds, long enough for a busy 2-core machine's
#: stalls (Kafka's ZooKeeper-mode peer in these tests uses the same).
SESSION_TIMEOUT_MS = 6000
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "offsets.topic.num.partitions": "6",
    "controlled.shutdown.retry.backoff.ms": "200",
    "leader.imbalance.check.interval.seconds": "300",
}


def wait_until(check, timeout: float = 30, what: str = "the cluster"):
    """Poll ``check()`` until it returns something truthy (errors of a broker still starting or just killed
    count as not yet); AssertionError with the last value after ``timeout``."""
    return waiting.wait_until(check, timeout, what=what, interval=0.1, ignore=(Exception,))


class TierlogCluster:
    def __init__(self, work_dir: Path, zookeeper, brokers: int, settings: dict | None, chroot: str | None,
                 proxies: bool = False, per_broker: dict[int, dict] | None = None, zookeeper_proxies: bool = False,
                 client_proxies: bool = False, extra_listeners: str = "", topology=None):
        """``extra_listeners``: listeners every broker binds besides PLAINTEXT (",SSL://127.0.0.1:0"); the
        settings name their protocols (and ``inter.broker.listener.name`` when the brokers use one). With
        ``topology`` it is a template on the broker's address, bound and advertised (",SASL_SSL://{host}:9093").
        ``proxies``: every broker's inter-broker listener (INTERNAL) is advertised at a ``LinkProxy``
        (``self.proxies[i]``), so a test can cut, hold or delay the link between two brokers.
        ``per_broker``: settings of single brokers (``{2: {"broker.rack": "r2"}}``), over ``settings``.
        ``zookeeper_proxies``: every broker reaches ZooKeeper through a ``TcpProxy`` of its own
        (``self.zookeeper_proxies[i]``); ``zookeeper_connect`` stays the direct one, for the test's own use.
        ``client_proxies``: every broker's client listener (PLAINTEXT) is advertised at a ``TcpProxy``
        (``self.client_proxy(i)``) and the brokers talk over a listener of their own (INTERNAL), so cutting
        the clients' path leaves replication and the controller alone. ``bootstrap`` stays the direct
        addresses, for the test's own requests."""
        self.work_dir = work_dir
        self.zookeeper = zookeeper
        self.chroot = chroot or unique_chroot()
        self.zookeeper_connect = connect_string(zookeeper, self.chroot)
        self.settings = {**CLUSTER_SETTINGS, "offsets.topic.replication.factor": str(min(brokers, 3)),
                         **(settings or {})}
        self.with_proxies, self.with_zookeeper_proxies, self.with_client_proxies = \
            proxies, zookeeper_proxies, client_proxies
        self.extra_listeners = extra_listeners
        self.topology = topology
        assert topology is None or not (proxies or zookeeper_proxies or client_proxies), \
            "a cluster in namespaces has no proxies"
        self.brokers: dict[int, BrokerProcess] = {}
        self.proxies: dict[int, LinkProxy] = {}
        self.zookeeper_proxies: dict[int, TcpProxy] = {}
        self.client_proxies: dict[int, TcpProxy] = {}
        self._internal_ports: dict[int, int] = {}
        self._client_ports: dict[int, int] = {}
        self._started: set[int] = set()
        for i in range(1, brokers + 1):
            self._add(i, (per_broker or {}).get(i, {}))

    def _add(self, i: int, own: dict) -> None:
        """Broker ``i``'s process (not started), its log dir under ``work_dir`` and its proxies."""
        folder = self.work_dir / f"broker-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        extra = {}
        if self.with_proxies or self.with_client_proxies:
            extra = {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                     "inter.broker.listener.name": "INTERNAL"}
            internal = "INTERNAL://127.0.0.1:0"  # the port it binds
            if self.with_proxies:
                port = self._internal_ports[i] = free_port()
                proxy = self.proxies[i] = LinkProxy(port)
                internal = f"INTERNAL://127.0.0.1:{proxy.port}"
            client = f"127.0.0.1:{self.client_proxy(i).port}" if self.with_client_proxies else "127.0.0.1:0"
            extra["advertised.listeners"] = f"PLAINTEXT://{client},{internal}"
        zk_connect = self.zookeeper_connect
        if self.with_zookeeper_proxies:
            zk_proxy = self.zookeeper_proxies[i] = TcpProxy(self.zookeeper.port, self.zookeeper.host)
            zk_connect = f"{zk_proxy.address}{self.chroot}"
        if self.topology is not None:
            host = self.topology.address(f"b{i}")
            extra["advertised.listeners"] = f"PLAINTEXT://{host}:9092" + self.extra_listeners.format(host=host)
        self.brokers[i] = BrokerProcess(folder / "logs", {
            "zookeeper.connect": zk_connect, "broker.id": str(i), **extra, **self.settings, **own})
        if self.topology is not None:
            self.brokers[i].host = self.topology.address(f"b{i}")
            self.brokers[i].argv_prefix = self.topology.wrap(f"b{i}", [])
        self._set_listeners(i)

    def client_proxy(self, i: int) -> TcpProxy:
        """The clients' path to broker ``i`` (``client_proxies``), made on first use: also for an id not
        started yet, so a test can name its address (in ``bootstrap.servers``) before the broker exists.
        Until the broker runs it closes every connection it accepts."""
        if i not in self.client_proxies:
            self.client_proxies[i] = TcpProxy(0)
        return self.client_proxies[i]

    def client_bootstrap(self, ids) -> str:
        """The clients' addresses of brokers ``ids`` (``client_proxies``), comma-separated."""
        return ",".join(self.client_proxy(i).address for i in ids)

    def add_brokers(self, ids: list[int], per_broker: dict[int, dict] | None = None, timeout: float = 60,
                    shared: bool = False) -> TierlogCluster:
        """Start brokers with the new ids ``ids`` on this cluster's chroot with its settings (and their
        own ``per_broker`` ones), in parallel, and wait until every running broker sees them. They host
        nothing until a reassignment or a new topic gives them replicas, as in Kafka. ``shared``: the
        cluster is a module fixture's, so the brokers outlive the test that added them (the harness's
        per-test sweep leaves them; the fixture's ``stop()`` ends them)."""
        assert not set(ids) & set(self.brokers), f"broker ids {sorted(set(ids) & set(self.brokers))} exist"
        for i in ids:
            self._add(i, (per_broker or {}).get(i, {}))
            if shared:
                BrokerProcess.shared.add(self.brokers[i])
        self.start(ids, timeout)
        self.wait_formed(timeout)
        return self

    def _set_listeners(self, i: int) -> None:
        """The client listener on its previous port (a free one at first), plus INTERNAL behind its proxy."""
        b = self.brokers[i]
        if self.topology is not None:
            b.overrides["listeners"] = f"PLAINTEXT://{b.host}:9092" + self.extra_listeners.format(host=b.host)
            return
        listeners = f"PLAINTEXT://127.0.0.1:{b.port or self._client_ports.get(i, 0)}"
        if i in self._internal_ports:
            listeners += f",INTERNAL://127.0.0.1:{self._internal_ports[i]}"
        elif self.with_client_proxies:
            listeners += ",INTERNAL://127.0.0.1:0"
        b.overrides["listeners"] = listeners + self.extra_listeners

    def running_ids(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.proc is not None and b.proc.poll() is None]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers[i].bootstrap for i in self.running_ids())

    def start(self, ids: list[int] | None = None, timeout: float = 60) -> TierlogCluster:
        """Start brokers (all by default) in parallel, each on its previous port when it had one."""
        for i in ids or list(self.brokers):
            # kept apart from the process: a start that fails (not ready in time) leaves its port None, and the
            # next start must bind the same port again, which the cluster's clients and proxies know
            if self.brokers[i].port:
                self._client_ports[i] = self.brokers[i].port
            self._set_listeners(i)
            self.brokers[i].port = None
        in_parallel(lambda i: self._start_broker(i, timeout), ids or list(self.brokers))
        return self

    def _start_broker(self, i: int, timeout: float) -> None:
        """Start broker ``i``. On its first start, an INTERNAL port picked free but taken by another
        process before the broker bound it (another test's outgoing connection can get it) is picked
        again and the proxy pointed at the new one; later starts keep their ports, as a restart does."""
        b = self.brokers[i]
        for attempt in range(3):
            seen = len(b.output)
            try:
                b.start(timeout)
                self._started.add(i)
                if i in self.client_proxies:
                    self.client_proxies[i].target = ("127.0.0.1", b.port)
                return
            except RuntimeError:
                clash = "address already in use" in "".join(b.output[seen:])
                if attempt == 2 or not clash or i in self._started or i not in self._internal_ports:
                    raise
            port = self._internal_ports[i] = free_port()
            self.proxies[i].target = (self.proxies[i].target[0], port)
            self._set_listeners(i)

    def wait_until(self, check, timeout: float = 30, what: str = "the cluster"):
        return wait_until(check, timeout, what)

    def metadata(self, broker_id: int, topics: list[str] | None = None):
        return rawclient.metadata(self.brokers[broker_id].bootstrap, topics)

    def wait_formed(self, timeout: float = 60) -> int:
        return wait_formed(self, timeout)

    def controller_id(self) -> int:
        return self.wait_formed()

    def pause(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                os.kill(b.proc.pid, signal.SIGCONT)  # a paused broker cannot die of SIGKILL's wait otherwise
                b.kill()
            BrokerProcess.running.discard(b)
            BrokerProcess.shared.discard(b)
        for proxy in [*self.proxies.values(), *self.zookeeper_proxies.values(), *self.client_proxies.values()]:
            proxy.close()

    def output(self, broker_id: int) -> str:
        return "".join(self.brokers[broker_id].output)


def start_cluster(work_dir: Path, zookeeper, brokers: int = 3, settings: dict | None = None,
                  chroot: str | None = None, timeout: float = 60, controller: int | None = None,
                  proxies: bool = False, per_broker: dict[int, dict] | None = None,
                  zookeeper_proxies: bool = False, client_proxies: bool = False,
                  extra_listeners: str = "", topology=None) -> TierlogCluster:
    """A formed cluster of brokers 1..N; with ``controller``, that broker starts alone first and wins the
    controller election before the others start; with ``proxies``, the brokers talk through LinkProxies;
    with ``zookeeper_proxies``, each broker reaches ZooKeeper through a TcpProxy of its own; with
    ``client_proxies``, clients reach each broker through a TcpProxy (``client_proxy(i)``); with ``topology``,
    each broker runs in the namespace ``b<id>`` of that tests/harness/netns.py ``Topology``."""
    cluster = TierlogCluster(work_dir, zookeeper, brokers, settings, chroot, proxies, per_broker, zookeeper_proxies,
                             client_proxies, extra_listeners, topology)
    try:
        if controller is not None:
            cluster.start([controller], timeout)
            rawclient.wait_for_controller(cluster.brokers[controller].bootstrap, controller, timeout)
        cluster.start([i for i in cluster.brokers if i != controller], timeout=timeout)
        cluster.wait_formed(timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


# ------------------------------------------------------------------------------ topics of a test


def partition(cluster, name: str, p: int = 0, via: int | None = None):
    """Partition ``p`` of topic ``name`` in the Metadata of broker ``via`` (the first running by default)."""
    via = via or cluster.running_ids()[0]
    t = cluster.metadata(via, [name]).topics[0]
    assert t.error_code == 0, t
    return next(x for x in t.partitions if x.partition_index == p)


def wait_formed(cluster, timeout: float = 60) -> int:
    """Every running broker of ``cluster`` (tierlog's or Kafka's: ``running_ids()``, ``brokers[i].bootstrap``)
    lists every running broker and the same live controller; returns its id."""
    ids = sorted(cluster.running_ids())

    def formed():
        seen = set()
        for i in ids:
            md = rawclient.metadata(cluster.brokers[i].bootstrap)
            if sorted(b.node_id for b in md.brokers) != ids or md.controller_id not in ids:
                return None
            seen.add(md.controller_id)
        return seen.pop() if len(seen) == 1 else None
    return wait_until(formed, timeout, "every broker seeing every broker and one controller")


def create(cluster, name: str, partitions: int = 1, configs: dict | None = None,
           assignment: list[list[int]] | None = None) -> None:
    """CreateTopics at the controller (replication factor 3, or ``assignment``: replicas per partition), then
    wait until every running broker names a leader for every partition."""
    # the socket waits as long as the request's own timeout (a slow link: --latency-ms of the netns runs)
    raw = RawClient(rawclient.controller_address(cluster.bootstrap), timeout=35)
    try:
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": -1 if assignment else partitions,
            "replication_factor": -1 if assignment else 3,
            "assignments": [{"partition_index": i, "broker_ids": r} for i, r in enumerate(assignment or [])],
            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
            "timeout_ms": 30000, "validate_only": False})
    finally:
        raw.close()
    assert resp.topics[0].error_code == 0, resp
    for i in cluster.running_ids():
        rawclient.wait_for_leaders_on(cluster.brokers[i].bootstrap, name, len(assignment) if assignment else partitions,
                                      30)


def wait_isr(cluster, name: str, size: int, p: int = 0, timeout: float = 30):
    """Wait until the ISR of ``name``-``p`` has ``size`` replicas; returns the partition's metadata."""
    def check():
        got = partition(cluster, name, p)
        return got if len(got.isr_nodes) == size else None
    return cluster.wait_until(check, timeout, f"the ISR of {name}-{p} having {size} replicas")


def replica_folder(cluster, broker_id: int, name: str, p: int = 0):
    """The replica's folder, in whichever log dir of the broker holds it."""
    home = cluster.brokers[broker_id].log_dir
    found = [d / f"{name}-{p}" for d in (home, home.parent / "logs-b") if (d / f"{name}-{p}").is_dir()]
    return found[0] if found else home / f"{name}-{p}"
