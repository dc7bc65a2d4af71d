"""What the application tests read back, the same against tierlog and Apache Kafka: a topic to its end
(read_committed stops at the last stable offset), the open transactions (ListTransactions), a consumer
group's committed offsets, and a patient wait."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.harness.rawclient import raw_client
from tierlog.protocol import ApiKey

OPEN_STATES = ["Ongoing", "PrepareCommit", "PrepareAbort"]


class NotYet(Exception):
    """A broker's answer that asks to come back later (a coordinator still loading after a restart)."""


#: What a broker restarted a moment ago may answer: a refused connection, a partition without its leader yet.
TRANSIENT = (KafkaException, OSError, NotYet)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` until it returns something true; that value (an AssertionError naming ``what``).
    A transient error counts as not yet, until the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except TRANSIENT:
            if time.monotonic() > deadline:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(interval)


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
    deadline = time.monotonic() + timeout
    try:
        while done != set(parts):
            assert time.monotonic() < deadline, f"{topic} ({isolation}) not read to its end in {timeout} s"
            for m in c.consume(500, timeout=0.5):
                if m.error() is not None:
                    assert m.error().code() == m.error()._PARTITION_EOF, m.error()
                    done.add(m.partition())
                else:
                    got[m.partition()].append((m.key(), m.value()))
                    done.discard(m.partition())
    finally:
        c.close()
    return got


def open_transactions(bootstrap: str, pattern: str = "") -> list[tuple[str, str]]:
    """(transactional id, state) of the transactions not complete whose id starts with ``pattern``
    (ListTransactions v0, which both brokers answer)."""
    with raw_client(bootstrap) as raw:
        r = raw.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": OPEN_STATES, "producer_id_filters": []})
    if r.error_code != 0:
        raise NotYet(f"ListTransactions: error {r.error_code}")
    return [(t.transactional_id, t.transaction_state) for t in r.transaction_states
            if t.transactional_id.startswith(pattern)]


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
