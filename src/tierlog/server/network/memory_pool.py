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

#: Frames up to this size are "small": while big frames wait for the pool, small ones are still read, from a
#: reserve of SMALL_RESERVE_FRACTION of the pool (at least SMALL_RESERVE_MIN) beyond it. Kafka's pool makes a
#: small request wait behind half-sent big frames as long as they are held (up to connections.max.idle.ms);
#: here an ApiVersions, a Metadata or a heartbeat is answered meanwhile, and memory stays bounded by the pool,
#: one overshoot and the reserve.
SMALL_FRAME_BYTES = 64 * 1024
SMALL_RESERVE_FRACTION = 1 / 8
SMALL_RESERVE_MIN = 1024 * 1024

MEMORY_POOL_USED = "kafka_network_socketserver_memorypoolused"
MEMORY_POOL_AVAILABLE = "kafka_network_socketserver_memorypoolavailable"


class MemoryPool:
    """Kafka's ``SimpleMemoryPool`` in non-strict mode, for bytes of requests: a reservation is granted
    while the pool has anything left (so it may overshoot by one reservation), else the caller waits until
    enough is released. Bytes already in memory are counted with :meth:`force`, which never waits. A small
    reservation (SMALL_FRAME_BYTES) is also granted from a reserve beyond the limit, so small requests are
    never starved by big frames held half-sent (a deliberate difference from Kafka)."""

    def __init__(self, limit: int, metrics: MetricsRegistry | None = None):
        self.limit = limit
        self.small_reserve = max(SMALL_RESERVE_MIN, int(limit * SMALL_RESERVE_FRACTION))
        self.used = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._small_waiters: list[asyncio.Future] = []
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
        if (self.used < self.limit and not self._waiters) or self._small_fits(size):
            self.used += size
            self._changed()
            return True
        return False

    def _small_fits(self, size: int) -> bool:
        # size 0: a connection about to read a frame's size (wait_to_read) needs room for at least a byte
        return size <= SMALL_FRAME_BYTES and self.used + max(size, 1) <= self.limit + self.small_reserve

    def may_read(self) -> bool:
        """Whether a connection with no frame begun may read: a small frame could still be taken (its size
        is known only once read; what is read before it is at most one read chunk per connection)."""
        return self.used < self.limit + self.small_reserve

    async def reserve(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting (first come, first served) while the pool is exhausted; a small
        reservation waits only for the reserve beyond the pool, and behind no big one."""
        if self.try_reserve(size):
            return
        if size <= SMALL_FRAME_BYTES:
            await self._wait_for_reserve(size)
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

    async def _wait_for_reserve(self, size: int) -> None:
        loop = asyncio.get_running_loop()
        while not self._small_fits(size):
            fut = loop.create_future()
            self._small_waiters.append(fut)
            try:
                await fut
            finally:
                self._small_waiters.remove(fut)
        if size:
            self.used += size
            self._changed()

    async def wait_to_read(self) -> None:
        """Wait until :meth:`may_read`."""
        if not self.may_read():
            await self._wait_for_reserve(0)

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
        if self.used < self.limit + self.small_reserve:
            for fut in self._small_waiters:  # few, and each reservation small: all may try
                if not fut.done():
                    fut.set_result(None)

    def _discard(self, fut: asyncio.Future) -> None:
        try:
            first = self._waiters[0] is fut
            self._waiters.remove(fut)
        except (ValueError, IndexError):
            return
        if first:
            self._wake()
