"""The nemesis: faults of one kind each, alone or two at a time, chosen by a seeded random generator.

Kinds (``KINDS``):

- ``kill-leader``: SIGKILL the leader of a partition; healed by starting it again (same port, same log dir);
- ``kill-controller``: the same for the controller;
- ``pause-leader``: SIGSTOP the leader of a partition until its ZooKeeper session expired (its registration
  gone from ZooKeeper, which the controller watches), a little longer, then SIGCONT: a paused old leader must
  not acknowledge anything after waking;
- ``pause-coordinator``: the same for the group's coordinator (FindCoordinator): a woken old coordinator must
  not confirm an offset commit it cannot keep;
- ``partition-leader``: cut the links between the leader of a partition and every other broker, both ways
  (the LinkProxies, by client id ``broker-<id>``); clients and ZooKeeper still reach it;
- ``zk-cut``: cut one broker (a leader, or the controller) from ZooKeeper (its TcpProxy) until its session
  expired, a little longer, then heal;
- ``disk-full``: fill the tmpfs holding one broker's log dir; healed by freeing the space and, when its log
  dir went offline, restarting it (a log dir stays offline until the broker restarts), or starting it when it
  exited (Kafka halts a broker whose every log dir failed);
- ``zk-restart``: stop ZooKeeper (SIGTERM) and start it again on the same port and data;
- ``rolling-restart``: every broker in turn, SIGTERM (controlled shutdown) and start, waiting for the
  cluster to settle before the next one.

A mixed cycle nests a second fault, on another broker, inside the first (``zk-restart`` always inside, as
the faults waiting for a session expiry need ZooKeeper). A fault holds for a random duration (a sleep is the
fault's length) or until a condition seen by polling, always within a deadline. Targets come from Metadata
at the moment, so a replay with the same seed makes the same choices of kinds and durations, and the same
choices of partitions and roles, though the brokers behind them may differ.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path

from tests.harness import rawclient
from tests.harness import zookeeper as zk
from tests.harness.tierlog_cluster import TierlogCluster
from tests.harness.waiting import TimedOut, wait_until
from tierlog.protocol import ApiKey

KINDS = ("kill-leader", "kill-controller", "pause-leader", "pause-coordinator", "partition-leader", "zk-cut",
         "disk-full", "zk-restart", "rolling-restart")
#: Kinds that can take part in a mixed cycle (a rolling restart is a sequence of its own).
MIXABLE = ("kill-leader", "kill-controller", "pause-leader", "pause-coordinator", "partition-leader", "zk-cut",
           "disk-full", "zk-restart")


class NoTarget(Exception):
    """The fault cannot find a broker to act on (all the candidates are already faulted)."""


class Rig:
    """The processes a run acts on: the cluster (with its proxies), its ZooKeeper, the tmpfs of one broker's log
    dir (or None), and what the faults currently hold."""

    def __init__(self, cluster: TierlogCluster, zookeeper, topic: str, partitions: int, history,
                 disk_broker: int | None = None, disk_mount: Path | None = None, session_timeout_s: float = 6.0,
                 broker_start_timeout: float = 60, group: str | None = None):
        self.cluster, self.zookeeper, self.topic, self.partitions = cluster, zookeeper, topic, partitions
        self.group = group
        self.history = history
        self.disk_broker, self.disk_mount = disk_broker, disk_mount
        self.session_timeout_s = session_timeout_s
        self.broker_start_timeout = broker_start_timeout
        self.addresses = {i: b.bootstrap for i, b in cluster.brokers.items()}
        self.paused: set[int] = set()
        self._zk = None  # a kazoo client of the rig's own, for session_expired
        self.down: set[int] = set()
        self.zookeeper_down = False

    # ------------------------------------------------------------------------------------------ views

    def responsive(self) -> list[int]:
        """Brokers running and not paused."""
        return [i for i in self.cluster.running_ids() if i not in self.paused]

    def metadata(self, exclude: set[int] = frozenset(), timeout: float = 20):
        """A Metadata answer for the topic from a responsive broker outside ``exclude`` (tried in turn)."""

        def answer():
            for i in self.responsive():
                if i in exclude:
                    continue
                try:
                    return rawclient.metadata(self.addresses[i], [self.topic])
                except Exception:  # noqa: BLE001 - stopping or starting: ask another
                    continue
            return None

        try:
            return wait_until(answer, timeout, interval=0.1, what="Metadata")
        except TimedOut:
            raise NoTarget(f"no broker outside {sorted(exclude)} answered Metadata within {timeout} s") from None

    def leaders(self) -> dict[int, int]:
        md = self.metadata()
        return {p.partition_index: p.leader_id for p in md.topics[0].partitions}

    def controller(self) -> int:
        return self.metadata().controller_id

    def coordinator(self) -> int:
        """The broker coordinating the workload's group (FindCoordinator), -1 when none answers."""
        for i in self.responsive():
            try:
                raw = rawclient.RawClient(self.addresses[i], timeout=5)
            except OSError:
                continue
            try:
                answer = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": self.group, "key_type": 0})
            except Exception:  # noqa: BLE001 - ask another
                continue
            finally:
                raw.close()
            if answer.error_code == 0:
                return answer.node_id
        return -1

    # ------------------------------------------------------------------------------------------ acts

    def start_broker(self, broker_id: int) -> None:
        """Start a stopped broker on its port and log dir, within ``broker_start_timeout`` (then killed)."""
        errors: list[BaseException] = []

        def start() -> None:
            try:
                self.cluster.start([broker_id], timeout=self.broker_start_timeout)
            except BaseException as e:  # noqa: BLE001 - reported on the caller's thread
                errors.append(e)
        t0 = time.monotonic()
        t = threading.Thread(target=start, daemon=True)
        t.start()
        t.join(self.broker_start_timeout + 15)
        if t.is_alive():  # silent and not ready: its output loop ends when the process does
            self.cluster.brokers[broker_id].kill()
            t.join(15)
            raise RuntimeError(f"broker {broker_id} did not start within {self.broker_start_timeout} s")
        if errors:
            raise errors[0]
        self.down.discard(broker_id)
        self.history.event(f"broker {broker_id} started in {time.monotonic() - t0:.1f} s")

    def stop_broker(self, broker_id: int, timeout: float = 60) -> None:
        """SIGTERM (controlled shutdown); SIGKILL after ``timeout``, noted as an event."""
        t0 = time.monotonic()
        try:
            status = self.cluster.brokers[broker_id].stop(timeout)
            self.history.event(f"broker {broker_id} stopped in {time.monotonic() - t0:.1f} s (exit status {status})")
        except AssertionError as e:
            self.history.event(f"broker {broker_id} did not stop within {timeout} s of SIGTERM; killed: "
                               f"{str(e).splitlines()[0]}")
        self.down.add(broker_id)

    def kill_broker(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].kill()
        self.down.add(broker_id)

    def session_expired(self, broker_id: int) -> bool:
        """ZooKeeper no longer holds ``broker_id``'s registration (``/brokers/ids/<id>`` went with its session).
        Asked of ZooKeeper itself: a broker cut from it would still list the others in its Metadata."""
        if self._zk is None:
            from kazoo.client import KazooClient
            quiet = logging.getLogger("jepsen.kazoo")
            quiet.setLevel(logging.ERROR)
            client = KazooClient(hosts=self.cluster.zookeeper_connect, timeout=10, logger=quiet,
                                 connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1})
            client.start(timeout=10)
            self._zk = client
        return self._zk.exists(f"/brokers/ids/{broker_id}") is None

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def poll(self, check, timeout: float) -> bool:
        """Poll ``check()`` every 100 ms until it holds (True) or ``timeout`` passes (False)."""
        try:
            # Exception: a broker between states
            return bool(wait_until(check, timeout, what="the check", interval=0.1, ignore=(Exception,)))
        except TimedOut:
            return False


# ------------------------------------------------------------------------------------------ faults


class Fault:
    kind = ""

    def __init__(self, rig: Rig, rng: random.Random):
        self.rig, self.rng = rig, rng
        self.target: int | None = None

    def choose(self, exclude: set[int]) -> None:
        """Pick the broker to act on, outside ``exclude``; NoTarget when there is none."""

    def targets(self) -> set[int]:
        return set() if self.target is None else {self.target}

    def describe(self) -> str:
        return self.kind if self.target is None else f"{self.kind} {self.target}"

    def start(self) -> None:
        raise NotImplementedError

    def hold(self) -> None:
        time.sleep(self.rng.uniform(2, 6))  # the fault's duration

    def heal(self) -> None:
        pass

    def _leader_target(self, exclude: set[int]) -> int:
        """The leader of a randomly drawn partition, else of another, outside ``exclude``."""
        leaders = self.rig.leaders()
        order = list(range(self.rig.partitions))
        self.rng.shuffle(order)
        for p in order:
            leader = leaders.get(p, -1)
            if leader >= 0 and leader not in exclude and leader in self.rig.responsive():
                return leader
        raise NoTarget(f"no partition led outside {sorted(exclude)}: {leaders}")


class KillLeader(Fault):
    kind = "kill-leader"

    def choose(self, exclude):
        self.target = self._leader_target(exclude)

    def start(self):
        self.rig.kill_broker(self.target)

    def heal(self):
        self.rig.start_broker(self.target)


class KillController(KillLeader):
    kind = "kill-controller"

    def choose(self, exclude):
        controller = self.rig.controller()
        if controller < 0 or controller in exclude:
            raise NoTarget(f"the controller ({controller}) is already faulted")
        self.target = controller


class PauseLeader(Fault):
    kind = "pause-leader"

    def choose(self, exclude):
        self.target = self._leader_target(exclude)

    def start(self):
        self.rig.cluster.pause(self.target)
        self.rig.paused.add(self.target)

    def hold(self):
        rig = self.rig
        t0 = time.monotonic()
        if rig.poll(lambda: rig.session_expired(self.target), rig.session_timeout_s * 3 + 20):
            rig.history.event(f"broker {self.target}'s session expired {time.monotonic() - t0:.1f} s into the pause")
        else:
            rig.history.event(f"broker {self.target} still registered {time.monotonic() - t0:.1f} s into the pause")
        time.sleep(self.rng.uniform(0.5, 3))  # the rest of the pause

    def heal(self):
        self.rig.cluster.resume(self.target)
        self.rig.paused.discard(self.target)


class PauseCoordinator(PauseLeader):
    kind = "pause-coordinator"

    def choose(self, exclude):
        coordinator = self.rig.coordinator()
        if coordinator < 0 or coordinator in exclude or coordinator not in self.rig.responsive():
            raise NoTarget(f"the group's coordinator ({coordinator}) is unknown or already faulted")
        self.target = coordinator


class PartitionLeader(Fault):
    kind = "partition-leader"

    def choose(self, exclude):
        self.target = self._leader_target(exclude)

    def _links(self):
        return [(a, b) for o in self.rig.cluster.brokers if o != self.target for a, b in ((self.target, o),
                                                                                           (o, self.target))]

    def start(self):
        for dest, source in self._links():
            self.rig.cluster.proxies[dest].cut(source=source)

    def hold(self):
        time.sleep(self.rng.uniform(3, 10))

    def heal(self):
        for dest, source in self._links():
            self.rig.cluster.proxies[dest].heal(source=source)


class ZkCut(Fault):
    kind = "zk-cut"

    def choose(self, exclude):
        if self.rng.random() < 0.3:
            controller = self.rig.controller()
            if controller >= 0 and controller not in exclude:
                self.target = controller
                return
        self.target = self._leader_target(exclude)

    def start(self):
        self.rig.cluster.zookeeper_proxies[self.target].cut()

    def hold(self):
        rig = self.rig
        t0 = time.monotonic()
        if rig.poll(lambda: rig.session_expired(self.target), rig.session_timeout_s * 3 + 20):
            rig.history.event(f"broker {self.target}'s session expired {time.monotonic() - t0:.1f} s after the cut")
        else:
            rig.history.event(f"broker {self.target} still registered {time.monotonic() - t0:.1f} s after the cut")
        time.sleep(self.rng.uniform(0.5, 4))

    def heal(self):
        self.rig.cluster.zookeeper_proxies[self.target].heal()


class DiskFull(Fault):
    kind = "disk-full"

    def choose(self, exclude):
        if self.rig.disk_mount is None or self.rig.disk_broker in exclude:
            raise NoTarget("no tmpfs broker available")
        self.target = self.rig.disk_broker

    def start(self):
        from tests.faults.tmpfs import hold_space
        self._mark = len(self.rig.cluster.brokers[self.target].output)
        hold_space(self.rig.disk_mount, 0)

    def heal(self):
        rig = self.rig
        (rig.disk_mount / "holder").unlink(missing_ok=True)
        output = rig.cluster.brokers[self.target].output[self._mark:]
        if self.target not in rig.cluster.running_ids():
            # Kafka halts a broker whose only log dir failed (its last lines may not have reached the full disk)
            rig.history.event(f"broker {self.target} exited on the full disk; starting it")
            rig.down.add(self.target)
            rig.start_broker(self.target)
        elif any("is offline" in line for line in output):
            rig.history.event(f"broker {self.target}'s log dir went offline; restarting it")
            rig.stop_broker(self.target)
            rig.start_broker(self.target)


class ZkRestart(Fault):
    kind = "zk-restart"

    def start(self):
        zk.stop_zookeeper(self.rig.zookeeper)
        self.rig.zookeeper_down = True

    def hold(self):
        time.sleep(self.rng.uniform(1, 5))

    def heal(self):
        zk.restart_zookeeper(self.rig.zookeeper)
        self.rig.zookeeper_down = False


class RollingRestart(Fault):
    kind = "rolling-restart"

    def __init__(self, rig, rng, settle):
        super().__init__(rig, rng)
        self.settle = settle  # the run's wait for a settled cluster

    def start(self):
        for broker_id in sorted(self.rig.cluster.brokers):
            self.rig.history.event(f"rolling restart: broker {broker_id}")
            self.rig.stop_broker(broker_id)
            self.rig.start_broker(broker_id)
            t0 = time.monotonic()
            self.settle(f"rolling restart of broker {broker_id}")
            self.rig.history.event(f"rolling restart: settled {time.monotonic() - t0:.1f} s after broker "
                                   f"{broker_id} started")

    def hold(self):
        pass


FAULTS = {cls.kind: cls for cls in (KillLeader, KillController, PauseLeader, PauseCoordinator, PartitionLeader,
                                    ZkCut, DiskFull, ZkRestart)}


class Nemesis:
    """Draws each cycle's faults from ``kinds`` with ``rng``; a cycle is mixed with ``mixed_probability``."""

    def __init__(self, rig: Rig, rng: random.Random, kinds: tuple[str, ...], settle, mixed_probability: float = 0.3):
        self.rig, self.rng, self.kinds, self.settle = rig, rng, tuple(kinds), settle
        self.mixed_probability = mixed_probability

    def make(self, kind: str) -> Fault:
        if kind == "rolling-restart":
            return RollingRestart(self.rig, self.rng, self.settle)
        return FAULTS[kind](self.rig, self.rng)

    def draw(self, schedule: tuple[str, ...] | None = None) -> list[Fault]:
        """The faults of a cycle, targets chosen: ``schedule`` names the kinds, else the generator draws."""
        if schedule is None:
            first = self.rng.choice(self.kinds)
            kinds = [first]
            mixable = [k for k in self.kinds if k in MIXABLE]
            if first in MIXABLE and len(mixable) > 1 and self.rng.random() < self.mixed_probability:
                kinds.append(self.rng.choice([k for k in mixable if k != first]))
        else:
            kinds = list(schedule)
        kinds.sort(key=lambda k: k == "zk-restart")  # ZooKeeper's restart nests inside the other fault
        faults: list[Fault] = []
        taken: set[int] = set()
        for kind in kinds:
            f = self.make(kind)
            try:
                f.choose(taken)
            except NoTarget as e:
                self.rig.history.event(f"{kind} left out: {e}")
                continue
            taken |= f.targets()
            faults.append(f)
        return faults
