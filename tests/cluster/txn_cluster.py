"""What the transaction tests on a tierlog cluster share: the cluster's settings, producers, coordinators and reads."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import wait_until
from tests.harness.transactions import READ_COMMITTED, consume_confluent
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC, partition_for
from tierlog.protocol import ApiKey

TXN_PARTITIONS = 12


SETTINGS = {"num.partitions": "1", "replica.fetch.backoff.ms": "200",
            "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def raw_request(cluster, broker_id: int, api: int, version: int, values: dict):
    raw = RawClient(cluster.brokers[broker_id].bootstrap)
    try:
        return raw.request(api, version, values)
    finally:
        raw.close()


def find_coordinator(cluster, key: str, key_type: int = 1, via: int | None = None) -> int:
    """The coordinator's node id as broker ``via`` names it (waits while COORDINATOR_NOT_AVAILABLE)."""
    def ask():
        via_id = via or cluster.running_ids()[0]
        r = raw_request(cluster, via_id, ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
        c = r.coordinators[0]
        return c.node_id if c.error_code == 0 and c.node_id in cluster.running_ids() else None
    return wait_until(ask, 60, f"a coordinator for {key!r}")


def describe_state(cluster, broker_id: int, transactional_id: str) -> str | None:
    """The transaction's state as its coordinator ``broker_id`` describes it (None: an error)."""
    r = raw_request(cluster, broker_id, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})
    s = r.transaction_states[0]
    return s.transaction_state if s.error_code == 0 else None


def txn_state_partitions(cluster) -> dict[int, tuple[int, tuple[int, ...]]]:
    """{partition: (leader, replicas)} of __transaction_state (created by a first FindCoordinator)."""
    find_coordinator(cluster, unique("warm-up"))
    def read():
        md = cluster.metadata(cluster.running_ids()[0], [TXN_STATE_TOPIC])
        t = md.topics[0]
        if t.error_code or len(t.partitions) != TXN_PARTITIONS or any(p.leader_id < 0 for p in t.partitions):
            return None
        return {p.partition_index: (p.leader_id, tuple(p.replica_nodes)) for p in t.partitions}
    return wait_until(read, 60, f"{TXN_STATE_TOPIC} with a leader for every partition")


def transactional_id_in(partition: int, prefix: str) -> str:
    """A transactional id whose __transaction_state partition is ``partition``."""
    base = unique(prefix)
    return next(f"{base}-{i}" for i in range(100000) if partition_for(f"{base}-{i}", TXN_PARTITIONS) == partition)


def producer(bootstrap: str, transactional_id: str, timeout_ms: int = 120000) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": timeout_ms, "linger.ms": 0, "message.timeout.ms": 120000})
    p.init_transactions(120)
    return p


def send(p: Producer, topic: str, values_by_partition: dict[int, list[bytes]]) -> None:
    for index, values in values_by_partition.items():
        for v in values:
            p.produce(topic, v, partition=index)
    assert p.flush(60) == 0  # every record acknowledged before the transaction ends


def commit_and_abort(cluster, p: Producer, topic: str, tid: str, outcomes: list[bool], partitions: int,
                     tag: bytes) -> None:
    """One transaction per outcome (True: commit, False: abort) writing three records to each partition, then a
    committed ``end-<tid>`` record on each; read_committed must see exactly the committed records, in order."""
    expected: dict[int, list[bytes]] = {i: [] for i in range(partitions)}
    for n, commit in enumerate(outcomes):
        values = {i: [b"%s%d-p%d-%d" % (tag, n, i, j) for j in range(3)] for i in range(partitions)}
        p.begin_transaction()
        send(p, topic, values)
        if commit:
            p.commit_transaction(60)
            for i in range(partitions):
                expected[i] += values[i]
        else:
            p.abort_transaction(60)
    end = b"end-" + tid.encode()
    p.begin_transaction()
    send(p, topic, {i: [end] for i in range(partitions)})
    p.commit_transaction(60)
    assert read_committed(cluster, topic, partitions, end) == {i: expected[i] + [end] for i in range(partitions)}


def read_committed(cluster, topic: str, partitions: int, end: bytes) -> dict[int, list[bytes]]:
    """Every partition read with read_committed from the start up to its ``end`` record (which proves the
    last stable offset moved past everything before it)."""
    return {i: [v for _, v in consume_confluent(cluster.bootstrap, topic, READ_COMMITTED, end, timeout=120,
                                                partition=i)] for i in range(partitions)}


def offsets_coordinator_other_than(cluster, node: int) -> str:
    """A group id whose coordinator is not broker ``node``."""
    for i in range(200):
        group = f"{unique('grp')}-{i}"
        if find_coordinator(cluster, group, key_type=0) != node:
            return group
    raise AssertionError(f"every group lands on broker {node}")


def committed_offset(cluster, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=60)[0].offset
    finally:
        c.close()
