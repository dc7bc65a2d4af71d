"""tierlog's producer against a live broker: batching with the default linger.ms, every codec read
back by another client, keyed partitioning as Java's, acks=0/1/all, idempotence across a failed
batch (a new epoch, no OUT_OF_ORDER loop), per-record futures, and the synchronous facade."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import NamedTuple

import confluent_kafka
import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.waiting import TimedOut, wait_until
from tierlog import errors
from tierlog.client import sync
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.errors import KafkaTimeoutError, RecordTooLargeError
from tierlog.client.partitioner import partition_for_key
from tierlog.client.producer import Producer


class Msg(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One broker for the tests that leave it running (each uses its own topics)."""
    b = BrokerProcess(tmp_path_factory.mktemp("producer") / "logs", {}).start()
    yield b
    b.stop()


def run(coro, timeout: float = 90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[Msg]:
    """Every record of ``topic`` as confluent-kafka (librdkafka: every codec) sees it."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        out: list[Msg] = []

        def read():
            if len(out) < expected:
                for m in consumer.consume(500, 0.5):
                    assert m.error() is None, m.error()
                    out.append(Msg(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                                   list(m.headers() or ())))
            return len(out) >= expected

        with contextlib.suppress(TimedOut):  # the caller judges what arrived
            wait_until(read, timeout, interval=0, what=f"{expected} records")
        return out
    finally:
        consumer.close()


async def create(bootstrap: str, topic: str, partitions: int = 1, **configs) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1, {k.replace("_", "."): v
                                                                 for k, v in configs.items()})])


def test_default_linger_sends_without_flush(shared):
    """Regression: with linger.ms=5 (the default) a lone record used to wait forever for a sender
    that had no timer running."""
    async def scenario():
        async with Producer(bootstrap_servers=shared.bootstrap) as producer:
            assert producer.config["linger.ms"] == 5
            md = await asyncio.wait_for(producer.send_and_wait("lone", b"x"), 20)
            assert (md.topic, md.offset) == ("lone", 0)
            # and again after the sender went idle
            await asyncio.sleep(0.2)
            md = await asyncio.wait_for(producer.send_and_wait("lone", b"y"), 20)
            assert md.offset == 1
    run(scenario())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codecs_read_back_by_another_client(shared, codec):
    base = int(time.time() * 1000) - 60_000  # recent: older records would fall to retention.ms

    async def scenario():
        async with Producer(bootstrap_servers=shared.bootstrap, compression_type=codec, linger_ms=20) as producer:
            futures = [await producer.send(f"codecs-{codec}", f"{codec}-{i}".encode() * (i % 7 + 1),
                                           key=f"k{i}".encode(), headers=[("h", f"{i}".encode()), ("empty", None)],
                                           timestamp_ms=base + i) for i in range(200)]
            mds = [await f for f in futures]
        assert [md.offset for md in mds] == list(range(200))
        return mds
    run(scenario())
    got = read_all(shared.bootstrap, f"codecs-{codec}", 1, 200)
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
        (i, f"k{i}".encode(), f"{codec}-{i}".encode() * (i % 7 + 1), base + i) for i in range(200)]
    assert [list(m.headers) for m in got][:2] == [[("h", b"0"), ("empty", None)], [("h", b"1"), ("empty", None)]]


def test_keys_land_where_the_java_partitioner_puts_them(shared):
    async def scenario():
        await create(shared.bootstrap, "keyed", 6)
        async with Producer(bootstrap_servers=shared.bootstrap) as producer:
            keys = [f"user-{i}".encode() for i in range(60)]
            mds = await asyncio.gather(*[producer.send_and_wait("keyed", b"v", key=k) for k in keys])
        assert [md.partition for md in mds] == [partition_for_key(k, 6) for k in keys]
        assert len({md.partition for md in mds}) == 6
    run(scenario())


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(shared, acks):
    async def scenario():
        settings = {"bootstrap.servers": shared.bootstrap, "acks": acks}
        if acks != "all":
            settings["enable.idempotence"] = False
        async with Producer(settings) as producer:
            futures = [await producer.send(f"acks-{acks}", f"a{i}".encode()) for i in range(30)]
            mds = [await f for f in futures]
        offsets = [md.offset for md in mds]
        assert offsets == ([-1] * 30 if acks == "0" else list(range(30)))  # acks=0: no answer, no offset
    run(scenario())
    assert [m.value for m in read_all(shared.bootstrap, f"acks-{acks}", 1, 30)] == [f"a{i}".encode() for i in range(30)]


def test_record_errors_are_typed_and_immediate(shared):
    async def scenario():
        async with Producer(bootstrap_servers=shared.bootstrap, max_request_size=1000,
                            max_block_ms=10000) as producer:
            with pytest.raises(RecordTooLargeError, match="max.request.size"):
                await producer.send("big", b"x" * 2000)
            with pytest.raises(errors.error_for_code(17), match="INVALID_TOPIC_EXCEPTION"):
                await producer.send("bad/name", b"x")  # the broker's answer, not a timeout
    run(scenario())


def test_one_waiter_giving_up_does_not_cancel_its_batch(shared):
    async def scenario():
        async with Producer(bootstrap_servers=shared.bootstrap, linger_ms=200) as producer:
            await producer.send_and_wait("cancel", b"warm-up")
            first = await producer.send("cancel", b"a")
            second = await producer.send("cancel", b"b")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(first, 0.01)  # cancels this await only
            assert (await second).offset == 2
            assert (await first).offset == 1
    run(scenario())


def test_failed_batch_starts_a_new_epoch_and_later_records_go_through(broker):
    """A batch that expired after it was sequenced leaves a gap in the partition's sequence: the
    producer bumps its epoch (KIP-360) and later batches start again at sequence 0. (A batch that never
    went out, its leader unreachable, has no sequence and leaves no gap, as in Kafka.)"""
    async def scenario():
        settings = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "delivery.timeout.ms": 3000,
                    "request.timeout.ms": 1000, "reconnect.backoff.ms": 200, "retry.backoff.ms": 50}
        async with Producer(settings) as producer:
            assert (await producer.send_and_wait("epochs", b"a")).offset == 0
            epoch = producer._producer_epoch
            # stopped, the broker keeps its connection but never answers: the batch goes out, sequenced
            os.kill(broker.proc.pid, signal.SIGSTOP)
            lost = await producer.send("epochs", b"lost")
            with pytest.raises(KafkaTimeoutError):
                await lost
            # SIGKILL while stopped: the broker never read the batch; it starts again on the same port and data
            await asyncio.to_thread(broker.restart, False)
            md = await asyncio.wait_for(producer.send_and_wait("epochs", b"c"), 30)
            assert md.offset == 1
            assert producer._producer_epoch == epoch + 1
            assert producer.metrics["record-error-total"] == 1
    run(scenario())
    assert [m.value for m in read_all(broker.bootstrap, "epochs", 1, 2)] == [b"a", b"c"]


def test_sync_facade_keeps_order_and_reports_metadata(shared):
    with sync.Producer(bootstrap_servers=shared.bootstrap) as producer:
        futures = [producer.send("sync-order", f"s{i}".encode()) for i in range(100)]
        producer.flush()
        assert [f.get(10).offset for f in futures] == list(range(100))
        assert producer.partitions_for("sync-order") == [0]
    with sync.Admin(bootstrap_servers=shared.bootstrap) as admin:
        assert "sync-order" in admin.list_topics()
    with sync.Consumer(bootstrap_servers=shared.bootstrap, auto_offset_reset="earliest") as consumer:
        from tierlog.client.types import TopicPartition
        consumer.assign([TopicPartition("sync-order", 0)])
        consumer.seek(TopicPartition("sync-order", 0), 90)  # a plain method, run on the client's loop
        got = []
        while len(got) < 10:
            for records in consumer.poll(timeout_ms=2000).values():
                got += [r.value for r in records]
        assert got == [f"s{i}".encode() for i in range(90, 100)]
