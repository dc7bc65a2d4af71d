"""Helpers for the coordinator's unit tests: a manual clock, a responder that remembers, the partition writer
a shard gives its managers, and the parts a manager is built from."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tierlog.coordinator import OFFSETS_TOPIC, CoordinatorConfig, KeyedTimer
from tierlog.errors import TopicAlreadyExistsError
from tierlog.storage import Log, LogConfig


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


class LocalTopicLog:
    """An :class:`~tierlog.coordinator.OffsetsTopicLog` made of real logs in a folder: ``__consumer_offsets``, or
    ``topic`` (``__transaction_state``); ``brokers`` > 1 keeps the configured replication factor."""

    def __init__(self, root: str, brokers: int = 1, topic: str = OFFSETS_TOPIC) -> None:
        self.root = root
        self.topic = topic
        self.brokers = brokers
        self.logs: dict[int, Log] = {}
        self.created: tuple | None = None
        if os.path.isdir(root):
            for name in sorted(os.listdir(root)):
                p = int(name.rpartition("-")[2])
                self.logs[p] = Log.open(os.path.join(root, name), topic, p, LogConfig())

    def partition_count(self, topic: str) -> int | None:
        assert topic == self.topic
        return len(self.logs) if self.logs else None

    def internal_topic_replication_factor(self, topic: str, setting: str, configured: int) -> int:
        return configured if self.brokers > 1 else 1

    def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> None:
        if self.logs:
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
        self.created = (topic, num_partitions, replication_factor, dict(configs))
        for p in range(num_partitions):
            self.logs[p] = Log.open(os.path.join(self.root, f"{topic}-{p}"), topic, p, LogConfig())

    def append(self, topic: str, partition: int, records: bytes) -> None:
        self.logs[partition].append_as_leader(records)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.logs[partition].log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.logs[partition].log_end_offset

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        return self.logs[partition].read(offset, max_bytes, isolation="log_end").read()

    def close(self) -> None:
        for lg in self.logs.values():
            lg.close()
