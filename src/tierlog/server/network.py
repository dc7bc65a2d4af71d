"""The socket server: Kafka framing over asyncio streams, one task per connection.

A connection's requests are handled one after another and answered in order, which is how Kafka
keeps pipelined requests ordered (it mutes a channel until its response is sent). Slow requests
(long-polling fetches, joins) only hold their own connection. Frame sizes are checked against
``socket.request.max.bytes`` before a body is read; a malformed or oversized frame closes that
connection with a log line and never disturbs the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tierlog.errors import KafkaError
from tierlog.protocol import (
    ApiKey,
    FrameDecoder,
    FrameTooLargeError,
    HandlerRegistry,
    InvalidFrameError,
    RequestContext,
    RequestParseError,
    encode_response_parts,
    fallback_response_frame,
)

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024


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


class SocketServer:
    def __init__(self, registry: HandlerRegistry, *, max_frame_bytes: int, idle_timeout_ms: int,
                 error_response: Callable[[RequestContext, KafkaError], object | None]):
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_ms / 1000 if idle_timeout_ms > 0 else None
        self._error_response = error_response
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self.bound: list[BoundListener] = []
        self._sendfile = True  # cleared the first time the event loop turns out not to support it

    async def bind(self, listeners) -> list[BoundListener]:
        """Bind every listener (``Listener`` objects with name/host/port/security_protocol) without
        accepting connections yet: the bound ports are known (listeners on port 0 pick one) before
        the broker is ready to serve."""
        for listener in listeners:
            server = await asyncio.start_server(self._accept, listener.host or "0.0.0.0", listener.port,
                                                reuse_address=True, limit=READ_CHUNK, start_serving=False)
            port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
            self.bound.append(BoundListener(listener.name, listener.host or "0.0.0.0", port,
                                            getattr(listener, "security_protocol", "PLAINTEXT")))
        return self.bound

    async def start_serving(self) -> None:
        for server in self._servers:
            await server.start_serving()

    async def start(self, listeners) -> list[BoundListener]:
        """Bind and serve at once."""
        bound = await self.bind(listeners)
        await self.start_serving()
        return bound

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            await server.wait_closed()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        self._servers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a connection's failure must never reach the broker
            log.exception("Closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer) -> None:
        decoder = FrameDecoder(self.max_frame_bytes)
        while True:
            try:
                if self.idle_timeout_s is None:
                    data = await reader.read(READ_CHUNK)
                else:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK), self.idle_timeout_s)
            except TimeoutError:
                log.info("Closing idle connection from %s (connections.max.idle.ms)", peer)
                return
            if not data:
                return
            try:
                frames = decoder.feed(data)
            except FrameTooLargeError as e:
                log.warning("Closing connection from %s: %s", peer, e)  # e names socket.request.max.bytes
                return
            except InvalidFrameError as e:
                log.warning("Closing connection from %s: %s", peer, e)
                return
            for frame in frames:
                try:
                    out = await self._handle(frame, peer)
                except _CloseConnection:
                    return
                if out is None:
                    continue
                if isinstance(out, bytes):
                    writer.write(out)
                else:
                    await self._send_parts(writer, out)
                await writer.drain()

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list) -> None:
        """Write a response whose records are file regions: sendfile where the loop can, else pread.

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
                        except NotImplementedError:  # uvloop: no sendfile at all
                            self._sendfile = False
                data = os.pread(fd, part.length, part.position)
                if len(data) != part.length:
                    raise ConnectionError(f"short read of {part.path}; closing the connection")
                writer.write(data)
        finally:
            for fd, _ in dups:
                if fd is not None:
                    os.close(fd)

    async def _handle(self, frame: bytes, peer) -> bytes | list | None:
        # A big frame (tierlog.protocol.offload) is parsed and its answer encoded in a worker thread,
        # with the garbage collector paused, so that the loop keeps serving the other connections.
        from tierlog.protocol import offload

        big = len(frame) >= offload.BIG_FRAME_BYTES
        with offload.gc_paused(big):
            try:
                ctx = await offload.parse(frame)
                spec = self.registry.for_request(ctx)
            except RequestParseError as e:
                fallback = fallback_response_frame(e, self.registry)
                if fallback is not None:
                    return fallback
                log.warning("Closing connection from %s: %s", peer, e)
                raise _CloseConnection from e
            started = time.monotonic()
            try:
                response = await spec.handler(ctx)
            except KafkaError as e:
                response = self._error_response(ctx, e)
                if response is None:
                    log.warning("Closing connection from %s: %s v%d failed: %s", peer, ctx.api_name, ctx.api_version,
                                e)
                    raise _CloseConnection from e
            except Exception as e:
                log.exception("%s v%d from %s failed", ctx.api_name, ctx.api_version, peer)
                response = self._error_response(ctx, KafkaError(f"{type(e).__name__}: {e}"))
                if response is None:
                    raise _CloseConnection from e
            if response is None:
                return None  # acks=0 produce: no response
            elapsed = time.monotonic() - started
            if elapsed > 5:
                log.debug("%s v%d took %.1f s", ctx.api_name, ctx.api_version, elapsed)
            if ctx.api_key == ApiKey.FETCH and not isinstance(response, offload.EncodedResponse):
                return encode_response_parts(ctx, response)
            out = await offload.encode(ctx, response, big)
            if big:  # the request's big arrays are freed in slices, off the loop
                asyncio.get_running_loop().run_in_executor(None, offload.dismantle, ctx.request)
            return await offload.sendable(out)  # a big frame: FrameFile parts for the sendfile path
