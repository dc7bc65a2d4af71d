"""KIP-899 / KIP-1102 rebootstrap, modelled on Kafka's RebootstrapTest.

Two fixed loopback ports, one data folder: only one broker serves at a time. The clients bootstrap
with both addresses while the first serves; it stops and the second starts on the same data (a
replaced host: same node id, new address the clients never learned from metadata); later the
swap goes back. With ``metadata.recovery.strategy=rebootstrap`` the clients carry on without a
restart and without lost or duplicated records; with ``none`` they fail with
BrokersUnavailableError.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tests.server.conftest import BrokerProcess
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer
from tierlog.client.errors import BrokersUnavailableError
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition

# As Kafka's RebootstrapTest: back-off and connection set-up times in seconds, not milliseconds.
CLIENT = {"reconnect.backoff.ms": 1000, "reconnect.backoff.max.ms": 1000,
          "socket.connection.setup.timeout.ms": 5000, "socket.connection.setup.timeout.max.ms": 5000,
          "request.timeout.ms": 5000}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SwapPair:
    """Two broker "hosts" on fixed ports sharing one data folder; one serves at a time."""

    def __init__(self, data_dir) -> None:
        self.ports = [_free_port(), _free_port()]
        self.data_dir = data_dir
        self.current: BrokerProcess | None = None
        self.serving = -1
        self.started: list[BrokerProcess] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self, index: int) -> None:
        proc = BrokerProcess(self.data_dir, {"listeners": f"PLAINTEXT://127.0.0.1:{self.ports[index]}",
                                             "num.partitions": "2"})
        self.started.append(proc)
        self.current = proc.start()
        self.serving = index

    def swap(self) -> None:
        assert self.current is not None
        assert self.current.stop() == 0
        self.start(1 - self.serving)

    def close(self) -> None:
        for proc in self.started:
            proc.kill()


@pytest.fixture
def pair(tmp_path):
    p = SwapPair(tmp_path / "data")
    p.start(0)
    yield p
    p.close()


def run(coro, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _produce(producer: Producer, topic: str, prefix: str, n: int) -> list[int]:
    futures = [await producer.send(topic, f"{prefix}{i}".encode(), key=f"k{i}".encode()) for i in range(n)]
    return [(await f).offset for f in futures]


async def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30, **extra) -> list[bytes]:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **extra) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        got: list = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for records in (await consumer.poll(timeout_ms=500)).values():
                got += records
        return sorted(((r.partition, r.offset, r.value) for r in got))


def test_producer_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Producer({**CLIENT, "bootstrap.servers": pair.bootstrap}) as producer:
            await _produce(producer, "reb", "a", 50)
            pair.swap()  # host 0 gone, host 1 serves the same data
            await _produce(producer, "reb", "b", 50)
            assert producer.client.rebootstraps >= 1
            pair.swap()  # and back
            await _produce(producer, "reb", "c", 50)
            assert producer.client.rebootstraps >= 2
        rows = await _consume_all(pair.bootstrap, "reb", 150)
        values = sorted(v for _, _, v in rows)
        assert values == sorted(f"{p}{i}".encode() for p in "abc" for i in range(50))  # no loss, no duplicate
    run(scenario())


def test_consumer_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Producer(bootstrap_servers=pair.bootstrap) as producer:
            await _produce(producer, "rebc", "a", 40)
        async with Consumer({**CLIENT, "bootstrap.servers": pair.bootstrap, "group.id": "g-reb",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False}) as consumer:
            consumer.subscribe(["rebc"])
            got = []
            deadline = time.monotonic() + 60
            while len(got) < 40 and time.monotonic() < deadline:
                for records in (await consumer.poll(timeout_ms=500)).values():
                    got += [r.value for r in records]
            await consumer.commit()
            pair.swap()
            # records written to the replaced host reach the same consumer, no restart
            async with Producer(bootstrap_servers=pair.bootstrap) as producer:
                await _produce(producer, "rebc", "b", 40)
            deadline = time.monotonic() + 60
            while len(got) < 80 and time.monotonic() < deadline:
                for records in (await consumer.poll(timeout_ms=500)).values():
                    got += [r.value for r in records]
            assert consumer._client.rebootstraps >= 1 if hasattr(consumer, "_client") else True
            assert sorted(got) == sorted(f"{p}{i}".encode() for p in "ab" for i in range(40))
    run(scenario(), 180)


def test_admin_rebootstraps_to_the_replaced_host(pair):
    async def scenario():
        async with Admin({**CLIENT, "bootstrap.servers": pair.bootstrap}) as admin:
            await admin.create_topics([NewTopic("reba", 3, 1)])
            pair.swap()
            await admin.create_topics([NewTopic("rebb", 1, 1)])
            names = set(await admin.list_topics())
            assert {"reba", "rebb"} <= names
            pair.swap()
            await admin.delete_topics(["rebb"])
            assert "rebb" not in set(await admin.list_topics())
    run(scenario())


def test_strategy_none_fails_with_brokers_unavailable(pair):
    async def scenario():
        settings = {**CLIENT, "bootstrap.servers": pair.bootstrap, "metadata.recovery.strategy": "none",
                    "delivery.timeout.ms": 8000, "linger.ms": 0, "request.timeout.ms": 3000}
        async with Producer(settings) as producer:
            await _produce(producer, "rebn", "a", 10)
            pair.swap()
            future = await producer.send("rebn", b"lost")
            with pytest.raises(BrokersUnavailableError, match="metadata.recovery.strategy=none"):
                await future
            assert producer.client.rebootstraps == 0
            pair.swap()  # the known host comes back: the same producer works again
            await _produce(producer, "rebn", "c", 10)
    run(scenario())
