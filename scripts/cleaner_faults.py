#!/usr/bin/env python3
"""The log cleaner under SIGKILL (docs/operations.md, "Fault runs"): one tierlog broker, a compacted topic with
64 KiB segments and a cleaner that never rests, ``--cycles`` cycles of keyed writes and tombstones (acks=all)
each ending in a SIGKILL while a cleaning round runs (while it maps, copies, between two groups' swaps, or
inside a swap, in turn and then drawn from ``--seed``), a restart, and checks: no left-over ``.cleaned`` or
``.swap`` file, segments on disk in increasing offsets without overlap, and the topic read from earliest holding
every key's latest acknowledged value and no deleted key's older value (tests/harness/cleaner_faults.py).

Prints one JSON line (counts and verdict) and exits 0 when nothing was lost, resurrected or inconsistent, 1
otherwise::

    python scripts/cleaner_faults.py                   # 20 cycles, about five minutes on two cores
    python scripts/cleaner_faults.py --cycles 50 --seed 7

The CI suite runs the short version: tests/faults/test_cleaner_crash.py (four cycles, one per kill point).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness import cleaner_faults as cf  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keys", type=int, default=3000, help="distinct keys written")
    ap.add_argument("--throttle", type=int, default=1048576,
                    help="log.cleaner.io.max.bytes.per.second (a slower cleaner is caught in each phase more often)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for a kill point before falling back")
    ap.add_argument("--workdir", help="where the broker's log dir goes (kept); default a temporary folder")
    args = ap.parse_args()
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="cleaner-faults-"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    run = cf.Run(keys=args.keys)
    b = None
    error = None
    started = time.monotonic()
    try:
        b = cf.start_broker(folder, args.throttle)
        for n in range(args.cycles):
            report = cf.cycle(b, run, n, rng, timeout=args.timeout)
            print(f"[cleaner-faults {time.strftime('%H:%M:%S')}] " + json.dumps(report), file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - reported in the verdict
        error = f"{type(e).__name__}: {e}"
    finally:
        if b is not None:
            b.stop()
            (folder / "broker.out").write_text("".join(b.output))  # every start's output, for a failed run
    result = {**cf.summary(run, b), "seed": args.seed, "seconds": round(time.monotonic() - started),
              "workdir": str(folder), "error": error}
    result["ok"] = result["ok"] and error is None and len(run.cycles) == args.cycles
    if run.violations:
        result["first_violations"] = run.violations[:10]
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
