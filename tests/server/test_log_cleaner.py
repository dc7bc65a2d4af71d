"""The log cleaner in a running broker: a compacted topic with small segments is cleaned by the cleaner
threads, and kafka-python reads back one record per key (its latest) plus what the active segment holds."""

import contextlib
import json
import os
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from tests.harness import ROOT
from tests.harness.broker import running_broker
from tests.harness.tiered import metrics_url, scrape
from tests.harness.waiting import TimedOut, wait_until

TOPIC = "compacted"
KEYS = 10
RECORDS = 502


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("cleaner"), {
            "log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01",
            "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "2048", "metrics.port": "0"}) as b:
        yield b


def read_all(bootstrap: str, expected_end: int) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    rows = []

    def read():
        for batch in consumer.poll(timeout_ms=1000).values():
            rows.extend((r.offset, r.key, r.value) for r in batch)
        return consumer.position(tp) >= expected_end

    with contextlib.suppress(TimedOut):  # the caller judges the rows read
        wait_until(read, 60, interval=0, what=f"the position {expected_end}")
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
    reads = []

    def cleaned():
        reads.append(read_all(broker.bootstrap, RECORDS))
        return len(reads[-1]) < RECORDS // 2

    with contextlib.suppress(TimedOut):  # the last read is checked below
        wait_until(cleaned, 120, interval=0.5, what="the read to shrink")
    rows = reads[-1]
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


def test_describe_shows_the_cleaner_state_and_metrics_have_it(broker):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "tierlog", "topic", "describe", TOPIC, "-b", broker.bootstrap,
                          "--url", metrics_url(broker), "--json"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    [described] = json.loads(out.stdout)
    [state] = described["cleaner"]
    assert state["partition"] == 0 and state["uncleanable"] is None and state["last_clean_ms"] > 0
    assert state["first_dirty_offset"] > 0
    table = subprocess.run([sys.executable, "-m", "tierlog", "topic", "describe", TOPIC, "-b", broker.bootstrap,
                            "--url", metrics_url(broker)], capture_output=True, text=True, env=env, timeout=120)
    assert table.returncode == 0 and "FIRST-DIRTY" in table.stdout, table.stderr
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in scrape(broker)}
    assert samples[("tierlog_log_cleaner_last_clean_timestamp_ms", (("partition", "0"), ("topic", TOPIC)))] > 0
    assert ("kafka_log_logcleanermanager_max_dirty_percent", ()) in samples


def offsets_topic_records(bootstrap: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition("__consumer_offsets", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    counts = [0]

    def read():
        if consumer.position(tp) >= end:
            return True
        counts.append(sum(len(b) for b in consumer.poll(timeout_ms=1000).values()))
        return False

    with contextlib.suppress(TimedOut):  # the caller judges the count
        wait_until(read, 60, interval=0, what=f"the position {end}")
    consumer.close()
    return sum(counts)


def test_consumer_offsets_is_compacted_and_loads_the_live_offsets(broker):
    commits = 300
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="compacted-group",
                             enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    for i in range(commits):
        consumer.commit({tp: OffsetAndMetadata(i, "", -1)})
    consumer.close()
    counts = []
    with contextlib.suppress(TimedOut):  # asserted just below
        wait_until(lambda: counts.append(offsets_topic_records(broker.bootstrap)) or counts[-1] <= commits // 2,
                   120, interval=0.5, what="__consumer_offsets cleaned")
    count = counts[-1]
    assert count < commits // 2  # cleaned: the offset commits of one key collapse to the last ones
    broker.restart()  # the coordinator loads the partition again, from what the cleaner kept
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="compacted-group",
                             enable_auto_commit=False)
    assert consumer.committed(tp) == commits - 1
    consumer.close()
