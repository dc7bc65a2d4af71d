#!/usr/bin/env python3
"""The long Jepsen-style fault run against a replicated three-broker tierlog cluster (docs/operations.md,
"Fault runs").

Idempotent producers (acks=all) and a consumer group run against a topic with three replicas and
min.insync.replicas=2 while a nemesis, drawn from a seeded generator, kills, pauses, partitions and starves
brokers, cuts them from ZooKeeper and restarts ZooKeeper, one fault or two nested per cycle. At the end every
partition is read back and the report lists lost, duplicated, reordered and misplaced acknowledged writes,
committed offsets that went back, and the longest window without a leader::

    python scripts/jepsen_replication.py                       # 50 cycles, seed 1, at most 60 minutes
    python scripts/jepsen_replication.py --cycles 200 --seed 7 --minutes 120
    python scripts/jepsen_replication.py --kinds kill-leader,pause-leader --mixed 0

Exit status: 0 when nothing was violated and the cluster always came back, 1 otherwise, 2 when the watchdog
had to stop a run that overran its time by ten minutes. Everything runs on 127.0.0.1; the cluster, its
ZooKeeper and the tmpfs of the disk-full fault (root only; skipped otherwise) are stopped and unmounted at the
end. The brokers' output is kept in the work folder (printed at the end).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness.jepsen.nemesis import KINDS  # noqa: E402
from tests.harness.jepsen.run import Settings, run  # noqa: E402
from tests.harness.jepsen.script_guard import start_watchdog, stop_on_signals  # noqa: E402

#: What the run may take beyond ``--minutes`` (the cycle under way, the final settle, reading everything
#: back) before the watchdog stops it.
GRACE_S = 600


def unmount_tmpfs(work_dir: Path) -> None:
    from tests.faults.tmpfs import unmount
    for mount in work_dir.glob("broker-*"):
        if os.path.ismount(mount):
            unmount(mount)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=50, help="fault cycles (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="the nemesis's random seed (default 1)")
    parser.add_argument("--minutes", type=float, default=60,
                        help="no cycle begins after this many minutes (default 60)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds (default all: {','.join(KINDS)})")
    parser.add_argument("--mixed", type=float, default=0.3, help="probability of a mixed cycle (default 0.3)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--min-insync-replicas", type=int, default=2)
    parser.add_argument("--isr-target", type=int, default=None,
                        help="ISR size a settled partition has again (default: every replica)")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--txn-producers", type=int, default=1,
                        help="transactional producers (two partitions a transaction, every fourth aborted)")
    parser.add_argument("--readers", type=int, default=1, help="read_committed consumers reading throughout")
    parser.add_argument("--interval", type=float, default=0.01, help="each producer's pause between writes (s)")
    parser.add_argument("--broker", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every broker (repeatable)")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new folder under /tmp")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown fault kinds {unknown}; known: {', '.join(KINDS)}")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="tierlog-jepsen-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(seed=args.seed, cycles=args.cycles, minutes=args.minutes, kinds=kinds,
                        mixed_probability=args.mixed, partitions=args.partitions,
                        min_insync_replicas=args.min_insync_replicas, isr_target=args.isr_target,
                        producers=args.producers, produce_interval=args.interval,
                        txn_producers=args.txn_producers, readers=args.readers,
                        broker_settings={**Settings().broker_settings, **dict(kv.split("=", 1) for kv in args.broker)})
    stop_on_signals()
    start_watchdog(args.minutes * 60 + GRACE_S, lambda: unmount_tmpfs(work_dir))
    started = time.monotonic()
    print(f"fault run: seed {args.seed}, up to {args.cycles} cycles or {args.minutes:g} minutes, kinds "
          f"{', '.join(kinds)}; work folder {work_dir}", flush=True)
    report = run(work_dir, settings, echo=lambda line: print(line, flush=True))
    print("\n" + "=" * 100)
    print(report.format())
    print(f"(took {time.monotonic() - started:.0f} s; broker output in {work_dir}/broker-N.out; replay with "
          f"--seed {args.seed})")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
