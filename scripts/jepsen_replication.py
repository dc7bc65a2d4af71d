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
    python scripts/jepsen_replication.py --system all --cycles 40 --minutes 15   # side by side with Kafka

``--system`` names the cluster under the faults: ``tierlog`` (the default), ``kafka39`` (Apache Kafka 3.9.1 in
ZooKeeper mode), ``kafka44`` (Apache Kafka 4.4.0 in KRaft mode: three combined broker+controller nodes), a
comma-separated list of them, ``both`` (tierlog,kafka39) or ``all``. With more than one, the schedule (the kinds
of every cycle) is drawn once from the seed and each system runs it in turn, ``--minutes`` each; a fault kind a
system has no counterpart for (KRaft: ``zk-cut``, ``zk-restart``, ``disk-full``) is left out of its schedule and
shown as "n/a". The run ends with the systems side by side: the checker's counts (all 0 but acknowledged), and
per kind of cycle the longest time a partition went without an acknowledgement (fault to settled, median and
worst) and the time from the heal to every partition's full ISR (median). The schedule is drawn from the seed
before any system runs, so runs of one system each made apart (in parallel, say) with the same seed, cycles,
kinds and ``--mixed`` get the same schedule too; ``--table LOG...`` prints their side-by-side table from their
output (the last line of each is the verdict as one JSON object).

Exit status: 0 when nothing was violated and the cluster always came back, 1 otherwise, 2 when the watchdog
had to stop a run that overran its time by ten minutes. Everything runs on 127.0.0.1; the cluster, its
ZooKeeper and the tmpfs of the disk-full fault (root only; skipped otherwise) are stopped and unmounted at the
end. The brokers' output is kept in the work folder (printed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness.jepsen import systems as jepsen_systems  # noqa: E402
from tests.harness.jepsen.nemesis import KINDS  # noqa: E402
from tests.harness.jepsen.run import Settings, draw_schedule, figures, run, schedule_for  # noqa: E402
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
    parser.add_argument("--broker-start-timeout", type=float, default=120,
                        help="seconds a restarted broker has to be ready (default 120)")
    parser.add_argument("--system", default="tierlog",
                        help="tierlog, kafka39, kafka44, a comma-separated list of them, both (tierlog,kafka39) "
                             "or all (default tierlog)")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new folder under /tmp")
    parser.add_argument("--table", type=Path, nargs="+", metavar="LOG",
                        help="print the side-by-side table of runs made apart (their output files) and exit")
    args = parser.parse_args(argv)
    if args.table:
        return table_of(args.table)
    chosen = {"both": "tierlog,kafka39", "all": ",".join(jepsen_systems.SYSTEMS)}.get(args.system, args.system)
    systems = [x for x in chosen.split(",") if x]
    if not systems or any(x not in jepsen_systems.SYSTEMS for x in systems):
        parser.error(f"unknown --system {args.system}; known: {', '.join(jepsen_systems.SYSTEMS)}, both, all")
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown fault kinds {unknown}; known: {', '.join(KINDS)}")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="tierlog-jepsen-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(seed=args.seed, cycles=args.cycles, minutes=args.minutes, kinds=kinds,
                        mixed_probability=args.mixed, partitions=args.partitions,
                        min_insync_replicas=args.min_insync_replicas, isr_target=args.isr_target,
                        producers=args.producers, produce_interval=args.interval,
                        txn_producers=args.txn_producers, readers=args.readers,
                        broker_start_timeout=args.broker_start_timeout,
                        broker_settings={**Settings().broker_settings, **dict(kv.split("=", 1) for kv in args.broker)})
    stop_on_signals()
    start_watchdog(len(systems) * (args.minutes * 60 + GRACE_S),
                   lambda: [unmount_tmpfs(work_dir / x if len(systems) > 1 else work_dir) for x in systems])
    started = time.monotonic()
    print(f"fault run on {', '.join(systems)}: seed {args.seed}, up to {args.cycles} cycles or {args.minutes:g} "
          f"minutes each, kinds {', '.join(kinds)}; work folder {work_dir}", flush=True)
    # drawn before any system runs: every system (and a run of one system in another process, same seed) gets
    # the same kinds of cycles in the same order
    schedule = draw_schedule(args.seed, args.cycles, kinds, args.mixed)
    results = {}
    for system in systems:
        folder = work_dir / system if len(systems) > 1 else work_dir
        folder.mkdir(exist_ok=True)
        report = run(folder, Settings(system=system, schedule=schedule_for(system, schedule), **settings),
                     echo=lambda line, system=system: print(f"{system}: {line}", flush=True))
        print("\n" + "=" * 100 + f"\n{jepsen_systems.TITLES[system]}: " + report.format(), flush=True)
        print(f"(took {report.elapsed:.0f} s; broker output in {folder}/broker-N.out; replay with --seed {args.seed} "
              f"--cycles {args.cycles} --kinds {','.join(kinds)} --mixed {args.mixed:g})", flush=True)
        results[system] = {**counts(report), "figures": figures(report, args.partitions)}
    if len(systems) > 1:
        print("\n" + side_by_side(results))
    verdict = {"seed": args.seed, "systems": results, "ok": all(r["ok"] for r in results.values()),
               "seconds": round(time.monotonic() - started)}
    print(json.dumps(verdict), flush=True)
    return 0 if verdict["ok"] else 1


def table_of(logs: list[Path]) -> int:
    """The side-by-side table of runs made apart (one system each, the same seed): their last JSON lines."""
    results = {}
    for log in logs:
        last = [line for line in log.read_text(errors="replace").splitlines() if line.startswith('{"seed"')][-1]
        results.update(json.loads(last)["systems"])
    print(side_by_side(results))
    return 0


def counts(report) -> dict:
    """The checker's figures of one system's run."""
    h = report.history
    outcomes = Counter(t.outcome for t in h.txns)
    return {"cycles": len(report.cycles), "mixed": sum(len(c.kinds) > 1 for c in report.cycles),
            "acknowledged": len(h.acks), "lost": len(report.lost), "duplicated": len(report.duplicated),
            "re-sent (client epoch bump)": len(report.resent), "reordered": len(report.reordered),
            "offset mismatches": len(report.mismatched),
            "offset regressions": len(report.offset_regressions), "divergent": len(report.divergent),
            "txn committed": outcomes.get("committed", 0), "txn aborted": outcomes.get("aborted", 0),
            "txn anomalies": len(report.txn_anomalies), "liveness": len(report.liveness),
            "skipped": report.skipped_kinds, "ok": report.ok, "seconds": round(report.elapsed)}


def side_by_side(results: dict[str, dict]) -> str:
    """Per kind of cycle and system: unavailable s (median/worst), ISR full s after the heal (median), cycles;
    "n/a" where the system has no counterpart; then the checker's counts."""
    from statistics import median
    names = list(results)
    keys = sorted({k for r in results.values() for k in r["figures"]}, key=lambda k: (k.count("+"), k))
    width = 30
    lines = [f"{'':38}" + "".join(f"{jepsen_systems.TITLES[s]:>{width}}" for s in names),
             f"{'':38}" + "".join(f"{'unavail. med/max  ISR full  n':>{width}}" for _ in names)]
    for key in keys:
        row = f"{key:38}"
        for s in names:
            f = results[s]["figures"].get(key)
            if not set(key.split("+")) <= set(jepsen_systems.COUNTERPARTS[s]):
                cell = "n/a"
            elif not f:
                cell = "-"
            else:
                u, i, short = f["unavailable"], f["isr_full"], f["isr_not_full"]
                full = f"{median(i):.1f}" if i else "-"
                if short:  # cycles whose ISR was not full when the settle's time ran out
                    full += f" ({len(short)}!)"
                cell = f"{median(u):.1f}/{max(u):.1f}  {full:>8}  {len(u)}"
            row += f"{cell:>{width}}"
        lines.append(row)
    for what in ("cycles", "mixed", "acknowledged", "lost", "duplicated", "re-sent (client epoch bump)", "reordered",
                 "offset mismatches", "offset regressions", "divergent", "txn committed", "txn aborted",
                 "txn anomalies", "liveness", "seconds"):
        lines.append(f"{what:38}" + "".join(f"{results[s].get(what, '-')!s:>{width}}" for s in names))
    lines.append("unavailable: the longest time a partition went without an acknowledgement, from the fault to the "
                 "settled cluster (s); ISR full: from the heal until every partition's ISR was full (median, s); "
                 "(k!): k cycles whose ISR was still short after the settle's 120 s; n: cycles; n/a: no "
                 "counterpart in that system")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
