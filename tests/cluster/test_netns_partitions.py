"""Real network partitions (issue 40): ZooKeeper and three brokers each in a network namespace of its own, faults
made with nftables inside the namespaces (tests/harness/netns.py), not proxies.

- The zombie leader: the leader of a partition (acks=all, three replicas, min.insync.replicas=2) cut from
  ZooKeeper both ways, still reachable by clients and followers. A new leader is elected; writes sent straight to
  the old leader once the new one knows it leads are never acknowledged; after the heal the old leader is in the
  ISR again, following the new leader's epoch; every acknowledged write is read back once, in order, and two
  readers and the final read agree at every offset.
- One way: the leader cannot send to one follower: the ISR shrinks to two, writes go on, the follower comes back.

Each test has a ZooKeeper and a cluster of its own (the namespaces' addresses are private to it) and waits for
observable states only. Needs root, ``ip`` and ``nft`` (.ci/run installs nftables); skipped locally without.
"""

from __future__ import annotations

import json

import pytest

from tests.harness import netns
from tests.harness.jepsen.netns_faults import one_way, zombie_leader
from tests.harness.netns_cluster import netns_cluster
from tests.harness.prerequisites import unavailable
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS

SETTINGS = {"replica.lag.time.max.ms": "5000"}


@pytest.fixture
def nc(tmp_path):
    why = netns.available()
    if why is not None:
        unavailable("network namespaces with nftables", why)
    with netns_cluster(tmp_path, settings=SETTINGS) as cluster:
        yield cluster


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


def test_a_leader_that_cannot_send_to_a_follower_shrinks_the_isr_and_keeps_writing(nc):
    result = one_way(nc)
    assert result["leader_after"] == result["leader"], result
    assert_consistent(result)
