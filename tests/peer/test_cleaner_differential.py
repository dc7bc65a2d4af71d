"""The log cleaner against Apache Kafka 4.4: the same 502 records over 10 keys to a compacted topic with 1 MiB
segments (Kafka 4's floor) and the same cleaner settings; once both cleaned, the surviving (offset, key,
value) sets read by kafka-python are equal."""

import contextlib
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess
from tests.harness.waiting import TimedOut, wait_until

TOPIC = "cleaned"
KEYS = 10
RECORDS = 502
VALUE_BYTES = 10_000  # 502 of them fill five 1 MiB segments
BATCHES = 40
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

    def read():
        if consumer.position(tp) >= RECORDS:
            return True
        for batch in consumer.poll(timeout_ms=1000).values():
            rows.update((r.offset, r.key, r.value) for r in batch)
        return False

    with contextlib.suppress(TimedOut):  # the rows read are compared
        wait_until(read, 60, interval=0, what=f"the position {RECORDS}")
    consumer.close()
    return rows


def cleaned(bootstrap: str) -> set[tuple[int, bytes, bytes]]:
    """The records once a round cleaned the log (fewer than half remain), or what is there after 120 s."""
    reads = []

    def shrunk():
        reads.append(surviving(bootstrap))
        return len(reads[-1]) < RECORDS // 2

    with contextlib.suppress(TimedOut):  # what is there after 120 s
        wait_until(shrunk, 120, interval=0.5, what="fewer than half of the records")
    return reads[-1]


def test_the_same_records_survive_cleaning(kafka, tierlog):
    produce(kafka.bootstrap)
    produce(tierlog.bootstrap)
    theirs = cleaned(kafka.bootstrap)
    ours = cleaned(tierlog.bootstrap)
    assert len(theirs) < RECORDS // 2, "Kafka did not clean the topic within 120 s"
    assert sorted((o, k) for o, k, _ in ours) == sorted((o, k) for o, k, _ in theirs)
    assert ours == theirs


def produce_batches(bootstrap: str, topic: str) -> None:
    """Byte-identical batches on both peers (the raw client): gzip batches of 20 records over 10 keys,
    every fifth batch ending in a tombstone, 5 KB values that do not compress, so that 1 MiB segments roll."""
    import random

    from tests.harness.rawclient import RawClient, create_topic
    from tierlog.protocol import ApiKey
    from tierlog.records import build_batch

    create_topic(bootstrap, topic, configs={"cleanup.policy": "compact", "segment.bytes": "1048576",
                                            "min.cleanable.dirty.ratio": "0.01"})
    raw = RawClient(bootstrap)
    now = int(time.time() * 1000)
    noise = random.Random(534)
    try:
        for i in range(BATCHES):
            recs = [(b"key-%d" % ((i * 20 + j) % KEYS), b"v-%d-%d-" % (i, j) + noise.randbytes(5000), [], now + j)
                    for j in range(20)]
            if i % 5 == 4:
                recs[-1] = (b"key-%d" % (i % KEYS), None, [], now + 19)
            resp = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": build_batch(recs, compression="gzip")}]}]})
            assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        raw.close()


def surviving_in(bootstrap: str, topic: str, end: int) -> set:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=50 << 20)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    rows = set()

    def read():
        if consumer.position(tp) >= end:
            return True
        for batch in consumer.poll(timeout_ms=1000).values():
            rows.update((r.offset, r.key, r.value) for r in batch)
        return False

    with contextlib.suppress(TimedOut):  # the rows read are compared
        wait_until(read, 60, interval=0, what=f"the position {end}")
    consumer.close()
    return rows


def test_compressed_batches_and_tombstones_survive_alike(kafka, tierlog):
    topic = "cleaned-gzip"
    produce_batches(kafka.bootstrap, topic)
    produce_batches(tierlog.bootstrap, topic)
    end = BATCHES * 20

    def cleaned_rows(bootstrap):
        reads = []

        def shrunk():
            reads.append(surviving_in(bootstrap, topic, end))
            return len(reads[-1]) < end // 2

        with contextlib.suppress(TimedOut):  # what is there after 120 s
            wait_until(shrunk, 120, interval=0.5, what="fewer than half of the records")
        return reads[-1]

    theirs = cleaned_rows(kafka.bootstrap)
    ours = cleaned_rows(tierlog.bootstrap)
    assert len(theirs) < end // 2, "Kafka did not clean the topic within 120 s"
    assert any(v is None for _, _, v in theirs)  # tombstones stay (delete.retention.ms is a day)
    assert sorted((o, k, v is None) for o, k, v in ours) == sorted((o, k, v is None) for o, k, v in theirs)
    assert ours == theirs


def test_dump_log_segments_reads_a_cleaned_log(tmp_path, kafka_tool):
    """Kafka's DumpLogSegments (deep iteration, index sanity checks, every index entry against the log)
    reads segments the cleaner rewrote: rebuilt zstd batches with kept offsets, an empty batch, a tombstone
    batch with its delete horizon, a marker."""
    from tests.peer.dumplog import dump_partition, read_offset_index
    from tierlog.records import build_batch
    from tierlog.storage import Log, LogConfig
    from tierlog.storage.cleaner import clean_log_now

    now = int(time.time() * 1000)
    directory = tmp_path / "dumped-0"
    lg = Log.open(str(directory), "dumped", 0, LogConfig(cleanup_policy=("compact",), segment_bytes=2000,
                                                         index_interval_bytes=100))
    for i in range(60):
        recs = [(b"k%d" % ((i * 3 + j) % 7), b"v-%d-%d" % (i, j), [("h", b"x")], now - 1000) for j in range(3)]
        lg.append_as_leader(build_batch(recs, compression="zstd" if i % 2 else "none", producer_id=11,
                                        producer_epoch=0, base_sequence=i * 3), now_ms=now)
    lg.append_as_leader(build_batch([(b"k3", None, [], now - 500)]), now_ms=now)
    lg.append_as_leader(build_batch([(b"t", b"aborted", [], now)], producer_id=12, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now_ms=now)
    lg.append_txn_marker(12, 0, 0, commit=False, now_ms=now)
    for i in range(5):
        lg.append_as_leader(build_batch([(b"z%d" % i, b"tail", [], now)]), now_ms=now)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    before = {}
    for seg, pos, h in lg.batches():
        from tierlog.records import decode_batch
        from tierlog.storage.log import seg_region_bytes
        for r in decode_batch(seg_region_bytes(seg, pos, h.size), 0)[1]:
            if not h.is_control:
                before[r.key] = (r.offset, r.value)
    del before[b"t"]  # the aborted transaction's record goes
    clean_log_now(lg, now_ms=now)
    kept = [(h.base_offset, h.last_offset, h.records_count) for _, _, h in lg.batches()]
    assert len(kept) < 66 and any(count == 0 for _, _, count in kept)
    lg.close()

    dumped, indexes, problems = dump_partition(kafka_tool, directory)
    # Offset gaps are what compaction leaves; DumpLogSegments reports them for Kafka's cleaned logs too.
    assert [p for p in problems if not p.startswith("Non-consecutive offsets in ")] == []
    records = [r for name, f in sorted(dumped.items()) if name.endswith(".log") for r in f.records]
    batches = [b for name, f in sorted(dumped.items()) if name.endswith(".log") for b in f.batches]
    assert [(int(b["baseOffset"]), int(b["lastOffset"]), int(b["count"])) for b in batches] == kept
    data = [r for r in records if "endTxnMarker" not in str(r)]
    assert sorted(int(r["offset"]) for r in data) == sorted(off for off, _ in before.values())
    assert any(b.get("deleteHorizonMs", "OptionalLong.empty") != "OptionalLong.empty" for b in batches)
    for name in indexes:
        if name.endswith(".index"):
            assert indexes[name].index == read_offset_index(directory / name)
