"""The two broker "hosts" of the rebootstrap tests (KIP-899 / KIP-1102) and what they do with records:
produce numbered values with tierlog's producer, the sorted values a scenario expects, read a topic back
with a fresh consumer. Used by test_rebootstrap.py (tierlog's client) and test_rebootstrap_peers.py
(librdkafka and Kafka's Java client); the ``pair`` fixture is in conftest.py."""

from __future__ import annotations

import contextlib

from tests.harness.broker import BrokerProcess
from tests.harness.ports import PortReservation
from tests.harness.waiting import TimedOut, wait_until_async
from tierlog.client.consumer import Consumer
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition


class SwapPair:
    """Two broker "hosts" on fixed ports sharing one data folder; one serves at a time."""

    def __init__(self, data_dir) -> None:
        # Kept from other tests while no broker listens (between a host's stop and its return).
        self._reservations = [PortReservation(), PortReservation()]
        self.ports = [r.port for r in self._reservations]
        self.data_dir = data_dir
        self.current: BrokerProcess | None = None
        self.serving = -1
        self.started: list[BrokerProcess] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def serving_address(self) -> str:
        return f"127.0.0.1:{self.ports[self.serving]}"

    def start(self, index: int) -> None:
        proc = BrokerProcess(self.data_dir, {"listeners": f"PLAINTEXT://127.0.0.1:{self.ports[index]}",
                                             "num.partitions": "2", "offsets.topic.num.partitions": "1"})
        self.started.append(proc)
        self.current = proc.start()
        self.serving = index

    def stop(self) -> None:
        assert self.current is not None
        assert self.current.stop() == 0

    def swap(self) -> None:
        """The serving host goes away cleanly and the other one starts on the same data."""
        self.stop()
        self.start(1 - self.serving)

    def close(self) -> None:
        for proc in self.started:
            proc.kill()
        for r in self._reservations:
            r.close()


async def produce_values(producer: Producer, topic: str, prefix: str, n: int) -> list[int]:
    """Send values ``<prefix><i>`` (keys ``k<i>``) for i < ``n`` and wait for each; their offsets."""
    futures = [await producer.send(topic, f"{prefix}{i}".encode(), key=f"k{i}".encode()) for i in range(n)]
    return [(await f).offset for f in futures]


def expected_values(prefixes: str, n: int) -> list[bytes]:
    """The values ``produce_values`` sends for each of ``prefixes``, sorted."""
    return sorted(f"{p}{i}".encode() for p in prefixes for i in range(n))


async def read_back(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    """Every value of ``topic`` read by a fresh consumer, waiting for ``expected`` and then a little
    longer so a duplicate past the count would show."""
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(2)])
        assert sum(ends.values()) == expected, f"{topic} holds {sum(ends.values())} records, not {expected}"
        got: list[bytes] = []

        async def read():
            if len(got) < expected:
                for records in (await consumer.poll(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
            return len(got) >= expected

        with contextlib.suppress(TimedOut):  # the caller compares what arrived
            await wait_until_async(read, timeout, interval=0, what=f"{expected} records")
        return sorted(got)
