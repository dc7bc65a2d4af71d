"""Requests queued per destination broker and sent by one task per broker (Kafka's ``InterBrokerSendThread``,
which both ``AddPartitionsToTxnManager`` and ``TransactionMarkerChannelManager`` extend).

A subclass owns what its queue holds and how entries for the same key merge; this class starts a broker's
sender when something is queued for it and no sender runs, and the sender drains the queue one request at a
time, each request carrying what the subclass takes from the queue then. A failed request (connection,
timeout) is warned about, its connection dropped (the broker may have moved) and its entries given empty
answers, which the subclass maps to its error; a stop (``close``) answers what was being sent and what is
still queued, so no caller waits on a stopped sender.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar

from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.logs import RepeatLimiter
from tierlog.tasks import stop_tasks

__all__ = ["InterBrokerSender"]

#: What one request carries; a broker's queue is of the same type (``close`` answers it as one).
Batch = TypeVar("Batch")


class InterBrokerSender(Generic[Batch]):
    """Subclasses fill ``_queues[node]``, call :meth:`_wake`, and define :meth:`_next_batches`, :meth:`_send`
    and :meth:`_answer`."""

    def __init__(self, channel: NetworkBrokerChannel | None, log: logging.Logger, task_name: str, failure: str):
        """``task_name`` prefixes the sender tasks' names; ``failure`` is the warning of a failed request, with
        ``%d`` for the broker and ``%s`` for the error."""
        self.channel = channel
        self._queues: dict[int, Batch] = {}
        self._senders: dict[int, asyncio.Task] = {}
        self._warn = RepeatLimiter(log)
        self._task_name = task_name
        self._failure = failure
        self._closed = False

    def _next_batches(self, node: int) -> list[Batch]:
        """Take out of ``node``'s queue what the next requests carry, sent in order (Kafka's
        ``generateRequests``); none once the queue is empty."""
        raise NotImplementedError

    async def _send(self, node: int, batch: Batch) -> dict:
        """Send ``batch`` to ``node``; the answers for :meth:`_answer`. Raises when the request failed."""
        raise NotImplementedError

    def _answer(self, batch: Batch, answers: dict | None) -> None:
        """Answer the callers waiting on ``batch``: ``answers`` from :meth:`_send`, empty when the request
        failed, None when the sender stopped first."""
        raise NotImplementedError

    def _wake(self, node: int) -> None:
        """Start ``node``'s sender unless one runs (it drains what was just queued too)."""
        sender = self._senders.get(node)
        if sender is None or sender.done():
            self._senders[node] = asyncio.get_running_loop().create_task(self._drain(node),
                                                                         name=f"{self._task_name}-{node}")

    async def _drain(self, node: int) -> None:
        while not self._closed and (batches := self._next_batches(node)):
            for i, batch in enumerate(batches):
                try:
                    answers = await self._send(node, batch)
                except asyncio.CancelledError:
                    for taken in batches[i:]:
                        self._answer(taken, None)
                    raise
                except Exception as e:  # noqa: BLE001 - the callers retry, on a new connection
                    self._warn.warning(("send", node, type(e).__name__), self._failure, node, e)
                    if self.channel is not None:
                        self.channel.forget(node)
                    answers = {}
                self._answer(batch, answers)

    async def close(self) -> None:
        """Stop the senders and answer every caller still waiting; closes the channel."""
        self._closed = True
        await stop_tasks(*self._senders.values())
        for queue in self._queues.values():
            self._answer(queue, None)
        self._senders.clear()
        self._queues.clear()
        if self.channel is not None:
            self.channel.close()
