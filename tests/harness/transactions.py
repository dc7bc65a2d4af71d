"""Transactions driven by hand, as a transaction coordinator would drive a partition: a producer id from
InitProducerId, transactional batches by Produce, COMMIT and ABORT markers by WriteTxnMarkers (v1, the only
version Kafka 4.1 accepts); and consumers (confluent-kafka, kafka-python) that return what an application
sees, read until a sentinel value so that no wait is a guess. A broker taking such batches needs
:data:`UNVERIFIED`."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.harness.rawclient import RawClient
from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"

#: Broker settings for transactions driven by hand: a transactional batch of a producer that no coordinator
#: knows is appended only without KIP-890's partition verification (on by default, as in Kafka 4.x).
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


def init_producer_id(raw: RawClient) -> tuple[int, int]:
    """A producer id and epoch (non-transactional InitProducerId: the broker has no transaction
    coordinator yet, and a partition only needs the id and epoch)."""
    r = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                  "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def produce(raw: RawClient, topic: str, values: list[bytes], *, partition: int = 0, producer_id: int = -1,
            epoch: int = -1, sequence: int = -1, transactional: bool = False,
            transactional_id: str | None = "hand-made", keys: list[bytes | None] | None = None):
    """One Produce v9 (acks=all) of one batch (``keys``: one per value, else null keys); the partition's
    answer. A transactional batch goes with a transactional id, which Kafka requires
    (``transactional_id=None`` to leave it out)."""
    batch = build_batch(list(zip(keys or [None] * len(values), values, strict=True)), producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=transactional)
    resp = raw.request(ApiKey.PRODUCE, 9, {
        "acks": -1, "timeout": 10000, "transactional_id": transactional_id if transactional else None,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def write_markers(raw: RawClient, *markers: dict) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers v1 with ``markers`` (see :func:`marker`); {(producer id, topic, partition): error code}."""
    resp = raw.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": list(markers)})
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in resp.markers for t in m.topics for p in t.partitions}


def marker(producer_id: int, epoch: int, commit: bool, topic: str, partitions=(0,), coordinator_epoch: int = 0) -> dict:
    return {"producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}


def list_offset(raw: RawClient, topic: str, isolation_level: int, partition: int = 0) -> int:
    """ListOffsets v7 LATEST: the high watermark (0) or the last stable offset (1, read_committed)."""
    r = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def consume_confluent(bootstrap: str, topic: str, isolation: str, until: bytes, timeout: float = 60,
                      partition: int = 0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a confluent-kafka consumer returns from the earliest offset up to and
    including the record whose value is ``until``."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{time.monotonic_ns()}",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([CKTopicPartition(topic, partition, 0)])
    got: list[tuple[int, bytes]] = []

    def reached():
        for m in c.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value()))
            if m.value() == until:
                return got
        return not_yet(got)

    try:
        return wait_until(reached, timeout, interval=0, what=f"confluent-kafka ({isolation}) to reach {until!r}")
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, isolation: str, until: bytes, timeout: float = 60,
                         partition: int = 0) -> list[tuple[int, bytes]]:
    """:func:`consume_confluent` with kafka-python."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      isolation_level=isolation)
    tp = KTopicPartition(topic, partition)
    c.assign([tp])
    c.seek_to_beginning()
    got: list[tuple[int, bytes]] = []

    def reached():
        for r in c.poll(500).get(tp, []):
            got.append((r.offset, r.value))
            if r.value == until:
                return got
        return not_yet(got)

    try:
        return wait_until(reached, timeout, interval=0, what=f"kafka-python ({isolation}) to reach {until!r}")
    finally:
        c.close()


CONSUMERS = {"confluent-kafka": consume_confluent, "kafka-python": consume_kafka_python}
