"""A connection's reads and writes below the request loop: answers of one read written together
(:class:`_AnswerQueue`), the idle timeout of reads (:class:`_IdleWatch`), TLS decryption into a buffer
(:class:`_TlsStreamProtocol`), and a response's file regions sent with ``os.sendfile`` or, through TLS, read
and written in groups (:func:`_send_region`, :func:`_write_gathered`).
"""

from __future__ import annotations

import asyncio
import os
import threading

READ_CHUNK = 256 * 1024
#: Through TLS, the most bytes of one response's parts gathered into one write (one send() of their encryption).
TLS_WRITE_BYTES = 1024 * 1024


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
