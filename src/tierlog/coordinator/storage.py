"""Where the coordinator's records live: the ``__consumer_offsets`` topic.

Two contracts, both defined here so the layers above only hand in what they own:

- :class:`RecordStore` is what the coordinator needs: the partition count (groups are routed by
  it), create the topic, append one partition's records atomically, read one partition back when
  it is loaded. :class:`OffsetsTopicStore` implements it on the broker's log; :class:`MemoryStore`
  is the in-memory double of the unit tests.
- :class:`OffsetsTopicLog` is what :class:`OffsetsTopicStore` needs from the broker: the topic's
  partition count and the live brokers (controller), topic creation (controller), append, and a
  partition's log start, log end and reads (replica manager). The composition root passes an
  object with these methods; nothing here sees the broker.

:class:`OffsetsTopicStore` creates the topic on first use with Kafka's settings
(``GroupCoordinatorService.groupMetadataTopicConfigs``: ``cleanup.policy=compact``,
``compression.type=producer``, ``segment.bytes`` = ``offsets.topic.segment.bytes``, 100 MiB), appends
one batch per coordinator write to the group's partition, and reads a partition from its log start
to its log end when the partition is loaded (Kafka's ``CoordinatorLoaderImpl``, 5 MiB reads).

A transactional offset commit (TxnOffsetCommit) is appended as a transactional batch of the producer's id
and epoch, without sequence, as Kafka's coordinator runtime writes it; loading yields such records as
:class:`LoadedRecord` with their producer id and the COMMIT and ABORT markers as :class:`LoadedMarker`, so the
shard can hold them pending until their marker (Kafka's loader reads control batches too).

The log cleaner compacts the topic (cleanup.policy=compact), so loading replays what it kept: mostly
the live keys, plus what is not cleaned yet (last record per key wins, tombstones delete).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tierlog.config import BROKER_CONFIGS
from tierlog.coordinator.records import OFFSETS_TOPIC
from tierlog.errors import KafkaError, KafkaStorageError, TopicAlreadyExistsError
from tierlog.records import build_batch, decode_batch, iter_batches
from tierlog.records.control import COMMIT, parse_end_txn_marker

log = logging.getLogger(__name__)

__all__ = ["LoadedMarker", "LoadedRecord", "MemoryStore", "OffsetsTopicLog", "OffsetsTopicStore", "Record",
           "RecordStore"]

_LOAD_READ_BYTES = 5 * 1024 * 1024  # Kafka's offsets.load.buffer.size default

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """A record read back: its offset in the partition and the producer id of its batch (-1: not transactional)."""
    key: bytes
    value: bytes | None
    offset: int
    producer_id: int = -1


@dataclass(frozen=True, slots=True)
class LoadedMarker:
    """A COMMIT or ABORT marker read back: it completes the producer's pending transactional offsets."""
    producer_id: int
    commit: bool
    offset: int


class RecordStore(Protocol):
    def num_partitions(self) -> int:
        """Partitions of the topic (the configured count until it exists)."""

    def ensure_created(self) -> None:
        """Create the topic if it does not exist yet."""

    def append(self, partition: int, records: list[Record], producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Append records atomically (one batch, transactional when ``producer_id`` is given); the batch's
        base offset. Raise KafkaError when the write fails."""

    def read_partition(self, partition: int) -> Iterator[Record | LoadedRecord | LoadedMarker]:
        """Every record (and transaction marker) of ``partition`` in offset order (nothing while the topic
        does not exist)."""


class OffsetsTopicLog(Protocol):
    """The broker's side of ``__consumer_offsets`` as :class:`OffsetsTopicStore` uses it.

    Every method but :meth:`create_topic` and :meth:`internal_topic_replication_factor` names the topic, so a replica
    manager with these methods fits as it is. Failures raise :class:`~tierlog.errors.KafkaError`
    (NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION for a partition not led here,
    KAFKA_STORAGE_ERROR for a failed write).
    """

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the cluster metadata; None while it does not exist."""

    def internal_topic_replication_factor(self, topic: str, setting: str, configured: int) -> int:
        """The replication factor to create ``topic`` with when ``setting`` asks for ``configured``: the
        controller's rule (capped at 1 on a single node, with one warning; Kafka's rule in a cluster)."""

    def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> Any:
        """Create ``topic``; raises TopicAlreadyExistsError when it exists."""

    def append(self, topic: str, partition: int, records: bytes) -> Any:
        """Append a record batch as the partition's leader (origin COORDINATOR); a dict with its ``base_offset``."""

    def log_start_offset(self, topic: str, partition: int) -> int:
        """The first offset of the partition's log."""

    def log_end_offset(self, topic: str, partition: int) -> int:
        """The offset after the last record of the partition's log."""

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset``, at most ``max_bytes`` (at least one batch), up to the log end."""


class OffsetsTopicStore:
    def __init__(self, log: OffsetsTopicLog, *, num_partitions: int, replication_factor: int,
                 segment_bytes: int = BROKER_CONFIGS["offsets.topic.segment.bytes"].default):
        self.log = log
        self.configured_partitions = num_partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    @classmethod
    def from_broker_config(cls, log: OffsetsTopicLog, cfg) -> OffsetsTopicStore:
        """``offsets.topic.num.partitions``, ``offsets.topic.replication.factor``, ``offsets.topic.segment.bytes``."""
        return cls(log, num_partitions=cfg["offsets.topic.num.partitions"],
                   replication_factor=cfg["offsets.topic.replication.factor"],
                   segment_bytes=cfg["offsets.topic.segment.bytes"])

    def exists(self) -> bool:
        return self.log.partition_count(OFFSETS_TOPIC) is not None

    def num_partitions(self) -> int:
        # An existing topic's partition count wins over the setting (Kafka would misroute groups).
        count = self.log.partition_count(OFFSETS_TOPIC)
        return count if count is not None else self.configured_partitions

    def ensure_created(self) -> None:
        if self.exists():
            return
        rf = self.log.internal_topic_replication_factor(OFFSETS_TOPIC, "offsets.topic.replication.factor",
                                                        self.replication_factor)
        try:
            self.log.create_topic(OFFSETS_TOPIC, self.configured_partitions, rf, {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.segment_bytes),
            })
            log.info("Created %s with %d partitions", OFFSETS_TOPIC, self.configured_partitions)
        except TopicAlreadyExistsError:
            pass

    def append(self, partition: int, records: list[Record], producer_id: int = -1, producer_epoch: int = -1) -> int:
        self.ensure_created()
        now = int(time.time() * 1000)
        batch = build_batch([(key, value, [], now) for key, value in records], producer_id=producer_id,
                            producer_epoch=producer_epoch, is_transactional=producer_id >= 0)
        try:
            info = self.log.append(OFFSETS_TOPIC, partition, batch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {OFFSETS_TOPIC}-{partition}: {e}") from e
        return info["base_offset"] if isinstance(info, dict) else -1

    def read_partition(self, partition: int) -> Iterator[LoadedRecord | LoadedMarker]:
        if not self.exists():
            return
        offset = self.log.log_start_offset(OFFSETS_TOPIC, partition)
        end = self.log.log_end_offset(OFFSETS_TOPIC, partition)
        while offset < end:
            data = self.log.read(OFFSETS_TOPIC, partition, offset, _LOAD_READ_BYTES)
            if not data:
                break
            view = memoryview(data)
            next_offset = offset
            for pos, header in iter_batches(view):
                next_offset = header.last_offset + 1
                _, batch_records = decode_batch(view, pos)
                if header.is_control:
                    for rec in batch_records:
                        try:
                            control_type, _ = parse_end_txn_marker(rec)
                        except KafkaError:
                            continue
                        yield LoadedMarker(header.producer_id, control_type == COMMIT, rec.offset)
                    continue
                producer_id = header.producer_id if header.is_transactional else -1
                for rec in batch_records:
                    if rec.key is not None:
                        yield LoadedRecord(rec.key, rec.value, rec.offset, producer_id)
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

    def append(self, partition: int, records: list[Record], producer_id: int = -1, producer_epoch: int = -1) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        self.created = True
        stored = self.records.setdefault(partition, [])
        base = len(stored)
        stored.extend(records)
        return base

    def read_partition(self, partition: int) -> Iterator[Record]:
        yield from list(self.records.get(partition, ()))
