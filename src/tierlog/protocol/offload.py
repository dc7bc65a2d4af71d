"""Big requests without stalling the event loop.

The broker serves every connection from one asyncio event loop, and Kafka bounds most request arrays
only by ``socket.request.max.bytes`` (100 MiB): an OffsetFetch of 4 million partitions is a 16 MB
frame, a Metadata request may name a million topics. Decoding, answering and encoding such a request
in one go holds the loop (and, in native code or the garbage collector, the GIL) for seconds, and no
other client gets an answer meanwhile. The pieces here keep every step short:

- :func:`parse`: frames of at least :data:`BIG_FRAME_BYTES` are parsed in a worker thread by the
  sliced reader (:mod:`tierlog.protocol._bigread`), whose native calls are short, so the interpreter
  switches back to the loop every ``sys.getswitchinterval()`` (5 ms). Smaller frames are parsed on the
  loop, as before (a thread hop would only make them slower).
- :class:`Pacer` and :func:`paced`: a handler walking a big array yields to the loop every few
  milliseconds.
- :func:`respond`: a response of at least :data:`BIG_ITEMS` items is built and encoded in a worker
  thread; the handler gets an :class:`EncodedResponse` back, which the server sends as it is.
- :func:`encode`: the server's encoding step, in a worker thread for the answer to a big frame.
- :class:`gc_paused`: no automatic garbage collection while a big request is in flight. A full
  collection walks every object, a million new ones included, in one native call (0.3-0.7 s seen);
  reference counting frees the request's objects anyway, and collection resumes afterwards, with the
  objects made meanwhile in the oldest generation.
- :func:`dismantle`: frees big lists a slice at a time; freeing a list of a million objects at once
  is one native call too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from tierlog.protocol._bigread import SLICE
from tierlog.protocol.builder import build_response
from tierlog.protocol.messages import RequestContext, encode_response, parse_request

__all__ = [
    "BIG_FRAME_BYTES",
    "BIG_ITEMS",
    "EncodedResponse",
    "Pacer",
    "dismantle",
    "encode",
    "gc_paused",
    "paced",
    "parse",
    "respond",
]

#: Request frames at least this large are parsed (and answered) off the event loop. kio parses about
#: 30-60 MB/s on a busy core, so a frame just below it holds the loop for some 20-30 ms at most.
BIG_FRAME_BYTES = 1 << 20

#: Responses with at least this many array items are built and encoded off the event loop (building
#: and encoding cost some 10-30 us an item on a busy core).
BIG_ITEMS = 4096

#: Items :func:`dismantle` frees at a time (each may be an object with a few fields of its own).
FREE_SLICE = 4096

#: How long a handler loop may run before it yields to the event loop.
YIELD_AFTER_S = 0.005


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
    """A response already encoded (size prefix, header, body): :func:`encode` passes it through."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def __repr__(self) -> str:
        return f"EncodedResponse({len(self.frame)} bytes)"


async def respond(ctx: RequestContext, values: Mapping[str, Any], items: int) -> Any:
    """``build_response(ctx, values)``; with ``items`` of at least :data:`BIG_ITEMS` (the handler's
    count of array items in ``values``) built and encoded in a worker thread, as an
    :class:`EncodedResponse`. ``values`` is consumed: its big lists are emptied afterwards, so the
    handler must not hand over lists it does not own."""
    if items < BIG_ITEMS:
        return build_response(ctx, values)

    def build_and_encode() -> EncodedResponse:
        response = build_response(ctx, values)
        frame = encode_response(ctx, response)
        dismantle(response)
        dismantle(values)
        return EncodedResponse(frame)

    with gc_paused():
        return await asyncio.to_thread(build_and_encode)


async def encode(ctx: RequestContext, response: Any, offload: bool) -> bytes:
    """The response frame; encoded in a worker thread when ``offload`` (the answer to a big frame)."""
    if isinstance(response, EncodedResponse):
        return response.frame
    if not offload:
        return encode_response(ctx, response)

    def encode_and_free() -> bytes:
        frame = encode_response(ctx, response)
        dismantle(response)
        return frame

    return await asyncio.to_thread(encode_and_free)


def dismantle(value: Any) -> None:
    """Empty the lists of more than :data:`SLICE` items inside ``value`` (kio objects, dicts, lists and
    tuples, walked down to those lists) a slice at a time, so that freeing them never holds the GIL for
    long. Only for values nobody else holds: the lists are emptied in place."""
    if isinstance(value, list) and len(value) > SLICE:
        while value:
            del value[-FREE_SLICE:]
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
