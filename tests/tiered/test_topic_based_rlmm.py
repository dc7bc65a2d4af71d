"""The topic-based remote log metadata manager against a real tierlog broker process (one node, so the
metadata topic gets replication factor 1), with the manager running in the test process and talking to
the broker over its listener, as the broker's own manager does.

Kafka's cases: TopicBasedRemoteLogMetadataManagerTest, RemoteLogSegmentLifecycleTest,
TopicBasedRemoteLogMetadataManagerRestartTest, ...MultipleSubscriptionsTest, ConsumerTaskTest, and
KIP-1197's list (configure is offline, initialization starts once, its timeout counts from broker ready,
partitions announced earlier are followed, a permanent failure reaches the fatal handler)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.harness import logcapture
from tests.harness.broker import BrokerProcess
from tests.harness.waiting import TimedOut, wait_until, wait_until_async
from tierlog import errors
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.errors import KafkaTimeoutError
from tierlog.records.batch import iter_batches
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm import create_remote_log_metadata_manager
from tierlog.tiered.rlmm.consumer_task import ConsumerTaskStoppedError, RemoteLogMetadataConsumeTimeoutError
from tierlog.tiered.rlmm.partitioner import metadata_partition
from tierlog.tiered.rlmm.serde import deserialize
from tierlog.tiered.rlmm.topic_based import (
    RemoteLogMetadataManagerFailedError,
    RemoteLogMetadataManagerNotReadyError,
    TopicBasedRemoteLogMetadataManager,
)

S = RemoteLogSegmentState
METADATA_TOPIC = "__remote_log_metadata"
PARTITIONS = 5  # of the metadata topic, except where the default (50) is the point
TOPIC = uuid.UUID("3b6d0c52-7f0e-4a8e-9d3c-1f2a4b5c6d7e")
SEG_SIZE = 1_048_576


def tp(partition: int, topic_id: uuid.UUID, name: str = "orders") -> TopicIdPartition:
    return TopicIdPartition(topic_id, name, partition)


def now_ms() -> int:
    return int(time.time() * 1000)


def segment(user: TopicIdPartition, start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(user), start, end, -1, 0, now_ms(), SEG_SIZE, epochs)


def update(md: RemoteLogSegmentMetadata, state: S, custom: bytes | None = None) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.segment_id, now_ms(), custom, state, 1)


async def upsert(m, user, epochs, start, end, state=S.COPY_SEGMENT_FINISHED) -> RemoteLogSegmentMetadata:
    md = segment(user, start, end, epochs)
    await m.add_remote_log_segment_metadata(md)
    u = update(md, state)
    await m.update_remote_log_segment_metadata(u)
    return md.with_update(u)


def settings(bootstrap: str, log_dir: Path, **extra: str) -> dict[str, str]:
    return {"broker.id": "1", "log.dir": str(log_dir), "cluster.id": "rlmm-test",
            "remote.log.metadata.common.client.bootstrap.servers": bootstrap,
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
            "remote.log.metadata.initialization.retry.max.timeout.ms": "20000", **extra}


class FatalRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, str]] = []
        self.called = asyncio.Event()

    def __call__(self, reason: str) -> None:
        self.calls.append((time.monotonic(), reason))
        self.called.set()


def manager(bootstrap: str, log_dir: Path, **extra: str) -> TopicBasedRemoteLogMetadataManager:
    """Made the way the broker makes it: through the factory, by its short name."""
    m = create_remote_log_metadata_manager("topic", settings(bootstrap, log_dir, **extra))
    assert isinstance(m, TopicBasedRemoteLogMetadataManager)
    m.fatal = FatalRecorder()
    m.set_fatal_error_handler(m.fatal)
    return m


async def eventually(predicate, what: str, timeout: float = 20.0):
    """``wait_until_async``, what first, at the managers' quick pace."""
    return await wait_until_async(predicate, timeout, what=what, interval=0.01)


async def ready_manager(bootstrap: str, log_dir: Path, follow=(), **extra: str) -> TopicBasedRemoteLogMetadataManager:
    m = manager(bootstrap, log_dir, **extra)
    await m.on_broker_ready()
    await eventually(lambda: m.initialized or m.fatal.calls, "initialization")
    assert not m.fatal.calls, m.fatal.calls
    if follow:
        m.on_partition_leadership_changes(follow, [])
        await eventually(lambda: all(m.is_ready(p) for p in follow), "partitions ready")
    return m


class GatedPoll:
    """Holds the manager's consumer at its next poll until ``release()``: a deterministic window in which
    the metadata has been assigned and positioned but not read."""

    def __init__(self, consumer) -> None:
        self.inner = consumer.poll
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()
        consumer.poll = self

    async def __call__(self, *args, **kwargs):
        self.reached.set()
        await self.gate.wait()
        return await self.inner(*args, **kwargs)

    def release(self) -> None:
        self.gate.set()


def same_partitions_in_one_metadata_partition(topic: uuid.UUID) -> tuple[TopicIdPartition, TopicIdPartition]:
    by_mp: dict[int, TopicIdPartition] = {}
    for p in range(100):
        mp = metadata_partition(topic, p, PARTITIONS)
        if mp in by_mp:
            return by_mp[mp], tp(p, topic)
        by_mp[mp] = tp(p, topic)
    raise AssertionError("no two partitions share a metadata partition")


def state_of(m, user: TopicIdPartition, epochs=range(6)) -> dict:
    """Everything lookups tell about ``user``: to compare two managers' caches."""
    return {"all": sorted(m.list_remote_log_segments(user), key=lambda md: (md.start_offset, str(md.segment_id))),
            "by_epoch": {e: m.list_remote_log_segments(user, e) for e in epochs},
            "highest": {e: m.highest_offset_for_epoch(user, e) for e in epochs}}


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests that only need a serving broker (each uses topic ids of its own); tests that
    need a pristine one (its metadata topic, its defaults) start their own with ``start_broker``."""
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "logs", {}).start()
    yield b
    b.kill()


@pytest.fixture
def topic() -> uuid.UUID:
    """A topic id of this test's own, so tests sharing the broker never see each other's partitions."""
    return uuid.uuid4()


# --------------------------------------------------------------------------------- configure / KIP-1197


def test_configure_checks_settings_and_needs_log_dir(tmp_path):
    base = settings("127.0.0.1:1", tmp_path)
    m = TopicBasedRemoteLogMetadataManager()
    with pytest.raises(errors.InvalidConfigError, match="log.dir"):
        m.configure({k: v for k, v in base.items() if k != "log.dir"})
    for key, bad in [("remote.log.metadata.topic.retention.ms", "0"),
                     ("remote.log.metadata.topic.num.partitions", "0"),
                     ("remote.log.metadata.topic.replication.factor", "x")]:
        with pytest.raises(errors.InvalidConfigError, match=key):
            TopicBasedRemoteLogMetadataManager().configure({**base, key: bad})
    m = TopicBasedRemoteLogMetadataManager()
    m.configure(base)
    assert (m.num_partitions, m.replication_factor, m.retention_ms, m.consume_wait_s) == (PARTITIONS, 1, -1, 120)
    assert m.min_isr == 1, "KIP-1235's default of 2 is capped by the replication factor"
    m.configure({**base, "remote.log.metadata.topic.num.partitions": "9"})  # ignored, as in Kafka
    assert m.num_partitions == PARTITIONS
    # Client overrides reach each client, the role's prefix winning over the common one.
    m = TopicBasedRemoteLogMetadataManager()
    m.configure({**base, "remote.log.metadata.common.client.request.timeout.ms": "1111",
                 "remote.log.metadata.consumer.request.timeout.ms": "2222"})
    assert m._client_config("remote.log.metadata.consumer.", "c")["request.timeout.ms"] == "2222"
    assert m._client_config("remote.log.metadata.producer.", "p")["request.timeout.ms"] == "1111"
    assert m._client_config("remote.log.metadata.producer.", "p")["client.id"] == "p"


def test_no_connection_before_broker_ready_and_the_init_timeout_counts_from_it(tmp_path):
    """A 'broker' that accepts connections and drops them (never serves): configure makes no connection;
    on_broker_ready returns at once and starts the attempts; the fatal handler is called once the budget
    has passed since on_broker_ready, even though configure happened long before."""

    async def main():
        connections: list[float] = []

        async def drop(reader, writer):
            connections.append(time.monotonic())
            writer.close()

        server = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            m = manager(f"127.0.0.1:{port}", tmp_path,
                        **{"remote.log.metadata.initialization.retry.max.timeout.ms": "500",
                           "remote.log.metadata.initialization.retry.interval.ms": "50"})
            user = tp(0, TOPIC)
            m.on_partition_leadership_changes([user], [])
            await asyncio.sleep(1.0)  # twice the budget: counted from configure, it would be spent already
            assert connections == [] and not m.fatal.calls
            with pytest.raises(errors.ReplicaNotAvailableError):
                m.list_remote_log_segments(user)
            with pytest.raises(RemoteLogMetadataManagerNotReadyError):
                await m.add_remote_log_segment_metadata(segment(user, 0, 10, {0: 0}))

            ready_at = time.monotonic()
            await m.on_broker_ready()
            assert time.monotonic() - ready_at < 0.1, "on_broker_ready must return at once"
            await m.on_broker_ready()  # a second call starts nothing more
            await asyncio.wait_for(m.fatal.called.wait(), 10)
            failed_at, reason = m.fatal.calls[0]
            assert 0.5 <= failed_at - ready_at < 5, failed_at - ready_at
            assert "remote.log.metadata.initialization.retry.max.timeout.ms" in reason
            assert connections and connections[0] >= ready_at
            await asyncio.sleep(0.2)
            assert len(m.fatal.calls) == 1
            assert not m.is_ready(user)
            with pytest.raises(RemoteLogMetadataManagerFailedError, match="failed to initialize"):
                await m.add_remote_log_segment_metadata(segment(user, 0, 10, {0: 0}))
            await m.close()
        finally:
            server.close()

    asyncio.run(main())


def test_close_while_initializing_stops_quietly(tmp_path):
    async def main():
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        try:
            m = manager(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", tmp_path)
            await m.on_broker_ready()
            await asyncio.sleep(0.2)
            started = time.monotonic()
            await m.close()
            assert time.monotonic() - started < 2
            await asyncio.sleep(0.2)
            assert not m.fatal.calls, "closing is not a failure"
            with pytest.raises(RemoteLogMetadataManagerFailedError, match="closed"):
                await m.add_remote_log_segment_metadata(segment(tp(0, TOPIC), 0, 10, {0: 0}))
        finally:
            server.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------ the metadata topic


def test_topic_created_with_kafka_settings_and_initialization_runs_once(start_broker, tmp_path, caplog):
    # Broker defaults the manager must override: compaction, and a min.insync.replicas one broker cannot meet.
    b = start_broker(log_cleanup_policy="compact", min_insync_replicas=2)

    async def main():
        caplog.set_level(logging.INFO, logger="tierlog.tiered.rlmm.topic_based")
        m = manager(b.bootstrap, tmp_path, **{"remote.log.metadata.topic.num.partitions": "50",  # Kafka's default
                                              "remote.log.metadata.topic.retention.ms": "123456789"})
        user = tp(0, TOPIC)
        m.on_partition_leadership_changes([user], [])
        await asyncio.gather(m.on_broker_ready(), m.on_broker_ready())
        await m.on_broker_ready()
        await eventually(lambda: m.is_ready(user) or m.fatal.calls, "ready")
        assert not m.fatal.calls
        async with Admin(bootstrap_servers=b.bootstrap) as admin:
            described = (await admin.describe_topics([METADATA_TOPIC]))[METADATA_TOPIC]
            configs = (await admin.describe_configs([("topic", METADATA_TOPIC)]))[("topic", METADATA_TOPIC)]
        assert len(described.partitions) == 50
        assert {len(p.replicas) for p in described.partitions} == {1}
        assert configs["cleanup.policy"].value == "delete"
        assert configs["retention.ms"].value == "123456789"
        assert configs["remote.storage.enable"].value == "false"
        assert configs["min.insync.replicas"].value == "1"
        await upsert(m, user, {0: 0}, 0, 99)  # acks=all writes go through
        await m.close()

    asyncio.run(main())
    starts = [r for r in caplog.records if "now initializing topic-based RLMM" in r.getMessage()]
    assert len(starts) == 1, "one initialization however often on_broker_ready is called"


def test_topic_created_meanwhile_by_another_broker_is_fine(start_broker, tmp_path, monkeypatch, caplog):
    """The describe says absent, another broker creates the topic, our create gets TOPIC_ALREADY_EXISTS:
    a success, not a failed attempt."""
    b = start_broker()
    caplog.set_level(logging.DEBUG, logger="tierlog.tiered.rlmm.topic_based")
    describe = Admin.describe_topics
    answers = []

    async def racing_describe(self, names, **kwargs):
        if not answers:
            answers.append("absent")
            await self.create_topics([NewTopic(METADATA_TOPIC, PARTITIONS, 1)])  # the other broker
            raise errors.UnknownTopicOrPartitionError(METADATA_TOPIC)
        return await describe(self, names, **kwargs)

    monkeypatch.setattr(Admin, "describe_topics", racing_describe)

    async def main():
        user = tp(0, TOPIC)
        m = await ready_manager(b.bootstrap, tmp_path, follow=[user])
        assert answers == ["absent"]
        await upsert(m, user, {0: 0}, 0, 99)
        await m.close()

    asyncio.run(main())
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_a_metadata_topic_of_another_size_fails_for_good(start_broker, tmp_path):
    b = start_broker()

    async def main():
        async with Admin(bootstrap_servers=b.bootstrap) as admin:
            await admin.create_topics([NewTopic(METADATA_TOPIC, 3, 1, {"cleanup.policy": "delete"})])
        m = manager(b.bootstrap, tmp_path)
        user = tp(0, TOPIC)
        m.on_partition_leadership_changes([user], [])
        started = time.monotonic()
        await m.on_broker_ready()
        await asyncio.wait_for(m.fatal.called.wait(), 15)
        failed_at, reason = m.fatal.calls[0]
        assert failed_at - started < 10, "no retrying until the 20 s budget runs out"
        assert "has 3 partitions" in reason and f"num.partitions is {PARTITIONS}" in reason
        assert not m.initialized and not m.is_ready(user)
        with pytest.raises(RemoteLogMetadataManagerFailedError, match="has 3 partitions"):
            await m.add_remote_log_segment_metadata(segment(user, 0, 10, {0: 0}))
        await m.close()

    asyncio.run(main())



def test_the_deadline_cutting_an_attempt_short_does_not_hide_why_it_failed(start_broker, tmp_path, monkeypatch,
                                                                          caplog):
    """The first attempt fails for a reason; the next one meets a broker too slow to answer before the
    budget runs out. The timeout that ends it is the deadline, not a reason: the broker stops with the
    first error, said once (on a loaded machine CI saw the stop reason become REQUEST_TIMED_OUT)."""
    b = start_broker()
    caplog.set_level(logging.WARNING, logger="tierlog.tiered.rlmm.topic_based")
    calls = []

    async def failing_then_slow(self, names, *, timeout_ms, **kwargs):
        calls.append(timeout_ms)
        if len(calls) == 1:
            raise errors.InvalidTopicError("Topic '__remote_log_metadata' collides with an existing topic")
        await asyncio.sleep(timeout_ms / 1000)  # the broker does not answer within the operation's timeout
        raise KafkaTimeoutError("the operation's timeout expired")

    monkeypatch.setattr(Admin, "describe_topics", failing_then_slow)

    async def main():
        m = manager(b.bootstrap, tmp_path, **{"remote.log.metadata.initialization.retry.max.timeout.ms": "1000",
                                              "remote.log.metadata.initialization.retry.interval.ms": "50"})
        await m.on_broker_ready()
        await asyncio.wait_for(m.fatal.called.wait(), 15)
        [(_, reason)] = m.fatal.calls
        await m.close()
        return reason

    reason = asyncio.run(main())
    assert len(calls) >= 2, calls
    assert "last error: INVALID_TOPIC_EXCEPTION (17): Topic '__remote_log_metadata' collides" in reason, reason
    said = logcapture.messages(caplog, "tierlog.tiered.rlmm")
    assert len(said) == 1 and "INVALID_TOPIC_EXCEPTION" in said[0], said


# -------------------------------------------------------------------------------- writes and lookups


def test_segment_lifecycle_read_your_writes(shared_broker, topic, tmp_path):
    """Kafka's RemoteLogSegmentLifecycleTest.testRemoteLogSegmentLifeCycle: every lookup right after the
    write returned, with no waiting."""
    b = shared_broker
    user = tp(0, topic)

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=[user])
        # segment 0: offsets 0-100, epochs (0,0) (1,20) (2,80); not visible while being copied
        seg0 = segment(user, 0, 100, {0: 0, 1: 20, 2: 80})
        await m.add_remote_log_segment_metadata(seg0)
        assert m.remote_log_segment_metadata(user, 1, 40) is None
        assert [m.highest_offset_for_epoch(user, e) for e in (0, 1, 2)] == [None, None, None]
        assert m.list_remote_log_segments(user, 1) == [seg0]
        u = update(seg0, S.COPY_SEGMENT_FINISHED)
        await m.update_remote_log_segment_metadata(u)
        seg0 = seg0.with_update(u)
        seg1 = await upsert(m, user, {2: 101}, 101, 200)
        seg2 = await upsert(m, user, {2: 201, 3: 240}, 201, 300)
        seg3 = await upsert(m, user, {3: 250, 4: 370}, 250, 400)
        expected = {(1, 40): seg0, (2, 110): seg1, (3, 240): seg2, (3, 250): seg3, (4, 375): seg3,
                    (1, 110): None, (4, 401): None, (5, 301): None}
        for (epoch, offset), md in expected.items():
            assert m.remote_log_segment_metadata(user, epoch, offset) == md, (epoch, offset)
        assert m.list_remote_log_segments(user, 2) == [seg0, seg1, seg2]

        await m.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_STARTED))
        assert m.remote_log_segment_metadata(user, 0, 10) is None
        assert seg0.segment_id in {md.segment_id for md in m.list_remote_log_segments(user)}
        await m.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_FINISHED))
        assert m.remote_log_segment_metadata(user, 0, 10) is None
        assert seg0.segment_id not in {md.segment_id for md in m.list_remote_log_segments(user)}
        assert {e: m.highest_offset_for_epoch(user, e) for e in range(6)} == {
            0: 19, 1: 79, 2: 239, 3: 369, 4: 400, 5: None}
        with pytest.raises(ValueError):
            await m.add_remote_log_segment_metadata(seg1)  # not COPY_SEGMENT_STARTED
        with pytest.raises(ValueError):
            await m.update_remote_log_segment_metadata(update(seg1, S.COPY_SEGMENT_STARTED))
        await m.close()

    asyncio.run(main())


def test_visibility_of_each_segment_state(shared_broker, topic, tmp_path):
    """Kafka's testCacheSegmentWith{CopySegmentStarted,CopySegmentFinished,DeleteSegmentStarted}State and
    testCacheSegmentsWithDeleteSegmentFinishedState, one user partition per state."""
    b = shared_broker
    path = {S.COPY_SEGMENT_STARTED: [], S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED],
            S.DELETE_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
            S.DELETE_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED]}
    users = {state: tp(i, topic) for i, state in enumerate(path)}

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=list(users.values()))
        for state, steps in path.items():
            user = users[state]
            md = segment(user, 0, 50, {0: 0})
            await m.add_remote_log_segment_metadata(md)
            for step in steps:
                u = update(md, step)
                await m.update_remote_log_segment_metadata(u)
                md = md.with_update(u)
            found = m.remote_log_segment_metadata(user, 0, 0)
            assert found == (md if state == S.COPY_SEGMENT_FINISHED else None), state
            listed = [] if state == S.DELETE_SEGMENT_FINISHED else [md]
            assert m.list_remote_log_segments(user, 0) == listed, state
            assert m.list_remote_log_segments(user) == listed, state
            assert m.highest_offset_for_epoch(user, 0) == (None if state == S.COPY_SEGMENT_STARTED else 50), state
        await m.close()

    asyncio.run(main())


def test_writes_need_a_followed_partition_and_stop_partitions_forgets_it(shared_broker, topic, tmp_path):
    b = shared_broker
    followed, other = tp(0, topic), tp(1, topic)

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=[followed])
        with pytest.raises(RemoteLogMetadataManagerNotReadyError, match="not followed"):
            await m.add_remote_log_segment_metadata(segment(other, 0, 10, {0: 0}))
        with pytest.raises(RemoteResourceNotFoundError):
            m.list_remote_log_segments(other)
        await upsert(m, followed, {0: 0}, 0, 10)
        m.on_stop_partitions([followed])
        await eventually(lambda: not m.is_ready(followed), "stopped")
        with pytest.raises(RemoteResourceNotFoundError):
            m.list_remote_log_segments(followed)
        with pytest.raises(RemoteLogMetadataManagerNotReadyError, match="not followed"):
            await m.add_remote_log_segment_metadata(segment(followed, 11, 20, {0: 11}))
        await m.close()

    asyncio.run(main())


def test_a_deleted_partition_drops_its_cache_and_later_events_do_not_stop_the_reader(shared_broker, topic, tmp_path):
    """DELETE_PARTITION_FINISHED drops the partition's cache (Kafka); an event for it read afterwards, now or
    in a later replay, is ignored instead of stopping the consumer task."""
    b = shared_broker
    gone, kept = tp(0, topic), tp(1, topic)
    D = RemotePartitionDeleteState

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path / "a", follow=[gone, kept])
        await upsert(m, gone, {0: 0}, 0, 99)
        for state in (D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_STARTED, D.DELETE_PARTITION_FINISHED):
            await m.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(gone, state, now_ms(), 1))
        with pytest.raises(RemoteResourceNotFoundError):
            m.list_remote_log_segments(gone)
        await m.add_remote_log_segment_metadata(segment(gone, 100, 199, {0: 100}))  # a late copy task
        md = await upsert(m, kept, {0: 0}, 0, 99)
        assert m.consumer_task.failure is None and m.is_ready(kept)
        mp = m.consumer_task.metadata_partition(gone)
        end = m.consumer_task.read_offsets[mp]
        await m.close()

        again = await ready_manager(b.bootstrap, tmp_path / "b", follow=[kept])
        again.on_partition_leadership_changes([gone], [])

        def dropped() -> bool:
            try:
                again.list_remote_log_segments(gone)
            except RemoteResourceNotFoundError:
                return True
            except errors.ReplicaNotAvailableError:
                return False
            raise AssertionError("the deleted partition's metadata was loaded")

        await eventually(dropped, "the delete marker replayed")
        await eventually(lambda: again.consumer_task.read_offsets.get(mp, 0) >= end, "the late event replayed")
        assert again.consumer_task.failure is None
        assert again.list_remote_log_segments(kept) == [md]
        await again.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------ the consumer task


def test_events_of_other_partitions_in_the_same_metadata_partition_are_not_applied(shared_broker, topic, tmp_path):
    """Kafka's MultipleSubscriptionsTest: two user partitions share a metadata partition; a manager that
    follows one of them holds only its events; following the other later re-reads the metadata
    partition from the beginning without applying the first one's events twice."""
    b = shared_broker
    one, two = same_partitions_in_one_metadata_partition(topic)

    async def main():
        writer = await ready_manager(b.bootstrap, tmp_path / "writer", follow=[one, two])
        for i in range(3):
            await upsert(writer, one, {0: i * 100}, i * 100, i * 100 + 99)
            await upsert(writer, two, {0: i * 10}, i * 10, i * 10 + 9)
        reader = await ready_manager(b.bootstrap, tmp_path / "reader", follow=[one])
        assert state_of(reader, one) == state_of(writer, one)
        assert reader.consumer_task.events_applied == 6, "only the followed partition's events"
        with pytest.raises(RemoteResourceNotFoundError):
            reader.list_remote_log_segments(two)

        reader.on_partition_leadership_changes([two], [])
        await eventually(lambda: reader.is_ready(two), "second partition ready")
        assert state_of(reader, two) == state_of(writer, two)
        assert state_of(reader, one) == state_of(writer, one)
        assert reader.consumer_task.events_applied == 12, "the first partition's events were not applied again"
        # Both keep following new events.
        md = await upsert(writer, one, {1: 300}, 300, 399)
        await eventually(lambda: reader.remote_log_segment_metadata(one, 1, 350) == md, "new event read")
        await writer.close()
        await reader.close()

    asyncio.run(main())


def test_records_are_kafka_format_with_null_keys_in_the_mapped_partition(shared_broker, topic, tmp_path):
    b = shared_broker
    user = tp(4, topic, "payments")

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=[user])
        md = segment(user, 0, 99, {0: 0})
        finished = update(md, S.COPY_SEGMENT_FINISHED, custom=b"\x01custom")
        marker = RemotePartitionDeleteMetadata(user, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, now_ms(), 1)
        await m.add_remote_log_segment_metadata(md)
        await m.update_remote_log_segment_metadata(finished)
        await m.put_remote_partition_delete_metadata(marker)
        await m.close()
        return [md, finished, marker]

    written = asyncio.run(main())
    mp = metadata_partition(user.topic_id, user.partition, PARTITIONS)
    # Read by kafka-python from every metadata partition: ours are in the mapped one only, with null keys,
    # and values in Kafka's frame (version 1, api key, version 0) that decode to the events written.
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False)
    partitions = [KTopicPartition(METADATA_TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends, records = consumer.end_offsets(partitions), []

    def read():
        if not any(consumer.position(p) < ends[p] for p in partitions):
            return True
        for batch in consumer.poll(timeout_ms=200).values():
            records.extend(r for r in batch if deserialize(r.value).topic_id_partition == user)
        return False

    with contextlib.suppress(TimedOut):  # the records read are checked below
        wait_until(read, 20, interval=0, what="the metadata topic read to its end")
    consumer.close()
    assert [r.partition for r in records] == [mp] * 3
    assert [r.key for r in records] == [None] * 3
    assert [r.value[:3] for r in records] == [b"\x01\x00\x00", b"\x01\x01\x00", b"\x01\x02\x00"]
    assert [deserialize(r.value) for r in records] == written
    # Written by idempotent producers: every batch has a producer id, sequences grow per producer.
    log_file = b.log_dir / f"{METADATA_TOPIC}-{mp}" / "00000000000000000000.log"
    headers = [h for _, h in iter_batches(log_file.read_bytes())]
    assert headers and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
    for pid in {h.producer_id for h in headers}:
        sequences = [h.base_sequence for h in headers if h.producer_id == pid]
        assert sequences == sorted(sequences)


def test_restart_rebuilds_the_cache_from_the_topic_and_is_not_ready_until_caught_up(shared_broker, topic, tmp_path):
    """Kafka's TopicBasedRemoteLogMetadataManagerRestartTest, plus the window before catch-up (KIP-1007:
    lookups raise the retriable REPLICA_NOT_AVAILABLE) and partitions announced before broker ready."""
    b = shared_broker
    one, two = tp(0, topic), tp(1, topic)

    async def main():
        first = await ready_manager(b.bootstrap, tmp_path / "first", follow=[one, two])
        for i in range(4):
            await upsert(first, one, {0: 0, 1: i * 100 + 50} if i else {0: 0}, i * 100, i * 100 + 99)
        seg = await upsert(first, two, {0: 0}, 0, 99)
        await first.update_remote_log_segment_metadata(update(seg, S.DELETE_SEGMENT_STARTED))
        expected = {p: state_of(first, p) for p in (one, two)}
        await first.close()

        # A new instance (another broker's disk: no snapshot): positioned, then held before its first read.
        second = await ready_manager(b.bootstrap, tmp_path / "second")
        gate = GatedPoll(second.consumer)
        second.on_partition_leadership_changes([one], [two])
        await asyncio.wait_for(gate.reached.wait(), 10)
        for p in (one, two):
            assert not second.is_ready(p)
            with pytest.raises(errors.ReplicaNotAvailableError):
                second.list_remote_log_segments(p)
            with pytest.raises(errors.ReplicaNotAvailableError):
                second.remote_log_segment_metadata(p, 0, 10)
            with pytest.raises(errors.ReplicaNotAvailableError):
                second.highest_offset_for_epoch(p, 0)
        gate.release()
        await eventually(lambda: second.is_ready(one) and second.is_ready(two), "caught up")
        assert {p: state_of(second, p) for p in (one, two)} == expected
        await second.close()

        # Announced before broker ready: pending, then followed once initialized.
        third = manager(b.bootstrap, tmp_path / "third")
        third.on_partition_leadership_changes([one, two], [])
        third.on_stop_partitions([two])
        with pytest.raises(errors.ReplicaNotAvailableError):
            third.list_remote_log_segments(one)
        assert not third.is_ready(one)
        await third.on_broker_ready()
        await eventually(lambda: third.is_ready(one), "pending partition followed")
        assert state_of(third, one) == expected[one]
        await asyncio.sleep(0.2)
        assert not third.is_ready(two), "stopped before initialization: not followed"
        with pytest.raises(RemoteResourceNotFoundError):
            third.list_remote_log_segments(two)
        await third.close()

    asyncio.run(main())


def test_restart_from_a_snapshot_replays_only_the_tail(shared_broker, topic, tmp_path):
    """The seam for later: a manager restarted on the same log dir loads its per-metadata-partition
    snapshot and applies only the events written after it."""
    b = shared_broker
    one = tp(0, topic)

    async def main():
        first = await ready_manager(b.bootstrap, tmp_path / "broker-a", follow=[one])
        for i in range(5):
            await upsert(first, one, {0: i * 100}, i * 100, i * 100 + 99)
        await first.close()  # writes the snapshot
        other = await ready_manager(b.bootstrap, tmp_path / "broker-b", follow=[one])
        tail = await upsert(other, one, {1: 500}, 500, 599)
        expected = state_of(other, one)
        await other.close()

        again = await ready_manager(b.bootstrap, tmp_path / "broker-a", follow=[one])
        assert again.consumer_task.events_applied == 2, "only the add and update written after the snapshot"
        assert state_of(again, one) == expected
        assert again.remote_log_segment_metadata(one, 1, 550) == tail
        await again.close()

    asyncio.run(main())


def test_retriable_consumer_errors_keep_it_going_and_others_stop_it_loudly(shared_broker, topic, tmp_path, caplog):
    b = shared_broker
    user = tp(0, topic)

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=[user])
        inner = m.consumer.poll
        failures = {"retriable": 3}

        async def flaky_poll(*args, **kwargs):
            if failures["retriable"]:
                failures["retriable"] -= 1
                raise errors.NotLeaderOrFollowerError("leader moved")
            if failures.get("fatal"):
                raise errors.TopicAuthorizationFailedError("not allowed to read " + METADATA_TOPIC)
            return await inner(*args, **kwargs)

        m.consumer.poll = flaky_poll
        md = await upsert(m, user, {0: 0}, 0, 99)  # read back despite the retriable errors
        assert failures["retriable"] == 0 and m.is_ready(user)
        assert m.remote_log_segment_metadata(user, 0, 5) == md

        # A partition followed while the end offsets cannot be listed is positioned again, then loads.
        end_offsets, end_failures = m.consumer.end_offsets, []

        async def flaky_end_offsets(*args, **kwargs):
            if len(end_failures) < 2:
                end_failures.append(1)
                raise KafkaTimeoutError("ListOffsets timed out")
            return await end_offsets(*args, **kwargs)

        m.consumer.end_offsets = flaky_end_offsets
        m.on_partition_leadership_changes([tp(1, topic)], [])
        await eventually(lambda: m.is_ready(tp(1, topic)), "partition loaded after retriable errors")
        assert len(end_failures) == 2 and m.consumer_task.failure is None

        failures["fatal"] = True
        await eventually(lambda: m.consumer_task.failure is not None, "consumer stopped")
        assert not m.is_ready(user), "a stopped reader makes nothing ready"
        started = time.monotonic()
        with pytest.raises(ConsumerTaskStoppedError, match="TopicAuthorizationFailed"):
            await m.add_remote_log_segment_metadata(segment(user, 100, 199, {0: 100}))
        assert time.monotonic() - started < 1, "fails fast, not after remote.log.metadata.consume.wait.ms"
        await m.close()

    caplog.set_level(logging.WARNING, logger="tierlog.tiered.rlmm.consumer_task")
    asyncio.run(main())
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "tierlog.tiered.rlmm.consumer_task"]
    # one WARNING per kind of retriable error (3 NOT_LEADER_OR_FOLLOWER, then 2 timeouts), not one per retry
    assert sum(1 for level, text in messages if level == logging.WARNING and "retrying" in text) == 2
    assert any(level == logging.ERROR and "stopped on a non-retriable error" in text for level, text in messages)


def test_an_assignment_announced_while_the_first_ones_are_positioned_is_not_lost(shared_broker, topic, tmp_path):
    """A broker restarting as a leader: its partitions are announced as followers, then again as leaders
    while the reader is still listing where to start. The reader takes the new announcement first, then
    positions everything: it must not go idle with the announcement pending (it did: the partitions stayed
    loading until some later change woke it)."""
    b = shared_broker
    first, second = tp(0, topic), tp(1, topic)

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path)
        end_offsets, reached, gate = m.consumer.end_offsets, asyncio.Event(), asyncio.Event()

        async def held_end_offsets(*args, **kwargs):
            reached.set()
            await gate.wait()
            return await end_offsets(*args, **kwargs)

        m.consumer.end_offsets = held_end_offsets
        m.on_partition_leadership_changes([], [first, second])
        await asyncio.wait_for(reached.wait(), 20)  # the reader is positioning them, nothing else followed
        m.on_partition_leadership_changes([first, second], [])  # the same partitions, now led
        gate.set()
        await eventually(lambda: m.is_ready(first) and m.is_ready(second), "both partitions loaded")
        await m.close()

    asyncio.run(main())


def test_a_write_not_read_back_in_time_is_a_retriable_timeout(shared_broker, topic, tmp_path):
    b = shared_broker
    user = tp(0, topic)

    async def main():
        m = await ready_manager(b.bootstrap, tmp_path, follow=[user],
                                **{"remote.log.metadata.consume.wait.ms": "400"})
        gate = GatedPoll(m.consumer)
        await asyncio.wait_for(gate.reached.wait(), 5)
        md = segment(user, 0, 99, {0: 0})
        started = time.monotonic()
        with pytest.raises(RemoteLogMetadataConsumeTimeoutError, match="consume.wait.ms") as raised:
            await m.add_remote_log_segment_metadata(md)
        assert 0.4 <= time.monotonic() - started < 3
        assert raised.value.retriable and isinstance(raised.value, TimeoutError)
        gate.release()  # the event was written: it is applied once read
        await eventually(lambda: m.list_remote_log_segments(user) == [md], "event applied late")
        await m.close()

    asyncio.run(main())
