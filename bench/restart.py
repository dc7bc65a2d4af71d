"""Restart benchmark: time from ``tierlog broker`` start to serving a remote read, with 100,000 remote
segments recorded in ``__remote_log_metadata``, restarting from the metadata snapshot (tierlog) and
with a full replay of the topic (what Kafka does), in the same run.

Set-up (once): a broker with tiered storage and a one-partition metadata topic (so every event is on
the path to readiness); topic ``served`` gets real data, tiered to the filesystem store; topic ``bulk``
gets ``--segments`` synthetic remote segments (COPY_SEGMENT_STARTED + FINISHED events written straight
to the metadata topic, in Kafka's format, as a long-lived cluster accumulates them). Then, per run:
stop the broker cleanly (which writes the snapshot), start it again and time until a Fetch at offset 0
of ``served`` returns records from the remote tier; once as is ("snapshot"), once after deleting the
snapshot folder ("replay"). Prints one JSON line with the medians of ``--runs`` runs.

    python bench/restart.py [--segments 100000] [--runs 3]

Target: < 2 s to serve remote reads with the snapshot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from tests.harness.rawclient import RawClient  # noqa: E402

from tierlog.protocol import ApiKey  # noqa: E402
from tierlog.tiered.metadata import (  # noqa: E402
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm.serde import serialize  # noqa: E402

TIERED = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
          "file.delete.delay.ms": "0"}


def broker_args(work: Path, port: int) -> list[str]:
    overrides = {
        "log.dirs": str(work / "logs"), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "remote.log.storage.system.enable": "true", "rsm.config.dir": str(work / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "metrics.port": "0", "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
    }
    args = [sys.executable, "-m", "tierlog", "broker"]
    for k, v in overrides.items():
        args += ["-o", f"{k}={v}"]
    return args


class Broker:
    def __init__(self, work: Path, port: int):
        self.work, self.port = work, port
        self.proc: subprocess.Popen | None = None
        self.metrics = None

    def start(self) -> float:
        """Start; returns the time.monotonic() of the launch."""
        t0 = time.monotonic()
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(broker_args(self.work, self.port), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        for line in self.proc.stdout:
            if "Metrics on " in line:
                self.metrics = line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
            if line.startswith("tierlog broker ready on"):
                break
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        return t0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def status(self, topic: str) -> list[dict]:
        return json.load(urllib.request.urlopen(self.metrics + f"/v1/tier/status?topic={topic}",
                                                timeout=120))["partitions"]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 600, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - the broker may still be starting
            value = None
        if value:
            return value
        time.sleep(every)
    raise TimeoutError("condition not met")


def remote_read_served(b: Broker) -> bool:
    client = RawClient(b.bootstrap, timeout=30)
    try:
        r = client.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "served", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 1 << 20}]}]})
        part = r.responses[0].partitions[0]
        return part.error_code == 0 and bool(part.records)
    finally:
        client.close()


def set_up(b: Broker, segments: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("served", 1, 1, topic_configs=TIERED),
                         NewTopic("bulk", 1, 1, topic_configs={"remote.storage.enable": "true",
                                                               "retention.ms": "-1", "retention.bytes": "-1"})])
    described = admin.describe_topics(["bulk"])
    admin.close()
    bulk_id = uuid.UUID(described[0]["topic_id"]) if isinstance(described[0]["topic_id"], str) \
        else described[0]["topic_id"]
    small = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 2000})
    for _ in range(2000):
        small.produce("served", os.urandom(100))
    small.produce("bulk", b"one record in leader epoch 0")
    small.flush(60)
    # Offset 0 of "served" must be in remote storage only, so the timed read is a remote one.
    wait_for(lambda: (s := b.status("served")) and s[0]["ready"] and s[0]["copy_lag_segments"] == 0
             and s[0]["local_log_start_offset"] > 0)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    # Synthetic history for "bulk": segments of 10 offsets, in leader epoch 0, each STARTED then FINISHED.
    tp = TopicIdPartition(bulk_id, "bulk", 0)
    now = int(time.time() * 1000)
    for i in range(segments):
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), i * 10, i * 10 + 9, now, 1, now, 1000,
                                      {0: i * 10})
        for event in (md, RemoteLogSegmentMetadataUpdate(md.segment_id, now, None,
                                                         RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)):
            while True:
                try:
                    p.produce("__remote_log_metadata", serialize(event), partition=0)
                    break
                except BufferError:  # the producer's queue is full: let it drain
                    p.poll(0.1)
    p.flush(120)
    wait_for(lambda: (s := b.status("bulk")) and s[0]["ready"] and s[0]["remote_segments"] == segments)


def measure(b: Broker, snapshot: bool) -> float:
    b.stop()
    if not snapshot:
        shutil.rmtree(b.work / "logs" / "__remote_log_metadata-snapshots", ignore_errors=True)
    t0 = b.start()
    wait_for(lambda: remote_read_served(b), every=0.02)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tierlog-restart-", dir=opts.dir))
    b = Broker(work, free_port())
    try:
        b.start()
        t0 = time.monotonic()
        set_up(b, opts.segments)
        setup_s = time.monotonic() - t0
        snap, replay = [], []
        snapshot_files = 0
        for _ in range(opts.runs):
            replay.append(measure(b, snapshot=False))
            snap.append(measure(b, snapshot=True))
            folder = work / "logs" / "__remote_log_metadata-snapshots"
            snapshot_files = sum(f.stat().st_size for f in folder.iterdir()) if folder.exists() else 0
        b.stop()
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "bench": "restart", "remote_segments": opts.segments, "metadata_events": 2 * opts.segments,
        "runs": opts.runs, "setup_s": round(setup_s, 1),
        "snapshot_to_remote_read_s": round(statistics.median(snap), 3),
        "replay_to_remote_read_s": round(statistics.median(replay), 3),
        "snapshot_runs_s": [round(x, 3) for x in snap], "replay_runs_s": [round(x, 3) for x in replay],
        "speedup": round(statistics.median(replay) / statistics.median(snap), 2),
        "snapshot_bytes": snapshot_files, "target_snapshot_s": 2.0,
        "target_met": statistics.median(snap) < 2.0,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
