"""Throughput of the produce path's record validator (tierlog.records.validation) on one core.

Batches of about 16 KiB (the Java producer's default batch.size) of 1 KiB records and of 50-byte records,
uncompressed and compressed with lz4 and zstd, each validated over and over with the compiled kernel as
``Log.append_as_leader`` calls it. MB/s counts the batch's bytes as sent (compressed size for lz4/zstd) and,
for compressed batches, the decompressed records too. One JSON line:

    PYTHONPATH=src python bench/validate_records.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from tierlog.records import build_batch, read_header, validation

BATCH_BYTES = 16 * 1024


def _batch(record_bytes: int, codec: str, now: int) -> bytes:
    n = max(1, BATCH_BYTES // (record_bytes + 12))
    # values that compress the way log lines do: a fixed part and a counter
    records = [(b"key-%08d" % i, (b"%08d " % i + os.urandom(8).hex().encode() * (record_bytes // 16 + 1))
                [:record_bytes], [], now) for i in range(n)]
    return build_batch(records, compression=codec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per case")
    args = ap.parse_args()
    compile_s = validation.warm_up()
    now = int(time.time() * 1000)
    out = {"bench": "validate_records", "compile_or_cache_load_s": round(compile_s, 3)}
    for record_bytes in (1024, 50):
        for codec in ("none", "lz4", "zstd"):
            batch = _batch(record_bytes, codec, now)
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
            out[f"{key}_mb_s"] = round(n * len(batch) / elapsed / 1e6, 1)
            out[f"{key}_us_per_batch"] = round(elapsed / n * 1e6, 2)
            out[f"{key}_records_per_batch"] = header.records_count
            out[f"{key}_batch_bytes"] = len(batch)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
