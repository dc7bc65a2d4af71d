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
a running cluster). Every server started here is stopped by its PID; ``kill_running()`` (the plugin, at the end of the
session) kills what a teardown did not reach.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

from tests.harness.prerequisites import unavailable
from tierlog.tools.zookeeper import ZooKeeperError, ZooKeeperServer, find_classpath, find_java

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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_zookeeper(data_dir: Path, port: int | None = None, timeout: float = 60) -> ZooKeeperServer:
    """A started ZooKeeper on 127.0.0.1 (``port``, else a free one) with its data in ``data_dir``; its
    ``connect`` is ``127.0.0.1:<port>``. A free port taken by another process between the pick and the
    bind is picked again."""
    require()
    for attempt in range(3):
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

    deadline = time.monotonic() + timeout
    while not is_ok(server.host, server.port, timeout=0.5):
        if time.monotonic() > deadline:
            raise AssertionError(f"ZooKeeper on {server.connect} did not answer imok within {timeout}s")
        time.sleep(0.05)
