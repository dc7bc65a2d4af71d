"""Consume throughput from remote storage against local storage, for the same data, through confluent-kafka.

For each target (a broker with tiered storage), the same records go to two topics of ``--partitions``
partitions:

- ``remote``: tiered (``remote.storage.enable=true``), small local retention, so once copied only the
  tail stays local and a consumer from the beginning reads (almost) everything from remote storage;
- ``local``: the same settings without tiering, read from local segments.

Each run first makes the remote side cold (tierlog: the broker is stopped, its
``remote-log-index-cache`` folder deleted, the broker started again and the remote metadata of the
partitions loaded), reads a small third topic (``warmup``, never tiered) so the broker's first-request
costs (its Fetch encoders are built on first use) fall on neither side, then reads both topics from
the beginning with an assigned confluent-kafka consumer, in alternating order between runs, and times
each from the first ``consume`` call to the last record: MB/s of record values (2**20 bytes). Both sides
read files the operating system has in its page cache (the filesystem backend stores objects on the
same disk), so the figure compares the read paths, not disks. The Python consumer is the bottleneck
at about 200 MB/s; ``--consumer kcat`` (librdkafka without Python, timed from start to exit; use
``--mb 1024`` so start-up counts little) lets the brokers set the pace.

Prints ONE JSON line with the medians over ``--runs`` runs, per target, and ``remote / local``.
Target (issue 6): ``remote_local_ratio >= 0.8``.

    python bench/tiered.py [--runs 3] [--mb 256] [--partitions 2] [--record-bytes 1024] [--target tierlog,kafka]
                           [--consumer confluent|kcat]
    python bench/tiered.py --profile          # also py-spy of the broker during one more remote read

Targets are entries of ``TARGETS``: name -> function(args) returning a context manager that yields a
:class:`Target` (bootstrap address, topic settings, and ``make_cold()``). A comparison with Apache
Kafka 4.4 with LocalTieredStorage is ``TARGETS["kafka"]``; ``--target tierlog,kafka`` runs both and adds
``remote_vs_kafka_remote`` (tierlog's remote MB/s over Kafka's; target >= 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
RECORD_BYTES = 1024
SEGMENT_BYTES = 16 * MIB
LOCAL_RETENTION_BYTES = 1


@dataclass
class Target:
    bootstrap: str
    make_cold: Callable[[], None]  # before each run: the remote read path as after a restart
    remote_topic_config: dict[str, str]
    local_topic_config: dict[str, str]
    wait_tiered: Callable[[str, int], None]  # (topic, partitions): until only the tail is local
    profile_pid: Callable[[], int] | None = None
    notes: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- tierlog


class _TierlogProcess:
    """``tierlog broker`` as a subprocess; stopped (and restarted) by its PID."""

    def __init__(self, folder: Path, settings: dict[str, str]):
        self.folder = folder
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.output: list[str] = []
        self.metrics_url: str | None = None

    def start(self, timeout: float = 60) -> None:
        settings = {**self.settings, "listeners": f"PLAINTEXT://127.0.0.1:{self.port or 0}"}
        args = [sys.executable, "-m", "tierlog", "broker"]
        for k, v in settings.items():
            args += ["-o", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(args, cwd=self.folder, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        ready = False
        for line in self.proc.stdout:
            self.output.append(line)
            if "Metrics on " in line:
                self.metrics_url = line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
            if line.startswith("tierlog broker ready on "):
                self.port = int(line.rsplit(":", 1)[1])
                ready = True
                break
            if time.monotonic() > deadline:
                break
        if not ready:
            self.stop()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-50:]))
        threading.Thread(target=lambda: self.output.extend(self.proc.stdout), daemon=True).start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def status(self, topic: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.metrics_url}/v1/tier/status?topic={topic}") as r:
            return json.load(r)["partitions"]


@contextlib.contextmanager
def tierlog_target(args) -> Iterator[Target]:
    """A tierlog broker with the filesystem backend and the topic-based metadata manager (the remote
    metadata must survive the restarts that make the index cache cold)."""
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-tiered-") as tmp:
        folder = Path(tmp)
        b = _TierlogProcess(folder, {
            "log.dirs": str(folder / "logs"),
            "remote.log.storage.system.enable": "true",
            "rsm.config.dir": str(folder / "remote"),
            "rsm.config.fsync.enable": "false",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "metrics.port": "0",
            "group.initial.rebalance.delay.ms": "0",
        })
        b.start()

        def wait_tiered(topic: str, partitions: int) -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                parts = b.status(topic)
                if len(parts) == partitions and all(
                        p["ready"] and p["copy_lag_segments"] == 0 and p["local_segments"] <= 2 for p in parts):
                    return
                time.sleep(0.2)
            raise RuntimeError(f"{topic} not tiered in time: {b.status(topic)}")

        def make_cold() -> None:
            b.stop()
            shutil.rmtree(folder / "logs" / "remote-log-index-cache", ignore_errors=True)
            b.start()
            deadline = time.monotonic() + 120
            while not all(p["ready"] for p in b.status("remote")):  # metadata loaded (bench/restart.py times it)
                if time.monotonic() > deadline:
                    raise RuntimeError("remote metadata did not load")
                time.sleep(0.05)

        try:
            yield Target(
                bootstrap=f"127.0.0.1:{b.port}", make_cold=make_cold, wait_tiered=wait_tiered,
                remote_topic_config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                                     "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
                                     "file.delete.delay.ms": "0"},
                local_topic_config={"segment.bytes": str(SEGMENT_BYTES)},
                profile_pid=lambda: b.proc.pid,
                notes={"backend": "filesystem", "metadata": "topic", "index cache": "deleted + restart per run"})
        finally:
            b.stop()


# --------------------------------------------------------------------------------------------- kafka


def _kafka_peer():
    import importlib.util
    spec = importlib.util.spec_from_file_location("kafka_peer", ROOT / "scripts" / "kafka_peer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_peer"] = module
    spec.loader.exec_module(module)
    return module


def _raw_client(bootstrap: str):
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "src"))
    from tests.harness.rawclient import RawClient
    return RawClient(bootstrap, timeout=30)


def _kafka_earliest_local(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from tierlog.protocol import ApiKey
    raw = _raw_client(bootstrap)
    try:
        r = raw.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": -4} for p in range(partitions)]}]})
        return [p.offset for p in r.topics[0].partitions]
    finally:
        raw.close()


def _kafka_remote_read_works(bootstrap: str, topic: str) -> bool:
    from tierlog.protocol import ApiKey
    raw = _raw_client(bootstrap)
    try:
        r = raw.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1,
                                           "topics": [{"topic": topic, "partitions": [
                                               {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}]}]})
        p = r.responses[0].partitions[0]
        return p.error_code == 0 and bool(p.records)
    except OSError:
        return False
    finally:
        raw.close()


@contextlib.contextmanager
def kafka_target(args) -> Iterator[Target]:
    """Apache Kafka 4.4 with LocalTieredStorage (scripts/kafka_peer.py): the same topic settings, its own
    remote index cache deleted and the broker restarted before each run."""
    kp = _kafka_peer()
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-kafka-tiered-") as tmp:
        server = kp.KafkaServer(Path(tmp), tiered=True, overrides={
            "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200"},
            jvm_opts=["-Xmx1g", "-Xms1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"])
        server.start()
        target = Target(
            bootstrap=server.bootstrap, make_cold=lambda: None, wait_tiered=lambda t, n: None,
            remote_topic_config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                                 "local.retention.bytes": str(LOCAL_RETENTION_BYTES), "file.delete.delay.ms": "0"},
            local_topic_config={"segment.bytes": str(SEGMENT_BYTES)},
            profile_pid=None, notes={"backend": "LocalTieredStorage", "metadata": "topic",
                                     "index cache": "deleted + restart per run", "version": "Apache Kafka 4.4.0"})

        def local_segments(topic: str, partition: int) -> int:
            return len(list((server.log_dir / f"{topic}-{partition}").glob("*.log")))

        def wait_tiered(topic: str, partitions: int) -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if all(o > 0 for o in _kafka_earliest_local(target.bootstrap, topic, partitions)) and all(
                        local_segments(topic, p) <= 2 for p in range(partitions)):
                    return
                time.sleep(0.5)
            raise RuntimeError(f"{topic} not tiered in time on Kafka")

        def make_cold() -> None:
            server.stop()
            shutil.rmtree(server.log_dir / "remote-log-index-cache", ignore_errors=True)
            server.start()
            target.bootstrap = server.bootstrap
            deadline = time.monotonic() + 120
            while not _kafka_remote_read_works(target.bootstrap, "remote"):  # its remote metadata is loaded
                if time.monotonic() > deadline:
                    raise RuntimeError("Kafka's remote metadata did not load")
                time.sleep(0.2)

        target.wait_tiered, target.make_cold = wait_tiered, make_cold
        target.profile_pid = lambda: server.proc.pid
        try:
            yield target
        finally:
            server.stop()


TARGETS: dict[str, Callable] = {
    "tierlog": tierlog_target,
    "kafka": kafka_target,
}


# -------------------------------------------------------------------------------------- measurements


def create_topics(bootstrap: str, topics: dict[str, dict[str, str]], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1, config=c) for t, c in topics.items()])
    for f in futures.values():
        f.result(30)


def produce(bootstrap: str, topics: list[str], mb: int, partitions: int, record_bytes: int) -> int:
    """The same ``mb`` MiB of random records into each topic, spread evenly; returns records per topic."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                  "compression.type": "none", "queue.buffering.max.kbytes": 1_048_576})
    values = [os.urandom(record_bytes) for _ in range(512)]
    records = mb * MIB // record_bytes
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)
    for topic in topics:
        for i in range(records):
            while True:
                try:
                    p.produce(topic, values[i % len(values)], partition=i % partitions, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 0:
                p.poll(0)
    if p.flush(300) or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return records


def consume(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """MiB/s of record values reading ``topic`` from the beginning, first consume() to last record."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = size = 0
    deadline = time.monotonic() + 600
    t0 = time.perf_counter()
    try:
        while got < records:
            for m in c.consume(10_000, timeout=1):
                if m.error() is not None:
                    raise RuntimeError(f"consume {topic}: {m.error()}")
                got += 1
                size += len(m.value())
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume {topic}: {got} of {records} records in time")
        dt = time.perf_counter() - t0
    finally:
        c.close()
    return size / MIB / dt


def consume_kcat(bootstrap: str, topic: str, partitions: int, records: int, record_bytes: int) -> float:
    """The same read with kcat (librdkafka, like confluent-kafka, but no Python per record): the
    broker, not the consumer, sets the pace. Each record's offset is printed and the lines counted.
    ``-e`` ends at an empty fetch, which both brokers hold for ``fetch.wait.max.ms`` (librdkafka: 500 ms,
    half a 256 MiB read at these rates), so that wait is 10 ms here; while records are behind, the
    setting changes nothing (the broker answers at once)."""
    t0 = time.perf_counter()
    proc = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                           "-f", "%o\n", "-X", "enable.auto.commit=false", "-X", "fetch.wait.max.ms=10"],
                          capture_output=True, timeout=600)
    dt = time.perf_counter() - t0
    got = proc.stdout.count(b"\n")
    if proc.returncode != 0 or got != records:
        raise RuntimeError(f"kcat {topic}: {got} of {records} records, rc {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace')[-500:]}")
    return got * record_bytes / MIB / dt


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen | None:
    if shutil.which("py-spy") is None:
        print("py-spy not installed (pip install py-spy); no profile", file=sys.stderr)
        return None
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
                             "--duration", str(int(seconds)), "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_target(name: str, args) -> dict:
    with TARGETS[name](args) as t:
        topics = {"remote": t.remote_topic_config, "local": t.local_topic_config}
        create_topics(t.bootstrap, {**topics, "warmup": t.local_topic_config}, args.partitions)
        records = produce(t.bootstrap, list(topics), args.mb, args.partitions, args.record_bytes)
        warmup = produce(t.bootstrap, ["warmup"], 8, args.partitions, args.record_bytes)
        t.wait_tiered("remote", args.partitions)
        remote, local = [], []

        def read(bootstrap: str, topic: str, n: int) -> float:
            if args.consumer == "kcat":
                return consume_kcat(bootstrap, topic, args.partitions, n, args.record_bytes)
            return consume(bootstrap, topic, args.partitions, n)
        for run in range(args.runs):
            t.make_cold()
            bootstrap = t.bootstrap
            consume(bootstrap, "warmup", args.partitions, warmup)
            order = ["remote", "local"] if run % 2 == 0 else ["local", "remote"]
            for topic in order:
                (remote if topic == "remote" else local).append(read(bootstrap, topic, records))
        result = {"remote_mb_s": round(statistics.median(remote), 1), "local_mb_s": round(statistics.median(local), 1),
                  "remote_runs": [round(x, 1) for x in remote], "local_runs": [round(x, 1) for x in local],
                  "remote_local_ratio": round(statistics.median(remote) / statistics.median(local), 2),
                  "paired_ratios": [round(r / lo, 2) for r, lo in zip(remote, local)], **t.notes}
        if args.profile and t.profile_pid is not None:
            t.make_cold()
            consume(t.bootstrap, "warmup", args.partitions, warmup)
            out = ROOT / "bench" / "results" / f"tiered_profile_{name}.txt"
            spy = profile(t.profile_pid(), 120, out)
            read(t.bootstrap, "remote", records)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
                result["profile"] = str(out.relative_to(ROOT))
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=256, help="MiB of record values per topic")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--record-bytes", type=int, default=RECORD_BYTES,
                    help="value size; large records make the broker, not the Python consumer, the bottleneck")
    ap.add_argument("--target", default="tierlog", help=f"comma-separated: {', '.join(TARGETS)}")
    ap.add_argument("--consumer", choices=("confluent", "kcat"), default="confluent",
                    help="confluent: confluent-kafka in Python (the consumer caps 1 KiB reads); kcat: librdkafka "
                         "without Python, so the brokers' read paths set the pace")
    ap.add_argument("--profile", action="store_true", help="py-spy the broker during one more remote read")
    args = ap.parse_args()
    out = {"bench": "tiered", "runs": args.runs, "mb": args.mb, "partitions": args.partitions,
           "consumer": args.consumer,
           "record_bytes": args.record_bytes, "segment_bytes": SEGMENT_BYTES, "targets": {}}
    for name in args.target.split(","):
        out["targets"][name] = run_target(name.strip(), args)
    tl, kafka = out["targets"].get("tierlog"), out["targets"].get("kafka")
    if tl is not None:
        out["remote_local_ratio"] = tl["remote_local_ratio"]
        out["target_met"] = tl["remote_local_ratio"] >= 0.8
    if tl is not None and kafka is not None:
        # Issue 6: tierlog's remote catch-up at least twice Apache Kafka's (LocalTieredStorage).
        out["remote_vs_kafka_remote"] = round(tl["remote_mb_s"] / kafka["remote_mb_s"], 2)
        out["target_vs_kafka_met"] = out["remote_vs_kafka_remote"] >= 2.0
        out["target_met"] = out["target_met"] and out["target_vs_kafka_met"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
