"""Request memory (Kafka's ``MemoryPool``): the pool that bounds the bytes of requests being received or
waiting for their answer (``queued.max.request.bytes``), and giving freed request memory back to the system.

The socket server (:mod:`.socket_server`) reserves a frame's announced size from the pool before reading
more of it and releases it as the request is answered; it calls :data:`_malloc_trim` after
:data:`TRIM_AFTER_BYTES` of big requests were freed.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections import deque
from collections.abc import Callable

from tierlog.metrics import MetricsRegistry

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
