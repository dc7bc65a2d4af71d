"""Windows without a leader, per partition: Metadata polled about every 100 ms during the run.

Each poll asks the brokers in turn (the one that answered last first, 0.5 s each) for the topic; a partition
is without a leader when the answer says leader -1 (or an error, or a leader the answer does not list among
the brokers), when no broker answers at all, or when the leader it names does not answer a Metadata request
within a second itself (killed or paused: until its ZooKeeper session expires, the others still name it). A
window opens at the first such poll and closes at the first poll that shows an answering leader again;
``longest()`` is the longest window of each partition, with when it began.
"""

from __future__ import annotations

import threading

from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey


class LeaderMonitor(threading.Thread):
    def __init__(self, addresses: dict[int, str], topic: str, partitions: int, clock, interval: float = 0.1):
        """``addresses``: broker id -> ``host:port`` of its client listener (stable across restarts);
        ``clock()``: seconds since the run began (the history's)."""
        super().__init__(daemon=True, name="leader-monitor")
        self.addresses, self.topic, self.partitions = dict(addresses), topic, partitions
        self.clock, self.interval = clock, interval
        self.stop_event = threading.Event()
        self.windows: dict[int, list[tuple[float, float]]] = {p: [] for p in range(partitions)}
        self._open: dict[int, float] = {}
        self._preferred = min(addresses)
        self.polls = 0
        self.unanswered = 0

    def _ask(self, broker_id: int, timeout: float):
        """Metadata of the topic from one broker, None when it does not answer within ``timeout``."""
        try:
            raw = RawClient(self.addresses[broker_id], timeout=timeout)
        except OSError:
            return None
        try:
            return raw.request(ApiKey.METADATA, 12, {"topics": [{"name": self.topic}],
                                                     "allow_auto_topic_creation": False})
        except Exception:  # noqa: BLE001 - a broker paused, stopping or just killed
            return None
        finally:
            raw.close()

    def _leaders(self) -> dict[int, int] | None:
        order = [self._preferred] + [i for i in sorted(self.addresses) if i != self._preferred]
        for broker_id in order:
            md = self._ask(broker_id, 0.5)
            if md is None:
                continue
            self._preferred = broker_id
            listed = {b.node_id for b in md.brokers}
            t = md.topics[0]
            if t.error_code != 0:
                return {}
            leaders = {p.partition_index: p.leader_id for p in t.partitions
                       if p.error_code == 0 and p.leader_id in listed}
            answering = {broker_id} | {i for i in set(leaders.values()) - {broker_id}
                                       if i in self.addresses and self._ask(i, 1.0) is not None}
            return {p: leader for p, leader in leaders.items() if leader in answering}
        return None

    def run(self) -> None:
        while not self.stop_event.is_set():
            leaders = self._leaders()
            now = self.clock()
            self.polls += 1
            if leaders is None:
                self.unanswered += 1
            for p in range(self.partitions):
                without = leaders is None or leaders.get(p, -1) < 0
                if without and p not in self._open:
                    self._open[p] = now
                elif not without and p in self._open:
                    self.windows[p].append((self._open.pop(p), now))
            self.stop_event.wait(self.interval)  # the polling period

    def stop(self, timeout: float = 10) -> None:
        self.stop_event.set()
        self.join(timeout)
        now = self.clock()
        for p, since in list(self._open.items()):
            self.windows[p].append((since, now))
        self._open.clear()

    def longest(self) -> dict[int, tuple[float, float]]:
        """partition -> (length in s, start) of its longest window without a leader ((0, 0) when none)."""
        out = {}
        for p, wins in self.windows.items():
            best = max(wins, key=lambda w: w[1] - w[0], default=(0.0, 0.0))
            out[p] = (best[1] - best[0], best[0])
        return out

    def current_window(self, partition: int) -> float | None:
        """When the partition's open window began, None when it has a leader."""
        return self._open.get(partition)
