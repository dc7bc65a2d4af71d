"""Scenarios of tierlog's client against any broker, and the versions it sent (issue 39, item 4).

The client logs each request's API and version at DEBUG (``Sending PRODUCE v13 to node 1``, as Kafka's
NetworkClient does); :func:`sent_versions` counts them from what pytest's ``caplog`` captured, so a test
can say which versions went out against Kafka too, where no request counter can be scraped.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

from tests.harness.logcapture import messages
from tests.harness.waiting import wait_until_async
from tierlog import errors
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition
from tierlog.protocol import ApiKey

FAST = {"retry.backoff.ms": 50, "retry.backoff.max.ms": 200}
_SENT = re.compile(r"Sending (\w+) v(\d+) to node")


def sent_versions(caplog) -> dict[str, set[int]]:
    """{API name: versions sent} from the client's DEBUG lines captured so far."""
    out: dict[str, set[int]] = {}
    for m in messages(caplog, "tierlog.client"):
        found = _SENT.match(m)
        if found:
            out.setdefault(found[1], set()).add(int(found[2]))
    return out


def negotiated(conn, api_key: int) -> int:
    """The version the client picks for ``api_key`` against the broker behind ``conn`` (its ApiVersions)."""
    return conn.version(api_key)


async def read(consumer: Consumer, n: int, timeout: float = 60) -> list[str]:
    """The next ``n`` values ``consumer`` polls (fails after ``timeout`` seconds with what it got)."""
    got: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < n:
        assert loop.time() < deadline, f"read {len(got)} of {n} records: {got}"
        for records in (await consumer.poll(timeout_ms=500)).values():
            got.extend(r.value.decode() for r in records)
    return got


async def round_trip(bootstrap: str, topic: str, group: str, kip848: bool = True) -> dict[str, int]:
    """Produce, consume in a classic group and commit, resume a second member from the committed offsets
    (OffsetFetch), describe the group (DescribeGroups), then (``kip848``) read it all in a KIP-848 group.
    Returns the versions the client negotiated with the broker, per API name."""
    common = {**FAST, "bootstrap.servers": bootstrap}
    async with Admin(common) as admin:
        await admin.create_topics([NewTopic(topic, 2, 1)])
        async with Producer({**common, "acks": "all", "linger.ms": 0}) as producer:
            first = [f"first {i}" for i in range(6)]
            for i, v in enumerate(first):
                await producer.send(topic, v.encode(), partition=i % 2)
            await producer.flush()
            conn = await producer.client.connection(producer.client.cluster.leader_for(topic, 0))
            versions = {ApiKey(k).name: negotiated(conn, k) for k in (
                ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS)}
            classic = {**common, "group.id": group, "auto.offset.reset": "earliest",
                       "enable.auto.commit": False}
            async with Consumer(classic) as consumer:
                consumer.subscribe([topic])
                assert sorted(await read(consumer, len(first))) == first
                await consumer.commit()
            second = [f"second {i}" for i in range(4)]
            for i, v in enumerate(second):
                await producer.send(topic, v.encode(), partition=i % 2)
            await producer.flush()
        async with Consumer(classic) as consumer:
            consumer.subscribe([topic])
            # the committed offsets (OffsetFetch) start this member after the first one's records
            assert sorted(await read(consumer, len(second))) == second
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            committed = await consumer.committed(tps)
            assert sum(om.offset for om in committed.values()) == len(first)
            d = (await admin.describe_consumer_groups([group]))[group]
            assert (d.state, d.protocol_type, len(d.members)) == ("Stable", "consumer", 1)
            await consumer.commit()
        offsets = await admin.list_consumer_group_offsets(group)
        assert sum(om.offset for om in offsets.values()) == len(first) + len(second)
        if not kip848:
            return versions
        # a KIP-848 member reads its group's offsets with its member id and epoch (OffsetFetch v9+)
        modern = {**common, "group.id": group + "-848", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}
        async with Consumer(modern) as consumer:
            consumer.subscribe([topic])
            assert sorted(await read(consumer, 10)) == sorted(first + second)
            await consumer.commit()
        async with Consumer(modern) as consumer:
            consumer.subscribe([topic])
            committed = await consumer.committed(tps)
            assert sum(om.offset for om in committed.values()) == 10
    return versions


async def recreate_while_running(bootstrap: str, topic: str) -> tuple[list[str], list[int]]:
    """A producer and a consumer run while ``topic`` is deleted and created again under its name.

    The consumer reads the old topic's 30 records, then the topic goes; the producer sends 10 records while
    it is gone (they wait for it: UNKNOWN_TOPIC_ID, then no leader, until the admin or the broker's
    auto-creation makes it again) and 10 more once it is back. Returns what
    the consumer read after the old records and the offsets the producer was given: the new topic holds
    fewer records than the old one had, so a consumer still reading the old topic, or at its old position,
    would show it."""
    common = {**FAST, "bootstrap.servers": bootstrap}
    tp = TopicPartition(topic, 0)
    async with Admin(common) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        async with Producer({**common, "acks": "all", "linger.ms": 0, "delivery.timeout.ms": 120000,
                             "max.block.ms": 60000}) as producer, \
                Consumer({**common, "auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([tp])
            old = [f"old {i}" for i in range(30)]
            for v in old:
                await producer.send(topic, v.encode())
            await producer.flush()
            assert await read(consumer, len(old)) == old
            old_id = producer.client.cluster.topic_id(topic)
            after: list[str] = []

            async def keep_reading() -> None:
                while True:
                    for records in (await consumer.poll(timeout_ms=200)).values():
                        after.extend(r.value.decode() for r in records)

            reader = asyncio.get_running_loop().create_task(keep_reading())
            try:
                await admin.delete_topics([topic])

                async def gone() -> bool:  # or made again already, by a client's Metadata (auto-creation)
                    try:
                        return (await admin.describe_topics([topic]))[topic].topic_id != old_id
                    except errors.UnknownTopicOrPartitionError:
                        return True
                await wait_until_async(gone, 60, what=f"{topic} deleted")
                futures = [await producer.send(topic, f"new {i}".encode()) for i in range(10)]

                # The producer's Metadata requests may create it first (auto.create.topics.enable, on in
                # both brokers): the old one is gone, so an existing topic is the new one either way.
                with contextlib.suppress(errors.TopicAlreadyExistsError):
                    await admin.create_topics([NewTopic(topic, 1, 1)])
                futures += [await producer.send(topic, f"new {i}".encode()) for i in range(10, 20)]
                offsets = [(await f).offset for f in futures]
                assert producer.client.cluster.topic_id(topic) not in (None, old_id)
                await wait_until_async(lambda: len(after) >= 20, 60, what=f"20 new records read, got {after}")
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
    return after, offsets
