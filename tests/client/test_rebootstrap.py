"""KIP-899 / KIP-1102 rebootstrap, modelled on Kafka's RebootstrapTest.

Two fixed loopback ports, one data folder: only one broker serves at a time. The clients bootstrap
with both addresses while the first serves; it stops and the second starts on the same data (a
replaced host: same node id, an address the clients never learned from metadata); later the swap
goes back. With ``metadata.recovery.strategy=rebootstrap`` the clients carry on without a restart
and without lost or duplicated records; with ``none`` they fail with BrokersUnavailableError while
the host they know is gone, and work again once it is back.

The clients use Kafka's RebootstrapTest settings: reconnect back-off and connection set-up times
of seconds, so a dead broker is in back-off (not "usable") most of the time.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.client.rebootstraplib import SwapPair, expected_values, produce_values, read_back
from tests.harness.waiting import TimedOut, wait_until_async
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer
from tierlog.client.errors import BrokersUnavailableError
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition

CLIENT = {"reconnect.backoff.ms": 1000, "reconnect.backoff.max.ms": 1000,
          "socket.connection.setup.timeout.ms": 5000, "socket.connection.setup.timeout.max.ms": 5000,
          "request.timeout.ms": 5000}


def run(coro, timeout: float = 150):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _swap(pair: SwapPair) -> None:
    await asyncio.to_thread(pair.swap)  # the clients' tasks keep running meanwhile


async def _poll_until(consumer: Consumer, got: list[bytes], n: int, timeout: float = 60) -> None:
    async def read():
        if len(got) < n:
            for records in (await consumer.poll(timeout_ms=500)).values():
                got.extend(r.value for r in records)
        return len(got) >= n

    with contextlib.suppress(TimedOut):  # the test judges what arrived
        await wait_until_async(read, timeout, interval=0, what=f"{n} records")


def test_producer_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Producer({**CLIENT, "bootstrap.servers": pair.bootstrap}) as producer:
            await produce_values(producer, "reb", "a", 50)
            await _swap(pair)  # host 0 gone, host 1 serves the same data
            await produce_values(producer, "reb", "b", 50)
            assert producer.client.rebootstraps >= 1
            await _swap(pair)  # and back
            await produce_values(producer, "reb", "c", 50)
            assert producer.client.rebootstraps >= 2
            assert producer.metrics["record-error-total"] == 0
        assert await read_back(pair.bootstrap, "reb", 150) == expected_values("abc", 50)  # no loss, no duplicate
    run(scenario())


def test_producer_rebootstraps_with_records_waiting(pair):
    """Records sent while no host serves are delivered once the replaced host is up."""
    async def scenario():
        async with Producer({**CLIENT, "bootstrap.servers": pair.bootstrap, "linger.ms": 0}) as producer:
            await produce_values(producer, "rebw", "a", 20)
            await asyncio.to_thread(pair.stop)
            pending = [await producer.send("rebw", f"b{i}".encode()) for i in range(20)]
            await asyncio.to_thread(pair.start, 1)
            await asyncio.gather(*pending)
            assert producer.client.rebootstraps >= 1
        assert await read_back(pair.bootstrap, "rebw", 40) == expected_values("ab", 20)
    run(scenario())


def test_consumer_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Producer(bootstrap_servers=pair.bootstrap) as producer:
            await produce_values(producer, "rebc", "a", 40)
        settings = {**CLIENT, "bootstrap.servers": pair.bootstrap, "group.id": "g-reb",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False}
        async with Consumer(settings) as consumer:
            consumer.subscribe(["rebc"])
            got: list[bytes] = []
            await _poll_until(consumer, got, 40)
            await consumer.commit()
            for prefix, swaps in (("b", 1), ("c", 2)):
                await _swap(pair)
                # records written to the replaced host reach the same consumer, no restart
                async with Producer(bootstrap_servers=pair.bootstrap) as producer:
                    await produce_values(producer, "rebc", prefix, 40)
                await _poll_until(consumer, got, 40 * (swaps + 1))
                await consumer.commit()
                assert consumer.client.rebootstraps >= swaps
            assert (await consumer.poll(timeout_ms=1000)) == {}  # nothing more, in particular no duplicate
            assert sorted(got) == expected_values("abc", 40)
            committed = await consumer.committed([TopicPartition("rebc", p) for p in range(2)])
            assert sum(om.offset for om in committed.values()) == 120
    run(scenario(), 240)


def test_admin_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Admin({**CLIENT, "bootstrap.servers": pair.bootstrap}) as admin:
            await admin.create_topics([NewTopic("reba", 3, 1)])
            await _swap(pair)
            await admin.create_topics([NewTopic("rebb", 1, 1)])
            assert {"reba", "rebb"} <= set(await admin.list_topics())
            cluster = await admin.describe_cluster()
            assert [b.address for b in cluster.brokers] == [pair.serving_address]
            assert admin._client.rebootstraps >= 1
            await _swap(pair)
            await admin.delete_topics(["rebb"])
            assert "rebb" not in set(await admin.list_topics())
            assert [b.address for b in (await admin.describe_cluster()).brokers] == [pair.serving_address]
            assert admin._client.rebootstraps >= 2
    run(scenario())


def test_strategy_none_fails_with_brokers_unavailable(pair):
    """Kafka's testRebootstrapDisabled: the replaced host is never found; the known one coming back
    makes the same clients work again."""
    async def scenario():
        none = {**CLIENT, "bootstrap.servers": pair.bootstrap, "metadata.recovery.strategy": "none",
                "request.timeout.ms": 3000}
        async with Producer({**none, "delivery.timeout.ms": 8000, "linger.ms": 0}) as producer, \
                Consumer({**none, "auto.offset.reset": "earliest", "default.api.timeout.ms": 8000}) as consumer, \
                Admin({**none, "default.api.timeout.ms": 8000}) as admin:
            await produce_values(producer, "rebn", "a", 10)
            tps = [TopicPartition("rebn", p) for p in range(2)]
            consumer.assign(tps)
            assert sum((await consumer.end_offsets(tps)).values()) == 10
            assert "rebn" in await admin.list_topics()

            await _swap(pair)

            async def lost() -> None:
                await (await producer.send("rebn", b"lost"))

            # the three time out side by side
            outcomes = await asyncio.gather(lost(), consumer.end_offsets(tps), admin.list_topics(),
                                            return_exceptions=True)
            for outcome in outcomes:
                assert isinstance(outcome, BrokersUnavailableError), outcome
                assert "metadata.recovery.strategy=none" in str(outcome)
            for client in (producer.client, consumer.client, admin._client):
                assert client.rebootstraps == 0

            await _swap(pair)  # the known host comes back: the same clients work again
            await produce_values(producer, "rebn", "c", 10)
            assert sum((await consumer.end_offsets(tps)).values()) == 20
            assert "rebn" in await admin.list_topics()
        assert await read_back(pair.bootstrap, "rebn", 20) == expected_values("ac", 10)
    run(scenario(), 200)
