"""Keyed timers for the coordinator (Kafka's ``CoordinatorTimer``): scheduling a key replaces it.

The timer itself is passive: :meth:`KeyedTimer.poll` runs what is due. :meth:`KeyedTimer.run` is
an asyncio task that sleeps until the next deadline (woken early when an earlier one is
scheduled); tests leave it out and call ``poll`` with a manual clock.

:class:`ScopedTimer` is one ``__consumer_offsets`` partition's view of the shared timer (Kafka gives
each coordinator shard its own timer): its keys cannot collide with another partition's, and
:meth:`ScopedTimer.clear` cancels only its own timers when the partition is unloaded.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Hashable
from typing import NamedTuple

log = logging.getLogger(__name__)

__all__ = ["KeyedTimer", "ScopedTimer", "monotonic_ms"]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class KeyedTimer:
    def __init__(self, clock: Callable[[], int] = monotonic_ms):
        self.clock = clock
        self._heap: list[tuple[int, int, Hashable]] = []
        self._entries: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}  # key -> (deadline, seq, fn)
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None:
        deadline = self.clock() + max(0, int(delay_ms))
        seq = next(self._seq)
        self._entries[key] = (deadline, seq, fn)
        heapq.heappush(self._heap, (deadline, seq, key))
        if self._wake is not None and self._heap[0][1] == seq:
            self._wake.set()

    def cancel(self, key: Hashable) -> None:
        self._entries.pop(key, None)  # its heap entry becomes stale and is skipped

    def deadline(self, key: Hashable) -> int | None:
        entry = self._entries.get(key)
        return entry[0] if entry else None

    def _next_deadline(self) -> int | None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return deadline
            heapq.heappop(self._heap)
        return None

    def poll(self) -> int:
        """Run every timer that is due; returns how many ran."""
        ran = 0
        while True:
            deadline = self._next_deadline()
            if deadline is None or deadline > self.clock():
                return ran
            _, seq, key = heapq.heappop(self._heap)
            _, _, fn = self._entries.pop(key)
            ran += 1
            try:
                fn()
            except Exception:  # noqa: BLE001 - one failing timer must not stop the others
                log.exception("Coordinator timer %r failed", key)

    def cancel_matching(self, predicate: Callable[[Hashable], bool]) -> int:
        """Cancel every timer whose key satisfies ``predicate``; returns how many."""
        keys = [key for key in self._entries if predicate(key)]
        for key in keys:
            del self._entries[key]
        return len(keys)

    def clear(self) -> None:
        self._entries.clear()
        self._heap.clear()

    async def run(self) -> None:
        """Fire timers on time until cancelled."""
        self._wake = asyncio.Event()
        try:
            while True:
                self.poll()
                deadline = self._next_deadline()
                self._wake.clear()
                timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass
        finally:
            self._wake = None


class _ScopedKey(NamedTuple):
    scope: Hashable
    key: Hashable


class ScopedTimer:
    """The timers of one scope (a ``__consumer_offsets`` partition) on a shared :class:`KeyedTimer`."""

    def __init__(self, timer: KeyedTimer, scope: Hashable):
        self.timer = timer
        self.scope = scope

    def __contains__(self, key: Hashable) -> bool:
        return _ScopedKey(self.scope, key) in self.timer

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None:
        self.timer.schedule(_ScopedKey(self.scope, key), delay_ms, fn)

    def cancel(self, key: Hashable) -> None:
        self.timer.cancel(_ScopedKey(self.scope, key))

    def deadline(self, key: Hashable) -> int | None:
        return self.timer.deadline(_ScopedKey(self.scope, key))

    def clear(self) -> int:
        """Cancel this scope's timers (and no other's); returns how many."""
        scope = self.scope
        return self.timer.cancel_matching(lambda key: isinstance(key, _ScopedKey) and key.scope == scope)
