"""The socket server: Kafka framing over asyncio streams, one task per connection.

A connection's requests are handled one after another and answered in order, which is how Kafka
keeps pipelined requests ordered (it mutes a channel until its response is sent). Slow requests
(long-polling fetches, joins) only hold their own connection. Frame sizes are checked against
``socket.request.max.bytes`` before a body is read; a malformed or oversized frame closes that
connection with a log line and never disturbs the others.

Limits, as Kafka's ``SocketServer`` has them:

- connections (Kafka's ``ConnectionQuotas``): ``max.connections`` over the broker and
  ``max.connections.per.ip`` (``max.connections.per.ip.overrides`` per host) are checked as a connection
  is accepted, before a transport or task exists for it; one beyond a limit is closed at once.
- memory (Kafka's ``MemoryPool``): with ``queued.max.request.bytes`` > 0, the bytes of requests being
  received or waiting for their answer are reserved from one pool. A connection reserves the whole
  announced size of the frame it is receiving before it reads more of it (never allocating it: the body
  is collected as the socket delivers it) and stops reading while the pool is exhausted; what it holds
  is released as each request is answered, and all of it when the connection closes or idles out
  (``connections.max.idle.ms``). As Kafka's non-strict pool, a reservation is granted while anything is
  left, so the pool can overshoot by at most one frame.
- descriptors: a connection whose descriptor would leave less than :func:`fd_reserve` of the process's
  open file limit (RLIMIT_NOFILE) free is closed at once too, so connections can never take the
  descriptors storage needs to roll a segment or write a checkpoint (at the limit those fail, and an I/O
  error takes the log dir offline, as in Kafka).
- accepting: an accept that fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
  pauses that listener for :data:`ACCEPT_BACKOFF_S` and is logged once per interval with a count.

Warnings that a peer can make repeat (rejected connections, bad frames, accept errors) go through a
:class:`~tierlog.logs.RepeatLimiter`.

Reading is the StreamReader's; responses go out through the StreamWriter, and a Fetch response's record
regions with ``loop.sendfile``: the limits wrap these paths without changing them.

On an SSL listener (:mod:`tierlog.server.network.listener_security`) the accepted socket goes through a TLS
handshake first, with the listener's current context; a failed handshake is logged (limited) and the
connection closed. Then the same reader and writer serve it, the record regions read with pread (sendfile
cannot encrypt) and a response's parts written in groups of up to a megabyte. A PLAINTEXT connection takes the
path it always took. On a SASL_PLAINTEXT or SASL_SSL
listener (:mod:`tierlog.server.network.sasl_authenticator`) the connection authenticates first (:meth:`_authenticate`,
frames bounded by ``sasl.server.max.receive.size``); a session past its KIP-368 lifetime is closed at its next
request. Each connection's :class:`~tierlog.security.session.Session` (principal, client address, listener) is
made once; every request's :class:`~tierlog.protocol.RequestContext` carries it (``ctx.session``), with the
connection's SASL state (``ctx.sasl``) and, when a request quota applies, a timing record
(``ctx.timing``) the replica manager's purgatory waits are added to: handlers get all of it as an argument.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import errno
import logging
import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable, Mapping

from tierlog.errors import IllegalSaslStateError, KafkaError, StartupError
from tierlog.logs import RepeatLimiter
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import (
    ApiKey,
    FrameDecoder,
    HandlerRegistry,
    InvalidFrameError,
    RequestContext,
    RequestParseError,
    RequestTiming,
    build_response,
    encode_response,
    encode_response_parts,
    fallback_response_frame,
    internal,
    offload,
    parse_request,
)
from tierlog.security import ANONYMOUS
from tierlog.security.sasl_server import SaslFailure
from tierlog.security.session import Session, peer_text
from tierlog.server.http.broker_metrics import RequestMetrics, fetch_replica_id
from tierlog.server.network.channel import (
    READ_CHUNK,
    _AnswerQueue,
    _IdleWatch,
    _send_region,
    _TlsStreamProtocol,
    _write_gathered,
)
from tierlog.server.network.connection_quotas import _NO_LIMITS, ConnectionQuotas, _fd_ceiling, fd_reserve
from tierlog.server.network.listener_security import NoMatchingRule, TlsListener
from tierlog.server.network.listeners import BoundListener, _listen_sockets, bind_failure
from tierlog.server.network.memory_pool import (
    TRIM_AFTER_BYTES,
    TRIM_FRAME_BYTES,
    TRIM_INTERVAL_S,
    MemoryPool,
    _malloc_trim,
)
from tierlog.server.network.sasl_authenticator import (
    AUTHENTICATE,
    COMPLETE,
    FAILED,
    RAW_TOKENS,
    SaslConnection,
    SaslListener,
)
from tierlog.server.quotas.client_quota import NANOS_TO_PERCENTAGE_PER_SECOND, ClientQuotas, quota_user
from tierlog.tasks import stop_tasks

#: The socket server's logger: every module of this package logs as ``tierlog.server.network``.
log = logging.getLogger(__package__)

#: How long a listener stops accepting after an accept failed for want of descriptors or memory.
ACCEPT_BACKOFF_S = 0.1
#: Requests brokers send each other, which Kafka exempts from the request quota (cluster actions).
REQUEST_QUOTA_EXEMPT = frozenset(k for k in (
    getattr(ApiKey, name, None) for name in ("LEADER_AND_ISR", "STOP_REPLICA", "UPDATE_METADATA", "CONTROLLED_SHUTDOWN",
                                             "WRITE_TXN_MARKERS", "ENVELOPE", "ALTER_PARTITION")) if k is not None)
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class _CloseConnection(Exception):
    pass


Invoker = Callable[[RequestContext], Awaitable[object | None]]


class SocketServer:
    def __init__(self, registry: HandlerRegistry, *, max_frame_bytes: int, idle_timeout_ms: int,
                 error_response: Callable[[RequestContext, KafkaError], object | None],
                 config: Callable[[], Mapping] | None = None, queued_max_request_bytes: int = -1,
                 metrics: MetricsRegistry | None = None, tls: dict[str, TlsListener] | None = None,
                 sasl: dict[str, SaslListener] | None = None, client_quotas: ClientQuotas | None = None,
                 inter_broker_listener: str = ""):
        """``config()`` gives the current connection limits (the broker's effective configuration);
        ``queued_max_request_bytes`` > 0 bounds the bytes of requests held (Kafka's MemoryPool). ``tls`` and
        ``sasl`` are the TLS and SASL sides of the listeners by name (PLAINTEXT listeners have neither),
        ``client_quotas`` the broker's (request_percentage, and the mute of throttled connections) or None;
        tierlog's inter-broker requests are accepted on ``inter_broker_listener`` only."""
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_ms / 1000 if idle_timeout_ms > 0 else None
        self._error_response = error_response
        self.quotas = ConnectionQuotas(config if config is not None else (lambda: _NO_LIMITS))
        self.pool = MemoryPool(queued_max_request_bytes, metrics) if queued_max_request_bytes > 0 else None
        #: Requests, errors, times and connections (Kafka's RequestMetrics and socket-server-metrics).
        self.request_metrics = RequestMetrics(metrics) if metrics is not None else None
        self.client_quotas = client_quotas
        # tierlog's inter-broker requests (api key -> handler of the JSON body), given to start_serving in a
        # cluster only: they reach the replica manager, made after the listeners are bound
        self.internal_handlers: dict[int, Callable[[dict], Awaitable[dict]]] = {}
        self.inter_broker_listener = inter_broker_listener  # the listener they are accepted on
        self._warn = RepeatLimiter(log)
        self._fd_ceiling = _fd_ceiling()
        self._freed = 0  # bytes of big requests freed since the last trim
        self._trim_scheduled = False
        self._last_trim = 0.0
        self._listening: list[tuple[socket.socket, BoundListener]] = []
        self._acceptors: list[asyncio.Task] = []
        self._connections: set[asyncio.Task] = set()
        self._writers: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._stopping = False
        self.bound: list[BoundListener] = []
        self._sendfile = True  # cleared the first time the event loop turns out not to support it
        #: The TLS side of each SSL listener by name (PLAINTEXT listeners have none).
        self.tls: dict[str, TlsListener] = tls if tls is not None else {}
        #: The SASL side of each SASL_PLAINTEXT and SASL_SSL listener by name.
        self.sasl: dict[str, SaslListener] = sasl if sasl is not None else {}

    async def bind(self, listeners) -> list[BoundListener]:
        """Bind every listener (``Listener`` objects with name/host/port/security_protocol) without
        accepting connections yet: the bound ports are known (listeners on port 0 pick one) before
        the broker is ready to serve."""
        for listener in listeners:
            host = listener.host or "0.0.0.0"
            try:
                socks = _listen_sockets(host, listener.port)
            except OSError as e:
                raise StartupError(bind_failure(host, listener.port, e, name=listener.name)) from e
            bound = BoundListener(listener.name, host, socks[0].getsockname()[1],
                                  getattr(listener, "security_protocol", "PLAINTEXT"))
            if self.request_metrics is not None:
                self.request_metrics.listener(bound.name)  # its connection count exists (0) from the start
            self._listening.extend((sock, bound) for sock in socks)
            self.bound.append(bound)
        return self.bound

    async def start_serving(self, internal_handlers: dict[int, Callable[[dict], Awaitable[dict]]] | None = None
                            ) -> None:
        """Accept connections; ``internal_handlers`` answer tierlog's inter-broker requests (a cluster)."""
        if internal_handlers:
            self.internal_handlers = internal_handlers
        loop = asyncio.get_running_loop()
        for sock, bound in self._listening:
            self._acceptors.append(loop.create_task(self._accept_loop(sock, bound)))

    async def start(self, listeners) -> list[BoundListener]:
        """Bind and serve at once."""
        bound = await self.bind(listeners)
        await self.start_serving()
        return bound

    async def stop(self) -> None:
        await stop_tasks(*self._acceptors)
        self._acceptors.clear()
        for sock, _ in self._listening:
            sock.close()
        self._listening.clear()
        self._stopping = True
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            # Python 3.11's wait_for can lose a cancellation that races its inner read (a client sending
            # without pause): such a connection still ends, at its next read, once its transport is closed.
            _, pending = await asyncio.wait(set(self._connections), timeout=1.0)
            for writer in list(self._writers.values()):
                writer.transport.abort()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        self._warn.flush()

    # ------------------------------------------------------------------ accepting

    async def _accept_loop(self, sock: socket.socket, listener: BoundListener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as e:
                # Out of descriptors (EMFILE, ENFILE) or memory: the pending connection stays in the
                # backlog; try again after a pause instead of spinning on a socket that stays readable.
                if e.errno in _RESOURCE_ERRNOS:
                    self._warn.warning(("accept", e.errno), "Cannot accept connections on %s: %s; accepting "
                                       "again in %d ms", listener, e, ACCEPT_BACKOFF_S * 1000)
                else:
                    self._warn.warning(("accept", e.errno), "Accepting a connection on %s failed: %s",
                                       listener, e)
                await asyncio.sleep(ACCEPT_BACKOFF_S)
                continue
            try:
                self._admit(conn, addr, listener)
            except Exception:  # noqa: BLE001 - one connection's failure must never stop the listener
                conn.close()
                log.exception("Closed a new connection from %s to %s after an unexpected error", addr, listener)

    def _admit(self, conn: socket.socket, addr, listener: BoundListener) -> None:
        ip = addr[0] if isinstance(addr, tuple) else str(addr)
        fd = conn.fileno()
        if self._fd_ceiling is not None and fd >= self._fd_ceiling:
            # Descriptors are handed out lowest first: this one means at least fd + 1 are open.
            conn.close()
            self._warn.warning(("refused", "fds"), "Closed a new connection from %s to %s: at least %d descriptors "
                               "are open, the last %d of the open file limit (ulimit -n) are kept for storage",
                               ip, listener.name, fd + 1, fd_reserve(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
            return
        refused = self.quotas.try_inc(ip)
        if refused is not None:
            conn.close()  # Kafka closes it at once
            self._warn.warning(("refused", refused[0]), "Closed a new connection from %s to %s: %s", ip,
                               listener.name, refused[1])
            return
        task = asyncio.get_running_loop().create_task(self._connection(conn, addr, ip, listener.name))
        self._connections.add(task)
        if self.request_metrics is not None:
            open_, created, _ = self.request_metrics.listener(listener.name)
            open_.inc()
            created.inc()

    async def _connection(self, conn: socket.socket | None, peer, ip: str, listener: str) -> None:
        task = asyncio.current_task()
        writer = None
        tls = self.tls.get(listener) if self.tls else None
        sasl_listener = self.sasl.get(listener) if self.sasl else None
        sasl = None
        try:
            if tls is None:
                reader, writer = await asyncio.open_connection(sock=conn, limit=READ_CHUNK)
                session = Session(principal=ANONYMOUS, client_host=ip, listener=listener, peer=peer_text(peer))
            else:
                # From here the TLS transport owns the socket, also when the handshake fails: it closes it
                # once its alert is sent. Closing it here too would free the descriptor number while the
                # transport still watches it, and the next connection given that number would never be read.
                sock, conn = conn, None
                opened = await self._tls_handshake(sock, peer, ip, listener, tls)
                if opened is None:
                    return
                reader, writer, session = opened
            self._writers[task] = writer
            if sasl_listener is not None:
                # Nothing but ApiVersions and the SASL exchange until the client is authenticated.
                sasl = SaslConnection(sasl_listener, peer, ip, tls is not None, self._warn)
                if not await self._authenticate(reader, writer, peer, ip, listener, sasl):
                    return
                session = sasl.session()
            await self._serve(reader, writer, peer, session, tls is not None, sasl)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a connection's failure must never reach the broker
            log.exception("Closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(task)
            self._writers.pop(task, None)
            self.quotas.dec(ip)
            if self.request_metrics is not None:
                open_, _, closed = self.request_metrics.listener(listener)
                open_.dec()
                closed.inc()
            if writer is not None:
                writer.close()
            elif conn is not None:
                conn.close()

    async def _tls_handshake(self, conn: socket.socket, peer, ip: str, listener: str,
                             tls: TlsListener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Session] | None:
        """The TLS handshake of a new connection on an SSL listener, with its listener's current context (a
        reloaded keystore applies from the next connection on); None when it failed: the client is told by
        TLS, the failure is logged (once per kind and interval, with the address) and the broker serves on."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
        protocol = _TlsStreamProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=tls.current_context(), ssl_handshake_timeout=self.idle_timeout_s or 60.0)
        except (OSError, EOFError) as e:  # ssl.SSLError is an OSError; so is a timed-out or cut handshake
            why = getattr(e, "reason", None) or type(e).__name__
            self._warn.warning(("tls", listener, str(why)), "TLS handshake with %s on listener %s failed: %s",
                               ip, listener, e)
            return None  # the transport closes the socket (see _connection)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            principal = tls.principal(transport.get_extra_info("ssl_object"))
        except (NoMatchingRule, ValueError) as e:
            self._warn.warning(("tls", listener, "principal"), "Closing TLS connection from %s on listener %s: %s",
                               ip, listener, e)
            writer.close()
            return None
        return reader, writer, Session(principal=principal, client_host=ip, listener=listener, security_protocol="SSL",
                                       peer=peer_text(peer))

    def _freed_memory(self, size: int) -> None:
        """``size`` bytes of request memory were freed: once enough has been, give free pages back to the
        system (soon, once for many closes), so half-sent frames do not leave the broker's RSS high."""
        if _malloc_trim is None:
            return
        self._freed += size
        if self._freed >= TRIM_AFTER_BYTES and not self._trim_scheduled:
            self._trim_scheduled = True
            loop = asyncio.get_running_loop()
            loop.call_later(max(0.05, self._last_trim + TRIM_INTERVAL_S - loop.time()), self._trim)

    def _trim(self) -> None:
        self._trim_scheduled = False
        self._freed = 0
        self._last_trim = asyncio.get_running_loop().time()
        _malloc_trim(0)

    # ------------------------------------------------------------------ one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer, session: Session,
                     tls: bool = False, sasl: SaslConnection | None = None) -> None:
        """Serve an accepted (and authenticated) connection. ``session`` is who sends its requests: each carries
        it as ``ctx.session`` for the authorizer, quotas and the handlers (a KIP-368 re-authentication keeps it:
        the principal cannot change)."""
        decoder = FrameDecoder(self.max_frame_bytes)
        pool = self.pool
        listener = session.listener
        held = 0  # bytes this connection holds in the pool: requests read and not answered, the frame being read
        idle = _IdleWatch(self.idle_timeout_s) if self.idle_timeout_s is not None else None
        answers = _AnswerQueue(writer)
        try:
            while not self._stopping:
                if pool is not None:
                    # Kafka reserves a frame's announced size before reading its body, and reads nothing while
                    # the pool is exhausted: the connection waits (backpressure, the socket's buffers fill).
                    # A small frame is still read from the pool's reserve (MemoryPool.small_reserve).
                    pending = decoder.pending_frame_size
                    if pending is not None and pending > held:
                        await pool.reserve(pending - held)
                        held = pending
                    elif pending is None:
                        await pool.wait_to_read()
                if idle is None:
                    data = await reader.read(READ_CHUNK)
                else:
                    idle.reading()
                    try:
                        data = await reader.read(READ_CHUNK)
                    except asyncio.CancelledError:
                        if not idle.expired():
                            raise
                        log.info("Closing idle connection from %s (connections.max.idle.ms)", peer)
                        return
                    idle.read()
                if not data:
                    return
                try:
                    frames = decoder.feed(data)
                except InvalidFrameError as e:  # FrameTooLargeError's text names socket.request.max.bytes
                    self._warn.warning(("frame", type(e).__name__), "Closing connection from %s: %s", peer, e)
                    return
                if frames:
                    received = time.monotonic()  # the requests' last bytes are read: their clocks start
                if pool is not None:
                    in_memory = decoder.buffered + sum(len(f) for f in frames)
                    if in_memory > held:  # frames begun and ended in this chunk: read already, counted
                        pool.force(in_memory - held)
                        held = in_memory
                for frame in frames:
                    if sasl is not None and sasl.expires_at is not None and not self._session_alive(sasl, frame):
                        return
                    try:
                        out, timers, mute_ms = await self._handle(frame, peer, received, listener, session, sasl)
                    except _CloseConnection:
                        return
                    if out is not None:
                        if isinstance(out, bytes):
                            answers.add(out)
                        else:
                            answers.flush()
                            await self._send_parts(writer, out, tls)
                            await writer.drain()
                    if sasl is not None and sasl.state == FAILED:  # a failed re-authentication: answered, closed
                        return
                    if timers:
                        total_ms = (time.monotonic() - received) * 1000
                        for m in timers:
                            m.total_time.observe(total_ms)
                    size = len(frame)
                    if pool is not None:  # answered: its bytes go back to the pool
                        held -= size
                        pool.release(size)
                    if size >= TRIM_FRAME_BYTES:
                        frame = out = None
                        self._freed_memory(size)
                    if mute_ms:
                        # KIP-219: a throttled client got its answer at once; nothing more of its requests is
                        # read or handled until the throttle time has passed (Kafka mutes the channel). The
                        # request's total time and its memory were counted and released before.
                        answers.flush()
                        await asyncio.sleep(mute_ms / 1000)
                if frames:
                    answers.flush()
                    await writer.drain()  # a client that does not read its answers stops being read
                if pool is not None:
                    pending = decoder.pending_frame_size
                    keep = min(held, pending if pending is not None else decoder.buffered)
                    if held > keep:
                        pool.release(held - keep)
                        held = keep
        finally:
            answers.flush()  # what was answered before a close goes out first
            if idle is not None:
                idle.stop()
            if pool is not None:
                pool.release(held)
            if decoder.buffered >= TRIM_FRAME_BYTES:  # a half-received frame, dropped with the connection
                self._freed_memory(decoder.buffered)

    def _session_alive(self, sasl: SaslConnection, frame: bytes) -> bool:
        """KIP-368: a connection whose session ended without re-authenticating is closed at its next request
        (a SaslHandshake starting the re-authentication goes through)."""
        if not sasl.expired(time.monotonic()) or int.from_bytes(frame[:2], "big") == ApiKey.SASL_HANDSHAKE:
            return True
        log.info("Closing connection from %s (%s) on listener %s: its SASL session expired without "
                 "re-authentication (connections.max.reauth.ms)", sasl.peer, sasl.principal, sasl.listener.name)
        return False

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer, ip: str,
                            listener: str, sasl: SaslConnection) -> bool:
        """Serve a new SASL connection until it is authenticated (True) or must be closed (False). Frames are
        read here, each checked against sasl.server.max.receive.size before its body is read, as Kafka's
        SaslServerAuthenticator bounds what an unauthenticated client can make the broker hold."""
        limit = sasl.listener.max_receive
        while True:
            try:
                head = await asyncio.wait_for(reader.readexactly(4), self.idle_timeout_s)
            except TimeoutError:
                log.info("Closing idle connection from %s during SASL authentication (connections.max.idle.ms)",
                         peer)
                return False
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    self._warn.warning(("sasl", listener, "truncated"), "Closing connection from %s on listener "
                                       "%s: truncated SASL frame", ip, listener)
                return False
            size = int.from_bytes(head, "big", signed=True)
            if size < 0 or size > limit:
                self._warn.warning(("sasl", listener, "size"), "Closing connection from %s on listener %s: a frame "
                                   "of %d bytes before authentication (sasl.server.max.receive.size is %d)", ip,
                                   listener, size, limit)
                return False
            try:
                frame = await asyncio.wait_for(reader.readexactly(size), self.idle_timeout_s)
            except (TimeoutError, asyncio.IncompleteReadError):
                self._warn.warning(("sasl", listener, "truncated"), "Closing connection from %s on listener %s: "
                                   "truncated SASL frame", ip, listener)
                return False
            if sasl.state == RAW_TOKENS:  # SaslHandshake v0: the tokens themselves, length-prefixed
                try:
                    out = sasl.evaluate(frame)
                except SaslFailure:
                    return False  # Kafka closes without an answer: v0 has no way to carry one
                writer.write(len(out).to_bytes(4, "big") + out)
                await writer.drain()
                if sasl.state == COMPLETE:
                    return True
                continue
            api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
            allowed = (ApiKey.SASL_AUTHENTICATE,) if sasl.state == AUTHENTICATE else (ApiKey.API_VERSIONS,
                                                                                        ApiKey.SASL_HANDSHAKE)
            if api_key not in allowed:
                if sasl.state == AUTHENTICATE:  # Kafka answers ILLEGAL_SASL_STATE here, then closes
                    await self._illegal_state(frame, writer, peer)
                name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
                self._warn.warning(("sasl", listener, "state"), "Closing connection from %s on listener %s: "
                                   "request %s before SASL authentication completed", ip, listener, name)
                return False
            try:
                out, _, _ = await self._handle(frame, peer, time.monotonic(), listener, sasl=sasl)
            except _CloseConnection:
                return False
            if out is not None:
                writer.write(out) if isinstance(out, bytes) else await self._send_parts(writer, out, False)
                await writer.drain()
            if sasl.state == FAILED:
                return False  # answered (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED), then closed
            if sasl.state == COMPLETE:
                return True

    async def _illegal_state(self, frame: bytes, writer: asyncio.StreamWriter, peer) -> None:
        try:
            ctx = parse_request(frame)
        except RequestParseError:
            return
        error = IllegalSaslStateError(f"Unexpected Kafka request of type {ctx.api_name} during SASL authentication.")
        if ctx.api_key == ApiKey.API_VERSIONS:  # Kafka's error answer at the request's version, no API listed
            response = build_response(ctx, {"error_code": error.code, "api_keys": []})
        else:
            response = self._error_response(ctx, error)
        if response is not None:
            writer.write(encode_response(ctx, response))
            await writer.drain()

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list, tls: bool = False) -> None:
        """Write a response whose records are file regions: sendfile where the loop can, else pread; through TLS,
        whose bytes are encrypted in process, the parts are read and written in groups (:func:`_write_gathered`).

        Region descriptors are duplicated before the first await, so a segment deleted meanwhile
        (its descriptor closed and the number reused) can never make us send another file's bytes."""
        dups = []
        try:
            for p in parts:
                try:
                    dups.append((None, p) if isinstance(p, (bytes, memoryview)) else (p.open(), p))
                except FileNotFoundError:  # a remote object deleted (expired) since the read chose it
                    log.warning("%s was deleted before the response holding it was sent; closing the connection",
                                p.path)
                    raise ConnectionError(p.path) from None
                except OSError as e:  # out of descriptors (EMFILE, ENFILE): said, never only at debug level
                    self._warn.log(("open", e.errno), logging.ERROR, "Cannot open %s to answer %s: %s; closing "
                                   "the connection", p.path, writer.get_extra_info("peername"), e)
                    raise ConnectionError(p.path) from None
            if tls:
                _write_gathered(writer, dups)
                return
            for fd, part in dups:
                if fd is None:
                    writer.write(part)
                    continue
                if self._sendfile:
                    await writer.drain()
                    with open(fd, "rb", closefd=False) as f:
                        try:
                            await asyncio.get_running_loop().sendfile(writer.transport, f, part.position,
                                                                      part.length)
                            continue
                        except NotImplementedError:  # uvloop: no loop.sendfile
                            self._sendfile = False
                await _send_region(writer, fd, part)
        finally:
            for fd, _ in dups:
                if fd is not None:
                    os.close(fd)

    async def _handle_internal(self, frame: bytes, peer) -> bytes:
        """One of tierlog's inter-broker requests (:mod:`tierlog.protocol.internal`): a malformed or unknown one
        closes the connection, as an unknown Kafka API does; a failing handler answers UNKNOWN_SERVER_ERROR."""
        try:
            api_key, corr, body = internal.parse_internal_request(frame)
        except ValueError as e:
            log.warning("Closing connection from %s: bad inter-broker request: %s", peer, e)
            raise _CloseConnection from e
        handler = self.internal_handlers.get(api_key)
        if handler is None:
            log.warning("Closing connection from %s: api key %d is not handled", peer, api_key)
            raise _CloseConnection
        try:
            answer = await handler(body)
        except KafkaError as e:
            answer = {"error_code": e.code, "error_message": str(e)}
        except Exception as e:
            log.exception("Inter-broker request %d from %s failed", api_key, peer)
            answer = {"error_code": KafkaError.code, "error_message": f"{type(e).__name__}: {e}"}
        return internal.encode_internal_response(corr, answer)

    async def _handle(self, frame: bytes, peer, received: float,
                      listener: str = "", session: Session | None = None, sasl: SaslConnection | None = None
                      ) -> tuple[bytes | list | None, tuple, int]:
        """The answer to one frame (None: no answer), the request metrics to time it with and how long to mute
        the connection after answering (a client quota's throttle time, ms). The request's context carries
        ``session`` (None while a SASL connection authenticates) and ``sasl``, its connection's."""
        # A big frame (tierlog.protocol.offload) is parsed and its answer encoded in a worker thread,
        # with the garbage collector paused, so that the loop keeps serving the other connections.
        big = len(frame) >= offload.BIG_FRAME_BYTES
        metrics = self.request_metrics
        if self.internal_handlers and internal.is_internal(frame):
            if listener != self.inter_broker_listener:  # brokers only: never from a client's listener
                log.warning("Closing connection from %s: inter-broker request on listener %s", peer, listener)
                raise _CloseConnection
            return await self._handle_internal(frame, peer), (), 0
        with offload.gc_paused(big):
            try:
                ctx = await offload.parse(frame)
                ctx.session = session
                ctx.sasl = sasl
                spec = self.registry.for_request(ctx)
            except RequestParseError as e:
                fallback = fallback_response_frame(e, self.registry)
                if fallback is not None:
                    return fallback, (), 0
                log.warning("Closing connection from %s: %s", peer, e)
                raise _CloseConnection from e
            started = time.monotonic()
            timers = ()
            if metrics is not None:  # children resolved once per API: a lookup and an add here
                timers = metrics.for_request(ctx)
                queue_ms = (started - received) * 1000
                for m in timers:
                    m.requests.inc()
                    m.queue_time.observe(queue_ms)
            quotas = self.client_quotas
            timing = None
            if quotas is not None and quotas.request.enabled:  # the handler's waits are not its request time
                timing = ctx.timing = RequestTiming()
            try:
                response = await spec.handler(ctx)
            except KafkaError as e:
                if metrics is not None:
                    metrics.request_error(ctx, e.code)
                response = self._error_response(ctx, e)
                if response is None:
                    log.warning("Closing connection from %s: %s v%d failed: %s", peer, ctx.api_name, ctx.api_version,
                                e)
                    raise _CloseConnection from e
            except Exception as e:
                log.exception("%s v%d from %s failed", ctx.api_name, ctx.api_version, peer)
                if metrics is not None:
                    metrics.request_error(ctx, KafkaError.code)
                response = self._error_response(ctx, KafkaError(f"{type(e).__name__}: {e}"))
                if response is None:
                    raise _CloseConnection from e
            else:
                # Produce and Fetch answers (already bytes) were counted by their handlers.
                if metrics is not None and response is not None and not isinstance(response, offload.EncodedResponse):
                    if big:  # the answer to a huge request may hold millions of entries: walked off the loop
                        asyncio.get_running_loop().run_in_executor(None, metrics.count_response_errors, ctx,
                                                                   response)
                    else:
                        metrics.count_response_errors(ctx, response)
            mute = ctx.throttle_ms
            if timing is not None and quotas.request.enabled:  # no request quota configured: this one check
                response, mute = self._request_quota(quotas, ctx, started + timing.purgatory_s, response, mute)
            if response is None:
                return None, timers, mute  # acks=0 produce: no response
            elapsed = time.monotonic() - started
            if elapsed > 5:
                log.debug("%s v%d took %.1f s", ctx.api_name, ctx.api_version, elapsed)
            if ctx.api_key == ApiKey.FETCH and not isinstance(response, offload.EncodedResponse):
                return encode_response_parts(ctx, response), timers, mute
            out = await offload.encode(ctx, response, big)
            if big:  # the request's big arrays are freed in slices, off the loop
                asyncio.get_running_loop().run_in_executor(None, offload.dismantle, ctx.request)
            return await offload.sendable(out), timers, mute  # a big frame: FrameFile parts for sendfile

    @staticmethod
    def _request_quota(quotas: ClientQuotas, ctx, started: float, response, mute: int):
        """Kafka's request quota: the time the request took, as a percentage of a second, against the client's
        ``request_percentage``; the answer carries the larger throttle (answers already bytes keep theirs)."""
        if ctx.api_key in REQUEST_QUOTA_EXEMPT or (ctx.api_key == ApiKey.FETCH and fetch_replica_id(ctx.request) >= 0):
            return response, mute  # brokers' own requests are never throttled (Kafka's cluster actions)
        spent_ns = (time.monotonic() - started) * 1e9
        throttle = quotas.request.record_and_get_throttle_time_ms(
            quota_user(ctx), ctx.client_id or "", spent_ns * NANOS_TO_PERCENTAGE_PER_SECOND)
        if throttle > mute:
            mute = throttle
            if response is not None and dataclasses.is_dataclass(response) and hasattr(response, "throttle_time"):
                response = dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle))
        return response, mute
