"""Big requests without stalling the event loop.

The broker serves every connection from one asyncio event loop, and Kafka bounds most request arrays
only by ``socket.request.max.bytes`` (100 MiB): an OffsetFetch of 4 million partitions is a 16 MB
frame, a Metadata request may name a million topics. Decoding, answering and encoding such a request
in one go holds the loop (and, in native code or the garbage collector, the GIL) for seconds, and no
other client gets an answer meanwhile. The pieces here keep every step short:

- :func:`parse`: frames of at least :data:`BIG_FRAME_BYTES` are parsed in a worker thread by the
  sliced reader (:mod:`tierlog.protocol._bigread`), whose native calls are short, so the interpreter
  switches back to the loop every ``sys.getswitchinterval()`` (1 ms in the broker). Smaller frames are
  parsed on the loop, as before (a thread hop would only make them slower).
- :class:`Pacer` and :func:`paced`: a handler walking a big array yields to the loop every few
  milliseconds.
- :func:`respond`: a response of at least :data:`BIG_ITEMS` items is built and encoded in a worker
  thread; the handler gets an :class:`EncodedResponse` back, which the server sends as it is.
  :func:`respond_parts` does the same for a Fetch answer, whose records stay file regions (sendfile).
- :func:`encode`: the server's encoding step, in a worker thread for the answer to a big frame.
- :class:`gc_paused`: no automatic garbage collection while a big request is in flight. A full
  collection walks every object, a million new ones included, in one native call (0.3-0.7 s seen);
  reference counting frees the request's objects anyway, and collection resumes afterwards, with the
  objects made meanwhile in the oldest generation.
- :func:`dismantle`: frees big lists a slice at a time; freeing a list of a million objects at once
  is one native call too.
- :func:`sendable`: a big response frame goes out from an anonymous memory file with ``sendfile``
  (:class:`FrameFile`), a socket buffer's worth per event-loop callback. Written as ``bytes``, asyncio's
  selector transport (Python 3.11) copies what the first ``send`` leaves over into its write buffer,
  twice (a slice, then ``bytearray.extend``), in one callback: 90 ms measured for a 40 MB Metadata
  answer on a busy core, the tail stall of a Metadata request naming a million topics; the write
  buffer then shrinks with more copies as it drains (another 40 ms).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from tierlog.protocol._bigread import SLICE
from tierlog.protocol.builder import build_response
from tierlog.protocol.messages import RequestContext, encode_response, encode_response_parts, parse_request

__all__ = [
    "BIG_FRAME_BYTES",
    "BIG_ITEMS",
    "BIG_SEND_BYTES",
    "EncodedResponse",
    "FrameFile",
    "Pacer",
    "dismantle",
    "encode",
    "free_later",
    "gc_paused",
    "paced",
    "parse",
    "respond",
    "respond_parts",
    "sendable",
]

#: Request frames at least this large are parsed (and answered) off the event loop. kio parses about
#: 30-60 MB/s on a busy core, so a frame just below it holds the loop for some 20-30 ms at most.
BIG_FRAME_BYTES = 1 << 20

#: Responses with at least this many array items are built and encoded off the event loop (building
#: and encoding cost some 10-30 us an item on a busy core).
BIG_ITEMS = 4096

#: Items :func:`dismantle` frees at a time (each may be an object with a few fields of its own).
FREE_SLICE = 4096

#: How long a handler loop may run before it yields to the event loop. Answering another client takes the
#: loop several turns (read, task step, write), each behind one such slice: 5 ms made 40-60 ms round trips
#: during a ListOffsets of a million partitions, 2 ms makes 13-20 ms.
YIELD_AFTER_S = 0.002

#: Response frames at least this large are sent with ``sendfile`` from a memory file (:func:`sendable`),
#: in parts of :data:`SEND_PART_BYTES` (one ``sendfile`` call each, at most).
BIG_SEND_BYTES = 1 << 20
SEND_PART_BYTES = 4 << 20


class gc_paused:  # noqa: N801 - used like a function: ``with gc_paused():``
    """Automatic garbage collection off while at least one ``with gc_paused()`` block runs (across
    tasks and threads); left as it was found when the last one ends. ``gc_paused(False)`` does nothing."""

    _depth = 0
    _was_enabled = False

    def __init__(self, active: bool = True) -> None:
        self.active = active

    def __enter__(self) -> gc_paused:
        if not self.active:
            return self
        cls = type(self)
        if cls._depth == 0:
            cls._was_enabled = gc.isenabled()
            gc.disable()
        cls._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        cls = type(self)
        cls._depth -= 1
        if cls._depth == 0 and cls._was_enabled:
            # With collection off, every object made meanwhile piles up in the youngest generation; the
            # first collection after it would walk them all (the big request's objects are often still
            # alive, being freed in slices): 0.3 s seen for a million. Move them to the oldest generation
            # instead (freeze, then unfreeze: two list splices), which is collected as rarely as ever.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


async def parse(frame: bytes) -> RequestContext:
    """:func:`~tierlog.protocol.messages.parse_request`, in a worker thread for a big frame."""
    if len(frame) < BIG_FRAME_BYTES:
        return parse_request(frame)
    return await asyncio.to_thread(parse_request, frame, in_slices=True)


class EncodedResponse:
    """A response already encoded (size prefix, header, body), as ``bytes`` or, when big, as
    ``[FrameFile, ...]`` (:func:`sendable`), or as parts (:func:`respond_parts`: ``bytes``, file regions
    and :class:`FrameFile`): :func:`encode` passes it through."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes | list) -> None:
        self.frame = frame

    def __repr__(self) -> str:
        size = sum(map(len, self.frame)) if isinstance(self.frame, list) else len(self.frame)
        return f"EncodedResponse({size} bytes)"


async def respond(ctx: RequestContext, values: Mapping[str, Any], items: int) -> Any:
    """``build_response(ctx, values)``; with ``items`` of at least :data:`BIG_ITEMS` (the handler's
    count of array items in ``values``) built and encoded in a worker thread, as an
    :class:`EncodedResponse`. ``values`` is consumed: its big lists are emptied afterwards, so the
    handler must not hand over lists it does not own; so are the request's (``ctx.request``): a big
    answer is the handler's last step."""
    if items < BIG_ITEMS:
        return build_response(ctx, values)
    to_file = _sendfile_helps()

    def build_and_encode() -> EncodedResponse:
        response = build_response(ctx, values)
        frame = encode_response(ctx, response)
        if items > SLICE:  # with fewer items no list of the answer is big: the walk would free nothing
            dismantle(response)  # (it visited every item: 45 % of a 10,000-partition Metadata answer's CPU)
            dismantle(values)
        # The request's big arrays too, here rather than while the answer is sent: a thread freeing them
        # then would hold the GIL whenever the loop gives it up in a system call (a switch interval each time).
        dismantle(ctx.request)
        return EncodedResponse(_to_file(frame) if to_file else frame)

    with gc_paused():
        return await asyncio.to_thread(build_and_encode)


async def respond_parts(ctx: RequestContext, make_values: Callable[[], Mapping[str, Any]]) -> EncodedResponse:
    """``build_response(ctx, make_values())`` encoded as parts (``encode_response_parts``: records that are
    file regions stay parts of their own, sent with sendfile), all in a worker thread, as an
    :class:`EncodedResponse` whose big ``bytes`` parts are memory files (:class:`FrameFile`), as
    :func:`respond`'s frames are. Always off the loop: the caller (the Fetch handler, for a request naming
    many partitions) decides when. ``make_values`` runs in the thread, so it may only read what the handler
    owns; the values, the response and the request (``ctx.request``) are emptied afterwards, as in
    :func:`respond`."""
    to_file = _sendfile_helps()

    def build_and_encode() -> EncodedResponse:
        values = make_values()
        response = build_response(ctx, values)
        parts = encode_response_parts(ctx, response)
        dismantle(response)
        dismantle(values)
        dismantle(ctx.request)
        if to_file:
            parts = [piece for part in parts for piece in (
                FrameFile.parts_of(part) if isinstance(part, bytes) and len(part) >= BIG_SEND_BYTES else (part,))]
        return EncodedResponse(parts)

    with gc_paused():
        return await asyncio.to_thread(build_and_encode)


async def encode(ctx: RequestContext, response: Any, offload: bool) -> bytes | list:
    """The response frame; encoded in a worker thread when ``offload`` (the answer to a big frame), and
    then, when big, as ``[FrameFile, ...]`` (:func:`sendable`)."""
    if isinstance(response, EncodedResponse):
        return response.frame
    if not offload:
        return encode_response(ctx, response)
    to_file = _sendfile_helps()

    def encode_and_free() -> bytes | list:
        frame = encode_response(ctx, response)
        dismantle(response)
        dismantle(ctx.request)  # as in respond
        return _to_file(frame) if to_file else frame

    return await asyncio.to_thread(encode_and_free)


def dismantle(value: Any) -> None:
    """Empty the lists, dicts and sets of more than :data:`SLICE` items inside ``value`` (kio objects,
    dicts, lists and tuples, walked down to those; a big dict's values are not walked) a slice at a
    time, so that freeing them never holds the GIL for long. Only for values nobody else holds: they are
    emptied in place."""
    if isinstance(value, list) and len(value) > SLICE:
        while value:
            del value[-FREE_SLICE:]
        return
    if isinstance(value, (dict, set)) and len(value) > SLICE:  # emptied an item at a time (bytecodes)
        pop = value.popitem if isinstance(value, dict) else value.pop
        while value:
            pop()
        return
    if isinstance(value, (list, tuple)):
        if value and not isinstance(value[0], (int, float, str, bytes)):
            for item in value:
                dismantle(item)
        return
    if isinstance(value, Mapping):
        for item in value.values():
            if isinstance(item, (list, tuple, Mapping)) or dataclasses.is_dataclass(item):
                dismantle(item)
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if isinstance(item, (list, tuple)) or dataclasses.is_dataclass(item):
                dismantle(item)


def free_later(*values: Any) -> None:
    """:func:`dismantle` ``values`` in a worker thread (call it on the loop, for big values the handler
    made and no longer needs; the handler must not use them afterwards)."""
    asyncio.get_running_loop().run_in_executor(None, dismantle, values)


class Pacer:
    """``await pacer()`` in a long loop on the event loop: yields to the loop once ``budget_s`` has
    passed since the last yield (call it every few hundred items; a call that does not yield costs
    a clock read)."""

    __slots__ = ("budget_s", "_next")

    def __init__(self, budget_s: float = YIELD_AFTER_S) -> None:
        self.budget_s = budget_s
        self._next = time.monotonic() + budget_s

    async def __call__(self) -> None:
        if time.monotonic() >= self._next:
            await asyncio.sleep(0)
            self._next = time.monotonic() + self.budget_s


async def paced(items: Sequence, size: int = 512, pacer: Pacer | None = None) -> AsyncIterator[Sequence]:
    """``items`` in slices of ``size``, yielding to the event loop between slices every few ms."""
    pacer = pacer or Pacer()
    if len(items) <= size:
        if items:
            yield items
        return
    for start in range(0, len(items), size):
        yield items[start:start + size]
        await pacer()


class _MemoryFile:
    """Owns a memory file's descriptor; hands it to the closer thread when freed (the last close of a
    memory file frees its pages: 60 ms measured for 40 MB on a busy core, too long for the loop)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        _closing.put(self.fd)


class FrameFile:
    """A part of a response frame in an anonymous memory file (``memfd``), sent like a segment's file
    region (``open()``, ``position``, ``length``, ``path``: what the server's sendfile path reads;
    ``open()`` gives a descriptor of the caller's own). A frame is cut into parts of
    :data:`SEND_PART_BYTES`: asyncio's ``sendfile`` sends all it can in its first call, and on loopback
    that call copied some 10 MB of an 80 MB answer at once (47 ms measured)."""

    __slots__ = ("_file", "length", "path", "position")

    def __init__(self, file: _MemoryFile, position: int, length: int) -> None:
        self._file = file
        self.position = position
        self.length = length
        self.path = f"(response frame part of {length} bytes at {position} in a memfd)"

    @classmethod
    def parts_of(cls, frame: bytes) -> list[FrameFile]:
        """The frame in a new memory file (a copy at memory speed, without the GIL), as parts; call it
        off the loop."""
        _start_closer()
        fd = os.memfd_create("tierlog-response", os.MFD_CLOEXEC)
        try:
            view = memoryview(frame)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            raise
        file = _MemoryFile(fd)
        return [cls(file, start, min(SEND_PART_BYTES, len(frame) - start))
                for start in range(0, len(frame), SEND_PART_BYTES)]

    def __len__(self) -> int:
        return self.length

    def open(self) -> int:
        return os.dup(self._file.fd)

    def __repr__(self) -> str:
        return f"FrameFile({self.length} bytes at {self.position})"


_closing: queue.SimpleQueue[int] = queue.SimpleQueue()
_closer: threading.Thread | None = None
_closer_lock = threading.Lock()


def _start_closer() -> None:
    """The thread that closes freed :class:`FrameFile` descriptors, started by the first one (in a worker
    thread: starting a thread waits for it to take the GIL, which the loop must not)."""
    global _closer
    with _closer_lock:
        if _closer is None or not _closer.is_alive():
            _closer = threading.Thread(target=_close_forever, name="tierlog-frame-closer", daemon=True)
            _closer.start()


def _close_forever() -> None:
    while True:
        fd = _closing.get()
        try:
            os.close(fd)
        except OSError:
            pass


def _sendfile_helps() -> bool:
    """Whether a big frame is better sent from a memory file: on asyncio's own selector loops, which copy
    a big write and send a file natively (uvloop has no sendfile: the server would read the file back
    and write it whole). Call it on the loop."""
    return hasattr(os, "memfd_create") and isinstance(asyncio.get_running_loop(),
                                                       asyncio.selector_events.BaseSelectorEventLoop)


def _to_file(frame: bytes) -> bytes | list:
    return FrameFile.parts_of(frame) if len(frame) >= BIG_SEND_BYTES else frame


async def sendable(frame: bytes | list) -> bytes | list:
    """What the server writes for a response frame: ``frame`` itself, or for a frame of at least
    :data:`BIG_SEND_BYTES` on a selector event loop ``[FrameFile, ...]`` (written in a worker thread), parts
    for the server's sendfile path, which sends a socket buffer's worth per callback without copying
    the frame into the transport. Parts (already made by :func:`encode`) pass through."""
    if isinstance(frame, list) or len(frame) < BIG_SEND_BYTES or not _sendfile_helps():
        return frame
    return await asyncio.to_thread(_to_file, frame)
