"""One TCP connection to one broker: framing, correlation ids, ApiVersions negotiation, timeouts.

A :class:`BrokerConnection` is opened with :meth:`BrokerConnection.open`, which connects within
``socket.connection.setup.timeout.ms`` and negotiates API versions (ApiVersions v5, naming the cluster and
node it means once it knows them (KIP-1242); asking again at the broker's highest version when the broker
answers UNSUPPORTED_VERSION at v0, as KIP-511 describes). :meth:`request` then sends
any API at the highest version both sides speak and waits for its answer within
``request.timeout.ms``. A request that times out closes the connection, as Kafka's clients do: the
broker may still answer it later and responses on a connection come back in order only.

Requests are built from plain values through :func:`tierlog.protocol.build`, so callers describe a
request once for every version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema

from tierlog import errors
from tierlog.client.errors import KafkaConnectionError, KafkaTimeoutError
from tierlog.protocol import ApiKey, build, encode_request, parse_response
from tierlog.protocol.internal import InternalApi, encode_internal_request, parse_internal_response
from tierlog.security.sasl_client import SaslClientError, SaslCredentials
from tierlog.security.sasl_client import authenticate as sasl_authenticate

log = logging.getLogger("tierlog.client")

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")

# The versions tierlog's client speaks per API: responses are read by field name, and these ranges
# keep every field the code reads (e.g. Fetch stays below v13, where topic names become ids).
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    # Produce v13, Fetch v13+ and OffsetFetch v10 name topics by id (KIP-516): sent only when every topic of
    # the request has an id in the metadata, else capped at the last version with names (as Kafka's client)
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (1, 13),
    # v9: the member epoch of a KIP-848 member (classic members ask for v8); v10: topics by id
    ApiKey.OFFSET_COMMIT: (2, 10),
    ApiKey.OFFSET_FETCH: (1, 10),  # v8: several groups; v9: a KIP-848 member's id and epoch
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    # KIP-848; v1 (KIP-1082) has the member id made by the client and SubscribedTopicRegex
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (1, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),  # the admin's describe of a consumer-protocol group
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.API_VERSIONS: (0, 5),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.ENVELOPE: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_GROUPS: (0, 5),  # v5: the group's type (classic or consumer)
    ApiKey.DESCRIBE_GROUPS: (0, 6),  # v6: the group's error message
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ALTER_PARTITION: (2, 2),
    # the transaction coordinator's markers to other brokers (v0 was removed in Kafka 4.0)
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    # transactions: AddPartitionsToTxn v4+ is the brokers' batched form (a partition leader's verification,
    # KIP-890 part 1; the producer asks for v3 at most); EndTxn v5 and TxnOffsetCommit v5 are KIP-890's
    # transaction version 2 (tierlog.client.transactions picks the versions per mode)
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    # SASL: the handshake naming the mechanism, then its tokens in SaslAuthenticate (v1+: session lifetime)
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    # share groups (KIP-932): tierlog.client.share_consumer
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
}

#: The last versions that name topics by name; the next ones name them by id only.
PRODUCE_LAST_VERSION_WITH_NAMES = 12
FETCH_LAST_VERSION_WITH_NAMES = 12
OFFSET_FETCH_LAST_VERSION_WITH_NAMES = 9
OFFSET_COMMIT_LAST_VERSION_WITH_NAMES = 9

#: KIP-368: a client re-authenticates when 85-95% of the session lifetime has passed (Kafka's window).
REAUTH_WINDOW = (0.85, 0.95)
MAX_API_VERSIONS_VERSION = CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]

SOFTWARE_NAME = "tierlog-python"
SOFTWARE_VERSION = "0.1.0"


def _schemas(api_key: int, version: int) -> tuple[type, type]:
    key = (api_key, version)
    found = _schema_cache.get(key)
    if found is None:
        found = _schema_cache[key] = (load_request_schema(api_key, version), load_response_schema(api_key, version))
    return found


_schema_cache: dict[tuple[int, int], tuple[type, type]] = {}


class _FrameProtocol(asyncio.BufferedProtocol):
    """Reads size-prefixed frames straight into memory the connection hands out: small frames are
    cut from one reusable 64 KiB buffer, a larger one is received into a bytearray of its exact size
    (one copy from the kernel, no growing buffer), then passed on as a read-only memoryview."""

    SMALL = 1 << 16

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self._small = bytearray(self.SMALL)
        self._small_view = memoryview(self._small)
        self._have = 0
        self._big: bytearray | None = None
        self._big_view: memoryview | None = None
        self._big_have = 0
        self._paused = False
        self._drained: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big_view[self._big_have:]
        return self._small_view[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_have += nbytes
            if self._big_have == len(self._big):
                frame = self._big_view.toreadonly()
                self._big = self._big_view = None
                self.conn._on_frame(frame)
            return
        self._have += nbytes
        small, have, pos = self._small, self._have, 0
        while have - pos >= 4:
            (size,) = _SIZE.unpack_from(small, pos)
            if size < 0:
                self.conn.close(KafkaConnectionError(f"node {self.conn.node_id} sent a frame of size {size}"))
                return
            if size > self.SMALL - 4:
                # too large for the scratch buffer: read the rest straight into its own buffer
                big = bytearray(size)
                take = min(have - pos - 4, size)
                big[:take] = small[pos + 4:pos + 4 + take]
                pos += 4 + take
                if take == size:
                    self.conn._on_frame(memoryview(big).toreadonly())
                    continue
                self._big, self._big_view, self._big_have = big, memoryview(big), take
                break
            if have - pos - 4 < size:
                break
            self.conn._on_frame(bytes(small[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            small[:have - pos] = small[pos:have]
            self._have = have - pos

    def eof_received(self) -> bool:
        self.conn.close(KafkaConnectionError(
            f"node {self.conn.node_id} ({self.conn.host}:{self.conn.port}) closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.close(KafkaConnectionError(
            f"connection to node {self.conn.node_id} ({self.conn.host}:{self.conn.port}) lost"
            + (f": {exc}" if exc else "")))
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def _wake(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._paused:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained


class BrokerConnection:
    """A negotiated connection; create with :meth:`open`. Safe to share between tasks."""

    def __init__(self, host: str, port: int, node_id: int, client_id: str | None,
                 request_timeout_ms: int) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.api_versions: dict[int, tuple[int, int]] = {}
        # the cluster's finalized feature levels (ApiVersions v3+), e.g. "transaction.version"
        self.finalized_features: dict[str, int] = {}
        # KIP-1242: the cluster this connection means to reach (the node is node_id), sent from ApiVersions v5
        self.expected_cluster_id: str | None = None
        self.api_versions_max = MAX_API_VERSIONS_VERSION  # the ApiVersions version asked first
        self._transport: asyncio.Transport | None = None
        self._protocol: _FrameProtocol | None = None
        self._correlation_id = 0
        # correlation id -> (response class, future); responses arrive in request order
        self._pending: dict[int, tuple[type, asyncio.Future]] = {}
        self._closed = False
        self.close_reason: BaseException | None = None
        self._sasl: SaslCredentials | None = None
        self.reauthentications = 0  # SASL exchanges completed on this connection (the first one included)
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection(node {self.node_id} at {self.host}:{self.port})"

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def socket(self):
        """The connection's socket (for options such as its receive buffer), or None."""
        return self._transport.get_extra_info("socket") if self._transport is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    async def open(cls, host: str, port: int, *, node_id: int, client_id: str | None,
                   request_timeout_ms: int, setup_timeout_ms: int,
                   ssl_context: ssl.SSLContext | None = None,
                   sasl: SaslCredentials | None = None, cluster_id: str | None = None,
                   api_versions_max: int = MAX_API_VERSIONS_VERSION) -> BrokerConnection:
        """Connect (through TLS with ``ssl_context``: security.protocol=SSL or SASL_SSL), negotiate versions and,
        with ``sasl``, authenticate; raises KafkaConnectionError, KafkaTimeoutError, or
        SaslAuthenticationFailedError (UnsupportedSaslMechanismError) when the broker refuses the credentials."""
        conn = cls(host, port, node_id, client_id, request_timeout_ms)
        loop = asyncio.get_running_loop()
        try:
            conn._transport, conn._protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _FrameProtocol(conn), host, port, ssl=ssl_context,
                                       server_hostname=host if ssl_context is not None else None,
                                       ssl_handshake_timeout=setup_timeout_ms / 1000 if ssl_context else None),
                setup_timeout_ms / 1000)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"connection to node {node_id} ({host}:{port}) not set up within {setup_timeout_ms} ms") from None
        except ssl.SSLError as exc:  # also a certificate that does not verify
            raise KafkaConnectionError(f"TLS handshake with node {node_id} ({host}:{port}) failed: {exc}") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to node {node_id} ({host}:{port}): {exc}") from None
        sock = conn._transport.get_extra_info("socket")
        if sock is not None:
            import socket
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.wait_for(conn._negotiate(), setup_timeout_ms / 1000)
            if sasl is not None:
                conn._sasl = sasl
                await asyncio.wait_for(conn._authenticate(), setup_timeout_ms / 1000)
        except BaseException as exc:
            conn.close(exc if isinstance(exc, Exception) else None)
            if isinstance(exc, TimeoutError):
                raise KafkaTimeoutError(f"ApiVersions or SASL with node {node_id} ({host}:{port}) timed out") from None
            raise
        return conn

    async def _authenticate(self) -> None:
        async def send(api_key, values, max_version):
            return await self.request(api_key, values, max_version=max_version)
        try:
            lifetime_ms = await sasl_authenticate(send, self._sasl)
        except SaslClientError as e:
            cls = errors.error_for_code(e.code) if e.code else errors.SaslAuthenticationFailedError
            raise cls(f"node {self.node_id} ({self.host}:{self.port}): {e}") from None
        self.reauthentications += 1
        if lifetime_ms > 0:  # KIP-368: authenticate again on this connection before the session ends
            delay = lifetime_ms / 1000 * random.uniform(*REAUTH_WINDOW)
            self._reauth_timer = asyncio.get_running_loop().call_later(delay, self._start_reauthentication)

    def _start_reauthentication(self) -> None:
        if not self._closed:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate()
        except Exception as exc:  # noqa: BLE001 - the connection cannot go on: its users see why
            self.close(exc if isinstance(exc, errors.KafkaError) else KafkaConnectionError(
                f"re-authentication with node {self.node_id} failed: {exc}"))

    async def _negotiate(self) -> None:
        """ApiVersions at the highest version the broker is thought to speak (``api_versions_max``). From v5
        (KIP-1242) it names the cluster and node meant, when known: a broker that is not that node answers
        REBOOTSTRAP_REQUIRED, raised here (the network client goes back to its bootstrap servers)."""
        version = self.api_versions_max
        values = {"client_software_name": SOFTWARE_NAME, "client_software_version": SOFTWARE_VERSION}
        if self.expected_cluster_id is not None and self.node_id >= 0:
            values.update(cluster_id=self.expected_cluster_id, node_id=self.node_id)
        response = await self._send(ApiKey.API_VERSIONS, version, values)
        if response.error_code.value == errors.UnsupportedVersionError.code:
            # The broker answered at v0 with its ranges; ask again at the highest version both speak.
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            low, high = ranges.get(ApiKey.API_VERSIONS, (0, 0))
            response = await self._send(ApiKey.API_VERSIONS, max(low, min(high, version - 1)), values)
        if response.error_code.value:
            raise errors.error_for_code(response.error_code.value)(
                f"ApiVersions refused by node {self.node_id} ({self.host}:{self.port}): {response.error_code.name}")
        self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        self.finalized_features = {f.name: int(f.max_version_level)
                                   for f in getattr(response, "finalized_features", None) or ()}

    def version(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` both sides speak; UnsupportedVersionError if none."""
        low, high = CLIENT_VERSIONS.get(api_key, (0, 0))
        if max_version is not None:
            high = min(high, max_version)
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise errors.UnsupportedVersionError(
                f"node {self.node_id} does not support {ApiKey(api_key).name}")
        v = min(high, theirs[1])
        if v < max(low, theirs[0]):
            raise errors.UnsupportedVersionError(
                f"node {self.node_id} speaks {ApiKey(api_key).name} v{theirs[0]}..{theirs[1]}, "
                f"tierlog's client v{low}..{high}")
        return v

    async def request(self, api_key: int, values: Mapping[str, Any], *, max_version: int | None = None,
                      min_version: int | None = None, expect_response: bool = True,
                      timeout_ms: int | None = None) -> Any:
        """Send ``values`` as ``api_key`` at the negotiated version and return the kio response.

        ``expect_response=False`` (Produce with acks=0) returns None once the request is written."""
        version = self.version(api_key, max_version)
        if min_version is not None and version < min_version:
            raise errors.UnsupportedVersionError(
                f"node {self.node_id} lacks {ApiKey(api_key).name} v{min_version}+ (has up to v{version})")
        if log.isEnabledFor(logging.DEBUG):  # as Kafka's NetworkClient, the version each request is sent at
            log.debug("Sending %s v%d to node %d", ApiKey(api_key).name, version, self.node_id)
        return await self._send(api_key, version, values, expect_response, timeout_ms)

    async def _send(self, api_key: int, version: int, values: Mapping[str, Any], expect_response: bool = True,
                    timeout_ms: int | None = None) -> Any:
        if self._closed:
            raise KafkaConnectionError(f"connection to node {self.node_id} is closed: {self.close_reason}")
        request_type, response_type = _schemas(api_key, version)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        corr = self._correlation_id
        frame = encode_request(build(request_type, values), corr, self.client_id)
        return await self._exchange(ApiKey(api_key).name, corr, frame, response_type, expect_response, timeout_ms)

    async def request_internal(self, api: InternalApi, body: Mapping[str, Any], timeout_ms: int | None = None) -> dict:
        """One of tierlog's inter-broker requests (:mod:`tierlog.protocol.internal`); returns the answer's body."""
        if self._closed:
            raise KafkaConnectionError(f"connection to node {self.node_id} is closed: {self.close_reason}")
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        corr = self._correlation_id
        frame = encode_internal_request(api, corr, self.client_id or "", dict(body))
        return await self._exchange(api.name, corr, frame, None, True, timeout_ms)

    async def _exchange(self, name: str, corr: int, frame: bytes, response_type: type | None, expect_response: bool,
                        timeout_ms: int | None) -> Any:
        """Write ``frame`` and wait for its answer (``response_type`` None: an internal request's JSON body)."""
        fut: asyncio.Future | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[corr] = (response_type, fut)
        try:
            self._transport.write(frame)
            if self._protocol._paused:
                await self._protocol.drain()
                if self._closed:
                    raise self.close_reason
        except (OSError, RuntimeError) as exc:
            self.close(KafkaConnectionError(f"write to node {self.node_id} failed: {exc}"))
            raise self.close_reason from None
        if fut is None:
            return None
        timeout = self.request_timeout if timeout_ms is None else timeout_ms / 1000
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            exc = KafkaTimeoutError(f"{name} to node {self.node_id} timed out after "
                                    f"{timeout * 1000:.0f} ms; disconnecting")
            self.close(exc)
            raise exc from None

    def _on_frame(self, frame: bytes | memoryview) -> None:
        """One response frame (without its size prefix): hand it to the request waiting for it."""
        if self._closed:
            return
        if len(frame) < 4:
            self.close(KafkaConnectionError(f"node {self.node_id} sent a frame of {len(frame)} bytes"))
            return
        (corr,) = _CORR.unpack_from(frame, 0)
        entry = self._pending.pop(corr, None)
        if entry is None:
            self.close(KafkaConnectionError(f"node {self.node_id} answered unknown correlation id {corr}"))
            return
        response_type, fut = entry
        try:
            if response_type is None:
                response = parse_internal_response(frame[4:])
            else:
                _, response = parse_response(frame, response_type)
        except Exception as exc:  # a broker bug must not hang the caller
            if not fut.done():
                fut.set_exception(errors.CorruptMessageError(
                    f"cannot parse {getattr(response_type, '__name__', 'the answer')} from node {self.node_id}: "
                    f"{exc!r}"))
            return
        if not fut.done():
            fut.set_result(response)

    def close(self, reason: BaseException | None = None) -> None:
        """Close and fail every request still waiting (with ``reason`` or a connection error)."""
        if self._closed:
            return
        self._closed = True
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
        self.close_reason = reason or KafkaConnectionError(f"connection to node {self.node_id} closed")
        for _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self.close_reason if isinstance(self.close_reason, Exception)
                                  else KafkaConnectionError(str(self.close_reason)))
                fut.exception()  # mark retrieved: nobody may be waiting any more
        self._pending.clear()
        if self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.close()
