"""Where the coordinator's records live: the ``__consumer_offsets`` topic of this broker.

:class:`OffsetsTopicStore` creates the topic on first use with Kafka's settings
(``GroupCoordinatorService.groupMetadataTopicConfigs``: ``cleanup.policy=compact``,
``compression.type=producer``, ``segment.bytes`` = ``offsets.topic.segment.bytes``, 100 MiB), appends
one batch per coordinator write to the group's partition, and reads every partition back on load.

tierlog has no log cleaner yet, so the compacted topic only grows; loading replays all of it (last
record per key wins, tombstones delete). :class:`MemoryStore` is the in-memory double used by the
unit tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Protocol

from tierlog.coordinator.records import OFFSETS_TOPIC
from tierlog.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError, error_for_code
from tierlog.records import build_batch, iter_batches, iter_records

log = logging.getLogger(__name__)

__all__ = ["MemoryStore", "OffsetsTopicStore", "RecordStore"]

OFFSETS_TOPIC_SEGMENT_BYTES_DEFAULT = 100 * 1024 * 1024
_LOAD_READ_BYTES = 5 * 1024 * 1024  # Kafka's offsets.load.buffer.size default

Record = tuple[bytes, bytes | None]


class RecordStore(Protocol):
    def num_partitions(self) -> int:
        """Partitions of the topic (the configured count until it exists)."""

    def ensure_created(self) -> None:
        """Create the topic if it does not exist yet."""

    def append(self, partition: int, records: list[Record]) -> None:
        """Append records atomically (one batch); raise KafkaError when the write fails."""

    def read_all(self) -> Iterator[tuple[int, Record]]:
        """(partition, record) for every record stored, partition by partition in offset order."""


class OffsetsTopicStore:
    def __init__(self, broker):
        self.broker = broker
        cfg = broker.config
        self.configured_partitions: int = cfg["offsets.topic.num.partitions"]
        self.replication_factor: int = cfg["offsets.topic.replication.factor"]
        self.segment_bytes: int = int(cfg.get("offsets.topic.segment.bytes", OFFSETS_TOPIC_SEGMENT_BYTES_DEFAULT))

    def _topic(self):
        return self.broker.controller.image.topics.get(OFFSETS_TOPIC)

    def exists(self) -> bool:
        return self._topic() is not None

    def num_partitions(self) -> int:
        topic = self._topic()
        # An existing topic's partition count wins over the setting (Kafka would misroute groups).
        return len(topic.partitions) if topic is not None else self.configured_partitions

    def ensure_created(self) -> None:
        if self.exists():
            return
        controller = self.broker.controller
        rf = max(1, min(self.replication_factor, len(controller.image.brokers)))
        try:
            controller.create_topic(OFFSETS_TOPIC, self.configured_partitions, rf, configs={
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.segment_bytes),
            })
            log.info("Created %s with %d partitions", OFFSETS_TOPIC, self.configured_partitions)
        except TopicAlreadyExistsError:
            pass

    def append(self, partition: int, records: list[Record]) -> None:
        self.ensure_created()
        now = int(time.time() * 1000)
        batch = build_batch([(key, value, [], now) for key, value in records])
        try:
            self.broker.replica_manager.append_records(OFFSETS_TOPIC, partition, batch)
        except OSError as e:
            raise error_for_code(56)(f"cannot append to {OFFSETS_TOPIC}-{partition}: {e}") from e

    def read_all(self) -> Iterator[tuple[int, Record]]:
        if not self.exists():
            return
        rm = self.broker.replica_manager
        for p in range(self.num_partitions()):
            part = rm.partitions.get((OFFSETS_TOPIC, p))
            if part is None:
                raise UnknownTopicOrPartitionError(f"{OFFSETS_TOPIC}-{p} is not hosted here")
            lg = part.log
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                data = lg.read(offset, _LOAD_READ_BYTES, isolation="log_end").read()
                if not data:
                    break
                view = memoryview(data)
                next_offset = offset
                for _pos, header in iter_batches(view):
                    next_offset = header.last_offset + 1
                for rec in iter_records(view, allow_partial_tail=True):
                    if rec.key is not None:
                        yield p, (rec.key, rec.value)
                if next_offset <= offset:
                    break
                offset = next_offset


class MemoryStore:
    """An in-memory ``__consumer_offsets`` for tests: ``records[p]`` lists what was appended."""

    def __init__(self, num_partitions: int = 50):
        self._n = num_partitions
        self.created = False
        self.records: dict[int, list[Record]] = {}
        self.fail_with: KafkaError | None = None

    def num_partitions(self) -> int:
        return self._n

    def ensure_created(self) -> None:
        self.created = True

    def append(self, partition: int, records: list[Record]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.created = True
        self.records.setdefault(partition, []).extend(records)

    def read_all(self) -> Iterator[tuple[int, Record]]:
        for p in sorted(self.records):
            for rec in self.records[p]:
                yield p, rec
