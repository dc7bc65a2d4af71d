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
made once, set in its task's context (``CURRENT_SESSION``) and carried by each of its requests (``ctx.session``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import dataclasses
import datetime
import errno
import logging
import os
import resource
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tierlog.config.definitions import parse_connection_overrides
from tierlog.errors import IllegalSaslStateError, InvalidConfigError, KafkaError, StartupError
from tierlog.logs import RepeatLimiter
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import (
    ApiKey,
    FrameDecoder,
    HandlerRegistry,
    InvalidFrameError,
    RequestContext,
    RequestParseError,
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
from tierlog.server.network.listener_security import CURRENT_SESSION, NoMatchingRule, TlsListener
from tierlog.server.network.sasl_authenticator import (
    AUTHENTICATE,
    COMPLETE,
    CURRENT_SASL,
    FAILED,
    RAW_TOKENS,
    SaslConnection,
    SaslListener,
)
from tierlog.server.quotas.client_quota import NANOS_TO_PERCENTAGE_PER_SECOND, PURGATORY_WAIT, ClientQuotas, quota_user
from tierlog.tasks import stop_tasks

#: The socket server's logger: every module of this package logs as ``tierlog.server.network``.
log = logging.getLogger(__package__)

READ_CHUNK = 256 * 1024
#: Through TLS, the most bytes of one response's parts gathered into one write (one send() of their encryption).
TLS_WRITE_BYTES = 1024 * 1024
LISTEN_BACKLOG = 100  # asyncio's default
#: How long a listener stops accepting after an accept failed for want of descriptors or memory.
ACCEPT_BACKOFF_S = 0.1
#: Requests brokers send each other, which Kafka exempts from the request quota (cluster actions).
REQUEST_QUOTA_EXEMPT = frozenset(k for k in (
    getattr(ApiKey, name, None) for name in ("LEADER_AND_ISR", "STOP_REPLICA", "UPDATE_METADATA", "CONTROLLED_SHUTDOWN",
                                             "WRITE_TXN_MARKERS", "ENVELOPE", "ALTER_PARTITION")) if k is not None)
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

#: Freed request memory (half-sent frames of closed connections, big requests answered) after which the C
#: allocator is asked to give free pages back to the system: glibc keeps freed heap memory otherwise.
TRIM_AFTER_BYTES = 32 * 1024 * 1024
TRIM_FRAME_BYTES = 1024 * 1024  # smaller requests are left to the allocator
TRIM_INTERVAL_S = 1.0  # at most one trim a second


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_malloc_trim()

MEMORY_POOL_USED = "kafka_network_socketserver_memorypoolused"
MEMORY_POOL_AVAILABLE = "kafka_network_socketserver_memorypoolavailable"


def fd_reserve(soft_limit: int) -> int:
    """Descriptors kept free of connections for storage and the broker's own files: a tenth of the open file
    limit, at least 16."""
    return max(16, soft_limit // 10)


def _fd_ceiling() -> int | None:
    """The lowest descriptor number a connection may not have, or None without a finite limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - fd_reserve(soft)


@dataclass(frozen=True, slots=True)
class BoundListener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


class _CloseConnection(Exception):
    pass


Invoker = Callable[[RequestContext], Awaitable[object | None]]


class MemoryPool:
    """Kafka's ``SimpleMemoryPool`` in non-strict mode, for bytes of requests: a reservation is granted
    while the pool has anything left (so it may overshoot by one reservation), else the caller waits until
    enough is released. Bytes already in memory are counted with :meth:`force`, which never waits."""

    def __init__(self, limit: int, metrics: MetricsRegistry | None = None):
        self.limit = limit
        self.used = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._used_gauge = self._available_gauge = None
        if metrics is not None:  # Kafka's kafka.network:type=SocketServer,name=MemoryPoolUsed / MemoryPoolAvailable
            self._used_gauge = metrics.gauge(MEMORY_POOL_USED, "Bytes of requests held in the memory pool "
                                             "(queued.max.request.bytes)")
            self._available_gauge = metrics.gauge(MEMORY_POOL_AVAILABLE, "Bytes left in the memory pool "
                                                  "(queued.max.request.bytes); negative when it overshoots")
            self._changed()

    def _changed(self) -> None:
        if self._used_gauge is not None:
            self._used_gauge.set(self.used)
            self._available_gauge.set(self.limit - self.used)

    @property
    def available(self) -> int:
        return self.limit - self.used

    def try_reserve(self, size: int) -> bool:
        if self.used < self.limit and not self._waiters:
            self.used += size
            self._changed()
            return True
        return False

    async def reserve(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting (first come, first served) while the pool is exhausted."""
        if self.try_reserve(size):
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        try:
            while True:
                await fut
                # Woken at the head of the queue: nobody else reserves while someone waits.
                if self.used < self.limit:
                    self._waiters.popleft()
                    self.used += size
                    self._changed()
                    self._wake()  # the next one may fit too
                    return
                fut = loop.create_future()  # forced bytes took the room meanwhile: wait again, still first
                self._waiters[0] = fut
        except BaseException:
            self._discard(fut)
            raise

    def force(self, size: int) -> None:
        self.used += size
        self._changed()

    def release(self, size: int) -> None:
        if size:
            self.used -= size
            self._changed()
            self._wake()

    def _wake(self) -> None:
        if self.used < self.limit and self._waiters and not self._waiters[0].done():
            self._waiters[0].set_result(None)

    def _discard(self, fut: asyncio.Future) -> None:
        try:
            first = self._waiters[0] is fut
            self._waiters.remove(fut)
        except (ValueError, IndexError):
            return
        if first:
            self._wake()


class ConnectionQuotas:
    """Kafka's ``ConnectionQuotas``: connections counted over the broker and per IP address, with the
    limits of ``max.connections``, ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
    read from ``config()`` (dynamic changes apply to the next connection)."""

    def __init__(self, config: Callable[[], Mapping]):
        self._config = config
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}
        self.overrides_for(config())  # an unresolvable host name fails the start

    def overrides_for(self, cfg: Mapping) -> dict[str, int]:
        """The overrides by IP address (host names resolved, as Kafka's ``InetAddress.getByName``)."""
        text = cfg["max.connections.per.ip.overrides"] or ""
        if text != self._overrides_text:
            resolved: dict[str, int] = {}
            for host, count in parse_connection_overrides(text).items():
                try:
                    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                except OSError as e:
                    raise InvalidConfigError(f"Invalid value {text} for configuration max.connections.per.ip."
                                             f"overrides: cannot resolve {host}: {e}") from None
                for info in infos:
                    resolved[info[4][0]] = count
            self._overrides_text, self._overrides = text, resolved
        return self._overrides

    def limit_for(self, ip: str, cfg: Mapping) -> int:
        try:
            overrides = self.overrides_for(cfg)
        except InvalidConfigError as e:  # a dynamic change naming a host that does not resolve (any more)
            log.error("%s; keeping the previous overrides", e.message)
            overrides = self._overrides
        limit = overrides.get(ip)
        return cfg["max.connections.per.ip"] if limit is None else limit

    def try_inc(self, ip: str) -> tuple[str, str] | None:
        """Count a new connection from ``ip``; or (the limit, why) it is refused, nothing counted."""
        cfg = self._config()
        broker_limit = cfg["max.connections"]
        if self.total >= broker_limit:
            return "max.connections", f"the broker has {self.total} connections (max.connections={broker_limit})"
        count = self.per_ip.get(ip, 0)
        ip_limit = self.limit_for(ip, cfg)
        if count >= ip_limit:
            return "max.connections.per.ip", (f"{ip} has {count} connections (max.connections.per.ip or its "
                                              f"override: {ip_limit})")
        self.total += 1
        self.per_ip[ip] = count + 1
        return None

    def dec(self, ip: str) -> None:
        self.total -= 1
        count = self.per_ip.get(ip, 0) - 1
        if count > 0:
            self.per_ip[ip] = count
        else:
            self.per_ip.pop(ip, None)


_NO_LIMITS: Mapping = {"max.connections": 2**31 - 1, "max.connections.per.ip": 2**31 - 1,
                       "max.connections.per.ip.overrides": ""}


def _listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of ``host`` (as asyncio's
    ``create_server``: SO_REUSEADDR, IPv6 sockets v6-only); port 0 picks one port for all of them."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def bind_failure(host: str, port: int, e: OSError, *, setting: str = "listeners", name: str | None = None) -> str:
    """One line for a socket that cannot bind: what, why and what to do (``setting`` is the one to change;
    ``name`` the listener's)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if name:
        where += f" (listener {name})"
    if isinstance(e, socket.gaierror):
        return f"cannot listen on {where}: unknown host {host!r} ({e.strerror}); fix the host in {setting}"
    why = os.strerror(e.errno).lower() if e.errno else str(e)  # asyncio's strerror repeats the address
    if e.errno == errno.EADDRINUSE:
        todo = f"stop the other process or change {setting}"
    elif e.errno == errno.EACCES:
        todo = f"use a port above 1023 in {setting} or let the process bind it (CAP_NET_BIND_SERVICE)"
    elif e.errno == errno.EADDRNOTAVAIL:
        todo = f"this host has no such address; change the host in {setting}"
    else:
        todo = f"check {setting}"
    return f"cannot listen on {where}: {why}; {todo}"


class _AnswerQueue:
    """A connection's answers to the requests of one read, written together: one send (one wake-up of the
    client, one trip through the loopback stack) for the several requests a pipelining producer sends at once.
    An answer never waits for a later request's handler: the first answer queued schedules a flush for the
    loop's next turn, which comes as soon as a handler waits for anything (acks, a long poll, a disk thread);
    the serve loop flushes after the last request of the read."""

    __slots__ = ("_writer", "_parts", "_scheduled")

    def __init__(self, writer: asyncio.StreamWriter):
        self._writer = writer
        self._parts: list[bytes] = []
        self._scheduled: asyncio.Handle | None = None

    def add(self, answer: bytes) -> None:
        self._parts.append(answer)
        if self._scheduled is None:
            self._scheduled = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> bool:
        """Write what is queued; whether there was anything."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        parts = self._parts
        if not parts:
            return False
        self._writer.write(parts[0] if len(parts) == 1 else b"".join(parts))
        parts.clear()
        return True


class _IdleWatch:
    """``connections.max.idle.ms`` for one connection's reads, with one timer per idle period instead of one
    per read (``asyncio.wait_for`` made a task and a timer for every read: about 20 us, a fifth of a small
    Produce's cost). The timer checks when the current read began; a read waiting for the whole timeout gets
    its task cancelled, which :meth:`expired` tells apart from any other cancellation."""

    __slots__ = ("_loop", "_timeout", "_task", "_since", "_handle", "_expired")

    def __init__(self, timeout_s: float):
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout_s
        self._task = asyncio.current_task()
        self._since: float | None = None  # when the read under way began; None between reads
        self._expired = False
        self._handle = self._loop.call_at(self._loop.time() + timeout_s, self._check)

    def reading(self) -> None:
        self._since = self._loop.time()

    def read(self) -> None:
        self._since = None

    def _check(self) -> None:
        now = self._loop.time()
        since = self._since
        if since is not None and now - since >= self._timeout:
            self._expired = True
            self._task.cancel()
            return
        self._handle = self._loop.call_at((now if since is None else since) + self._timeout, self._check)

    def expired(self) -> bool:
        """Whether the cancellation just caught is this watch's (then the task is no longer cancelling)."""
        if not self._expired:
            return False
        self._task.uncancel()
        return True

    def stop(self) -> None:
        self._handle.cancel()


_tls_scratch = threading.local()


class _TlsStreamProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """The stream protocol of a TLS connection, as a BufferedProtocol: asyncio's TLS layer then decrypts straight
    into a buffer (one per thread, that is per event loop: it is handed over within one call) instead of making a
    bytes object of up to 256 KiB per TLS record and joining them; the reader gets the same bytes."""

    def get_buffer(self, sizehint: int) -> memoryview:
        view = getattr(_tls_scratch, "view", None)
        if view is None:
            view = _tls_scratch.view = memoryview(bytearray(READ_CHUNK))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_tls_scratch.view[:nbytes])  # StreamReader.feed_data copies it into its buffer


#: A file region at least this big is sent with os.sendfile on a loop without loop.sendfile (uvloop): below
#: it, a read and a write cost less than the extra turn of the loop that empties the transport first.
DIRECT_SENDFILE_BYTES = 64 * 1024


async def _send_region(writer: asyncio.StreamWriter, fd: int, part) -> None:
    """Send a file region on a loop without ``loop.sendfile`` (uvloop): from the page cache to the socket
    with ``os.sendfile`` as far as the socket takes it, the rest read and written through the transport.
    The direct send waits until the transport has nothing queued (uvloop writes at the end of a turn of
    the loop), else its bytes would overtake the answer's first part."""
    transport = writer.transport
    offset, left = part.position, part.length
    if left >= DIRECT_SENDFILE_BYTES:
        if transport.get_write_buffer_size():
            await asyncio.sleep(0)  # the loop writes what is queued
        sock = transport.get_extra_info("socket")
        if sock is not None and not transport.get_write_buffer_size() and not transport.is_closing():
            try:
                while left:
                    sent = os.sendfile(sock.fileno(), fd, offset, left)
                    if not sent:
                        break  # the file ends early: the read below says so
                    offset += sent
                    left -= sent
            except (BlockingIOError, InterruptedError):
                pass  # the socket is full: the transport queues the rest
    if left:
        data = os.pread(fd, left, offset)
        if len(data) != left:
            raise ConnectionError(f"short read of {part.path}; closing the connection")
        writer.write(data)


def _write_gathered(writer: asyncio.StreamWriter, dups: list) -> None:
    """A response's parts (``(None, bytes)`` or ``(descriptor, region)``) written through TLS in groups of up to
    :data:`TLS_WRITE_BYTES`, each group with one ``writelines``: asyncio's TLS transport then encrypts the group's
    pieces and sends the result with one send(), where a write per part cost a pass through the TLS protocol
    and a send() each (a Fetch answer has a small header before and after each partition's records)."""
    group: list = []
    size = 0
    for fd, part in dups:
        if fd is None:
            data = part
        else:
            data = os.pread(fd, part.length, part.position)
            if len(data) != part.length:
                raise ConnectionError(f"short read of {part.path}; closing the connection")
        n = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if not n:
            continue  # nothing to encrypt (the transport's write skips empty data too)
        if group and size + n > TLS_WRITE_BYTES:
            writer.writelines(group)
            group, size = [], 0
        group.append(data)
        size += n
    if group:
        writer.writelines(group)


class SocketServer:
    def __init__(self, registry: HandlerRegistry, *, max_frame_bytes: int, idle_timeout_ms: int,
                 error_response: Callable[[RequestContext, KafkaError], object | None],
                 config: Callable[[], Mapping] | None = None, queued_max_request_bytes: int = -1,
                 metrics: MetricsRegistry | None = None):
        """``config()`` gives the current connection limits (the broker's effective configuration);
        ``queued_max_request_bytes`` > 0 bounds the bytes of requests held (Kafka's MemoryPool)."""
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_ms / 1000 if idle_timeout_ms > 0 else None
        self._error_response = error_response
        self.quotas = ConnectionQuotas(config if config is not None else (lambda: _NO_LIMITS))
        self.pool = MemoryPool(queued_max_request_bytes, metrics) if queued_max_request_bytes > 0 else None
        #: Requests, errors, times and connections (Kafka's RequestMetrics and socket-server-metrics).
        self.request_metrics = RequestMetrics(metrics) if metrics is not None else None
        #: the broker's client quotas (request_percentage, and the mute of throttled connections), or None
        self.client_quotas: ClientQuotas | None = None
        # tierlog's inter-broker requests (api key -> handler of the JSON body), set in a cluster only
        self.internal_handlers: dict[int, Callable[[dict], Awaitable[dict]]] = {}
        self.inter_broker_listener = ""  # the listener they are accepted on
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
        #: The TLS side of each SSL listener by name (set by the broker; PLAINTEXT listeners have none).
        self.tls: dict[str, TlsListener] = {}
        #: The SASL side of each SASL_PLAINTEXT and SASL_SSL listener by name (set by the broker).
        self.sasl: dict[str, SaslListener] = {}

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

    async def start_serving(self) -> None:
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
                CURRENT_SASL.set(sasl)
                CURRENT_SESSION.set(Session(principal=ANONYMOUS, client_host=ip, listener=listener,
                                            security_protocol=sasl.protocol, peer=sasl.peer))
                if not await self._authenticate(reader, writer, peer, ip, listener, sasl):
                    return
                session = sasl.session()
            # Who is on this connection, for its handlers (they run on this task) and on each of its requests.
            CURRENT_SESSION.set(session)
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
                    pending = decoder.pending_frame_size
                    if pending is not None and pending > held:
                        await pool.reserve(pending - held)
                        held = pending
                    elif pending is None and pool.used >= pool.limit:
                        await pool.reserve(0)
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
                        out, timers, mute_ms = await self._handle(frame, peer, received, listener, session)
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
                out, _, _ = await self._handle(frame, peer, time.monotonic(), listener)
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
                      listener: str = "", session: Session | None = None
                      ) -> tuple[bytes | list | None, tuple, int]:
        """The answer to one frame (None: no answer), the request metrics to time it with and how long to mute
        the connection after answering (a client quota's throttle time, ms)."""
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
            waited = None
            if quotas is not None and quotas.request.enabled:  # the handler's waits are not its request time
                waited = [0.0]
                PURGATORY_WAIT.set(waited)
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
            if waited is not None and quotas.request.enabled:  # no request quota configured: this one check
                response, mute = self._request_quota(quotas, ctx, started + waited[0], response, mute)
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
