"""The log cleaner against Apache Kafka 4.1: the same 502 records over 10 keys to a compacted topic with 1 MiB
segments (Kafka 4's floor) and the same cleaner settings; once both cleaned, the surviving (offset, key,
value) sets read by kafka-python are equal."""

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess

TOPIC = "cleaned"
KEYS = 10
RECORDS = 502
VALUE_BYTES = 10_000  # 502 of them fill five 1 MiB segments
CLEANER = {"log.cleaner.backoff.ms": "200", "log.cleaner.min.cleanable.ratio": "0.01"}


@pytest.fixture(scope="module")
def kafka(kafka_jars, tmp_path_factory):
    k = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-cleaner"), "kafka-cleaner", settings=CLEANER)
    yield k
    k.stop()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog-cleaner") / "logs",
                      {**apache_kafka.SHARED_SETTINGS, **CLEANER}).start()
    yield b
    b.stop()


def produce(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
        "cleanup.policy": "compact", "segment.bytes": "1048576", "min.cleanable.dirty.ratio": "0.01"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all",
                             max_in_flight_requests_per_connection=1)
    for i in range(RECORDS):
        value = (b"value-%d-" % i).ljust(VALUE_BYTES, b".")
        producer.send(TOPIC, key=b"key-%d" % (i % KEYS), value=value).get(timeout=30)
    producer.close()


def surviving(bootstrap: str) -> set[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=50 << 20)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    rows = set()
    deadline = time.monotonic() + 60
    while consumer.position(tp) < RECORDS and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1000).values():
            rows |= {(r.offset, r.key, r.value) for r in batch}
    consumer.close()
    return rows


def cleaned(bootstrap: str) -> set[tuple[int, bytes, bytes]]:
    """The records once a round cleaned the log (fewer than half remain), or what is there after 120 s."""
    deadline = time.monotonic() + 120
    while True:
        rows = surviving(bootstrap)
        if len(rows) < RECORDS // 2 or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def test_the_same_records_survive_cleaning(kafka, tierlog):
    produce(kafka.bootstrap)
    produce(tierlog.bootstrap)
    theirs = cleaned(kafka.bootstrap)
    ours = cleaned(tierlog.bootstrap)
    assert len(theirs) < RECORDS // 2, "Kafka did not clean the topic within 120 s"
    assert sorted((o, k) for o, k, _ in ours) == sorted((o, k) for o, k, _ in theirs)
    assert ours == theirs
