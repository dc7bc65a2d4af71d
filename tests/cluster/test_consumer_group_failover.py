"""A KIP-848 consumer group across its coordinator's SIGKILL, on three tierlog brokers (ZooKeeper mode, RF=3).

confluent-kafka with ``group.protocol=consumer`` reads a topic in a group whose coordinator (the leader of its
``__consumer_offsets`` partition) is then killed. The consumer group records were written to the in-sync
replicas before each heartbeat was answered, so the broker that takes the partition over loads the same group:
the member goes on at its epoch, reads the records produced after the kill, and every record is read.
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer

from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, start_cluster
from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey

SESSION_MS = 3000


def _coordinator(cluster, via: int, group: str) -> tuple[int, str]:
    raw = RawClient(cluster.brokers[via].bootstrap)
    try:
        r = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        return (r.node_id, f"{r.host}:{r.port}") if r.error_code == 0 else (-1, "")
    finally:
        raw.close()


def _describe(address: str, group: str):
    raw = RawClient(address)
    try:
        return raw.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                               "include_authorized_operations": False}).groups[0]
    finally:
        raw.close()


def test_consumer_group_survives_its_coordinators_kill(tmp_path, zookeeper):
    cluster = start_cluster(tmp_path, zookeeper, brokers=3, settings={
        "zookeeper.session.timeout.ms": str(SESSION_MS), "offsets.topic.replication.factor": "3",
        "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"})
    try:
        controller = cluster.controller_id()
        topic = unique("cg-failover")
        create(cluster, topic, partitions=2)
        victim = next(i for i in cluster.running_ids() if i != controller)
        group = wait_until(lambda: next((g for g in (unique("cg-failover-group") for _ in range(50))
                                         if _coordinator(cluster, victim, g)[0] == victim), None),
                           30, what=f"a group coordinated by broker {victim}")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce(topic, value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        seen: set[bytes] = set()
        stop = threading.Event()
        failures: list[str] = []

        def consume():
            c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
                          "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200})
            c.subscribe([topic])
            try:
                while not stop.is_set():
                    m = c.poll(0.2)
                    if m is not None and m.error() is None:
                        seen.add(m.value())
                    elif m is not None and m.error().fatal():
                        failures.append(str(m.error()))
            finally:
                c.close()

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        wait_until(lambda: len(seen) == 100 or not_yet(len(seen)), 60, what="the first 100 records")
        before = _describe(cluster.brokers[victim].bootstrap, group)
        assert before.group_state == "Stable" and len(before.members) == 1
        cluster.brokers[victim].kill()
        for i in range(100, 200):
            producer.produce(topic, value=b"%d" % i, partition=i % 2)
        assert producer.flush(60) == 0
        wait_until(lambda: len(seen) == 200 or not_yet(len(seen)), 60, what="the records produced after the kill")
        assert seen == {b"%d" % i for i in range(200)} and not failures, failures
        survivor = next(i for i in cluster.running_ids())
        node, address = wait_until(lambda: (c := _coordinator(cluster, survivor, group))[0] not in (-1, victim)
                                   and c, 30, what="the new coordinator")
        after = _describe(address, group)
        # The same member at least at its epoch: the new coordinator loaded the group, it was not rebuilt.
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert after.group_epoch >= before.group_epoch
        assert after.members[0].member_epoch >= before.members[0].member_epoch
        stop.set()
        thread.join(30)
    finally:
        cluster.stop()
