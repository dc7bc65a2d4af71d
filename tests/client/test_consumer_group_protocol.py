"""tierlog's consumer with ``group.protocol=consumer`` (KIP-848) against a broker that runs it.

The broker is Apache Kafka 4.4.0 (one JVM for the module); the ``tierlog`` variant of the
``group_broker`` fixture runs the same tests against tierlog's broker and is skipped until tierlog's
broker side of KIP-848 (issue 39 item 1) lands: then drop the skip mark on ``TIERLOG``.
The broker's heartbeat interval is 500 ms and it assigns at once (group.consumer.assignment.interval.ms=0),
so membership changes take a heartbeat or two.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid

import pytest

from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module, resolve_jars
from tests.harness.waiting import wait_until_async
from tierlog import errors
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer, ConsumerRebalanceListener
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition

BROKER_SETTINGS = {
    **SHARED_SETTINGS,
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.regex.refresh.interval.ms": "10000",
}

TIERLOG = pytest.param("tierlog", marks=pytest.mark.skip(
    reason="tierlog's broker does not speak ConsumerGroupHeartbeat yet (issue 39 item 1, broker side)"))


@pytest.fixture(scope="module", params=["kafka", TIERLOG])
def group_broker(request, tmp_path_factory):
    """The bootstrap address of a broker that runs KIP-848 groups."""
    if request.param == "kafka":
        version = kafka_peer_module.LATEST_KAFKA_VERSION
        resolve_jars(version)  # skips locally, fails in CI, without Java or Maven
        server = kafka_peer_module.KafkaServer(tmp_path_factory.mktemp("kip848"), overrides=BROKER_SETTINGS,
                                               version=version).start()
        try:
            yield server.bootstrap
        finally:
            server.stop()
    else:
        from tests.harness.broker import BrokerProcess

        broker = BrokerProcess(tmp_path_factory.mktemp("kip848") / "logs", dict(BROKER_SETTINGS)).start()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()


def consumer(bootstrap: str, group: str, **settings) -> Consumer:
    return Consumer(bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer",
                    auto_offset_reset="earliest", value_deserializer=bytes.decode, **settings)


async def create(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


async def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        futures = [await producer.send(topic, v.encode(), partition=i % partitions) for i, v in enumerate(values)]
        await producer.flush()
        for f in futures:
            await f


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", set(revoked)))

    def on_partitions_lost(self, lost):
        self.calls.append(("lost", set(lost)))


def partitions(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


# ------------------------------------------------------------------------------------------ broker-free


def test_settings_of_the_other_protocol_are_refused_as_kafka_does():
    for key, value in (("partition_assignment_strategy", "range"), ("session_timeout_ms", 10000),
                       ("heartbeat_interval_ms", 1000)):
        with pytest.raises(errors.InvalidConfigError,
                           match=f"^{key.replace('_', '.')} cannot be set when group.protocol=CONSUMER$"):
            Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="consumer", **{key: value})
    with pytest.raises(errors.InvalidConfigError,
                       match="^heartbeat.interval.ms, session.timeout.ms cannot be set when group.protocol=CONSUMER$"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "CONSUMER",
                  "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
    with pytest.raises(errors.InvalidConfigError,
                       match="^group.remote.assignor cannot be set when group.protocol=CLASSIC$"):
        Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", group_remote_assignor="uniform")
    # without a group.id there is no group to speak of: accepted, as Kafka does
    Consumer(bootstrap_servers="127.0.0.1:1", group_protocol="consumer", session_timeout_ms=10000)
    Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="consumer", group_remote_assignor="range")


def test_heartbeats_carry_only_changes_and_errors_make_them_full_again():
    """Against a scripted endpoint: the join carries every field, the acknowledgement only the owned
    partitions, a regular heartbeat nothing but the ids, the one after an error (here
    COORDINATOR_LOAD_IN_PROGRESS) every field again; FENCED_MEMBER_EPOCH loses the partitions and
    the rejoin is full again at epoch 0; a commit carries the member id and epoch, STALE_MEMBER_EPOCH
    fails it with CommitFailedError; close leaves with epoch -1."""
    from tests.client.fakebroker import FakeBroker
    from tierlog.client.errors import CommitFailedError
    from tierlog.client.fetcher import SubscriptionState
    from tierlog.client.membership import ConsumerMembershipManager
    from tierlog.client.network import KafkaClient
    from tierlog.config.client import validate_client_config
    from tierlog.protocol import ApiKey

    topic_id = uuid.UUID(int=0x848)
    assignment = {"topic_partitions": [{"topic_id": topic_id, "partitions": [0, 1]}]}

    def beat(epoch: int, **extra) -> dict:
        return {"member_epoch": epoch, "heartbeat_interval_ms": 20, **extra}

    async def main():
        async with FakeBroker() as fake:
            fake.api_versions.update({ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.OFFSET_COMMIT: (0, 9)})
            fake.topics = [{"name": "t", "topic_id": topic_id, "partitions": [
                {"partition_index": p, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]} for p in (0, 1)]}]
            fake.answers[ApiKey.FIND_COORDINATOR] = [{"node_id": 1, "host": "127.0.0.1", "port": fake.port}] * 2
            fake.answers[ApiKey.CONSUMER_GROUP_HEARTBEAT] = [
                beat(5, assignment=assignment), beat(5), beat(5),
                {"error_code": errors.CoordinatorLoadInProgressError.code}, beat(5),
                {"error_code": errors.FencedMemberEpochError.code},
                beat(7, assignment=assignment), beat(7)] + [beat(7)] * 200
            fake.answers[ApiKey.OFFSET_COMMIT] = [{"topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "error_code": errors.StaleMemberEpochError.code}]}]}]
            config = validate_client_config("consumer", {
                "bootstrap.servers": fake.address, "group.id": "g", "group.protocol": "consumer",
                "enable.auto.commit": False, "retry.backoff.ms": 10})
            client = KafkaClient(config, "consumer")
            client.start()
            subs = SubscriptionState("earliest")
            listener = Recorder()
            subs.subscribe(["t"], listener)
            client.add_topics(["t"])
            member = ConsumerMembershipManager(client, subs, config, asyncio.Event())
            try:
                async def polled_until(what: str, predicate):
                    async def step():
                        await member.poll(asyncio.get_running_loop().time() + 0.05)
                        return predicate()
                    await wait_until_async(step, 30, interval=0.01, what=what)

                heartbeats = lambda: [b for b in fake.bodies if hasattr(b, "member_epoch")]  # noqa: E731
                await polled_until("the assignment", lambda: set(subs.assignment) == partitions("t", 2))
                await polled_until("the fencing and the rejoin", lambda: len(heartbeats()) >= 8
                                   and ("lost", partitions("t", 2)) in listener.calls
                                   and set(subs.assignment) == partitions("t", 2))
                join, ack, regular, errored, full, fenced, rejoin, ack2 = heartbeats()[:8]
                assert (join.member_epoch, join.subscribed_topic_names, join.topic_partitions) == (0, ("t",), ())
                assert join.rebalance_timeout.total_seconds() == 300 and join.member_id
                assert ack.member_epoch == 5 and ack.subscribed_topic_names is None
                assert [(tp.topic_id, tuple(tp.partitions)) for tp in ack.topic_partitions] == [(topic_id, (0, 1))]
                assert (regular.member_epoch, regular.subscribed_topic_names, regular.topic_partitions,
                        regular.rebalance_timeout.total_seconds()) == (5, None, None, -0.001)
                assert errored.member_epoch == 5 and errored.subscribed_topic_names is None
                # after an error every field again, at the same epoch
                assert (full.member_epoch, full.subscribed_topic_names, len(full.topic_partitions)) == (5, ("t",), 1)
                assert fenced.member_epoch == 5 and fenced.topic_partitions is None
                assert (rejoin.member_epoch, rejoin.subscribed_topic_names, rejoin.topic_partitions) == (0, ("t",), ())
                assert rejoin.member_id == join.member_id  # the id is kept for the consumer's life
                assert ack2.member_epoch == 7 and len(ack2.topic_partitions) == 1
                assert [c[0] for c in listener.calls] == ["assigned", "lost", "assigned"]

                subs.assignment[TopicPartition("t", 0)].seek(3)
                with pytest.raises(CommitFailedError, match="stale member epoch"):
                    await member.commit_offsets(subs.all_consumed(), asyncio.get_running_loop().time() + 10)
                commit = next(b for b in fake.bodies if hasattr(b, "generation_id_or_member_epoch"))
                assert (commit.generation_id_or_member_epoch, commit.member_id) == (7, join.member_id)

                await member.close(asyncio.get_running_loop().time() + 10)
                assert heartbeats()[-1].member_epoch == -1
            finally:
                await member.close(asyncio.get_running_loop().time() + 1)
                await client.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------------ live broker


def test_one_member_reads_every_record_and_commits_with_its_epoch(group_broker):
    topic, n = "kip848-one", 30
    values = [f"v{i}" for i in range(n)]

    async def main():
        await create(group_broker, topic, 3)
        await produce(group_broker, topic, values, 3)
        listener = Recorder()
        async with consumer(group_broker, "kip848-one", enable_auto_commit=False) as c:
            c.subscribe([topic], listener=listener)
            got: list[str] = []

            async def read_all():
                for records in (await c.poll(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
                return len(got) >= n
            await wait_until_async(read_all, 30, interval=0, what=f"{n} records")
            assert sorted(got) == sorted(values)
            assert c.assignment() == partitions(topic, 3)
            assert listener.calls == [("assigned", partitions(topic, 3))]
            meta = c.group_metadata()
            assert meta.generation_id > 0 and meta.member_id  # the member epoch and the client-made id
            await c.commit()
            committed = await c.committed(partitions(topic, 3))
            assert {tp: om.offset for tp, om in committed.items()} == {tp: 10 for tp in partitions(topic, 3)}
        assert listener.calls[-1] == ("revoked", partitions(topic, 3))  # close revokes before leaving

    asyncio.run(main())


def test_two_members_share_the_partitions_and_the_survivor_takes_all(group_broker):
    """Commits after processing, auto-commit off: every record read exactly once across the
    rebalances (one member, then two sharing, then the survivor after the other closed)."""
    topic, group = "kip848-share", "kip848-share"
    everything = partitions(topic, 4)

    async def main():
        await create(group_broker, topic, 4)
        produced: list[str] = []
        seen: dict[str, list[str]] = {"a": [], "b": []}

        async def batch(tag: str) -> None:
            values = [f"{tag}-{i}" for i in range(20)]
            await produce(group_broker, topic, values, 4)
            produced.extend(values)

        async def loop(name: str, c: Consumer, stop: asyncio.Event) -> None:
            while not stop.is_set():
                for records in (await c.poll(timeout_ms=100)).values():
                    seen[name].extend(r.value for r in records)
                await c.commit()  # after processing

        def read_all() -> bool:
            return len(seen["a"]) + len(seen["b"]) >= len(produced)

        a = consumer(group_broker, group, enable_auto_commit=False)
        b = consumer(group_broker, group, enable_auto_commit=False)
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        await a.start()
        try:
            a.subscribe([topic])
            task_a = asyncio.create_task(loop("a", a, stop_a))
            await batch("first")
            await wait_until_async(lambda: a.assignment() == everything and read_all(), 30, what="a alone reads")
            await b.start()
            b.subscribe([topic])
            task_b = asyncio.create_task(loop("b", b, stop_b))
            await wait_until_async(lambda: a.assignment() and b.assignment()
                                   and a.assignment() | b.assignment() == everything, 30, what="a and b share")
            assert not a.assignment() & b.assignment()
            await batch("shared")
            await wait_until_async(read_all, 30, what="the shared batch read")
            assert seen["b"]  # b did read its share
            stop_b.set()
            await task_b
            await b.close()
            await wait_until_async(lambda: a.assignment() == everything, 30, what="a takes b's partitions")
            await batch("after")
            await wait_until_async(read_all, 30, what="the last batch read")
            stop_a.set()
            await task_a
        finally:
            stop_a.set()
            stop_b.set()
            await a.close()
            await b.close()
        assert sorted(seen["a"] + seen["b"]) == sorted(produced)

    asyncio.run(main())


def test_static_member_rejoining_gets_its_partitions_back(group_broker):
    topic, group = "kip848-static", "kip848-static"

    async def main():
        await create(group_broker, topic, 4)
        others = Recorder()
        a = consumer(group_broker, group, group_instance_id="static-a")
        b = consumer(group_broker, group, group_instance_id="static-b")
        async with b:
            b.subscribe([topic], listener=others)
            await a.start()
            a.subscribe([topic])

            async def both_assigned():
                await asyncio.gather(a.poll(timeout_ms=50), b.poll(timeout_ms=50))
                return a.assignment() and b.assignment() and a.assignment() | b.assignment() == partitions(topic, 4)
            await wait_until_async(both_assigned, 30, interval=0, what="a and b share the partitions")
            mine, b_epoch = a.assignment(), b.group_metadata().generation_id
            await a.close()  # epoch -2: the broker keeps a's partitions for its return
            closed_at, calls_before = time.monotonic(), len(others.calls)

            async def b_heard_since():  # b's answers after a left: no new epoch, no new partitions
                await b.poll(timeout_ms=50)
                return b._coordinator._last_hb_ok > closed_at and b._coordinator._target is None
            await wait_until_async(b_heard_since, 30, interval=0, what="b's heartbeat after a left")
            assert b.group_metadata().generation_id == b_epoch
            assert b.assignment() == partitions(topic, 4) - mine
            again = consumer(group_broker, group, group_instance_id="static-a")
            async with again:
                again.subscribe([topic])

                async def back():
                    await asyncio.gather(again.poll(timeout_ms=50), b.poll(timeout_ms=50))
                    return again.assignment()
                await wait_until_async(back, 30, interval=0, what="the static member's partitions")
                assert again.assignment() == mine
                assert b.assignment() == partitions(topic, 4) - mine
            # b was never handed a's partitions while a was away
            assert all(not (tps & mine) for what, tps in others.calls[calls_before:] if what == "assigned")

    asyncio.run(main())


def test_fenced_member_loses_its_partitions_and_rejoins(group_broker):
    """A heartbeat with an epoch the broker never gave (as after a missed answer) is fenced:
    FENCED_MEMBER_EPOCH, on_partitions_lost, a join at epoch 0 and the partitions back."""
    topic = "kip848-fenced"

    async def main():
        await create(group_broker, topic, 2)
        await produce(group_broker, topic, ["x0", "x1"], 2)
        listener = Recorder()
        async with consumer(group_broker, "kip848-fenced", enable_auto_commit=False) as c:
            c.subscribe([topic], listener=listener)
            got: list[str] = []

            async def read(n: int):
                for records in (await c.poll(timeout_ms=100)).values():
                    got.extend(r.value for r in records)
                return len(got) >= n
            await wait_until_async(lambda: read(2), 30, interval=0, what="the records")
            await c.commit()
            epoch = c.group_metadata().generation_id

            async def fenced():
                if not any(what == "lost" for what, _ in listener.calls):
                    c._coordinator.member_epoch = epoch + 1000  # until a heartbeat carries it
                await c.poll(timeout_ms=50)
                return listener.calls[-1][0] == "assigned" and any(what == "lost" for what, _ in listener.calls)
            await wait_until_async(fenced, 30, interval=0, what="the member fenced and back")
            assert ("lost", partitions(topic, 2)) in listener.calls
            assert c.assignment() == partitions(topic, 2)
            assert 0 < c.group_metadata().generation_id < epoch + 1000
            await produce(group_broker, topic, ["y0", "y1"], 2)
            await wait_until_async(lambda: read(4), 30, interval=0, what="records after the rejoin")
            # lost partitions start again from the committed offsets (nothing is committed for them on loss)
            assert sorted(got) == ["x0", "x1", "y0", "y1"]

    asyncio.run(main())


def test_regex_subscription_picks_up_a_topic_created_later(group_broker):
    async def main():
        await create(group_broker, "kip848-rx-first", 2)
        await produce(group_broker, "kip848-rx-first", ["f0", "f1"], 2)
        async with consumer(group_broker, "kip848-rx") as c:
            c.subscribe(pattern=re.compile(r"kip848-rx-.*"))
            got: list[str] = []

            async def read(n: int):
                for records in (await c.poll(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
                return len(got) >= n
            await wait_until_async(lambda: read(2), 30, interval=0, what="the first topic's records")
            await create(group_broker, "kip848-rx-later", 1)
            await produce(group_broker, "kip848-rx-later", ["l0"], 1)
            await wait_until_async(lambda: read(3), 30, interval=0, what="the later topic's record")
            assert sorted(got) == ["f0", "f1", "l0"]
            assert c.assignment() == partitions("kip848-rx-first", 2) | partitions("kip848-rx-later", 1)
            assert c.subscription() == {"kip848-rx-first", "kip848-rx-later"}

    asyncio.run(main())


def test_broker_errors_surface_as_kafka_exceptions(group_broker):
    async def fails(c: Consumer, exc_type: type) -> None:
        async def raised():
            with contextlib.suppress(exc_type):
                await c.poll(timeout_ms=100)
                return None
            return True
        await wait_until_async(raised, 30, interval=0, what=f"{exc_type.__name__} from poll")

    async def main():
        await create(group_broker, "kip848-errors", 1)
        async with consumer(group_broker, "kip848-bad-assignor", group_remote_assignor="no-such-assignor") as c:
            c.subscribe(["kip848-errors"])
            await fails(c, errors.UnsupportedAssignorError)
        # valid for Python's re, not for the broker's RE2J (no lookahead)
        async with consumer(group_broker, "kip848-bad-regex") as c:
            c.subscribe(pattern=re.compile(r"kip848-(?=e)errors"))
            await fails(c, errors.InvalidRegularExpressionError)

    asyncio.run(main())
