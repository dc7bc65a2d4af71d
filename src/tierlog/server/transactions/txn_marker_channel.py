"""The transaction coordinator's markers in a cluster (Kafka's ``TransactionMarkerChannelManager``): each
partition of an ending transaction gets its COMMIT or ABORT marker from its leader.

A partition led here is written through :class:`~tierlog.server.apis.transactions.LocalMarkerWriter`; the
others go as WriteTxnMarkers (v1) over the inter-broker listener to their leader. Markers are queued per
destination broker and each broker's sender puts everything queued for it (several transactions) into one
request, as Kafka's channel drains a broker's queue into one request; one request is in flight per broker
(:class:`~tierlog.cluster.inter_broker_sender.InterBrokerSender` keeps the queues and runs the senders).
A marker whose partition is gone from the metadata counts as written (a deleted topic, which Kafka's channel
skips); one without a live leader, or whose request failed (broker down, timeout), gets an error code the
coordinator retries on its next round, when the leader is looked up again.

The channel has connections of its own (not the controller's): a marker request waits for the marker's
replication, and the controller's pushes must not queue behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.inter_broker_sender import InterBrokerSender
from tierlog.errors import NO_ERROR, LeaderNotAvailableError, NetworkException
from tierlog.protocol import ApiKey

log = logging.getLogger(__name__)

__all__ = ["TransactionMarkerChannel"]

TopicPartition = tuple[str, int]


@dataclass
class _Pending:
    """One transaction's markers for one broker, and the future its caller waits on."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[TopicPartition]
    done: asyncio.Future = field(repr=False)


class TransactionMarkerChannel(InterBrokerSender[list[_Pending]]):
    """``write_markers`` of the transaction coordinator in a cluster (see the module docstring)."""

    def __init__(self, node_id: int, image: Callable, local, channel: NetworkBrokerChannel,
                 request_timeout_ms: int):
        """``image()`` is the broker's metadata image; ``local`` writes the markers of partitions led here."""
        super().__init__(channel, log, "txn-markers-to", "Transaction markers to broker %d failed: %s")
        self.node_id = node_id
        self.image = image
        self.local = local
        self.request_timeout_ms = request_timeout_ms

    async def __call__(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        image = self.image()
        codes: dict[TopicPartition, int] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, index in partitions:
            t = image.topics.get(topic)
            state = t.partitions.get(index) if t is not None else None
            if state is None:  # deleted: nothing to mark (Kafka's channel skips it)
                codes[topic, index] = NO_ERROR
                continue
            if state.leader < 0 or state.leader not in image.brokers:
                codes[topic, index] = LeaderNotAvailableError.code
                continue
            by_leader.setdefault(state.leader, []).append((topic, index))
        waits = []
        for leader, tps in by_leader.items():
            if leader == self.node_id:
                waits.append(self.local(producer_id, producer_epoch, coordinator_epoch, commit, tps))
            else:
                waits.append(self._enqueue(leader, _Pending(producer_id, producer_epoch, coordinator_epoch, commit,
                                                            tps, asyncio.get_running_loop().create_future())))
        for answer in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                log.debug("Markers of producer %d failed: %s", producer_id, answer)
                continue
            codes.update(answer)
        return codes

    async def _enqueue(self, broker_id: int, pending: _Pending) -> dict[TopicPartition, int]:
        if self._closed:
            return {}
        self._queues.setdefault(broker_id, []).append(pending)
        self._wake(broker_id)
        return await pending.done

    def _next_batches(self, broker_id: int) -> list[list[_Pending]]:
        """One marker per producer id in a request (the answer is keyed by producer id); the others wait for
        the next one."""
        queue = self._queues.get(broker_id)
        batch: list[_Pending] = []
        seen: set[int] = set()
        for pending in list(queue or ()):
            if pending.producer_id not in seen:
                seen.add(pending.producer_id)
                batch.append(pending)
                queue.remove(pending)
        return [batch] if batch else []

    async def _send(self, broker_id: int, batch: list[_Pending]) -> dict[tuple[int, str, int], int]:
        response = await self.channel.request(broker_id, ApiKey.WRITE_TXN_MARKERS, {"markers": [
            {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
             "transaction_result": p.commit, "coordinator_epoch": p.coordinator_epoch,
             "topics": [{"name": topic, "partition_indexes": [i for t, i in p.partitions if t == topic]}
                        for topic in dict.fromkeys(t for t, _ in p.partitions)]}
            for p in batch]}, min_version=1, max_version=1, timeout_ms=self.request_timeout_ms)
        return {(m.producer_id, t.name, r.partition_index): int(r.error_code)
                for m in response.markers for t in m.topics for r in t.partitions}

    def _answer(self, batch: list[_Pending], answers: dict[tuple[int, str, int], int] | None) -> None:
        """A marker not answered gets NETWORK_EXCEPTION (the coordinator's next round sends it again); with the
        channel stopped its caller gets no codes at all."""
        for p in batch:
            if not p.done.done():
                p.done.set_result({} if answers is None else
                                  {tp: answers.get((p.producer_id, *tp), NetworkException.code) for tp in p.partitions})
