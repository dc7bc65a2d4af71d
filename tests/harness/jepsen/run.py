"""A whole run: a cluster of its own, the workload, the leader monitor, the nemesis's cycles, the final check.

``run(work_dir, Settings(...))`` starts a ZooKeeper of its own (a ``zk-restart`` touches no other test), the
tmpfs of the disk broker when ``disk-full`` is among the kinds (skipped, with the reason, when mounting is not
permitted), three brokers with LinkProxies between them and a TcpProxy each to ZooKeeper, and a topic with
``replication_factor`` replicas and ``min.insync.replicas``. Producers and the group run throughout. Each
cycle: the faults begin (and hold), are healed in reverse order, the cluster settles (every broker running
and listed, one controller, every partition led on every broker, then the ISR back to ``isr_target``
members), and every partition must take acknowledged writes again. After the last cycle (or ``minutes``) the
workload stops, every partition is read back and the checker fills the :class:`Report`. Every wait has a
deadline; everything started is stopped by PID, and the tmpfs unmounted, whatever happens.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import rawclient
from tests.harness import zookeeper as zk
from tests.harness.jepsen import systems
from tests.harness.jepsen.checker import (
    Cycle,
    ReadIncomplete,
    Report,
    batch_producers,
    check,
    committed_offsets,
    read_back,
)
from tests.harness.jepsen.monitor import LeaderMonitor
from tests.harness.jepsen.nemesis import KINDS, MIXABLE, Nemesis, Rig
from tests.harness.jepsen.workload import GroupMember, History, ProducerWorker, ReaderWorker, TransactionalWorker


@dataclass
class Settings:
    seed: int = 1
    #: the cluster under the faults (systems.SYSTEMS): tierlog, kafka39 (ZooKeeper mode) or kafka44 (KRaft)
    system: str = "tierlog"
    cycles: int = 50
    #: no cycle begins after this many minutes (the final check still runs, within its own deadlines)
    minutes: float = 60.0
    kinds: tuple[str, ...] = KINDS
    #: the kinds of each cycle, in order, instead of drawing them (the run ends with the schedule)
    schedule: list[tuple[str, ...]] | None = None
    mixed_probability: float = 0.3
    brokers: int = 3
    partitions: int = 4
    replication_factor: int = 3
    min_insync_replicas: int = 2
    #: the ISR size a settled partition has again (default: every replica)
    isr_target: int | None = None
    producers: int = 3
    members: int = 2
    #: transactional producers (two partitions per transaction, every fourth aborted on purpose)
    txn_producers: int = 0
    txn_interval: float = 0.05
    #: plain read_committed consumers reading every partition throughout the run (``History.reads``)
    readers: int = 0
    #: each producer's pause between two values
    produce_interval: float = 0.01
    session_timeout_ms: int = 6000
    disk_size: str = "128m"
    #: a follower silent for 5 s leaves the ISR (Kafka's 30 s would outlast most faults here, and the ISR's
    #: shrinking and growing back is part of what the run exercises)
    broker_settings: dict[str, str] = field(default_factory=lambda: {"replica.lag.time.max.ms": "5000"})
    settle_timeout: float = 120.0
    #: a broker (a tierlog process or a Kafka JVM) not ready this long after its start is killed, the cycle noted
    broker_start_timeout: float = 120.0
    progress_timeout: float = 60.0


#: a cycle's note when its settle ran out of time with some partition's ISR still short of ``isr_target``
ISR_NOT_FULL = "ISR not full within the settle timeout"


class Unsettled(Exception):
    """The cluster did not come back within the deadline."""


class Run:
    def __init__(self, work_dir: Path, settings: Settings, echo=print):
        self.work_dir, self.s = work_dir, settings
        self.history = History(echo=echo)
        self.rng = random.Random(settings.seed)
        self.report = Report(settings.seed, [], self.history)
        self.stop_workload = threading.Event()
        self.zookeeper = None
        self.cluster = None
        self.disk_mount: Path | None = None
        self.rig: Rig | None = None
        self.monitor: LeaderMonitor | None = None
        self.producers: list[ProducerWorker] = []
        self.members: list[GroupMember] = []
        self.txn_producers: list[TransactionalWorker] = []
        self.readers: list[ReaderWorker] = []
        self.topic = f"jepsen-{uuid.uuid4().hex[:8]}"
        self.group = f"jepsen-group-{uuid.uuid4().hex[:8]}"

    @property
    def isr_target(self) -> int:
        return self.s.isr_target or self.s.replication_factor

    # ------------------------------------------------------------------------------------------ setup

    def _mount_disk(self, broker_id: int) -> None:
        import pytest

        from tests.faults.tmpfs import mount_tmpfs
        try:
            self.disk_mount = mount_tmpfs(self.work_dir / f"broker-{broker_id}", self.s.disk_size)
        except pytest.skip.Exception as e:
            self.report.skipped_kinds["disk-full"] = str(e)

    def setup(self) -> None:
        s, h = self.s, self.history
        if systems.uses_zookeeper(s.system):
            self.zookeeper = zk.start_zookeeper(self.work_dir / "zookeeper")
        disk_broker = s.brokers
        drawable = {k for c in s.schedule for k in c} if s.schedule is not None else set(s.kinds)
        if "disk-full" in drawable:
            self._mount_disk(disk_broker)
        settings = {"zookeeper.session.timeout.ms": str(s.session_timeout_ms), **s.broker_settings}
        self.cluster = systems.start(s.system, self.work_dir, self.zookeeper, s.brokers, settings)
        h.event(f"{systems.TITLES[s.system]} cluster of {s.brokers} brokers formed (ZooKeeper "
                f"{self.zookeeper.connect if self.zookeeper else 'none'}, "
                f"disk broker {disk_broker if self.disk_mount else 'none'})")
        self._create_topic()
        self.rig = systems.make_rig(s.system, self.cluster, self.zookeeper, self.topic, s.partitions, h,
                                    disk_broker if self.disk_mount else None, self.disk_mount,
                                    s.session_timeout_ms / 1000, broker_start_timeout=s.broker_start_timeout,
                                    group=self.group)
        bootstrap = ",".join(self.rig.addresses.values())
        self.monitor = LeaderMonitor(self.rig.addresses, self.topic, s.partitions, h.now)
        self.producers = [ProducerWorker(f"p{i}", bootstrap, self.topic, s.partitions, h, self.stop_workload,
                                         s.produce_interval, debug_log=str(self.work_dir / f"producer-p{i}.log"))
                          for i in range(s.producers)]
        self.members = [GroupMember(f"m{i}", bootstrap, self.topic, self.group, h, self.stop_workload)
                        for i in range(s.members)]
        self.txn_producers = [TransactionalWorker(f"t{i}", bootstrap, self.topic, s.partitions, h, self.stop_workload,
                                                  s.txn_interval, debug_log=str(self.work_dir / f"producer-t{i}.log"))
                              for i in range(s.txn_producers)]
        self.readers = [ReaderWorker(f"r{i}", bootstrap, self.topic, s.partitions, h, self.stop_workload)
                        for i in range(s.readers)]
        for t in [self.monitor, *self.producers, *self.members, *self.txn_producers, *self.readers]:
            t.start()
        since = h.now()
        if not self._progress(since, s.progress_timeout * 2):
            raise Unsettled(f"no acknowledged write on every partition within {s.progress_timeout * 2} s of the "
                            f"start: {dict(h.acked_partitions_since(since))}")
        h.event(f"workload under way: {h.acked_count()} writes acknowledged")

    def _create_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        s = self.s
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        futures = admin.create_topics([NewTopic(self.topic, s.partitions, s.replication_factor, config={
            "min.insync.replicas": str(s.min_insync_replicas)})], request_timeout=30)
        futures[self.topic].result(60)
        for b in self.cluster.brokers.values():
            rawclient.wait_for_leaders_on(b.bootstrap, self.topic, s.partitions, 60)
        self.history.event(f"topic {self.topic}: {s.partitions} partitions, {s.replication_factor} replicas, "
                           f"min.insync.replicas={s.min_insync_replicas}")

    # ------------------------------------------------------------------------------------------ waits

    def _progress(self, since: float, timeout: float) -> bool:
        """Every partition has a write acknowledged after ``since``, within ``timeout``."""
        parts = set(range(self.s.partitions))
        return self.rig.poll(lambda: parts <= set(self.history.acked_partitions_since(since)), timeout) \
            if self.rig else False

    def _heal_everything(self) -> None:
        """Whatever a failed heal left: ZooKeeper up, no broker paused or stopped, no link cut."""
        rig = self.rig
        if self.zookeeper is not None and not self.zookeeper.running():
            zk.restart_zookeeper(self.zookeeper)
            rig.zookeeper_down = False
        for i in list(rig.paused):
            self.cluster.resume(i)
            rig.paused.discard(i)
        for proxy in self.cluster.zookeeper_proxies.values():
            proxy.heal()
        for dest, proxy in self.cluster.proxies.items():
            for source in self.cluster.brokers:
                if source != dest:
                    proxy.heal(source=source)
        if self.disk_mount is not None:
            (self.disk_mount / "holder").unlink(missing_ok=True)
        for i in self.cluster.brokers:
            if i not in self.cluster.running_ids():
                self.history.event(f"broker {i} is not running; starting it")
                rig.start_broker(i)

    def settle(self, why: str, timeout: float | None = None) -> bool:
        """Every broker running and listed by every broker with one controller, every partition led (by the
        same broker) on every broker; then the ISR back to ``isr_target`` (a note, and False, when it does not)."""
        timeout = timeout or self.s.settle_timeout
        # not wait_until: one time budget shared by the steps of settling, each a wait of its own
        deadline = time.monotonic() + timeout
        try:
            self._heal_everything()
        except RuntimeError as e:  # a broker that did not start (Rig.start_broker): the next settle tries again
            raise Unsettled(f"{why}: {e}") from None
        cluster, rig = self.cluster, self.rig
        try:
            cluster.wait_formed(max(1.0, deadline - time.monotonic()))
        except AssertionError as e:
            raise Unsettled(f"{why}: cluster not formed within {timeout:.0f} s: {e}") from None

        def led():
            views = []
            for i in cluster.running_ids():
                parts = rawclient.metadata(rig.addresses[i], [self.topic]).topics[0].partitions
                if len(parts) != self.s.partitions or any(p.leader_id < 0 or p.error_code for p in parts):
                    return False
                views.append({p.partition_index: p.leader_id for p in parts})
            return all(v == views[0] for v in views)
        if not rig.poll(led, max(1.0, deadline - time.monotonic())):
            state = self._state()
            raise Unsettled(f"{why}: partitions not led on every broker within {timeout:.0f} s: {state}")

        def in_sync():
            return all(len(p.isr_nodes) >= self.isr_target
                       for p in rawclient.metadata(rig.addresses[min(cluster.running_ids())],
                                                   [self.topic]).topics[0].partitions)
        if not rig.poll(in_sync, max(1.0, deadline - time.monotonic())):
            self.history.event(f"{why}: ISR not back to {self.isr_target} within {timeout:.0f} s: {self._state()}")
            return False
        return True

    def _state(self) -> str:
        try:
            md = self.rig.metadata(timeout=5)
        except Exception as e:  # noqa: BLE001
            return f"(no metadata: {e})"
        return (f"brokers {sorted(b.node_id for b in md.brokers)}, controller {md.controller_id}, " + ", ".join(
            f"p{p.partition_index}: leader {p.leader_id} isr {list(p.isr_nodes)} err {p.error_code}"
            for p in md.topics[0].partitions))

    # ------------------------------------------------------------------------------------------ cycles

    def cycles(self) -> None:
        s, h, report = self.s, self.history, self.report
        nemesis = Nemesis(self.rig, self.rng, s.kinds, lambda why: self.settle(why), s.mixed_probability)
        # not a wait: the run's length in minutes, checked between cycles
        deadline = time.monotonic() + s.minutes * 60
        total = len(s.schedule) if s.schedule is not None else s.cycles
        for index in range(1, total + 1):
            if time.monotonic() > deadline:
                h.event(f"{s.minutes:g} minutes are up after {index - 1} cycles")
                break
            faults = nemesis.draw(s.schedule[index - 1] if s.schedule is not None else None)
            if not faults:
                continue
            cycle = Cycle(index, [f.describe() for f in faults], [f.kind for f in faults], h.now())
            report.cycles.append(cycle)
            started = []
            try:
                for f in faults:
                    h.event(f"cycle {index}: {f.describe()} begins")
                    f.start()
                    started.append(f)
                    f.hold()
            except Exception as e:  # noqa: BLE001 - the fault could not be carried out: noted, then healed
                cycle.notes.append(f"fault failed: {e!r}")
                h.event(f"cycle {index}: fault failed: {e!r}")
            finally:
                for f in reversed(started):
                    try:
                        f.heal()
                    except Exception as e:  # noqa: BLE001 - settle() heals what is left
                        cycle.notes.append(f"heal of {f.describe()} failed: {e!r}")
                        h.event(f"cycle {index}: heal of {f.describe()} failed: {e!r}")
            cycle.healed = h.now()
            h.event(f"cycle {index}: healed")
            try:
                if not self.settle(cycle.label):
                    cycle.notes.append(ISR_NOT_FULL)
            except Unsettled as e:
                report.liveness.append(str(e))
                h.event(f"cycle {index}: {e}")
                try:
                    self.settle(f"{cycle.label}, second try")
                except Unsettled as e2:
                    report.liveness.append(str(e2))
                    h.event(f"giving up the cycles: {e2}")
                    break
            cycle.settled = h.now()
            ok = self._progress(cycle.healed, s.progress_timeout)
            cycle.acks_after_heal = dict(h.acked_partitions_since(cycle.healed))
            if not ok:
                missing = sorted(set(range(s.partitions)) - set(cycle.acks_after_heal))
                report.liveness.append(f"{cycle.label}: no write acknowledged on partitions {missing} within "
                                       f"{s.progress_timeout:.0f} s of the heal ({self._state()})")
            h.event(f"cycle {index}: settled {cycle.settled - cycle.healed:.1f} s after the heal; "
                    f"{sum(cycle.acks_after_heal.values())} writes acknowledged since the heal")

    # ------------------------------------------------------------------------------------------ the end

    def finish(self) -> None:
        h, report, s = self.history, self.report, self.s
        try:
            self.settle("final settle")
        except Unsettled as e:
            report.liveness.append(str(e))
        h.event("stopping the workload")
        self.stop_workload.set()
        for t in [*self.producers, *self.members, *self.txn_producers, *self.readers]:
            t.join(200)
            if t.is_alive():
                report.liveness.append(f"{t.name} did not stop within 200 s")
        unflushed = sum(p.unflushed for p in self.producers)
        if unflushed:
            h.event(f"{unflushed} writes still unacknowledged when the producers stopped (indeterminate)")
        self.monitor.stop()
        report.leaderless = self.monitor.longest()
        bootstrap = ",".join(self.rig.addresses.values())
        try:
            records, highs = read_back(bootstrap, self.topic, s.partitions)
        except ReadIncomplete as e:
            report.incomplete.append(str(e))
            records, highs = [], {}
        try:
            committed = committed_offsets(bootstrap, self.topic, self.group, s.partitions)
        except ReadIncomplete as e:
            report.incomplete.append(str(e))
            committed = {}
        check(report, records, highs, committed,
              producers_of=lambda wanted: batch_producers(bootstrap, self.topic, wanted))

    def teardown(self) -> None:
        """Stop everything this run started, each step whatever the others did."""
        steps = [self.stop_workload.set]
        if self.rig is not None:
            steps.append(self.rig.close)
        if self.monitor is not None:
            steps.append(lambda: self.monitor.is_alive() and self.monitor.stop())
        if self.cluster is not None:
            for i, b in self.cluster.brokers.items():
                steps.append(lambda i=i, b=b: (self.work_dir / f"broker-{i}.out").write_text("".join(b.output)))
            steps.append(self.cluster.stop)
        if self.zookeeper is not None:
            steps.append(lambda: zk.stop_zookeeper(self.zookeeper))
        if self.disk_mount is not None:
            from tests.faults.tmpfs import unmount
            steps.append(lambda: unmount(self.disk_mount))
        for step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - the next steps still run
                print(f"teardown step failed: {e!r}")


def run(work_dir: Path, settings: Settings, echo=print) -> Report:
    """One whole run; the report says what the checker found (``report.ok``, ``report.format()``)."""
    started = time.monotonic()
    r = Run(work_dir, settings, echo)
    try:
        try:
            r.setup()
        except Unsettled as e:
            r.report.liveness.append(str(e))
            return r.report
        r.cycles()
        r.finish()
    finally:
        r.report.elapsed = time.monotonic() - started
        r.teardown()
    return r.report


def acked_after_each_heal(report: Report) -> dict[str, Counter]:
    """cycle label -> acknowledged writes per partition after its heal (the run cannot pass vacuously)."""
    return {c.label: Counter(c.acks_after_heal) for c in report.cycles}


# ------------------------------------------------------------------------------------------ side by side


def draw_schedule(seed: int, cycles: int, kinds: tuple[str, ...], mixed_probability: float = 0.3
                  ) -> list[tuple[str, ...]]:
    """The kinds of ``cycles`` cycles, drawn as the nemesis draws them (a mixed cycle nests a second mixable
    kind), fixed before any system runs so every system gets the same schedule for the same seed."""
    rng = random.Random(seed)
    out = []
    mixable = [k for k in kinds if k in MIXABLE]
    for _ in range(cycles):
        first = rng.choice(kinds)
        cycle = [first]
        if first in MIXABLE and len(mixable) > 1 and rng.random() < mixed_probability:
            cycle.append(rng.choice([k for k in mixable if k != first]))
        out.append(tuple(cycle))
    return out


def schedule_for(system: str, schedule: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``schedule`` without the kinds ``system`` has no counterpart for (a cycle left empty is dropped)."""
    have = set(systems.COUNTERPARTS[system])
    return [c for c in (tuple(k for k in cycle if k in have) for cycle in schedule) if c]


def cycle_key(cycle: Cycle) -> str:
    """A cycle's kinds as one name: ``kill-leader``, or ``kill-controller+kill-leader`` for a mixed one."""
    return "+".join(sorted(cycle.kinds))


def longest_gap(report: Report, start: float, end: float, partitions: int) -> float:
    """The longest time one partition went without a producer's acknowledgement between ``start`` and ``end``
    (the worst partition's)."""
    worst = 0.0
    for p in range(partitions):
        times = sorted(a.at for a in report.history.acks if a.partition == p and start <= a.at <= end)
        edges = [start, *times, end]
        worst = max(worst, *(b - a for a, b in zip(edges, edges[1:])))
    return worst


def figures(report: Report, partitions: int) -> dict[str, dict[str, list[float]]]:
    """Per cycle kind (``cycle_key``): ``unavailable`` (the longest time a partition went without an
    acknowledgement, from the fault's start until the cluster had settled) and ``isr_full`` (from the heal
    until every partition was led everywhere with its full ISR), one value per settled cycle, and
    ``isr_not_full``: the cycles whose ISR was still short when the settle's time ran out."""
    out: dict[str, dict[str, list[float]]] = {}
    for c in report.cycles:
        if c.settled is None or c.healed is None:
            continue
        f = out.setdefault(cycle_key(c), {"unavailable": [], "isr_full": [], "isr_not_full": []})
        f["unavailable"].append(round(longest_gap(report, c.started, c.settled, partitions), 2))
        if ISR_NOT_FULL in c.notes:
            f["isr_not_full"].append(c.index)
        else:
            f["isr_full"].append(round(c.settled - c.healed, 2))
    return out
