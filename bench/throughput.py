"""End-to-end throughput and latency of a broker through confluent-kafka (librdkafka).

Starts a tierlog broker itself (a subprocess on 127.0.0.1, random port, temporary log dir,
stopped by its PID), then per run, on a fresh one-partition topic:

- produce: ``--records`` records of ``--record-bytes`` (1 KiB) as fast as the producer goes
  (acks=all, linger.ms=5, no compression), timed from the first ``produce()`` to the end of
  ``flush()``: MB/s and records/s;
- consume: the same records read back from the beginning by an assigned consumer, timed from
  the first ``poll`` to the last record: MB/s and records/s;
- latency: ``--rate`` records/s (2000) for ``--latency-seconds`` (3 s) with acks=all and
  linger.ms=0; each record's latency is its delivery callback time minus its ``produce()`` time;
  p50 and p99 in ms.

Prints ONE JSON line; every figure is the median over ``--runs`` runs. MB is 2**20 bytes of
record values.

    python bench/throughput.py [--runs 3] [--records 50000] [--rate 2000]
    python bench/throughput.py --bootstrap HOST:PORT   # any running Kafka-compatible broker

Brokers are entries of ``BROKERS`` (name -> context manager yielding a bootstrap address). The
reference-peer work adds Apache Kafka as ``BROKERS["kafka"]`` (e.g. around
``scripts/kafka_peer.KafkaServer``) so ``--broker kafka`` measures it with the same client and
settings; ``--broker tierlog,kafka`` runs both and prints one line each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


# ------------------------------------------------------------------------------------ brokers


@contextlib.contextmanager
def tierlog_broker(settings: dict[str, str] | None = None, timeout: float = 60) -> Iterator[str]:
    """A ``tierlog broker`` subprocess on 127.0.0.1 with a random port and a temporary log dir."""
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-") as tmp:
        args = [sys.executable, "-m", "tierlog", "broker", "-o", f"log.dirs={tmp}/logs",
                "-o", "listeners=PLAINTEXT://127.0.0.1:0"]
        for k, v in (settings or {}).items():
            args += ["-o", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output: list[str] = []
        try:
            port = None
            deadline = time.monotonic() + timeout
            for line in proc.stdout:
                output.append(line)
                if line.startswith("tierlog broker ready on "):
                    port = int(line.rsplit(":", 1)[1])
                    break
                if time.monotonic() > deadline:
                    break
            if port is None:
                raise RuntimeError("broker did not start:\n" + "".join(output))
            threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
            yield f"127.0.0.1:{port}"
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()


@contextlib.contextmanager
def external_broker(bootstrap: str) -> Iterator[str]:
    yield bootstrap


BROKERS: dict[str, Callable[[], contextlib.AbstractContextManager[str]]] = {
    "tierlog": tierlog_broker,
    # "kafka": added by the reference-peer work (Apache Kafka through scripts/kafka_peer.py).
}


# ------------------------------------------------------------------------------------ measurements


def _producer(bootstrap: str, **conf):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "none",
                     "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                     **conf})


def create_topic(bootstrap: str, topic: str) -> None:
    """Create the topic (1 partition) and wait until the producer sees its leader."""
    p = _producer(bootstrap)
    md = p.list_topics(topic, timeout=30)  # auto-creates it
    assert md.topics[topic].error is None, md.topics[topic].error
    p.flush(5)


def produce(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    """Seconds to produce and acknowledge ``records`` records."""
    p = _producer(bootstrap, **{"linger.ms": 5, "batch.size": 1_000_000})
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce: {left} undelivered, errors {errors[:3]}")
    return dt


def consume(bootstrap: str, topic: str, records: int) -> float:
    """Seconds to read ``records`` records from the beginning."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                  "max.partition.fetch.bytes": 10_485_760, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    t0 = None  # timed from the first record, as ConsumerPerformance's fetch time: not the set-up
    deadline = time.perf_counter() + 120
    while got < records and time.perf_counter() < deadline:
        batch = c.consume(10_000, 1.0)
        if batch and t0 is None:
            t0 = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    dt = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    if got < records:
        raise RuntimeError(f"consume: read {got} of {records} records")
    return dt


def latency(bootstrap: str, topic: str, value: bytes, rate: int, seconds: float) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, records) at a fixed produce rate."""
    p = _producer(bootstrap, **{"linger.ms": 0})
    lat: list[float] = []
    errors: list = []

    def on_delivery_at(sent: float):
        def cb(err, _msg):
            if err is not None:
                errors.append(err)
            else:
                lat.append(time.perf_counter() - sent)
        return cb

    # Warm up the connection (metadata, producer id) outside the measurement.
    p.produce(topic, value, partition=0)
    p.flush(30)
    total = int(rate * seconds)
    interval = 1.0 / rate
    t0 = time.perf_counter()
    for i in range(total):
        due = t0 + i * interval
        while True:
            now = time.perf_counter()
            if now >= due:
                break
            p.poll(due - now)  # serves delivery callbacks while waiting for the next send
        p.produce(topic, value, partition=0, on_delivery=on_delivery_at(time.perf_counter()))
    p.flush(60)
    if errors or len(lat) != total:
        raise RuntimeError(f"latency: {len(lat)} of {total} delivered, errors {errors[:3]}")
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000, total


def run_once(bootstrap: str, records: int, record_bytes: int, rate: int, seconds: float) -> dict:
    value = os.urandom(record_bytes)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    mb = records * record_bytes / MIB
    tp = produce(bootstrap, topic, records, value)
    tc = consume(bootstrap, topic, records)
    lat_topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, lat_topic)
    p50, p99, _ = latency(bootstrap, lat_topic, value, rate, seconds)
    return {"produce_mb_s": mb / tp, "produce_records_s": records / tp,
            "consume_mb_s": mb / tc, "consume_records_s": records / tc,
            "latency_p50_ms": p50, "latency_p99_ms": p99}


def bench(name: str, broker_cm, args) -> dict:
    import confluent_kafka
    runs = []
    with broker_cm as bootstrap:
        for _ in range(args.runs):
            runs.append(run_once(bootstrap, args.records, args.record_bytes, args.rate, args.latency_seconds))
    out = {"bench": "throughput", "broker": name,
           "client": f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})",
           "runs": args.runs, "records": args.records, "record_bytes": args.record_bytes,
           "latency_rate_msg_s": args.rate, "latency_seconds": args.latency_seconds}
    for key in runs[0]:
        out[key] = round(statistics.median(r[key] for r in runs), 2)
    out["per_run"] = {key: [round(r[key], 2) for r in runs] for key in runs[0]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="tierlog",
                    help=f"comma-separated broker names from BROKERS ({', '.join(BROKERS)})")
    ap.add_argument("--bootstrap", help="measure an already running broker at HOST:PORT instead")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the latency phase")
    ap.add_argument("--latency-seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    if args.bootstrap:
        targets = [("external", external_broker(args.bootstrap))]
    else:
        names = [n.strip() for n in args.broker.split(",") if n.strip()]
        unknown = [n for n in names if n not in BROKERS]
        if unknown:
            ap.error(f"unknown broker(s) {unknown}; known: {sorted(BROKERS)}")
        targets = [(n, BROKERS[n]()) for n in names]
    for name, cm in targets:
        print(json.dumps(bench(name, cm, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
