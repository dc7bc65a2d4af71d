"""Throughput of the produce path's record validator (tierlog.records.validation) on one core.

Batches of about 16 KiB (the Java producer's default batch.size) of 1 KiB records and of 50-byte records,
uncompressed and compressed with lz4 and zstd, each validated over and over with the compiled kernel as
``Log.append_as_leader`` calls it. ``*_mb_s`` counts the batch's bytes as sent (the compressed size for lz4/zstd),
``*_uncompressed_mb_s`` the same batch uncompressed. One JSON line:

    PYTHONPATH=src python bench/validate_records.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from tierlog.records import build_batch, read_header, validation

BATCH_BYTES = 16 * 1024


def _records(record_bytes: int, now: int) -> list:
    n = max(1, BATCH_BYTES // (record_bytes + 12))
    # values that compress about 3:1, as JSON log lines do: random hex digits with a fixed part
    return [(b"key-%08d" % i, (b'{"level":"info","n":%08d,"msg":"' % i + os.urandom(record_bytes).hex().encode())
             [:record_bytes], [], now) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per case")
    args = ap.parse_args()
    now = int(time.time() * 1000)
    out = {"bench": "validate_records"}
    records_of = {size: _records(size, now) for size in (1024, 50)}
    for record_bytes in (1024, 50):
        for codec in ("none", "lz4", "zstd"):
            batch = build_batch(records_of[record_bytes], compression=codec)
            header = read_header(batch)
            kwargs = {"now_ms": now, "create_time": True, "before_max_ms": (1 << 63) - 1,
                      "after_max_ms": 3_600_000, "compacted": True, "max_message_bytes": 1048588}
            validation.validate_batch_records(batch, 0, header, **kwargs)
            n = 0
            started = time.perf_counter()
            while time.perf_counter() - started < args.seconds:
                for _ in range(100):
                    validation.validate_batch_records(batch, 0, header, **kwargs)
                n += 100
            elapsed = time.perf_counter() - started
            key = f"{record_bytes}B_{codec}"
            records_bytes = len(build_batch(records_of[record_bytes]))
            out[f"{key}_mb_s"] = round(n * len(batch) / elapsed / 1e6, 1)
            out[f"{key}_uncompressed_mb_s"] = round(n * records_bytes / elapsed / 1e6, 1)
            out[f"{key}_us_per_batch"] = round(elapsed / n * 1e6, 2)
            out[f"{key}_records_per_batch"] = header.records_count
            out[f"{key}_batch_bytes"] = len(batch)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
