"""The log cleaner under SIGKILL: cycles of keyed writes and tombstones to a compacted topic, each ending
in a kill of the broker while its cleaner works, a restart and a check that nothing acknowledged was lost
(``scripts/cleaner_faults.py`` runs many cycles, ``tests/faults/test_cleaner_crash.py`` a few).

A cycle:

1. a confluent-kafka producer (acks=all, one request in flight, no retries: the log holds the writes in the
   order they were sent) writes values and tombstones over ``keys`` keys, paced, from a thread; once a
   drawn number is acknowledged it goes on at a tenth of the pace while the kill point is awaited;
2. the cycle's kill point is drawn: ``map`` (a round runs, per ``/v1/cleaner/status``, and no cleaned file
   exists yet), ``copy`` (a ``<base>.log.cleaned`` file holds at least a drawn number of bytes), ``between``
   (a round swapped in a drawn number of groups and still runs: new ``.log.deleted`` files) or ``swap`` (a
   ``.swap`` file exists: the directory is polled without pause); each is observed state, waited for with a
   deadline, after which the kill falls back to the first moment a round runs;
3. SIGKILL; what the kill left in the partition folder (``.cleaned``, ``.swap``, ``.deleted``) is noted;
4. the broker starts again on the same folder; the producer's last requests settle (acknowledged or not);
5. checks: no ``.cleaned``/``.swap`` file the kill left is still there, the segments on disk hold their
   batches in increasing offsets without overlap, and the topic read from earliest (confluent-kafka) has
   increasing offsets and, for every key, the value of its latest acknowledged write (or of a later write
   whose acknowledgement was lost in the kill); a key whose latest acknowledged write is a tombstone is
   absent or a tombstone (or holds a later unacknowledged value), never an older value;
6. the restarted cleaner completes a round (or has nothing cleanable) and the read is checked again, so the
   next cycle starts from a cleaned log and tombstones pass their horizon and go during the run.

The broker is tuned to clean all the time: 64 KiB segments, ``min.cleanable.dirty.ratio=0.01``, a 100 ms
backoff, ``delete.retention.ms`` of 3 s (tombstones and their horizon go during the run) and the cleaner
throttled (``log.cleaner.io.max.bytes.per.second``) so a round lasts long enough to be caught in each phase.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import create_topic
from tests.harness.tiered import metrics_url
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tierlog.records import RECORD_BATCH_OVERHEAD, read_header

TOPIC = "compacted-faults"
KILL_POINTS = ("map", "copy", "between", "swap")
SEGMENT_BYTES = 65536
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                 "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3000",
                 "min.compaction.lag.ms": "0", "file.delete.delay.ms": "600000"}


def broker_settings(throttle_bytes: int) -> dict[str, str]:
    return {"metrics.port": "0", "log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01",
            "log.cleaner.io.max.bytes.per.second": str(throttle_bytes), "num.partitions": "1"}


@dataclass
class Op:
    seq: int
    value: bytes | None  # None: a tombstone
    state: str = "pending"  # acked, failed or pending (no answer before the producer was closed)


@dataclass
class Run:
    """What was written (per key, in send order) and what the cycles found."""

    keys: int
    ops: dict[bytes, list[Op]] = field(default_factory=dict)
    seq: int = 0
    cycles: list[dict] = field(default_factory=list)
    violations: list[dict] = field(default_factory=list)

    def counts(self) -> dict:
        every = [op for ops in self.ops.values() for op in ops]
        acked = [op for op in every if op.state == "acked"]
        return {"records_sent": len(every), "records_acked": len(acked),
                "tombstones_acked": sum(op.value is None for op in acked),
                "not_acked": len(every) - len(acked)}


# ------------------------------------------------------------------------------------------------ writes

class Writer:
    """Writes keyed values and tombstones from a thread until stopped, recording each send and its answer."""

    def __init__(self, run: Run, bootstrap: str, rng: random.Random, tombstone_share: float = 0.1,
                 per_second: int = 3000):
        self.run = run
        self.rng = rng
        self.tombstone_share = tombstone_share
        self.per_second = per_second
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                  "max.in.flight.requests.per.connection": 1, "retries": 0, "linger.ms": 5,
                                  "message.timeout.ms": 60000, "socket.timeout.ms": 10000,
                                  "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
                                  "log_level": 0})  # its connection-refused lines while the broker is down
        self.acked = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="cleaner-faults-writer", daemon=True)

    def start(self) -> Writer:
        self.thread.start()
        return self

    def _loop(self) -> None:
        try:
            started, sent, rate = time.monotonic(), 0, self.per_second
            while not self.stop.is_set():
                if rate != self.per_second:  # slowed down: pace from here on
                    started, sent, rate = time.monotonic(), 0, self.per_second
                key = b"key-%05d" % self.rng.randrange(self.run.keys)
                self.run.seq += 1
                seq = self.run.seq
                if self.rng.random() < self.tombstone_share:
                    value = None
                else:
                    value = b"%s:%d:" % (key, seq) + self.rng.randbytes(100).hex().encode()
                op = Op(seq, value)
                self.run.ops.setdefault(key, []).append(op)
                while True:
                    try:
                        self.producer.produce(TOPIC, key=key, value=value, on_delivery=self._answer(op))
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                sent += 1
                self.producer.poll(0)
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:  # pacing, not synchronisation: keeps the dirty part near what the cleaner handles
                    self.stop.wait(ahead)
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e

    def _answer(self, op: Op):
        def on_delivery(err, _msg):
            op.state = "failed" if err is not None else "acked"
            if err is None:
                self.acked += 1
        return on_delivery

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(60)

    def finish(self, timeout: float = 120) -> None:
        """Stop sending and wait for the answers of what was sent (the broker is up again)."""
        self.halt()
        self.producer.flush(timeout)
        if self.error is not None:
            raise self.error


# ------------------------------------------------------------------------------------------------ observation

def cleaner_running(b: BrokerProcess) -> bool:
    try:
        with urllib.request.urlopen(metrics_url(b) + f"/v1/cleaner/status?topic={TOPIC}", timeout=10) as r:
            status = json.load(r)
    except OSError:
        return False
    return any(p["in_progress"] for p in status["partitions"])


def nothing_to_clean(b: BrokerProcess) -> bool:
    """No round runs and the partition has no cleanable bytes (the dirty data is all in the active segment)."""
    with urllib.request.urlopen(metrics_url(b) + f"/v1/cleaner/status?topic={TOPIC}", timeout=10) as r:
        return all(not p["in_progress"] and p["cleanable_bytes"] == 0 for p in json.load(r)["partitions"])


def partition_dir(b: BrokerProcess) -> Path:
    return b.log_dir / f"{TOPIC}-0"


def listing(folder: Path) -> dict[str, tuple[int, int, int]]:
    """name -> (inode, size, mtime ns) of the folder's files (files vanishing while listed are left out)."""
    out = {}
    for e in os.scandir(folder):
        try:
            st = e.stat()
        except FileNotFoundError:
            continue
        out[e.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def leftovers(files: dict) -> dict:
    return {n: v for n, v in files.items() if n.endswith((".cleaned", ".swap"))}


def wait_for_kill_point(b: BrokerProcess, point: str, rng: random.Random, timeout: float) -> str:
    """Return once ``point`` is observed (``point`` returned) or, after ``timeout``, once a round runs
    (``"fallback"``)."""
    folder = partition_dir(b)

    def observed(predicate, interval: float, ignore=()) -> bool:
        try:
            return wait_until(predicate, timeout, what=f"kill point {point}", interval=interval, ignore=ignore)
        except TimedOut:
            return False  # not seen in time: the fallback below

    if point == "swap":
        # the swap is a few renames: look without pausing
        if observed(lambda: any(name.endswith(".swap") for name in os.listdir(folder)), 0,
                    ignore=(FileNotFoundError,)):
            return point
    elif point == "copy":
        want = rng.randrange(1, SEGMENT_BYTES // 2)
        if observed(lambda: any(n.endswith(".log.cleaned") and v[1] >= want for n, v in listing(folder).items()),
                    0.002):
            return point
    elif point == "map":
        if observed(lambda: cleaner_running(b) and not any(n.endswith(".cleaned") for n in os.listdir(folder)),
                    0.01):
            return point
    elif point == "between":
        # not wait_until: two nested waits (a round running, then groups deleted within that same round)
        # that start over when the round ends first, each at its own pace
        deadline = time.monotonic() + timeout
        groups = rng.randrange(1, 4)
        while time.monotonic() < deadline:
            if not cleaner_running(b):
                time.sleep(0.01)
                continue
            before = {(n, v[0]) for n, v in listing(folder).items() if n.endswith(".log.deleted")}
            while time.monotonic() < deadline:
                now = {(n, v[0]) for n, v in listing(folder).items() if n.endswith(".log.deleted")}
                if len(now - before) >= groups:
                    if cleaner_running(b):
                        return point
                    break  # the round ended first: wait for the next one
                time.sleep(0.002)
    else:
        raise ValueError(point)
    wait_until(lambda: cleaner_running(b) or not_yet(b.output[-40:]), timeout, interval=0.01,
               what=f"a cleaning round (after {timeout} s without kill point {point}); the broker's output")
    return "fallback"


# ------------------------------------------------------------------------------------------------ checks

def scan_segments(folder: Path) -> list[str]:
    """Problems of the segments on disk: a batch below its segment's base, offsets not increasing, a batch
    reaching the next segment's base (an overlap a left-over swap would make)."""
    problems = []
    bases = sorted(int(n[:-4]) for n in os.listdir(folder) if n.endswith(".log") and n[:-4].isdigit())
    last = -1
    for i, base in enumerate(bases):
        try:
            data = (folder / f"{base:020d}.log").read_bytes()
        except FileNotFoundError:  # replaced by a swap while listed: the next scan sees the new one
            continue
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        pos = 0
        while pos + RECORD_BATCH_OVERHEAD <= len(data):
            h = read_header(data, pos)
            if h.size < RECORD_BATCH_OVERHEAD or pos + h.size > len(data):
                break  # the active segment's tail being written
            if h.base_offset < base:
                problems.append(f"segment {base}: batch at {h.base_offset} below the segment's base")
            if h.base_offset <= last:
                problems.append(f"segment {base}: batch at {h.base_offset} not after offset {last}")
            if nxt is not None and h.last_offset >= nxt:
                problems.append(f"segment {base}: batch ending at {h.last_offset} reaches segment {nxt}")
            last = max(last, h.last_offset)
            pos += h.size
    return problems


def read_all(bootstrap: str, timeout: float = 300) -> tuple[dict[bytes, bytes | None], list[str], int]:
    """key -> its last value (None: a tombstone) read from earliest to the high watermark, the problems of
    the offsets read, and the number of records read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cleaner-faults-check", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "enable.partition.eof": True})
    problems: list[str] = []
    latest: dict[bytes, bytes | None] = {}
    n = 0
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        last = -1
        # not wait_until: a read with a time budget that notes a problem when it runs out, not a failure
        deadline = time.monotonic() + timeout
        while last < high - 1:
            if time.monotonic() > deadline:
                problems.append(f"read stopped at offset {last} of {high} after {timeout} s")
                break
            for m in c.consume(1000, timeout=1.0):
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF: every offset below the end was read
                        last = max(last, m.offset() - 1)
                        continue
                    problems.append(f"consume error {m.error()}")
                    continue
                if m.offset() <= last:
                    problems.append(f"offset {m.offset()} read after {last}")
                last = m.offset()
                latest[m.key()] = m.value()
                n += 1
    finally:
        c.close()
    return latest, problems, n


def check_values(run: Run, latest: dict[bytes, bytes | None]) -> list[dict]:
    """Every key against its writes: the value read must be that of the latest acknowledged write or of a
    later write never acknowledged (None for absent or a tombstone)."""
    bad = []
    for key, ops in run.ops.items():
        got = latest.get(key)
        last_acked = max((i for i, op in enumerate(ops) if op.state == "acked"), default=-1)
        allowed = {op.value for op in ops[last_acked + 1:] if op.state != "acked"}
        allowed.add(ops[last_acked].value if last_acked >= 0 else None)
        if got in allowed:
            continue
        expected = ops[last_acked].value if last_acked >= 0 else None
        kind = "lost" if expected is not None else "resurrected"
        bad.append({"kind": kind, "key": key.decode(), "expected": (expected or b"<deleted>")[:40].decode(),
                    "read": (got or b"<none>")[:40].decode()})
    for key in latest.keys() - run.ops.keys():
        bad.append({"kind": "unknown key", "key": repr(key)})
    return bad


# ------------------------------------------------------------------------------------------------ cycles

def start_broker(folder: Path, throttle_bytes: int) -> BrokerProcess:
    b = BrokerProcess(folder / "logs", broker_settings(throttle_bytes)).start()
    create_topic(b.bootstrap, TOPIC, configs=TOPIC_CONFIGS)
    return b


def cycle(b: BrokerProcess, run: Run, n: int, rng: random.Random, timeout: float = 120,
          min_acked: int = 3000) -> dict:
    """One cycle on a running broker: write, kill at the drawn point, restart, check. Returns its report."""
    point = KILL_POINTS[n % len(KILL_POINTS)] if n < len(KILL_POINTS) else rng.choice(KILL_POINTS)
    writer = Writer(run, b.bootstrap, random.Random(rng.random())).start()
    started = time.monotonic()
    try:
        # Each cycle writes a drawn amount first, so rounds have fresh dirty data and tombstones to handle.
        want = rng.randrange(min_acked, 3 * min_acked)
        wait_until(lambda: writer.acked >= want or not writer.thread.is_alive() or not_yet(writer.acked), timeout,
                   what=f"{want} writes acknowledged (or the writer to stop); acknowledged")
        writer.per_second = max(1, writer.per_second // 10)  # still writing, without outrunning the cleaner
        hit = wait_for_kill_point(b, point, rng, timeout)
    except BaseException:
        writer.halt()
        raise
    b.kill()
    writer.halt()
    folder = partition_dir(b)
    at_kill = listing(folder)
    left = leftovers(at_kill)
    report = {"cycle": n, "kill_point": point, "observed": hit, "seconds_to_kill": round(time.monotonic() - started, 1),
              "left_cleaned": sorted(k for k in left if k.endswith(".cleaned")),
              "left_swap": sorted(k for k in left if k.endswith(".swap")),
              "left_deleted": sum(k.endswith(".log.deleted") for k in at_kill)}
    rounds = completed_rounds(b)
    b.restart(clean=False)
    writer.finish()
    after = listing(folder)
    shadows = [n for n, v in left.items() if after.get(n) == v]
    problems = [f"left-over {name} still there after the restart" for name in shadows]
    problems += scan_segments(folder)
    latest, read_problems, read = read_all(b.bootstrap)
    problems += read_problems
    bad = check_values(run, latest)
    # The restarted cleaner finishes a whole round before the next cycle, so the log does not outgrow it
    # (tombstones and horizons then go through rounds too); a cleaner that cannot is a problem.
    try:
        caught_up = wait_until(lambda: completed_rounds(b) > rounds or nothing_to_clean(b), 4 * timeout,
                               interval=0.1, what="a cleaning round after the restart")
    except TimedOut:
        caught_up = False
    if not caught_up:
        problems.append(f"no cleaning round completed within {4 * timeout} s of the restart")
    else:  # read again: what the round left must hold the same values
        latest, read_problems, report["records_read_after_round"] = read_all(b.bootstrap)
        problems += read_problems
        bad += check_values(run, latest)
    report.update({"records_read": read, "problems": problems, "violations": bad[:20], "violation_count": len(bad),
                   **run.counts()})
    run.cycles.append(report)
    run.violations += bad
    return report


def completed_rounds(b: BrokerProcess) -> int:
    """Cleaning rounds of the topic the broker logged as finished (its output over all its starts)."""
    return sum(1 for line in list(b.output) if "Cleaned " + TOPIC in line)


def summary(run: Run, b: BrokerProcess | None) -> dict:
    outputs = "".join(b.output) if b is not None else ""
    kinds: dict[str, int] = {}
    for c in run.cycles:
        kinds[c["observed"]] = kinds.get(c["observed"], 0) + 1
    lost = [v for v in run.violations if v["kind"] == "lost"]
    resurrected = [v for v in run.violations if v["kind"] == "resurrected"]
    live = sum(1 for ops in run.ops.values()
               if (acked := [op for op in ops if op.state == "acked"]) and acked[-1].value is not None)
    return {"cycles": len(run.cycles), "kill_points": kinds,
            "kills_leaving_cleaned": sum(bool(c["left_cleaned"]) for c in run.cycles),
            "kills_leaving_swap": sum(bool(c["left_swap"]) for c in run.cycles),
            **run.counts(), "live_keys": live, "lost": len(lost), "resurrected": len(resurrected),
            "other_violations": len(run.violations) - len(lost) - len(resurrected),
            "problems": [p for c in run.cycles for p in c["problems"]],
            "cleaner_rounds_completed": outputs.count("Cleaned " + TOPIC),
            "swaps_completed_at_start": outputs.count("Completed the swap of cleaned segment"),
            "uncleanable": outputs.count("marked uncleanable"),
            "ok": not run.violations and not any(c["problems"] for c in run.cycles)
            and "marked uncleanable" not in outputs}
