"""The exactly-once ``tierlog`` sink (tierlog.spark.sink) on real Spark (the shared local[2,2] session: a
failed task is retried once) against a real broker: a task that fails after part of its rows reached the
broker, and a streaming query that dies in the middle of a micro-batch and is restarted from its
checkpoint (then again after a crash between the sink's commit and the checkpoint's) leave every row
exactly once for a read_committed consumer (confluent-kafka), while a read_uncommitted one sees the
aborted attempts' rows, so the failures really wrote."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.harness.waiting import wait_until
from tests.spark.sparklib import create, produce


def values(b, topic: str, isolation: str, partitions: int = 3) -> Counter:
    """Every data record's value, read to the end (the last stable offset under read_committed)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"check-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    out: Counter = Counter()
    ended: set[int] = set()

    def read():
        for m in c.consume(500, timeout=0.5):
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    ended.add(m.partition())
                continue
            out[m.value()] += 1
        return len(ended) == partitions

    wait_until(read, 60, interval=0, what=f"{topic} read to its end ({isolation})")
    c.close()
    return out


def fail_first_attempt(rows: int):
    """mapInArrow: the first attempt of Spark partition 1 passes ``rows`` rows on, then raises; other
    attempts pass every row on."""
    # nested, so Spark pickles it by value (its workers cannot import the tests package); imports inside
    def run(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        failing = ctx.partitionId() == 1 and ctx.attemptNumber() == 0
        sent = 0
        for batch in batches:
            yield batch
            sent += batch.num_rows
            if failing and sent >= rows:
                raise RuntimeError("injected failure after part of the rows")
    return run


def leave_open_transaction(b, transactional_id: str, topic: str, partition: int, count: int) -> None:
    """What a task attempt that died in the middle of its write leaves: rows in an open transaction."""
    from tierlog.client.sync import Producer
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 600_000})
    p.init_transactions()
    p.begin_transaction()
    for i in range(count):
        p.send(topic, b"zombie-%d" % i, partition=partition)
    p.flush()
    p.close()


def fail_until(flag: Path):
    """mapInArrow: in micro-batch 1, every attempt of Spark partition 0 fails after passing its rows on,
    until ``flag`` exists (the query dies in the middle of the batch)."""
    def run(batches):
        import os

        from pyspark import TaskContext
        ctx = TaskContext.get()
        failing = (ctx.getLocalProperty("streaming.sql.batchId") == "1" and ctx.partitionId() == 0
                   and not os.path.exists(flag))
        yield from batches
        if failing:
            raise RuntimeError("injected failure of micro-batch 1")
    return run


ROWS = 3 * 2_000


def test_a_task_failing_mid_write_commits_each_row_once(tierlog_spark, cluster):
    topic, prefix = "eos-batch", "eos-batch-job"
    create(cluster, topic, configs={})
    # an earlier attempt of Spark partition 1 that wrote 100 rows and died: the retry's initTransactions
    # must fence it and abort its transaction
    leave_open_transaction(cluster, f"{prefix}-1", topic, 1, 100)
    df = (tierlog_spark.range(0, ROWS, numPartitions=3)
          .selectExpr("CAST(id AS STRING) AS key", "CONCAT('row-', id) AS value",
                      "CAST(spark_partition_id() AS INT) AS partition"))
    (df.mapInArrow(fail_first_attempt(1_000), df.schema)
     .write.format("tierlog").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("topic", topic).option("tierlog.transactionalIdPrefix", prefix).save())
    committed = values(cluster, topic, "read_committed")
    assert committed == Counter({b"row-%d" % i: 1 for i in range(ROWS)})
    uncommitted = values(cluster, topic, "read_uncommitted")
    assert uncommitted - committed >= Counter({b"zombie-%d" % i: 1 for i in range(100)})  # there, aborted


def test_a_query_killed_mid_batch_and_restarted_writes_each_row_once(tierlog_spark, cluster, tmp_path):
    source_topic, topic = "eos-in", "eos-out"
    create(cluster, source_topic, configs={})
    create(cluster, topic, configs={})
    produce(cluster, source_topic, 900)
    ckpt, flag = tmp_path / "ckpt", tmp_path / "fixed"
    want = Counter({b"value-%06d" % i + b"x" * 100: 1 for i in range(900)})

    def run():
        stream = (tierlog_spark.readStream.format("tierlog").option("kafka.bootstrap.servers", cluster.bootstrap)
                  .option("subscribe", source_topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "450").load().select("key", "value"))
        q = (stream.mapInArrow(fail_until(flag), stream.schema)
             .writeStream.format("tierlog").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", topic).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        with contextlib.suppress(Exception):
            q.awaitTermination(180)
        q.stop()  # a failed query may still hold its checkpoint for a moment
        wait_until(lambda: not tierlog_spark.streams.active, 30, what="the query to release its checkpoint")
        return q

    q = run()  # batch 0 committed, batch 1 fails in partition 0 after the others wrote: the query dies
    assert q.exception() is not None and "injected failure" in str(q.exception())
    assert 0 < sum(values(cluster, topic, "read_committed").values()) < 900
    flag.write_text("fixed")
    q = run()  # from the checkpoint: batch 1 again
    assert q.exception() is None
    assert values(cluster, topic, "read_committed") == want

    # a driver that crashed after the sink committed its last batch, before the checkpoint recorded it
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the entry and the checksum file Hadoop's file system keeps
        (ckpt / "commits" / name).unlink(missing_ok=True)
    q = run()
    assert q.exception() is None
    assert any(p["batchId"] == last and p["numInputRows"] > 0 for p in q.recentProgress)  # it ran again
    assert values(cluster, topic, "read_committed") == want
    assert sum(values(cluster, topic, "read_uncommitted").values()) > 900  # the failed batch's rows, aborted


def test_the_two_phases_against_the_broker(cluster):
    """Without Spark: a prepared transaction the driver never committed is aborted by the re-run, a batch
    committed before is skipped, and the commit of a fenced attempt fails."""
    import asyncio

    import pyarrow as pa

    from tierlog.errors import ProducerFencedError
    from tierlog.spark import options, sink
    topic = "eos-phases"
    create(cluster, topic, configs={})
    opts = options.parse({"kafka.bootstrap.servers": cluster.bootstrap, "topic": topic}, sink=True)
    rows = [b"phase-%d" % i for i in range(50)]
    batch = pa.record_batch([pa.array(rows), pa.array([0] * 50, pa.int32())], names=["value", "partition"])

    def prepare(batch_id: int) -> sink.Prepared:
        return asyncio.run(sink._prepare(opts, iter([batch]), "phases", 0, batch_id))

    lost = prepare(7)  # the driver died before its commit
    assert not lost.skipped and lost.rows == 50
    again = prepare(7)  # the batch again, after the restart
    assert sink.end_transactions(opts, [again], commit=True, batch_id=7) == 50
    with pytest.raises(ProducerFencedError):
        sink.end_transactions(opts, [lost], commit=True, batch_id=7)
    # committed, but the checkpoint did not record it: the batch runs again and writes nothing
    assert prepare(7).skipped
    following = prepare(8)  # the next batch writes
    assert not following.skipped
    sink.end_transactions(opts, [following], commit=False)  # a failed job: aborted by the driver
    assert values(cluster, topic, "read_committed") == Counter(dict.fromkeys(rows, 1))
    assert values(cluster, topic, "read_uncommitted") == Counter(dict.fromkeys(rows, 3))  # 3 attempts wrote
