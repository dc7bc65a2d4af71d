"""Pipeline jobs on Spark, run as ``tierlog spark <job>``:

- ``export``: topic -> Parquet, partitioned by topic partition and date, incremental and exactly once
  through the query's checkpoint (a Structured Streaming query with ``trigger(availableNow=True)``: each
  run writes what arrived since the last one);
- ``storage-report``: per topic and partition, remote bytes (the stored size from KIP-917 custom
  metadata when the storage plugin returns it), segment counts and ages, from the remote log metadata;
  a table on standard output and a PNG chart;
- ``audit``: the listing of the remote store joined with the metadata, at Spark scale: objects no
  metadata references (orphans) and finished segments whose objects are missing.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tierlog.kafka_uuid import uuid_to_str

from . import options as options_mod
from .plan import Planner


def _progress(label: str, done: int, total: int | None) -> None:
    """A one-line progress bar on standard error."""
    if total:
        width = 30
        filled = int(width * min(done, total) / total)
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    else:
        sys.stderr.write(f"\r{label} {done}")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------ export


def export(spark, options: Mapping[str, str], output: str, checkpoint: str) -> dict:
    """Everything new in the topics since the last run, appended to ``output`` as Parquet (columns of the
    Kafka source plus ``date``), partitioned by ``partition`` and ``date``. Returns what this run wrote."""
    from pyspark.sql import functions as F
    opts = {**options}
    opts.setdefault("startingOffsets", "earliest")
    reader = spark.readStream.format("tierlog")
    for k, v in opts.items():
        reader = reader.option(k, v)
    df = reader.load().withColumn("date", F.date_format(F.col("timestamp"), "yyyy-MM-dd"))
    query = (df.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
             .partitionBy("partition", "date").trigger(availableNow=True).start())
    rows = 0
    while query.isActive:
        progress = query.lastProgress
        if progress:
            rows = max(rows, int(progress.get("numInputRows", 0)))
        _progress("export", rows, None)
        time.sleep(0.5)
        query.awaitTermination(0.5)
    query.awaitTermination()
    total = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
    sys.stderr.write("\n")
    return {"rows": total, "batches": len(query.recentProgress), "output": output}


# --------------------------------------------------------------------------------------- the metadata


def _segments(options: Mapping[str, str]) -> list[dict]:
    """Every finished remote segment of the selected topics, as rows."""
    opts = options_mod.parse({**options, "tierlog.readMode": "broker"})
    opts.read_mode = "direct"  # the planner reads remote metadata only in direct mode
    planner = Planner(opts)
    try:
        tps = planner.partitions()
        remote = planner.remote_segments(tps)
    finally:
        planner.close()
    now = int(time.time() * 1000)
    rows = []
    for tp, segments in remote.items():
        for md in segments:
            stored = md.segment_size_in_bytes
            if md.custom_metadata:
                try:
                    stored = int(json.loads(md.custom_metadata).get("s", stored))
                except (ValueError, AttributeError):
                    pass
            rows.append({"topic": tp.topic, "partition": tp.partition, "segment_id": uuid_to_str(md.segment_id.id),
                         "topic_id": uuid_to_str(md.topic_id_partition.topic_id),
                         "start_offset": md.start_offset, "end_offset": md.end_offset,
                         "size_bytes": md.segment_size_in_bytes, "stored_bytes": stored,
                         "age_hours": round((now - md.max_timestamp_ms) / 3_600_000, 2)})
    return rows


_SEGMENT_SCHEMA = ("topic string, partition int, segment_id string, topic_id string, start_offset long, "
                   "end_offset long, size_bytes long, stored_bytes long, age_hours double")


def storage_report(spark, options: Mapping[str, str], chart: str | None = None) -> list[dict]:
    """Remote bytes, segments and ages per topic and partition (aggregated by Spark); prints a table and,
    with ``chart``, saves a PNG bar chart of remote bytes per partition."""
    from pyspark.sql import functions as F
    df = spark.createDataFrame(_segments(options), _SEGMENT_SCHEMA)
    report = (df.groupBy("topic", "partition")
              .agg(F.count("*").alias("segments"), F.sum("size_bytes").alias("remote_bytes"),
                   F.sum("stored_bytes").alias("stored_bytes"), F.min("age_hours").alias("newest_age_hours"),
                   F.max("age_hours").alias("oldest_age_hours"), F.min("start_offset").alias("first_offset"),
                   F.max("end_offset").alias("last_offset"))
              .orderBy("topic", "partition"))
    rows = [r.asDict() for r in report.collect()]
    header = ["topic", "partition", "segments", "remote_bytes", "stored_bytes", "first_offset", "last_offset",
              "newest_age_hours", "oldest_age_hours"]
    table = [header] + [[str(r[h]) for h in header] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not rows:
        print("no remote segments")
    if chart:
        _chart(rows, chart)
    return rows


def _chart(rows: list[dict], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("the chart needs matplotlib (pip install 'tierlog[spark]')") from None
    labels = [f"{r['topic']}-{r['partition']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 2), 4))
    ax.bar(labels, [r["remote_bytes"] / 2**20 for r in rows], label="log bytes", color="#4878a8")
    ax.bar(labels, [r["stored_bytes"] / 2**20 for r in rows], width=0.4, label="stored bytes", color="#e0a040")
    ax.set_ylabel("MiB in remote storage")
    ax.set_title("tierlog remote storage per partition")
    ax.legend()
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- audit


def audit(spark, options: Mapping[str, str]) -> dict:
    """Objects of the remote store that no finished segment references, and finished segments whose objects
    are missing. Only the built-in storage managers' layout is understood (docs/tiered-storage-layout.md);
    segments being copied or deleted at this moment show up as orphans (run it on a quiet topic, or use
    ``tierlog tier reconcile``, which knows the broker's in-flight work)."""
    from pyspark.sql import functions as F

    from tierlog.tiered.rsm import layout
    opts = options_mod.parse(options)
    if not opts.storage_manager:
        raise options_mod.SourceOptionError("the audit lists the remote store: give tierlog.rsm.* options")
    from .read import storage_manager
    rsm = storage_manager(opts)
    prefix = getattr(rsm, "key_prefix", "")
    planner = Planner(opts)
    try:
        cluster_id = planner.cluster_id
    finally:
        planner.close()
    objects = []
    for key, size in rsm.list_objects(prefix):
        pk = layout.parse_key(key, prefix)
        if pk is not None and pk.cluster_id not in (None, cluster_id):
            continue  # another cluster's key folder (a shared store)
        objects.append({"key": key, "size": size, "topic": pk.topic if pk else None,
                        "topic_id": uuid_to_str(pk.topic_id) if pk else None,
                        "segment_id": uuid_to_str(pk.segment_id) if pk else None})
    listing = spark.createDataFrame(objects, "key string, size long, topic string, topic_id string, "
                                             "segment_id string")
    segments = spark.createDataFrame(_segments(options), _SEGMENT_SCHEMA)
    # By topic id, not name: a shared store may hold a same-named topic of another cluster.
    topic_ids = [r.topic_id for r in segments.select("topic_id").distinct().collect()]
    selected = listing.where(F.col("topic_id").isin(topic_ids)) if topic_ids else listing.limit(0)
    orphans = selected.join(segments.select("segment_id"), "segment_id", "left_anti")
    logs = selected.where(F.col("key").endswith(".log")).select("segment_id").distinct()
    manifests = selected.where(F.col("key").endswith(".manifest")).select("segment_id").distinct()
    missing = (segments.join(logs, "segment_id", "left_anti")
               .unionByName(segments.join(manifests, "segment_id", "left_anti")).distinct())
    result = {
        "objects": selected.count(), "segments": segments.count(),
        "orphans": [r.asDict() for r in orphans.orderBy("key").collect()],
        "missing": [r.asDict() for r in missing.orderBy("topic", "partition", "start_offset").collect()],
        "unrecognized_keys": [o["key"] for o in objects if o["topic"] is None],
    }
    print(f"{result['objects']} remote objects, {result['segments']} finished segments in the metadata")
    print(f"{len(result['orphans'])} orphaned object(s)")
    for o in result["orphans"]:
        print(f"  orphan {o['key']} ({o['size']} bytes)")
    print(f"{len(result['missing'])} segment(s) with missing objects")
    for m in result["missing"]:
        print(f"  missing {m['topic']}-{m['partition']} offsets {m['start_offset']}-{m['end_offset']} "
              f"segment {m['segment_id']}")
    return result
