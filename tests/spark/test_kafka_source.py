"""Spark's built-in Kafka source (spark-sql-kafka-0-10, what most existing pipelines use) reads tierlog.

Records are produced with kafka-python to a real ``tierlog broker`` process; Spark reads them with
``format("kafka")`` exactly as it reads Apache Kafka, in batch (earliest/latest, explicit offset
ranges, offsets by timestamp) and in Structured Streaming (``trigger(availableNow=True)`` into a
parquet sink, resumed from its checkpoint). Every record is compared field by field: topic,
partition, offset, key, value, timestamp, timestamp type and headers.
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

# CreateTime timestamps a minute in the past: fixed dates would be older than retention.ms (7 days)
# on a machine whose clock is later, and the broker would rightly delete them before Spark reads.
BASE_TS = (int(time.time()) - 60) * 1000
POLL_TIMEOUT_MS = "20000"  # fail within seconds, not after Spark's default 120 s, if a fetch hangs


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, records: list[dict]) -> list[tuple]:
    """Send ``records`` (partition, key, value, ts, headers) and return what the broker acknowledged,
    as the rows Spark should show: (topic, partition, offset, key, value, ts_ms, timestampType, headers)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [(r, producer.send(topic, key=r["key"], value=r["value"], partition=r["partition"],
                                     timestamp_ms=r["ts"], headers=r["headers"])) for r in records]
        producer.flush()
        out = []
        for r, fut in futures:
            md = fut.get(timeout=30)
            assert (md.topic, md.partition) == (topic, r["partition"])
            out.append((topic, md.partition, md.offset, r["key"], r["value"], r["ts"], 0,
                        [(k, v) for k, v in r["headers"]]))
        return sorted(out, key=lambda row: (row[1], row[2]))
    finally:
        producer.close()


def sample(partitions: int, per_partition: int, start: int = 0) -> list[dict]:
    """Records with every shape Spark must carry: null key, tombstone, empty value, binary bytes,
    no/one/several headers (repeated keys, an empty value), distinct CreateTime timestamps."""
    records = []
    for p in range(partitions):
        for i in range(start, start + per_partition):
            key = None if i % 4 == 0 else f"key-{p}-{i}".encode()
            if i % 5 == 3 and key is not None:
                value = None  # tombstone
            elif i % 7 == 6:
                value = b""
            else:
                value = f"value-{p}-{i}:".encode() + bytes(range(i % 256)) + b"\x00\xff"
            headers = [("h", f"{p}.{i}".encode())] * (i % 3)
            if i % 6 == 5:
                headers.append(("empty", b""))
            records.append({"partition": p, "key": key, "value": value, "ts": BASE_TS + 1000 * p + 10 * i,
                            "headers": headers})
    return records


def spark_rows(df) -> list[tuple]:
    """A Kafka-source DataFrame as sorted (topic, partition, offset, key, value, ts_ms, type, headers)."""
    from pyspark.sql import functions as F

    cols = [F.col("topic"), F.col("partition"), F.col("offset"), F.col("key"), F.col("value"),
            F.unix_millis("timestamp").alias("ts"), F.col("timestampType")]
    if "headers" in df.columns:
        cols.append(F.col("headers"))
    rows = []
    for r in df.select(*cols).collect():
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in (r["headers"] or [])] \
            if "headers" in r else None
        rows.append((r["topic"], r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                     None if r["value"] is None else bytes(r["value"]), r["ts"], r["timestampType"], headers))
    return sorted(rows, key=lambda row: (row[0], row[1], row[2]))


def kafka_read(spark, bootstrap: str, **options):
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_of_a_whole_topic_keeps_every_field(spark, broker):
    topic = "spark-batch"
    create_topic(broker.bootstrap, topic, 3)
    expected = produce(broker.bootstrap, topic, sample(partitions=3, per_partition=12))

    df = kafka_read(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    got = spark_rows(df)
    assert len(got) == 36
    assert got == expected
    # Offsets are dense per partition from 0: what Spark's offset-range bookkeeping relies on.
    for p in range(3):
        assert [r[2] for r in got if r[1] == p] == list(range(12))

    # Without includeHeaders (the default), the same records; endingOffsets defaults to latest.
    plain = spark_rows(kafka_read(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest"))
    assert plain == [row[:7] + (None,) for row in expected]

    # A pipeline's usual aggregation runs on the same data.
    counts = {(r["partition"], r["n"]) for r in
              kafka_read(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest")
              .groupBy("partition").count().withColumnRenamed("count", "n").collect()}
    assert counts == {(0, 12), (1, 12), (2, 12)}


def test_batch_read_of_offset_ranges_and_by_timestamp(spark, broker):
    topic = "spark-ranges"
    create_topic(broker.bootstrap, topic, 3)
    expected = produce(broker.bootstrap, topic, sample(partitions=3, per_partition=10))

    # Explicit ranges per partition (-2 = earliest, -1 = latest), split into more Spark tasks than
    # partitions so executors may start fetching in the middle of a record batch.
    starting = {topic: {"0": 3, "1": -2, "2": 7}}
    ending = {topic: {"0": 8, "1": 4, "2": -1}}
    got = spark_rows(kafka_read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true",
                                startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending),
                                minPartitions="7"))
    bounds = {0: (3, 8), 1: (0, 4), 2: (7, 10)}
    assert got == [r for r in expected if bounds[r[1]][0] <= r[2] < bounds[r[1]][1]]

    # assign + startingOffsetsByTimestamp: ListOffsets by timestamp finds the first record at or
    # after the timestamp (partition 1's lies between two records, partition 0's is exact).
    assign = {topic: [0, 1]}
    by_ts = {topic: {"0": BASE_TS + 10 * 4, "1": BASE_TS + 1000 + 10 * 6 + 5}}
    got = spark_rows(kafka_read(spark, broker.bootstrap, assign=json.dumps(assign), includeHeaders="true",
                                startingOffsetsByTimestamp=json.dumps(by_ts)))
    assert got == [r for r in expected if (r[1] == 0 and r[2] >= 4) or (r[1] == 1 and r[2] >= 7)]

    # subscribePattern sees the topic through Metadata like any other consumer.
    got = spark_rows(kafka_read(spark, broker.bootstrap, subscribePattern="spark-rang.*", startingOffsets="earliest",
                                includeHeaders="true"))
    assert got == expected


def run_available_now(spark, bootstrap: str, topic: str, out_dir, checkpoint, timeout: float = 90):
    """One ``availableNow`` run of Kafka -> parquet; returns the query's progress reports."""
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", "7").option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS).load())
    query = (stream.writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        finished = query.awaitTermination(timeout)
        if query.exception() is not None:
            raise AssertionError(f"streaming query failed: {query.exception()}")
        assert finished, f"availableNow query still running after {timeout}s: {query.status}"
        return [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    finally:
        query.stop()


def test_streaming_available_now_to_parquet_resumes_from_its_checkpoint(spark, broker, tmp_path):
    topic = "spark-stream"
    create_topic(broker.bootstrap, topic, 2)
    first = produce(broker.bootstrap, topic, sample(partitions=2, per_partition=9))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    started = time.monotonic()
    batches = run_available_now(spark, broker.bootstrap, topic, out, checkpoint)
    # maxOffsetsPerTrigger=7 over 18 records: availableNow still honours the limit (Spark prorates it
    # over the partitions, 3 + 3 per batch), so the data arrives in several micro-batches.
    sizes = [b["numInputRows"] for b in batches]
    assert len(sizes) >= 3 and max(sizes) <= 7 and sum(sizes) == 18, sizes
    assert spark_rows(spark.read.parquet(str(out))) == first
    end_offsets = batches[-1]["sources"][0]["endOffset"]  # the Kafka source reports it as a JSON string
    end_offsets = json.loads(end_offsets) if isinstance(end_offsets, str) else end_offsets
    assert end_offsets == {topic: {"0": 9, "1": 9}}

    # More records arrive; the next run reads only those, from the checkpoint's offsets.
    second = produce(broker.bootstrap, topic, sample(partitions=2, per_partition=4, start=9))
    assert {r[2] for r in second} == {9, 10, 11, 12}
    batches = run_available_now(spark, broker.bootstrap, topic, out, checkpoint)
    assert sum(b["numInputRows"] for b in batches) == 8
    assert spark_rows(spark.read.parquet(str(out))) == sorted(first + second, key=lambda r: (r[1], r[2]))

    # Nothing new: the run ends at once and adds nothing.
    assert run_available_now(spark, broker.bootstrap, topic, out, checkpoint) == []
    assert spark.read.parquet(str(out)).count() == 26
    print(f"\nthree availableNow runs in {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_missing_prerequisites_fail_in_ci_and_skip_locally(monkeypatch, ci, outcome):
    from tests.spark import sparklib

    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="Spark's Kafka source unavailable"):
        sparklib.unavailable("missing mvn")


def test_connector_cache_stays_outside_the_repository(monkeypatch):
    from tests.harness import ROOT
    from tests.spark.sparklib import SparkKafkaJarsError, jars_module

    monkeypatch.setenv("TIERLOG_SPARK_KAFKA_CACHE", str(ROOT / "spark-cache"))
    with pytest.raises(SparkKafkaJarsError, match="inside the repository"):
        jars_module.cache_dir("4.0.0")
    pom = jars_module.pom_xml("4.0.0")
    assert "<artifactId>spark-sql-kafka-0-10_2.13</artifactId>" in pom and "<version>4.0.0</version>" in pom
    artifact = jars_module.artifact_of
    assert artifact(jars_module.Path("spark-sql-kafka-0-10_2.13-4.0.0.jar")) == "spark-sql-kafka-0-10_2.13"
    assert artifact(jars_module.Path("kafka-clients-3.9.0.jar")) == "kafka-clients"
