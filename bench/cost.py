"""What tiered storage costs on S3: requests and bytes per GiB ingested, per GiB read back and per GiB-month
retained, turned into a monthly bill at S3 Standard list prices, next to the same data on three replicated
gp3-class disks (the baseline: a classic broker keeping everything local with replication factor 3).

Each run: a moto S3 server in this process that counts the requests it serves by operation
(tests/harness/s3_requests.py), one tierlog broker (subprocess) with the ``objectstore`` backend on it, a topic
with ``--partitions`` partitions, the given ``segment.bytes`` and ``local.retention.bytes=1``. Then, phase by
phase, the requests the server served:

1. ingest: ``--mb`` MiB of random 1 KiB records (acks=all), until every rolled segment is copied; per GiB of
   log bytes copied;
2. retained: the broker left idle for ``--idle-s`` seconds (a store holding data costs requests only if
   something polls it); per GiB-month of what is stored, extrapolated; and the bytes stored per GiB copied
   (segment objects, index objects, manifests);
3. read back: a consumer reads the topic from the beginning (all of it remote but the active segment); per
   GiB of remote log bytes;
4. expired: retention set to 1 ms, until the remote segments are deleted; per GiB deleted.

At the end the broker's own counts (``/v1/tier/status`` ``store_requests``, the same as ``/metrics``) must equal
the server's: ``counts_match``. Prints ONE JSON line: medians over ``--runs`` runs per segment size, and the
monthly bill of a reference workload (``--ingest-gib-day`` ingested per day, every byte read back
``--reads`` times, kept ``--retention-days``) on S3 against three gp3 replicas.

    python bench/cost.py [--runs 3] [--mb 128] [--partitions 1] [--segment-mib 8,32] [--part-mib 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.harness.broker import BrokerProcess  # noqa: E402
from tests.harness.s3 import s3_configs  # noqa: E402
from tests.harness.s3_requests import counting_moto_server  # noqa: E402
from tests.harness.tiered import metrics_url  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
RECORD_BYTES = 1024

# List prices, AWS us-east-1, as written down on 2026-12-07 from the pages named (issue 37 quotes them; no
# network here to read them again). AWS bills storage per GB-month with GB = 2**30 bytes.
PRICES_AS_OF = "2026-12-07"
S3_PRICES_SOURCE = "https://aws.amazon.com/s3/pricing/ (S3 Standard, US East (N. Virginia))"
S3_STORAGE_GB_MONTH = 0.023  # first 50 TB / month
S3_PUT_CLASS_PER_1000 = 0.005  # PUT, COPY, POST, LIST
S3_GET_CLASS_PER_1000 = 0.0004  # GET, SELECT and all other requests (HEAD)
# DELETE (and DeleteObjects) and CANCEL are free on the same page.
EBS_PRICES_SOURCE = "https://aws.amazon.com/ebs/pricing/ (gp3, US East (N. Virginia))"
GP3_GB_MONTH = 0.08
DISK_REPLICAS = 3

PUT_CLASS = ("PUT", "CREATE_MULTIPART", "UPLOAD_PART", "COMPLETE_MULTIPART", "LIST")
GET_CLASS = ("GET", "GET_RANGE", "HEAD")
SECONDS_PER_MONTH = 30 * 24 * 3600


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


def _wait(predicate, what: str, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def _delta(after: dict, before: dict) -> dict[str, dict[str, int]]:
    ops = set(after) | set(before)
    zero = {"requests": 0, "bytes": 0}
    out = {op: {k: after.get(op, zero)[k] - before.get(op, zero)[k] for k in zero} for op in sorted(ops)}
    return {op: c for op, c in out.items() if c["requests"]}


def _per_gib(counts: dict, gib: float) -> dict[str, float]:
    return {op: round(c["requests"] / gib, 2) for op, c in counts.items()}


def produce(bootstrap: str, topic: str, mb: int, partitions: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                  "compression.type": "none"})
    values = [os.urandom(RECORD_BYTES) for _ in range(256)]
    errors: list = []
    for i in range(mb * MIB // RECORD_BYTES):
        while True:
            try:
                p.produce(topic, values[i % len(values)], partition=i % partitions,
                          on_delivery=lambda err, _m: err is not None and errors.append(err))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(300) or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")


def consume_all(bootstrap: str, topic: str, partitions: int, ends: list[int]) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cost-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    left = {p: end for p, end in enumerate(ends)}
    deadline = time.monotonic() + 600
    try:
        while any(offset < left[p] for p, offset in _positions(c, topic, partitions).items()):
            for m in c.consume(10_000, timeout=1):
                if m.error() is not None:
                    raise RuntimeError(f"consume: {m.error()}")
            if time.monotonic() > deadline:
                raise RuntimeError("consume: not all records in time")
    finally:
        c.close()


def _positions(c, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition
    return {tp.partition: max(tp.offset, 0) for tp in c.position([TopicPartition(topic, p) for p in range(partitions)])}


def one_run(args, segment_mib: int) -> dict:
    with counting_moto_server() as (endpoint, served), tempfile.TemporaryDirectory(prefix="tierlog-cost-") as tmp:
        store = {f"rsm.config.{k}": v for k, v in s3_configs(endpoint, "s3://tiered/cost").items()}
        b = BrokerProcess(Path(tmp) / "logs", {
            "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "objectstore",
            **store, "rsm.config.upload.part.size": str(args.part_mib * MIB),
            "remote.log.metadata.manager.class.name": "memory", "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200", "metrics.port": "0"})
        b.start()
        try:
            return _phases(args, segment_mib, b, metrics_url(b), served)
        finally:
            b.stop()


def _phases(args, segment_mib: int, b: BrokerProcess, url: str, served) -> dict:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic_config = {"remote.storage.enable": "true", "segment.bytes": str(segment_mib * MIB),
                    "local.retention.bytes": "1", "file.delete.delay.ms": "0", "retention.ms": "-1"}
    for f in admin.create_topics([NewTopic("cost", args.partitions, 1, config=topic_config)]).values():
        f.result(30)

    def status() -> dict:
        return _get(url + "/v1/tier/status?topic=cost")

    start = served.snapshot()
    produce(b.bootstrap, "cost", args.mb, args.partitions)

    def copied():
        s = status()
        parts = s["partitions"]
        done = len(parts) == args.partitions and all(p["ready"] and p["copy_lag_segments"] == 0
                                                     and p["local_segments"] <= 1 for p in parts)
        return s if done else None
    s = _wait(copied, "every rolled segment copied")
    remote_log = sum(p["remote_bytes"] for p in s["partitions"])
    ingested = served.snapshot()
    stored = sum(c["bytes"] for op, c in _delta(ingested, start).items() if op in ("PUT", "UPLOAD_PART"))

    time.sleep(args.idle_s)  # the retained phase: what an idle broker asks its store
    idle = served.snapshot()

    ends = [p["local_log_start_offset"] for p in sorted(s["partitions"], key=lambda p: p["partition"])]
    consume_all(b.bootstrap, "cost", args.partitions, ends)
    read = served.snapshot()

    expire = ConfigResource("topic", "cost", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([expire]).values():
        f.result(30)
    _wait(lambda: all(p["remote_segments"] == 0 for p in status()["partitions"]), "remote segments expired")
    expired = served.snapshot()

    def agreed() -> bool:  # the broker's counts against the server's, once neither moves (deletes may trail)
        before = served.snapshot()
        mine = {op: c for op, c in status()["store_requests"].items() if c["requests"]}
        return mine == _delta(before, {}) == _delta(served.snapshot(), {})
    try:
        counts_match = _wait(agreed, "the broker's counts to equal the server's", timeout=30)
    except RuntimeError:
        counts_match = False
    gib = remote_log / GIB
    ingest, reads, deletes = _delta(ingested, start), _delta(read, idle), _delta(expired, read)
    idle_counts = _delta(idle, ingested)
    month = SECONDS_PER_MONTH / args.idle_s
    return {
        "remote_log_gib": round(gib, 3),
        "ingest_requests_per_gib": _per_gib(ingest, gib),
        "stored_bytes_per_log_byte": round(stored / remote_log, 5),
        "retained_requests_per_gib_month": {op: round(c["requests"] * month / gib, 1) for op, c in idle_counts.items()},
        "read_requests_per_gib": _per_gib(reads, gib),
        "read_bytes_per_log_byte": round(sum(c["bytes"] for c in reads.values()) / remote_log, 4),
        "expire_requests_per_gib": _per_gib(deletes, gib),
        "counts_match": counts_match,
    }


def monthly_bill(fig: dict, ingest_gib_day: float, reads: float, retention_days: float) -> dict:
    """The month of a steady workload: what is ingested each day is read back ``reads`` times and kept
    ``retention_days``; storage is the steady-state amount (ingest x retention)."""
    ingest = ingest_gib_day * 30
    retained = ingest_gib_day * retention_days

    def requests(per_gib: dict, gib: float, ops: tuple[str, ...]) -> float:
        return sum(v for op, v in per_gib.items() if op in ops) * gib

    put = requests(fig["ingest_requests_per_gib"], ingest, PUT_CLASS) + \
        requests(fig["read_requests_per_gib"], ingest * reads, PUT_CLASS)
    get = requests(fig["ingest_requests_per_gib"], ingest, GET_CLASS) + \
        requests(fig["read_requests_per_gib"], ingest * reads, GET_CLASS)
    idle = fig["retained_requests_per_gib_month"]
    put += requests(idle, retained, PUT_CLASS)
    get += requests(idle, retained, GET_CLASS)
    storage = retained * fig["stored_bytes_per_log_byte"] * S3_STORAGE_GB_MONTH
    s3 = {"storage": storage, "put_class_requests": put / 1000 * S3_PUT_CLASS_PER_1000,
          "get_class_requests": get / 1000 * S3_GET_CLASS_PER_1000}
    s3_total = sum(s3.values())
    disks = retained * DISK_REPLICAS * GP3_GB_MONTH
    return {"s3_usd": {k: round(v, 2) for k, v in s3.items()} | {"total": round(s3_total, 2)},
            "gp3_x3_usd": round(disks, 2), "s3_over_gp3_x3": round(s3_total / disks, 4)}


def _median_figures(runs: list[dict]) -> dict:
    out: dict = {}
    for key, first in runs[0].items():
        if isinstance(first, dict):
            ops = sorted({op for r in runs for op in r[key]})
            out[key] = {op: statistics.median(r[key].get(op, 0) for r in runs) for op in ops}
        elif isinstance(first, bool):
            out[key] = all(r[key] for r in runs)
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=128, help="MiB produced per run")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--segment-mib", default="8,32", help="segment.bytes to compare, in MiB")
    ap.add_argument("--part-mib", type=int, default=8, help="rsm.config.upload.part.size in MiB")
    ap.add_argument("--idle-s", type=float, default=5, help="seconds the retained phase watches an idle broker")
    ap.add_argument("--ingest-gib-day", type=float, default=1024)
    ap.add_argument("--reads", type=float, default=1, help="times each byte is read back from the remote tier")
    ap.add_argument("--retention-days", type=float, default=30)
    args = ap.parse_args()
    result: dict = {"bench": "cost", "mb": args.mb, "runs": args.runs, "partitions": args.partitions,
                    "part_mib": args.part_mib,
                    "workload": {"ingest_gib_day": args.ingest_gib_day, "reads": args.reads,
                                 "retention_days": args.retention_days},
                    "prices": {"as_of": PRICES_AS_OF, "s3_source": S3_PRICES_SOURCE, "ebs_source": EBS_PRICES_SOURCE,
                               "s3_storage_gb_month": S3_STORAGE_GB_MONTH, "s3_put_class_per_1000":
                               S3_PUT_CLASS_PER_1000, "s3_get_class_per_1000": S3_GET_CLASS_PER_1000,
                               "gp3_gb_month": GP3_GB_MONTH, "disk_replicas": DISK_REPLICAS},
                    "segments": {}}
    for segment_mib in (int(s) for s in args.segment_mib.split(",")):
        runs = [one_run(args, segment_mib) for _ in range(args.runs)]
        fig = _median_figures(runs)
        fig["monthly"] = monthly_bill(fig, args.ingest_gib_day, args.reads, args.retention_days)
        result["segments"][f"{segment_mib}MiB"] = fig
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
