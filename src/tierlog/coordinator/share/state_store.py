"""The share-partitions' delivery state in ``__share_group_state`` (Kafka's share coordinator and its
``DefaultStatePersister`` in one, on this broker's log).

Created on first need with Kafka's settings (``share.coordinator.state.topic.*``, compacted). Each write is a
``ShareSnapshot`` record of the share-partition's whole state (start offset, state epoch, the in-flight records
as state batches); Kafka's coordinator writes ``ShareUpdate`` records between snapshots, which this reader
also applies when it loads a partition, so a topic written by either reads back. A state partition is read
whole the first time one of its share-partitions is needed, then kept in memory while this broker leads it (its
only writer then); :meth:`ShareStateStore.unload` forgets it when leadership moves.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from tierlog.coordinator.share.records import (
    SHARE_STATE_TOPIC,
    SNAPSHOT,
    ShareSnapshot,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot,
    partition_for,
)
from tierlog.coordinator.storage import OffsetsTopicLog
from tierlog.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaStorageError,
    NotCoordinatorError,
    TopicAlreadyExistsError,
)
from tierlog.records import build_batch
from tierlog.records.batch import iter_batches
from tierlog.records.record import iter_records

log = logging.getLogger(__name__)

_READ_BYTES = 1 << 20
StateKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


class ShareStateStore:
    def __init__(self, log_: OffsetsTopicLog, *, num_partitions: int, replication_factor: int, min_isr: int,
                 segment_bytes: int, leader_epoch: Callable[[int], int | None] = lambda partition: 0):
        """``leader_epoch(partition)``: this broker's leader epoch of that state partition, None when it does not
        lead it; what was read of a partition is read again when the epoch changed (another leader wrote)."""
        self.log = log_
        self.leader_epoch = leader_epoch
        self._epochs: dict[int, int] = {}
        self.configured_partitions = num_partitions
        self.replication_factor = replication_factor
        self.min_isr = min_isr
        self.segment_bytes = segment_bytes
        self._loaded: dict[int, dict[StateKey, ShareSnapshot]] = {}

    def num_partitions(self) -> int:
        count = self.log.partition_count(SHARE_STATE_TOPIC)
        return count if count is not None else self.configured_partitions

    def ensure_created(self) -> None:
        if self.log.partition_count(SHARE_STATE_TOPIC) is not None:
            return
        rf = self.log.internal_topic_replication_factor(
            SHARE_STATE_TOPIC, "share.coordinator.state.topic.replication.factor", self.replication_factor)
        try:
            self.log.create_topic(SHARE_STATE_TOPIC, self.configured_partitions, rf, {
                "cleanup.policy": "compact", "compression.type": "uncompressed",
                "min.insync.replicas": str(min(self.min_isr, rf)), "segment.bytes": str(self.segment_bytes)})
            log.info("Created %s with %d partitions", SHARE_STATE_TOPIC, self.configured_partitions)
        except TopicAlreadyExistsError:
            pass

    def read(self, key: StateKey) -> ShareSnapshot | None:
        """The share-partition's persisted state, or None when it has none. Raises KafkaError
        (COORDINATOR_NOT_AVAILABLE) when its state partition cannot be read here (in a cluster the share-partition
        leader asks the state partition's leader with ReadShareGroupState: server/share_persister.py)."""
        if self.log.partition_count(SHARE_STATE_TOPIC) is None:
            return None
        partition = self.partition_of(key)
        try:
            return self._partition(partition).get(key)
        except KafkaError as e:
            raise CoordinatorNotAvailableError(
                f"the share state partition {SHARE_STATE_TOPIC}-{partition} cannot be read here: {e.message}") from e

    def write(self, key: StateKey, snapshot: ShareSnapshot) -> None:
        self.ensure_created()
        partition = self.partition_of(key)
        states = self._partition(partition)
        now = int(time.time() * 1000)
        batch = build_batch([(encode_key(*key, SNAPSHOT), encode_snapshot(snapshot), [], now)])
        try:
            self.log.append(SHARE_STATE_TOPIC, partition, batch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {SHARE_STATE_TOPIC}-{partition}: {e}") from e
        states[key] = snapshot

    def delete(self, key: StateKey) -> None:
        """A tombstone for the share-partition's state (DeleteShareGroupOffsets)."""
        if self.log.partition_count(SHARE_STATE_TOPIC) is None:
            return
        partition = self.partition_of(key)
        states = self._partition(partition)
        if key not in states:
            return
        batch = build_batch([(encode_key(*key, SNAPSHOT), None, [], int(time.time() * 1000))])
        try:
            self.log.append(SHARE_STATE_TOPIC, partition, batch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {SHARE_STATE_TOPIC}-{partition}: {e}") from e
        del states[key]

    def partition_of(self, key: StateKey) -> int:
        """The ``__share_group_state`` partition holding the share-partition's state."""
        return partition_for(key[0], key[1], key[2], self.num_partitions())

    def unload(self, partition: int) -> None:
        """Forget what was read of ``partition`` (its leadership moved: another broker may write it now)."""
        self._loaded.pop(partition, None)
        self._epochs.pop(partition, None)

    def loaded(self) -> set[int]:
        return set(self._loaded)

    def leads(self, partition: int) -> bool:
        return self.leader_epoch(partition) is not None

    def _partition(self, partition: int) -> dict[StateKey, ShareSnapshot]:
        epoch = self.leader_epoch(partition)
        if epoch is None:
            self.unload(partition)
            raise NotCoordinatorError(f"{SHARE_STATE_TOPIC}-{partition} is not led by this broker")
        states = self._loaded.get(partition)
        if states is None or self._epochs.get(partition) != epoch:
            states = self._loaded[partition] = self._load(partition)
            self._epochs[partition] = epoch
        return states

    def _load(self, partition: int) -> dict[StateKey, ShareSnapshot]:
        states: dict[StateKey, ShareSnapshot] = {}
        offset = self.log.log_start_offset(SHARE_STATE_TOPIC, partition)
        end = self.log.log_end_offset(SHARE_STATE_TOPIC, partition)
        while offset < end:
            data = self.log.read(SHARE_STATE_TOPIC, partition, offset, _READ_BYTES)
            if not data:
                break
            view = memoryview(data)
            next_offset = offset
            for _pos, header in iter_batches(view):
                next_offset = header.last_offset + 1
            for rec in iter_records(view, allow_partial_tail=True):
                if rec.key is None:
                    continue
                rtype, group, topic_id, part = decode_key(bytes(rec.key))
                key = (group, topic_id, part)
                if rec.value is None:
                    states.pop(key, None)
                elif rtype == SNAPSHOT:
                    states[key] = decode_value(rtype, bytes(rec.value))
                elif key in states:
                    apply_update(states[key], decode_value(rtype, bytes(rec.value)))
            if next_offset <= offset:
                break
            offset = next_offset
        return states


def apply_update(base: ShareSnapshot, update: ShareSnapshot) -> None:
    """Kafka's merge of a ShareUpdate (or a WriteShareGroupState) into the state: newer batches win offset by
    offset; a start offset of -1 keeps the recorded one."""
    if update.start_offset >= 0:
        base.start_offset = update.start_offset
    per_offset: dict[int, tuple[int, int]] = {}
    for b in base.state_batches + update.state_batches:
        for off in range(b.first_offset, b.last_offset + 1):
            per_offset[off] = (b.delivery_state, b.delivery_count)
    batches: list[StateBatch] = []
    for off in sorted(o for o in per_offset if o >= base.start_offset):
        state, count = per_offset[off]
        if batches and batches[-1].last_offset == off - 1 and (batches[-1].delivery_state, batches[-1].delivery_count) \
                == (state, count):
            batches[-1] = StateBatch(batches[-1].first_offset, off, state, count)
        else:
            batches.append(StateBatch(off, off, state, count))
    base.state_batches = batches
    base.snapshot_epoch = update.snapshot_epoch
