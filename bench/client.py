"""Produce and consume MB/s of tierlog's client next to kafka-python, aiokafka and confluent-kafka,
all against the same tierlog broker in one run.

Starts a tierlog broker itself (a subprocess on 127.0.0.1, random port, temporary log dir, stopped
by its PID; ``--bootstrap`` measures a running broker instead). Per run, and for each client in
turn (the order rotates between runs so no client always goes first):

- produce: ``--records`` records of ``--record-bytes`` random bytes into a fresh one-partition topic,
  timed from the first send to the last acknowledgement. Every client gets the same settings: acks=1,
  linger.ms=5, batch.size=``--batch-size`` (256 KiB), no compression, no idempotence, and is warmed
  up (connection, metadata) with one record before the clock starts;
- consume: the same client reads that topic back from the beginning with an assigned consumer (no
  group), timed from the first record to the last, the values touched (``len``) as an application
  would.

Prints ONE JSON line: per figure and client the median over ``--runs`` runs (every run under
``per_run``), the ratios the targets are about, and whether they are met (issue 5: tierlog faster
than kafka-python and aiokafka; produce within 2x of confluent-kafka). MB is 2**20 bytes of values.

    python bench/client.py [--runs 3] [--records 200000] [--record-bytes 1024] [--clients tierlog,confluent-kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
TIMEOUT = 300


def _throughput_module():
    """bench/throughput.py, for its broker subprocess helper."""
    spec = importlib.util.spec_from_file_location("tierlog_bench_throughput", ROOT / "bench" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------------------------------- clients
# Each client: produce(bootstrap, topic, records, value, batch_size) -> seconds,
#              consume(bootstrap, topic, records) -> seconds.


def tierlog_produce(bootstrap: str, topic: str, records: int, value: bytes, batch_size: int) -> float:
    from tierlog.client.producer import Producer

    async def run() -> float:
        async with Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                             "linger.ms": 5, "batch.size": batch_size, "compression.type": "none",
                             "buffer.memory": 256 * MIB, "max.request.size": 4 * MIB}) as producer:
            await producer.send_and_wait(topic, value, partition=0)  # warm up
            send = producer.send
            t0 = time.perf_counter()
            last = None
            for _ in range(records):
                last = await send(topic, value, partition=0)
            await producer.flush()
            await last
            return time.perf_counter() - t0
    return asyncio.run(run())


def tierlog_consume(bootstrap: str, topic: str, records: int) -> float:
    from tierlog.client.consumer import Consumer
    from tierlog.client.types import TopicPartition

    async def run() -> float:
        async with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                             "max.poll.records": 10_000, "fetch.max.bytes": 52_428_800,
                             "max.partition.fetch.bytes": 10_485_760, "fetch.max.wait.ms": 100}) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got, size, t0 = 0, 0, None
            deadline = time.perf_counter() + TIMEOUT
            while got < records + 1 and time.perf_counter() < deadline:  # +1: the warm-up record
                batch = await consumer.poll(timeout_ms=1000)
                if batch and t0 is None:
                    t0 = time.perf_counter()
                for recs in batch.values():
                    got += len(recs)
                    size += sum(len(r.value) for r in recs)
            return _done(got, records + 1, t0, size)
    return asyncio.run(run())


def kafka_python_produce(bootstrap: str, topic: str, records: int, value: bytes, batch_size: int) -> float:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=batch_size,
                      enable_idempotence=False, max_request_size=4 * MIB)
    try:
        p.send(topic, value, partition=0).get(30)
        t0 = time.perf_counter()
        last = None
        for _ in range(records):
            last = p.send(topic, value, partition=0)
        p.flush(TIMEOUT)
        last.get(TIMEOUT)
        return time.perf_counter() - t0
    finally:
        p.close(10)


def kafka_python_consume(bootstrap: str, topic: str, records: int) -> float:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000,
                      fetch_max_bytes=52_428_800, max_partition_fetch_bytes=10_485_760, fetch_max_wait_ms=100)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got, size, t0 = 0, 0, None
        deadline = time.perf_counter() + TIMEOUT
        while got < records + 1 and time.perf_counter() < deadline:
            batch = c.poll(timeout_ms=1000)
            if batch and t0 is None:
                t0 = time.perf_counter()
            for recs in batch.values():
                got += len(recs)
                size += sum(len(r.value) for r in recs)
        return _done(got, records + 1, t0, size)
    finally:
        c.close()


def aiokafka_produce(bootstrap: str, topic: str, records: int, value: bytes, batch_size: int) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=batch_size,
                             enable_idempotence=False, max_request_size=4 * MIB)
        await p.start()
        try:
            await p.send_and_wait(topic, value, partition=0)
            t0 = time.perf_counter()
            last = None
            for _ in range(records):
                last = await p.send(topic, value, partition=0)
            await p.flush()
            await last
            return time.perf_counter() - t0
        finally:
            await p.stop()
    return asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, records: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_bytes=52_428_800, max_partition_fetch_bytes=10_485_760,
                             fetch_max_wait_ms=100)
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0)])
            got, size, t0 = 0, 0, None
            deadline = time.perf_counter() + TIMEOUT
            while got < records + 1 and time.perf_counter() < deadline:
                batch = await c.getmany(timeout_ms=1000, max_records=10_000)
                if batch and t0 is None:
                    t0 = time.perf_counter()
                for recs in batch.values():
                    got += len(recs)
                    size += sum(len(r.value) for r in recs)
            return _done(got, records + 1, t0, size)
        finally:
            await c.stop()
    return asyncio.run(run())


def confluent_produce(bootstrap: str, topic: str, records: int, value: bytes, batch_size: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": batch_size,
                  "enable.idempotence": False, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 262_144})
    failed: list = []

    def on_delivery(err, _msg):
        if err is not None:
            failed.append(err)

    p.produce(topic, value, partition=0)
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(TIMEOUT)
    dt = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"confluent-kafka: {left} undelivered, errors {failed[:3]}")
    return dt


def confluent_consume(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                  "max.partition.fetch.bytes": 10_485_760, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, size, t0 = 0, 0, None
        deadline = time.perf_counter() + TIMEOUT
        while got < records + 1 and time.perf_counter() < deadline:
            batch = c.consume(10_000, 1.0)
            if batch and t0 is None:
                t0 = time.perf_counter()
            for m in batch:
                if m.error() is None:
                    got += 1
                    size += len(m.value())
        return _done(got, records + 1, t0, size)
    finally:
        c.close()


def _done(got: int, expected: int, t0: float | None, size: int) -> float:
    if got < expected or t0 is None:
        raise RuntimeError(f"consume: read {got} of {expected} records")
    return time.perf_counter() - t0


CLIENTS: dict[str, tuple[Callable[..., float], Callable[..., float]]] = {
    "tierlog": (tierlog_produce, tierlog_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
}


def versions() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka

    from tierlog.client.connection import SOFTWARE_VERSION
    return {"tierlog": SOFTWARE_VERSION, "kafka-python": kafka.__version__, "aiokafka": aiokafka.__version__,
            "confluent-kafka": f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"}


# ------------------------------------------------------------------------------------------------ main


def run_once(bootstrap: str, clients: list[str], records: int, value: bytes, batch_size: int) -> dict:
    out: dict[str, dict[str, float]] = {"produce_mb_s": {}, "consume_mb_s": {}}
    mb = records * len(value) / MIB
    for name in clients:
        produce, consume = CLIENTS[name]
        topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        out["produce_mb_s"][name] = mb / produce(bootstrap, topic, records, value, batch_size)
        out["consume_mb_s"][name] = mb / consume(bootstrap, topic, records)
        print(f"  {name}: produce {out['produce_mb_s'][name]:.1f} MB/s, consume {out['consume_mb_s'][name]:.1f} "
              "MB/s", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=262_144)
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated, from {', '.join(CLIENTS)}")
    ap.add_argument("--bootstrap", help="measure an already running broker at HOST:PORT")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        ap.error(f"unknown client(s) {unknown}; known: {', '.join(CLIENTS)}")
    value = os.urandom(args.record_bytes)
    runs = []
    load = os.getloadavg()[0]
    started = time.monotonic()
    cm = contextlib.nullcontext(args.bootstrap) if args.bootstrap else _throughput_module().tierlog_broker(
        {"num.partitions": "1"})
    with cm as bootstrap:
        for i in range(args.runs):
            order = clients[i % len(clients):] + clients[:i % len(clients)]
            print(f"run {i + 1}/{args.runs}: {', '.join(order)}", file=sys.stderr, flush=True)
            runs.append(run_once(bootstrap, order, args.records, value, args.batch_size))
    figures = ("produce_mb_s", "consume_mb_s")
    medians = {f: {c: round(statistics.median(r[f][c] for r in runs), 1) for c in clients} for f in figures}
    out = {"bench": "client", "broker": "tierlog" if not args.bootstrap else args.bootstrap,
           "runs": args.runs, "records": args.records, "record_bytes": args.record_bytes,
           "settings": {"acks": 1, "linger.ms": 5, "batch.size": args.batch_size, "compression": "none",
                        "idempotence": False},
           "versions": {c: v for c, v in versions().items() if c in clients},
           **medians,
           "per_run": {f: {c: [round(r[f][c], 1) for r in runs] for c in clients} for f in figures},
           "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
           "seconds": round(time.monotonic() - started, 1)}
    if "tierlog" in clients:
        ratios, targets = {}, {}
        for other in ("kafka-python", "aiokafka", "confluent-kafka"):
            if other not in clients:
                continue
            for f in figures:
                ratios[f"{f.removesuffix('_mb_s')}_tierlog_vs_{other}"] = round(
                    medians[f]["tierlog"] / medians[f][other], 2)
            if other != "confluent-kafka":
                for f in figures:
                    name = f"{f.removesuffix('_mb_s')}_faster_than_{other}"
                    targets[name] = medians[f]["tierlog"] > medians[f][other]
            else:
                targets["produce_within_2x_of_confluent-kafka"] = medians["produce_mb_s"]["tierlog"] * 2 >= \
                    medians["produce_mb_s"]["confluent-kafka"]
        out["ratios"] = ratios
        out["targets_met"] = targets
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
