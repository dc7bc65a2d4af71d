"""The one wait of the test suite: poll a predicate until it returns something truthy, or fail saying what
was awaited and what was last seen.

``wait_until`` (threads, plain tests) and ``wait_until_async`` (coroutines: it sleeps with ``asyncio.sleep``
and awaits the predicate's answer when that is awaitable) share the rules:

- the predicate is called at least once, and once more at or after the deadline, so a wait never fails
  without a look at the end of its time;
- the first truthy value it returns is returned, so a caller can use it (``leader = wait_until(...)``);
- between calls the wait sleeps ``interval`` seconds (never past the deadline);
- an exception raised by the predicate propagates at once, unless it is an instance of ``ignore``
  (a tuple of exception types): then it counts as "not yet", and is what was last seen;
- a predicate that wants to show more than a falsy value when the time is up returns ``not_yet(seen)``:
  false, and ``seen`` is what the timeout's message names;
- after ``timeout`` seconds, :class:`TimedOut` (an AssertionError) ``"timed out after <timeout> s waiting for
  <what>; last seen: <repr>"``, chained to the last ignored exception when that was the last thing seen.
  A caller for whom the end of the time is no failure (a read that returns what arrived, a fallback) catches
  ``TimedOut``, never AssertionError, so that an assertion inside the predicate still fails the test.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: The clock and the sleeps, names of this module so that the helper's own tests can drive them.
_clock = time.monotonic
_sleep = time.sleep
_async_sleep = asyncio.sleep


class not_yet:  # noqa: N801 - used like a value, ``return not_yet(md)``
    """A falsy answer of a predicate that carries what it saw, for the timeout's "last seen"."""

    __slots__ = ("seen",)

    def __init__(self, seen: Any):
        self.seen = seen

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return repr(self.seen)


class TimedOut(AssertionError):
    """The wait's time is up: what was awaited did not happen."""


def _timed_out(timeout: float, what: str, last: Any) -> TimedOut:
    err = TimedOut(f"timed out after {timeout:g} s waiting for {what}; last seen: {last!r}")
    if isinstance(last, BaseException):
        err.__cause__ = last
    return err


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, *, what: str, interval: float = 0.05,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns something truthy, and return that.

    An exception of a type in ``ignore`` counts as not yet (and is the last value seen); any other
    exception propagates. After ``timeout`` seconds: TimedOut (an AssertionError) naming ``what`` and the last
    value seen.
    """
    deadline = _clock() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except ignore as e:
            last = e
        else:
            if last:
                return last
        now = _clock()
        if now >= deadline:
            raise _timed_out(timeout, what, last)
        _sleep(min(interval, deadline - now))


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], timeout: float = 30.0, *, what: str,
                           interval: float = 0.05, ignore: tuple[type[BaseException], ...] = ()) -> T:
    """``wait_until`` in a coroutine: the predicate may be a plain function or return an awaitable (an
    ``async def`` function), and the wait sleeps with ``asyncio.sleep`` so other tasks run meanwhile."""
    deadline = _clock() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
            if inspect.isawaitable(last):
                last = await last
        except ignore as e:
            last = e
        else:
            if last:
                return last
        now = _clock()
        if now >= deadline:
            raise _timed_out(timeout, what, last)
        await _async_sleep(min(interval, deadline - now))
