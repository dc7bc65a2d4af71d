"""Replication throttles (Kafka's ``ReplicationQuotaManager``), which keep a reassignment's copying from
starving producers and consumers.

A broker has one quota per side:

- **leader**: of the replicas a topic lists for this broker in ``leader.replication.throttled.replicas``, a
  follower that is not in the ISR gets no data while the bytes sent of those replicas exceed
  ``leader.replication.throttled.rate`` (Kafka's shouldLeaderThrottle: the answer carries the partition's
  offsets and no records);
- **follower**: of the replicas listed for this broker in ``follower.replication.throttled.replicas``, the
  replica fetchers leave a partition out of their fetches while it is not in the ISR and the bytes fetched of
  those replicas exceed ``follower.replication.throttled.rate`` (Kafka's shouldFollowerThrottle).

Every byte of a throttled replica counts, in sync or not, as Kafka counts it. The rate is measured over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds`` (Kafka's SimpleRate,
:class:`~tierlog.tiered.quota.RateQuota`); the rates are dynamic broker configs and the replica lists topic
configs, both read on every check, so ``kafka-reassign-partitions --throttle`` and ``--verify`` take effect at
once. The lists name replicas as ``partition:broker`` pairs, or ``*`` for every replica of the topic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tierlog.cluster.image import TopicImage
from tierlog.config import BrokerConfig
from tierlog.server.fetch_types import FetchParams
from tierlog.server.partition import Partition
from tierlog.tiered.quota import RateQuota

ALL = None  # "*": every partition of the topic
HOLD_BACK_MAX_S = 1.0  # a held-back partition looks at the quota again at least this often (a rate may change)


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions of ``broker_id`` a throttled-replicas value names (``ALL`` for ``*``); Kafka's
    parseThrottledPartitions."""
    value = value.strip()
    if value == "*":
        return ALL
    out = set()
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if sep and broker.strip() == str(broker_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotaManager:
    def __init__(self, node_id: int, side: str, config: Callable[[], BrokerConfig],
                 topics: Callable[[], Mapping[str, TopicImage]]):
        """``side`` is ``leader`` or ``follower``; ``config`` gives the broker's configuration with its dynamic
        configs, ``topics`` the topics of the current metadata image."""
        self.node_id = node_id
        self.rate_key = f"{side}.replication.throttled.rate"
        self.replicas_key = f"{side}.replication.throttled.replicas"
        self._config = config
        self._topics = topics
        cfg = config()
        self.quota = RateQuota(lambda: self._config()[self.rate_key], cfg["replication.quota.window.num"],
                               cfg["replication.quota.window.size.seconds"])
        self._parsed: dict[str, tuple[str, frozenset[int] | None]] = {}  # topic -> (value, its partitions here)

    def is_throttled(self, topic: str, partition: int) -> bool:
        t = self._topics().get(topic)
        value = t.configs.get(self.replicas_key, "") if t is not None else ""
        if not value:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != value:
            cached = self._parsed[topic] = (value, throttled_partitions(value, self.node_id))
        return cached[1] is ALL or partition in cached[1]

    def throttle_time_ms(self) -> int:
        return self.quota.throttle_time_ms()

    def record(self, partition: Partition, size: int) -> None:
        """``size`` bytes of ``partition`` were sent (leader) or fetched (follower)."""
        if size and self.is_throttled(partition.topic, partition.index):
            self.quota.record(size)

    # ------------------------------------------------------------------ the leader's side

    def holds_back(self, params: FetchParams, partition: Partition) -> bool:
        """Whether a follower's fetch of ``partition`` gets no records now (Kafka's shouldLeaderThrottle)."""
        return (params.is_from_follower and params.replica_id not in partition.isr
                and self.is_throttled(partition.topic, partition.index) and self.throttle_time_ms() > 0)

    # ------------------------------------------------------------------ the follower's side

    def hold_back_s(self, partition: Partition) -> float:
        """How long this follower leaves ``partition`` out of its fetches (0: fetch it now)."""
        if self.node_id in partition.isr or not self.is_throttled(partition.topic, partition.index):
            return 0.0
        return min(self.throttle_time_ms() / 1000, HOLD_BACK_MAX_S)


__all__ = ["ReplicationQuotaManager", "throttled_partitions"]
