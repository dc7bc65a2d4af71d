"""Transaction markers on a replicated partition, three tierlog brokers: WriteTxnMarkers answers once every
in-sync replica holds the marker (acks=all), followers rebuild the same ``.txnindex`` byte for byte from the
batches they copy, a follower answers NOT_LEADER_OR_FOLLOWER and a broker without a replica
UNKNOWN_TOPIC_OR_PARTITION, and after the leader dies the new leader keeps the open transaction's last
stable offset and hides the aborted records from read_committed consumers."""

from __future__ import annotations

import pytest

from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, partition, replica_folder, start_cluster, wait_isr
from tests.harness.transactions import (
    READ_COMMITTED,
    UNVERIFIED,
    consume_confluent,
    init_producer_id,
    list_offset,
    marker,
    produce,
    write_markers,
)

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    # Hand-made transactions, which no coordinator knows: without KIP-890's verification.
    c = start_cluster(tmp_path_factory.mktemp("txn-markers"), zookeeper, brokers=3,
                      settings={"replica.fetch.backoff.ms": "200", "num.partitions": "1", **UNVERIFIED})
    yield c
    c.stop()


def folder_bytes(cluster, broker_id: int, name: str, suffix: str) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(replica_folder(cluster, broker_id, name).glob(f"*{suffix}")))


def test_markers_are_replicated_before_the_answer_and_followers_index_the_aborts(cluster):
    name = unique("txn")
    create(cluster, name, configs={"min.insync.replicas": "2"})
    state = partition(cluster, name)
    leader = state.leader_id
    followers = [r for r in state.replica_nodes if r != leader]
    raw = RawClient(cluster.brokers[leader].bootstrap)
    try:
        pids = [init_producer_id(raw) for _ in range(3)]
        for i, (pid, epoch) in enumerate(pids):
            values = [b"t%d-%d" % (i, j) for j in range(3)]
            assert produce(raw, name, values, producer_id=pid, epoch=epoch, sequence=0,
                           transactional=True).error_code == NONE
        # Aborts of the first two while the third is still open; the third commits.
        answer = write_markers(raw, marker(pids[0][0], pids[0][1], False, name),
                               marker(pids[1][0], pids[1][1], False, name))
        assert answer == {(pids[0][0], name, 0): NONE, (pids[1][0], name, 0): NONE}
        # The answer came after the high watermark passed the markers: every in-sync replica holds them now
        # (on a machine slow enough for a follower to fall out of the ISR, the others still do).
        in_sync = [f for f in followers if f in partition(cluster, name).isr_nodes]
        assert in_sync
        log = folder_bytes(cluster, leader, name, ".log")
        assert all(folder_bytes(cluster, f, name, ".log") == log for f in in_sync)
        index = folder_bytes(cluster, leader, name, ".txnindex")
        assert len(index) == 2 * 34
        assert all(folder_bytes(cluster, f, name, ".txnindex") == index for f in in_sync)
        assert list_offset(raw, name, 1) == 6  # the third transaction, open, starts at 6
        assert produce(raw, name, [b"end"]).error_code == NONE
    finally:
        raw.close()
    # Markers sent to a follower are refused; a broker without a replica does not know the partition.
    for f in followers:
        other = RawClient(cluster.brokers[f].bootstrap)
        try:
            assert write_markers(other, marker(pids[2][0], pids[2][1], True, name)) == {
                (pids[2][0], name, 0): NOT_LEADER_OR_FOLLOWER}
        finally:
            other.close()
    # The leader dies: a follower takes over with the open transaction and the aborted index.
    cluster.brokers[leader].kill()
    try:
        new = cluster.wait_until(lambda: (p := partition(cluster, name)).leader_id in followers and p.leader_id,
                                 60, f"a new leader of {name}")
        raw = RawClient(cluster.brokers[new].bootstrap)
        try:
            assert cluster.wait_until(lambda: list_offset(raw, name, 1) == 6, 30, "the LSO on the new leader")
            assert write_markers(raw, marker(pids[2][0], pids[2][1], True, name)) == {(pids[2][0], name, 0): NONE}
        finally:
            raw.close()
        got = consume_confluent(cluster.brokers[new].bootstrap, name, READ_COMMITTED, until=b"end")
        assert [v for _, v in got] == [b"t2-0", b"t2-1", b"t2-2", b"end"]
    finally:
        cluster.start([leader])
        wait_isr(cluster, name, 3, timeout=60)


def test_a_broker_without_a_replica_answers_unknown_topic_or_partition(cluster):
    name = unique("placed")
    create(cluster, name, assignment=[[1, 2]])
    raw = RawClient(cluster.brokers[3].bootstrap)
    try:
        assert write_markers(raw, marker(1, 0, True, name)) == {(1, name, 0): UNKNOWN_TOPIC_OR_PARTITION}
    finally:
        raw.close()
