"""The replication throttles' rules (Kafka's ReplicationQuotaManager and shouldLeaderThrottle /
shouldFollowerThrottle), in-process: which replicas a throttled-replicas value names for a broker, that only
replicas outside the ISR are held back, and only while the rate is over its bound; the copy itself is
measured across brokers in tests/cluster/test_reassignment.py."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from tierlog.cluster.image import PartitionImage, TopicImage
from tierlog.config import BrokerConfig
from tierlog.server.fetch_types import FetchIsolation, FetchParams
from tierlog.server.quotas.replication_quota import ReplicationQuotaManager, throttled_partitions


def test_a_throttled_replicas_value_names_the_partitions_of_one_broker():
    assert throttled_partitions("0:1,1:2, 2:1 ,3:11", 1) == {0, 2}
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions(" * ", 3) is None  # every partition


def quotas(node_id: int, configs: dict, rate: int):
    broker = BrokerConfig({"leader.replication.throttled.rate": str(rate),
                           "follower.replication.throttled.rate": str(rate)})
    topics = {"t": TopicImage("t", uuid.uuid4(), {0: PartitionImage(0, 1, 0, (1, 2, 3), (1, 2))}, configs)}
    return (ReplicationQuotaManager(node_id, "leader", lambda: broker, lambda: topics),
            ReplicationQuotaManager(node_id, "follower", lambda: broker, lambda: topics))


def test_only_replicas_outside_the_isr_are_held_back_and_only_over_the_rate():
    leader, _ = quotas(1, {"leader.replication.throttled.replicas": "0:1"}, rate=1000)
    p = SimpleNamespace(topic="t", index=0, isr=(1, 2))
    to_3 = FetchParams(3, 500, 1, 1 << 20, FetchIsolation.LOG_END)
    to_2 = FetchParams(2, 500, 1, 1 << 20, FetchIsolation.LOG_END)
    assert leader.is_throttled("t", 0) and not leader.is_throttled("t", 1) and not leader.is_throttled("u", 0)
    assert not leader.holds_back(to_3, p)  # nothing sent yet
    leader.record(p, 5000)  # five times the bound in the first second
    assert leader.holds_back(to_3, p)
    assert not leader.holds_back(to_2, p)  # in sync: never held back
    assert not leader.holds_back(FetchParams(-1, 500, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK), p)  # consumers


def test_a_follower_leaves_its_throttled_replica_out_while_over_the_rate():
    _, follower = quotas(3, {"follower.replication.throttled.replicas": "0:3"}, rate=1000)
    moving = SimpleNamespace(topic="t", index=0, isr=(1, 2))
    assert follower.hold_back_s(moving) == 0
    follower.record(moving, 5000)
    assert 0 < follower.hold_back_s(moving) <= 1.0
    assert follower.hold_back_s(SimpleNamespace(topic="t", index=0, isr=(1, 2, 3))) == 0  # in sync now
    other = SimpleNamespace(topic="t", index=1, isr=(1,))
    follower.record(other, 10**9)  # bytes of a replica that is not throttled do not count
    assert follower.hold_back_s(other) == 0


def test_without_a_rate_nothing_is_held_back():
    leader, follower = quotas(1, {"leader.replication.throttled.replicas": "*",
                                  "follower.replication.throttled.replicas": "*"}, rate=2**63 - 1)
    p = SimpleNamespace(topic="t", index=0, isr=(2,))
    leader.record(p, 10**12)
    follower.record(p, 10**12)
    assert not leader.holds_back(FetchParams(3, 500, 1, 1 << 20, FetchIsolation.LOG_END), p)
    assert follower.hold_back_s(p) == 0
