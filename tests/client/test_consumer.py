"""tierlog's asyncio Consumer against a live tierlog broker, with kafka-python producing the data.

Records are checked field by field (keys, values, headers, timestamps) for every codec; positions,
resets, commits and group rebalances are checked against what Kafka's consumer does. The decoding
and transaction filtering of the fetcher are also checked without a broker on hand-built batches.
Group sessions sit at the broker minimum (6 s); ``group.initial.rebalance.delay.ms`` is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time

import pytest

from tests.harness.waiting import TimedOut, not_yet, wait_until, wait_until_async
from tierlog.client.consumer import Consumer, ConsumerRebalanceListener
from tierlog.client.errors import IllegalStateError, NoOffsetForPartitionError
from tierlog.client.fetcher import CompletedFetch
from tierlog.client.types import OffsetAndMetadata, TopicPartition
from tierlog.records.record import build_batch

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


# ------------------------------------------------------------------------------------------ helpers


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, records: list[tuple], partition: int = 0, compression: str | None = None,
            **producer_args) -> list[int]:
    """Send (key, value, headers, timestamp) tuples to one partition; returns their offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression, linger_ms=20,
                             **producer_args)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, partition=partition, timestamp_ms=ts)
                   for k, v, h, ts in records]
        producer.flush()
        return [f.get(10).offset for f in futures]
    finally:
        producer.close()


def simple(n: int, start: int = 0, tag: str = "v") -> list[tuple]:
    now = int(time.time() * 1000)
    return [(None, f"{tag}{i}".encode(), [], now) for i in range(start, start + n)]


async def drain(consumer: Consumer, expected: int, timeout: float = 20, **poll_args) -> list:
    got: list = []

    async def drained():
        if len(got) < expected:
            for records in (await consumer.poll(timeout_ms=200, **poll_args)).values():
                got.extend(records)
        return len(got) >= expected

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        await wait_until_async(drained, timeout, interval=0, what=f"{expected} records")
    return got


def fields(records) -> list[tuple]:
    return [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp, r.timestamp_type)
            for r in records]


# ------------------------------------------------------------------------------------------ broker-free


def test_decoding_skips_records_before_the_fetch_offset_and_a_partial_tail():
    first = build_batch([(b"k%d" % i, b"v%d" % i, [("h", None)], 1000 + i) for i in range(5)], base_offset=0)
    second = build_batch([(None, b"x%d" % i) for i in range(5)], base_offset=5, compression="zstd")
    data = first + second + second[:40]
    cf = CompletedFetch(TopicPartition("t", 0), 3, data, None, True)
    assert cf.end_offset == 10
    got = cf.take(4, None, None)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got[:2]] == [
        (3, b"k3", b"v3", (("h", None),), 1003), (4, b"k4", b"v4", (("h", None),), 1004)]
    assert [r.offset for r in got] == [3, 4, 5, 6] and cf.next_offset == 7
    rest = cf.take(100, None, bytes.decode)
    assert [r.value for r in rest] == ["x2", "x3", "x4"] and cf.done and cf.next_offset == 10


def _marker(kind: int, pid: int, offset: int) -> bytes:
    # control record: key (version, type), value (version, coordinator epoch)
    return build_batch([(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0))], base_offset=offset,
                       producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)


def _txn(pid: int, offset: int, n: int) -> bytes:
    return build_batch([(None, b"p%d-%d" % (pid, i)) for i in range(n)], base_offset=offset, producer_id=pid,
                       producer_epoch=0, base_sequence=0, is_transactional=True)


def test_read_committed_skips_aborted_transactions_and_control_batches():
    class Aborted:
        def __init__(self, pid, first):
            self.producer_id, self.first_offset = pid, first

    data = (build_batch([(None, b"a"), (None, b"b")], base_offset=0) + _txn(7, 2, 2) + _txn(8, 4, 1)
            + _marker(0, 7, 5) + _marker(1, 8, 6) + build_batch([(None, b"c")], base_offset=7))
    committed = CompletedFetch(TopicPartition("t", 0), 0, data, [Aborted(7, 2)], True)
    assert [r.offset for r in committed.take(100, None, None)] == [0, 1, 4, 7]
    assert committed.next_offset == 8
    uncommitted = CompletedFetch(TopicPartition("t", 0), 0, data, None, True)
    assert [r.offset for r in uncommitted.take(100, None, None)] == [0, 1, 2, 3, 4, 7]
    # the undecoded path (poll_batches) keeps the same batches and still ends past the markers
    kept = CompletedFetch(TopicPartition("t", 0), 0, data, [Aborted(7, 2)], True).committed_only()
    assert [h.base_offset for _, h in kept.batches] == [0, 4, 7] and kept.end_offset == 8
    assert [r.offset for r in kept.take(100, None, None)] == [0, 1, 4, 7]


def test_settings_are_checked_at_construction():
    from tierlog.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError):
        Consumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait_ms=-1)
    with pytest.raises(InvalidConfigError):
        Consumer(bootstrap_servers="127.0.0.1:1", enable_auto_commit=True)  # no group.id
    with pytest.raises(InvalidConfigError):
        Consumer(bootstrap_servers="127.0.0.1:1", key_deserializer=42)
    with pytest.raises(InvalidConfigError):
        Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", partition_assignment_strategy=["sticky?"])
    c = Consumer(bootstrap_servers="127.0.0.1:1", key_deserializer=bytes.decode,
                 value_deserializer="org.apache.kafka.common.serialization.StringDeserializer")
    with pytest.raises(Exception, match="group.id"):
        c.subscribe(["t"])
    c.assign([TopicPartition("t", 0)])
    with pytest.raises(IllegalStateError):
        c.seek(TopicPartition("t", 1), 0)


# ------------------------------------------------------------------------------------------ live broker


def test_assign_seek_poll_returns_exactly_the_produced_records_for_every_codec(broker):
    codecs = [None, "gzip", "snappy", "lz4", "zstd"]
    create_topic(broker.bootstrap, "codecs", len(codecs))
    now = int(time.time() * 1000)
    sent = {}
    for p, codec in enumerate(codecs):
        recs = [(None if i % 7 == 0 else b"key-%d" % i,
                 None if i % 11 == 5 and i % 7 else (b"%d" % i) * (1 + (i % 5) * 400),
                 [("n", b"%d" % i), ("empty", b"")] if i % 3 == 0 else [],
                 now - 100000 + i) for i in range(120)]
        offsets = produce(broker.bootstrap, "codecs", recs, partition=p, compression=codec)
        sent[TopicPartition("codecs", p)] = [(o, k, v, h, ts, 0) for o, (k, v, h, ts) in zip(offsets, recs)]
    tps = list(sent)

    async def main():
        async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="latest",
                            max_partition_fetch_bytes=20000) as consumer:
            consumer.assign(tps)
            assert consumer.assignment() == set(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            got = await drain(consumer, 600)
            for tp in tps:
                assert fields(r for r in got if r.partition == tp.partition) == sent[tp], tp
                assert await consumer.position(tp) == 120
            assert got[0].leader_epoch >= 0 and got[0].serialized_value_size == len(got[0].value or b"")
            # a seek into the middle of a batch starts exactly there
            consumer.seek(tps[3], 57)
            again = await drain(consumer, 63)
            assert fields(again) == sent[tps[3]][57:]
            assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert await consumer.end_offsets(tps) == {tp: 120 for tp in tps}
            found = await consumer.offsets_for_times({tps[0]: now - 100000 + 30, tps[1]: now + 10 ** 6})
            assert found[tps[0]].offset == 30 and found[tps[0]].timestamp == now - 100000 + 30
            assert found[tps[1]] is None
            assert await consumer.partitions_for_topic("codecs") == set(range(5))

        # max.poll.records, deserializers, pause/resume
        async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=25,
                            key_deserializer=lambda b: b and b.decode(),
                            value_deserializer=lambda b: None if b is None else len(b)) as consumer:
            consumer.assign(tps[:2])
            consumer.pause(tps[1])
            got, sizes = [], []

            async def polled():
                batch = await consumer.poll(timeout_ms=200)
                sizes.append(sum(len(v) for v in batch.values()))
                got.extend(r for recs in batch.values() for r in recs)
                return len(got) >= 120 or not_yet(len(got))

            await wait_until_async(polled, 20, interval=0, what="120 records (records polled)")
            assert max(sizes) == 25 and {r.partition for r in got} == {0}
            assert [(r.offset, r.key, r.value) for r in got] == [
                (o, k and k.decode(), None if v is None else len(v)) for o, k, v, *_ in sent[tps[0]]]
            assert consumer.paused() == {tps[1]}
            consumer.resume(tps[1])
            assert len(await drain(consumer, 120, max_records=7)) == 120
            assert await consumer.poll(timeout_ms=0, max_records=3) == {}

    asyncio.run(main())


def test_auto_offset_reset_and_out_of_range_seeks(broker):
    create_topic(broker.bootstrap, "reset", 1)
    produce(broker.bootstrap, "reset", simple(10))
    tp = TopicPartition("reset", 0)

    async def main():
        async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            assert await c.position(tp) == 0
            assert [r.value for r in await drain(c, 10)] == [b"v%d" % i for i in range(10)]
            c.seek(tp, 1000)  # out of range: reset to the beginning
            assert [r.offset for r in await drain(c, 10)] == list(range(10))
        async with Consumer(bootstrap_servers=broker.bootstrap) as c:  # latest is the default
            c.assign([tp])
            assert await c.position(tp) == 10
            await asyncio.to_thread(produce, broker.bootstrap, "reset", simple(5, 10))
            assert [r.value for r in await drain(c, 5)] == [b"v%d" % i for i in range(10, 15)]
            c.seek(tp, 1000)
            assert await c.poll(timeout_ms=1000) == {}
            assert await c.position(tp) == 15
            c.seek_to_beginning()
            assert await c.position(tp) == 0
            c.seek_to_end(tp)
            assert await c.position(tp) == 15
        async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError):
                await c.poll(timeout_ms=1000)
            with pytest.raises(NoOffsetForPartitionError):
                await c.position(tp)
            c.seek(tp, 12)
            assert [r.offset for r in await drain(c, 3)] == [12, 13, 14]
            c.seek(tp, 99)
            with pytest.raises(NoOffsetForPartitionError):
                for _ in range(20):
                    await c.poll(timeout_ms=200)
        # a group member without a committed offset falls back to the policy; with one it starts there
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id="reset-g", auto_offset_reset="none",
                            enable_auto_commit=False) as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError):
                await c.poll(timeout_ms=2000)
            await c.commit({tp: 4})
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id="reset-g", auto_offset_reset="none") as c:
            c.assign([tp])
            assert await c.position(tp) == 4
            assert (await drain(c, 11))[0].offset == 4

    asyncio.run(main())


def test_poll_batches_hands_over_whole_undecoded_batches_and_advances_positions(broker):
    create_topic(broker.bootstrap, "raw", 2)
    for start in (0, 100, 200):  # three batches at least
        produce(broker.bootstrap, "raw", simple(100, start), partition=0)
    produce(broker.bootstrap, "raw", simple(40, tag="p1-"), partition=1, compression="gzip")
    tps = [TopicPartition("raw", 0), TopicPartition("raw", 1)]

    async def main():
        async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none",
                            max_partition_fetch_bytes=2048) as c:
            c.assign(tps)
            c.seek(tps[0], 123)  # mid-batch: the first fetch may start before it
            c.seek(tps[1], 0)
            got: dict = {tp: [] for tp in tps}

            async def handed_over():
                if await c.position(tps[0]) >= 300 and await c.position(tps[1]) >= 40:
                    return True
                for tp, fetches in (await c.poll_batches(timeout_ms=200)).items():
                    for fetched in fetches:
                        assert isinstance(fetched, CompletedFetch) and fetched.tp == tp
                        got[tp].append(fetched)
                return False

            with contextlib.suppress(TimedOut):  # the records handed over are checked below
                await wait_until_async(handed_over, 20, interval=0, what="positions 300 and 40")
            # decoded the ordinary way, the handed-over data is every record from the seek on, once
            for tp, first, values in ((tps[0], 123, [b"v%d" % i for i in range(123, 300)]),
                                      (tps[1], 0, [b"p1-%d" % i for i in range(40)])):
                records = []
                for fetched in got[tp]:
                    assert fetched.end_offset > fetched.fetch_offset
                    records += fetched.take(10_000, None, None)
                assert [r.offset for r in records] == list(range(first, first + len(values)))
                assert [r.value for r in records] == values
            assert len(got[tps[0]]) > 1  # several fetches of 2 KiB: positions moved on between them
            assert await c.position(tps[0]) == 300 and await c.position(tps[1]) == 40
        # read_committed hands over batches too (no transactions here: the same records)
        async with Consumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed") as c:
            c.assign(tps)
            c.seek(tps[0], 290)
            records = []
            for _ in range(50):
                for fetched in (await c.poll_batches(timeout_ms=200)).get(tps[0], []):
                    records += fetched.take(10_000, None, None)
                if len(records) >= 10:
                    break
            assert [r.offset for r in records] == list(range(290, 300))

    asyncio.run(main())


def test_commit_committed_round_trip_and_kafka_python_sees_the_offsets(broker):
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    create_topic(broker.bootstrap, "commits", 2)
    for p in range(2):
        produce(broker.bootstrap, "commits", simple(10, tag=f"p{p}-"), partition=p)
    tp0, tp1 = TopicPartition("commits", 0), TopicPartition("commits", 1)

    async def main():
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id="interop", enable_auto_commit=False,
                            auto_offset_reset="earliest") as c:
            c.assign([tp0, tp1])
            assert await c.committed([tp0, tp1]) == {tp0: None, tp1: None}
            await drain(c, 20)
            await c.commit()
            committed = await c.committed([tp0, tp1])
            assert {tp: om.offset for tp, om in committed.items()} == {tp0: 10, tp1: 10}
            assert committed[tp0].leader_epoch == 0  # the epoch of the last record consumed
            await c.commit({tp0: OffsetAndMetadata(3, "tierlog was here"), tp1: 6})
            assert await c.committed(tp0) == OffsetAndMetadata(3, "tierlog was here", -1)
            assert (await c.committed(tp1)).offset == 6

    asyncio.run(main())

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="interop", enable_auto_commit=False,
                       auto_offset_reset="earliest")
    try:
        assert kc.committed(KTopicPartition("commits", 0)) == 3
        assert kc.committed(KTopicPartition("commits", 1)) == 6
        kc.subscribe(["commits"])
        seen: dict[int, list[int]] = {0: [], 1: []}

        def polled():
            if len(seen[0]) >= 7 and len(seen[1]) >= 4:
                return True
            for ktp, records in kc.poll(timeout_ms=500).items():
                seen[ktp.partition] += [r.offset for r in records]
            return not_yet(seen)

        wait_until(polled, 30, interval=0, what="7 and 4 records of partitions 0 and 1 (offsets seen)")
        assert seen == {0: list(range(3, 10)), 1: list(range(6, 10))}
        kc.commit({KTopicPartition("commits", 0): KOffsetAndMetadata(8, "kp", -1)})
    finally:
        kc.close()

    async def back():
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id="interop") as c:
            assert (await c.committed(tp0)).offset == 8

    asyncio.run(back())


def test_group_members_split_partitions_and_the_survivor_takes_over(broker):
    create_topic(broker.bootstrap, "split", 4)
    for p in range(4):
        produce(broker.bootstrap, "split", simple(25, tag=f"{p}-"), partition=p)
    settings = {**GROUP, "bootstrap.servers": broker.bootstrap, "group.id": "splitters",
                "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200}

    class Recorder(ConsumerRebalanceListener):
        def __init__(self):
            self.events = []

        def on_partitions_revoked(self, revoked):
            self.events.append(("revoked", sorted(revoked)))

        async def on_partitions_assigned(self, assigned):
            self.events.append(("assigned", sorted(assigned)))

    async def main():
        got: dict[str, list] = {"a": [], "b": []}
        a, b = Consumer(settings, client_id="a"), Consumer(settings, client_id="b")
        await a.start()
        await b.start()
        listener = Recorder()
        a.subscribe(["split"], listener=listener)
        b.subscribe(pattern="spl.t")

        async def run(name, consumer, until):
            while not until():
                for records in (await consumer.poll(timeout_ms=100)).values():
                    got[name].extend(records)

        def split_done():
            return (len(got["a"]) + len(got["b"]) >= 100 and a.assignment() and b.assignment()
                    and not a.assignment() & b.assignment())

        await asyncio.wait_for(asyncio.gather(run("a", a, split_done), run("b", b, split_done)), 40)
        assert a.assignment() | b.assignment() == {TopicPartition("split", p) for p in range(4)}
        assert len(a.assignment()) == len(b.assignment()) == 2
        assert ("assigned", sorted(a.assignment())) in listener.events
        assert b.subscription() == {"split"}

        for p in range(4):
            await asyncio.to_thread(produce, broker.bootstrap, "split", simple(25, 25, tag=f"{p}-"), p)
        await b.close()  # commits its positions and leaves: a takes everything over
        total = lambda: len(got["a"]) + len(got["b"])  # noqa: E731
        await asyncio.wait_for(run("a", a, lambda: total() >= 200 and len(a.assignment()) == 4), 40)
        await a.close()
        everything = [(r.partition, r.offset) for r in got["a"] + got["b"]]
        assert sorted(everything) == [(p, o) for p in range(4) for o in range(50)]  # nothing lost or repeated
        assert any(e[0] == "revoked" for e in listener.events)

    asyncio.run(main())


def test_member_that_stops_polling_leaves_and_rejoins(broker):
    create_topic(broker.bootstrap, "lazy", 2)
    settings = {**GROUP, "bootstrap.servers": broker.bootstrap, "group.id": "lazy",
                "auto.offset.reset": "earliest", "max.poll.interval.ms": 1500}

    async def main():
        async with Consumer(settings) as busy, Consumer(settings) as lazy:
            busy.subscribe(["lazy"])
            lazy.subscribe(["lazy"])

            async def poll_until(consumers, cond, timeout=30):
                async def polled():
                    if cond():
                        return True
                    await asyncio.gather(*(c.poll(timeout_ms=100) for c in consumers))
                    return False

                await wait_until_async(polled, timeout, interval=0, what="the assignments")

            await poll_until([busy, lazy], lambda: len(busy.assignment()) == 1 and len(lazy.assignment()) == 1)
            # lazy stops calling poll: after max.poll.interval.ms it leaves and busy gets both partitions
            await poll_until([busy], lambda: len(busy.assignment()) == 2)
            await poll_until([busy, lazy], lambda: len(busy.assignment()) == 1 and len(lazy.assignment()) == 1)

    asyncio.run(main())


def test_poll_continues_after_a_broker_restart(start_broker):
    broker = start_broker()
    create_topic(broker.bootstrap, "restart", 2)
    for p in range(2):
        produce(broker.bootstrap, "restart", simple(10, tag=f"{p}-"), partition=p)
    tps = [TopicPartition("restart", p) for p in range(2)]
    client = {"reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200}

    async def main():
        async with Consumer(client, bootstrap_servers=broker.bootstrap, group_id="restart-a",
                            enable_auto_commit=False, auto_offset_reset="earliest") as assigned, \
                Consumer({**client, **GROUP}, bootstrap_servers=broker.bootstrap, group_id="restart-s",
                         auto_offset_reset="earliest") as member:
            assigned.assign(tps)
            member.subscribe(["restart"])
            first = await drain(assigned, 20)
            seen = await drain(member, 20)
            await assigned.commit()
            await asyncio.to_thread(broker.restart)
            for p in range(2):
                await asyncio.to_thread(produce, broker.bootstrap, "restart", simple(10, 10, tag=f"{p}-"), p)
            more = await drain(assigned, 20, timeout=40)
            await assigned.commit()
            assert sorted((r.partition, r.offset) for r in first + more) == [(p, o) for p in range(2)
                                                                           for o in range(20)]
            assert {tp: om.offset for tp, om in (await assigned.committed(tps)).items()} == {tp: 20 for tp in tps}
            seen += await drain(member, 20, timeout=40)
            # the group member rejoins after the restart; records may repeat from the last commit, none is lost
            assert {(r.partition, r.offset) for r in seen} == {(p, o) for p in range(2) for o in range(20)}

    asyncio.run(main())
