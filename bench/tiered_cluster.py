"""Remote catch-up on three brokers: a fresh consumer reads a tiered RF=3 topic whose data is almost all in
the remote tier, on three tierlog brokers against three Apache Kafka 4.4 nodes.

One invocation starts, on 127.0.0.1 (free ports, one temporary folder, every process stopped by its PID):

- one ZooKeeper and three tierlog brokers under a chroot (tests/harness/tierlog_cluster.py), tiering to a
  shared folder with the filesystem backend and the topic-based metadata manager, ``__remote_log_metadata``
  replicated three times;
- three Apache Kafka 4.4 nodes in KRaft mode, each broker and controller, the three voters of one quorum
  (tests/harness/apache_kafka.py ``start_kafka_kraft_cluster``), tiering through Kafka's LocalTieredStorage
  into a shared folder, with kafka-server-start's JVM options (``-Xmx1g -Xms1g``, G1).

Both get the remote log manager's task and retention check every 500 ms. Each side gets one topic:
``--partitions`` (3) partitions, replication factor 3, ``min.insync.replicas=2``, ``remote.storage.enable``,
``--segment-bytes`` (4 MiB) segments and ``local.retention.bytes=1``, so once the leaders have copied a
rolled segment it is deleted locally and only each partition's active segment stays. ``--mb`` (150) MiB of
``--record-bytes`` (1 KiB) records are written with Kafka 4.4's ProducerPerformance (acks=all, linger.ms=5,
batch.size 256 KiB; not measured), then the benchmark waits until every partition's leader answers
ListOffsets -4 = -5 + 1 with at most one segment's records above (``remote_fraction``: the share of offsets
at or below LATEST_TIERED).

The measure is Kafka 4.4's ConsumerPerformance (kafka-consumer-perf-test.sh's defaults) reading the whole
topic from earliest with a new group: ``fetch.MB.sec``, the fetch phase without the group join.
``--warmup-reads`` (2) unmeasured reads per side first (the JIT of Kafka's JVMs and of the tools' JVM, the
remote index caches); then
``--runs`` runs, the first side alternating. The perf tools run in one long-lived JVM shared by both sides
(bench/replication.py's ``PerfTools``). Both sides read their remote tier from the page cache: this compares
the brokers' remote read paths, not disks. Prints ONE JSON line: both medians, the ratio tierlog / Kafka (of
the medians, and the median of each run's own ratio), the target (>= 2, issue 21) and whether it is met, the
brokers' CPU per MB read (all three brokers of a side, from /proc) and Kafka's over tierlog's, and the load
average at the start and the end.

    python bench/tiered_cluster.py [--runs 3] [--mb 150]
    python bench/tiered_cluster.py --runs 1 --mb 40      # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.harness import apache_kafka, rawclient  # noqa: E402
from tests.harness import zookeeper as zk  # noqa: E402
from tests.harness.tiered import tiered_settings  # noqa: E402
from tests.harness.tierlog_cluster import wait_until  # noqa: E402

from tierlog.protocol import ApiKey  # noqa: E402


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"tierlog_bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rep = _load("replication")  # the Cluster interface, PerfTools, timed, medians
vk, kp = rep.vk, rep.kp
MIB = 1024 * 1024
TARGET = 2.0
#: Given to both sides.
SHARED = {"remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
          "auto.leader.rebalance.enable": "false", "group.initial.rebalance.delay.ms": "0"}


def log(msg: str) -> None:
    print(f"[tiered_cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class TierlogTiered(rep.TierlogCluster):
    """bench/replication.py's three tierlog brokers, tiering to one shared folder."""

    def __init__(self, work: Path, server):
        settings = {**tiered_settings(work, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3"}),
                    **SHARED, "offsets.topic.num.partitions": "6", "metrics.port": "0"}
        super().__init__(work, server, settings, timeout=120)


class KafkaTiered(rep.Cluster):
    name = "kafka"

    def __init__(self, work: Path):
        with contextlib.redirect_stdout(sys.stderr):  # the harness announces the cluster; stdout is the JSON line
            self.cluster = apache_kafka.start_kafka_kraft_cluster(work, 3, tiered=True, settings=SHARED,
                                                                  jvm_opts=vk.KAFKA_JVM_OPTS)

    def pid(self, broker_id: int) -> int:
        return self.cluster.brokers[broker_id].pid


def create_topic(cluster: rep.Cluster, name: str, args) -> None:
    rawclient.create_topic_in_cluster(cluster.bootstrap, name, args.partitions, 3, {
        "min.insync.replicas": 2, "remote.storage.enable": "true", "segment.bytes": args.segment_bytes,
        "local.retention.bytes": 1}, timeout=60)


def offsets(cluster: rep.Cluster, topic: str, partitions: int) -> dict[int, dict[int, int]]:
    """{partition: {-1, -4, -5: offset}} asked of each partition's leader."""
    md = cluster.metadata([topic]).topics[0]
    out = {}
    for p in md.partitions:
        leader = next(b for b in cluster.metadata([]).brokers if b.node_id == p.leader_id)
        raw = rawclient.RawClient(f"{leader.host}:{leader.port}")
        try:
            out[p.partition_index] = {}
            for ts in (-1, -4, -5):
                r = raw.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": topic, "partitions": [{"partition_index": p.partition_index, "current_leader_epoch": -1,
                                                    "timestamp": ts}]}]})
                part = r.topics[0].partitions[0]
                out[p.partition_index][ts] = int(part.offset) if part.error_code == 0 else None
        finally:
            raw.close()
    return out


def wait_tiered(cluster: rep.Cluster, topic: str, records: int, args) -> float:
    """Until every partition's leader has copied and deleted locally all but its active segment; returns the
    share of offsets in the remote tier."""
    per_segment = args.segment_bytes // (args.record_bytes + 70)

    def done():
        got = offsets(cluster, topic, args.partitions)
        if len(got) != args.partitions or sum(o[-1] or 0 for o in got.values()) < records:
            return None
        if all(o[-4] is not None and o[-5] is not None and o[-4] == o[-5] + 1 and o[-1] - o[-4] <= per_segment * 1.2
               for o in got.values()):
            return sum(o[-5] + 1 for o in got.values()) / sum(o[-1] for o in got.values())
        return None
    return wait_until(done, args.tier_timeout, f"{cluster.name}: {topic} tiered")


def load(cluster: rep.Cluster, tools, args) -> dict:
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    records = args.mb * MIB // args.record_bytes
    create_topic(cluster, topic, args)
    started = time.monotonic()
    p = tools.produce(cluster.bootstrap, topic, records, args.record_bytes, -1,
                      ("linger.ms=5", f"batch.size={256 * 1024}"))
    fraction = wait_tiered(cluster, topic, records, args)
    log(f"{cluster.name:8s} wrote {p['mb']:.0f} MB at {p['mb_s']:.1f} MB/s; {fraction:.1%} of it in the remote tier "
        f"{time.monotonic() - started:.0f} s after the first write")
    return {"topic": topic, "records": records, "produce_mb_s": round(p["mb_s"], 1), "remote_fraction": fraction}


def consume(cluster: rep.Cluster, tools, loaded: dict) -> dict:
    return rep.timed(cluster, tools.consume, cluster.bootstrap, loaded["topic"], loaded["records"], 120_000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=150, help="MiB of record values in the topic")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--segment-bytes", type=int, default=4 * MIB, help="at least 1 MiB (Kafka 4.4's minimum)")
    ap.add_argument("--warmup-reads", type=int, default=2, help="unmeasured reads of the topic per side first")
    ap.add_argument("--tier-timeout", type=float, default=600, help="seconds for the leaders to tier the topic")
    args = ap.parse_args(argv)
    missing = kp.missing_prerequisites()
    if missing:
        ap.error("cannot run Apache Kafka: missing " + ", ".join(missing))
    kp.resolve()

    started = time.monotonic()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="tierlog-tiered-cluster-"))
    server = None
    clusters: list[rep.Cluster] = []
    tools = rep.PerfTools(version=kp.KAFKA_VERSION)
    runs: list[dict] = []
    loaded: dict = {}
    try:
        log(f"load average {load_start:.2f}; ZooKeeper, three tierlog brokers and three Apache Kafka "
            f"{kp.KAFKA_VERSION} KRaft nodes in {work}")
        server = zk.start_zookeeper(work / "zookeeper")
        clusters.append(TierlogTiered(work / "tierlog", server))
        clusters.append(KafkaTiered(work / "kafka"))
        for c in clusters:
            loaded[c.name] = load(c, tools, args)
        for _ in range(args.warmup_reads):  # unmeasured: JIT, index caches, the tools' JVM
            for c in clusters:
                r = consume(c, tools, loaded[c.name])
                log(f"warm-up  {c.name:8s} {r['mb_s']:7.1f} MB/s")
        for i in range(args.runs):
            order = clusters if i % 2 == 0 else clusters[::-1]
            run = {}
            for c in order:
                r = run[c.name] = consume(c, tools, loaded[c.name])
                log(f"run {i + 1}    {c.name:8s} {r['mb_s']:7.1f} MB/s (join {r['join_ms']:.0f} ms), brokers' CPU "
                    f"{r['brokers_cpu_busy']:.2f} cores, {r.get('brokers_cpu_ms_per_mb', 0):.0f} ms/MB")
            runs.append(run)
    finally:
        tools.close()
        for c in clusters:
            c.stop()
        if server is not None:
            zk.stop_zookeeper(server)
        shutil.rmtree(work, ignore_errors=True)
    per_run = {n: {"mb_s": [r[n]["mb_s"] for r in runs], "brokers_cpu_ms_per_mb":
                   [r[n].get("brokers_cpu_ms_per_mb") for r in runs], "join_ms": [r[n]["join_ms"] for r in runs]}
               for n in ("tierlog", "kafka")}
    medians = {n: {k: rep._median(v) for k, v in figs.items()} for n, figs in per_run.items()}
    ratio = rep._ratio(medians["tierlog"]["mb_s"], medians["kafka"]["mb_s"], "mb_s")
    paired = rep._median([rep._ratio(t, k, "mb_s") for t, k in zip(per_run["tierlog"]["mb_s"],
                                                                  per_run["kafka"]["mb_s"])])
    # Beside the target: broker CPU per MB read, Kafka's over tierlog (all three brokers of each side), which
    # says how much each side's brokers worked when the consumer, not the brokers, sets the pace.
    cpu = rep._ratio(medians["kafka"]["brokers_cpu_ms_per_mb"], medians["tierlog"]["brokers_cpu_ms_per_mb"], "cpu")
    line = {"bench": "tiered_cluster", "date": time.strftime("%Y-%m-%d"), "ratio": ratio, "ratio_paired": paired,
            "brokers_cpu_per_mb_kafka_over_tierlog": cpu,
            "target": f">= {TARGET:g}", "target_met": ratio is not None and ratio >= TARGET, "medians": medians,
            "per_run": per_run,
            "topic": {n: {k: v for k, v in loaded[n].items() if k != "topic"} for n in loaded},
            "runs": args.runs, "warmup_reads": args.warmup_reads,
            "mb": args.mb, "record_bytes": args.record_bytes, "partitions": args.partitions,
            "segment_bytes": args.segment_bytes, "replication_factor": 3, "kafka_version": kp.KAFKA_VERSION,
            "consumer": f"Kafka {kp.KAFKA_VERSION} ConsumerPerformance, fetch.MB.sec",
            "tierlog_event_loop": vk.TierlogBroker.event_loop(),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "elapsed_s": round(time.monotonic() - started, 1)}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
