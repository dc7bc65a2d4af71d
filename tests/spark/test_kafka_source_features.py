"""What Spark's built-in Kafka source (spark-sql-kafka-0-10) asks of a broker beyond plain reads, on tierlog
and, where it costs one shared JVM, on Apache Kafka 4.4 (the ``kafka_peer`` session fixture) the same way:

- ``startingTimestamp`` / ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: ListOffsets by
  timestamp, here for offsets that are only in the remote tier;
- ``minPartitions``: more Spark tasks than topic partitions, each an offset range of one partition;
- (``maxOffsetsPerTrigger``, admission control, is checked on tierlog in test_kafka_source.py; Spark 4.2's
  Kafka source has no ``maxBytesPerTrigger``: that option is the file sources');
- real-time mode (Spark 4.1+, ``trigger(realTime=...)``): Kafka to Kafka, records passed on while the
  long-running batch is still open.

Every test compares rows or offsets, not counts alone.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.harness.waiting import wait_until
from tests.spark.sparklib import TIERED_TOPIC, create, tiered

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

# CreateTime a few minutes back (not a fixed date: retention.ms would delete it on a later clock)
BASE_TS = (int(time.time()) - 600) * 1000
POLL_TIMEOUT_MS = "20000"


def ts_of(partition: int, offset: int) -> int:
    """The CreateTime of record ``offset`` of ``partition``: 10 ms apart, partitions 100 s apart."""
    return BASE_TS + 100_000 * partition + 10 * offset


def produce_timestamped(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4000})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, b"v-%d-%06d" % (part, i) + b"x" * 100, b"k-%d" % i, partition=part,
                      timestamp=ts_of(part, i))
    assert p.flush(30) == 0


def read_kafka(spark, bootstrap: str, **options):
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def offsets_by_partition(df) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in df.select("partition", "offset").collect():
        out.setdefault(r["partition"], []).append(r["offset"])
    return {p: sorted(v) for p, v in sorted(out.items())}


@pytest.fixture(params=["tierlog", "kafka"])
def target(request, cluster):
    """tierlog's module broker, then Apache Kafka 4.4: each check passing on Kafka shows it checks the right thing.
    (``cluster`` is a parameter, not looked up inside: a broker started during a test is killed after it.)"""
    if request.param == "tierlog":
        return cluster.bootstrap
    return request.getfixturevalue("kafka_peer").bootstrap


def test_starting_timestamps_find_offsets_only_in_the_remote_tier(spark, cluster):
    topic = "by-ts-remote"
    create(cluster, topic, 2, TIERED_TOPIC)
    produce_timestamped(cluster.bootstrap, topic, 2, 1000)
    status = {p["partition"]: p for p in tiered(cluster, topic, 2)}
    # the offsets looked up below are below each partition's local log start: only the remote tier has them
    assert all(status[p]["local_log_start_offset"] > 250 for p in (0, 1)), status

    # one timestamp for every partition: the first record at or after it (partition 1's are all later)
    got = offsets_by_partition(read_kafka(spark, cluster.bootstrap, subscribe=topic,
                                          startingTimestamp=str(ts_of(0, 40))))
    assert got == {0: list(range(40, 1000)), 1: list(range(1000))}

    # per partition, starting between two records and ending at an exact one (exclusive, as offsets are)
    starting = {topic: {"0": ts_of(0, 5) + 5, "1": ts_of(1, 100)}}
    ending = {topic: {"0": ts_of(0, 20), "1": ts_of(1, 200)}}
    rows = read_kafka(spark, cluster.bootstrap, subscribe=topic, startingOffsetsByTimestamp=json.dumps(starting),
                      endingOffsetsByTimestamp=json.dumps(ending)).select("partition", "offset", "value").collect()
    got = sorted((r["partition"], r["offset"], bytes(r["value"])[:10]) for r in rows)
    assert got == [(p, o, b"v-%d-%06d" % (p, o)) for p, o in [(0, o) for o in range(6, 20)] +
                   [(1, o) for o in range(100, 200)]]


def test_min_partitions_splits_each_partition_into_offset_ranges(spark, target):
    topic = f"splits-{int(time.monotonic() * 1000)}"
    create(SimpleNamespace(bootstrap=target), topic, 3, {})
    produce_timestamped(target, topic, 3, 20)

    # minPartitions above the partition count: Spark cuts each partition's range into several tasks
    # (admission control, maxOffsetsPerTrigger, is checked on tierlog by test_kafka_source.py's stream test)
    from pyspark.sql import functions as F
    rows = (read_kafka(spark, target, subscribe=topic, minPartitions="9")
            .select(F.spark_partition_id().alias("task"), "partition", "offset").collect())
    got: dict[int, list[int]] = {}
    tasks: dict[int, set[int]] = {}
    for r in rows:
        got.setdefault(r["partition"], []).append(r["offset"])
        tasks.setdefault(r["task"], set()).add(r["partition"])
    assert {p: sorted(o) for p, o in got.items()} == {p: list(range(20)) for p in range(3)}
    # nine tasks, each an offset range of one partition, never two partitions in one task
    assert len(tasks) == 9 and all(len(parts) == 1 for parts in tasks.values()), tasks


def test_real_time_mode_kafka_to_kafka(spark, target, tmp_path):
    """Spark 4.1+'s real-time mode: the batch stays open for its duration (5 minutes here) and records go
    through as they arrive, so all of them, those produced after the query started too, reach the output
    topic before the first batch has ended (a micro-batch query reports a progress per batch first)."""
    suffix = int(time.monotonic() * 1000)
    src, dst = f"rt-in-{suffix}", f"rt-out-{suffix}"
    admin_target = SimpleNamespace(bootstrap=target)
    create(admin_target, src, 1, {})
    create(admin_target, dst, 1, {})
    produce_timestamped(target, src, 1, 10)
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", target).option("subscribe", src)
              .option("startingOffsets", "earliest").option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS).load())
    query = (stream.selectExpr("key", "concat(value, cast('!' as binary)) as value").writeStream.format("kafka")
             .option("kafka.bootstrap.servers", target).option("topic", dst).outputMode("update")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(realTime="5 minutes").start())
    consumer = Consumer({"bootstrap.servers": target, "group.id": f"rt-{suffix}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(dst, 0, 0)])
    seen: list[bytes] = []

    def arrived(n):
        def check():
            if query.exception() is not None:
                raise AssertionError(f"real-time query failed: {query.exception()}")
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
            return len(seen) >= n
        return check

    began = time.monotonic()
    try:
        wait_until(arrived(10), 60, interval=0, what="the first 10 records in the output topic")
        first = time.monotonic() - began
        started = time.monotonic()
        p = Producer({"bootstrap.servers": target, "linger.ms": 0})
        for i in range(10, 15):
            p.produce(src, b"v-0-%06d" % i, b"k-%d" % i, partition=0)
        assert p.flush(30) == 0
        wait_until(arrived(15), 25, interval=0, what="the 5 records produced while the batch is open")
        latency = time.monotonic() - started
        assert query.recentProgress == [], "a batch ended before the records came through"
    finally:
        query.stop()
        consumer.close()
    assert [v[:10] for v in seen] == [b"v-0-%06d" % i for i in range(15)]
    assert all(v.endswith(b"!") for v in seen)
    print(f"\nreal-time mode on {target}: first 10 records after {first:.2f}s, 5 more through in {latency:.2f}s")
