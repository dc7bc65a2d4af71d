"""Group coordinator load benchmark: how long a restarted broker takes to load ``__consumer_offsets``
after one million offset commits over 100 groups, with the topic as written and after the log cleaner
compacted it, in the same run on the same data.

Set-up: a broker with the log cleaner off and a small ``offsets.topic.segment.bytes`` (so segments roll
and the cleaner has closed segments to compact); topic ``t`` with ``--partitions`` partitions;
``--groups`` groups each commit every partition ``--rounds`` times (one OffsetCommit of all partitions per
round, pipelined on one connection): groups x partitions x rounds commit records.

Then:
1. "uncompacted": stop cleanly, start again (cleaner still off), time it.
2. start with the cleaner on (``log.cleaner.min.cleanable.ratio`` and ``log.cleaner.backoff.ms`` low), wait
   until every ``__consumer_offsets`` partition is cleaned (``/v1/cleaner/status``), stop cleanly.
3. "compacted": start again, time it.

Each timed start reports: launch to the ``ready on`` line (the broker prints it after its ready callbacks,
among them the group coordinator loading every partition), and the coordinator's load alone (the broker's
``Broker N ready`` log line to its last ``Loaded __consumer_offsets-N`` line, from their timestamps), plus
the records read and replayed (summed from those lines; the loader drops records a later one of the same key
supersedes before decoding). After each start, OffsetFetch of ``--verify`` groups must
return the last offsets committed. ``__consumer_offsets`` bytes on disk are measured before and after
compaction. Prints one JSON line.

    python bench/group_load.py [--groups 100 --partitions 100 --rounds 100] [--profile DIR]

Target (issue): a coordinator with 1,000,000 commits over 100 groups starts (loads) in under a second.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from kio.index import load_request_schema, load_response_schema  # noqa: E402
from tests.harness.broker import BrokerProcess, log_lines  # noqa: E402
from tests.harness.rawclient import RawClient, create_topic  # noqa: E402

from tierlog.protocol import ApiKey, build, encode_request, parse_response  # noqa: E402

OFFSETS = "__consumer_offsets"
COMMIT_VERSION = 8
WINDOW = 64  # OffsetCommit requests in flight on the one connection


def committed(round_: int, partition: int) -> int:
    """The offset committed for ``partition`` in ``round_`` (the last round's is what must read back)."""
    return round_ * 1000 + partition


def commit_all(bootstrap: str, topic: str, groups: list[str], partitions: int, rounds: int) -> float:
    """groups x partitions x rounds commits: per round, one OffsetCommit per group with every partition,
    up to WINDOW requests in flight. Returns seconds taken; any error code fails the run."""
    client = RawClient(bootstrap, timeout=300)
    req_schema = load_request_schema(ApiKey.OFFSET_COMMIT, COMMIT_VERSION)
    resp_schema = load_response_schema(ApiKey.OFFSET_COMMIT, COMMIT_VERSION)
    pending = 0

    def read_one() -> None:
        _, resp = parse_response(client.read_frame(), resp_schema)
        bad = [p.error_code for t in resp.topics for p in t.partitions if p.error_code]
        if bad:
            raise RuntimeError(f"OffsetCommit failed: error codes {sorted(set(bad))}")

    t0 = time.monotonic()
    try:
        for r in range(rounds):
            for g in groups:
                client.correlation_id += 1
                req = build(req_schema, {
                    "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "committed_offset": committed(r, p), "committed_leader_epoch": 0,
                         "committed_metadata": ""} for p in range(partitions)]}]})
                client.send_frame(encode_request(req, client.correlation_id, "group-load-bench"))
                pending += 1
                if pending >= WINDOW:
                    read_one()
                    pending -= 1
        while pending:
            read_one()
            pending -= 1
    finally:
        client.close()
    return time.monotonic() - t0


def verify(bootstrap: str, topic: str, groups: list[str], partitions: int, rounds: int) -> int:
    """OffsetFetch each of ``groups`` (all its offsets); every partition must hold the last round's offset."""
    expected = {p: committed(rounds - 1, p) for p in range(partitions)}
    client = RawClient(bootstrap, timeout=120)
    try:
        for g in groups:
            resp = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": g, "topics": None})
            if resp.error_code:
                raise RuntimeError(f"OffsetFetch of {g}: error {resp.error_code}")
            got = {p.partition_index: p.committed_offset for t in resp.topics if t.name == topic
                   for p in t.partitions}
            if got != expected:
                wrong = sorted(p for p in expected if got.get(p) != expected[p])
                raise RuntimeError(f"group {g}: {len(wrong)} partition(s) read back wrong offsets, e.g. "
                                   f"{[(p, got.get(p), expected[p]) for p in wrong[:3]]}")
    finally:
        client.close()
    return len(groups)


def offsets_bytes(log_dir: Path) -> tuple[int, int]:
    """(bytes of ``.log`` files, segment count) of every ``__consumer_offsets`` partition."""
    files = [f for d in log_dir.glob(f"{OFFSETS}-*") for f in d.glob("*.log")]
    return sum(f.stat().st_size for f in files), len(files)


def metrics_url(b: BrokerProcess) -> str:
    for line in reversed(b.output):  # the last start's (metrics.port=0: a new port each start)
        if "Metrics on " in line:
            return line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
    raise RuntimeError("no metrics endpoint")


def wait_compacted(b: BrokerProcess, ratio: float, timeout: float = 1800) -> float:
    """Until every __consumer_offsets partition was cleaned at least once (if it had closed segments) and none
    is in a round or left above ``ratio``: two looks in a row. Returns seconds waited."""
    url = metrics_url(b) + f"/v1/cleaner/status?topic={OFFSETS}"
    t0 = time.monotonic()
    settled = 0
    while time.monotonic() - t0 < timeout:
        try:
            parts = json.load(urllib.request.urlopen(url, timeout=60))["partitions"]
        except OSError:
            parts = []
        ok = bool(parts) and all(not p["in_progress"] and p["uncleanable"] is None and p["dirty_ratio"] <= ratio
                                 and (p["last_clean_ms"] is not None or p["first_dirty_offset"] == 0)
                                 for p in parts)
        settled = settled + 1 if ok else 0
        if settled >= 2:
            return time.monotonic() - t0
        time.sleep(1)
    raise TimeoutError("the cleaner did not compact __consumer_offsets in time")


def _ts(match) -> float:
    return datetime.strptime(match["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def timed_start(b: BrokerProcess, profile: Path | None, name: str) -> dict:
    """Start ``b`` and time it (see the module's docstring); with ``profile``, py-spy records the broker."""
    spy: list[subprocess.Popen] = []
    b.proc = None  # the stopped one's; attach() waits for the new one
    b.output.clear()
    if profile is not None:
        def attach() -> None:  # once the interpreter is up (its first line), before the coordinator loads
            while b.proc is None or not b.output:
                time.sleep(0.001)
            spy.append(subprocess.Popen(["py-spy", "record", "--pid", str(b.proc.pid), "--rate", "200",
                                         "--format", "raw", "-o", str(profile / f"{name}.txt")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        threading.Thread(target=attach, daemon=True).start()
    t0 = time.monotonic()
    b.start(timeout=600)
    ready_s = time.monotonic() - t0
    lines = log_lines(b.output, "INFO")
    broker_ready = [m for m in lines if m["message"].startswith("Broker ") and " ready in " in m["message"]]
    loaded = [m for m in lines if m["message"].startswith(f"Loaded {OFFSETS}-")]
    records = sum(int(m["message"].rsplit("from ", 1)[1].split()[0]) for m in loaded)
    # "..., N replayed": the records left once those superseded by a later one of their key are dropped.
    replayed = sum(int(m["message"].rsplit(", ", 1)[1].split()[0]) for m in loaded
                   if m["message"].endswith(" replayed"))
    load_s = (_ts(loaded[-1]) - _ts(broker_ready[0])) if loaded and broker_ready else None
    if spy:
        spy[0].send_signal(2)  # SIGINT: py-spy writes its file and exits
        spy[0].wait(60)
    return {"start_to_ready_s": round(ready_s, 3), "coordinator_load_s": None if load_s is None else round(load_s, 3),
            "records_read": records, "records_replayed": replayed, "partitions_loaded": len(loaded)}


def note(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--segment-bytes", type=int, default=100 * 1024, help="offsets.topic.segment.bytes")
    ap.add_argument("--min-cleanable-ratio", type=float, default=0.01, help="log.cleaner.min.cleanable.ratio")
    ap.add_argument("--verify", type=int, default=10, help="groups read back with OffsetFetch after each start")
    ap.add_argument("--profile", default=None, help="folder for py-spy profiles (raw) of the timed starts")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out", default=None, help="also append the JSON line to this file")
    opts = ap.parse_args()
    profile = Path(opts.profile) if opts.profile else None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tierlog-group-load-", dir=opts.dir))
    base = {"offsets.topic.segment.bytes": str(opts.segment_bytes), "offsets.topic.replication.factor": "1",
            "metrics.port": "0", "num.partitions": "1"}
    off = {**base, "log.cleaner.enable": "false"}
    on = {**base, "log.cleaner.enable": "true", "log.cleaner.min.cleanable.ratio": str(opts.min_cleanable_ratio),
          "log.cleaner.backoff.ms": "500"}
    b = BrokerProcess(work / "logs", dict(off))
    groups = [f"group-{i:03d}" for i in range(opts.groups)]
    sample = sorted(random.Random(7).sample(groups, min(opts.verify, len(groups))))
    try:
        b.start(timeout=120)
        note('started; committing')
        create_topic(b.bootstrap, "t", opts.partitions)
        commit_s = commit_all(b.bootstrap, "t", groups, opts.partitions, opts.rounds)
        verify(b.bootstrap, "t", sample, opts.partitions, opts.rounds)
        port = b.port

        def restart(overrides: dict, name: str | None) -> dict | None:
            b.stop(timeout=300)
            b.overrides = {**b.overrides, **overrides, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
            b.port = None
            if name is None:
                b.start(timeout=600)
                return None
            return timed_start(b, profile, name)

        note(f'committed in {commit_s:.1f} s')
        size_before, segs_before = offsets_bytes(b.log_dir)
        uncompacted = restart(off, "uncompacted")
        verify(b.bootstrap, "t", sample, opts.partitions, opts.rounds)
        note(f'uncompacted: {uncompacted}')
        restart(on, None)
        note('waiting for the cleaner')
        compact_s = wait_compacted(b, opts.min_cleanable_ratio)
        size_after, segs_after = offsets_bytes(b.log_dir)
        note(f'compacted in {compact_s:.1f} s')
        compacted = restart(on, "compacted")
        verify(b.bootstrap, "t", sample, opts.partitions, opts.rounds)
        b.stop(timeout=300)
    finally:
        b.kill()
        shutil.rmtree(work, ignore_errors=True)
    commits = opts.groups * opts.partitions * opts.rounds
    result = {
        "bench": "group_load", "commits": commits, "groups": opts.groups, "partitions": opts.partitions,
        "rounds": opts.rounds, "offsets_topic_segment_bytes": opts.segment_bytes,
        "commit_s": round(commit_s, 1), "commits_per_s": round(commits / commit_s),
        "offsets_bytes_before": size_before, "segments_before": segs_before,
        "offsets_bytes_after": size_after, "segments_after": segs_after, "compaction_wait_s": round(compact_s, 1),
        "uncompacted": uncompacted, "compacted": compacted, "verified_groups": len(sample),
        "target_load_s": 1.0,
        "target_met_uncompacted": uncompacted["coordinator_load_s"] is not None
        and uncompacted["coordinator_load_s"] < 1.0,
        "target_met_compacted": compacted["coordinator_load_s"] is not None and compacted["coordinator_load_s"] < 1.0,
    }
    line = json.dumps(result)
    print(line)
    if opts.out:
        with open(opts.out, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
