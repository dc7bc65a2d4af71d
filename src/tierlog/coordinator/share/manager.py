"""The share-partitions this broker leads (Kafka's ``SharePartitionManager``): made on a share group's first
fetch of a partition, initialized from ``__share_group_state`` or, without persisted state, where the group's
``share.auto.offset.reset`` says (the log's end by default, Kafka's ``latest``), and written back after each change
of their delivery state by an acknowledgement or a release.

The state is read and written through a :class:`Persister` (Kafka's ``Persister``; the broker's is
server/share_persister.py: this broker's log, or the share coordinator RPCs to the state partition's leader)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tierlog.coordinator.share.records import ShareSnapshot
from tierlog.coordinator.share.share_partition import RecordState, SharePartition
from tierlog.errors import KafkaError


class Persister(Protocol):
    async def read(self, key: tuple[str, uuid.UUID, int], leader_epoch: int) -> ShareSnapshot | None:
        """The persisted state, None when there is none."""

    def write(self, key: tuple[str, uuid.UUID, int], snapshot: ShareSnapshot) -> None:
        """Write (or queue) the state; raises KafkaError when a write here fails."""

    async def flush(self, key: tuple[str, uuid.UUID, int]) -> None:
        """Wait for queued writes of ``key``; raises KafkaError when the last one failed."""

    async def initialize(self, key: tuple[str, uuid.UUID, int], snapshot: ShareSnapshot) -> None:
        """Start the state over (a new state epoch and start offset)."""

    async def delete(self, key: tuple[str, uuid.UUID, int]) -> None: ...

    async def summary(self, key: tuple[str, uuid.UUID, int]) -> ShareSnapshot | None: ...


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The share group settings of the broker (``group.share.*``)."""

    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    max_share_sessions: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_size: int

    @classmethod
    def from_broker_config(cls, cfg) -> ShareConfig:
        return cls(cfg["group.share.record.lock.duration.ms"], cfg["group.share.delivery.count.limit"],
                   cfg["group.share.partition.max.record.locks"], cfg["group.share.max.share.sessions"],
                   cfg["group.share.session.timeout.ms"], cfg["group.share.heartbeat.interval.ms"],
                   cfg["group.share.max.size"])


Key = tuple[str, uuid.UUID, int]


class SharePartitionManager:
    def __init__(self, config: ShareConfig, store: Persister | None,
                 dlq_enabled: Callable[[str], bool] = lambda group_id: False):
        self.config = config
        self.store = store
        self.partitions: dict[Key, SharePartition] = {}
        self._loading: dict[Key, asyncio.Lock] = {}
        self._persisted: dict[Key, int] = {}  # the version last written
        #: the share-partitions with state made or altered here, kept when forget_group drops them from the cache
        #: (DescribeShareGroupOffsets without topics answers for these)
        self._known: set[Key] = set()
        #: group id -> whether the group has a dead-letter queue topic now (KIP-1191)
        self.dlq_enabled = dlq_enabled

    async def get(self, group_id: str, topic_id: uuid.UUID, topic: str, partition: int,
                  initial_offset: Callable[[], int], leader_epoch: int = 0,
                  lock_duration_ms: int | None = None) -> SharePartition:
        """The share-partition, made on first use: from its persisted state, or starting at ``initial_offset()``
        (the group's ``share.auto.offset.reset``). ``lock_duration_ms`` is the group's acquisition lock (its
        ``share.record.lock.duration.ms``), the broker's when None; it applies to later acquisitions too."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:  # one load per share-partition, however many fetches wait for it
            async with self._loading.setdefault(key, asyncio.Lock()):
                sp = self.partitions.get(key)
                if sp is None:
                    sp = await self._load(key, topic, initial_offset, leader_epoch, lock_duration_ms)
            self._loading.pop(key, None)
        if lock_duration_ms is not None:
            sp.lock_duration_ms = lock_duration_ms
        return sp

    async def _load(self, key: Key, topic: str, initial_offset: Callable[[], int], leader_epoch: int,
                    lock_duration_ms: int | None) -> SharePartition:
        group_id, _topic_id, partition = key
        cfg = self.config
        if self.store is not None:
            # the writes of an earlier share-partition of this key (one dropped by forget_group) land first
            with contextlib.suppress(KafkaError):
                await self.store.flush(key)
        state = await self.store.read(key, leader_epoch) if self.store is not None else None
        self._known.add(key)  # before the cache holds it: every cached share-partition is known
        sp = self.partitions[key] = SharePartition(
            group_id, topic, partition, lock_duration_ms=lock_duration_ms or cfg.record_lock_duration_ms,
            delivery_count_limit=cfg.delivery_count_limit, max_record_locks=cfg.partition_max_record_locks,
            dlq_enabled=lambda g=group_id: self.dlq_enabled(g))
        sp.leader_epoch = leader_epoch
        if state is not None and state.start_offset >= 0:
            sp.state_epoch = state.state_epoch
            if state.create_timestamp >= 0:
                sp.created_ms = state.create_timestamp
            sp.initialize(state.start_offset, state.state_batches)
        else:
            sp.state_epoch = state.state_epoch if state is not None else 0
            sp.initialize(initial_offset())
        self._persisted[key] = sp.version
        return sp

    def group_partitions(self, group_id: str) -> list[Key]:
        """The share-partitions of the group this broker made or altered, cached or not."""
        return sorted(k for k in self._known if k[0] == group_id)

    def persist(self, sp: SharePartition, topic_id: uuid.UUID, leader_epoch: int | None = None) -> None:
        key = (sp.group_id, topic_id, sp.partition)
        if self.store is None or self._persisted.get(key) == sp.version:
            return
        if leader_epoch is not None:
            sp.leader_epoch = leader_epoch
        now = int(time.time() * 1000)
        batches = sp.snapshot_batches()
        complete = sum(b.last_offset - b.first_offset + 1 for b in batches if b.delivery_state in (2, 4))
        self.store.write(key, ShareSnapshot(sp.version, sp.state_epoch, sp.leader_epoch, sp.start_offset,
                                            sp.created_ms, now, batches, complete))
        self._persisted[key] = sp.version

    async def flush(self, sp: SharePartition, topic_id: uuid.UUID) -> None:
        """Wait until the share-partition's state is written (a write to another broker is sent in the
        background); raises KafkaError when it could not be."""
        if self.store is not None:
            await self.store.flush((sp.group_id, topic_id, sp.partition))

    def release_member(self, group_id: str, member_id: str) -> list[tuple[SharePartition, uuid.UUID]]:
        """Release a member's records; the share-partitions changed."""
        changed = []
        for (group, topic_id, _p), sp in self.partitions.items():
            if group == group_id and sp.release_member(member_id):
                self.persist(sp, topic_id)
                changed.append((sp, topic_id))
        return changed

    def expire_locks(self) -> list[tuple[SharePartition, uuid.UUID]]:
        """Release the records whose acquisition lock expired; the share-partitions changed."""
        changed = []
        for (_g, topic_id, _p), sp in self.partitions.items():
            if sp.expire_locks():
                self.persist(sp, topic_id)
                changed.append((sp, topic_id))
        return changed

    async def alter(self, group_id: str, topic_id: uuid.UUID, topic: str, partition: int, start_offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition's state starts over at ``start_offset`` (nothing in
        flight), a new state epoch, initialized at once through the persister (Kafka's group coordinator calls
        InitializeShareGroupState). Nothing is kept in this broker's cache: the partition's leader, this broker or
        another, reads the new state when it next makes the share-partition (the group is empty, so no leader
        holds it any more: see :meth:`forget_group`)."""
        key = (group_id, topic_id, partition)
        old = self.partitions.pop(key, None)
        self._persisted.pop(key, None)
        self._known.add(key)
        if self.store is None:
            return
        state = await self.store.summary(key)
        epoch = max(old.state_epoch if old is not None else 0, state.state_epoch if state is not None else 0) + 1
        version = (old.version + 1) if old is not None else 1
        now = int(time.time() * 1000)
        await self.store.initialize(key, ShareSnapshot(version, epoch, old.leader_epoch if old is not None else 0,
                                                       start_offset, now, now, [], 0))

    async def delete(self, group_id: str, topic_id: uuid.UUID, partitions: list[int]) -> None:
        """DeleteShareGroupOffsets: the share-partitions' state is gone; the group starts them afresh."""
        for p in partitions:
            key = (group_id, topic_id, p)
            self.partitions.pop(key, None)
            self._persisted.pop(key, None)
            self._known.discard(key)
            if self.store is not None:
                await self.store.delete(key)

    def forget_group(self, group_id: str) -> None:
        """The group has no share session on this broker any more (Kafka's ``ShareGroupListener.onGroupEmpty``):
        its share-partitions leave the cache, so the next fetch reads their state again from the persister, which
        holds what AlterShareGroupOffsets or DeleteShareGroupOffsets made of it meanwhile (at the group
        coordinator, possibly another broker). One with records on their way to the DLQ stays until they are
        written (its state is still to change)."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            sp = self.partitions[key]
            if sp.dlq_pending or any(r.state is RecordState.ARCHIVING for r in sp.in_flight.values()):
                continue
            del self.partitions[key]
            self._persisted.pop(key, None)

    def forget(self, topic_id: uuid.UUID, partition: int) -> None:
        """The partition is not led here: drop every group's share-partition of it (kept in memory only)."""
        for key in [k for k in self.partitions if k[1] == topic_id and k[2] == partition]:
            del self.partitions[key]
            self._persisted.pop(key, None)
            self._known.discard(key)

    async def start_offset(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The share-partition start offset, from memory or the persisted state; None when never initialized."""
        sp = self.partitions.get((group_id, topic_id, partition))
        if sp is not None:
            return sp.start_offset
        state = await self.store.summary((group_id, topic_id, partition)) if self.store is not None else None
        return state.start_offset if state is not None else None
