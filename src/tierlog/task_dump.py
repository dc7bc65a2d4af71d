"""What every asyncio task of the broker is waiting for, on demand (SIGUSR1), as ``jstack`` shows a JVM's
threads: a shutdown or a request that hangs is in some task's await chain, which thread dumps (py-spy) do
not show. Each task is written with its name and the chain of coroutines it awaits, innermost last."""

from __future__ import annotations

import asyncio
import sys
from types import CoroutineType, FrameType
from typing import TextIO

END = "end of the asyncio task dump"


def _await_chain(coro) -> list[FrameType]:
    """The frames of ``coro`` and of the coroutines (and async generators) it awaits, outermost first."""
    frames = []
    seen = 0
    while coro is not None and seen < 64:  # a bound against odd awaitables pointing back at themselves
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) if isinstance(coro, CoroutineType) else \
            getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def dump_tasks(out: TextIO | None = None) -> None:
    """Write every task of the running loop with its await chain to ``out`` (stdout), then :data:`END`."""
    out = out if out is not None else sys.stdout
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"asyncio tasks: {len(tasks)}"]
    for task in tasks:
        lines.append(f"task {task.get_name()}{' (cancelling)' if task.cancelling() else ''}:")
        for frame in _await_chain(task.get_coro()):
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
    lines.append(END)
    out.write("\n".join(lines) + "\n")
    out.flush()
