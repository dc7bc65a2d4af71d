"""The ZooKeeper of the cluster tests (tests/harness/zookeeper.py): chroots keep tests apart, short
sessions are allowed, and a dead client's ephemeral znodes go when its session expires."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from kazoo.client import KazooClient

from tests.harness import zookeeper as zk
from tierlog.tools.zookeeper import four_letter_word


def _client(connect: str, timeout: float = 10) -> KazooClient:
    client = KazooClient(connect, timeout=timeout)
    client.start(timeout=15)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


def test_chroots_keep_tests_apart(zookeeper, zookeeper_connect):
    assert zookeeper_connect.startswith(f"{zookeeper.connect}/t-")
    other = zk.connect_string(zookeeper, zk.unique_chroot())
    for connect in (zookeeper_connect, other):
        zk.ensure_chroot(zookeeper, connect[len(zookeeper.connect):])
    a, b = _client(zookeeper_connect), _client(other)
    try:
        a.create("/brokers/ids/1", b"a", makepath=True)
        assert a.get_children("/brokers/ids") == ["1"]
        assert b.exists("/brokers") is None
    finally:
        _close(a)
        _close(b)
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")


# A client in a process of its own, killed with SIGKILL: its session ends by expiry, not by a close.
_HOLDER = textwrap.dedent('''
    import sys, time
    from kazoo.client import KazooClient
    client = KazooClient(sys.argv[1], timeout=float(sys.argv[2]))
    client.start(timeout=15)
    client.create("/holder", b"", ephemeral=True)
    print(client._session_timeout, flush=True)
    time.sleep(600)
''')


def test_a_killed_clients_short_session_expires(zookeeper, zookeeper_connect):
    zk.ensure_chroot(zookeeper, zookeeper_connect[len(zookeeper.connect):])
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, zookeeper_connect, "0.6"], stdout=subprocess.PIPE,
                              text=True)
    watcher = _client(zookeeper_connect)
    try:
        negotiated = int(holder.stdout.readline())
        assert zk.MIN_SESSION_TIMEOUT_MS <= negotiated <= 600, negotiated  # the server allows short sessions
        assert watcher.exists("/holder") is not None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        killed = time.monotonic()
        deadline = killed + 10
        while watcher.exists("/holder") is not None:
            assert time.monotonic() < deadline, "the ephemeral znode outlived its session"
            time.sleep(0.05)
        print(f"\nsession of {negotiated} ms expired {time.monotonic() - killed:.2f}s after SIGKILL")
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        _close(watcher)
