"""Spark reading a topic whose history is in remote storage, three ways, in one run:

- ``direct``: ``format("tierlog")`` against tierlog, remote segments read straight from the remote store
  by the executors (only the local tail through the broker);
- ``broker``: ``format("tierlog")`` with ``tierlog.readMode=broker``, everything through tierlog's broker;
- ``kafka``: Spark's built-in Kafka source (spark-sql-kafka-0-10) against Apache Kafka 4.4 with
  LocalTieredStorage holding the same data;
- ``kafka_tierlog``: the same built-in Kafka source against tierlog's broker (history fetched from the
  remote tier by the broker), so both brokers are compared under the one client Spark ships;
- ``arrow_ceiling``: a Python data source handing Spark ready-made Arrow batches of the same shape from
  memory, no I/O and no decoding: the most any Python data source can deliver here, so
  ``direct_vs_ceiling`` shows what reading and decoding cost and ``ceiling_vs_kafka`` the best
  ``direct_vs_kafka`` possible through PySpark's data source API on this machine.

Both brokers get the same records (``--mb`` MiB of ``--record-bytes`` values over ``--partitions``
partitions, 16 MiB segments, ``local.retention.bytes=1``), and the benchmark waits until everything but
the active segments is in remote storage. Each run reads the whole topic in one Spark job that touches
every value (``sum(length(value))``) on one shared ``local[2]`` session; timings are medians of
``--runs``. Prints ONE JSON line with rows/s and MB/s per way and ``direct / kafka``.

Record timestamps (CreateTime) are spread evenly over the ten hours before the run, so the same run also
times ``direct_last_hour``: the same query with ``where(timestamp >= <last hour>)``, which filter pushdown
(tierlog.spark.pushdown) turns into the remote segments of that hour; ``last_hour_vs_full`` is its time
over the full direct scan's. ``query_floor`` is the same query over a Python data source of one row in
one task: what Spark alone costs per query (its Python planning round trips, one task), the part of
``direct_last_hour`` no source can save; ``floor_vs_full`` is its time over the full scan's.

    python bench/spark_read.py [--mb 1024] [--runs 3] [--partitions 4] [--record-bytes 1024]

Targets: direct >= 3x Spark's built-in source on Apache Kafka (issue 9), >= 4x (issue 41 item 4); the last
hour of ten in at most 0.2 of the full scan's time (issue 41).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
MIB = 1024 * 1024
SEGMENT_BYTES = 16 * MIB
SPAN_MS = 10 * 3600 * 1000  # the records' timestamps cover ten hours
HOUR_MS = 3600 * 1000


def stamp(base_ms: int, i: int, count: int) -> int:
    """Record ``i``'s timestamp: evenly over the ten hours from ``base_ms``."""
    return base_ms + i * SPAN_MS // count


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def log(msg: str) -> None:
    print(f"[spark_read {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def produce(bootstrap: str, topic: str, mb: int, partitions: int, record_bytes: int, base_ms: int) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config={
            "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1",
            "file.delete.delay.ms": "0"})]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.size": 1_000_000, "acks": "all",
                  "queue.buffering.max.kbytes": 1_048_576})
    values = [os.urandom(record_bytes) for _ in range(1024)]
    count = mb * MIB // record_bytes
    for i in range(count):
        while True:
            try:
                p.produce(topic, values[i % 1024], b"%d" % i, partition=i % partitions,
                          timestamp=stamp(base_ms, i, count))
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(600):
        raise RuntimeError("produce did not finish")
    return count


def earliest_local(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from tierlog.client.sync import Admin
    from tierlog.client.types import TopicPartition
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        found = admin.list_offsets({TopicPartition(topic, p): "earliest_local" for p in range(partitions)})
        return [found[TopicPartition(topic, p)].offset for p in range(partitions)]


def wait_tiered(bootstrap: str, topic: str, partitions: int, count: int, record_bytes: int) -> None:
    """Until each partition's local log starts past everything but its last two segments (size retention
    keeps the last segment holding data; the active one may be rolled and uploaded or not yet)."""
    per_partition = count // partitions
    tail = 2 * (SEGMENT_BYTES // (record_bytes + 70) + 1)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        starts = earliest_local(bootstrap, topic, partitions)
        if all(s >= per_partition - tail for s in starts):
            return
        time.sleep(1)
    raise RuntimeError(f"{topic} was not tiered in time ({earliest_local(bootstrap, topic, partitions)})")


def timed_read(spark, fmt: str, options: dict, expected_rows: int, since_ms: int | None = None
               ) -> tuple[float, int, int]:
    from pyspark.sql import functions as F
    reader = spark.read.format(fmt)
    for k, v in options.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    df = reader.load()
    if since_ms is not None:
        df = df.where(F.col("timestamp") >= F.timestamp_millis(F.lit(since_ms)))
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    dt = time.perf_counter() - t0
    if row["n"] != expected_rows:
        raise RuntimeError(f"{fmt} {options.get('kafka.bootstrap.servers', '')} "
                           f"{options.get('tierlog.readMode', '')}: {row['n']} rows, expected {expected_rows}")
    return dt, int(row["n"]), int(row["bytes"] or 0)  # sum() of no rows is null


def ceiling_source(rows: int, tasks: int, record_bytes: int, name: str = "arrow_ceiling"):
    """A Python data source that only hands Spark ready-made Arrow batches shaped like the topic's rows
    (no I/O, no decoding): what any Python data source costs Spark on this machine, the floor under
    ``direct``."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class CeilingReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(rows // tasks + (1 if i < rows % tasks else 0)) for i in range(tasks)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa

            from tierlog.spark.read import arrow_schema
            n = 8192
            values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
                np.arange(n + 1, dtype=np.int32) * record_bytes), pa.py_buffer(os.urandom(n * record_bytes))])
            keys = pa.array([b"%d" % i for i in range(n)], pa.binary())
            batch = pa.RecordBatch.from_arrays(
                [keys, values, pa.repeat(pa.scalar("history"), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                 pa.array(np.arange(n)), pa.array(np.arange(n) * 1000).view(pa.timestamp("us", tz="UTC")),
                 pa.repeat(pa.scalar(0, pa.int32()), n)], schema=arrow_schema(False))
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return name

        def schema(self):
            from tierlog.spark.read import SPARK_SCHEMA
            return SPARK_SCHEMA

        def reader(self, schema):
            return CeilingReader()

    return CeilingSource


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--record-bytes", type=int, default=1024)
    args = ap.parse_args()
    load_at_start = os.getloadavg()  # the machine may be shared: report its load with the figures
    kp = _load("kafka_peer")
    jars = _load("spark_kafka_jars").spark_jars()
    from tests.harness.broker import BrokerProcess
    from tests.harness.tiered import tiered_settings

    from tierlog.spark import prepare_environment, register
    prepare_environment()
    from pyspark.sql import SparkSession

    topic = "history"
    results: dict[str, list[float]] = {"direct": [], "broker": [], "kafka": [], "kafka_tierlog": [],
                                       "arrow_ceiling": [], "direct_last_hour": [], "query_floor": []}
    base_ms = int(time.time() * 1000) - SPAN_MS  # recent: older records would be past retention
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-spark-") as tmp:
        work = Path(tmp)
        (work / "tierlog").mkdir()
        tl = BrokerProcess(work / "tierlog" / "logs", tiered_settings(
            work / "tierlog", **{"remote.log.manager.task.interval.ms": "500", "rsm.config.fsync.enable": "false",
                                 "log.retention.check.interval.ms": "500"})).start()
        kafka = kp.KafkaServer(work / "kafka", tiered=True, jvm_opts=["-Xmx1g", "-Xms1g", "-XX:+UseG1GC"]).start()
        spark = None
        try:
            log(f"producing {args.mb} MiB to tierlog and to Kafka")
            count = produce(tl.bootstrap, topic, args.mb, args.partitions, args.record_bytes, base_ms)
            produce(kafka.bootstrap, topic, args.mb, args.partitions, args.record_bytes, base_ms)
            since = base_ms + SPAN_MS - HOUR_MS
            last_hour = sum(1 for i in range(count) if stamp(base_ms, i, count) >= since)
            log("waiting until both have tiered it")
            wait_tiered(tl.bootstrap, topic, args.partitions, count, args.record_bytes)
            wait_tiered(kafka.bootstrap, topic, args.partitions, count, args.record_bytes)
            spark = (SparkSession.builder.master("local[2]").appName("bench-spark-read")
                     .config("spark.jars", ",".join(str(j) for j in jars)).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
                     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            spark.dataSource.register(ceiling_source(count, args.partitions, args.record_bytes))
            spark.dataSource.register(ceiling_source(1, 1, args.record_bytes, "query_floor"))
            ways = {
                "direct": ("tierlog", {"kafka.bootstrap.servers": tl.bootstrap, "subscribe": topic,
                                       "tierlog.rsm.dir": str(work / "tierlog" / "remote")}),
                "broker": ("tierlog", {"kafka.bootstrap.servers": tl.bootstrap, "subscribe": topic,
                                       "tierlog.readMode": "broker"}),
                "kafka": ("kafka", {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic}),
                "kafka_tierlog": ("kafka", {"kafka.bootstrap.servers": tl.bootstrap, "subscribe": topic}),
                "arrow_ceiling": ("arrow_ceiling", {}),
                "query_floor": ("query_floor", {}),
            }
            ways["direct_last_hour"] = ways["direct"]
            filtered = {"direct_last_hour": since}

            def rows_of(name: str) -> int:
                return 1 if name == "query_floor" else last_hour if name in filtered else count
            for name, (fmt, opts) in ways.items():  # warm-up: JIT, Python workers, page cache
                timed_read(spark, fmt, opts, rows_of(name), filtered.get(name))
            nbytes = 0
            for run in range(args.runs):
                order = list(ways) if run % 2 == 0 else list(reversed(ways))
                for name in order:
                    fmt, opts = ways[name]
                    dt, rows, got_bytes = timed_read(spark, fmt, opts, rows_of(name), filtered.get(name))
                    if name not in filtered and name != "query_floor":
                        nbytes = got_bytes
                    results[name].append(dt)
                    log(f"run {run + 1} {name}: {rows} rows in {dt:.1f} s ({got_bytes / MIB / dt:.0f} MB/s)")
        finally:
            if spark is not None:
                spark.stop()
            kafka.stop()
            tl.kill()
    out = {"bench": "spark_read", "mb": args.mb, "records": count, "record_bytes": args.record_bytes,
           "partitions": args.partitions, "runs": args.runs, "spark": "4.2.0 local[2]",
           "kafka_peer": "Apache Kafka 4.4.0 with LocalTieredStorage, read by spark-sql-kafka-0-10"}
    for name, times in results.items():
        med = statistics.median(times)
        if name in ("direct_last_hour", "query_floor"):  # few rows: the time is what counts
            out[name] = {"seconds": round(med, 2), "runs_s": [round(t, 2) for t in times]}
            continue
        out[name] = {"seconds": round(med, 2), "rows_per_s": round(count / med),
                     "mb_per_s": round(nbytes / MIB / med, 1), "runs_s": [round(t, 2) for t in times]}
    out["direct_vs_kafka"] = round(out["direct"]["mb_per_s"] / out["kafka"]["mb_per_s"], 2)
    out["direct_vs_kafka_tierlog"] = round(out["direct"]["mb_per_s"] / out["kafka_tierlog"]["mb_per_s"], 2)
    out["kafka_tierlog_vs_kafka"] = round(out["kafka_tierlog"]["mb_per_s"] / out["kafka"]["mb_per_s"], 2)
    out["direct_vs_broker"] = round(out["direct"]["mb_per_s"] / out["broker"]["mb_per_s"], 2)
    out["ceiling_vs_kafka"] = round(out["arrow_ceiling"]["mb_per_s"] / out["kafka"]["mb_per_s"], 2)
    out["direct_vs_ceiling"] = round(out["direct"]["mb_per_s"] / out["arrow_ceiling"]["mb_per_s"], 2)
    out["direct_last_hour"]["rows"] = last_hour
    out["last_hour_vs_full"] = round(out["direct_last_hour"]["seconds"] / out["direct"]["seconds"], 3)
    out["target_met"] = out["direct_vs_kafka"] >= 3.0  # issue 9
    out["target_4x_met"] = out["direct_vs_kafka"] >= 4.0  # issue 41 item 4
    out["floor_vs_full"] = round(out["query_floor"]["seconds"] / out["direct"]["seconds"], 3)
    out["pushdown_target_met"] = out["last_hour_vs_full"] <= 0.2
    out["load_avg_start_end"] = [round(load_at_start[0], 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
