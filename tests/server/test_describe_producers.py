"""DescribeProducers (KIP-664) over sockets: the active producers of a partition from its producer state, raw
and through Kafka's ``kafka-transactions describe-producers``; the errors of a partition that does not exist."""

from __future__ import annotations

import re

import pytest

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.transactions import UNVERIFIED, init_producer_id, marker, produce, write_markers
from tierlog.protocol import ApiKey

NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("producers") / "logs", {"num.partitions": "1", **UNVERIFIED})
    b.start()
    yield b
    b.stop()


def describe(raw: RawClient, topics: dict[str, list[int]]) -> dict[tuple[str, int], tuple[int, dict]]:
    """{(topic, partition): (error code, {producer id: (epoch, last sequence, coordinator epoch, txn start)})}"""
    resp = raw.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): (p.error_code, {
        a.producer_id: (a.producer_epoch, a.last_sequence, a.coordinator_epoch, a.current_txn_start_offset)
        for a in p.active_producers}) for t in resp.topics for p in t.partitions}


def two_producers(raw: RawClient, topic: str) -> tuple[int, int, int]:
    """An idempotent producer (3 records) and a transactional one whose transaction is open at offset 3."""
    idem, ei = init_producer_id(raw)
    txn, et = init_producer_id(raw)
    assert produce(raw, topic, [b"a", b"b", b"c"], producer_id=idem, epoch=ei, sequence=0).error_code == NONE
    assert produce(raw, topic, [b"t0", b"t1"], producer_id=txn, epoch=et, sequence=0,
                   transactional=True).error_code == NONE
    return idem, txn, et


def test_describe_producers_answers_the_partition_producer_state(shared):
    topic = unique("producers")
    create_topic(shared.bootstrap, topic)
    raw = RawClient(shared.bootstrap)
    try:
        assert describe(raw, {topic: [0]}) == {(topic, 0): (NONE, {})}
        idem, txn, et = two_producers(raw, topic)
        assert describe(raw, {topic: [0]}) == {(topic, 0): (NONE, {idem: (0, 2, -1, -1), txn: (et, 1, -1, 3)})}
        assert write_markers(raw, marker(txn, et, True, topic, coordinator_epoch=4)) == {(txn, topic, 0): NONE}
        assert describe(raw, {topic: [0]})[(topic, 0)][1][txn] == (et, 1, 4, -1)
        missing = unique("missing")
        assert describe(raw, {missing: [0], topic: [1]}) == {
            (missing, 0): (UNKNOWN_TOPIC_OR_PARTITION, {}), (topic, 1): (UNKNOWN_TOPIC_OR_PARTITION, {})}
    finally:
        raw.close()


def test_kafka_transactions_describe_producers(shared, kafka_tool):
    topic = unique("producers-tool")
    create_topic(shared.bootstrap, topic)
    raw = RawClient(shared.bootstrap)
    try:
        idem, txn, et = two_producers(raw, topic)
    finally:
        raw.close()
    out = kafka_tool("TransactionsCommand", "--bootstrap-server", shared.bootstrap, "describe-producers",
                     "--topic", topic, "--partition", "0").stdout
    lines = [re.split(r"\s+", line.strip()) for line in out.splitlines() if line.strip()]
    assert lines[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                        "CurrentTransactionStartOffset"]
    rows = {int(r[0]): (int(r[1]), int(r[2]), int(r[3]), r[5]) for r in lines[1:]}
    assert rows == {idem: (0, -1, 2, "None"), txn: (et, -1, 1, "3")}
    # find-hanging reads every partition of the broker with DescribeProducers; a transaction open for less than
    # the longest transaction timeout is not hanging, so it needs neither ListTransactions nor DescribeTransactions.
    out = kafka_tool("TransactionsCommand", "--bootstrap-server", shared.bootstrap, "find-hanging",
                     "--broker-id", "1").stdout
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                      "LastTimestamp", "Duration(min)"]]
