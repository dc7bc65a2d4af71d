"""ZooKeeper for cluster tests, through the product's launcher (:mod:`tierlog.tools.zookeeper`).

``start_zookeeper(data_dir)`` runs one standalone server on 127.0.0.1 and a free port with a tick of
200 ms, so sessions may be as short as ``MIN_SESSION_TIMEOUT_MS`` (400 ms): tests give brokers short
``zookeeper.session.timeout.ms`` and see a dead broker's session expire quickly (but not so short that
a few seconds' stall of a busy machine expires every session: Kafka's peer uses 6 s). Writes are not
fsynced (``forceSync=no``). Tests share one server
(the plugin's session fixture ``zookeeper``, one per pytest-xdist worker) and keep apart by chroot:
``unique_chroot()`` names a fresh one, ``connect_string(server, chroot)`` is the ``zookeeper.connect``
of a broker under it (Kafka and tierlog brokers create their chroot), ``ensure_chroot`` creates it for
a client that does not.

``require()`` checks that Java and ZooKeeper's jars are there: without them the test is skipped
locally and fails in CI (tests/harness/prerequisites.py), where .ci/run installs Debian's package.
``restart_zookeeper`` starts a stopped server again on the same port and data (a ZooKeeper restart under
a running cluster). ``start_ensemble(root)`` runs three servers as one quorum (an :class:`Ensemble`, whose
``connect`` names all three), so a test can kill and restart one of them while the quorum keeps serving.
Every server started here is stopped by its PID; ``kill_running()`` (the plugin, at the end of the session)
kills what a teardown did not reach.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.harness.prerequisites import unavailable
from tests.harness.waiting import not_yet, wait_until
from tierlog.tools.zookeeper import ZooKeeperError, ZooKeeperServer, find_classpath, find_java, four_letter_word

TICK_TIME_MS = 200
#: Two ticks, ZooKeeper's floor: the shortest session a test can ask for.
MIN_SESSION_TIMEOUT_MS = 2 * TICK_TIME_MS
MAX_SESSION_TIMEOUT_MS = 60_000
#: Test data need not survive a power cut: without an fsync per write, a slow disk cannot stall the server
#: past the short sessions of the brokers.
TEST_CONFIG = {"forceSync": "no"}

#: Servers started and not yet stopped (see ``kill_running``).
running: set[ZooKeeperServer] = set()


def require() -> None:
    """Skip locally, fail in CI, when Java or ZooKeeper's jars are missing (the one-line reason says which)."""
    try:
        find_java()
        find_classpath()
    except ZooKeeperError as e:
        unavailable("ZooKeeper", str(e))


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket is held until all are chosen (one closed before the next is
    bound can be handed out again: an ensemble once got one client port twice, and its second server found
    the first answering there)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class WrappedServer(ZooKeeperServer):
    """A server whose argv runs under a prefix (``ip netns exec NS``: tests/harness/netns.py)."""

    prefix: list[str] = []

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


def start_zookeeper(data_dir: Path, port: int | None = None, timeout: float = 60, topology=None,
                    name: str = "zk") -> ZooKeeperServer:
    """A started ZooKeeper on 127.0.0.1 (``port``, else a free one) with its data in ``data_dir``; its
    ``connect`` is ``127.0.0.1:<port>``. A free port taken by another process between the pick and the
    bind is picked again. With ``topology`` (a tests/harness/netns.py ``Topology``), it runs inside the
    namespace ``name`` and listens on its address (port 2181 unless ``port``)."""
    require()
    for attempt in range(3):
        if topology is not None:
            server = WrappedServer(data_dir, topology.address(name), port or 2181, tick_time_ms=TICK_TIME_MS,
                                   min_session_timeout_ms=MIN_SESSION_TIMEOUT_MS,
                                   max_session_timeout_ms=MAX_SESSION_TIMEOUT_MS, extra=TEST_CONFIG)
            server.prefix = topology.wrap(name, [])
        else:
            server = ZooKeeperServer(data_dir, "127.0.0.1", port or free_port(), tick_time_ms=TICK_TIME_MS,
                                     min_session_timeout_ms=MIN_SESSION_TIMEOUT_MS,
                                     max_session_timeout_ms=MAX_SESSION_TIMEOUT_MS, extra=TEST_CONFIG)
        running.add(server)
        try:
            return server.start(timeout)
        except ZooKeeperError as e:
            running.discard(server)
            if port is not None or "already in use" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def stop_zookeeper(server: ZooKeeperServer) -> None:
    """SIGTERM by PID, SIGKILL after 10 s."""
    server.stop()
    running.discard(server)


def restart_zookeeper(server: ZooKeeperServer, timeout: float = 60) -> ZooKeeperServer:
    """Start a stopped server again on its port and data folder (its snapshots and transaction log, so
    znodes and sessions survive); returns once it answers ``imok``."""
    server.stop()
    running.add(server)
    try:
        return server.start(timeout)
    except BaseException:
        running.discard(server)
        raise


def kill_running() -> None:
    """SIGKILL every server started here and not stopped (the end of a session whose teardown failed)."""
    for server in list(running):
        server.kill()
        running.discard(server)


def unique_chroot(prefix: str = "t") -> str:
    """A chroot no other test uses, ``/<prefix>-<12 hex digits>``."""
    return f"/{prefix}-{uuid.uuid4().hex[:12]}"


def connect_string(server: ZooKeeperServer, chroot: str = "") -> str:
    """``zookeeper.connect`` for brokers using ``server`` under ``chroot`` ("" for the root)."""
    return f"{server.connect}{chroot}"


def ensure_chroot(server: ZooKeeperServer, chroot: str, timeout: float = 15) -> None:
    """Create ``chroot`` (and its parents) on ``server``."""
    from kazoo.client import KazooClient

    client = KazooClient(server.connect, timeout=timeout)
    client.start(timeout=timeout)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def wait_until_ok(server: ZooKeeperServer, timeout: float = 30) -> None:
    """Poll ``ruok`` until the server answers ``imok`` (after a SIGCONT, say), or fail."""
    from tierlog.tools.zookeeper import is_ok

    wait_until(lambda: is_ok(server.host, server.port, timeout=0.5), timeout,
               what=f"ZooKeeper on {server.connect} to answer imok")


# -------------------------------------------------------------------------------------------- ensemble

#: Ticks a follower has to connect and sync to the leader, and to stay in step: 4 s and 2 s at a 200 ms tick,
#: generous for a loaded machine.
ENSEMBLE_CONFIG = {**TEST_CONFIG, "initLimit": "20", "syncLimit": "10"}


class QuorumServer(ZooKeeperServer):
    """A server of an ensemble: ZooKeeper's quorum peer instead of the product's standalone main class (under
    ``prefix``, ``ip netns exec NS``, when it runs in a network namespace)."""

    prefix: list[str] = []

    def command(self) -> list[str]:
        cmd = super().command()
        return [*self.prefix, *cmd[:-2], "org.apache.zookeeper.server.quorum.QuorumPeerMain", cmd[-1]]


@dataclass
class Ensemble:
    """ZooKeeper servers forming one quorum on 127.0.0.1; ``connect`` lists every one of them."""

    servers: list[ZooKeeperServer]

    @property
    def connect(self) -> str:
        return ",".join(s.connect for s in self.servers)

    @property
    def host(self) -> str:  # what a TcpProxy in front of "the" ZooKeeper would dial: the first server
        return self.servers[0].host

    @property
    def port(self) -> int:
        return self.servers[0].port

    def mode(self, server: ZooKeeperServer) -> str:
        """"leader", "follower", or "" while the server is down or not in the quorum (``srvr``)."""
        for line in four_letter_word(server.host, server.port, "srvr", timeout=0.5).splitlines():
            if line.startswith("Mode: "):
                return line.split(": ", 1)[1].strip()
        return ""

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if self.mode(s) == "leader"), None)

    def wait_quorum(self, timeout: float = 60) -> None:
        """Until one running server leads and every other running one follows it."""

        def quorum():
            modes = [self.mode(s) for s in self.servers if s.proc is not None and s.proc.poll() is None]
            return modes.count("leader") == 1 and modes.count("follower") == len(modes) - 1 or not_yet(modes)

        wait_until(quorum, timeout, what="a ZooKeeper quorum (modes of the running servers)")

    def stop(self) -> None:
        for s in self.servers:
            stop_zookeeper(s)


def start_ensemble(root: Path, size: int = 3, timeout: float = 60, topology=None) -> Ensemble:
    """``size`` servers (data in ``root``/zk<id>) on free ports, started and formed into a quorum. With
    ``topology`` (tests/harness/netns.py), server i runs in the namespace ``zk<i>`` on its address (client port
    2181, quorum 2888, election 3888)."""
    require()
    if topology is None:
        hosts = ["127.0.0.1"] * size
        chosen = free_ports(3 * size)
        ports = [tuple(chosen[3 * i:3 * i + 3]) for i in range(size)]  # client, quorum, election
    else:
        hosts = [topology.address(f"zk{i}") for i in range(1, size + 1)]
        ports = [(2181, 2888, 3888)] * size
    peers = {f"server.{i}": f"{h}:{q}:{e}" for i, (h, (_, q, e)) in enumerate(zip(hosts, ports), 1)}
    servers = []
    for i, (host, (client, _, _)) in enumerate(zip(hosts, ports), 1):
        data = root / f"zk{i}"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{i}\n")
        server = QuorumServer(data, host, client, tick_time_ms=TICK_TIME_MS,
                              min_session_timeout_ms=MIN_SESSION_TIMEOUT_MS,
                              max_session_timeout_ms=MAX_SESSION_TIMEOUT_MS, extra={**ENSEMBLE_CONFIG, **peers})
        if topology is not None:
            server.prefix = topology.wrap(f"zk{i}", [])
        servers.append(server)
    ensemble = Ensemble(servers)
    try:
        for server in servers:  # a server answers ruok before it has a quorum: start each, then wait for it
            running.add(server)
            server.start(timeout)
        ensemble.wait_quorum(timeout)
    except BaseException:
        ensemble.stop()
        raise
    return ensemble
