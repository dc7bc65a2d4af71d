"""Faults of a real network, on a cluster in network namespaces (tests/harness/netns_cluster.py).

Scenarios, each on a topic of its own (one partition, three replicas, min.insync.replicas=2) whose leader is a
broker that is not the controller, with an idempotent producer (acks=all), two plain readers and, for the
zombie, a probe writing straight to the old leader. Each waits for observable states (the controller's and the
brokers' own Metadata, acknowledgements), never for a fixed time, and returns a dict of what it measured;
``verdict`` reads the partition back and runs the checker.

- ``zombie_leader``: the leader cut from ZooKeeper (both ways), still reachable by clients and followers. A new
  leader must be elected; the probe's requests sent after the new leader knows it leads are never acknowledged
  by the old one; after the heal the old leader is back in the ISR and follows the new leader's epoch.
- ``one_way``: the leader cannot send to one follower (not the controller): the ISR shrinks to two, writes go
  on, and after the heal the follower is back in the ISR.

``run_schedule`` (scripts/netns_faults.py) draws faults of ``KINDS`` in turn on one topic of several partitions
(besides those two: the leader isolated, 5 % of its packets lost both ways, cut from both followers, unable to
send to the controller) and ends with the checker's verdict.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

from tests.harness.jepsen.checker import Cycle, Report, check, read_back
from tests.harness.jepsen.workload import Ack, History, ProducerWorker, ReaderWorker
from tests.harness.rawclient import RawClient
from tests.harness.tierlog_cluster import create, wait_until
from tierlog.protocol import ApiKey

#: requests held by a leader that can no longer replicate time out within a fault, not after it
PRODUCER_OVERRIDES = {"request.timeout.ms": 5000, "socket.timeout.ms": 5000}


class Probe(threading.Thread):
    """Writes one value at a time (acks=all, non-idempotent) straight to one broker's address, whatever the
    Metadata says; every answer is kept as (sent, answered, error code, offset), every acknowledgement goes into
    the history as producer ``probe.0``."""

    def __init__(self, address: str, topic: str, history: History, stop: threading.Event, interval: float = 0.05):
        super().__init__(daemon=True, name="probe")
        self.address, self.topic, self.history, self.stop, self.interval = address, topic, history, stop, interval
        self.answers: list[tuple[float, float, int, int]] = []
        self.no_answer = 0

    def run(self) -> None:
        from tierlog.records import build_batch
        raw, seq = None, 0
        while not self.stop.is_set():
            value = f"probe.0:{seq}".encode()
            sent = self.history.now()
            self.history.attempt()
            try:
                if raw is None:
                    raw = RawClient(self.address, timeout=5)
                resp = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 2000, "topic_data": [{
                    "name": self.topic, "partition_data": [{"index": 0, "records": build_batch(
                        [(None, value, [], int(time.time() * 1000))])}]}]})
                part = resp.responses[0].partition_responses[0]
                now = self.history.now()
                self.answers.append((sent, now, int(part.error_code), part.base_offset))
                if int(part.error_code) == 0:
                    self.history.ack(Ack("probe.0", seq, 0, part.base_offset, value, now))
                else:
                    self.history.delivery_error(f"probe {int(part.error_code)}")
            except Exception:  # noqa: BLE001 - no answer (cut off, timed out): indeterminate
                self.no_answer += 1
                self.history.delivery_error("probe no answer")
                if raw is not None:
                    raw.close()
                raw = None
            seq += 1
            self.stop.wait(self.interval)
        if raw is not None:
            raw.close()

    def acked(self) -> list[tuple[float, float, int, int]]:
        return [a for a in self.answers if a[2] == 0]

    def refusals(self, since: float) -> dict[str, float]:
        """The first time (sent) each error code answered a request sent after ``since``, by error name."""
        from kio.schema.errors import ErrorCode
        first: dict[str, float] = {}
        for sent, _, code, _ in self.answers:
            if sent > since and code != 0:
                first.setdefault(ErrorCode(code).name, round(sent - since, 2))
        return first

    def refused_since(self, since: float) -> bool:
        return any(sent > since and code != 0 for sent, _, code, _ in self.answers)


class Workload:
    """Producers and readers on a topic, with one history."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, producers: int = 1, readers: int = 2,
                 interval: float = 0.01, echo=None):
        self.topic, self.partitions = topic, partitions
        self.history = History(echo=echo)
        self.stop = threading.Event()
        self.producers = [ProducerWorker(f"p{i}", bootstrap, topic, partitions, self.history, self.stop, interval)
                          for i in range(producers)]
        for p in self.producers:
            p.overrides = dict(PRODUCER_OVERRIDES)
        self.readers = [ReaderWorker(f"r{i}", bootstrap, topic, partitions, self.history, self.stop)
                        for i in range(1, readers + 1)]
        self.extra: list[threading.Thread] = []

    def start(self, *extra: threading.Thread) -> None:
        self.extra = list(extra)
        for t in [*self.producers, *self.readers, *self.extra]:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in [*self.producers, *self.readers, *self.extra]:
            t.join(180)

    def acks_since(self, since: float, partition: int | None = None) -> int:
        got = self.history.acked_partitions_since(since)
        got.pop(-1, None)
        return got[partition] if partition is not None else sum(got.values())

    def wait_acks(self, since: float, count: int = 10, timeout: float = 60, what: str = "writes acknowledged"):
        """Until every partition has ``count`` producer acknowledgements after ``since``."""
        def enough():
            got = self.history.acked_partitions_since(since)
            return all(got[p] >= count for p in range(self.partitions))
        wait_until(enough, timeout, what)
        return self.history.now()

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time one partition went without a producer acknowledgement between ``start`` and
        ``end`` (the worst partition's)."""
        worst = 0.0
        for p in range(self.partitions):
            times = sorted(a.at for a in self.history.acks if a.partition == p and start <= a.at <= end
                           and not a.producer.startswith("probe"))
            edges = [start, *times, end]
            worst = max(worst, *(b - a for a, b in zip(edges, edges[1:])))
        return worst


def verdict(cluster, work: Workload, cycles: list[Cycle], seed: int = 0) -> Report:
    work.finish()
    records, highs = read_back(cluster.bootstrap, work.topic, work.partitions, timeout=90)
    return check(Report(seed, cycles, work.history), records, highs, {})


def summary(report: Report) -> dict:
    h = report.history
    return {"acknowledged": len(h.acks), "read_back": report.read, "lost": len(report.lost),
            "duplicated": len(report.duplicated), "resent": len(report.resent), "reordered": len(report.reordered),
            "mismatched": len(report.mismatched), "divergent": len(report.divergent),
            "delivery_errors": sum(h.delivery_errors.values()), "ok": report.ok}


def _topic(nc, partitions: int = 1) -> tuple[str, int, int, list[int]]:
    """A new topic whose partitions' leader is a broker that is not the controller: (topic, controller, leader,
    followers), the first follower the controller."""
    c = nc.cluster
    controller = c.wait_formed()
    leader = next(i for i in sorted(c.brokers) if i != controller)
    followers = [controller, *(i for i in sorted(c.brokers) if i not in (controller, leader))]
    topic = f"netns-{uuid.uuid4().hex[:8]}"
    create(c, topic, configs={"min.insync.replicas": 2}, assignment=[[leader, *followers]] * partitions)
    _wait_isr(nc, topic, controller, 3, 0)
    return topic, controller, leader, followers


def _wait_isr(nc, topic: str, via: int, size: int, p: int = 0, timeout: float = 60, member: int | None = None):
    def isr():
        got = nc.partition(topic, p, via)
        return got if len(got.isr_nodes) == size and (member is None or member in got.isr_nodes) else None
    return wait_until(isr, timeout, f"the ISR of {topic}-{p} with {size} replicas")


def zombie_leader(nc, echo=None) -> dict:
    topo, c = nc.topology, nc.cluster
    topic, controller, leader, followers = _topic(nc)
    work = Workload(c.bootstrap, topic, 1, echo=echo)
    h = work.history
    probe = Probe(c.brokers[leader].bootstrap, topic, h, work.stop)
    work.start(probe)
    try:
        work.wait_acks(0, 20, what="writes acknowledged before the fault")
        epoch0 = nc.partition(topic, 0, controller).leader_epoch
        cycle = Cycle(1, [f"cut b{leader} zk"], ["zk-cut-leader"], h.now())
        for z in nc.zk_names:
            topo.cut(nc.broker_name(leader), z)
        t_cut = h.now()
        h.event(f"broker {leader} (leader of {topic}-0, epoch {epoch0}) cut from ZooKeeper")
        new = wait_until(lambda: (p := nc.partition(topic, 0, controller)).leader_id not in (leader, -1) and p,
                         45, "a new leader elected by the controller")
        t_elected = h.now()
        h.event(f"controller names broker {new.leader_id} leader at epoch {new.leader_epoch}")
        wait_until(lambda: nc.partition(topic, 0, new.leader_id).leader_id == new.leader_id, 30,
                   "the new leader knowing it leads")
        t_knows = h.now()
        wait_until(lambda: probe.refused_since(t_knows), 30, "the old leader refusing the probe's writes")
        t_resumed = work.wait_acks(t_knows, 5, what="writes acknowledged by the new leader")
        cycle.healed = h.now()
        topo.heal()
        h.event("healed")
        _wait_isr(nc, topic, controller, 3, member=leader)
        wait_until(lambda: (q := nc.partition(topic, 0, leader)).leader_id == new.leader_id
                   and q.leader_epoch == new.leader_epoch, 60, "the old leader following the new leader's epoch")
        t_rejoined = cycle.settled = h.now()
        h.event(f"broker {leader} back in the ISR, following epoch {new.leader_epoch}")
        work.wait_acks(t_rejoined, 10, what="writes acknowledged after the heal")
        probe_acks = probe.acked()
        late = [a for a in probe_acks if a[0] > t_knows]
        report = verdict(c, work, [cycle])
    finally:
        work.finish()
    last_probe_ack = max((a[1] for a in probe_acks), default=None)
    return {"scenario": "zombie-leader", **summary(report), "report": report,
            "old_leader": leader, "new_leader": new.leader_id, "epoch_before": epoch0, "epoch_after": new.leader_epoch,
            "election_s": round(t_elected - t_cut, 2),
            "old_leader_last_ack_after_cut_s": None if last_probe_ack is None else round(last_probe_ack - t_cut, 2),
            "probe_acked": len(probe_acks), "probe_acked_after_new_leader_knew": len(late),
            "probe_first_refusals_after_cut_s": probe.refusals(t_cut), "probe_unanswered": probe.no_answer,
            "producer_unavailable_s": round(work.longest_gap(t_cut - 1, t_resumed), 2),
            "rejoined_s_after_heal": round(t_rejoined - cycle.healed, 2)}


def one_way(nc, echo=None) -> dict:
    topo, c = nc.topology, nc.cluster
    topic, controller, leader, followers = _topic(nc)
    follower = followers[-1]  # not the controller
    work = Workload(c.bootstrap, topic, 1, echo=echo)
    h = work.history
    work.start()
    try:
        work.wait_acks(0, 20, what="writes acknowledged before the fault")
        cycle = Cycle(1, [f"cut-one-way b{leader}->b{follower}"], ["one-way"], h.now())
        topo.cut_one_way(nc.broker_name(leader), nc.broker_name(follower))
        t_cut = h.now()
        h.event(f"broker {leader} (leader) cannot send to broker {follower}")
        _wait_isr(nc, topic, controller, 2)
        t_shrunk = h.now()
        t_resumed = work.wait_acks(t_shrunk, 10, what="writes acknowledged with the ISR shrunk")
        cycle.healed = h.now()
        topo.heal()
        _wait_isr(nc, topic, controller, 3, member=follower)
        cycle.settled = h.now()
        work.wait_acks(cycle.settled, 10, what="writes acknowledged after the heal")
        still_leader = nc.partition(topic, 0, controller).leader_id
        report = verdict(c, work, [cycle])
    finally:
        work.finish()
    return {"scenario": "one-way", **summary(report), "report": report, "leader": leader, "follower": follower,
            "leader_after": still_leader, "isr_shrunk_s": round(t_shrunk - t_cut, 2),
            "producer_unavailable_s": round(work.longest_gap(t_cut - 1, t_resumed), 2),
            "isr_regrown_s_after_heal": round(cycle.settled - cycle.healed, 2)}


# ------------------------------------------------------------------------------------------- a long schedule

#: ``one-way-to-controller``: the leader cannot send to the controller (when it is not the controller itself,
#: else to a follower). It cannot shrink its ISR then (AlterPartition goes to the controller, as in Kafka), so
#: with a follower behind, acks=all writes of its partitions wait for the heal: an availability cost, held 20 s.
KINDS = ("zk-cut-leader", "one-way", "one-way-to-controller", "isolate-leader", "lossy-leader",
         "cut-leader-followers", "flapping-leader")
#: ``flapping-leader``: the leader isolated and healed FLAP_TIMES times, FLAP_S seconds each way (shorter than the
#: ZooKeeper session and the ISR lag: each flap alone changes nothing), then isolated for good
FLAP_TIMES, FLAP_S = 6, 1.5
#: with an ensemble of three ZooKeeper servers, also: the leader and one ZooKeeper server split from the
#: majority (two ZooKeeper servers and the other brokers); the minority's server loses its quorum and the
#: leader its session
ENSEMBLE_KINDS = (*KINDS, "zk-split")


def _shows_fault(nc, topic: str, p: int, leader: int, via: int):
    def check() -> bool:
        q = nc.partition(topic, p, via)
        return q.leader_id != leader or len(q.isr_nodes) < 3
    return check


def run_schedule(nc, seed: int, cycles: int, minutes: float, partitions: int = 3, echo=None) -> tuple[Report, dict]:
    """``cycles`` faults drawn from ``KINDS`` (no cycle begins after ``minutes``), each held until the cluster
    shows its effect (or 20 s), healed, and settled (every partition led, ISR of three, writes acknowledged on
    every partition) before the next; then the checker's report and per-kind numbers: the longest time a
    partition went without an acknowledgement from the fault to the settling, and the time from the heal until
    the cluster had settled (every ISR full again). ``nc`` is tierlog's cluster or Kafka's
    (tests/harness/netns_cluster.py): the same schedule for the same seed."""
    rng = random.Random(seed)
    topo, c = nc.topology, nc.cluster
    controller = c.wait_formed()
    topic = f"netns-{uuid.uuid4().hex[:8]}"
    create(c, topic, partitions, configs={"min.insync.replicas": 2})
    for p in range(partitions):
        _wait_isr(nc, topic, controller, 3, p)
    work = Workload(c.bootstrap, topic, partitions, producers=2, readers=2, interval=0.01, echo=echo)
    h = work.history
    work.start()
    done: list[Cycle] = []
    numbers: dict[str, list[float]] = {}
    full_isr: dict[str, list[float]] = {}
    deadline = time.monotonic() + minutes * 60
    try:
        work.wait_acks(0, 10, what="writes acknowledged before the first fault")
        for index in range(1, cycles + 1):
            if time.monotonic() > deadline:
                break
            kind = rng.choice(KINDS if len(nc.zk_names) == 1 else ENSEMBLE_KINDS)
            controller = c.wait_formed()
            p = rng.randrange(partitions)
            leader = nc.partition(topic, p, controller).leader_id
            others = [i for i in sorted(c.brokers) if i != leader]
            name = nc.broker_name(leader)
            cycle = Cycle(index, [], [kind], h.now())
            if kind == "zk-cut-leader":
                for z in nc.zk_names:
                    topo.cut(name, z)
            elif kind == "zk-split":
                # the leader and one ZooKeeper server on the minority side, everything else on the majority
                # side; clients (on the bridge) still reach both sides
                minority = [name, nc.zk_names[-1]]
                majority = [*nc.zk_names[:-1], *(nc.broker_name(o) for o in others)]
                for a in minority:
                    for b in majority:
                        topo.cut(a, b)
            elif kind == "one-way":
                topo.cut_one_way(name, nc.broker_name(rng.choice(others)))
            elif kind == "one-way-to-controller":
                topo.cut_one_way(name, nc.broker_name(controller if controller != leader else others[0]))
            elif kind == "isolate-leader":
                topo.isolate(name)
            elif kind == "lossy-leader":
                topo.loss(name, 5)
            elif kind == "flapping-leader":
                # the leader's links go down and up every FLAP_S for FLAP_TIMES rounds (the pace of the fault, not
                # a wait for the cluster), then stay down like an isolation until the cluster shows it
                for _ in range(FLAP_TIMES):
                    topo.isolate(name)
                    time.sleep(FLAP_S)
                    topo.heal()
                    time.sleep(FLAP_S)
                topo.isolate(name)
            else:
                for o in others:
                    topo.cut(name, nc.broker_name(o))
            flaps = f" after {FLAP_TIMES} flaps" if kind == "flapping-leader" else ""
            cycle.faults = [" + ".join(topo.faults) + flaps]
            done.append(cycle)
            h.event(f"cycle {index}: {', '.join(cycle.faults)} (leader of {topic}-{p}: {leader}, controller "
                    f"{controller})")
            try:  # hold until the cluster shows the fault: the partition led elsewhere or its ISR shrunk; packet
                # loss until 300 writes went through it
                if kind == "lossy-leader":
                    wait_until(lambda: work.acks_since(cycle.started) >= 300, 20, "writes under packet loss")  # noqa: B023
                else:
                    wait_until(_shows_fault(nc, topic, p, leader, others[0]), 20, "the fault's effect")
            except AssertionError:
                cycle.notes.append("the fault's effect not seen within 20 s")
                h.event(f"cycle {index}: no leader change or ISR shrink within 20 s")
            cycle.healed = h.now()
            topo.heal()
            try:
                c.wait_formed(90)
                for q in range(partitions):
                    _wait_isr(nc, topic, c.wait_formed(), 3, q, timeout=90)
                work.wait_acks(cycle.healed, 5, timeout=90)
            except AssertionError as e:
                cycle.notes.append(f"not settled: {e}")
                h.event(f"cycle {index} did not settle: {e}")
                break
            cycle.settled = h.now()
            numbers.setdefault(kind, []).append(round(work.longest_gap(cycle.started, cycle.settled), 2))
            full_isr.setdefault(kind, []).append(round(cycle.settled - cycle.healed, 2))
            h.event(f"cycle {index} settled in {cycle.settled - cycle.healed:.1f} s after the heal")
        report = verdict(c, work, done, seed)
        report.elapsed = h.now()
    finally:
        work.finish()
    unsettled = [c.label + ": " + "; ".join(c.notes) for c in done if c.settled is None]
    report.liveness.extend(unsettled)
    return report, {"longest_gap_s_by_kind": numbers, "settled_s_after_heal_by_kind": full_isr}
