#!/usr/bin/env python3
"""A fault run with real network partitions: ZooKeeper and three brokers each in a network namespace, faults made
with nftables inside the namespaces (docs/operations.md, "Fault runs").

Two idempotent producers (acks=all) and two plain readers run against a topic of three partitions (three replicas,
min.insync.replicas=2) while a seeded schedule applies, one per cycle, to the leader of a partition drawn at
random: cut from ZooKeeper, cut one way from a follower, unable to send to the controller, isolated from everyone,
5 % packet loss both ways, cut from both followers, or flapping (isolated and healed six times, then isolated).
Each fault is held until the cluster shows it (the partition led elsewhere or its ISR shrunk, at most 20 s),
healed, and settled (one controller, every ISR back to three, writes acknowledged on every partition) before the
next. Then every partition is read back and the checker reports
lost, duplicated, reordered and misplaced acknowledged writes and offsets at which the readers and the final read
disagree. The last line is the verdict as one JSON object::

    python scripts/netns_faults.py                          # 10 cycles, seed 1, at most 10 minutes
    python scripts/netns_faults.py --cycles 40 --minutes 30 --seed 7
    python scripts/netns_faults.py --system both            # tierlog, then Kafka 3.9: the same schedule
    python scripts/netns_faults.py --zookeepers 3           # an ensemble of three; adds the zk-split fault
    python scripts/netns_faults.py --inter-broker sasl_ssl  # brokers talk SCRAM-SHA-512 over TLS (port 9093)
    python scripts/netns_faults.py --latency-ms 100         # every link between namespaces 100 ms each way

``--system kafka`` runs the schedule against Apache Kafka 3.9's brokers (ZooKeeper mode, the same settings);
``both`` runs tierlog and then Kafka and prints them side by side: records lost (both must be 0), the longest
time without an acknowledgement per fault kind, and the time from the heal until every ISR was full again.

Exit status 0 when nothing was violated and every cycle settled, 1 otherwise, 2 when the watchdog had to stop a
run that overran its time by five minutes. Needs root, ``ip`` and ``nft``. Every process is stopped by PID and
the namespaces, veths and bridge (named ``tlns...``) removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness import netns  # noqa: E402
from tests.harness.jepsen.netns_faults import KINDS, run_schedule, summary  # noqa: E402
from tests.harness.jepsen.script_guard import start_watchdog, stop_on_signals  # noqa: E402
from tests.harness.netns_cluster import kafka_netns_cluster, netns_cluster  # noqa: E402

GRACE_S = 300
#: both systems: a follower silent for 5 s leaves the ISR; ZooKeeper sessions of 6 s (the harnesses' default)
SETTINGS = {"replica.lag.time.max.ms": "5000", "zookeeper.session.timeout.ms": "6000"}
CLUSTERS = {"tierlog": netns_cluster, "kafka": kafka_netns_cluster}


def one_run(system: str, work_dir: Path, args, prefixes: list[str]) -> dict:
    with CLUSTERS[system](work_dir / system, settings=SETTINGS, zookeepers=args.zookeepers,
                          inter_broker=args.inter_broker, latency_ms=args.latency_ms) as nc:
        prefixes.append(nc.topology.prefix)
        report, numbers = run_schedule(nc, args.seed, args.cycles, args.minutes, args.partitions,
                                       echo=lambda line: print(f"{system}: {line}", flush=True))
    print(f"\n{system}: " + report.format(), flush=True)
    return {**summary(report), "cycles": len(report.cycles),
            "faults": {k: n for k, n in sorted(report.faults_by_kind().items())}, **numbers,
            "liveness": report.liveness}


def side_by_side(results: dict[str, dict]) -> str:
    """A table of the systems' figures per fault kind: the longest time without an acknowledgement and the time
    from the heal to a full ISR (median and worst of the cycles of that kind)."""
    from statistics import median
    systems = list(results)
    kinds = sorted({k for r in results.values() for k in r.get("longest_gap_s_by_kind", {})})
    head = f"{'':24}" + "".join(f"{s:>34}" for s in systems)
    lines = [head, f"{'':24}" + "".join(f"{'unavailable s med/max':>22}{'ISR full s':>12}" for _ in systems)]
    for kind in kinds:
        row = f"{kind:24}"
        for s in systems:
            gaps = results[s].get("longest_gap_s_by_kind", {}).get(kind, [])
            full = results[s].get("settled_s_after_heal_by_kind", {}).get(kind, [])
            row += (f"{median(gaps):>14.2f}/{max(gaps):<7.2f}" if gaps else f"{'-':>22}")
            row += (f"{median(full):>12.2f}" if full else f"{'-':>12}")
        lines.append(row)
    for what in ("acknowledged", "read_back", "lost", "duplicated", "reordered", "divergent"):
        lines.append(f"{what:24}" + "".join(f"{results[s].get(what, '-'):>34}" for s in systems))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10, help="fault cycles (default 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=10, help="no cycle begins after this (default 10)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--zookeepers", type=int, choices=(1, 3), default=1,
                        help="one ZooKeeper server, or an ensemble of three (adds the zk-split fault)")
    parser.add_argument("--system", choices=("tierlog", "kafka", "both"), default="tierlog",
                        help="the cluster under the schedule (both: tierlog, then Kafka 3.9)")
    parser.add_argument("--inter-broker", choices=("plaintext", "sasl_ssl"), default="plaintext",
                        help="the brokers' own listener: sasl_ssl is TLS with SCRAM-SHA-512 on port 9093")
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="delay every TCP connection between namespaces by this much each way, as netem's delay "
                             "on every interface would (a user-space delay line: this kernel has no netem)")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new folder under /tmp")
    args = parser.parse_args(argv)
    why = netns.available()
    if why is not None:
        print(json.dumps({"ok": False, "error": why}))
        return 1
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="tierlog-netns-"))
    stop_on_signals()
    prefixes: list[str] = []
    systems = ["tierlog", "kafka"] if args.system == "both" else [args.system]
    start_watchdog(len(systems) * args.minutes * 60 + GRACE_S, lambda: [netns.sweep(p) for p in prefixes],
                   json.dumps({"ok": False, "error": "watchdog"}))
    started = time.monotonic()
    print(f"netns fault run on {' and '.join(systems)}: seed {args.seed}, up to {args.cycles} cycles or "
          f"{args.minutes:g} minutes, kinds {', '.join(KINDS)}, latency {args.latency_ms:g} ms each way; "
          f"work folder {work_dir}", flush=True)
    results = {system: one_run(system, work_dir, args, prefixes) for system in systems}
    if len(systems) > 1:
        print("\n" + side_by_side(results), flush=True)
    verdict = {**(results[systems[0]] if len(systems) == 1 else {"systems": results}), "seed": args.seed,
               "latency_ms": args.latency_ms,
               "ok": all(r["ok"] and not r["liveness"] for r in results.values()),
               "seconds": round(time.monotonic() - started)}
    print(json.dumps(verdict), flush=True)
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
