"""A fresh install's first start: install size, time to "ready", produce MB/s just after "ready" against a
minute later, and the broker's memory, for tierlog installs (venvs) and, beside them, Apache Kafka 4.4.

For each ``--venv`` (a venv with ``pip install <tree>`` done, no extras, not editable) and each of ``--runs``
runs: caches a start writes under the install (numba's ``__pycache__/*.nbi|*.nbc`` of an older tierlog) are
deleted and HOME is a new empty folder, so every run is a first start; the broker starts on 127.0.0.1 with a
new log dir; confluent-kafka (this interpreter's) creates a topic and produces 16 KiB records as fast as the
broker takes them for ``--window`` seconds from "ready", then again ``--later`` seconds after "ready". Kafka
(``--kafka``, the jars scripts/kafka_peer.py caches, the heap of kafka-server-start.sh) gets the same load.
Medians over the runs, one JSON line:

    python bench/first_start.py --venv /tmp/new --venv /tmp/old [--kafka] [--runs 3] [--later 60]

Per install ``<name>_``: ``venv_mb`` (du of the venv), ``ready_s`` (process start to "ready"),
``first_mb_s`` / ``later_mb_s`` and their ratio ``first_ratio``, ``rss_ready_mib`` / ``rss_loaded_mib``, and for
a build that compiles its kernels at start (numba) ``compiled_after_ready_s``, when it logged it had.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
VALUE = os.urandom(16 * 1024)
# kafka-server-start.sh's heap and kafka-run-class.sh's GC options (bench/vs_kafka.py gives Kafka the same)
KAFKA_JVM_OPTS = ["-Xmx1g", "-Xms1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path.resolve())], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1]) / 1024


def produce_for(bootstrap: str, topic: str, seconds: float) -> float:
    """MB/s of 16 KiB records acknowledged within ``seconds`` of producing as fast as the broker takes them."""
    acked = [0]
    start = time.monotonic()
    stop = start + seconds

    def delivered(err, msg) -> None:
        if err is None and time.monotonic() <= stop:
            acked[0] += len(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
                  "queue.buffering.max.kbytes": 64 << 10})
    while time.monotonic() < stop:
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.005)
        p.poll(0)
    p.flush(60)
    return acked[0] / seconds / 1e6


def create_topic(bootstrap: str) -> str:
    topic = f"first-start-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a dropped client fails its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    return topic


def load(bootstrap: str, pid: int, ready_at: float, args) -> dict:
    topic = create_topic(bootstrap)
    out = {"rss_ready_mib": rss_mib(pid), "first_mb_s": produce_for(bootstrap, topic, args.window)}
    time.sleep(max(0.0, ready_at + args.later - time.monotonic()))
    out["later_mb_s"] = produce_for(bootstrap, topic, args.window)
    out["rss_loaded_mib"] = rss_mib(pid)
    return out


def forget_caches(venv: Path) -> None:
    """What an older tierlog's first start left under the install (numba's cache), so each run starts cold."""
    for path in venv.glob("lib/python*/site-packages/tierlog/**/__pycache__/*.nb[ic]"):
        path.unlink()


def drain(proc: subprocess.Popen, ready_at: float, compiled: list[float]) -> None:
    for line in proc.stdout:
        if "Record validator compiled in" in line:
            compiled.append(time.monotonic() - ready_at)


def tierlog_run(venv: Path, args) -> dict:
    forget_caches(venv)
    work = Path(tempfile.mkdtemp(prefix="first-start-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(work / "home")
    (work / "home").mkdir()
    started = time.monotonic()
    proc = subprocess.Popen([str(venv / "bin" / "python"), "-m", "tierlog", "broker", "-o", f"log.dirs={work}/logs",
                             "-o", "listeners=PLAINTEXT://127.0.0.1:0"], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        for line in proc.stdout:
            if line.startswith("tierlog broker ready on "):
                port = int(line.rsplit(":", 1)[1])
                break
        if port is None:
            raise RuntimeError(f"{venv}: the broker did not start")
        ready_at = time.monotonic()
        compiled = []  # when a build that compiles its kernels at start (numba) said it had, after ready
        threading.Thread(target=drain, args=(proc, ready_at, compiled), daemon=True).start()
        out = {"ready_s": ready_at - started, **load(f"127.0.0.1:{port}", proc.pid, ready_at, args)}
        if compiled:
            out["compiled_after_ready_s"] = compiled[-1]
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def kafka_run(kp, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="first-start-kafka-"))
    server = kp.KafkaServer(work, jvm_opts=KAFKA_JVM_OPTS)
    try:
        server.start()
        ready_at = time.monotonic()
        return {"ready_s": server.start_seconds, **load(server.bootstrap, server.pid, ready_at, args)}
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def summary(runs: list[dict]) -> dict:
    out = {k: round(statistics.median(r[k] for r in runs if k in r), 2) for k in {k for r in runs for k in r}}
    out["first_ratio"] = round(statistics.median(r["first_mb_s"] / r["later_mb_s"] for r in runs), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", action="append", type=Path, required=True, help="a venv with tierlog installed")
    ap.add_argument("--kafka", action="store_true", help="Apache Kafka 4.4 (scripts/kafka_peer.py) beside them")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=5.0, help="seconds of produce measured")
    ap.add_argument("--later", type=float, default=60.0, help="seconds after ready of the second window")
    args = ap.parse_args()
    out: dict = {"bench": "first_start", "runs": args.runs, "window_s": args.window, "later_s": args.later}
    for venv in args.venv:
        runs = []
        for _ in range(args.runs):
            runs.append(tierlog_run(venv, args))
        name = venv.name
        out.update({f"{name}_venv_mb": round(du_bytes(venv) / 1e6, 1)}, **{f"{name}_{k}": v
                                                                           for k, v in summary(runs).items()})
    if args.kafka:
        spec = importlib.util.spec_from_file_location("kafka_peer", ROOT / "scripts" / "kafka_peer.py")
        kp = importlib.util.module_from_spec(spec)
        sys.modules["kafka_peer"] = kp
        spec.loader.exec_module(kp)
        out["kafka_jars_mb"] = round(du_bytes(kp.lib_dir()) / 1e6, 1)
        out.update({f"kafka_{k}": v for k, v in summary([kafka_run(kp, args) for _ in range(args.runs)]).items()})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
