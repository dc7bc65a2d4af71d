"""Storage engine benchmark: tierlog's log next to plain file I/O of the same bytes.

Prints one JSON line:
- append and read throughput (MB/s) through ``Log.append_as_leader`` / ``Log.read`` for 16 KiB and
  1 MiB batches, next to plain ``os.write`` / ``os.pread`` of the same bytes in the same process,
  and their ratios (``append_ratio`` / ``read_ratio`` are the 1 MiB figures);
- the time to reopen a cleanly closed ~1 GiB log of 1,000 segments (``reopen_s``).

Every figure is the median of ``--runs`` runs (the machine is shared and noisy). Reads are served
from the page cache in both the baseline and tierlog, so they compare software overhead. Appends validate
every record with the compiled kernel (``records/_validation.c``), as the broker does: ``kernel`` says
which build was measured (the tree's own, built by ``pip install -e .``).

    python bench/storage.py [--runs 5] [--mb 256] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tierlog.records import _validation, build_batch  # noqa: E402
from tierlog.storage import Log, LogConfig, LogManager  # noqa: E402

KIB = 1024
MIB = 1024 * 1024


def make_batch(size: int) -> bytes:
    """An uncompressed batch of 1 KiB records, about ``size`` bytes in all."""
    n = max(1, size // (KIB + 16))
    return build_batch([(None, os.urandom(KIB))] * n)


def plain_append(path: str, batch: bytes, count: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t0 = time.perf_counter()
    for _ in range(count):
        os.write(fd, batch)
    dt = time.perf_counter() - t0
    os.close(fd)
    return dt


def plain_read(path: str, size: int, count: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    t0 = time.perf_counter()
    pos = 0
    for _ in range(count):
        data = os.pread(fd, size, pos)
        pos += len(data)
    dt = time.perf_counter() - t0
    os.close(fd)
    return dt


def log_append(directory: str, batch: bytes, count: int) -> tuple[float, Log]:
    lg = Log.open(directory, "bench", 0, LogConfig())
    t0 = time.perf_counter()
    for _ in range(count):
        lg.append_as_leader(batch)
    dt = time.perf_counter() - t0
    lg.update_high_watermark(lg.log_end_offset)
    return dt, lg


def log_read(lg: Log, batch_len: int, records_per_batch: int, count: int) -> float:
    t0 = time.perf_counter()
    offset = 0
    for _ in range(count):
        data = lg.read(offset, batch_len).region.read()
        # The consumer's side: every batch is the same size here, so the next offset is arithmetic.
        offset += records_per_batch * (len(data) // batch_len)
    dt = time.perf_counter() - t0
    assert offset == lg.log_end_offset, (offset, lg.log_end_offset)
    return dt


def throughput(root: str, size: int, total_mb: int, runs: int) -> dict:
    batch = make_batch(size)
    count = max(1, total_mb * MIB // len(batch))
    mb = count * len(batch) / 1e6
    res = {"plain_write": [], "append": [], "plain_read": [], "read": []}
    for run in range(runs):
        work = tempfile.mkdtemp(dir=root)
        try:
            plain = os.path.join(work, "plain.bin")
            # Start each timed write with no dirty pages pending, and alternate which goes first,
            # so page-cache writeback does not favour either side.
            for side in (("plain", "log") if run % 2 == 0 else ("log", "plain")):
                os.sync()
                if side == "plain":
                    res["plain_write"].append(mb / plain_append(plain, batch, count))
                else:
                    dt, lg = log_append(os.path.join(work, "bench-0"), batch, count)
                    res["append"].append(mb / dt)
            for side in (("plain", "log") if run % 2 == 0 else ("log", "plain")):
                if side == "plain":
                    res["plain_read"].append(mb / plain_read(plain, len(batch), count))
                else:
                    per_batch = lg.log_end_offset // count
                    res["read"].append(mb / log_read(lg, len(batch), per_batch, count))
            lg.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    return {
        "batch_bytes": len(batch),
        "append_mb_s": round(med["append"], 1),
        "plain_write_mb_s": round(med["plain_write"], 1),
        "append_ratio": round(med["append"] / med["plain_write"], 3),
        "read_mb_s": round(med["read"], 1),
        "plain_read_mb_s": round(med["plain_read"], 1),
        "read_ratio": round(med["read"] / med["plain_read"], 3),
    }


def reopen(root: str, runs: int, segments: int = 1000) -> dict:
    work = tempfile.mkdtemp(dir=root)
    try:
        batch = make_batch(MIB)
        seg_bytes = len(batch) + 1
        cfg = LogConfig(segment_bytes=seg_bytes)
        m = LogManager([work], lambda topic: cfg)
        m.startup()
        lg = m.get_or_create_log("bench", 0, cfg)
        for _ in range(segments):
            lg.append_as_leader(batch)
        assert len(lg.segments) == segments, len(lg.segments)
        size = lg.size_in_bytes
        m.shutdown()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            m = LogManager([work], lambda topic: cfg)
            m.startup()
            times.append(time.perf_counter() - t0)
            assert m.get_log("bench", 0).log_end_offset == lg.log_end_offset
            m.shutdown()
        return {"reopen_s": round(statistics.median(times), 4), "reopen_log_bytes": size,
                "reopen_segments": segments}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=256, help="MiB written per throughput run")
    ap.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = ap.parse_args()
    root = args.dir or tempfile.gettempdir()
    small = throughput(root, 16 * KIB, args.mb, args.runs)
    large = throughput(root, MIB, args.mb, args.runs)
    out = {"bench": "storage", "runs": args.runs, "mb_per_run": args.mb, "kernel": _validation.__file__}
    out.update({f"{k}_16k": v for k, v in small.items()})
    out.update({f"{k}_1m": v for k, v in large.items()})
    out["append_ratio"] = large["append_ratio"]
    out["read_ratio"] = large["read_ratio"]
    out.update(reopen(root, args.runs))
    out["targets_met"] = out["append_ratio"] >= 0.8 and out["read_ratio"] >= 0.9 and out["reopen_s"] < 1.0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
