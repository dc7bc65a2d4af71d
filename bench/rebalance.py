"""Rebalance time of a 50-member consumer group, classic and consumer (KIP-848) protocol: tierlog against Apache
Kafka 4.4 in the same run (issue 39).

Both brokers run on 127.0.0.1 side by side: Kafka 4.4.0 from ``scripts/kafka_peer.py`` (single-node KRaft,
``group.initial.rebalance.delay.ms=0`` as the peer presets it, ``group.consumer.heartbeat.interval.ms`` and
``group.consumer.assignment.interval.ms`` at Kafka's defaults, 5000 and 1000 ms) and tierlog as
``python -m tierlog broker`` (``tests/harness/broker.py``, the same initial delay of 0, and the same defaults
of the heartbeat and assignment intervals, 5000 and 1000 ms). Each gets a topic of ``--partitions`` (100)
partitions. For each run, protocol and broker (which broker goes first alternates between runs), with a fresh
group each time:

- join: ``--members`` (50) confluent-kafka consumers start at once, each created, subscribed and polled in its
  own thread of this process (``group.protocol=classic`` with librdkafka's ``cooperative-sticky`` assignor, or
  ``group.protocol=consumer`` with the broker's default assignor, uniform on both). All 50 are created first
  and subscribe together when the last is ready (creating them one after the other takes this process about
  a second, so the first members would join a group of one or two and the rest trigger further rebalances,
  which the first members learn of only at their next heartbeat). Timed from the subscribe
  until every member owns partitions, every partition is owned by exactly one member and the assignment is
  balanced (each member's count within one of the others'; 2 each with the defaults);
- leave: after a pause drawn at random from 0 to ``--max-pause`` s (5; the same pause for both brokers in a run),
  half the members close at once (``close()``: LeaveGroup, or a heartbeat with epoch -1). Timed from the
  start of the closes until the remaining members own every partition exactly once, balanced (4 each).
  The pause is there because the members heartbeat in step (they joined together), so without it the leave would
  start at the same point of their heartbeat cycle every time, and whether the remaining members learn their new
  partitions at once or one heartbeat interval (3 s classic, 5 s consumer) later would depend on each
  broker's join time instead of on its leave.

Ownership is what each member's ``assignment()`` returns after its last ``poll()``, i.e. after librdkafka ran
its rebalance callbacks. The client's defaults otherwise (classic: ``session.timeout.ms`` 45 s,
``heartbeat.interval.ms`` 3 s). Prints one JSON line with the medians of ``--runs`` per protocol and broker
and the ratio tierlog/Kafka (below 1: tierlog is faster), and writes ``bench/results/rebalance.json``.

    python bench/rebalance.py [--runs 3] [--members 50] [--partitions 100] [--initial-delay-ms 0] [--profile DIR]

Target (issue 39): tierlog's rebalance time at most Kafka's, for each protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from confluent_kafka import Consumer  # noqa: E402
from tests.harness.apache_kafka import kafka_peer_module as kp  # noqa: E402
from tests.harness.broker import BrokerProcess  # noqa: E402
from tests.harness.rawclient import create_topic  # noqa: E402

VERSION = kp.LATEST_KAFKA_VERSION
RESULTS = ROOT / "bench" / "results" / "rebalance.json"
PROTOCOLS = ("classic", "consumer")
TIMEOUT_S = 180.0


class Member(threading.Thread):
    """One consumer polled in its own thread; ``owned`` is its assignment after its last poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, name: str, go: threading.Event):
        super().__init__(daemon=True, name=name)
        self.go = go
        self.created = threading.Event()
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                     "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "latest"}
        if protocol == "classic":
            self.conf["partition.assignment.strategy"] = "cooperative-sticky"
        self.topic = topic
        self.owned: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = Consumer(self.conf)
            self.created.set()
            self.go.wait()
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                consumer.poll(0.05)
                self.owned = frozenset(tp.partition for tp in consumer.assignment())
            consumer.close()
        except BaseException as e:  # reported by the waiter
            self.error = e
        finally:
            self.created.set()
            self.owned = frozenset()
            self.closed.set()


def settled(members: list[Member], partitions: int) -> bool:
    """Every member owns partitions, each partition exactly one owner, counts within one of each other."""
    counts = [len(m.owned) for m in members]
    if min(counts) == 0 or sum(counts) != partitions or max(counts) - min(counts) > 1:
        return False
    owned: set[int] = set()
    for m in members:
        owned |= m.owned
    return len(owned) == partitions


def wait_settled(members: list[Member], partitions: int, what: str) -> float:
    t0 = time.monotonic()
    while not settled(members, partitions):
        bad = [m for m in members if m.error is not None]
        if bad:
            raise RuntimeError(f"{what}: member {bad[0].name} failed: {bad[0].error!r}")
        if time.monotonic() - t0 > TIMEOUT_S:
            raise TimeoutError(f"{what}: no settled assignment after {TIMEOUT_S} s: "
                               f"{sorted(len(m.owned) for m in members)}")
        time.sleep(0.005)
    return time.monotonic()


def one_run(bootstrap: str, topic: str, protocol: str, n: int, partitions: int, pause_s: float) -> dict:
    group = f"rebalance-{protocol}-{uuid.uuid4().hex[:8]}"
    go = threading.Event()
    members = [Member(bootstrap, group, topic, protocol, f"m{i:02d}", go) for i in range(n)]
    try:
        for m in members:
            m.start()
        for m in members:
            m.created.wait(60)
        t0 = time.monotonic()
        go.set()
        join_s = wait_settled(members, partitions, f"{protocol} join") - t0
        time.sleep(pause_s)
        leaving, staying = members[: n // 2], members[n // 2:]
        t1 = time.monotonic()
        for m in leaving:
            m.stop.set()
        leave_s = wait_settled(staying, partitions, f"{protocol} leave") - t1
        for m in leaving:
            m.closed.wait(60)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.closed.wait(60)
    return {"join_s": round(join_s, 3), "leave_s": round(leave_s, 3), "pause_s": round(pause_s, 3)}


def note(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--max-pause", type=float, default=5.0, help="seconds; see the module's docstring")
    ap.add_argument("--initial-delay-ms", type=int, default=0,
                    help="group.initial.rebalance.delay.ms of both brokers (Kafka's own default is 3000)")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated: classic,consumer")
    ap.add_argument("--profile", default=None,
                    help="folder: after the measured runs, one more join per protocol on tierlog under py-spy")
    args = ap.parse_args()
    protocols = [p for p in args.protocols.split(",") if p]
    runs: dict[str, dict[str, list[dict]]] = {p: {"tierlog": [], "kafka": []} for p in protocols}
    rng = random.Random(args.seed)
    load_start = load_average()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rebalance-bench-") as tmp:
        delay = {"group.initial.rebalance.delay.ms": str(args.initial_delay_ms)}
        kafka = kp.KafkaServer(Path(tmp) / "kafka", version=VERSION, overrides=delay)
        tierlog = BrokerProcess(Path(tmp) / "tierlog", delay)
        try:
            kafka.start()
            tierlog.start()
            topic = "rebalance"
            for broker in (kafka, tierlog):
                create_topic(broker.bootstrap, topic, args.partitions)
            # One unmeasured join and leave per protocol and broker: creates __consumer_offsets, warms Kafka's JIT.
            for p in protocols:
                for broker in (kafka, tierlog):
                    one_run(broker.bootstrap, topic, p, args.members, args.partitions, 0.0)
            note("warmed up")
            for i in range(args.runs):
                order = [("tierlog", tierlog), ("kafka", kafka)]
                for p in protocols:
                    pause_s = rng.uniform(0, args.max_pause)
                    for name, broker in (order if i % 2 == 0 else order[::-1]):
                        r = one_run(broker.bootstrap, topic, p, args.members, args.partitions, pause_s)
                        runs[p][name].append(r)
                        note(f"run {i} {p} {name}: join {r['join_s']} s, leave {r['leave_s']} s")
            if args.profile:
                out = Path(args.profile)
                out.mkdir(parents=True, exist_ok=True)
                for p in protocols:
                    spy = subprocess.Popen(["py-spy", "record", "--pid", str(tierlog.proc.pid), "--rate", "200",
                                            "--format", "raw", "-o", str(out / f"rebalance_{p}.txt")],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1)
                    r = one_run(tierlog.bootstrap, topic, p, args.members, args.partitions, 0.0)
                    spy.send_signal(2)
                    spy.wait(60)
                    note(f"profiled {p}: {r}")
        finally:
            tierlog.stop()
            kafka.stop()
    summary: dict = {"bench": "rebalance", "kafka_version": VERSION, "members": args.members,
                     "partitions": args.partitions, "runs": args.runs,
                     "classic_assignor": "cooperative-sticky",
                     "max_pause_s": args.max_pause, "initial_delay_ms": args.initial_delay_ms,
                     "load_average": [load_start, load_average()],
                     "minutes": round((time.monotonic() - started) / 60, 1)}
    for p in protocols:
        for step in ("join_s", "leave_s"):
            med = {name: statistics.median(r[step] for r in rs) for name, rs in runs[p].items()}
            summary[f"{p}_{step}"] = {**{k: round(v, 3) for k, v in med.items()},
                                      "ratio": round(med["tierlog"] / med["kafka"], 2)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**summary, "all_runs": runs}, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
