"""Record validation on produce, over a real socket to a live ``tierlog broker``: each kind of poison batch
(tests/harness/poison.py: a valid CRC around broken records) gets Kafka's error, nothing of it is stored (a
fetch returns none of it, the log end offset does not move), and good batches are still accepted."""

from __future__ import annotations

import time

import pytest

from tests.harness import poison
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient, create_topic, unique
from tierlog.protocol import ApiKey
from tierlog.records import iter_records


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("poison") / "logs", {"num.partitions": "1"}).start()
    raw = RawClient(b.bootstrap, timeout=60)
    yield b, raw
    raw.close()
    b.stop()


def _produce(raw, topic, records, version=9):
    resp = raw.request(ApiKey.PRODUCE, version, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return resp.responses[0].partition_responses[0]


def _end_offset(raw, topic):
    resp = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return resp.topics[0].partitions[0].offset


def _fetch_values(raw, topic):
    resp = raw.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    return [r.value for r in iter_records(part.records or b"")]


@pytest.mark.parametrize("kind", sorted(poison.POISON))
def test_poison_batch_is_refused_and_nothing_is_stored(live, kind):
    broker, raw = live
    topic = unique("poison")
    create_topic(broker.bootstrap, topic, configs=poison.TOPIC_CONFIGS.get(kind))
    now = int(time.time() * 1000)
    ok = poison.good(now)
    assert _produce(raw, topic, ok).error_code == 0
    assert _end_offset(raw, topic) == 3

    p = _produce(raw, topic, poison.POISON[kind](now))
    assert p.error_code == poison.EXPECTED[kind], (kind, p)
    if kind in poison.WITH_RECORD_ERRORS:
        assert [e.batch_index for e in p.record_errors] == [0] and p.record_errors[0].batch_index_error_message
        assert p.error_message
    else:
        assert list(p.record_errors) == [] and p.error_message is None
    assert _end_offset(raw, topic) == 3
    assert _fetch_values(raw, topic) == [b"v" * 20] * 3

    # the partition still takes good batches, of every codec
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert _produce(raw, topic, poison.good(int(time.time() * 1000), codec)).error_code == 0, codec
    assert _end_offset(raw, topic) == 18
    assert _fetch_values(raw, topic) == [b"v" * 20] * 18


def test_produce_v7_has_no_record_errors_field_but_the_same_code(live):
    broker, raw = live
    topic = unique("poison")
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact"})
    p = _produce(raw, topic, poison.POISON["null key on compacted topic"](int(time.time() * 1000)), version=7)
    assert p.error_code == poison.INVALID_RECORD
    assert _end_offset(raw, topic) == 0
