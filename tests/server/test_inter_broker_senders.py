"""What the transaction senders to other brokers (``cluster/inter_broker_sender.py``) answer their callers when a
request fails and when they stop: ``AddPartitionsToTxnManager`` (KIP-890's questions to a coordinator) and
``TransactionMarkerChannel`` (WriteTxnMarkers to a leader). The other broker is a TCP endpoint on 127.0.0.1 that
either takes requests and never answers (a hung broker: the request stays in flight until the test closes the
sender) or closes each connection at once (a broker going away). Their answers from live coordinators and
leaders are in tests/cluster/test_transaction_verification_cluster.py and test_transaction_markers.py."""

from __future__ import annotations

import asyncio
import uuid

from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from tierlog.errors import NetworkException
from tierlog.server.transactions.add_partitions_to_txn_manager import TXN_STATE_TOPIC, AddPartitionsToTxnManager
from tierlog.server.transactions.txn_marker_channel import TransactionMarkerChannel

HERE = 1  # this broker
OTHER = 7  # the coordinator of every transactional id, and the leader of every partition
TOPIC = "orders"
NETWORK_EXCEPTION = NetworkException.code
WAIT_S = 60


class Endpoint:
    """The other broker: ``hung`` reads requests and never answers; otherwise it closes each connection at once."""

    def __init__(self, hung: bool):
        self.hung = hung
        self.requested = asyncio.Event()
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Endpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        for writer in self._writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        if not self.hung:
            writer.close()
            return
        if await reader.read(4):
            self.requested.set()
        await reader.read()  # until either side closes


async def turns_until(condition) -> None:
    """Let the loop run other tasks until ``condition()`` holds (a caller's request reached the queue)."""
    while not condition():
        await asyncio.sleep(0)


def image(port: int) -> MetadataImage:
    def led_by_other(name: str, partitions: int) -> TopicImage:
        return TopicImage(name, uuid.uuid4(), {
            i: PartitionImage(i, OTHER, 0, (OTHER,), (OTHER,)) for i in range(partitions)})
    return MetadataImage("", -1, {OTHER: BrokerImage(OTHER, "127.0.0.1", port)},
                         {TXN_STATE_TOPIC: led_by_other(TXN_STATE_TOPIC, 1), TOPIC: led_by_other(TOPIC, 2)})


def verification(port: int) -> AddPartitionsToTxnManager:
    img = image(port)
    channel = NetworkBrokerChannel(HERE, None, lambda: img.brokers, WAIT_S * 1000)
    return AddPartitionsToTxnManager(HERE, None, lambda: img, lambda transactional_id: 0, None, channel,
                                     WAIT_S * 1000)


def markers(port: int) -> TransactionMarkerChannel:
    img = image(port)
    channel = NetworkBrokerChannel(HERE, None, lambda: img.brokers, WAIT_S * 1000)
    return TransactionMarkerChannel(HERE, lambda: img, None, channel, WAIT_S * 1000)


def test_closing_the_verification_answers_every_waiting_question():
    """A verify-only question and a TV2 add taken together (two requests, the first one hung) and a question
    queued behind them: closing the manager answers each NETWORK_EXCEPTION, the add that never went out too;
    a question after the close gets the same at once."""
    tp = (TOPIC, 0)

    async def main():
        async with Endpoint(hung=True) as endpoint:
            manager = verification(endpoint.port)
            verify = asyncio.create_task(manager.verify("a", 5, 0, [tp], abortable_supported=True))
            add = asyncio.create_task(manager.verify("b", 6, 0, [tp], abortable_supported=True, add=True))
            await asyncio.wait_for(endpoint.requested.wait(), WAIT_S)
            assert not manager._queues.get(OTHER)  # both taken by the sender, whose first request hangs
            behind = asyncio.create_task(manager.verify("c", 8, 0, [tp], abortable_supported=True))
            await asyncio.wait_for(turns_until(lambda: manager._queues.get(OTHER)), WAIT_S)
            assert list(manager._queues[OTHER]) == ["c"]  # queued behind the request in flight
            await asyncio.wait_for(manager.close(), WAIT_S)
            answers = await asyncio.wait_for(asyncio.gather(verify, add, behind), WAIT_S)
            after = await asyncio.wait_for(manager.verify("d", 9, 0, [tp], abortable_supported=True), WAIT_S)
            return answers, after

    answers, after = asyncio.run(main())
    assert answers == [{tp: NETWORK_EXCEPTION}] * 3
    assert after == {tp: NETWORK_EXCEPTION}


def test_a_failed_verification_request_answers_network_exception_and_the_next_one_connects_again():
    tp = (TOPIC, 0)

    async def main():
        async with Endpoint(hung=False) as endpoint:
            manager = verification(endpoint.port)
            try:
                first = await asyncio.wait_for(manager.verify("a", 5, 0, [tp], abortable_supported=True), WAIT_S)
                second = await asyncio.wait_for(
                    manager.verify("a", 5, 0, [tp], abortable_supported=True, add=True), WAIT_S)
            finally:
                await manager.close()
            return first, second, endpoint.connections

    first, second, connections = asyncio.run(main())
    assert first == second == {tp: NETWORK_EXCEPTION}
    assert connections == 2


def test_closing_the_marker_channel_leaves_every_waiting_marker_unanswered():
    """Markers of two producers in one hung request and a second marker of the first producer queued for the
    next one: closing the channel gives each caller no codes (the coordinator's next round sends them again), as
    it does a call after the close."""
    async def main():
        async with Endpoint(hung=True) as endpoint:
            channel = markers(endpoint.port)
            first = asyncio.create_task(channel(5, 0, 0, True, [(TOPIC, 0)]))
            other = asyncio.create_task(channel(6, 0, 0, True, [(TOPIC, 1)]))
            await asyncio.wait_for(endpoint.requested.wait(), WAIT_S)
            assert not channel._queues[OTHER]  # both taken into the hung request
            same_producer = asyncio.create_task(channel(5, 1, 0, False, [(TOPIC, 1)]))
            await asyncio.wait_for(turns_until(lambda: channel._queues[OTHER]), WAIT_S)
            assert [p.producer_id for p in channel._queues[OTHER]] == [5]  # queued behind the request in flight
            await asyncio.wait_for(channel.close(), WAIT_S)
            answers = await asyncio.wait_for(asyncio.gather(first, other, same_producer), WAIT_S)
            after = await asyncio.wait_for(channel(7, 0, 0, True, [(TOPIC, 0)]), WAIT_S)
            return answers, after

    answers, after = asyncio.run(main())
    assert answers == [{}, {}, {}]
    assert after == {}


def test_a_failed_marker_request_answers_network_exception():
    async def main():
        async with Endpoint(hung=False) as endpoint:
            channel = markers(endpoint.port)
            try:
                return await asyncio.wait_for(channel(5, 0, 0, True, [(TOPIC, 0), (TOPIC, 1)]), WAIT_S)
            finally:
                await channel.close()

    assert asyncio.run(main()) == {(TOPIC, 0): NETWORK_EXCEPTION, (TOPIC, 1): NETWORK_EXCEPTION}
