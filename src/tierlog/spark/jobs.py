"""Pipeline jobs on Spark, run as ``tierlog spark <job>`` (:func:`run`):

- ``export``: topic -> Parquet, partitioned by topic partition and date, incremental and exactly once
  through the query's checkpoint (a Structured Streaming query with ``trigger(availableNow=True)``: each
  run writes what arrived since the last one);
- ``storage-report``: per topic and partition, remote bytes (the stored size from KIP-917 custom
  metadata when the storage plugin returns it), segment counts and ages, from the remote log metadata;
  a table on standard output and a PNG chart;
- ``audit``: the listing of the remote store joined with the metadata, at Spark scale: objects no
  metadata references (orphans) and finished segments whose objects are missing.

:func:`run` does everything that can fail for a reason a person can fix before it starts Spark (the
extra installed, the broker reachable, the remote store the broker's), so such a failure is one line,
not a JVM's start-up and a stack trace; errors raised inside Spark by the data source come back as the
same one-line errors. Progress goes to standard error (:mod:`tierlog.spark.progress`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from tierlog.client.types import TopicPartition
from tierlog.kafka_uuid import uuid_to_str

from . import options as options_mod
from .options import BrokerUnreachableError, RemoteStoreConfigError, SourceOptionError
from .plan import Planner
from .progress import Progress, size

SPARK_EXTRA = "pip install 'tierlog[spark]'"


class MissingExtraError(RuntimeError):
    """PySpark or pyarrow is not installed."""


class DataLossJobError(RuntimeError):
    """The data source reported data loss (``failOnDataLoss``) inside Spark."""


def require_extra() -> None:
    """Raise MissingExtraError unless PySpark and pyarrow import."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
        from pyspark.sql import datasource  # noqa: F401 - PySpark 4's Python data sources
    except ImportError as e:
        missing = (getattr(e, "name", None) or "pyspark").split(".")[0]
        raise MissingExtraError(
            f"Spark jobs need the spark extra ({missing} is not installed); {SPARK_EXTRA}") from None


# Our errors as Spark re-raises them from a Python worker: "...tierlog.spark.options.X: message".
_OURS = {"RemoteStoreConfigError": RemoteStoreConfigError, "SourceOptionError": SourceOptionError,
         "BrokerUnreachableError": BrokerUnreachableError, "DataLossError": DataLossJobError}
_OURS_RE = re.compile(r"\b(" + "|".join(_OURS) + r"): (.+)")


def ours(e: BaseException) -> Exception | None:
    """The data source's own error inside a Spark exception, as a one-line error (None if there is none)."""
    if isinstance(e, tuple(c for c in _OURS.values())):
        return e  # type: ignore[return-value]
    m = _OURS_RE.search(str(e))
    if m is None:
        return None
    return _OURS[m.group(1)](m.group(2).strip())


def run(job: str, options: Mapping[str, str], *, master: str = "local[*]", output: str | None = None,
        checkpoint: str | None = None, chart: str | None = None) -> dict:
    """Run a job the way ``tierlog spark`` does: checks first, then a Spark session, then the job.

    Raises MissingExtraError, SourceOptionError (RemoteStoreConfigError), BrokerUnreachableError or
    DataLossJobError, each with a one-line message."""
    require_extra()
    if job == "export":
        if output is None:
            raise SourceOptionError("export needs an output folder")
        checkpoint = checkpoint or f"{output}/_checkpoint"
        total = export_preflight(options, checkpoint)
    elif job == "storage-report":
        segments = _segments(options, "storage-report")
    elif job == "audit":
        inputs = audit_inputs(options)
    else:
        raise SourceOptionError(f"unknown job {job!r}")
    from . import session
    # the job draws its own progress: Spark's stage bars would garble a log that is not a terminal
    spark = session(master, f"tierlog {job}", **{"spark.ui.showConsoleProgress": "false"})
    try:
        if job == "export":
            return export(spark, options, output, checkpoint, total=total)
        if job == "storage-report":
            return {"rows": storage_report(spark, options, chart, segments=segments)}
        return audit(spark, options, inputs=inputs)
    except Exception as e:
        mine = ours(e)
        if mine is None or mine is e:
            raise
        raise mine from None
    finally:
        spark.stop()


# ------------------------------------------------------------------------------------------ export


def export(spark, options: Mapping[str, str], output: str, checkpoint: str, total: int | None = None) -> dict:
    """Everything new in the topics since the last run, appended to ``output`` as Parquet (columns of the
    Kafka source plus ``date``), partitioned by ``partition`` and ``date``. Returns what this run wrote.
    ``total``: the offsets this run will read (from :func:`export_preflight`), for the progress's ETA."""
    from pyspark.sql import functions as F
    opts = {**options}
    opts.setdefault("startingOffsets", "earliest")
    reader = spark.readStream.format("tierlog")
    for k, v in opts.items():
        reader = reader.option(k, v)
    df = reader.load().withColumn("date", F.date_format(F.col("timestamp"), "yyyy-MM-dd"))
    before = _folder_bytes(output)
    query = (df.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
             .partitionBy("partition", "date").trigger(availableNow=True).start())
    per_batch = options_mod._int({k.lower(): v for k, v in opts.items()}, "maxoffsetspertrigger", None)
    rows: dict[int, int] = {}  # batch id -> input rows, as the query reports finished batches
    with Progress("export", "rows", total) as progress:
        poll = 1.0 if progress.live else 2.5
        while not query.awaitTermination(poll):
            _batches(query, rows)
            done = sum(rows.values())
            if total is not None:
                # the micro-batch in flight: its share of the finished tasks of the running stages
                current = max(0, total - done)
                if per_batch:
                    current = min(current, per_batch)
                done += int(current * _running_fraction(spark))
            progress.update(done, _folder_bytes(output) - before)
        _batches(query, rows)
        written = _folder_bytes(output) - before
        progress.update(sum(rows.values()), written)
        progress.finish(f"{sum(rows.values()):,} rows, {size(written)} of Parquet written")
    return {"rows": sum(rows.values()), "batches": len(rows), "output": output}


def _batches(query, rows: dict[int, int]) -> None:
    for p in query.recentProgress:
        rows[int(p["batchId"])] = int(p["numInputRows"])


def _running_fraction(spark) -> float:
    """Finished tasks of the stages running now, as a fraction of their tasks."""
    tracker = spark.sparkContext.statusTracker()
    done = tasks = 0
    for stage in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage)
        if info is not None:
            done += info.numCompletedTasks
            tasks += info.numTasks
    return done / tasks if tasks else 0.0


def _folder_bytes(path: str) -> int:
    """Bytes of the data files below ``path``, skipping Spark's bookkeeping (``_*`` and ``.*`` entries)."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass  # replaced while walking
    return total


def checkpoint_offsets(checkpoint: str) -> dict[TopicPartition, int] | None:
    """The source offsets the last committed micro-batch of a checkpoint ended at (where the next run
    starts), or None when there is none (or it cannot be read: the progress then has no total)."""
    base = Path(checkpoint)
    try:
        committed = [int(p.name) for p in (base / "commits").iterdir() if p.name.isdigit()]
        if not committed:
            return None
        lines = (base / "offsets" / str(max(committed))).read_text().splitlines()
        data = json.loads(lines[2])  # "v1", the batch's metadata, then one line per source
        return {TopicPartition(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
    except (OSError, ValueError, IndexError, AttributeError, TypeError):
        return None


def export_preflight(options: Mapping[str, str], checkpoint: str) -> int | None:
    """Before Spark starts: the broker answers, the remote store holds what this run will read (see
    :mod:`tierlog.spark.store`), and how many offsets the run will read (None if unknown)."""
    opts = options_mod.parse({"startingOffsets": "earliest", **options}, streaming=True)
    planner = Planner(opts)
    try:
        planner.connect()
        tps = planner.partitions()
        bounds = planner.bounds(tps)
        start = checkpoint_offsets(checkpoint)
        if start is None:
            start = planner.resolve(tps, opts.starting, opts.starting_timestamp, opts.starting_by_timestamp,
                                    bounds, "starting")
        ranges = {tp: (max(start.get(tp, 0), bounds[tp][0]), bounds[tp][1]) for tp in tps}
        if opts.direct:
            planner.plan(ranges)
        return sum(max(0, end - begin) for begin, end in ranges.values())
    finally:
        planner.close()


# --------------------------------------------------------------------------------------- the metadata


def _segments(options: Mapping[str, str], job: str = "metadata", with_cluster_id: bool = False):
    """Every finished remote segment of the selected topics, as rows (with progress on standard error);
    ``with_cluster_id``: also the cluster's id (remote keys carry it), as ``(rows, cluster_id)``."""
    opts = options_mod.parse({**options, "tierlog.readMode": "broker"})
    opts.read_mode = "direct"  # the planner reads remote metadata only in direct mode
    planner = Planner(opts)
    try:
        planner.connect()
        tps = planner.partitions()
        with Progress(f"{job}: reading __remote_log_metadata", "records") as progress:
            remote = planner.remote_segments(tps, progress=progress.update)
            progress.finish(always=False)
        cluster_id = planner.cluster_id if with_cluster_id else None
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
    return (rows, cluster_id) if with_cluster_id else rows


_SEGMENT_SCHEMA = ("topic string, partition int, segment_id string, topic_id string, start_offset long, "
                   "end_offset long, size_bytes long, stored_bytes long, age_hours double")


def storage_report(spark, options: Mapping[str, str], chart: str | None = None,
                   segments: list[dict] | None = None) -> list[dict]:
    """Remote bytes, segments and ages per topic and partition (aggregated by Spark); prints a table and,
    with ``chart``, saves a PNG bar chart of remote bytes per partition. ``segments``: from
    :func:`_segments`, when already read."""
    from pyspark.sql import functions as F
    rows = _segments(options, "storage-report") if segments is None else segments
    df = spark.createDataFrame(rows, _SEGMENT_SCHEMA)
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


def audit_inputs(options: Mapping[str, str]) -> tuple[list[dict], list[dict]]:
    """The audit's inputs, read on the driver before Spark starts: the store's objects (opened read-only:
    a wrong folder is not created) and the metadata's segments. A store that holds no object of any
    segment the metadata lists for a topic is a configuration error (RemoteStoreConfigError), not a
    topic whose every object is missing."""
    from tierlog.tiered.rsm import layout

    from .store import check_root, describe, open_store, setting_hint
    opts = options_mod.parse(options)
    if not opts.storage_manager:
        raise SourceOptionError("the audit lists the remote store: give tierlog.rsm.* options")
    segments, cluster_id = _segments(options, "audit", with_cluster_id=True)
    rsm = open_store(opts, cluster_id)
    check_root(rsm, opts)
    prefix = getattr(rsm, "key_prefix", "")
    objects = []
    with Progress(f"audit: listing {describe(rsm, opts)}", "objects") as progress:
        listed = rsm.list_objects(prefix)
        for key, size in listed:
            pk = layout.parse_key(key, prefix)
            if pk is not None and pk.cluster_id not in (None, cluster_id):
                continue  # another cluster's key folder (a shared store)
            objects.append({"key": key, "size": size, "topic": pk.topic if pk else None,
                            "topic_id": uuid_to_str(pk.topic_id) if pk else None,
                            "segment_id": uuid_to_str(pk.segment_id) if pk else None})
        progress.update(len(objects), sum(size for _, size in listed))
        progress.finish(always=False)
    stored = {(o["topic_id"], o["segment_id"]) for o in objects}
    by_topic: dict[str, int] = {}
    found: set[str] = set()
    for seg in segments:
        by_topic[seg["topic"]] = by_topic.get(seg["topic"], 0) + 1
        if (seg["topic_id"], seg["segment_id"]) in stored:
            found.add(seg["topic"])
    for topic, count in sorted(by_topic.items()):
        if topic not in found:
            raise RemoteStoreConfigError(
                f"remote store {describe(rsm, opts)} holds none of the {count} remote segment(s) the metadata "
                f"lists for topic {topic}: the store is not the broker's (a configuration error, not missing "
                f"objects); {setting_hint(opts)}")
    return objects, segments


def audit(spark, options: Mapping[str, str], inputs: tuple[list[dict], list[dict]] | None = None) -> dict:
    """Objects of the remote store that no finished segment references, and finished segments whose objects
    are missing. Only the built-in storage managers' layout is understood (docs/tiered-storage-layout.md);
    segments being copied or deleted at this moment show up as orphans (run it on a quiet topic, or use
    ``tierlog tier reconcile``, which knows the broker's in-flight work). ``inputs``: from
    :func:`audit_inputs`, when already read."""
    from pyspark.sql import functions as F

    objects, rows = audit_inputs(options) if inputs is None else inputs
    listing = spark.createDataFrame(objects, "key string, size long, topic string, topic_id string, "
                                             "segment_id string")
    segments = spark.createDataFrame(rows, _SEGMENT_SCHEMA)
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
