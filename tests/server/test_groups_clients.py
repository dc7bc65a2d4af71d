"""Consumer groups with real clients: kafka-python, aiokafka and confluent-kafka (librdkafka).

Each client joins groups, rebalances, commits, leaves, and a later consumer of the same group
resumes from the committed offsets - also across a broker restart. Session timeouts sit at the
broker minimum (6 s) and ``group.initial.rebalance.delay.ms`` is 0 (the fixture sets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.server.groupslib import SESSION_MS, KafkaPythonMember, committed_offsets, produce

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


def test_kafka_python_rebalance_commit_restart(start_broker):
    broker = start_broker()
    produce(broker.bootstrap, "kp", 4, 10, create=True)
    a = KafkaPythonMember(broker.bootstrap, "kp-group", "kp")
    a.start()
    wait_until(lambda: a.snapshot()[1] == {0, 1, 2, 3} and len(a.snapshot()[0]) == 40, 30, what="a owns all partitions")
    b = KafkaPythonMember(broker.bootstrap, "kp-group", "kp")
    b.start()
    # The second member triggers a rebalance that splits the partitions.
    wait_until(lambda: len(a.snapshot()[1]) == 2 and len(b.snapshot()[1]) == 2, 30, what="partitions split 2/2")
    assert a.snapshot()[1] | b.snapshot()[1] == {0, 1, 2, 3}
    produce(broker.bootstrap, "kp", 4, 5, start=10)
    wait_until(lambda: len(set(a.snapshot()[0]) | set(b.snapshot()[0])) == 60, 30, what="the new records")
    a.stop()
    b.stop()
    seen = {(p, o) for p, o, _ in a.snapshot()[0] + b.snapshot()[0]}
    assert seen == {(p, o) for p in range(4) for o in range(15)}
    assert committed_offsets(broker.bootstrap, "kp-group") == {("kp", p): 15 for p in range(4)}

    produce(broker.bootstrap, "kp", 4, 3, start=15)
    broker.restart()
    assert committed_offsets(broker.bootstrap, "kp-group") == {("kp", p): 15 for p in range(4)}
    c = KafkaPythonMember(broker.bootstrap, "kp-group", "kp")
    c.start()
    wait_until(lambda: len(c.snapshot()[0]) >= 12, 30, what="records after the committed offsets")
    time.sleep(0.3)
    c.stop()
    assert sorted((p, o) for p, o, _ in c.snapshot()[0]) == [(p, o) for p in range(4) for o in range(15, 18)]
    assert committed_offsets(broker.bootstrap, "kp-group") == {("kp", p): 18 for p in range(4)}


def test_kafka_python_assign_and_commit_without_group_membership(start_broker):
    """Simple consumers (assign + commit with generation -1) create an empty group, as with Kafka."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker = start_broker()
    produce(broker.bootstrap, "simple", 1, 5, create=True)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="simple-group", enable_auto_commit=False)
    tp = TopicPartition("simple", 0)
    c.assign([tp])
    c.commit({tp: OffsetAndMetadata(3, "note", -1)})
    assert c.committed(tp) == 3
    c.close()
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups["simple-group"]["group_state"] == "Empty"
        assert groups["simple-group"]["protocol_type"] == ""
        assert admin.delete_groups(["simple-group"]) == {"simple-group": "OK"}
    finally:
        admin.close()


# ------------------------------------------------------------------ aiokafka

def test_aiokafka_group_commit_and_resume(start_broker):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.structs import TopicPartition

    broker = start_broker()
    produce(broker.bootstrap, "aio", 2, 6, create=True)

    async def consume(count: int) -> list[tuple[int, int]]:
        consumer = aiokafka.AIOKafkaConsumer(
            "aio", bootstrap_servers=broker.bootstrap, group_id="aio-group", auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)
        await consumer.start()
        got = []
        try:
            while len(got) < count:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=200), 30)
                for tp, msgs in batch.items():
                    got += [(tp.partition, m.offset) for m in msgs]
                    if msgs:
                        await consumer.commit({tp: msgs[-1].offset + 1})
                    if len(got) >= count:
                        break
            committed = {p: await consumer.committed(TopicPartition("aio", p)) for p in (0, 1)}
        finally:
            await consumer.stop()
        return got, committed

    got, committed = asyncio.run(consume(12))
    assert sorted(got) == [(p, o) for p in (0, 1) for o in range(6)]
    assert committed == {0: 6, 1: 6}
    produce(broker.bootstrap, "aio", 2, 2, start=6)
    got, committed = asyncio.run(consume(4))
    assert sorted(got) == [(p, o) for p in (0, 1) for o in (6, 7)]
    assert committed == {0: 8, 1: 8}


# ------------------------------------------------------------------ confluent-kafka (librdkafka)

def _confluent_consumer(bootstrap: str, group: str, **extra):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
              "topic.metadata.refresh.interval.ms": 1000}
    config.update(extra)
    return confluent_kafka.Consumer(config)


def _confluent_consume(consumer, count: int, timeout: float = 30) -> list[tuple[int, int]]:
    got = []

    def consumed():
        if len(got) >= count:
            return True
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset()))
            consumer.commit(message=msg, asynchronous=False)
        return False

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        wait_until(consumed, timeout, interval=0, what=f"{count} records")
    return got


def test_confluent_kafka_group_commit_restart(start_broker):
    from confluent_kafka import TopicPartition

    broker = start_broker()
    produce(broker.bootstrap, "ck", 3, 4, create=True)
    c = _confluent_consumer(broker.bootstrap, "ck-group")
    c.subscribe(["ck"])
    got = _confluent_consume(c, 12)
    assert sorted(got) == [(p, o) for p in range(3) for o in range(4)]
    committed = c.committed([TopicPartition("ck", p) for p in range(3)], timeout=10)
    assert [tp.offset for tp in committed] == [4, 4, 4]
    c.close()
    produce(broker.bootstrap, "ck", 3, 2, start=4)
    broker.restart()
    c = _confluent_consumer(broker.bootstrap, "ck-group")
    c.subscribe(["ck"])
    got = _confluent_consume(c, 6)
    c.close()
    assert sorted(got) == [(p, o) for p in range(3) for o in (4, 5)]


def _commit_tolerating_rebalance(consumer, msg) -> None:
    """Commit one message (or all consumed); a commit racing a rebalance may be refused, as by Kafka.

    "No offset stored" means everything consumed is committed already."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        if msg is None:
            consumer.commit(asynchronous=False)
        else:
            consumer.commit(message=msg, asynchronous=False)
    except KafkaException as e:
        if e.args[0].code() not in (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS,
                                    KafkaError.UNKNOWN_MEMBER_ID, KafkaError._NO_OFFSET):
            raise


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_kafka_two_members_rebalance(start_broker, strategy):
    broker = start_broker()
    produce(broker.bootstrap, "ck2", 4, 3, create=True)
    members = [_confluent_consumer(broker.bootstrap, "ck2-group", **{"partition.assignment.strategy": strategy})
               for _ in range(2)]
    try:
        members[0].subscribe(["ck2"])
        members[1].subscribe(["ck2"])
        seen: set[tuple[int, int]] = set()

        def balanced():
            for m in members:
                msg = m.poll(0.05)
                if msg is not None and msg.error() is None:
                    seen.add((msg.partition(), msg.offset()))
                    _commit_tolerating_rebalance(m, msg)
            assignments = [{tp.partition for tp in m.assignment()} for m in members]
            return assignments if len(seen) == 12 and all(len(a) == 2 for a in assignments) \
                else not_yet((len(seen), assignments))

        assignments = wait_until(balanced, 40, interval=0,
                                         what="12 records seen and two partitions each (records seen, assignments)")
        assert seen == {(p, o) for p in range(4) for o in range(3)}
        assert [len(a) for a in assignments] == [2, 2] and assignments[0] | assignments[1] == {0, 1, 2, 3}
        for m in members:  # the group is stable now: commit what each member consumed
            _commit_tolerating_rebalance(m, None)
    finally:
        for m in members:
            m.close()
    assert committed_offsets(broker.bootstrap, "ck2-group") == {("ck2", p): 3 for p in range(4)}


def test_confluent_kafka_static_member_rejoins_without_rebalance(start_broker):
    """KIP-345: a static member that restarts within its session keeps its member slot and assignment."""
    from kafka.admin import KafkaAdminClient

    broker = start_broker()
    produce(broker.bootstrap, "st", 2, 2, create=True)
    c = _confluent_consumer(broker.bootstrap, "st-group", **{"group.instance.id": "instance-1"})
    c.subscribe(["st"])
    assert len(_confluent_consume(c, 4)) == 4
    c.close()  # a static member does not send LeaveGroup
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_groups(["st-group"])["st-group"]
        assert described["group_state"] == "Stable"
        (member,) = described["members"]
        assert member["group_instance_id"] == "instance-1"
        generation_members = member["member_id"]
        c = _confluent_consumer(broker.bootstrap, "st-group", **{"group.instance.id": "instance-1"})
        c.subscribe(["st"])
        wait_until(lambda: c.poll(0.1) is None and len(c.assignment()) == 2, 20, what="the static member's partitions")
        described = admin.describe_groups(["st-group"])["st-group"]
        (member,) = described["members"]
        assert member["group_instance_id"] == "instance-1" and member["member_id"] != generation_members
        c.close()
    finally:
        admin.close()
