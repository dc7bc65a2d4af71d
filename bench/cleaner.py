"""tierlog's log cleaner against Apache Kafka 4.4's, on the same records, in the same run.

Each run starts both brokers side by side (``bench/vs_kafka.py``'s ``KafkaBroker`` / ``TierlogBroker``,
with ``log.cleaner.backoff.ms=500``), creates on each a compacted one-partition topic
(``segment.bytes`` 16 MiB, ``min.cleanable.dirty.ratio=0.01``, no compression) that holds cleaning back
with ``min.compaction.lag.ms`` = 1 h, and produces the same records to both with confluent-kafka
(acks=1, no idempotence, ``batch.size`` 64 KiB, ``linger.ms`` 5): ``--mb`` MiB of ``--value-bytes``
values over ``--keys`` keys, each record's key drawn from a seeded generator (several versions a key).

Then, one broker at a time (the first alternating between runs, the page cache synced before), the
topic's ``min.compaction.lag.ms`` is set to 0 (IncrementalAlterConfigs) and the broker's cleaner
line is awaited:

- Kafka: LogCleaner's statistics (``N MB of log processed in X seconds (Y MB/sec)``, ``Start size``,
  ``End size``); MB are MiB, bytes read by both passes (offset map and copy), as Kafka counts them;
- tierlog: ``Cleaned ... in X s: K of R records kept, B bytes read, W written`` (storage/cleaner.py's
  CleanerStats; ``bytes_read`` counts both passes too).

Both figures are MiB read / seconds of the round. Afterwards the topic is read back from each broker
and the surviving offsets must be exactly the expected ones: below the active segment's base offset
only the last record of each key, from there on every record (the active segment is never cleaned).

``--profile`` adds one more run (not in the medians) whose tierlog round is sampled with py-spy
(``bench/results/cleaner_profile_tierlog.txt``); the JSON then has the shares of the cleaner's steps.

Prints ONE JSON line (medians over ``--runs``, ``ratio`` = tierlog MB/s / Kafka MB/s, target 0.7),
and writes ``bench/results/cleaner.json`` with every run.

    python bench/cleaner.py [--runs 3] [--mb 150] [--keys 50000] [--value-bytes 200] [--profile]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MIB = 1024 * 1024
TARGET = 0.7
HOLD_MS = 3_600_000  # min.compaction.lag.ms while producing: nothing is cleaned before we ask


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


vk = _load("vs_kafka", ROOT / "bench" / "vs_kafka.py")

KAFKA_STATS = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<from>\d+), (?P<to>\d+)\]\).*?"
    r"(?P<mb>[\d,.]+) MB of log processed in (?P<secs>[\d,.]+) seconds \((?P<mbs>[\d,.]+) MB/sec\).*?"
    r"Start size: (?P<start_mb>[\d,.]+) MB \((?P<start_msgs>[\d,]+) messages\).*?"
    r"End size: (?P<end_mb>[\d,.]+) MB \((?P<end_msgs>[\d,]+) messages\)", re.S)
TIERLOG_STATS = re.compile(
    r"Cleaned (?P<log>\S+) up to offset (?P<end>\d+) in (?P<secs>[\d.]+) s: (?P<kept>\d+) of (?P<read>\d+) "
    r"records kept, (?P<bytes_read>\d+) bytes read, (?P<bytes_written>\d+) written")


def log(msg: str) -> None:
    print(f"[cleaner {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _num(s: str) -> float:
    return float(s.replace(",", ""))


# ------------------------------------------------------------------------------------------------ data

def key_sequence(n: int, keys: int, seed: int = 7) -> array:
    rng = random.Random(seed)
    return array("i", (rng.randrange(keys) for _ in range(n)))


def produce(bootstrap: str, topic: str, seq: array, value_bytes: int) -> float:
    blob = random.Random(11).randbytes(MIB + value_bytes)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False, "linger.ms": 5,
                  "batch.size": 65536, "compression.type": "none", "queue.buffering.max.kbytes": 65536})
    errors = []

    def done(err, _msg):
        if err is not None:
            errors.append(err)

    t0 = time.perf_counter()
    for i, k in enumerate(seq):
        at = (i * 7919) % MIB
        while True:
            try:
                p.produce(topic, blob[at:at + value_bytes], b"key-%08d" % k, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"produce to {bootstrap}: {left} undelivered, errors {errors[:3]}")
    return time.perf_counter() - t0


def surviving_offsets(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cleaner-bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 16777216})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + 300
        while (not out or out[-1] < high - 1) and time.monotonic() < deadline:
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    out.append(m.offset())
        return out
    finally:
        c.close()


def expected_offsets(seq: array, active_base: int) -> list[int]:
    last = {}
    for off in range(min(active_base, len(seq))):
        last[seq[off]] = off
    return sorted(last.values()) + list(range(active_base, len(seq)))


def active_base(partition_dir: Path) -> int:
    return max(int(p.name[:-4]) for p in partition_dir.glob("*.log"))


# ------------------------------------------------------------------------------------------------ brokers

def admin_of(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str) -> None:
    cfg = {"cleanup.policy": "compact", "segment.bytes": str(16 * MIB), "min.cleanable.dirty.ratio": "0.01",
           "min.compaction.lag.ms": str(HOLD_MS), "compression.type": "producer"}
    admin = admin_of(bootstrap)  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1, config=cfg)])[topic].result(60)


def release_cleaning(bootstrap: str, topic: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_of(bootstrap)
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(60)


def wait_for(read_text, pattern: re.Pattern, since: int, topic: str, timeout: float = 900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in pattern.finditer(read_text()[since:]):
            if topic in m["log"]:
                return m
        time.sleep(0.25)
    raise RuntimeError(f"no cleaner line for {topic} in {timeout} s")


def cleanable_mib(partition_dir: Path) -> float:
    """MiB of the segments below the active one: what one round cleans here (nothing was cleaned before)."""
    segs = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.name[:-4]))
    return sum(p.stat().st_size for p in segs[:-1]) / MIB


def clean_kafka(broker, topic: str) -> dict:
    cleanable = cleanable_mib(broker.server.log_dir / f"{topic}-0")
    since = len(broker.server.output())
    vk.sync()
    release_cleaning(broker.bootstrap, topic)
    m = wait_for(broker.server.output, KAFKA_STATS, since, topic)
    # the line rounds seconds to 0.1; its MB/sec comes from the exact time
    secs = _num(m["mb"]) / _num(m["mbs"])
    return {"cleanable_mb": round(cleanable, 2), "seconds": round(secs, 3), "mb_s": round(cleanable / secs, 2),
            "own_mb_s": _num(m["mbs"]), "records_read": int(_num(m["start_msgs"])),
            "records_kept": int(_num(m["end_msgs"])), "mb_written": _num(m["end_mb"]),
            "line": " ".join(m[0].split())}


def clean_tierlog(broker, topic: str, profile: Path | None = None) -> dict:
    cleanable = cleanable_mib(partition_dir_of(broker, topic))
    read = lambda: broker.output.read_text(errors="replace")  # noqa: E731
    since = len(read())
    vk.sync()
    if profile is not None:
        with vk.sampled(broker.pid, profile):
            release_cleaning(broker.bootstrap, topic)
            m = wait_for(read, TIERLOG_STATS, since, topic)
    else:
        release_cleaning(broker.bootstrap, topic)
        m = wait_for(read, TIERLOG_STATS, since, topic)
    secs = float(m["secs"])
    # bytes_read counts the offset-map pass and the copy pass; Kafka's "MB of log processed" only the copy
    return {"cleanable_mb": round(cleanable, 2), "seconds": secs, "mb_s": round(cleanable / secs, 2),
            "own_mb_s": round(int(m["bytes_read"]) / MIB / secs, 2), "records_read": int(m["read"]),
            "records_kept": int(m["kept"]), "mb_written": round(int(m["bytes_written"]) / MIB, 1), "line": m[0]}


def partition_dir_of(broker, topic: str) -> Path:
    return next(p for p in (broker.work / "logs").rglob(f"{topic}-0") if p.is_dir())


def one_run(run: int, args, seq: array, work: Path, profile: Path | None = None) -> dict:
    settings = {"log.cleaner.backoff.ms": "500"}
    kafka = vk.KafkaBroker(work, overrides=settings)
    tierlog = vk.TierlogBroker(work, overrides=settings)
    topic = f"compacted-{run}"
    try:
        kafka.start()
        tierlog.start()
        out = {}
        for b in (kafka, tierlog):
            create_topic(b.bootstrap, topic)
            secs = produce(b.bootstrap, topic, seq, args.value_bytes)
            log(f"run {run}: produced {len(seq)} records to {b.name} in {secs:.1f} s")
        order = (kafka, tierlog) if run % 2 == 0 else (tierlog, kafka)
        for b in order:
            if b is kafka:
                out["kafka"] = clean_kafka(kafka, topic)
            else:
                out["tierlog"] = clean_tierlog(tierlog, topic, profile)
            log(f"run {run}: {b.name} cleaned: {out[b.name]['line']}")
        dirs = {"kafka": kafka.server.log_dir / f"{topic}-0",
                "tierlog": partition_dir_of(tierlog, topic)}
        for b in (kafka, tierlog):
            base = active_base(dirs[b.name])
            got = surviving_offsets(b.bootstrap, topic)
            want = expected_offsets(seq, base)
            out[b.name].update({"active_segment_base": base, "surviving_records": len(got),
                                "expected_records": len(want), "survivors_exact": got == want})
        out["ratio"] = round(out["tierlog"]["mb_s"] / out["kafka"]["mb_s"], 3)
        out["first"] = order[0].name
        return out
    finally:
        for b in (tierlog, kafka):
            try:
                b.stop()
            except Exception as e:  # noqa: BLE001 - stop the other one regardless
                log(f"stopping {b.name}: {e}")


# ------------------------------------------------------------------------------------------------ profile

# The cleaner's steps, by the frames of a sample (the first match wins).
STEPS = [
    ("decode kept records of rebuilt batches (_kept_records, decode_varint/varlong)",
     ("_kept_records", "_walk_records", "decode_var")),
    ("rebuild batches: per-record re-encode + CRC (_rebuild_batch)", ("_rebuild_batch",)),
    ("record scanner: batch and record tables, key hashes (scan_batches, compiled)", ("scan_batches",
                                                                                       "scan_batch_records")),
    ("offset map puts, compiled (OffsetMap.put_batches)", ("OffsetMap.",)),
    ("retain decision, compiled (retain_batches)", ("retain_batches",)),
    ("read segments (_chunks: pread)", ("_chunks",)),
    ("write cleaned files + indexes, fsync (clean_group)", ("clean_group",)),
    ("offset map pass, the rest (build_offset_map, _map_read)", ("build_offset_map",)),
    ("copy pass, the rest (_clean_batch, _retained_batches: per-batch headers)", ("_clean_batch",
                                                                                  "_retained_batches")),
]


def summarize(path: Path) -> dict:
    """Shares of the cleaner's steps among the samples of the cleaner's worker thread (stacks under
    CleaningRound.run); the rest of the broker (idle event loop) is left out."""
    steps: Counter = Counter()
    self_n: Counter = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if "CleaningRound.run" not in stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if f.strip()]
        leafward = ";".join(frames[[i for i, f in enumerate(frames) if "CleaningRound.run" in f][-1]:])
        # innermost step first: a varint decode inside _walk_records inside build_offset_map is "walk records"
        steps[next((label for label, keys in STEPS if any(k in leafward for k in keys)), "other")] += n
        self_n[vk._short(frames[-1])[0]] += n
    pct = (lambda c: round(100 * c / total, 1)) if total else (lambda c: 0.0)
    return {"cleaner_samples": total, "steps": [[k, pct(c)] for k, c in steps.most_common()],
            "self": [[k, pct(c)] for k, c in self_n.most_common(12)]}


# ------------------------------------------------------------------------------------------------ in process

def in_process(args, seq: array, runs: int) -> dict:
    """tierlog's cleaner without a broker: the same records written with ``Log.append_as_leader`` in
    batches of about ``batch.size`` (64 KiB, as the producer above), one ``clean_log_now`` round timed;
    beside it, for reference, the per-record Python work the cleaner did before its passes ran in compiled
    code, timed on the same batches in memory: the record walk (varint decode and key copy,
    ``_walk_records``) twice, as the map and the copy pass did, and the walk with the MD5 and the dict
    put/get."""
    sys.path.insert(0, str(ROOT / "src"))
    from tierlog.records import RECORD_BATCH_OVERHEAD, build_batch, read_header
    from tierlog.storage import Log, LogConfig
    from tierlog.storage.cleaner import _walk_records, clean_log_now

    def key_hash(key: bytes) -> bytes:  # the MD5 the cleaner's map keyed on before the record scanner
        return hashlib.md5(key, usedforsecurity=False).digest()

    blob = random.Random(11).randbytes(MIB + args.value_bytes)
    per_batch = 65536 // (args.value_bytes + 30)
    batches = []
    for start in range(0, len(seq), per_batch):
        recs = [(b"key-%08d" % seq[i], blob[(i * 7919) % MIB:(i * 7919) % MIB + args.value_bytes])
                for i in range(start, min(start + per_batch, len(seq)))]
        batches.append(build_batch(recs))
    out = {"round_s": [], "mb_s": [], "walk_twice_s": [], "walk_hash_map_s": []}
    for _ in range(runs):
        work = tempfile.mkdtemp(prefix="tierlog-cleaner-inproc-")
        try:
            lg = Log.open(str(Path(work) / "t-0"), "t", 0, LogConfig(cleanup_policy=("compact",),
                                                                     segment_bytes=16 * MIB))
            for b in batches:
                lg.append_as_leader(b)
            lg.update_high_watermark(lg.log_end_offset)
            cleanable = sum(s.size for s in lg.segments[:-1]) / MIB
            active = lg.segments[-1].base_offset  # the round cleans below it; so do the loops here
            headers, base = [], 0
            for b in batches:  # built at offset 0; the log gave them consecutive offsets
                h = read_header(b)
                if base + h.last_offset_delta < active:
                    headers.append((h, memoryview(b)[RECORD_BATCH_OVERHEAD:]))
                base += h.records_count
            t0 = time.perf_counter()
            for _pass in range(2):
                for h, section in headers:
                    for _rec in _walk_records(section, h.records_count):
                        pass
            out["walk_twice_s"].append(time.perf_counter() - t0)
            m: dict = {}
            t0 = time.perf_counter()
            for h, section in headers:  # the map pass
                for rec in _walk_records(section, h.records_count):
                    m[key_hash(rec[6])] = h.base_offset + rec[5]
            for h, section in headers:  # the copy pass's lookups
                for rec in _walk_records(section, h.records_count):
                    m.get(key_hash(rec[6]), -1)
            out["walk_hash_map_s"].append(time.perf_counter() - t0)
            os.sync()
            t0 = time.perf_counter()
            res = clean_log_now(lg)
            dt = time.perf_counter() - t0
            out["round_s"].append(dt)
            out["mb_s"].append(cleanable / dt)
            assert res is not None and res.stats.records_kept <= args.keys + per_batch * 300
            lg.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"in_process_mb_s": round(med["mb_s"], 2), "in_process_round_s": round(med["round_s"], 3),
            "in_process_walk_twice_s": round(med["walk_twice_s"], 3),
            "in_process_walk_hash_map_s": round(med["walk_hash_map_s"], 3),
            "in_process_walk_share": round(med["walk_twice_s"] / med["round_s"], 3),
            "in_process_per_record_share": round(med["walk_hash_map_s"] / med["round_s"], 3),
            "in_process_runs": {k: [round(x, 3) for x in v] for k, v in out.items()}}


# ------------------------------------------------------------------------------------------------ main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=150, help="MiB of record values and keys produced")
    ap.add_argument("--keys", type=int, default=50000)
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--in-process", action="store_true", help="also time tierlog's cleaner without a broker")
    ap.add_argument("--skip-brokers", action="store_true", help="only the in-process figures")
    args = ap.parse_args()
    n = args.mb * MIB // (args.value_bytes + 12)
    seq = key_sequence(n, args.keys)
    log(f"{n} records of {args.value_bytes}-byte values over {args.keys} keys")
    if args.skip_brokers:
        print(json.dumps({"bench": "cleaner", "records": n, **in_process(args, seq, args.runs)}))
        return 0
    runs = []
    for run in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="tierlog-cleaner-bench-"))
        try:
            runs.append(one_run(run, args, seq, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    med = lambda side, k: statistics.median(r[side][k] for r in runs)  # noqa: E731
    result = {"bench": "cleaner", "runs": args.runs, "records": n, "keys": args.keys,
              "value_bytes": args.value_bytes, "segment_bytes": 16 * MIB,
              "kafka_mb_s": med("kafka", "mb_s"), "tierlog_mb_s": med("tierlog", "mb_s"),
              "kafka_seconds": med("kafka", "seconds"), "tierlog_seconds": med("tierlog", "seconds"),
              "ratio": statistics.median(r["ratio"] for r in runs),
              "survivors_exact": all(r[s]["survivors_exact"] for r in runs for s in ("kafka", "tierlog")),
              "kafka_records_kept": med("kafka", "records_kept"),
              "tierlog_records_kept": med("tierlog", "records_kept")}
    result["target_met"] = result["ratio"] >= TARGET
    if args.profile and vk.py_spy():
        work = Path(tempfile.mkdtemp(prefix="tierlog-cleaner-bench-"))
        prof = RESULTS / "cleaner_profile_tierlog.txt"
        try:
            pr = one_run(args.runs, args, seq, work, profile=prof)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result["profiled_tierlog_mb_s"] = pr["tierlog"]["mb_s"]
        result["profile"] = summarize(prof)
    if args.in_process:
        result.update(in_process(args, seq, args.runs))
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "cleaner.json").write_text(json.dumps({**result, "every_run": runs}, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
