"""Helpers for the coordinator's unit tests: a manual clock and a responder that remembers."""

from __future__ import annotations


class Clock:
    """Milliseconds that move only when a test moves them."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Answer:
    """A JoinGroup/SyncGroup responder that remembers what it was given."""

    def __init__(self) -> None:
        self.value = None
        self.calls = 0

    def __call__(self, value) -> None:
        self.calls += 1
        self.value = value

    @property
    def done(self) -> bool:
        return self.calls > 0

    def __getitem__(self, key):
        return self.value[key]

    def get(self, key, default=None):
        return self.value.get(key, default)
