"""The broker's and the command line's log lines: one format, configured in one place, and a limiter for
warnings that can repeat thousands of times a second.

Every line is ``<ISO-8601 UTC time, ms> <LEVEL> <logger name>: <message>``, e.g.
``2026-11-26T01:02:03.456Z INFO tierlog.server.network: message`` (tracebacks follow on their own
lines). :func:`configure` installs that format on the root logger's one handler (stderr); the ``tierlog``
command calls it once at start-up and ``tierlog broker`` again with its level.

:class:`RepeatLimiter` keeps a warning that can fire in a tight loop (accept errors at the descriptor
limit, rejected connections, connections closed for bad frames) to one line per key and interval: the
first occurrence is logged at once, later ones within the interval are counted, and the count is logged
when the interval ends: ``<message> (repeated 512 times in the last 10 s)``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

__all__ = ["DEFAULT_REPEAT_INTERVAL_S", "FORMAT", "IsoFormatter", "RepeatLimiter", "configure"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: How long a :class:`RepeatLimiter` without an interval of its own keeps repeats of one key to one line.
DEFAULT_REPEAT_INTERVAL_S = 10.0
_repeat_interval_s = DEFAULT_REPEAT_INTERVAL_S

_handler: logging.Handler | None = None


class IsoFormatter(logging.Formatter):
    """``asctime`` as ISO-8601 in UTC with milliseconds: ``2026-11-26T01:02:03.456Z``."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def configure(level: int = logging.WARNING, *, stream=None, repeat_interval_s: float | None = None) -> None:
    """Log to ``stream`` (stderr) in :data:`FORMAT` at ``level`` and above. Called again, it replaces its own
    handler (not one a test framework installed) and sets the new level; ``repeat_interval_s`` sets the
    interval of the :class:`RepeatLimiter` objects without one of their own."""
    global _handler, _repeat_interval_s
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(IsoFormatter(FORMAT))
    root.addHandler(_handler)
    root.setLevel(level)
    if repeat_interval_s is not None:
        _repeat_interval_s = repeat_interval_s


class _Window:
    __slots__ = ("start", "suppressed", "level", "msg", "args", "timer")

    def __init__(self, start: float):
        self.start = start
        self.suppressed = 0
        self.level = logging.WARNING
        self.msg = ""
        self.args: tuple = ()
        self.timer: asyncio.TimerHandle | None = None


class RepeatLimiter:
    """At most one line per key and interval on ``logger``; the repeats are counted and reported.

    ``log(key, level, msg, *args)`` logs at once when ``key`` was not seen within the interval, else counts.
    When the interval of a key with repeats ends, one line reports them: the latest message followed by
    ``(repeated N times in the last S s)``. The report is made by a timer on the running event loop when
    there is one, else by the next call for that key after the interval. Keys are whatever tells apart
    warnings worth separate lines (e.g. the errno of an accept error, not the peer's address).
    """

    def __init__(self, logger: logging.Logger, interval_s: float | None = None, *, clock=time.monotonic,
                 max_keys: int | None = None):
        """``max_keys`` bounds the keys remembered (keys a client chooses, e.g. topic names): a new key
        beyond it first reports and forgets every key's window."""
        self.logger = logger
        self._interval_s = interval_s
        self._max_keys = max_keys
        self._clock = clock
        self._windows: dict[Any, _Window] = {}

    @property
    def interval_s(self) -> float:
        return self._interval_s if self._interval_s is not None else _repeat_interval_s

    def warning(self, key: Any, msg: str, *args: Any) -> None:
        self.log(key, logging.WARNING, msg, *args)

    def log(self, key: Any, level: int, msg: str, *args: Any) -> bool:
        """Log or count one occurrence; True when a line was written now."""
        now = self._clock()
        w = self._windows.get(key)
        if w is not None and now - w.start < self.interval_s:
            w.suppressed += 1
            w.level, w.msg, w.args = level, msg, args
            if w.timer is None:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    loop = None
                if loop is not None:
                    w.timer = loop.call_later(max(0.0, w.start + self.interval_s - now), self._report, key)
            return False
        if w is not None and w.suppressed:
            self._report(key, reopen=False)  # repeats of a window whose timer never ran (no event loop)
        elif w is None and self._max_keys is not None and len(self._windows) >= self._max_keys:
            self.flush()
            self._windows.clear()
        self._windows[key] = _Window(now)
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args)
        return True

    def _report(self, key: Any, *, reopen: bool = True) -> None:
        w = self._windows.get(key)
        if w is None or not w.suppressed:
            return
        if w.timer is not None:
            w.timer.cancel()
        now = self._clock()
        elapsed = max(now - w.start, 0.0)
        if self.logger.isEnabledFor(w.level):
            self.logger.log(w.level, w.msg + " (repeated %d times in the last %s s)", *w.args, w.suppressed,
                            f"{elapsed:.0f}" if elapsed >= 1 else f"{elapsed:.1f}")
        if reopen:  # repeats going on are counted into the next report, not logged at once
            self._windows[key] = _Window(now)
        else:
            del self._windows[key]

    def flush(self) -> None:
        """Report every key's pending repeats now (at shutdown)."""
        for key in list(self._windows):
            self._report(key, reopen=False)
