"""Remote catch-up reads when the object store is a network round trip away: MB/s for one consumer and for
four, against the ceiling of plain ranged GETs with the same concurrency from the same place, and the time
to the first record of a cold remote read, at ``--rtt-ms`` round trips (default 0, 20 and 50 ms).

Set-up: an S3 server behind a delay line (tests/harness/delay_line.py, subprocess): every byte reaches the
other side half the round trip later in each direction, pipelined, and a new connection pays one round trip
first. The server is SeaweedFS (``--store seaweedfs``, the default: a Go program, scripts/s3_servers.py
installs it) or moto (``--store moto``, Python, the first figures'); both cost about the same CPU per MiB
served here (1.4 to 2.1 ms), which the ceiling pays as much as the catch-up. ``tc netem`` on a veth pair
would be the natural tool; the kernel here has no sch_netem ("Specified qdisc kind is unknown"), and a delay
line charges the same round trips to requests (not TCP's window growth, which netem would also slow). The
broker (subprocess), the consumers and the ceiling's GETs reach the store through it.

Data: a tiered topic of 4 partitions, ``--mb`` MiB each in ``--segment-mib`` MiB segments, uploaded at 0 ms
and then remote only (``local.retention.bytes=1``) but the active segment. For each round trip and run:

- ceiling: sequential ranged GETs of the read-ahead's chunk (4 MiB) over one partition's segment objects
  (one stream), and over four partitions at once (four streams), through obstore as the broker's backend;
- cold remote read: the broker restarted with its remote index cache deleted (the metadata stays: topic-based
  manager), then one confluent-kafka consumer assigned to the middle of a remote segment: milliseconds from
  its first ``poll`` to the first record (``ttfb_ms``); the same for an offset of the local tail
  (``ttfb_local_ms``: what the client itself takes);
- catch-up: after another cold restart, one consumer reads partition 0's remote records (MB/s of record
  values); after another, four consumers (threads, one partition each) read theirs at once (total MB/s).
  The consumers fetch up to 4 MiB per partition (``max.partition.fetch.bytes``, set as for a catch-up).
  ``mbps_*`` count from the consumers' start (their connection, metadata and coordinator look-up included:
  what a user waits for); ``steady_mbps_*`` from each consumer's first record to its last (the rate of the
  remote reads themselves; the wait for the first record is ``ttfb_ms``).

With ``--baseline TREE`` (another checkout, its kernels built in place) every run also measures the broker of
that tree on the same data, alternating with this one (a cold restart switches them), under ``baseline``.

CPU: ``cpu_ms_per_mib_<phase>_<process>``, CPU milliseconds per MiB read of the store, the delay line, the
broker and this process (the ceiling's GETs, or the consumers) over each ceiling and catch-up: on a shared
machine a catch-up that needs more CPU per MiB than the ceiling cannot keep its ratio once the cores are busy.
``--profile DIR`` records the broker with py-spy over each catch-up (collapsed stacks), and the load
average at the start and the end is in the result.

Prints ONE JSON line: per round trip the medians over ``--runs`` runs and ``ratio_1``/``ratio_4`` (catch-up
over ceiling; target >= 0.8), ``steady_ratio_*`` likewise.

    python bench/remote_latency.py [--rtt-ms 0,20,50] [--runs 3] [--mb 48] [--segment-mib 8] [--baseline TREE]
                                   [--store seaweedfs|moto] [--profile DIR]
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

MIB = 1 << 20
PARTITIONS = 4
CHUNK = 4 * MIB  # tierlog.tiered.read_ahead.CHUNK_BYTES
RECORD_BYTES = 1024


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process(args: list[str], ready: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if ready in line:
            threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
            return proc
    raise RuntimeError(f"{args} did not start")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


@contextlib.contextmanager
def store_server(kind: str, work: Path) -> Iterator[tuple[int, int, dict[str, str]]]:
    """The S3 server: (port, pid, credentials). SeaweedFS (Go) by default; moto (Python, one process)
    on request, whose CPU per MiB is several times the broker's and shares the two cores with it."""
    if kind == "moto":
        port = _free_port()
        proc = _process([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], "Running on")
        try:
            yield port, proc.pid, {"key": "test", "secret": "test"}
        finally:
            _stop(proc)
        return
    from tests.harness.s3_servers import servers_module
    server = servers_module.start(kind, work / kind, [])
    try:
        yield server.port, server.proc.pid, {"key": server.access_key, "secret": server.secret_key}
    finally:
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of the store, the delay line, the broker and this process (the consumers or the
    ceiling's GETs) over one phase: is the ceiling paying the same store CPU as the catch-up?"""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    @contextlib.contextmanager
    def measure(self, out: dict, phase: str, mib: float) -> Iterator[None]:
        before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        client = time.process_time()
        yield
        for name, pid in self.pids.items():
            out[f"cpu_ms_per_mib_{phase}_{name}"] = (cpu_seconds(pid) - before[name]) * 1000 / mib
        out[f"cpu_ms_per_mib_{phase}_client"] = (time.process_time() - client) * 1000 / mib


class DelayLine:
    """The delay line in front of the store, on one port for the whole run, restarted for each round trip."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def set_rtt(self, rtt_ms: float) -> None:
        if self.proc is not None:
            _stop(self.proc)
        self.proc = _process([sys.executable, "-m", "tests.harness.delay_line", "--port", str(self.port), "--target",
                              f"127.0.0.1:{self.target_port}", "--one-way-ms", str(rtt_ms / 2)], "listening on")

    def close(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


def wait(predicate, what: str, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def run(args) -> dict:
    import boto3
    from botocore.config import Config
    from tests.harness.broker import BrokerProcess
    from tests.harness.s3 import s3_configs
    from tests.harness.tiered import metrics_url
    with tempfile.TemporaryDirectory(prefix="tierlog-latency-") as tmp, \
            store_server(args.store, Path(tmp)) as (store_port, store_pid, creds):
        line = DelayLine(store_port)
        b = None
        try:
            line.set_rtt(0)
            endpoint = f"http://127.0.0.1:{line.port}"
            s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=creds["key"],
                              aws_secret_access_key=creds["secret"], region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}))
            wait(lambda: _reachable(s3), "the store")
            wait(lambda: _bucket(s3, "tiered"), "the bucket")
            store = {f"rsm.config.{k}": v for k, v in s3_configs(endpoint, "s3://tiered/lat").items()}
            store["rsm.config.aws_access_key_id"] = creds["key"]
            store["rsm.config.aws_secret_access_key"] = creds["secret"]
            b = BrokerProcess(Path(tmp) / "logs", {
                "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "objectstore",
                **store, "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
                "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
                "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
                "metrics.port": "0"})
            b.start()
            ends = load(b, metrics_url(b), args)
            result = {"mb_per_partition": args.mb, "segment_mib": args.segment_mib, "runs": args.runs,
                      "store": args.store, "link": "delay line (no sch_netem)",
                      "load_average_start": os.getloadavg()[0], "rtt": {}}
            trees = {"this": ROOT} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
            for rtt in (float(r) for r in args.rtt_ms.split(",")):
                line.set_rtt(rtt)
                # Which tree goes first alternates from run to run (the machine's load drifts).
                meter = CpuMeter({"store": store_pid, "line": line.proc.pid})
                runs = [one_run(b, endpoint, s3, ends, dict(list(trees.items())[::(-1) ** i]), creds, meter, args.mb)
                        for i in range(args.runs)]
                fig = _medians([r["this"] for r in runs])
                if args.baseline:
                    fig["baseline"] = _medians([r["baseline"] for r in runs])
                result["rtt"][f"{rtt:g}ms"] = fig
            result["load_average_end"] = os.getloadavg()[0]
            return result
        finally:
            if b is not None:
                b.stop()
            line.close()


def _medians(runs: list[dict]) -> dict:
    fig = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
    for n in (1, 4):
        fig[f"ratio_{n}"] = round(fig[f"mbps_{n}"] / fig[f"ceiling_mbps_{n}"], 3)
        fig[f"steady_ratio_{n}"] = round(fig[f"steady_mbps_{n}"] / fig[f"ceiling_mbps_{n}"], 3)
    return fig


def _bucket(s3, name: str) -> bool:
    try:
        s3.create_bucket(Bucket=name)
        return True
    except Exception as e:  # noqa: BLE001 - SeaweedFS answers 5xx until its filer is up
        return "BucketAlready" in str(e)


def _reachable(s3) -> bool:
    try:
        s3.list_buckets()
        return True
    except Exception:
        return False


def _status(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/v1/tier/status?topic=lat", timeout=60) as r:
        return sorted(json.load(r)["partitions"], key=lambda p: p["partition"])


def load(b, url: str, args) -> list[int]:
    """The topic, produced and uploaded; each partition's first local offset (its remote records end there)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    config = {"remote.storage.enable": "true", "segment.bytes": str(args.segment_mib * MIB),
              "local.retention.bytes": "1", "file.delete.delay.ms": "0"}
    for f in admin.create_topics([NewTopic("lat", PARTITIONS, 1, config=config)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000})
    values = [os.urandom(RECORD_BYTES) for _ in range(256)]
    for i in range(args.mb * MIB // RECORD_BYTES * PARTITIONS):
        while True:
            try:
                p.produce("lat", values[i % len(values)], partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError("produce did not finish")
    parts = wait(lambda: (lambda s: s if len(s) == PARTITIONS and all(
        x["ready"] and x["copy_lag_segments"] == 0 and x["local_segments"] <= 1 for x in s) else None)(_status(url)),
        "the topic uploaded")
    return [x["local_log_start_offset"] for x in parts]


def cold(b, tree: Path = ROOT) -> None:
    """The broker (of ``tree``) restarted with no remote index cached (the topic-based metadata survives)."""
    import tests.harness.broker as harness
    from tests.harness.tiered import metrics_url
    harness.ROOT = tree  # the broker runs tree/src
    b.stop()
    shutil.rmtree(b.log_dir / "remote-log-index-cache", ignore_errors=True)
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port}"
    b.port = None
    b.start()
    url = metrics_url(b)
    wait(lambda: all(x["ready"] for x in _status(url)), "remote metadata loaded")


def one_run(b, endpoint: str, s3, ends: list[int], trees: dict[str, Path], creds: dict, meter: CpuMeter,
            mib: int) -> dict:
    ceilings: dict = {}
    with meter.measure(ceilings, "ceiling_1", mib):
        ceilings["ceiling_mbps_1"] = ceiling(endpoint, s3, [0], creds)
    with meter.measure(ceilings, "ceiling_4", mib * PARTITIONS):
        ceilings["ceiling_mbps_4"] = ceiling(endpoint, s3, list(range(PARTITIONS)), creds)
    runs = {}
    for name, tree in trees.items():
        out = runs[name] = dict(ceilings)
        cold(b, tree)
        out["ttfb_ms"] = first_record_ms(b.bootstrap, 0, ends[0] // 2)
        out["ttfb_local_ms"] = first_record_ms(b.bootstrap, 1, ends[1] + 1)
        for n, partitions in ((1, {0: ends[0]}), (4, dict(enumerate(ends)))):
            cold(b, tree)
            broker = CpuMeter({**meter.pids, "broker": b.proc.pid})
            with broker.measure(out, f"catch_up_{n}", mib * n), profiled(b.proc.pid, f"{name}-catch_up_{n}"):
                out[f"mbps_{n}"], out[f"steady_mbps_{n}"] = catch_up(b.bootstrap, partitions)
    return runs


PROFILE_DIR: Path | None = None  # --profile


@contextlib.contextmanager
def profiled(pid: int, name: str) -> Iterator[None]:
    """py-spy records the broker (``pid``) meanwhile, as collapsed stacks, with ``--profile DIR``."""
    if PROFILE_DIR is None:
        yield
        return
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    out = PROFILE_DIR / f"{name}-{time.strftime('%H%M%S')}.txt"
    proc = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--threads",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # py-spy attaches
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def ceiling(endpoint: str, s3, partitions: list[int], creds: dict) -> float:
    """MB/s of sequential CHUNK-sized ranged GETs over each partition's log objects, one stream per partition."""
    import obstore
    from obstore.store import S3Store
    store = S3Store("tiered", endpoint=endpoint, access_key_id=creds["key"], secret_access_key=creds["secret"],
                    region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True})
    objects = {p: [] for p in partitions}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="tiered", Prefix="lat/"):
        for o in page.get("Contents", []):
            key = o["Key"]
            part = key.rsplit("/", 2)[-2]
            if key.endswith(".log") and part.isdigit() and int(part) in objects:
                objects[int(part)].append((key, o["Size"]))

    def stream(p: int) -> int:
        got = 0
        for key, size in sorted(objects[p]):
            for start in range(0, size, CHUNK):
                got += len(obstore.get_range(store, key, start=start, length=min(CHUNK, size - start)))
        return got

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(partitions)) as pool:
        total = sum(pool.map(stream, partitions))
    return total / MIB / (time.perf_counter() - t0)


def _consumer(bootstrap: str):
    """A consumer set up as for a catch-up: fetches of up to the read-ahead's chunk per partition (the
    default 1 MiB made the broker and librdkafka handle four times as many requests per MiB)."""
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "max.partition.fetch.bytes": CHUNK})


def first_record_ms(bootstrap: str, partition: int, offset: int) -> float:
    from confluent_kafka import TopicPartition
    c = _consumer(bootstrap)
    try:
        c.assign([TopicPartition("lat", partition, offset)])
        t0 = time.perf_counter()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                return (time.perf_counter() - t0) * 1000
        raise RuntimeError(f"no record of lat-{partition} at {offset}")
    finally:
        c.close()


def catch_up(bootstrap: str, ends: dict[int, int]) -> tuple[float, float]:
    """Total MB/s of record values of one consumer per partition reading from 0 to ``ends[p]`` at once: from
    the consumers' start, and from the first record any of them got (the bytes of those first records left
    out)."""
    from confluent_kafka import Message, TopicPartition
    sizes: dict[int, int] = {}
    firsts: dict[int, tuple[float, int]] = {}  # partition: (time of its first record, its size)
    start = threading.Barrier(len(ends) + 1)

    def read(p: int) -> float:
        c = _consumer(bootstrap)
        c.assign([TopicPartition("lat", p, 0)])
        got = 0
        start.wait()
        deadline = time.monotonic() + 600
        try:
            while True:
                # A short timeout: consume() waits that long for a full batch, and after the last record
                # (the local tail is small) a 1 s wait counted into the catch-up time.
                # Every record's value is taken, once (it was twice), in one pass without per-record
                # branches: offsets are compared only in the batch that reaches the end (one partition:
                # they ascend).
                if time.monotonic() > deadline:
                    raise RuntimeError(f"lat-{p}: not read to {ends[p]} in time")
                msgs = [m for m in c.consume(10_000, timeout=0.01) if m.error() is None]
                if not msgs:
                    continue
                done = msgs[-1].offset() >= ends[p] - 1
                if done:
                    msgs = [m for m in msgs if m.offset() < ends[p]]
                if not got and msgs:
                    firsts[p] = (time.perf_counter(), len(msgs[0].value()))
                got += sum(map(len, map(Message.value, msgs)))
                if done:
                    sizes[p] = got
                    return time.perf_counter()
        finally:
            c.close()

    with ThreadPoolExecutor(len(ends)) as pool:
        futures = [pool.submit(read, p) for p in ends]
        start.wait()
        t0 = time.perf_counter()
        last = max(f.result() for f in futures)
    total = sum(sizes.values())
    first = min(t for t, _ in firsts.values())
    return total / MIB / (last - t0), (total - sum(n for _, n in firsts.values())) / MIB / (last - first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--rtt-ms", default="0,20,50")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=48, help="MiB per partition (less: client start-up weighs)")
    ap.add_argument("--segment-mib", type=int, default=8)
    ap.add_argument("--baseline", help="a tree whose broker is measured too, alternating with this one")
    ap.add_argument("--store", choices=("seaweedfs", "moto"), default="seaweedfs",
                    help="the S3 server: SeaweedFS (Go; scripts/s3_servers.py install seaweedfs) or moto (Python)")
    ap.add_argument("--profile", help="a folder for py-spy records of the broker over each catch-up")
    args = ap.parse_args()
    global PROFILE_DIR
    PROFILE_DIR = Path(args.profile) if args.profile else None
    print(json.dumps({"bench": "remote_latency", **run(args)}, separators=(",", ":")))


if __name__ == "__main__":
    main()
