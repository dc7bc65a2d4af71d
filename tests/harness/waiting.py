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
- after ``timeout`` seconds, AssertionError ``"timed out after <timeout> s waiting for <what>; last seen:
  <repr>"``, chained to the last ignored exception when that was the last thing seen.
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


def _timed_out(timeout: float, what: str, last: Any) -> AssertionError:
    err = AssertionError(f"timed out after {timeout:g} s waiting for {what}; last seen: {last!r}")
    if isinstance(last, BaseException):
        err.__cause__ = last
    return err


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, *, what: str, interval: float = 0.05,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns something truthy, and return that.

    An exception of a type in ``ignore`` counts as not yet (and is the last value seen); any other
    exception propagates. After ``timeout`` seconds: AssertionError naming ``what`` and the last value seen.
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
