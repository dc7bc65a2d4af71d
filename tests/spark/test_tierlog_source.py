"""The ``tierlog`` data source on real Spark (the shared local[2] session) against a real tiered broker:
batch and streaming reads equal to what kafka-python consumes, row for row; direct-tier and broker-only
reads identical; checkpoint restarts; maxOffsetsPerTrigger; the sink; the jobs; Spark's own Kafka source
agreeing with ``format("tierlog")``; data deleted by retention during a query."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.harness.tiered import tier_status
from tests.harness.waiting import TimedOut, wait_until
from tests.spark.sparklib import ROWS, create, produce, source, tiered


def kafka_python_rows(b, topic: str, partitions: int, expected: int) -> list[tuple]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([KTopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    out = []

    def read():
        if len(out) < expected:
            for records in c.poll(1000).values():
                out.extend((r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type,
                            [(k, v) for k, v in r.headers]) for r in records)
        return len(out) >= expected

    with contextlib.suppress(TimedOut):  # the caller compares what arrived
        wait_until(read, 60, interval=0, what=f"{expected} records")
    c.close()
    return sorted(out, key=lambda r: (r[3], r[4]))


def spark_rows(df) -> list[tuple]:
    out = []
    for r in df.collect():
        d = r.asDict()
        ts = int(d["timestamp"].timestamp() * 1000 + 0.5)
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in d.get("headers") or []]
        out.append((bytes(d["key"]), bytes(d["value"]), d["topic"], d["partition"], d["offset"], ts,
                    d["timestampType"], headers))
    return sorted(out, key=lambda r: (r[3], r[4]))


@pytest.fixture(scope="module")
def history(cluster):
    """A topic of 3 partitions, mostly in remote storage, all five codecs."""
    topic = "history"
    create(cluster, topic)
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        produce(cluster, topic, 1200, start=1200 * i, codec=codec)
    tiered(cluster, topic)
    return topic, 6000


def test_batch_read_equals_kafka_python_direct_and_broker_only(tierlog_spark, cluster, history):
    topic, count = history
    want = kafka_python_rows(cluster, topic, 3, count)
    assert len(want) == count
    direct = source(tierlog_spark, cluster, topic)
    assert direct.columns == ROWS
    # as Spark's Kafka source: one task per partition (its remote segments, then its local tail)
    assert direct.rdd.getNumPartitions() == 3
    assert spark_rows(direct) == want
    assert spark_rows(source(tierlog_spark, cluster, topic, direct=False)) == want
    # read_committed through the broker: the consumer leaves out aborted transactions (none here)
    assert spark_rows(source(tierlog_spark, cluster, topic, direct=False, **{
        "kafka.isolation.level": "read_committed"})) == want


@pytest.fixture(scope="module")
def transactional(cluster):
    """3 partitions of committed and aborted transactions between plain records, mostly remote; after
    tiering, one more committed and one more aborted transaction in each partition's local tail."""
    from tests.harness.rawclient import RawClient
    from tests.harness.transactions import init_producer_id, marker, write_markers
    from tests.harness.transactions import produce as produce_batch
    topic = "transactional"
    create(cluster, topic)
    raw = RawClient(cluster.bootstrap)

    def transaction(p: int, name: bytes, commit: bool) -> None:
        pid, epoch = init_producer_id(raw)
        values = [name + b"-%d-" % j + b"x" * 400 for j in range(8)]
        assert produce_batch(raw, topic, values, partition=p, producer_id=pid, epoch=epoch, sequence=0,
                             transactional=True).error_code == 0
        assert produce_batch(raw, topic, [b"plain-" + name], partition=p).error_code == 0
        assert write_markers(raw, marker(pid, epoch, commit, topic, partitions=(p,))) == {(pid, topic, p): 0}

    for i in range(40):
        for p in range(3):
            transaction(p, b"t%d-%02d" % (p, i), i % 3 != 1)
    raw_tiered = tiered(cluster, topic)
    for p in range(3):
        transaction(p, b"tail%d-c" % p, True)
        transaction(p, b"tail%d-a" % p, False)
        assert produce_batch(raw, topic, [b"end"], partition=p).error_code == 0
    raw.close()
    return topic, {s["partition"]: s["local_log_start_offset"] for s in raw_tiered}


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_each_partition_is_one_task_reading_its_history_then_its_tail(tierlog_spark, cluster, transactional,
                                                                      isolation, tmp_path):
    """Each partition is read by one Spark task, its remote segments then its local tail through the
    broker, in offset order: the rows of each partition, in the order Spark returns them, are exactly what
    a Kafka consumer with the same isolation level reads."""
    from tests.harness.transactions import consume_confluent
    topic, local_starts = transactional
    want = {p: consume_confluent(cluster.bootstrap, topic, isolation, b"end", partition=p) for p in range(3)}
    if isolation == "read_committed":
        assert not any(b"-a-" in v for rows in want.values() for _, v in rows)  # aborted ones left out
    df = source(tierlog_spark, cluster, topic, **{"kafka.isolation.level": isolation,
                                                  "tierlog.debug.readLog": str(tmp_path)})
    got: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    for r in df.select("partition", "offset", "value").collect():  # in Spark's order: task by task
        got[r.partition].append((r.offset, bytes(r.value)))
    assert got == want
    tasks = [[line.split() for line in f.read_text().splitlines()] for f in tmp_path.glob("*.log")]
    assert sorted(int(t[0][2]) for t in tasks) == [0, 1, 2]
    for t in tasks:
        p = int(t[0][2])
        assert {int(s[2]) for s in t} == {p}  # one partition per task
        tiers = [s[0] for s in t]
        assert tiers.count("remote") >= 2 and tiers[-1] == "broker" and tiers.count("broker") == 1
        ranges = [(int(s[4]), int(s[5])) for s in t]
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous
        assert ranges[-1][0] >= local_starts[p]  # the tail starts where the local log did at most
        assert ranges[-1][1] == want[p][-1][0] + 1  # through the last record


def test_offset_ranges_timestamps_and_min_partitions(tierlog_spark, cluster, history):
    topic, _ = history
    ranges = source(tierlog_spark, cluster, topic, startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": -1}}),
                    endingOffsets=json.dumps({topic: {"0": 500, "1": 20, "2": -1}}), minPartitions="8")
    assert ranges.rdd.getNumPartitions() >= 8
    got = {(r.partition, r.offset) for r in ranges.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(10, 500)} | {(1, o) for o in range(0, 20)}
    rows = kafka_python_rows(cluster, topic, 3, 6000)
    middle = sorted(r[5] for r in rows)[3000]
    later = source(tierlog_spark, cluster, topic, startingTimestamp=str(middle))
    assert later.count() == sum(1 for r in rows if r[5] >= middle) or later.count() >= 3000


def test_spark_kafka_source_gives_the_same_rows(tierlog_spark, cluster, history):
    topic, _ = history
    kafka = (tierlog_spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("includeHeaders", "true").load())
    assert spark_rows(kafka) == spark_rows(source(tierlog_spark, cluster, topic))


def test_streaming_available_now_restarts_from_its_checkpoint(tierlog_spark, cluster, tmp_path):
    topic = "stream"
    create(cluster, topic)
    produce(cluster, topic, 1500)
    tiered(cluster, topic)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        q = (tierlog_spark.readStream.format("tierlog").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("tierlog.rsm.dir", str(cluster.remote_dir)).load()
             .select("partition", "offset", "value")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert not q.isActive
    run()
    first = tierlog_spark.read.parquet(str(out)).count()
    assert first == 1500
    produce(cluster, topic, 700, start=1500)
    run()
    rows = tierlog_spark.read.parquet(str(out)).select("partition", "offset").collect()
    assert len(rows) == 2200 and len({(r.partition, r.offset) for r in rows}) == 2200  # no duplicate, no gap


def test_max_offsets_per_trigger_splits_batches(tierlog_spark, cluster, history):
    topic, count = history
    sizes = []

    def each(df, batch_id):
        sizes.append(df.count())
    q = (tierlog_spark.readStream.format("tierlog").option("kafka.bootstrap.servers", cluster.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2000")
         .option("tierlog.rsm.dir", str(cluster.remote_dir)).load()
         .writeStream.foreachBatch(each).trigger(availableNow=True).start())
    q.awaitTermination(180)
    sizes = [s for s in sizes if s]
    assert sum(sizes) == count
    assert len(sizes) >= 3 and max(sizes) <= 2000 + 3  # at most one extra offset per partition


def test_sink_round_trip(tierlog_spark, cluster):
    topic = "sunk"
    create(cluster, topic, configs={})
    from pyspark.sql import Row
    rows = [Row(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3,
                headers=[Row(key="h", value=f"{i}".encode())]) for i in range(300)]
    # Spark refuses its default save mode (ErrorIfExists) for Python data sources: append, which is what
    # Spark's Kafka sink does in every mode.
    (tierlog_spark.createDataFrame(rows).write.format("tierlog").mode("append")
     .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", topic).save())
    back = spark_rows(source(tierlog_spark, cluster, topic, direct=False))
    assert len(back) == 300
    assert sorted((r[0], r[1], r[3], r[7]) for r in back) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), i % 3, [("h", f"{i}".encode())]) for i in range(300))


def test_export_job_and_storage_report(tierlog_spark, cluster, history, tmp_path, capsys):
    import pyarrow.dataset as ds

    from tierlog.spark import jobs
    topic, count = history
    options = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
               "tierlog.rsm.dir": str(cluster.remote_dir)}
    result = jobs.export(tierlog_spark, options, str(tmp_path / "export"), str(tmp_path / "export-ckpt"))
    assert result["rows"] == count
    table = ds.dataset(str(tmp_path / "export"), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == count
    want = kafka_python_rows(cluster, topic, 3, count)
    got = sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), table["value"].to_pylist()))
    assert got == [(r[3], r[4], r[1]) for r in want]
    again = jobs.export(tierlog_spark, options, str(tmp_path / "export"), str(tmp_path / "export-ckpt"))
    assert again["rows"] == 0  # exactly once: nothing new, nothing written twice

    chart = tmp_path / "report.png"
    report = jobs.storage_report(tierlog_spark, options, str(chart))
    status = {p["partition"]: p for p in tier_status(cluster, topic)["partitions"]}
    assert [r["partition"] for r in report] == [0, 1, 2]
    for r in report:
        assert r["segments"] == status[r["partition"]]["remote_segments"]
        assert r["remote_bytes"] == status[r["partition"]]["remote_bytes"]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "remote_bytes" in capsys.readouterr().out


def test_audit_finds_orphans_and_missing_segments(tierlog_spark, cluster, tmp_path):
    from tierlog.spark import jobs
    topic = "audited"
    create(cluster, topic, partitions=1)
    produce(cluster, topic, 1500)
    tiered(cluster, topic, partitions=1)
    options = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
               "tierlog.rsm.dir": str(cluster.remote_dir)}
    clean = jobs.audit(tierlog_spark, options)
    assert clean["orphans"] == [] and clean["missing"] == [] and clean["objects"] > 0
    logs = sorted(Path(cluster.remote_dir).rglob(f"{topic}-*/0/*.log"))
    stem = logs[0].name[:-4]
    orphan = logs[0].parent / (stem[:21] + "BBBBBBBBBBBBBBBBBBBBBB.log")
    orphan.write_bytes(b"left by a crash")
    logs[1].with_suffix(".manifest").rename(tmp_path / "hidden.manifest")
    try:
        found = jobs.audit(tierlog_spark, options)
        assert [o["key"].rsplit("/", 1)[1] for o in found["orphans"]] == [orphan.name]
        assert len(found["missing"]) == 1 and found["missing"][0]["start_offset"] == int(logs[1].name[:20])
    finally:
        orphan.unlink()
        (tmp_path / "hidden.manifest").rename(logs[1].with_suffix(".manifest"))


def test_a_segment_deleted_during_a_query_is_data_loss(tierlog_spark, cluster, tmp_path):
    from tierlog.spark.options import parse
    from tierlog.spark.plan import Planner, RemoteSlice
    from tierlog.spark.read import DataLossError, read_task
    topic = "shrinking"
    create(cluster, topic, partitions=1)
    produce(cluster, topic, 1500)
    tiered(cluster, topic, partitions=1)
    opts = parse({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                  "tierlog.rsm.dir": str(cluster.remote_dir)})
    planner = Planner(opts)
    tasks = planner.plan({k: (0, v[1]) for k, v in planner.bounds(planner.partitions()).items()})
    planner.close()
    first = next(t for t in tasks if isinstance(t, RemoteSlice))
    # Retention removes the segment after planning, before the executor reads it.
    for f in Path(cluster.remote_dir).rglob(f"{topic}-*/0/{first.segment.start_offset:020d}-*"):
        f.unlink()
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        list(read_task(first, opts))
    opts.fail_on_data_loss = False
    assert list(read_task(first, opts)) == []


def test_a_reused_worker_reads_only_new_segment_metadata_and_sees_deletes(cluster):
    """The remote segment lists are kept per process (Spark plans query after query in a reused worker): a
    second plan reads no metadata record, a plan after retention deleted segments reads only the records
    appended since and lists exactly what a fresh read lists."""
    from tierlog.client.sync import Admin
    from tierlog.client.types import TopicPartition
    from tierlog.spark.options import parse
    from tierlog.spark.plan import SEGMENT_LISTS, Planner
    topic = "followed"
    create(cluster, topic, partitions=1)
    produce(cluster, topic, 1500)
    tiered(cluster, topic, partitions=1)
    opts = parse({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                  "tierlog.rsm.dir": str(cluster.remote_dir)})
    tp = TopicPartition(topic, 0)

    def segments() -> tuple[list[tuple], int]:
        planner = Planner(opts)
        try:
            before = SEGMENT_LISTS.records_read
            found = planner.remote_segments([tp])[tp]
            return ([(md.segment_id.id, md.start_offset, md.end_offset) for md in found],
                    SEGMENT_LISTS.records_read - before)
        finally:
            planner.close()

    first, _ = segments()
    again, read_again = segments()
    assert again == first and len(first) >= 3 and read_again == 0
    cut = first[2][1]  # the first two segments end below the new log start: the broker deletes them
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.delete_records({tp: cut})
    kept = [s for s in first if s[2] >= cut]
    wait_until(lambda: tier_status(cluster, topic)["partitions"][0]["remote_segments"] == len(kept), 60,
               what="the remote segments below the log start to be deleted")
    after, read_after = segments()
    SEGMENT_LISTS.clear()
    fresh, read_fresh = segments()
    assert after == fresh == kept
    assert 0 < read_after < read_fresh


def test_tierlog_spark_command(cluster, history, tmp_path):
    """The jobs as the command line runs them (its own Spark session, in a subprocess)."""
    import os
    import subprocess
    import sys
    topic, _ = history
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        env.pop(k, None)  # the command sets them itself
    chart = tmp_path / "report.png"
    out = subprocess.run([sys.executable, "-m", "tierlog", "spark", "storage-report", "--bootstrap-server",
                          cluster.bootstrap, "--topic", topic, "--option", f"tierlog.rsm.dir={cluster.remote_dir}",
                          "--master", "local[1]", "--chart", str(chart)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["topic", "partition", "segments"]
    assert [ln.split()[:2] for ln in lines[1:4]] == [[topic, "0"], [topic, "1"], [topic, "2"]]
    assert chart.exists()
    bad = subprocess.run([sys.executable, "-m", "tierlog", "spark", "export", "--topic", topic, "--output",
                          str(tmp_path / "x")], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--bootstrap-server" in bad.stderr
