"""What the application tests stand on and read back, the same against tierlog's broker, tierlog's cluster and
Apache Kafka: the ``Target`` (its bootstrap, topics, the applications' settings, a broker SIGKILLed and
restarted), a topic to its end (read_committed stops at the last stable offset), the open transactions
(ListTransactions, asked of every broker: each lists those it coordinates), the last stable offset against
the high watermark (ListOffsets at each partition's leader), a consumer group's committed offsets, and a
patient wait."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.harness import rawclient, waiting
from tests.harness.rawclient import raw_client
from tests.harness.transactions import list_offset
from tests.harness.waiting import not_yet
from tierlog.protocol import ApiKey

OPEN_STATES = ["Ongoing", "PrepareCommit", "PrepareAbort"]


class NotYet(Exception):
    """A broker's answer that asks to come back later (a coordinator still loading after a restart)."""


#: What a broker restarted a moment ago may answer: a refused connection, a partition without its leader yet.
TRANSIENT = (KafkaException, OSError, NotYet)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` until it returns something true; that value (an AssertionError naming ``what``).
    A transient error counts as not yet, until the time is up (then the timeout names it and chains to it)."""
    return waiting.wait_until(predicate, timeout, what=what, interval=interval, ignore=TRANSIENT)


def partitions(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "apps-metadata"})
    try:
        found = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        c.close()
    if not found:  # an application creates it a moment later
        raise NotYet(f"no topic {topic} yet")
    return found


def read_to_end(bootstrap: str, topic: str, isolation: str, timeout: float = 90) -> dict[int, list[tuple]]:
    """Every record of ``topic`` an ``isolation`` consumer returns from the start to the end of each partition
    (the high watermark, or the last stable offset for read_committed): {partition: [(key, value), ...]}."""
    parts = partitions(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"apps-read-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    got: dict[int, list[tuple]] = {p: [] for p in parts}
    done: set[int] = set()

    def at_end():
        if done == set(parts):
            return True
        for m in c.consume(500, timeout=0.5):
            if m.error() is not None:
                assert m.error().code() == m.error()._PARTITION_EOF, m.error()
                done.add(m.partition())
            else:
                got[m.partition()].append((m.key(), m.value()))
                done.discard(m.partition())
        return not_yet(sorted(done))

    try:
        waiting.wait_until(at_end, timeout, interval=0,
                           what=f"{topic} ({isolation}) read to its end (done partitions)")
    finally:
        c.close()
    return got


def brokers(bootstrap: str) -> dict[int, str]:
    """{node id: host:port} of the brokers, from the first address of ``bootstrap`` that answers."""
    for address in bootstrap.split(","):
        try:
            md = rawclient.metadata(address, [])
        except OSError:  # that broker is down: ask the next
            continue
        return {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    raise NotYet(f"no broker of {bootstrap} answers")


def open_transactions_by_broker(bootstrap: str, pattern: str = "", states: list[str] = OPEN_STATES
                                ) -> dict[int, list[tuple[str, str]]]:
    """{coordinator's node id: [(transactional id, state)]} of the transactions in ``states`` (not complete by
    default; [] for all) whose id starts with ``pattern`` (ListTransactions v0, which both brokers answer),
    from every broker."""
    found = {}
    for node, address in brokers(bootstrap).items():
        with raw_client(address) as raw:
            r = raw.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": states, "producer_id_filters": []})
        if r.error_code != 0:
            raise NotYet(f"ListTransactions at {node}: error {r.error_code}")
        found[node] = [(t.transactional_id, t.transaction_state) for t in r.transaction_states
                       if t.transactional_id.startswith(pattern)]
    return found


def open_transactions(bootstrap: str, pattern: str = "") -> list[tuple[str, str]]:
    """(transactional id, state) of the open transactions whose id starts with ``pattern``, all brokers'."""
    return [t for listed in open_transactions_by_broker(bootstrap, pattern).values() for t in listed]


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: leader's node id} of ``topic``."""
    md = rawclient.metadata(next(iter(brokers(bootstrap).values())), [topic])
    t = md.topics[0]
    if t.error_code or not t.partitions or any(p.leader_id < 0 for p in t.partitions):
        raise NotYet(f"{topic}: no leader for every partition yet")
    return {p.partition_index: p.leader_id for p in t.partitions}


def stable_and_end(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (last stable offset, high watermark)} of ``topic``, each asked of the partition's leader."""
    addresses = brokers(bootstrap)
    got = {}
    for p, leader in leaders(bootstrap, topic).items():
        with raw_client(addresses[leader]) as raw:
            got[p] = (list_offset(raw, topic, 1, p), list_offset(raw, topic, 0, p))
    return got


def held_partitions(bootstrap: str, topic: str) -> list[int]:
    """The partitions of ``topic`` whose last stable offset lags their high watermark (an open transaction)."""
    return [p for p, (stable, end) in stable_and_end(bootstrap, topic).items() if stable < end]


UNSTABLE_OFFSET_COMMIT = 88


def group_coordinator(bootstrap: str, group: str) -> int:
    """The node id of ``group``'s coordinator (FindCoordinator v4)."""
    with raw_client(next(iter(brokers(bootstrap).values()))) as raw:
        r = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    c = r.coordinators[0]
    if c.error_code != 0:
        raise NotYet(f"FindCoordinator {group}: error {c.error_code}")
    return c.node_id


def pending_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    """The partitions of ``topic`` whose offsets in ``group`` wait for a transaction to end: OffsetFetch v8 with
    require_stable answers UNSTABLE_OFFSET_COMMIT for them."""
    parts = partitions(bootstrap, topic)
    with raw_client(brokers(bootstrap)[group_coordinator(bootstrap, group)]) as raw:
        r = raw.request(ApiKey.OFFSET_FETCH, 8, {"require_stable": True, "groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": parts}]}]})
    g = r.groups[0]
    if g.error_code != 0:  # a coordinator loading or moved
        raise NotYet(f"OffsetFetch {group}: error {g.error_code}")
    return [p.partition_index for t in g.topics for p in t.partitions if p.error_code == UNSTABLE_OFFSET_COMMIT]


#: Where each scenario runs: tierlog's broker, tierlog's cluster, and Kafka as the reference. ``TARGETS``
#: keeps the reference (the scenario proved against Kafka on every run); ``TIERLOG_TARGETS`` drops it unless
#: ``TIERLOG_APPS_KAFKA=1``: the milder scenarios of a module, whose expectations are the harsher one's,
#: hold on Kafka too, and CI saves the JVM minutes (run them all: ``TIERLOG_APPS_KAFKA=1 pytest tests/apps``).
TARGETS = ["tierlog", "cluster", "kafka"]
TIERLOG_TARGETS = TARGETS if os.environ.get("TIERLOG_APPS_KAFKA") == "1" else ["tierlog", "cluster"]


@dataclass
class Target:
    """The brokers a test runs against. ``streams``/``connect``: Kafka Streams' and Connect's settings for them
    (their internal topics' replication). ``sigkill_restart(...)``: SIGKILL the broker and start it again on
    its port and log dir; on a cluster, one after the other, the broker coordinating the open
    transaction whose transactional id starts with ``coordinator_of``, the one leading the partition of
    topic ``leader_of`` that holds an open transaction's records, and the coordinator of the consumer group
    ``group_coordinator_of``; with ``all_brokers`` every other broker after them."""
    bootstrap: str
    streams: dict
    connect: dict
    restart: Callable = field(repr=False)
    cluster: object = field(default=None, repr=False)

    @classmethod
    def of_cluster(cls, cluster, streams: dict, connect: dict) -> Target:
        target = cls(cluster.bootstrap, streams, connect, restart=None, cluster=cluster)
        target.restart = target._restart_cluster_broker
        return target

    def create_topic(self, name: str, partitions: int) -> None:
        if self.cluster is None:
            rawclient.create_topic(self.bootstrap, name, partitions)
        else:  # the cluster's default replication factor (3)
            rawclient.create_topic_in_cluster(self.bootstrap, name, partitions, replication_factor=-1)

    def sigkill_restart(self, coordinator_of: str | None = None, leader_of: str | None = None,
                        group_coordinator_of: str | None = None, all_brokers: bool = False) -> None:
        self.restart(coordinator_of=coordinator_of, leader_of=leader_of, group_coordinator_of=group_coordinator_of,
                     all_brokers=all_brokers)

    def elect_preferred_leaders(self) -> bool:
        """On a cluster, give every partition back to its preferred replica (ElectLeaders at the controller):
        a broker SIGKILLed and restarted, which caught up as a follower, leads its partitions again, so what
        is read next comes from the log, producer state and aborted-transaction index it replicated. False
        on a single broker (nothing moves)."""
        if self.cluster is None:
            return False

        def elected():
            with raw_client(rawclient.controller_address(self.bootstrap)) as raw:
                raw.request(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None,
                                                      "timeout_ms": 30000})
            return preferred_leaders(self.bootstrap)
        wait_until(elected, 120, "every partition led by its preferred replica", interval=1)
        wait_until(lambda: in_sync(self.bootstrap), 120, "every partition's replicas all in sync", interval=1)
        return True

    def _restart_cluster_broker(self, coordinator_of: str | None, leader_of: str | None,
                                group_coordinator_of: str | None, all_brokers: bool) -> None:
        """SIGKILL the coordinator of the open transaction, start it again and wait until every replica is in
        sync; then the same for the leader of the partition holding the open transaction's records, and for the
        group's coordinator (all found while the transaction is open, before the first kill; a broker with
        several of these roles is killed once); with ``all_brokers``, then every other broker in turn."""
        victims: dict[int, list[str]] = {}
        if coordinator_of is not None:  # the open transaction's; else the transactional id's, whatever its state
            node = next(n for states in (OPEN_STATES, []) for n, listed in
                        open_transactions_by_broker(self.bootstrap, coordinator_of, states).items() if listed)
            victims.setdefault(node, []).append(f"the transaction coordinator of {coordinator_of}*")
        if leader_of is not None:  # partition 0 when none holds an open transaction at this moment
            held = held_partitions(self.bootstrap, leader_of) or [0]
            node = leaders(self.bootstrap, leader_of)[held[0]]
            victims.setdefault(node, []).append(f"the leader of {leader_of}-{held[0]}")
        if group_coordinator_of is not None:
            node = group_coordinator(self.bootstrap, group_coordinator_of)
            victims.setdefault(node, []).append(f"the group coordinator of {group_coordinator_of}")
        if all_brokers:
            for node in sorted(self.cluster.brokers):
                victims.setdefault(node, ["the next broker"])
        for node, why in victims.items():
            self._sigkill_restart(node, " and ".join(why))

    def _sigkill_restart(self, node: int, why: str) -> None:
        cluster = self.cluster
        # Every topic, the internal ones and the applications' own, on all three brokers: the broker killed
        # holds no record that only it has.
        md = rawclient.metadata(cluster.brokers[node].bootstrap)
        thin = [f"{t.name}-{p.partition_index}" for t in md.topics for p in t.partitions if len(p.replica_nodes) < 3]
        assert not thin, f"partitions on fewer than 3 brokers: {thin}"
        print(f"SIGKILL broker {node}: {why}")
        cluster.brokers[node].kill()
        cluster.start([node], timeout=120)
        cluster.wait_formed(120)
        wait_until(lambda: in_sync(self.bootstrap), 240, "every partition's replicas all in sync again", interval=1)


def preferred_leaders(bootstrap: str) -> bool:
    """Every partition led by its preferred replica (the first of its replicas)."""
    md = rawclient.metadata(next(iter(brokers(bootstrap).values())))
    return all(t.error_code == 0 and all(p.leader_id == p.replica_nodes[0] for p in t.partitions) for t in md.topics)


def in_sync(bootstrap: str) -> bool:
    """Every partition of every topic with all its replicas in sync and a leader."""
    md = rawclient.metadata(next(iter(brokers(bootstrap).values())))
    return all(t.error_code == 0 and all(p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                                         for p in t.partitions) for t in md.topics)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (-1001 where none)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in partitions(bootstrap, topic)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermarks of ``topic``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "apps-metadata"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in partitions(bootstrap, topic)}
    finally:
        c.close()
