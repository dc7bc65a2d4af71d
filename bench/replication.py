"""Replication: three tierlog brokers against three Apache Kafka 3.9.1 brokers, both in ZooKeeper mode.

One invocation starts, on 127.0.0.1 (free ports, one temporary folder, every process stopped by its PID):

- one ZooKeeper (Debian's package, through tests/harness/zookeeper.py: 200 ms tick, no fsync);
- three tierlog brokers under one chroot (tests/harness/tierlog_cluster.py);
- three Apache Kafka 3.9.1 brokers in ZooKeeper mode under another chroot (tests/harness/apache_kafka.py,
  jars from Maven Central, cached outside the repository), each with kafka-server-start's JVM options
  (``-Xmx1g -Xms1g``, G1).

Kafka 3.9 is the last release with ZooKeeper mode, the closest peer of tierlog's ZooKeeper clusters. Both
clusters get the same settings (``SETTINGS``: a 6 s ZooKeeper session, ``__consumer_offsets`` with 6
partitions and RF 3, no automatic preferred-leader balancing) and every measured topic is created the
same way: ``--partitions`` (6) partitions, replication factor 3, ``min.insync.replicas`` (2), and deleted
after its step, so every step sees the same partitions on both sides. Every producer uses acks=all. Per run,
in each phase the two clusters take turns, the first alternating between runs; the page cache is synced
before each timed step:

- ``produce``: Kafka 3.9.1's ProducerPerformance (kafka-producer-perf-test.sh), ``--records`` records of
  ``--record-bytes`` (1 KiB) at ``--throughput -1`` into a fresh topic, ``--producer-props acks=all``,
  producer defaults otherwise (3.9: linger.ms=0, batch.size=16384, no compression): MB/s, and the p99 of
  that saturated run;
- ``consume``: ConsumerPerformance (kafka-consumer-perf-test.sh) reading that topic from the start with a
  new group: MB/s of the fetch phase (``fetch.MB.sec``, without the group join);
- ``latency``: ProducerPerformance at a fixed ``--latency-rate`` for ``--latency-records`` records,
  acks=all, into a fresh topic that first got one unmeasured second at that rate (the first writes to a
  new topic wait for its followers to start fetching, which is not the latency of a running topic): p99
  (and p50) from the tool's summary line (whole ms);
- ``failover``: a confluent-kafka producer (acks=all, linger.ms=0) writes ``--failover-rate`` records/s to
  one partition of a fresh topic, a partition whose leader is not the controller (so no controller
  election is timed); once it has been acknowledged for a second, that leader is killed with SIGKILL. The
  figure is the time from the kill to the first acknowledgement of a record produced after it. Beside it:
  when a surviving broker's Metadata first named a new leader (``election_s``), and how long the killed
  broker took, once restarted, until every partition's ISR was as large as before the kill
  (``rejoin_s``; the run waits for it, so every run starts with a whole cluster).

Kafka's perf tools run one after another in one long-lived JVM (kafka-run-class's options, ``-Xmx512m``).
Before the first measured step each cluster is warmed up, unmeasured, with rounds of ``--warmup-records``
produced and consumed until produce MB/s stops improving by 10% (two to ``--warmup-rounds`` rounds): on two
busy cores the C2 compiler of three fresh Kafka JVMs (and of the tools' JVM) needs minutes of CPU, and
until it is done Kafka runs at a fraction of its speed. Each step also records the brokers' CPU
time (/proc, all three brokers of the cluster). Every figure is the median over ``--runs`` runs (a run
whose failover did not finish counts as missing); MB is 2**20 bytes of record values. Prints ONE JSON line
with both clusters' medians, the ratios tierlog/Kafka (of the medians, and the median of each run's own
ratio) and the targets: produce >= 1.0, p99 <= 1.5, consume >= 1.0, failover <= 1.0.

``--profile`` then samples the busiest tierlog broker (the most CPU in the last measured produce step) with
py-spy (``pip install py-spy``) during one more produce step, not part of the figures; the collapsed stacks
and a summary of the top functions go to ``bench/results/replication_profile_*.txt``, and the summary's
path is printed.

    python bench/replication.py [--runs 3] [--records 100000] [--profile]
    python bench/replication.py --runs 1 --records 20000 --warmup-rounds 2   # a quick look
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from tests.harness import apache_kafka, rawclient  # noqa: E402
from tests.harness import zookeeper as zk  # noqa: E402
from tests.harness.tierlog_cluster import start_cluster, wait_until  # noqa: E402

from tierlog.errors import UnknownTopicOrPartitionError  # noqa: E402
from tierlog.protocol import ApiKey  # noqa: E402


def _load_vs_kafka():
    """bench/vs_kafka.py, for its JVM options, the perf tools' summary format and the py-spy helpers."""
    spec = importlib.util.spec_from_file_location("tierlog_bench_vs_kafka", ROOT / "bench" / "vs_kafka.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vk = _load_vs_kafka()
kp = apache_kafka.kafka_peer_module

RESULTS = ROOT / "bench" / "results"
MIB = 1024 * 1024
#: Given to both clusters: a killed broker's session expires after 6 s on both sides (the harness's value);
#: a small __consumer_offsets, replicated like the data; no preferred-leader balancing moving leaders
#: behind the benchmark's back (every run creates fresh topics, placed over the three brokers).
SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "6",
    "offsets.topic.replication.factor": "3",
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
}
REPLICATION_FACTOR = 3
UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.code
TARGETS = {"produce": 1.0, "consume": 1.0, "p99": 1.5, "failover": 1.0}


def log(msg: str) -> None:
    print(f"[replication {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- clusters


class Cluster:
    """Three brokers, ids 1..3; what the benchmark does to them, the same on both sides. ``self.cluster`` is
    the harness's cluster (running_ids, brokers with their bootstrap, stop)."""

    name = ""
    cluster = None

    def running_ids(self) -> list[int]:
        return self.cluster.running_ids()

    def address(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].bootstrap

    def pid(self, broker_id: int) -> int:
        raise NotImplementedError

    def kill(self, broker_id: int) -> None:
        raise NotImplementedError

    def restart(self, broker_id: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.cluster.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.running_ids())

    def metadata(self, topics: list[str] | None, avoid: int | None = None):
        """A Metadata answer from the first running broker other than ``avoid``."""
        live = [i for i in self.running_ids() if i != avoid]
        return rawclient.metadata(self.address(live[0]), topics)

    def cpu_seconds(self) -> dict[int, float]:
        return {i: vk.cpu_seconds(self.pid(i)) for i in self.running_ids()}


class TierlogCluster(Cluster):
    name = "tierlog"

    def __init__(self, work: Path, server, settings: dict | None = None, timeout: float = 60):
        self.cluster = start_cluster(work, server, brokers=3, settings=settings or SETTINGS,
                                     chroot=zk.unique_chroot("tierlog"), timeout=timeout)

    def pid(self, broker_id: int) -> int:
        return self.cluster.brokers[broker_id].proc.pid

    def kill(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        self.cluster.start([broker_id])  # on its previous port and log dir


class KafkaCluster(Cluster):
    name = "kafka"

    def __init__(self, work: Path, server):
        chroot = zk.unique_chroot("kafka39")
        self.cluster = apache_kafka.KafkaZkCluster(work, zk.connect_string(server, chroot), 3, SETTINGS)
        for b in self.cluster.brokers.values():
            b.jvm_opts = vk.KAFKA_JVM_OPTS  # kafka-server-start.sh's heap, as bench/vs_kafka.py gives 4.4
        self.cluster.start()

    def pid(self, broker_id: int) -> int:
        return self.cluster.brokers[broker_id].pid

    def kill(self, broker_id: int) -> None:
        self.cluster.kill(broker_id)

    def restart(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].start()  # on its previous port and log dir


def wait_formed(cluster: Cluster, timeout: float = 120) -> int:
    """Every running broker lists all three brokers and one controller; returns the controller's id."""
    def formed():
        seen = set()
        for i in cluster.running_ids():
            md = rawclient.metadata(cluster.address(i), [])
            if sorted(b.node_id for b in md.brokers) != [1, 2, 3] or md.controller_id not in (1, 2, 3):
                return None
            seen.add(md.controller_id)
        return seen.pop() if len(seen) == 1 else None
    return wait_until(formed, timeout, f"{cluster.name}: every broker seeing three brokers and one controller")


def isr_sizes(cluster: Cluster, avoid: int | None = None) -> dict[tuple[str, int], int]:
    """The ISR size of every partition of every topic, as one broker's Metadata shows it."""
    md = cluster.metadata(None, avoid)
    return {(t.name, p.partition_index): len(p.isr_nodes) for t in md.topics for p in t.partitions}


def create_topic(cluster: Cluster, name: str, partitions: int, min_isr: int) -> None:
    rawclient.create_topic_in_cluster(cluster.bootstrap, name, partitions, REPLICATION_FACTOR,
                                      {"min.insync.replicas": min_isr}, timeout=60)


def delete_topics(cluster: Cluster, names: list[str], timeout: float = 60) -> None:
    """DeleteTopics to the controller, then wait until no broker lists them: every step starts with the
    same partitions on both sides (tierlog's replica fetchers send full fetches, without Kafka's fetch
    sessions, so each partition a follower follows costs it CPU on every fetch, idle or not)."""
    def deleted():
        raw = rawclient.RawClient(rawclient.controller_address(cluster.bootstrap))
        try:
            resp = raw.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": names, "timeout_ms": int(timeout * 1000)})
        finally:
            raw.close()
        return all(r.error_code in (0, UNKNOWN_TOPIC_OR_PARTITION) for r in resp.responses)
    wait_until(deleted, timeout, f"{cluster.name}: DeleteTopics {names}")

    def gone():
        return all(t.error_code == UNKNOWN_TOPIC_OR_PARTITION
                   for i in cluster.running_ids() for t in rawclient.metadata(cluster.address(i), names).topics)
    wait_until(gone, timeout, f"{cluster.name}: topics {names} gone from every broker")


# ------------------------------------------------------------------------------------------- perf tools


class PerfTools:
    """Kafka 3.9.1's ProducerPerformance and ConsumerPerformance (or another release's, ``version``) in one
    warm JVM shared by both clusters."""

    def __init__(self, version: str = kp.ZK_KAFKA_VERSION):
        self.runner = kp.ToolRunner(jvm_opts=vk.PERF_JVM_OPTS, version=version)

    def run(self, main_class: str, *args, timeout: float = 300) -> str:
        result = self.runner.run(f"org.apache.kafka.tools.{main_class}", *map(str, args), timeout=timeout,
                                 check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{main_class} exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
                               f"stderr:\n{result.stderr[-3000:]}")
        return result.stdout

    def produce(self, bootstrap: str, topic: str, records: int, record_bytes: int, throughput: int,
                props: tuple[str, ...] = ()) -> dict:
        """``props``: more producer settings (``key=value``) after ``acks=all``."""
        out = self.run("ProducerPerformance", "--topic", topic, "--num-records", records, "--record-size",
                       record_bytes, "--throughput", throughput, "--producer-props",
                       f"bootstrap.servers={bootstrap}", "acks=all", *props)
        return vk.producer_summary(out, records, record_bytes)

    def consume(self, bootstrap: str, topic: str, records: int, timeout_ms: int = 30000) -> dict:
        out = self.run("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic, "--messages",
                       records, "--timeout", timeout_ms, "--group", f"perf-{uuid.uuid4().hex[:8]}")
        lines = [ln for ln in out.splitlines() if ln.strip()]
        header_at = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
        if header_at is None or header_at + 1 >= len(lines):
            raise RuntimeError(f"no ConsumerPerformance result in:\n{out[-3000:]}")
        row = dict(zip((k.strip() for k in lines[header_at].split(",")),
                       (v.strip() for v in lines[header_at + 1].split(","))))
        if int(row["data.consumed.in.nMsg"]) < records:
            raise RuntimeError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {records} records:\n"
                               f"{out[-3000:]}")
        return {"mb_s": float(row["fetch.MB.sec"]), "mb": float(row["data.consumed.in.MB"]),
                "join_ms": float(row["rebalance.time.ms"]), "fetch_ms": float(row["fetch.time.ms"])}

    def close(self) -> None:
        self.runner.close()


def timed(cluster: Cluster, step, *args) -> dict:
    """``step(*args)`` (a dict of figures) plus the cluster's CPU over it: ``brokers_cpu_busy`` (CPU
    seconds of all three brokers per wall second; 1.0 is one core), ``brokers_cpu_ms_per_mb`` and each
    broker's CPU seconds (``broker_cpu_s``)."""
    vk.sync()
    cpu0, t0 = cluster.cpu_seconds(), time.perf_counter()
    r = step(*args)
    cpu1, wall = cluster.cpu_seconds(), time.perf_counter() - t0
    per = {i: round(cpu1[i] - cpu0[i], 3) for i in cpu1 if i in cpu0}
    r["broker_cpu_s"] = per
    r["brokers_cpu_busy"] = round(sum(per.values()) / wall, 2)
    if r.get("mb"):
        r["brokers_cpu_ms_per_mb"] = round(1000 * sum(per.values()) / r["mb"], 1)
    return r


# --------------------------------------------------------------------------------------------- failover


class FailoverProducer:
    """confluent-kafka producing ``rate`` records/s to one partition on a thread of its own; remembers,
    per acknowledged record, when it was produced and when its acknowledgement arrived."""

    def __init__(self, bootstrap: str, topic: str, partition: int, rate: int):
        # log_level 2: librdkafka's lines about the killed broker's connection are expected here.
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                  "message.timeout.ms": 120_000, "enable.idempotence": False, "log_level": 2})
        self.topic, self.partition, self.interval = topic, partition, 1 / rate
        self.acked: list[tuple[float, float]] = []  # (produced, acknowledged), monotonic seconds
        self.failed = 0
        self.errors: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FailoverProducer:
        self._thread.start()
        return self

    def _delivered(self, produced: float, err, _msg) -> None:
        if err is None:
            self.acked.append((produced, time.monotonic()))
        else:
            self.failed += 1
            self.errors.add(str(err))

    def _run(self) -> None:
        value = b"x" * 100
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= due:
                self.producer.produce(self.topic, value, partition=self.partition,
                                      on_delivery=lambda err, msg, t=now: self._delivered(t, err, msg))
                due = max(due + self.interval, now)
            # Delivery callbacks run inside poll: their time is exact within the wait given here.
            self.producer.poll(min(max(due - time.monotonic(), 0), 0.002))
        if self.producer.flush(10):  # records still queued for a partition that never got a leader
            self.producer.purge()
            self.producer.poll(0)

    def first_ack_after(self, t: float) -> float | None:
        """When the first record produced at or after ``t`` was acknowledged."""
        return next((acked for produced, acked in list(self.acked) if produced >= t), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def failover(cluster: Cluster, topic: str, partitions: int, args) -> dict:
    """SIGKILL the leader of one partition (not the controller) under a producer writing to it; restart it
    and wait until every partition's ISR is back to its size before the kill."""
    controller = wait_formed(cluster)
    md = cluster.metadata([topic])
    leaders = {p.partition_index: p.leader_id for p in md.topics[0].partitions}
    partition = next(p for p in sorted(leaders) if leaders[p] not in (controller, -1))
    victim = leaders[partition]
    before = isr_sizes(cluster)
    producer = FailoverProducer(cluster.bootstrap, topic, partition, args.failover_rate).start()
    try:
        # A second of acknowledgements first: the producer knows the leader and the path is warm.
        wait_until(lambda: len(producer.acked) >= args.failover_rate and
                   producer.acked[-1][1] - producer.acked[0][1] >= 1.0, 60,
                   f"{cluster.name}: the failover producer acknowledged for a second")
        acked_before = len(producer.acked)
        killed = time.monotonic()
        cluster.kill(victim)
        election = None
        deadline = killed + args.failover_timeout
        while time.monotonic() < deadline:
            if election is None:
                try:
                    p = cluster.metadata([topic], avoid=victim).topics[0].partitions[partition]
                    if p.leader_id not in (victim, -1):
                        election = time.monotonic() - killed
                except Exception:  # noqa: BLE001 - a surviving broker busy with the change
                    pass
            first = producer.first_ack_after(killed)
            if first is not None and election is not None:
                break
            time.sleep(0.05)
        first = producer.first_ack_after(killed)
    finally:
        producer.stop()
    r = {"failover_s": None if first is None else round(first - killed, 3),
         "election_s": None if election is None else round(election, 3),
         "partition": partition, "victim": victim, "controller": controller,
         "isr_before": before[(topic, partition)], "acked": len(producer.acked),
         "acked_before_kill": acked_before, "failed": producer.failed, "errors": sorted(producer.errors)}
    restarted = time.monotonic()
    cluster.restart(victim)
    wait_formed(cluster)
    wait_until(lambda: all(isr_sizes(cluster).get(k, 0) >= n for k, n in before.items()), args.rejoin_timeout,
               f"{cluster.name}: broker {victim} back in every ISR it was in")
    r["rejoin_s"] = round(time.monotonic() - restarted, 1)
    return r


# -------------------------------------------------------------------------------------------------- runs


def warm_up(cluster: Cluster, tools: PerfTools, args) -> None:
    """Unmeasured produce and consume rounds until produce MB/s stops improving by 10% (at least two
    rounds, at most ``--warmup-rounds``): the JIT of three Kafka JVMs and of the tools' JVM takes minutes
    of CPU on two busy cores. Then a second at the latency rate."""
    best = None
    for i in range(args.warmup_rounds):
        topic = f"warmup-{uuid.uuid4().hex[:8]}"
        create_topic(cluster, topic, args.partitions, args.min_insync_replicas)
        r = tools.produce(cluster.bootstrap, topic, args.warmup_records, args.record_bytes, -1)
        tools.consume(cluster.bootstrap, topic, args.warmup_records)
        tools.produce(cluster.bootstrap, topic, args.latency_rate, args.record_bytes, args.latency_rate)
        delete_topics(cluster, [topic])
        log(f"warm-up {cluster.name:8s} round {i + 1}: produce {r['mb_s']:.1f} MB/s")
        if best is not None and r["mb_s"] < best * 1.1:
            break
        best = max(best or 0, r["mb_s"])



def one_run(run: int, clusters: list[Cluster], tools: PerfTools, args) -> dict:
    order = clusters if run % 2 == 0 else clusters[::-1]
    res: dict = {c.name: {} for c in clusters}
    topics = {}
    for c in order:
        topics[c.name] = f"repl-{uuid.uuid4().hex[:8]}"
        create_topic(c, topics[c.name], args.partitions, args.min_insync_replicas)
        r = res[c.name]["produce"] = timed(c, tools.produce, c.bootstrap, topics[c.name], args.records,
                                           args.record_bytes, -1)
        log(f"run {run + 1} {c.name:8s} produce  {r['mb_s']:7.1f} MB/s, p99 {r['p99_ms']:.0f} ms, "
            f"brokers' CPU {r['brokers_cpu_busy']:.2f} cores, {r['brokers_cpu_ms_per_mb']:.0f} ms/MB")
    for c in order:
        r = res[c.name]["consume"] = timed(c, tools.consume, c.bootstrap, topics[c.name], args.records)
        log(f"run {run + 1} {c.name:8s} consume  {r['mb_s']:7.1f} MB/s (join {r['join_ms']:.0f} ms), "
            f"brokers' CPU {r['brokers_cpu_busy']:.2f} cores")
    for c in order:
        delete_topics(c, [topics[c.name]])
    for c in order:
        topic = f"lat-{uuid.uuid4().hex[:8]}"
        create_topic(c, topic, args.partitions, args.min_insync_replicas)
        # A second of records first, unmeasured: a fresh topic's first acks=all writes wait for the followers'
        # fetchers to start (Kafka 3.9 took up to 1.2 s here, which made its p99 that of a topic's start).
        tools.produce(c.bootstrap, topic, args.latency_rate, args.record_bytes, args.latency_rate)
        r = res[c.name]["latency"] = timed(c, tools.produce, c.bootstrap, topic, args.latency_records,
                                           args.record_bytes, args.latency_rate)
        log(f"run {run + 1} {c.name:8s} latency  p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms at "
            f"{args.latency_rate} records/s, brokers' CPU {r['brokers_cpu_busy']:.2f} cores")
        delete_topics(c, [topic])
    for c in order:
        topic = f"failover-{uuid.uuid4().hex[:8]}"
        create_topic(c, topic, args.partitions, args.min_insync_replicas)
        r = res[c.name]["failover"] = failover(c, topic, args.partitions, args)
        log(f"run {run + 1} {c.name:8s} failover {r['failover_s']} s to the first ack (new leader named after "
            f"{r['election_s']} s; killed broker {r['victim']}, partition {r['partition']}, ISR {r['isr_before']}; "
            f"{r['failed']} records failed {r['errors']}); back in the ISRs {r['rejoin_s']} s after its restart")
        delete_topics(c, [topic])
    return res


FIGURES = {  # figure -> (step, field)
    "produce_mb_s": ("produce", "mb_s"),
    "p99_ms": ("latency", "p99_ms"),
    "p50_ms": ("latency", "p50_ms"),
    "consume_mb_s": ("consume", "mb_s"),
    "failover_s": ("failover", "failover_s"),
    "election_s": ("failover", "election_s"),
    "rejoin_s": ("failover", "rejoin_s"),
    "p99_ms_saturated": ("produce", "p99_ms"),
    "consume_join_ms": ("consume", "join_ms"),
    "brokers_cpu_busy_produce": ("produce", "brokers_cpu_busy"),
    "brokers_cpu_ms_per_mb_produce": ("produce", "brokers_cpu_ms_per_mb"),
    "brokers_cpu_ms_per_mb_consume": ("consume", "brokers_cpu_ms_per_mb"),
}
#: figure -> (ratio name, True when higher is better); ProducerPerformance's whole ms: a 0 ms p99 counts as 1.
RATIOS = {"produce": ("produce_mb_s", True), "p99": ("p99_ms", False), "consume": ("consume_mb_s", True),
          "failover": ("failover_s", False)}


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def _ratio(t: float | None, k: float | None, figure: str) -> float | None:
    if t is None or k is None:
        return None
    if figure == "p99_ms":
        t, k = max(t, 1), max(k, 1)
    return round(t / k, 2) if k else None


def aggregate(runs: list[dict]) -> dict:
    per_run = {name: {f: [r[name][step][field] for r in runs] for f, (step, field) in FIGURES.items()}
               for name in ("tierlog", "kafka")}
    medians = {name: {f: _median(v) for f, v in figs.items()} for name, figs in per_run.items()}
    ratios = {k: _ratio(medians["tierlog"][f], medians["kafka"][f], f) for k, (f, _) in RATIOS.items()}
    # Beside the ratio of the medians, the median of each run's own ratio: the two clusters of one run ran
    # back to back, so it is less sensitive to the machine's load changing between runs.
    paired = {k: _median([_ratio(t, kk, f) for t, kk in zip(per_run["tierlog"][f], per_run["kafka"][f])])
              for k, (f, _) in RATIOS.items()}
    met = {k: ratios[k] is not None and (ratios[k] >= TARGETS[k] if higher else ratios[k] <= TARGETS[k])
           for k, (_, higher) in RATIOS.items()}
    targets = {k: (">= " if higher else "<= ") + f"{TARGETS[k]:g}" for k, (_, higher) in RATIOS.items()}
    return {"medians": medians, "ratios": ratios, "ratios_paired": paired, "targets": targets,
            "targets_met": met, "per_run": per_run}


# --------------------------------------------------------------------------------------------- profiling


def profile_produce(cluster: TierlogCluster, tools: PerfTools, busiest: int, args) -> dict:
    """One more produce step against tierlog with py-spy on broker ``busiest``; the top functions go to a
    text file."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stacks = RESULTS / "replication_profile_produce.txt"
    summary_path = RESULTS / "replication_profile_top.txt"
    topic = f"prof-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, args.partitions, args.min_insync_replicas)
    vk.sync()
    with vk.sampled(cluster.pid(busiest), stacks):
        r = timed(cluster, tools.produce, cluster.bootstrap, topic, args.records, args.record_bytes, -1)
    s = vk.summarize_profile(stacks, top=25)
    lines = [f"py-spy record --rate 100 (blocking) on tierlog broker {busiest}, the busiest in the last measured "
             f"produce step, during one more produce step ({args.records:,} records of {args.record_bytes} bytes, "
             f"{args.partitions} partitions, RF {REPLICATION_FACTOR}, min.insync.replicas "
             f"{args.min_insync_replicas}, acks=all), {time.strftime('%Y-%m-%d %H:%M')}",
             f"while sampled: {r['mb_s']:.1f} MB/s, p99 {r['p99_ms']:.0f} ms; CPU seconds per broker "
             f"{r['broker_cpu_s']}; {s['samples']} samples; collapsed stacks in {stacks.relative_to(ROOT)}", "",
             "where the broker's CPU goes:"]
    lines += [f"  {share:5.1f}%  {label}" for label, share in s["categories"]]
    for title, key in (("self (the frame on top of the stack)", "self"), ("self, by line", "self_lines"),
                       ("inclusive (anywhere in the stack; event loop and start-up frames left out)", "inclusive")):
        lines += ["", f"top functions, {title}:"]
        lines += [f"  {share:5.1f}%  {frame}" for frame, share in s[key]]
    summary_path.write_text("\n".join(lines) + "\n")
    return {"broker": busiest, "summary": str(summary_path.relative_to(ROOT)),
            "collapsed_stacks": str(stacks.relative_to(ROOT)), "samples": s["samples"],
            "mb_s_while_sampled": round(r["mb_s"], 1), "top_self": s["self"][:8]}


# -------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000, help="records per produce step")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--min-insync-replicas", type=int, default=2)
    ap.add_argument("--latency-rate", type=int, default=1000, help="records/s of the latency step")
    ap.add_argument("--latency-records", type=int, default=5000, help="records of the latency step")
    ap.add_argument("--warmup-records", type=int, default=30_000, help="records per warm-up round")
    ap.add_argument("--warmup-rounds", type=int, default=8, help="at most this many warm-up rounds per cluster")
    ap.add_argument("--failover-rate", type=int, default=200, help="records/s of the failover producer")
    ap.add_argument("--failover-timeout", type=float, default=60, help="seconds to wait for the first ack")
    ap.add_argument("--rejoin-timeout", type=float, default=180,
                    help="seconds for a restarted broker to be back in every ISR")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the busiest tierlog broker during one more produce step")
    args = ap.parse_args(argv)
    if args.profile and vk.py_spy() is None:
        ap.error("--profile needs py-spy on PATH (pip install py-spy)")
    missing = kp.missing_prerequisites(need_maven=not kp.zk_resolved())
    if missing:
        ap.error("cannot run Apache Kafka: missing " + ", ".join(missing))
    kp.resolve_zk()

    started = time.monotonic()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="tierlog-replication-"))
    server = None
    clusters: list[Cluster] = []
    tools = PerfTools()
    result: dict = {}
    try:
        log(f"load average {load_start:.2f}; ZooKeeper, three tierlog brokers and three Apache Kafka "
            f"{kp.ZK_KAFKA_VERSION} brokers in {work}")
        server = zk.start_zookeeper(work / "zookeeper")
        # One after the other: three JVMs and three Python brokers starting at once on two cores could
        # stall one of them past its start timeout.
        clusters.append(TierlogCluster(work / "tierlog", server))  # tierlog goes first in run 1
        clusters.append(KafkaCluster(work / "kafka", server))
        for c in clusters:
            log(f"{c.name}: controller {wait_formed(c)}, brokers "
                + ", ".join(f"{i} on {c.address(i)} (pid {c.pid(i)})" for i in c.running_ids()))
        for c in clusters:
            warm_up(c, tools, args)
        runs = [one_run(i, clusters, tools, args) for i in range(args.runs)]
        result = aggregate(runs)
        if args.profile:
            tierlog = next(c for c in clusters if c.name == "tierlog")
            cpu = runs[-1]["tierlog"]["produce"]["broker_cpu_s"]
            busiest = max(cpu, key=cpu.get)
            result["profile"] = profile_produce(tierlog, tools, busiest, args)
            log(f"profile of tierlog broker {busiest}: {result['profile']['summary']}; top self: "
                + ", ".join(f"{f} {s}%" for f, s in result["profile"]["top_self"][:5]))
    finally:
        tools.close()
        for c in clusters:
            c.stop()
        if server is not None:
            zk.stop_zookeeper(server)
        shutil.rmtree(work, ignore_errors=True)
    line = {"bench": "replication", "date": time.strftime("%Y-%m-%d"), "ratios": result["ratios"],
            "ratios_paired": result["ratios_paired"], "targets": result["targets"],
            "targets_met": result["targets_met"], "medians": result["medians"], "per_run": result["per_run"],
            "runs": args.runs, "records": args.records, "record_bytes": args.record_bytes,
            "partitions": args.partitions, "replication_factor": REPLICATION_FACTOR,
            "min_insync_replicas": args.min_insync_replicas, "latency_rate": args.latency_rate,
            "kafka_version": kp.ZK_KAFKA_VERSION, "tierlog_event_loop": vk.TierlogBroker.event_loop(),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "elapsed_s": round(time.monotonic() - started, 1)}
    if "profile" in result:
        line["profile"] = result["profile"]
    print(json.dumps(line), flush=True)
    if "profile" in result:
        print(f"profile: {ROOT / result['profile']['summary']}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
