"""Requests from the controller to brokers, and the channel that carries them.

On a single node the controller and the broker live in one process and :class:`LocalBrokerChannel`
hands a request straight to the broker's handler; a cluster puts the same request and response
shapes on the wire (one API per request type) without changing either side.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tierlog.errors import BrokerNotAvailableError


@dataclass(frozen=True, slots=True)
class DisableRemoteTopicRequest:
    """The KIP-950 draft's DisableRemoteTopic: stop tiering ``topic`` on this broker and, with the
    ``delete`` policy, delete its remote data. Idempotent: the controller repeats it until every broker
    hosting a partition answers without error."""

    controller_id: int
    topic_id: uuid.UUID
    topic: str
    partitions: tuple[int, ...]
    policy: str  # "retain" or "delete"
    tiering_epoch: int


@dataclass(frozen=True, slots=True)
class DisableRemoteTopicResponse:
    error_code: int = 0
    error_message: str | None = None


DisableHandler = Callable[[DisableRemoteTopicRequest], Awaitable[DisableRemoteTopicResponse]]


class LocalBrokerChannel:
    """Controller-to-broker requests within one process."""

    def __init__(self) -> None:
        self._handlers: dict[int, DisableHandler] = {}

    def register(self, broker_id: int, disable_remote_topic: DisableHandler) -> None:
        self._handlers[broker_id] = disable_remote_topic

    def unregister(self, broker_id: int) -> None:
        self._handlers.pop(broker_id, None)

    async def disable_remote_topic(self, broker_id: int,
                                   request: DisableRemoteTopicRequest) -> DisableRemoteTopicResponse:
        handler = self._handlers.get(broker_id)
        if handler is None:
            raise BrokerNotAvailableError(f"broker {broker_id} is not available")
        return await handler(request)
