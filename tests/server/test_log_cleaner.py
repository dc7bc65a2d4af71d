"""The log cleaner in a running broker: a compacted topic with small segments is cleaned by the cleaner
threads, and kafka-python reads back one record per key (its latest) plus what the active segment holds."""

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from tests.harness.broker import running_broker

TOPIC = "compacted"
KEYS = 10
RECORDS = 502


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("cleaner"), {
            "log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01"}) as b:
        yield b


def read_all(bootstrap: str, expected_end: int) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    from kafka import TopicPartition
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    rows = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1000).values():
            rows += [(r.offset, r.key, r.value) for r in batch]
        if consumer.position(tp) >= expected_end:
            break
    consumer.close()
    return rows


def test_a_compacted_topic_is_cleaned_to_one_record_per_key(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, acks="all")
    produced = {}
    for i in range(RECORDS):
        key, value = b"key-%d" % (i % KEYS), b"value-%d" % i
        meta = producer.send(TOPIC, key=key, value=value).get(timeout=30)
        produced[key] = (meta.offset, value)
    producer.close()

    # Wait for the cleaner: its threads run every 100 ms; the read shrinks once the rounds swapped.
    deadline = time.monotonic() + 120
    while True:
        rows = read_all(broker.bootstrap, RECORDS)
        if len(rows) < RECORDS // 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    offsets = [off for off, _, _ in rows]
    assert offsets == sorted(offsets) and offsets[-1] == RECORDS - 1
    # the tail the active segment holds is contiguous and untouched
    tail_start = RECORDS - 1
    while tail_start - 1 in offsets:
        tail_start -= 1
    cleaned = [r for r in rows if r[0] < tail_start]
    assert len({k for _, k, _ in cleaned}) == len(cleaned) <= KEYS  # one record per key below the tail
    for off, key, value in cleaned:
        assert value == b"value-%d" % off and key == b"key-%d" % (off % KEYS)
        # the latest value of the key below the tail
        assert all(o > tail_start - 1 or o == off for o in range(off, tail_start) if o % KEYS == off % KEYS)
    seen = {k: (off, v) for off, k, v in rows}
    assert seen == produced  # every key's latest value, at its offset
    assert len(rows) < RECORDS // 2
    assert any("Cleaned compacted-0 up to offset" in line for line in broker.output)
