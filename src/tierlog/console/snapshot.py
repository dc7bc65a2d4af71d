"""One picture of the cluster for every open console page: made by one background task, shared by every tab.

The long lists (cluster, topics, groups) are read from the cluster once per refresh, however many tabs
are open and however often they ask: a page's poll reads the last picture, never the brokers. The task
runs while someone looks: it starts with the first request and stops once nobody has asked for
``idle_after_s`` (a console nobody looks at costs the brokers nothing). Its period grows with the
cluster's size (:meth:`Snapshot.pause_after`): ``min_interval_s`` after the last picture was made, or
five times as long as making it took, or a second per :data:`PARTITIONS_PER_S` partitions, whichever is
longest, at most ten times ``min_interval_s``. What a picture costs a broker grows with its partitions (the
Metadata of every one, their tier sums): the pause grows with them, so the console's share of the
broker's CPU stays about the same, under 2 % of a core at 10,000 partitions (docs/console.md, Benchmark).
A pause by the time taken alone would not do it: a broker that answers faster is asked more often.

Lists are answered a page at a time (:func:`page_of`): filtered, sorted and cut on the console, so the
browser gets only the rows it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


#: The pause between two pictures is at least a second per this many partitions of the cluster.
PARTITIONS_PER_S = 1000


class Snapshot:
    """The latest answer of ``make`` (a coroutine function), refreshed in the background while asked for;
    ``partitions`` says how many partitions a picture covers (for the pause)."""

    def __init__(self, make: Callable[[], Awaitable[dict]], min_interval_s: float = 2.0,
                 idle_after_s: float = 30.0, partitions: Callable[[dict], int] = lambda picture: 0) -> None:
        self._make = make
        self._partitions = partitions
        self.min_interval_s = min_interval_s
        self.idle_after_s = idle_after_s
        self._latest: dict | None = None
        self._error: BaseException | None = None
        self._made = asyncio.Event()  # set once the first refresh (of this run of the task) ended
        self._asked = 0.0
        self._task: asyncio.Task | None = None
        self.refreshes = 0  # how many pictures were made (the tests and the benchmark read it)

    async def get(self) -> dict:
        """The latest picture; the first request (or the first after an idle spell) waits for a fresh one.
        The latest refresh's failure is raised (the page shows it and keeps the figures it had)."""
        self._asked = time.monotonic()
        if self._task is None or self._task.done():
            self._made = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="console-snapshot")
        if not self._made.is_set():
            await self._made.wait()
        if self._error is not None:
            raise self._error
        assert self._latest is not None
        return self._latest

    def pause_after(self, took_s: float, partitions: int) -> float:
        """The pause after a picture that took ``took_s`` seconds to make, of ``partitions`` partitions."""
        return min(10 * self.min_interval_s,
                   max(self.min_interval_s, 5 * took_s, partitions / PARTITIONS_PER_S))

    async def _run(self) -> None:
        partitions = 0
        while time.monotonic() - self._asked < self.idle_after_s:
            started = time.monotonic()
            try:
                latest = await self._make()
                took = time.monotonic() - started
                partitions = self._partitions(latest)
                self._latest = {**latest, "at_ms": int(time.time() * 1000), "took_ms": int(took * 1000)}
                self._error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - given to the next request, which answers it
                took = time.monotonic() - started
                log.debug("The console's picture of the cluster failed: %s", e)
                self._error = e
            self.refreshes += 1
            self._made.set()
            await asyncio.sleep(self.pause_after(took, partitions))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


#: The most rows one answer carries (a page of a long list).
MAX_LIMIT = 1000


def page_of(rows: list[dict], key: str, *, offset: int = 0, limit: int | None = None, filter: str | None = None,
            sort: str | None = None, desc: bool = False) -> dict:
    """Rows ``offset`` to ``offset + limit`` of ``rows`` whose ``key`` contains ``filter`` (case blind),
    sorted by ``sort`` (a column; "-" None figures last) then ``key``: ``{"rows", "total", "matched",
    "offset", "limit"}``. Without ``limit`` every matching row (what scripts asked before there were pages)."""
    matched = rows
    if filter:
        needle = filter.lower()
        matched = [r for r in rows if needle in str(r[key]).lower()]
    if sort and sort != key:
        if matched and sort not in matched[0]:
            raise ValueError(f"cannot sort by {sort}")
        known = sorted((r for r in matched if r.get(sort) is not None), key=lambda r: (r[sort], r[key]),
                       reverse=desc)
        matched = known + [r for r in matched if r.get(sort) is None]
    elif desc:
        matched = matched[::-1]
    shown = matched[offset:] if limit is None else matched[offset:offset + limit]
    return {"rows": shown, "total": len(rows), "matched": len(matched), "offset": offset, "limit": limit}
