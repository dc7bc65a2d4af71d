"""The coordinator state of one ``__consumer_offsets`` partition (Kafka's ``GroupCoordinatorShard``).

A shard holds the partition's :class:`~tierlog.coordinator.group_metadata_manager.GroupMetadataManager`
(membership) and :class:`~tierlog.coordinator.offset_metadata_manager.OffsetMetadataManager`
(committed offsets), the partition's timers, and the writer both managers append through. It is
built when the partition is loaded: :meth:`replay` applies each record read back (GroupMetadata
records to the group manager, OffsetCommit records to the offset manager, those of a transactional batch
held pending until the producer's COMMIT or ABORT marker read later), then :meth:`on_loaded`
starts the timers. :meth:`on_unloaded` cancels them and answers parked requests; the shard is then
dropped with its state.

The operations that need both managers live here, as in Kafka: DeleteGroups (the offsets'
tombstones, then the group's), the periodic ``cleanup_group_metadata`` (expired offsets, then the
groups they leave empty) and the removal of deleted topics' offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.consumer_group_manager import ConsumerGroupManager, TopicsSource
from tierlog.coordinator.consumer_group_records import is_consumer_group_key
from tierlog.coordinator.group_metadata_manager import GroupMetadataManager, map_append_error
from tierlog.coordinator.offset_metadata_manager import OffsetMetadataManager
from tierlog.coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tierlog.coordinator.storage import LoadedMarker, LoadedRecord, Record, RecordStore
from tierlog.coordinator.timer import ScopedTimer
from tierlog.errors import NO_ERROR, KafkaError

log = logging.getLogger(__name__)

__all__ = ["GroupCoordinatorShard"]

_CLEANUP_KEY = "offsets-cleanup"  # Kafka's GROUP_EXPIRATION_KEY


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: CoordinatorConfig, store: RecordStore, timer: ScopedTimer,
                 wall_clock: Callable[[], int], topics: TopicsSource | None = None):
        self.partition = partition
        self.config = config
        self.store = store
        self.timer = timer
        self.consumer_group_manager = ConsumerGroupManager(config, timer, self.append, wall_clock, topics)
        self.group_metadata_manager = GroupMetadataManager(config, timer, self.append, wall_clock,
                                                           self.consumer_group_manager)
        self.offset_metadata_manager = OffsetMetadataManager(config, self.group_metadata_manager, self.append,
                                                             wall_clock)

    def __repr__(self) -> str:
        return (f"GroupCoordinatorShard(partition={self.partition}, "
                f"groups={len(self.group_metadata_manager.groups)}, "
                f"groups_with_offsets={len(self.offset_metadata_manager.offsets)})")

    # ================================================================== records

    def append(self, records: list[CoordinatorRecord], producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Write records to this partition as one batch (of the producer's transaction when ``producer_id`` is
        given); returns its base offset. Raises KafkaError."""
        return self.store.append(self.partition, [(encode_key(k), encode_value(v)) for k, v in records],
                                 producer_id, producer_epoch)

    def replay(self, key: OffsetCommitKey | GroupMetadataKey,
               value: OffsetCommitValue | GroupMetadataValue | None, producer_id: int = -1,
               record_offset: int = -1) -> None:
        if isinstance(key, OffsetCommitKey):
            self.offset_metadata_manager.replay(key, value, producer_id, record_offset)
        elif is_consumer_group_key(key):
            self.consumer_group_manager.replay(key, value)
        else:
            self.group_metadata_manager.replay(key, value)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` was written to (or read from) this partition."""
        self.offset_metadata_manager.replay_end_transaction(producer_id, commit)

    def replay_all(self, records: Iterable[Record | LoadedRecord | LoadedMarker]) -> int:
        """Decode and replay records (and transaction markers) read from the partition; returns how many
        were read. Records of types tierlog does not use (share and streams groups) and malformed ones are
        skipped."""
        count = 0
        for entry in records:
            count += 1
            producer_id = record_offset = -1
            if isinstance(entry, LoadedMarker):
                self.replay_end_transaction(entry.producer_id, entry.commit)
                continue
            if isinstance(entry, LoadedRecord):
                key_bytes, value_bytes = entry.key, entry.value
                producer_id, record_offset = entry.producer_id, entry.offset
            else:
                key_bytes, value_bytes = entry
            try:
                key = decode_key(key_bytes)
                if isinstance(key, UnknownKey):
                    continue
                value = decode_value(key, value_bytes)
            except RecordFormatError as e:
                log.warning("Skipping a malformed __consumer_offsets-%d record: %s", self.partition, e)
                continue
            self.replay(key, value, producer_id, record_offset)
        return count

    def _write_and_replay(self, records: list[CoordinatorRecord], what: str) -> bool:
        try:
            base = self.append(records)
        except KafkaError as e:
            log.warning("Failed to write %d record(s) for %s: %s", len(records), what, e)
            return False
        self._replay_written(records, base)
        return True

    def _replay_written(self, records: list[CoordinatorRecord], base: int | None) -> None:
        for i, (key, value) in enumerate(records):
            self.replay(key, value, -1, base + i if isinstance(base, int) and base >= 0 else -1)

    # ================================================================== load / unload

    def on_loaded(self) -> None:
        self.group_metadata_manager.on_loaded()
        self.consumer_group_manager.on_loaded()
        self._schedule_cleanup()

    def on_unloaded(self) -> None:
        self.timer.clear()
        self.group_metadata_manager.on_unloaded()
        self.consumer_group_manager.on_unloaded()

    # ================================================================== DeleteGroups

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Delete empty groups and their offsets in one write; an error code per group."""
        results: dict[str, int] = {}
        records: list[CoordinatorRecord] = []
        deleted = []
        for group_id in group_ids:
            try:
                self.group_metadata_manager.validate_delete_group(group_id)
            except KafkaError as e:
                results[group_id] = e.code
                continue
            self.offset_metadata_manager.delete_all_offsets(group_id, records)
            self.group_metadata_manager.create_group_tombstone_records(group_id, records)
            deleted.append(group_id)
        if not deleted:
            return results
        try:
            base = self.append(records)
        except KafkaError as e:
            code = map_append_error(e).code
            results.update((group_id, code) for group_id in deleted)
            return results
        self._replay_written(records, base)
        results.update((group_id, NO_ERROR) for group_id in deleted)
        log.info("Deleted group(s) %s", ", ".join(deleted))
        return results

    # ================================================================== expiration and deleted topics

    def _schedule_cleanup(self) -> None:
        self.timer.schedule(_CLEANUP_KEY, self.config.offsets_retention_check_interval_ms, self._cleanup)

    def _cleanup(self) -> None:
        try:
            self.cleanup_group_metadata()
        finally:
            self._schedule_cleanup()

    def cleanup_group_metadata(self) -> int:
        """Expire offsets past retention and delete empty groups left without offsets; returns tombstones."""
        written = 0
        for group_id in self.group_metadata_manager.group_ids():
            records: list[CoordinatorRecord] = []
            if self.offset_metadata_manager.cleanup_expired_offsets(group_id, records):
                self.group_metadata_manager.maybe_delete_group(group_id, records)
            if records and self._write_and_replay(records, f"group {group_id}"):
                written += len(records)
        if written:
            log.info("Wrote %d tombstone(s) to __consumer_offsets-%d while expiring offsets and groups",
                     written, self.partition)
        return written

    def on_partitions_deleted(self, topics: set[str]) -> None:
        """Drop the committed offsets of deleted topics (Kafka's ``onPartitionsDeleted``)."""
        for group_id, records in self.offset_metadata_manager.on_partitions_deleted(topics).items():
            self._write_and_replay(records, f"group {group_id}")
