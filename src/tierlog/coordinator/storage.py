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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from crc32c import crc32c

from tierlog.config import BROKER_CONFIGS
from tierlog.coordinator.records import OFFSETS_TOPIC
from tierlog.errors import CorruptMessageError, KafkaError, KafkaStorageError, TopicAlreadyExistsError
from tierlog.records import build_batch
from tierlog.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    read_header,
)
from tierlog.records.compression import CompressionType, decompress_bounded, decompression_limit
from tierlog.records.control import COMMIT, parse_end_txn_marker
from tierlog.records.record import Record as BatchRecord
from tierlog.records.scan import ScannedRecords, last_by_key, scan_batch_records, scan_batches

log = logging.getLogger(__name__)

__all__ = ["LoadedMarker", "LoadedRecord", "MemoryStore", "OffsetsTopicLog", "OffsetsTopicStore", "PartitionRecords",
           "Record", "RecordStore"]

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

    def read_partition(self, partition: int) -> Iterable[Record | LoadedRecord | LoadedMarker]:
        """The records (and transaction markers) of ``partition`` to replay, in offset order (nothing while
        the topic does not exist); records superseded by a later one of their key may be left out."""


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

    def read_partition(self, partition: int) -> PartitionRecords:
        """The partition's records from its log start to its log end, without those a later non-transactional
        record of the same key supersedes (see :class:`PartitionRecords`)."""
        loaded = PartitionRecords()
        if not self.exists():
            return loaded
        offset = self.log.log_start_offset(OFFSETS_TOPIC, partition)
        end = self.log.log_end_offset(OFFSETS_TOPIC, partition)
        while offset < end:
            data = self.log.read(OFFSETS_TOPIC, partition, offset, _LOAD_READ_BYTES)
            if not data:
                break
            next_offset = loaded.add_read(data)
            if next_offset <= offset:
                break
            offset = next_offset
        return loaded


class PartitionRecords:
    """What loading a partition replays, built read by read (:meth:`add_read`), then iterated in offset order.

    Replay keeps the last record of each key (offsets and group metadata are replaced whole) and a tombstone
    deletes, also the key's pending transactional offsets. So a non-transactional value followed later by a
    non-transactional record of the same key bytes changes nothing the later one does not redo (a transaction
    committing in between loses to the later record, being older), and a non-transactional tombstone followed
    later by another non-transactional tombstone of the key likewise; both are dropped before anything is
    decoded, and a partition of a million commits over ten thousand keys decodes ten thousand. A tombstone
    followed only by a value is kept: it removed pending offsets that the value does not. Transactional
    records and markers are all kept, in order, so pending offsets still wait for their COMMIT (or go at their
    ABORT). One difference from replaying everything: a group that only a dropped commit created (its offsets
    all deleted since) is not created, as after the log cleaner removed that commit. The scan is the compiled
    record scanner; Python runs per batch (its CRC) and per kept record only.
    """

    def __init__(self) -> None:
        self.entries: list[LoadedRecord | LoadedMarker | None] = []
        # key -> index in entries of its last non-transactional record, and of its last such tombstone
        self._last: dict[bytes, int] = {}
        self._last_tombstone: dict[bytes, int] = {}
        self.records_read = 0

    def __iter__(self) -> Iterator[LoadedRecord | LoadedMarker]:
        return (e for e in self.entries if e is not None)

    def add_read(self, data: bytes) -> int:
        """Add the whole batches of one read; the offset after the last one (-1: no whole batch)."""
        view = memoryview(data)
        scanned = scan_batches(data, key_hash2=False)
        nb = scanned.position.shape[0]
        if nb == 0:
            return -1
        _check_crcs(view, scanned)
        records = scanned.records
        counts = scanned.count
        self.records_read += int(counts[counts > 0].sum())  # compressed batches' records: counted below
        attrs = scanned.attributes
        special = (attrs & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)) != 0
        compressed = counts < 0
        if not special.any() and not compressed.any():
            self._add_plain(view, records, np.flatnonzero(_plain_keep(data, records, records.key_length >= 0)))
            return int(scanned.last_offset[-1]) + 1
        # Transactional batches, markers or compressed batches: batch by batch, in order (rare).
        plain = np.repeat(~special, np.maximum(counts, 0)) & (records.key_length >= 0)
        keep = _plain_keep(data, records, plain)
        for b in range(nb):
            attributes = int(attrs[b])
            count = int(counts[b])
            source = view
            if count < 0:
                source, recs = _decompressed(view, scanned, b)
                self.records_read += recs.offset.shape[0]
                rows = np.arange(recs.offset.shape[0])
                if not attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK):
                    rows = np.flatnonzero(_plain_keep(source, recs, recs.key_length >= 0))
            else:
                recs = records
                first = int(scanned.first_record[b])
                rows = first + np.flatnonzero(keep[first:first + count])
            if attributes & CONTROL_FLAG_MASK:
                for i in rows.tolist():
                    marker = _marker(source, recs, i, int(scanned.producer_id[b]))
                    if marker is not None:
                        self.entries.append(marker)
            elif attributes & TRANSACTIONAL_FLAG_MASK:
                pid = int(scanned.producer_id[b])
                for i in rows.tolist():
                    if recs.key_length[i] >= 0:
                        self.entries.append(LoadedRecord(*_key_value(source, recs, i), int(recs.offset[i]), pid))
            else:
                self._add_plain(source, recs, rows[recs.key_length[rows] >= 0])
        return int(scanned.last_offset[-1]) + 1

    def _add_plain(self, view: memoryview, records: ScannedRecords, rows: np.ndarray) -> None:
        """Non-transactional records kept within their read, in offset order: each drops what it supersedes
        (see the class docstring) among those kept from earlier reads."""
        entries, last, last_tombstone = self.entries, self._last, self._last_tombstone
        ks, kl = records.key_start[rows].tolist(), records.key_length[rows].tolist()
        vs, vl = records.value_start[rows].tolist(), records.value_length[rows].tolist()
        for i, o in enumerate(records.offset[rows].tolist()):
            key = view[ks[i]:ks[i] + kl[i]].tobytes()
            value = None if vl[i] < 0 else view[vs[i]:vs[i] + vl[i]].tobytes()
            before = last.get(key)
            if before is not None and entries[before] is not None and entries[before].value is not None:
                entries[before] = None
            if value is None:
                before = last_tombstone.get(key)
                if before is not None:
                    entries[before] = None
                last_tombstone[key] = len(entries)
            last[key] = len(entries)
            entries.append(LoadedRecord(key, value, o))


def _plain_keep(buf, records: ScannedRecords, plain: np.ndarray) -> np.ndarray:
    """Which records of one table to keep, ``plain`` marking the non-transactional keyed ones: all others, and
    of the plain ones the last of each key, and the last tombstone of each key."""
    keep = last_by_key(buf, records, plain)
    tombstones = plain & (records.value_length < 0)
    if tombstones.any():
        keep |= last_by_key(buf, records, tombstones) & tombstones
    return keep


def _check_crcs(view: memoryview, scanned) -> None:
    """Each batch's CRC-32C (from its attributes to its end; the batches of a read are contiguous)."""
    positions = scanned.position.tolist()
    for pos, end in zip(positions, positions[1:] + [scanned.end]):
        stored = int.from_bytes(view[pos + 17:pos + 21], "big")
        if crc32c(view[pos + 21:end]) != stored:
            raise CorruptMessageError(f"record batch at position {pos} of a {OFFSETS_TOPIC} read is corrupt: "
                                      f"stored CRC {stored:#010x}")


def _key_value(view, records: ScannedRecords, i: int) -> tuple[bytes, bytes | None]:
    ks, kl, vs, vl = (int(records.key_start[i]), int(records.key_length[i]), int(records.value_start[i]),
                      int(records.value_length[i]))
    return bytes(view[ks:ks + kl]), (None if vl < 0 else bytes(view[vs:vs + vl]))


def _marker(view, records: ScannedRecords, i: int, producer_id: int) -> LoadedMarker | None:
    key, value = _key_value(view, records, i) if records.key_length[i] >= 0 else (None, None)
    try:
        control_type, _ = parse_end_txn_marker(BatchRecord(key=key, value=value))
    except KafkaError:
        return None
    return LoadedMarker(producer_id, control_type == COMMIT, int(records.offset[i]))


def _decompressed(view: memoryview, scanned, b: int) -> tuple[memoryview, ScannedRecords]:
    """The records of compressed batch ``b``, decompressed and scanned."""
    header = read_header(view, int(scanned.position[b]))
    pos = int(scanned.position[b])
    payload = view[pos + RECORD_BATCH_OVERHEAD:pos + header.size]
    data = decompress_bounded(CompressionType(header.attributes & COMPRESSION_CODEC_MASK), payload,
                              decompression_limit(header.records_count))
    return memoryview(data), scan_batch_records(data, header.records_count, header.base_offset, False)


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
