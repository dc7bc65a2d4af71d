"""Requests from the controller to brokers, and the channel that carries them.

On a single node the controller and the broker live in one process and :class:`LocalBrokerChannel`
hands a request straight to the broker's handler; in a cluster :class:`NetworkBrokerChannel` puts the
same requests on the wire (tierlog's inter-broker APIs, :mod:`tierlog.protocol.internal`) to each broker's
inter-broker listener, and Kafka's own APIs (Envelope) through the same connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tierlog.client.connection import BrokerConnection
from tierlog.cluster.image import BrokerImage
from tierlog.errors import BrokerNotAvailableError
from tierlog.kafka_uuid import uuid_from_str, uuid_to_str
from tierlog.protocol.internal import InternalApi


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
    controller_epoch: int = 0

    def to_json(self) -> dict:
        return {**asdict(self), "topic_id": uuid_to_str(self.topic_id), "partitions": list(self.partitions)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DisableRemoteTopicRequest:
        return cls(int(d["controller_id"]), uuid_from_str(d["topic_id"]), str(d["topic"]),
                   tuple(int(p) for p in d["partitions"]), str(d["policy"]), int(d["tiering_epoch"]),
                   int(d.get("controller_epoch", 0)))


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


class NetworkBrokerChannel:
    """Requests to other brokers over their inter-broker listener: one connection per broker, opened on first
    use and again after a failure. ``brokers`` gives the live brokers and their endpoints."""

    def __init__(self, node_id: int, listener: str, brokers: Callable[[], Mapping[int, BrokerImage]],
                 request_timeout_ms: int, ssl_context: ssl.SSLContext | None = None, sasl=None) -> None:
        """``ssl_context``: the inter-broker listener speaks TLS (SSL, SASL_SSL); ``sasl``: the credentials
        this broker authenticates with on a SASL inter-broker listener (sasl.mechanism.inter.broker.protocol)."""
        self.node_id = node_id
        self.listener = listener
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._brokers = brokers
        self.request_timeout_ms = request_timeout_ms
        self._conns: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def connection(self, broker_id: int) -> BrokerConnection:
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            broker = self._brokers().get(broker_id)
            if broker is None:
                raise BrokerNotAvailableError(f"broker {broker_id} is not alive")
            host, port = broker.endpoint(self.listener)
            conn = await BrokerConnection.open(host, port, node_id=broker_id, client_id=f"broker-{self.node_id}",
                                               request_timeout_ms=self.request_timeout_ms,
                                               setup_timeout_ms=min(self.request_timeout_ms, 10000),
                                               ssl_context=self.ssl_context, sasl=self.sasl)
            self._conns[broker_id] = conn
            return conn

    async def send(self, broker_id: int, api: InternalApi, body: Mapping[str, Any],
                   timeout_ms: int | None = None) -> dict:
        conn = await self.connection(broker_id)
        return await conn.request_internal(api, body, timeout_ms)

    async def request(self, broker_id: int, api_key: int, values: Mapping[str, Any], **kw) -> Any:
        """A Kafka API request (Envelope, CreateTopics) to ``broker_id``; the kio response."""
        conn = await self.connection(broker_id)
        return await conn.request(api_key, values, **kw)

    async def disable_remote_topic(self, broker_id: int,
                                   request: DisableRemoteTopicRequest) -> DisableRemoteTopicResponse:
        answer = await self.send(broker_id, InternalApi.DISABLE_REMOTE_TOPIC, request.to_json())
        return DisableRemoteTopicResponse(int(answer.get("error_code", 0)), answer.get("error_message"))

    def forget(self, broker_id: int) -> None:
        """Close the connection to a broker that left."""
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for broker_id in list(self._conns):
            with contextlib.suppress(Exception):
                self.forget(broker_id)
