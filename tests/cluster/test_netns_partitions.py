"""Real network partitions (issue 40): ZooKeeper and three brokers each in a network namespace of its own, faults
made with nftables inside the namespaces (tests/harness/netns.py), not proxies.

- The zombie leader: the leader of a partition (acks=all, three replicas, min.insync.replicas=2) cut from
  ZooKeeper both ways, still reachable by clients and followers. A new leader is elected; writes sent straight to
  the old leader once the new one knows it leads are never acknowledged; after the heal the old leader is in the
  ISR again, following the new leader's epoch; every acknowledged write is read back once, in order, and two
  readers and the final read agree at every offset.
- One way: the leader cannot send to one follower: the ISR shrinks to two, writes go on, the follower comes back;
  also with the brokers replicating over SASL_SSL (SCRAM-SHA-512 on TLS), as part of the fault runs do.

Each test has a ZooKeeper and a cluster of its own (the namespaces' addresses are private to it) and waits for
observable states only. Needs root, ``ip`` and ``nft`` (.ci/run installs nftables); skipped locally without.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.harness import netns
from tests.harness.jepsen.netns_faults import one_way, zombie_leader
from tests.harness.netns import TABLE
from tests.harness.netns_cluster import netns_cluster
from tests.harness.prerequisites import unavailable
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, wait_until

SETTINGS = {"replica.lag.time.max.ms": "5000"}


def require_netns() -> None:
    why = netns.available()
    if why is not None:
        unavailable("network namespaces with nftables", why)


@pytest.fixture(params=["plaintext"])
def nc(request, tmp_path):
    """The cluster; its inter-broker listener PLAINTEXT, or (parametrized indirectly) SASL_SSL with SCRAM."""
    require_netns()
    with netns_cluster(tmp_path, settings=SETTINGS, inter_broker=request.param) as cluster:
        yield cluster


LISTENER = ("import socket,sys\ns=socket.socket();s.bind((sys.argv[1],7000));s.listen(64)\n"
            "while True: s.accept()[0].close()")
CONNECT = "import socket,sys;socket.create_connection((sys.argv[1],7000),timeout=1)"


def test_the_topology_s_faults_cut_what_they_name_and_heal_removes_them():
    """Each namespace's listener, reached from another namespace and from the test process, under each fault."""
    require_netns()
    topo = netns.Topology(["a", "b"])
    listeners = []
    try:
        for n in ("a", "b"):
            listeners.append(subprocess.Popen(topo.wrap(n, [sys.executable, "-c", LISTENER, topo.address(n)])))

        def reach(src: str | None, dst: str) -> bool:
            if src is None:
                try:
                    socket.create_connection((topo.address(dst), 7000), timeout=1).close()
                    return True
                except OSError:
                    return False
            return subprocess.run(topo.wrap(src, [sys.executable, "-c", CONNECT, topo.address(dst)]),
                                  capture_output=True, timeout=30).returncode == 0

        def paths() -> tuple[bool, bool, bool, bool]:
            return reach("a", "b"), reach("b", "a"), reach(None, "a"), reach(None, "b")
        wait_until(lambda: all(paths()), 15, "both listeners reachable")
        topo.cut("a", "b")
        assert paths() == (False, False, True, True)
        topo.heal()
        assert all(paths())
        topo.cut_one_way("a", "b")  # TCP needs both ways: a connection either side opens fails
        assert paths()[:2] == (False, False) and "daddr" in topo.rules("a") and topo.faults == ["cut-one-way a->b"]
        topo.heal()
        topo.isolate("a")
        assert paths() == (False, False, False, True)
        topo.heal()
        topo.clients_cut("b")
        assert paths() == (True, True, True, False)
        topo.heal()
        topo.loss("a", 100)
        assert paths() == (False, False, False, True)
        topo.heal()
        assert all(paths()) and TABLE not in topo.rules("a") and not topo.faults
    finally:
        for p in listeners:
            p.kill()
            p.wait()
        topo.close()
    gone = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert topo.prefix not in gone


ECHO = ("import socket,sys,threading\ns=socket.socket();s.bind((sys.argv[1],7001));s.listen(64)\n"
        "def echo(c):\n  while d := c.recv(100): c.sendall(d)\n"
        "while True: threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()")
#: seconds for a connection and two request/response round trips to the echo server, or "timeout"
ROUND_TRIPS = ("import socket,sys,time\nt=time.monotonic()\n"
               "try:\n  c=socket.create_connection((sys.argv[1],7001),timeout=3)\n"
               "  for _ in range(2):\n    c.sendall(b'x'); assert c.recv(1) == b'x'\n  print(time.monotonic()-t)\n"
               "except OSError: print('timeout')")


def test_the_topology_s_delay_costs_every_round_trip_between_namespaces_and_faults_still_cut():
    """``delay(50)``: a new connection and two round trips from one namespace to another take at least 3 round trips
    of 100 ms; the test process's own connections are not delayed; a cut still cuts and a heal keeps the delay."""
    require_netns()
    topo = netns.Topology(["a", "b"])
    echo = None
    try:
        echo = subprocess.Popen(topo.wrap("b", [sys.executable, "-c", ECHO, topo.address("b")]))

        def timed(src: str | None) -> str:
            argv = [sys.executable, "-c", ROUND_TRIPS, topo.address("b")]
            return subprocess.run(topo.wrap(src, argv) if src else argv, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        wait_until(lambda: timed(None) != "timeout", 15, "the echo server")
        direct = float(timed("a"))
        topo.delay(50)
        delayed = float(timed("a"))
        assert delayed >= 0.3 > direct, (direct, delayed)  # the handshake's round trip and two requests'
        assert float(timed(None)) < 0.3
        topo.cut("a", "b")
        assert timed("a") == "timeout"
        topo.heal()
        assert float(timed("a")) >= 0.3
    finally:
        if echo is not None:
            echo.kill()
            echo.wait()
        topo.close()


def assert_consistent(result: dict) -> None:
    report = result.pop("report")
    print("\n" + report.format() + "\n" + json.dumps(result))
    assert not report.incomplete, report.incomplete
    assert not report.lost, report.lost[:10]
    assert not report.duplicated, report.duplicated[:10]
    assert not report.reordered, report.reordered[:10]
    assert not report.mismatched, report.mismatched[:10]
    assert not report.divergent, report.divergent[:10]
    assert report.ok and report.read - report.indeterminate_read == result["acknowledged"]


def test_a_leader_cut_from_zookeeper_acknowledges_nothing_it_could_lose(nc):
    result = zombie_leader(nc)
    assert result["epoch_after"] > result["epoch_before"] and result["new_leader"] != result["old_leader"]
    assert result["probe_acked"] > 0, "the probe never wrote to the leader before the cut"
    assert result["probe_acked_after_new_leader_knew"] == 0, result
    # it stops acknowledging acks=all writes once its followers follow another leader: the session's expiry plus
    # the controller's election, never long after
    assert result["old_leader_last_ack_after_cut_s"] <= result["election_s"] + 2, result
    assert result["election_s"] < SESSION_TIMEOUT_MS / 1000 + 15, result
    assert_consistent(result)


@pytest.mark.parametrize("nc", ["plaintext", "sasl_ssl"], indirect=True)
def test_a_leader_that_cannot_send_to_a_follower_shrinks_the_isr_and_keeps_writing(nc):
    result = one_way(nc)
    assert result["leader_after"] == result["leader"], result
    assert_consistent(result)
