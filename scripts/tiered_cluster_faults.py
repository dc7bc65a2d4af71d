#!/usr/bin/env python3
"""Tiered storage under leader kills on a three-broker cluster (docs/operations.md, "Fault runs"):

1. ZooKeeper and three tierlog brokers on 127.0.0.1 (tests/harness), the topic-based metadata manager's
   ``__remote_log_metadata`` with three replicas, tasks every 100 ms;
2. a topic with ``--partitions`` partitions, replication factor 3, ``min.insync.replicas=2``, small segments
   (``--segment-bytes``) and a tiny local retention, so nearly everything lives in the remote tier;
3. an idempotent acks=all confluent-kafka producer writes ``--megabytes`` of ``--record-bytes`` records,
   each value unique and checkable; meanwhile the leader of each partition in turn is SIGKILLed while it
   copies (once it has uploaded a segment in this leadership and the copy lag is not zero) and started
   again once a new leader is named;
4. once every rolled segment is uploaded: every partition is read from earliest with confluent-kafka and
   with kafka-python and compared byte for byte with what was acknowledged (offset, value); in upload
   order, the remote segments of each partition (their manifests) must leave no gap from offset 0 and each
   must add offsets not yet remote (a new leader's first segment may overlap the old leader's last, since
   replicas roll at different offsets and segments are uploaded whole, as in Kafka), each segment id once;
   ``tier reconcile`` on each partition's leader must report 0 orphaned and 0 missing objects.

Prints one JSON line (figures and verdict) and exits 0 when nothing was lost, duplicated, changed,
uploaded twice or skipped, 1 otherwise::

    python scripts/tiered_cluster_faults.py                    # 200 MB, 3 partitions
    python scripts/tiered_cluster_faults.py --megabytes 20     # a quick look

The CI suite runs the short version: tests/cluster/test_tiered_replication.py (one partition, one kill).
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

from tests.harness import zookeeper as zk  # noqa: E402
from tests.harness.broker import BrokerProcess  # noqa: E402
from tests.harness.tiered import call, tier_status, tiered_settings  # noqa: E402
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_until  # noqa: E402
from tests.harness.writer import BackgroundWriter  # noqa: E402
from tests.interop.clients import CLIENTS  # noqa: E402

from tierlog.tiered.rsm.layout import SegmentManifest  # noqa: E402

TOPIC = "tiered-faults"


def log(msg: str) -> None:
    print(f"[tiered-faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def leader_row(cluster, p: int) -> dict:
    leader = partition(cluster, TOPIC, p).leader_id
    rows = [r for r in tier_status(cluster.brokers[leader], TOPIC)["partitions"]
            if r["partition"] == p and r["role"] == "leader"]
    return rows[0] if rows else {}


def kill_while_copying(cluster, p: int, timeout: float) -> int:
    """SIGKILL partition ``p``'s leader while it uploads (remote segments grew, an upload in progress or a
    rolled segment waiting for one); start it
    again once another broker leads. Returns the victim."""
    victim = partition(cluster, TOPIC, p).leader_id
    start = leader_row(cluster, p).get("remote_segments") or 0

    def copying():
        row = leader_row(cluster, p)
        busy = (row.get("remote_segments_in_progress") or 0) + (row.get("copy_lag_segments") or 0)
        return (row.get("remote_segments") or 0) > start and busy > 0
    wait_until(copying, timeout, f"the leader of partition {p} copying")
    cluster.brokers[victim].kill()
    others = [i for i in cluster.brokers if i != victim]
    wait_until(lambda: partition(cluster, TOPIC, p, via=others[0]).leader_id in others, timeout,
               f"a new leader of partition {p}")
    cluster.start([victim])
    cluster.wait_formed(timeout)
    return victim


def manifests(root: Path, p: int) -> list[SegmentManifest]:
    found = [SegmentManifest.from_json(f.read_bytes()) for f in (root / "remote").rglob("*.manifest")]
    return sorted((m for m in found if m.topic == TOPIC and m.partition == p), key=lambda m: m.start_offset)


def check_remote(root: Path, p: int) -> dict:
    """In upload order, every segment must start at or below the end of what is already remote plus one (no
    gap) and end past it (nothing uploaded twice). A new leader's segment may overlap the old leader's
    last one: replicas roll segments at different offsets, and a segment is uploaded whole, as in Kafka."""
    segs = manifests(root, p)
    gaps, twice, overlapping = [], [], 0
    end = -1
    for m in sorted(segs, key=lambda m: m.written_ms):
        if m.start_offset > end + 1:
            gaps.append((end + 1, m.start_offset - 1))
        if m.end_offset <= end:
            twice.append({"start": m.start_offset, "end": m.end_offset, "broker": m.broker_id,
                          "epochs": dict(m.leader_epochs), "remote_end_before": end})
        overlapping += m.start_offset <= end
        end = max(end, m.end_offset)
    return {"segments": len(segs), "uploaded_by": sorted({m.broker_id for m in segs}), "gaps": gaps,
            "uploaded_twice": twice, "overlapping_a_previous_upload": overlapping,
            "duplicate_ids": len(segs) - len({m.segment_id for m in segs}),
            "first_offset": segs[0].start_offset if segs else None}


def read_back(cluster, client: str, p: int, acked: list[tuple[int | None, bytes]]) -> dict:
    """Read the partition from earliest and hold it against what was acknowledged: a value acknowledged at
    an offset must be there, once; one acknowledged without an offset (librdkafka reports a retried
    batch it knows persisted, but not where, with none) must be somewhere, once."""
    c = CLIENTS[client](cluster.bootstrap)
    try:
        got = c.consume(TOPIC, p, "earliest", len(acked), timeout=600)
    finally:
        c.close()
    at = {m.offset: m.value for m in got}
    count: dict[bytes, int] = {}
    for m in got:
        count[m.value] = count.get(m.value, 0) + 1
    missing = [(o, v) for o, v in acked if (at.get(o) != v if o is not None else v not in count)]
    return {"read": len(got), "acked_without_offset": sum(1 for o, _ in acked if o is None),
            "missing": len(missing), "duplicated": sum(n - 1 for n in count.values() if n > 1),
            "missing_sample": [(o, v[-6:].decode(errors="replace")) for o, v in missing[:5]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megabytes", type=int, default=200)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=600, help="seconds any one wait may take")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tiered-faults-"))
    server = zk.start_zookeeper(work / "zookeeper")
    cluster = None
    started = time.monotonic()
    try:
        settings = tiered_settings(work, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3",
                                            "replica.lag.time.max.ms": "10000"})
        cluster = start_cluster(work, server, brokers=3, settings=settings)
        create(cluster, TOPIC, args.partitions, {
            "remote.storage.enable": "true", "segment.bytes": str(args.segment_bytes), "local.retention.bytes": "1",
            "min.insync.replicas": "2", "file.delete.delay.ms": "0", "retention.ms": "-1"})
        records = args.megabytes * (1 << 20) // args.record_bytes
        writer = BackgroundWriter(cluster.bootstrap, TOPIC, b"v" * (args.record_bytes - 6), args.partitions,
                                  linger_ms=5).start()
        kills = []
        try:
            for p in range(args.partitions):
                kills.append({"partition": p, "victim": kill_while_copying(cluster, p, args.timeout),
                              "acked_at_kill": len(writer.acked)})
                log(f"partition {p}: leader {kills[-1]['victim']} killed while copying, restarted")
            wait_until(lambda: len(writer.acked) >= records, args.timeout * 4, f"{records} records acknowledged")
        finally:
            writer.stop()
        log(f"{len(writer.acked)} records acknowledged, {len(writer.errors)} delivery errors")
        for p in range(args.partitions):
            # Tiered, and what a leadership left unfinished (abandoned uploads, DELETE_SEGMENT_STARTED) deleted:
            # the manifests checked below are then those of the segments in the metadata.
            wait_until(lambda p=p: (row := leader_row(cluster, p)).get("copy_lag_segments") == 0
                       and row.get("remote_segments_to_clean") == 0,
                       args.timeout, f"partition {p} tiered and cleaned")
        expected: dict[int, list[tuple[int | None, bytes]]] = {p: [] for p in range(args.partitions)}
        for p, offset, value in writer.acked:
            expected[p].append((offset, value))
        report: dict = {"bench": "tiered_cluster_faults", "megabytes": args.megabytes,
                        "acked": len(writer.acked), "delivery_errors": writer.errors[:5], "kills": kills,
                        "partitions": {}}
        ok = not writer.errors
        for p in range(args.partitions):
            leader = partition(cluster, TOPIC, p).leader_id
            rec = call(cluster.brokers[leader], "/v1/tier/reconcile")
            mine = [o for o in rec.get("orphans", []) + rec.get("missing", []) if o["topic"] == TOPIC]
            part = {"remote": check_remote(work, p), "reconcile_problems": len(mine),
                    "reconcile_sample": [{k: o.get(k) for k in ("start_offset", "end_offset", "segment_id", "keys",
                                                                "missing_keys", "deletable")} for o in mine[:3]],
                    "confluent-kafka": read_back(cluster, "confluent-kafka", p, expected[p]),
                    "kafka-python": read_back(cluster, "kafka-python", p, expected[p])}
            report["partitions"][p] = part
            r = part["remote"]
            ok = ok and not (r["gaps"] or r["uploaded_twice"] or r["duplicate_ids"] or mine) and r["first_offset"] == 0
            ok = ok and all(part[c]["missing"] == 0 and part[c]["duplicated"] == 0
                            for c in ("confluent-kafka", "kafka-python"))
        report.update(ok=ok, elapsed_s=round(time.monotonic() - started, 1), work_dir=str(work))
        print(json.dumps(report))
        return 0 if ok else 1
    finally:
        if cluster is not None:
            cluster.stop()
        BrokerProcess.kill_running()
        zk.stop_zookeeper(server)


if __name__ == "__main__":
    sys.exit(main())
