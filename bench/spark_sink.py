"""Spark writing to Apache Kafka 4.4 through three sinks, in one run:

- ``kafka``: Spark's built-in Kafka sink (spark-sql-kafka-0-10, at least once);
- ``tierlog_eos``: ``format("tierlog")``, exactly once (tierlog.spark.sink: a transaction per task,
  committed by the driver, with the batch marker);
- ``tierlog_alo``: ``format("tierlog")`` with ``tierlog.deliveryGuarantee=at_least_once``.

Every way writes the same DataFrame (``--mb`` MiB of ``--record-bytes`` values with a short key, made in
the JVM by ``spark.range``, ``--partitions`` Spark partitions) to a fresh topic of ``--partitions``
partitions on one Kafka 4.4 broker (KRaft, transaction version 2), with the same shared ``local[2]``
session; timings are medians of ``--runs`` after a warm-up. Prints ONE JSON line with MB/s per way and
``eos_vs_kafka``.

    python bench/spark_sink.py [--mb 128] [--runs 3] [--partitions 4] [--record-bytes 1024]

Target (issue 41): the exactly-once sink at least 0.8 of Spark's Kafka sink's MB/s.
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


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def log(msg: str) -> None:
    print(f"[spark_sink {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(60)


def committed_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer would get: the sum of last stable offsets (minus the markers,
    one per partition and transaction, counted by the caller's expectations)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "isolation.level": "read_committed"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--record-bytes", type=int, default=1024)
    args = ap.parse_args()
    load_at_start = os.getloadavg()  # the machine may be shared: report its load with the figures
    kp = _load("kafka_peer")
    jars = _load("spark_kafka_jars").spark_jars()
    from tierlog.spark import prepare_environment, register
    prepare_environment()
    from pyspark.sql import SparkSession

    count = args.mb * MIB // args.record_bytes
    nbytes = count * args.record_bytes
    results: dict[str, list[float]] = {"kafka": [], "tierlog_eos": [], "tierlog_alo": []}
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-spark-sink-") as tmp:
        kafka = kp.KafkaServer(Path(tmp) / "kafka", jvm_opts=["-Xmx1g", "-Xms1g", "-XX:+UseG1GC"]).start()
        spark = None
        try:
            spark = (SparkSession.builder.master("local[2]").appName("bench-spark-sink")
                     .config("spark.jars", ",".join(str(j) for j in jars)).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            df = (spark.range(0, count, numPartitions=args.partitions)
                  .selectExpr("CAST(id AS STRING) AS key",
                              f"CONCAT(LPAD(CAST(id AS STRING), 12, '0'), REPEAT('x', {args.record_bytes - 12})) "
                              "AS value"))
            ways = {
                "kafka": ("kafka", {}),
                "tierlog_eos": ("tierlog", {}),
                "tierlog_alo": ("tierlog", {"tierlog.deliveryGuarantee": "at_least_once"}),
            }
            n = 0

            def write(name: str) -> float:
                nonlocal n
                fmt, opts = ways[name]
                n += 1
                topic = f"{name}-{n}"
                create_topic(kafka.bootstrap, topic, args.partitions)
                w = (df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap)
                     .option("topic", topic))
                for k, v in opts.items():
                    w = w.option(k, v)
                started = time.monotonic()
                w.save()
                took = time.monotonic() - started
                # every record there for a read_committed reader (plus one commit marker per partition
                # and transaction of the exactly-once sink)
                deadline = time.monotonic() + 60  # Kafka writes the commit markers just after EndTxn
                while (visible := committed_records(kafka.bootstrap, topic, args.partitions)) < count \
                        and time.monotonic() < deadline:
                    time.sleep(0.2)
                if visible < count:
                    raise SystemExit(f"{name}: only {visible} of {count} records visible")
                return took

            for name in ways:
                write(name)  # warm-up: JIT, Python workers, connections
            for run in range(args.runs):
                order = list(ways) if run % 2 == 0 else list(reversed(ways))
                for name in order:
                    dt = write(name)
                    results[name].append(dt)
                    log(f"run {run + 1} {name}: {count} rows in {dt:.1f} s ({nbytes / MIB / dt:.1f} MB/s)")
        finally:
            if spark is not None:
                spark.stop()
            kafka.stop()
    out = {"bench": "spark_sink", "mb": args.mb, "records": count, "record_bytes": args.record_bytes,
           "partitions": args.partitions, "runs": args.runs, "spark": "4.2.0 local[2]",
           "kafka_peer": "Apache Kafka 4.4.0 (KRaft), written by spark-sql-kafka-0-10 and format('tierlog')"}
    for name, times in results.items():
        med = statistics.median(times)
        out[name] = {"seconds": round(med, 2), "rows_per_s": round(count / med),
                     "mb_per_s": round(nbytes / MIB / med, 1), "runs_s": [round(t, 2) for t in times]}
    out["eos_vs_kafka"] = round(out["tierlog_eos"]["mb_per_s"] / out["kafka"]["mb_per_s"], 2)
    out["eos_vs_alo"] = round(out["tierlog_eos"]["mb_per_s"] / out["tierlog_alo"]["mb_per_s"], 2)
    out["target_met"] = out["eos_vs_kafka"] >= 0.8
    out["load_avg_start_end"] = [round(load_at_start[0], 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
