"""Differential against Apache Kafka 3.9 in ZooKeeper mode: AlterPartitionReassignments and
ListPartitionReassignments (KIP-455) sent to a tierlog cluster and a Kafka cluster, three brokers each with
broker 1 the controller, must get the same error codes and messages, and reassignments that complete must
leave the same replicas and leader.

Deliberate differences, pinned here: Kafka 3.9's brokers answer NOT_CONTROLLER to a reassignment sent to a
broker that is not the controller, tierlog's forward it (Envelope) and answer what the controller answers; and
Kafka moves the leader epoch at every step of a reassignment, tierlog only when the leader changes or replicas
are removed (printed, not compared). The copy itself, throttles, cancellation and failover are
tests/cluster/test_reassignment.py's.
"""

from __future__ import annotations

import pytest

from tests.harness import apache_kafka, rawclient
from tests.harness.rawclient import RawClient
from tests.harness.tierlog_cluster import in_parallel, start_cluster
from tests.harness.waiting import not_yet, wait_until
from tierlog.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    NotControllerError,
    UnknownTopicOrPartitionError,
)
from tierlog.protocol import ApiKey

SETTINGS = {"auto.leader.rebalance.enable": "false"}
CONTROLLER = 1
MOVING = "reassign-diff"  # 1 partition on [2, 3, 1]
SINGLE = "reassign-diff-rf1"  # 1 partition on [1]


@pytest.fixture(scope="module")
def sides(zookeeper, kafka_zk_jars, tmp_path_factory):
    """{"kafka": cluster, "tierlog": cluster}, started together, broker 1 the controller of each, with the same
    two topics."""
    box: dict = {}

    def start(name: str) -> None:
        folder = tmp_path_factory.mktemp(f"{name}-reassign")
        if name == "kafka":
            box[name] = apache_kafka.start_kafka_zk_cluster(folder, zookeeper, 3, settings=SETTINGS,
                                                            controller=CONTROLLER)
        else:
            box[name] = start_cluster(folder, zookeeper, 3, SETTINGS, controller=CONTROLLER, timeout=180)
    try:
        in_parallel(start, ["kafka", "tierlog"])
        for cluster in box.values():
            create(cluster, MOVING, [2, 3, 1])
            create(cluster, SINGLE, [1])
        yield box
    finally:
        for cluster in box.values():
            cluster.stop()


def create(cluster, name: str, replicas: list[int]) -> None:
    raw = RawClient(cluster.brokers[CONTROLLER].bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": replicas}], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
    finally:
        raw.close()
    assert resp.topics[0].error_code == 0, resp
    for i in cluster.brokers:
        rawclient.wait_for_leaders_on(cluster.brokers[i].bootstrap, name, 1, 30)


def alter(cluster, broker: int, topic: str, p: int, replicas: list[int] | None):
    """(top-level code and message, (the partition's code and message) or None)."""
    raw = RawClient(cluster.brokers[broker].bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "replicas": replicas}]}]})
    finally:
        raw.close()
    parts = [(int(x.error_code), x.error_message) for t in resp.responses for x in t.partitions]
    return (int(resp.error_code), resp.error_message), parts[0] if parts else None


def listed(cluster, topics=None):
    raw = RawClient(cluster.brokers[CONTROLLER].bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": topics})
    finally:
        raw.close()
    return (int(resp.error_code), resp.error_message), [(t.name, [p.partition_index for p in t.partitions])
                                                       for t in resp.topics]


def state(cluster, topic: str):
    """(replicas, leader, leader epoch) of ``topic``-0 as every broker's Metadata shows it, once they agree."""
    seen = set()
    for i in cluster.brokers:
        p = rawclient.metadata(cluster.brokers[i].bootstrap, [topic]).topics[0].partitions[0]
        seen.add((tuple(p.replica_nodes), p.leader_id, p.leader_epoch))
    return seen.pop() if len(seen) == 1 else None


def wait_state(cluster, topic: str, replicas: tuple[int, ...], timeout: float = 60):
    def reached():
        got = state(cluster, topic)
        return got if got is not None and got[0] == replicas else not_yet(got)

    return wait_until(reached, timeout, interval=0.1, what=f"{topic} to reach replicas {replicas}")


INVALID = InvalidReplicaAssignmentError.code
REQUESTS = [  # (topic, partition, target or None to cancel) -> expected partition error code
    ((MOVING, 0, None), NoReassignmentInProgressError.code),
    ((MOVING, 0, [1, 2, 9]), INVALID),
    ((MOVING, 0, [1, 2, 2]), INVALID),
    ((MOVING, 0, []), INVALID),
    ((MOVING, 0, [1, -1, 2]), INVALID),
    ((MOVING, 5, [1, 2, 3]), UnknownTopicOrPartitionError.code),
    ((MOVING, 5, None), NoReassignmentInProgressError.code),
    (("reassign-nope", 0, [1, 2, 3]), UnknownTopicOrPartitionError.code),
    (("reassign-nope", 0, None), NoReassignmentInProgressError.code),
]


def test_refusals_have_kafkas_codes_and_messages(sides):
    answers = {name: [alter(c, CONTROLLER, *request) for request, _ in REQUESTS] for name, c in sides.items()}
    assert [a[1][0] for a in answers["kafka"]] == [code for _, code in REQUESTS], answers["kafka"]
    assert all(a[0] == (0, "") for a in answers["kafka"])  # no top-level error: "" where the field allows null
    assert answers["tierlog"] == answers["kafka"]
    elsewhere = {name: alter(c, 2, MOVING, 0, None) for name, c in sides.items()}
    assert elsewhere["kafka"][0][0] == NotControllerError.code  # Kafka 3.9's brokers do not forward
    assert elsewhere["tierlog"] == answers["kafka"][0]  # tierlog's do: the controller's answer
    print(f"\n{len(REQUESTS)} refusals with the same codes and messages on both, e.g. "
          f"{answers['kafka'][1][1][1]!r}")


def test_completed_reassignments_leave_the_same_replicas_and_leaders(sides):
    for c in sides.values():
        assert listed(c) == ((0, ""), [])
    before = {name: state(c, MOVING) for name, c in sides.items()}
    assert {b[:2] for b in before.values()} == {((2, 3, 1), 2)}
    # The same replicas in another order: nothing to copy, the leader stays.
    assert {name: alter(c, CONTROLLER, MOVING, 0, [1, 3, 2]) for name, c in sides.items()} == {
        "kafka": ((0, ""), (0, None)), "tierlog": ((0, ""), (0, None))}
    reordered = {name: wait_state(c, MOVING, (1, 3, 2)) for name, c in sides.items()}
    assert {r[:2] for r in reordered.values()} == {((1, 3, 2), 2)}
    # A single replica moved to another broker: it leads there.
    assert {name: alter(c, CONTROLLER, SINGLE, 0, [2])[1] for name, c in sides.items()} == {
        "kafka": (0, None), "tierlog": (0, None)}
    moved = {name: wait_state(c, SINGLE, (2,)) for name, c in sides.items()}
    assert {m[:2] for m in moved.values()} == {((2,), 2)}
    for c in sides.values():
        assert listed(c) == ((0, ""), [])
        assert listed(c, [{"name": SINGLE, "partition_indexes": [0, 3]}, {"name": "zz", "partition_indexes": [0]}]) \
            == ((0, ""), [])
    print("\nleader epochs (kafka/tierlog): reorder " + "/".join(str(reordered[n][2]) for n in ("kafka", "tierlog"))
          + ", move " + "/".join(str(moved[n][2]) for n in ("kafka", "tierlog")))
