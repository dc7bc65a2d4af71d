"""The broker's CPU per MB produced, with the client's own cost taken out: one Produce request replayed.

A producer on the same 2-core machine (Kafka's ProducerPerformance, a JVM) takes a core of its own and
its JIT and garbage collector shake the broker's figures from run to run by 15% or more. Here the
client is a loop that sends one pre-encoded Produce request (``--version``, acks=1, one partition, one batch of
``--batch-records`` records of ``--record-bytes`` random bytes, as the Java producer's default
batch.size makes them) over and over, ``--inflight`` at a time (the Java producer's
max.in.flight.requests.per.connection), and reads the answers: nothing is encoded or decoded per request
on the client side. The broker's CPU time comes from /proc before and after.

For each source tree given (``--tree``, repeatable; default this repository), a broker from that
tree's ``src`` (free port, temporary log dir); trees take turns in every round, the first one alternating,
so they see the same machine load. Each tree's figures are compared with the other trees' in the same
run (the usual use: a commit before a change against one after it). Prints one JSON line per tree: every
run's broker CPU ms per MB and MB/s, and the medians.

    python bench/produce_replay.py --tree /path/to/before --tree . --runs 5
    python bench/produce_replay.py --batch-records 2000 --requests 300 --set message.max.bytes=20000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from kcat_consume import MIB, alternating, started

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kio.index import load_request_schema  # noqa: E402

from tierlog.protocol import build, encode_request  # noqa: E402
from tierlog.records import build_batch  # noqa: E402

PRODUCE = 0


def produce_frame(topic: str, records: int, record_bytes: int, version: int) -> tuple[bytes, int]:
    """One Produce request frame (acks=1) carrying one batch; returns it and the batch's size."""
    now = int(time.time() * 1000)
    batch = build_batch([(None, os.urandom(record_bytes), [], now + i) for i in range(records)])
    request = build(load_request_schema(PRODUCE, version), {
        "transactional_id": None, "acks": 1, "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return encode_request(request, 1, "produce-replay"), len(batch)


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def replay(bootstrap: str, pid: int, frame: bytes, requests: int, inflight: int) -> tuple[float, float]:
    """Send ``frame`` ``requests`` times, ``inflight`` at a time; returns (broker CPU seconds, wall seconds).
    Every answer is checked for error code 0."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()

        def answer() -> bytes:
            while True:
                if len(buf) >= 4:
                    size = struct.unpack_from(">i", buf)[0]
                    if len(buf) >= 4 + size:
                        out = bytes(buf[4:4 + size])
                        del buf[:4 + size]
                        return out
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("the broker closed the connection")
                buf.extend(chunk)

        ticks, started = cpu_ticks(pid), time.perf_counter()
        sent = answered = 0
        while answered < requests:
            while sent - answered < inflight and sent < requests:
                sock.sendall(frame)
                sent += 1
            body = answer()
            answered += 1
            # v9+ answer: correlation id, tagged fields, topics (compact array of 1), name, partitions
            # (compact array of 1), partition index, then the partition's error code.
            tail = body[4 + 1 + 1:]
            name_len = tail[0] - 1
            error = struct.unpack_from(">h", tail, 1 + name_len + 1 + 4)[0]
            if error:
                raise RuntimeError(f"the broker answered error code {error}")
        wall = time.perf_counter() - started
        cpu = (cpu_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK")
    return cpu, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path, help="source tree (repeatable)")
    ap.add_argument("--requests", type=int, default=10_000, help="requests per run")
    ap.add_argument("--batch-records", type=int, default=15, help="records per batch (16 KiB of 1 KiB records)")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--inflight", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--version", type=int, default=11, help="Produce version (the Java producer of Kafka 4.1 sends 11)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting, e.g. message.max.bytes=20000000 for batches above 1 MiB (repeatable)")
    args = ap.parse_args(argv)
    if shutil.which("kcat") is None:
        ap.error("kcat is not installed (apt-get install kcat); it creates the topic")
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    frame, batch_bytes = produce_frame("bench", args.batch_records, args.record_bytes, args.version)
    mb = args.requests * batch_bytes / MIB
    with started(trees, "tierlog-replay-", tuple(args.set)) as brokers:
        for b in brokers:
            subprocess.run(["kcat", "-P", "-b", b.bootstrap, "-t", "bench"], input=b"x\n", check=True, timeout=60)
            replay(b.bootstrap, b.proc.pid, frame, 1000, args.inflight)  # warm-up
        cpu_per_mb: list[list[float]] = [[] for _ in trees]
        rates: list[list[float]] = [[] for _ in trees]
        for i in alternating(len(trees), args.runs):
            cpu, wall = replay(brokers[i].bootstrap, brokers[i].proc.pid, frame, args.requests, args.inflight)
            cpu_per_mb[i].append(cpu * 1000 / mb)
            rates[i].append(mb / wall)
        for tree, cpus, rs in zip(trees, cpu_per_mb, rates):
            print(json.dumps({"bench": "produce_replay", "tree": str(tree), "batch_bytes": batch_bytes,
                              "requests": args.requests, "inflight": args.inflight,
                              "broker_cpu_ms_per_mb": [round(x, 2) for x in cpus],
                              "median_broker_cpu_ms_per_mb": round(statistics.median(cpus), 2),
                              "mb_s": [round(x, 1) for x in rs], "median_mb_s": round(statistics.median(rs), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
