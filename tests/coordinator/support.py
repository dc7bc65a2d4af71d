"""Helpers for the coordinator's unit tests: a manual clock, a responder that remembers, the partition writer
a shard gives its managers, and the parts a manager is built from."""

from __future__ import annotations

from tierlog.coordinator import CoordinatorConfig, KeyedTimer


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


class Writer:
    """The partition writer a shard gives its managers: keeps the decoded records, or fails."""

    def __init__(self) -> None:
        self.records: list = []
        self.fail_with: Exception | None = None

    def __call__(self, records) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.records.extend(records)


class ManagerParts:
    """A manual clock, a timer on it and a writer: what a group or offset manager is built from."""

    def __init__(self, **config) -> None:
        self.clock = Clock()
        self.timer = KeyedTimer(self.clock)
        self.writer = Writer()
        settings = dict(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60_000)
        settings.update(config)
        self.config = CoordinatorConfig(**settings)

    def advance(self, ms: int = 0) -> None:
        self.clock.now += ms
        self.timer.poll()
