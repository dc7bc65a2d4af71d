"""Kafka's size-prefixed framing, sans-IO.

Every Kafka request and response on the wire is ``int32 size`` followed by ``size`` bytes. The
network server feeds whatever its socket delivered into a :class:`FrameDecoder` and gets back the
complete frames (the bytes after the size prefix); it writes responses produced by
:func:`encode_frame` (or :func:`size_prefix` plus the payload parts, to avoid a copy).

Limits follow Kafka's ``NetworkReceive``: the size is checked against ``socket.request.max.bytes``
as soon as its four bytes are known, before any of the body is buffered, and a negative size is
invalid. Both raise an :class:`InvalidFrameError`; the broker closes the connection.

Cost: a frame that arrives inside a single chunk is copied once (into the returned ``bytes``); a
frame spread over many chunks is collected as a list of views and joined once when complete, so
a 1 MiB frame in 64 KiB chunks costs one copy of 1 MiB (two when the caller passes mutable
buffers, which must be copied on arrival because the caller may reuse them).

Memory: the body of a large frame (:data:`LARGE_BODY_BYTES` and up) is written, as its bytes arrive,
straight into the ``bytes`` object that will be returned, allocated at its announced size but not filled
(as CPython's own C code builds a bytes object before handing it out). The copies are the same as a join's,
but the socket's chunks are freed as they are copied instead of being kept: thousands of kept chunks among
the reader's transient buffers fragmented the allocator's heap (under load a half-received 90 MiB frame
held up to 130 MiB). A body above the allocator's mmap threshold (32 MiB at most, with glibc) is a mapping
of its own whose pages are touched only as bytes arrive, so a half-sent frame holds what was sent, not its
announced size, and goes back to the system at once when its connection is dropped.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterable

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameDecoder",
    "FrameTooLargeError",
    "InvalidFrameError",
    "encode_frame",
    "encode_frame_parts",
    "size_prefix",
]

DEFAULT_MAX_FRAME_BYTES = 104857600
"""Kafka's default ``socket.request.max.bytes`` (100 MiB)."""

LARGE_BODY_BYTES = 1024 * 1024
"""Bodies this size and up are written into their result as they arrive (see the module's notes on memory);
smaller ones are collected as pieces and joined."""

_SIZE = struct.Struct(">i")
_unpack_size = _SIZE.unpack_from


class InvalidFrameError(ValueError):
    """The peer sent a size prefix that cannot start a valid frame; close the connection."""

    def __init__(self, message: str, size: int):
        super().__init__(message)
        self.size = size


class FrameTooLargeError(InvalidFrameError):
    """A frame's announced size exceeds the limit (Kafka's ``InvalidReceiveException``)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes "
                         f"(socket.request.max.bytes)", size)
        self.limit = limit


class FrameDecoder:
    """Splits a byte stream into Kafka frames.

    ``feed(data)`` accepts any bytes-like chunk and returns the list of frames completed by it,
    each as ``bytes`` without the 4-byte size prefix (read-only, as kio's readers require).

    After an :class:`InvalidFrameError` the stream cannot be resynchronised: the decoder stays
    failed and every later ``feed`` raises the same error.
    """

    __slots__ = ("max_frame_bytes", "_head", "_parts", "_body", "_body_view", "_have", "_need", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._head = b""            # 0-3 bytes of a size prefix split across chunks
        self._parts: list = []      # pieces of the body being collected (bytes or read-only views)
        self._body: bytes | None = None  # or the large frame being filled in place,
        self._body_view: memoryview | None = None  # through a writable view of its storage
        self._have = 0              # bytes of the body collected so far
        self._need = -1             # body size of the frame in progress, -1 while reading a prefix
        self._error: InvalidFrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._head) + self._have

    @property
    def pending_frame_size(self) -> int | None:
        """Announced size of the frame being received, or None between frames."""
        return None if self._need < 0 else self._need

    def _check(self, size: int) -> None:
        if size < 0:
            self._error = InvalidFrameError(f"invalid frame size {size}", size)
            raise self._error
        if size > self.max_frame_bytes:
            self._error = FrameTooLargeError(size, self.max_frame_bytes)
            raise self._error

    def feed(self, data) -> list[bytes]:
        """Add a chunk from the stream; return the frames it completed (possibly none)."""
        if self._error is not None:
            raise self._error
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        # Views into an immutable object may be kept; anything the caller may reuse is copied.
        keep_views = isinstance(data, bytes)
        total = len(view)
        pos = 0
        frames: list[bytes] = []
        while pos < total:
            need = self._need
            if need < 0:
                # Reading a size prefix.
                if self._head or total - pos < 4:
                    take = min(4 - len(self._head), total - pos)
                    self._head += bytes(view[pos:pos + take])
                    pos += take
                    if len(self._head) < 4:
                        break
                    (need,) = _unpack_size(self._head)
                    self._head = b""
                else:
                    (need,) = _unpack_size(view, pos)
                    pos += 4
                self._check(need)
                self._need = need
                if need == 0:
                    frames.append(b"")
                    self._need = -1
                    continue
            # Reading a body of `need` bytes, `self._have` of which are already collected.
            missing = need - self._have
            available = total - pos
            if not available:  # the chunk ended with the size prefix
                break
            if not self._have and available >= need:
                # Whole frame inside this chunk: one copy, straight into the result.
                frames.append(bytes(view[pos:pos + need]))
                pos += need
                self._need = -1
                continue
            take = missing if available >= missing else available
            piece = view[pos:pos + take]
            if not self._have and need >= LARGE_BODY_BYTES:
                self._body, self._body_view = _unfilled_bytes(need)
            if self._body_view is not None:
                self._body_view[self._have:self._have + take] = piece
            else:
                self._parts.append(piece if keep_views else bytes(piece))
            self._have += take
            pos += take
            if self._have == need:
                if self._body_view is not None:
                    self._body_view.release()
                    frames.append(self._body)
                    self._body = self._body_view = None
                else:
                    frames.append(b"".join(self._parts))
                    self._parts = []
                self._have = 0
                self._need = -1
        return frames


_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_BYTES_DATA = bytes.__basicsize__ - 1  # offset of a bytes object's storage (ob_sval; basicsize counts its NUL)


def _unfilled_bytes(size: int) -> tuple[bytes, memoryview]:
    """A new ``bytes`` of ``size`` (> 1) bytes whose content is not written yet, and a writable view of its
    storage. Nothing else may see the object until the view has filled it and been released."""
    body = _new_bytes(None, size)  # MemoryError if it cannot be had, as a join would raise
    return body, memoryview((ctypes.c_char * size).from_address(id(body) + _BYTES_DATA)).cast("B")


def size_prefix(size: int) -> bytes:
    """The 4-byte big-endian size prefix for a payload of ``size`` bytes."""
    return _SIZE.pack(size)


def encode_frame(payload) -> bytes:
    """``payload`` (bytes-like) with its size prefix, as one ``bytes``."""
    return b"".join((_SIZE.pack(memoryview(payload).nbytes), payload))


def encode_frame_parts(parts: Iterable) -> list:
    """Size prefix followed by ``parts`` unchanged, for ``writelines``/``sendmsg`` without a join.

    This is the shape a large Fetch response will use: a small kio-encoded prefix, the records
    bytes as they came from the log segment (or the remote tier), and a small suffix.
    """
    parts = list(parts)
    size = sum(memoryview(p).nbytes for p in parts)
    return [_SIZE.pack(size), *parts]
