"""Stopping background tasks for good.

Python 3.11's ``asyncio.wait_for`` drops a cancellation that lands in the same loop turn as the result it
awaited; a task looping on such reads then runs on after ``cancel()``, and a stop that awaits it waits
forever (a broker's shutdown hung this way). ``stop_tasks`` cancels again until each task has ended."""

from __future__ import annotations

import asyncio

#: How long a cancelled task may run on before it is cancelled again.
RECANCEL_S = 0.5


async def stop_tasks(*tasks: asyncio.Future | None) -> None:
    """Cancel ``tasks`` (None entries ignored) and return once every one has ended; their results and
    exceptions are consumed (a stopping owner has no use for them)."""
    pending = {t for t in tasks if t is not None}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
        for task in pending:  # a cancellation lost under wait_for: ask again
            task.cancel()
    for task in tasks:
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
