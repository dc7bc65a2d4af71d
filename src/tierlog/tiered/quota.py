"""Broker-wide byte-rate quotas for remote copies and remote reads (KIP-956).

The rate is Kafka's ``SimpleRate`` over ``window.num`` samples of ``window.size.seconds`` each: the
bytes recorded in the live samples divided by the time since the oldest of them began, but never by
less than one window (so one burst after a quiet spell counts against a single window). When the rate
is above ``max.bytes.per.second`` the throttle time is how long the rate needs to fall back to the
bound: ``(rate - bound) / bound * window``, as Kafka computes it.

The bound is read on every check, so a dynamic change of ``remote.log.manager.copy.max.bytes.per.second``
or ``remote.log.manager.fetch.max.bytes.per.second`` takes effect at once; the sample layout is fixed
at start-up, as in Kafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def _now_ms() -> float:
    return time.monotonic() * 1000


class RateQuota:
    """Bytes per second over a sampled window; thread-safe (remote reads record from worker threads)."""

    def __init__(self, bound: Callable[[], float], samples: int, window_s: float,
                 clock: Callable[[], float] = _now_ms) -> None:
        self._bound = bound
        self.samples = samples
        self.window_ms = window_s * 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._starts: list[float] = []  # start of each live sample, oldest first
        self._values: list[float] = []

    def _purge(self, now: float) -> None:
        # A sample older than every window together no longer counts.
        horizon = now - self.samples * self.window_ms
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0], self._values[0]

    def record(self, amount: float) -> None:
        now = self._clock()
        with self._lock:
            self._purge(now)
            if not self._starts or now >= self._starts[-1] + self.window_ms:
                self._starts.append(now)
                self._values.append(0.0)
                if len(self._starts) > self.samples:
                    del self._starts[0], self._values[0]
            self._values[-1] += amount

    def _rate_and_window(self, now: float) -> tuple[float, float]:
        self._purge(now)
        window = max(now - self._starts[0], self.window_ms) if self._starts else self.window_ms
        return sum(self._values) / (window / 1000), window

    def rate(self) -> float:
        """Bytes per second now."""
        with self._lock:
            return self._rate_and_window(self._clock())[0]

    def throttle_time_ms(self) -> int:
        """0 while the rate is within the bound, else how long to hold off, in ms."""
        bound = self._bound()
        with self._lock:
            rate, window = self._rate_and_window(self._clock())
        if rate <= bound:
            return 0
        return max(1, round((rate - bound) / bound * window))
