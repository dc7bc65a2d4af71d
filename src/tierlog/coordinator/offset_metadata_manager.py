"""Committed offsets of the groups of one ``__consumer_offsets`` partition (Kafka's ``OffsetMetadataManager``).

- OffsetCommit: simple consumers and admin tools may commit to a missing or empty group with
  generation -1 (the group is created empty, a "simple" group); members commit within their
  generation, and a commit keeps a classic member's session alive.
- OffsetFetch (all partitions when topics is null), OffsetDelete (not for topics a running
  consumer group subscribes to).
- Expiration (``offsets.retention.minutes``, counted as Kafka's ``offsetExpirationCondition``:
  from the commit for simple and stable consumer groups, from when the group became empty
  otherwise) and removal of the offsets of deleted topics; the shard writes the tombstones.

- TxnOffsetCommit (KIP-98, KIP-447): offsets written in a producer's transaction stay pending, by producer
  id, until a COMMIT marker for that producer reaches this partition (:meth:`replay_end_transaction`) moves
  them to the committed ones, unless a newer plain commit of the same partition was written after them, as
  Kafka keeps the most recent record; an ABORT drops them. OffsetFetch never returns them; with
  ``require_stable`` a partition with pending offsets answers UNSTABLE_OFFSET_COMMIT.

Offsets change only by replaying records (:meth:`replay`), after they were written, as Kafka does;
the groups they belong to are the partition's
:class:`~tierlog.coordinator.group_metadata_manager.GroupMetadataManager`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.group import ClassicGroup, GroupState
from tierlog.coordinator.group_metadata_manager import GroupMetadataManager, map_append_error
from tierlog.coordinator.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue, RecordWriter
from tierlog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    KafkaError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)

log = logging.getLogger(__name__)

__all__ = ["OffsetAndMetadata", "OffsetMetadataManager"]

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1   # only from OffsetCommit v2-v4 with a retention time
    # Where the record is in __consumer_offsets: a transaction's offsets, committed late, lose to newer ones.
    record_offset: int = field(default=-1, compare=False)


def _java_length(s: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class OffsetMetadataManager:
    def __init__(self, config: CoordinatorConfig, groups: GroupMetadataManager, write: RecordWriter,
                 wall_clock: Callable[[], int]):
        self.config = config
        self.groups = groups
        self.write = write
        self.wall_clock = wall_clock
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        #: Offsets of open transactions: producer id -> group -> (topic, partition) -> offset.
        self.pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        #: The producers with pending offsets in each group.
        self.open_transactions_by_group: dict[str, set[int]] = {}

    # ================================================================== records

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, producer_id: int = -1,
               record_offset: int = -1) -> None:
        """Apply an OffsetCommit record (or its tombstone), written now or read from the partition; a record
        of a transactional batch (``producer_id``) stays pending until its transaction's marker."""
        if value is not None:
            # Offsets without group metadata: a "simple" group (no membership), as Kafka does.
            if self.groups.consumer_group(key.group) is None:
                self.groups.get_or_create_classic_group(key.group)
            om = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                                   value.expire_timestamp, record_offset)
            if producer_id < 0:
                self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = om
            else:
                self.pending.setdefault(producer_id, {}).setdefault(key.group, {})[(key.topic, key.partition)] = om
                self.open_transactions_by_group.setdefault(key.group, set()).add(producer_id)
        else:
            offsets = self.offsets.get(key.group)
            if offsets is not None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self.offsets[key.group]
            # A tombstone removes the partition's pending offsets too (Kafka's replay).
            for pid in self.open_transactions_by_group.get(key.group, ()):
                self.pending.get(pid, {}).get(key.group, {}).pop((key.topic, key.partition), None)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` in this partition (Kafka's ``replayEndTransactionMarker``):
        the producer's pending offsets become committed (unless a newer record of the partition is), or go."""
        by_group = self.pending.pop(producer_id, None)
        if by_group is None:
            return
        for group_id, offsets in by_group.items():
            open_txns = self.open_transactions_by_group.get(group_id)
            if open_txns is not None:
                open_txns.discard(producer_id)
                if not open_txns:
                    del self.open_transactions_by_group[group_id]
            if not commit:
                continue
            committed = self.offsets.setdefault(group_id, {})
            for tp, om in offsets.items():
                existing = committed.get(tp)
                if existing is None or om.record_offset > existing.record_offset:
                    committed[tp] = om
            if not committed:
                del self.offsets[group_id]

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction wrote an offset of the group's partition (Kafka's
        ``hasPendingTransactionalOffsets``)."""
        return any((topic, partition) in self.pending.get(pid, {}).get(group_id, {})
                   for pid in self.open_transactions_by_group.get(group_id, ()))

    def _write_and_replay(self, records: list[tuple[OffsetCommitKey, OffsetCommitValue | None]],
                          producer_id: int = -1, producer_epoch: int = -1) -> None:
        """Write the records (one batch, transactional with ``producer_id``), then apply them; raises
        KafkaError (nothing applied)."""
        if producer_id >= 0:
            base = self.write(records, producer_id=producer_id, producer_epoch=producer_epoch)
        else:
            base = self.write(records)
        base = base if isinstance(base, int) else -1
        for i, (key, value) in enumerate(records):
            self.replay(key, value, producer_id, base + i if base >= 0 else -1)

    # ================================================================== OffsetCommit

    def commit_offset(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                      partitions: list[tuple[str, int, int, int, str | None]], api_version: int,
                      retention_time_ms: int = -1) -> dict[tuple[str, int], int]:
        """Commit (topic, partition, offset, leader epoch, metadata) items; returns an error code per item."""
        missing = GroupIdNotFoundError.code if api_version >= 9 else IllegalGenerationError.code
        return self._commit(group_id, generation_id, member_id, group_instance_id, partitions, missing,
                            retention_time_ms=retention_time_ms)

    def commit_transactional_offset(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                    generation_id: int, member_id: str, group_instance_id: str | None,
                                    partitions: list[tuple[str, int, int, int, str | None]]
                                    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: write (topic, partition, offset, leader epoch, metadata) items as one transactional
        batch of the producer; they stay pending until the transaction's marker. An error code per item."""
        return self._commit(group_id, generation_id, member_id, group_instance_id, partitions,
                            IllegalGenerationError.code, producer=(producer_id, producer_epoch))

    def _commit(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                partitions: list[tuple[str, int, int, int, str | None]], missing_group_code: int,
                retention_time_ms: int = -1, producer: tuple[int, int] | None = None) -> dict[tuple[str, int], int]:
        """OffsetCommit, or with ``producer`` (id, epoch) TxnOffsetCommit: the group's checks, then one write."""
        transactional = producer is not None

        def all_(code: int) -> dict[tuple[str, int], int]:
            return {(t, p): code for t, p, *_ in partitions}

        consumer_group = self.groups.consumer_group(group_id)
        if consumer_group is not None:
            try:
                if transactional and generation_id < 0 and not member_id:
                    check = None  # TxnOffsetCommit v0-v2 carry no member
                else:
                    check = self.groups.consumer.validate_offset_commit(consumer_group, member_id, generation_id)
            except KafkaError as e:
                return all_(e.code)
            refused = {}
            if check is not None:
                refused = {(t, p): code for t, p, *_ in partitions if (code := check(t, p)) != NO_ERROR}
            results = self._write_commit(group_id, [i for i in partitions if (i[0], i[1]) not in refused],
                                         retention_time_ms, producer, False)
            return {(t, p): refused.get((t, p), results.get((t, p), NO_ERROR)) for t, p, *_ in partitions}
        group = self.groups.group(group_id)
        created = False
        if group is None:
            if generation_id < 0:
                # Simple consumers (assign + commit), producers without group management (TxnOffsetCommit
                # v0-v2 carry no generation) and admin tools: an empty "simple" group.
                group, created = self.groups.get_or_create_classic_group(group_id)
            else:
                return all_(missing_group_code)
        try:
            self._validate_offset_commit(group, member_id, group_instance_id, generation_id, transactional)
        except KafkaError as e:
            return all_(e.code)
        if not transactional and group.is_in(STABLE, PREPARING):
            # Commits keep a classic member's session alive.
            self.groups.reschedule_heartbeat(group, group.member(member_id))
        return self._write_commit(group_id, partitions, retention_time_ms, producer, created)

    def _write_commit(self, group_id: str, partitions: list[tuple[str, int, int, int, str | None]],
                      retention_time_ms: int, producer: tuple[int, int] | None, created: bool
                      ) -> dict[tuple[str, int], int]:
        def all_(code: int) -> dict[tuple[str, int], int]:
            return {(t, p): code for t, p, *_ in partitions}

        now = self.wall_clock()
        expire = now + retention_time_ms if retention_time_ms != -1 else -1
        results: dict[tuple[str, int], int] = {}
        records = []
        for topic, partition, offset, leader_epoch, metadata in partitions:
            metadata = metadata or ""
            if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = OffsetMetadataTooLargeError.code
                continue
            results[(topic, partition)] = NO_ERROR
            records.append((OffsetCommitKey(group_id, topic, partition),
                            OffsetCommitValue(offset, metadata, now, leader_epoch, expire)))
        if records:
            try:
                self._write_and_replay(records, *(producer or ()))
            except KafkaError as e:
                if created:
                    self.groups.remove_group(group_id)
                return all_(map_append_error(e).code)
        return results

    @staticmethod
    def _validate_offset_commit(group: ClassicGroup, member_id: str, group_instance_id: str | None,
                                generation_id: int, transactional: bool = False) -> None:
        """Kafka's ``ClassicGroup.validateOffsetCommit``; raises KafkaError."""
        if group.is_in(DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id} is dead")
        if generation_id < 0 and group.is_in(EMPTY):
            return  # admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(f"generation {generation_id} is not {group.generation_id}")
        elif not transactional and not group.is_in(EMPTY):
            # TxnOffsetCommit v0-v2 carry no member: Kafka accepts them whatever the group's state.
            raise UnknownMemberIdError(f"group {group.group_id} has members: commit as one of them")
        if not transactional and group.is_in(COMPLETING):
            raise RebalanceInProgressError(f"group {group.group_id} is rebalancing")

    # ================================================================== OffsetFetch / OffsetDelete

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None,
                      entry: Callable[..., Any] = dict, require_stable: bool = False) -> list[tuple[str, list[Any]]]:
        """Committed offsets of ``topics`` ((name, partitions) pairs), or of everything when None.

        Each partition's answer is ``entry(partition_index=, committed_offset=, committed_leader_epoch=,
        metadata=, error_code=)``: a dict by default; the OffsetFetch handler makes its kio objects
        directly (a dict per partition of a 4-million-partition request is most of a gigabyte)."""
        group = self.groups.group(group_id)
        known = (group is not None and not group.is_in(DEAD)) or self.groups.consumer_group(group_id) is not None
        offsets = self.offsets.get(group_id, {}) if known else {}
        out: list[tuple[str, list[Any]]] = []
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in offsets:
                by_topic.setdefault(topic, []).append(partition)
            topics = [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
        unstable = require_stable and known and group_id in self.open_transactions_by_group
        for topic, partitions in topics:
            answers = []
            for p in partitions:
                om = offsets.get((topic, p))
                if unstable and self.has_pending_offsets(group_id, topic, p):
                    answers.append(entry(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                         metadata="", error_code=UnstableOffsetCommitError.code))
                elif om is None:
                    answers.append(entry(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                         metadata="", error_code=NO_ERROR))
                else:
                    answers.append(entry(partition_index=p, committed_offset=om.offset,
                                         committed_leader_epoch=om.leader_epoch, metadata=om.metadata,
                                         error_code=NO_ERROR))
            out.append((topic, answers))
        return out

    def committed(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self.offsets.get(group_id, {}).get((topic, partition))

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: drop committed offsets of topics the group does not consume (any more)."""
        group = self.groups.group(group_id)
        consumer_group = self.groups.consumer_group(group_id)
        if consumer_group is not None:
            group = _ConsumerGroupView(consumer_group, self.groups.consumer.resolve)
        if group is None or group.is_in(DEAD):
            return GroupIdNotFoundError.code, {}
        if group.is_in(STABLE, PREPARING, COMPLETING) and not group.uses_consumer_protocol():
            return NonEmptyGroupError.code, {}
        results: dict[tuple[str, int], int] = {}
        records = []
        offsets = self.offsets.get(group_id, {})
        for topic, partition in partitions:
            if group.is_subscribed_to_topic(topic):
                results[(topic, partition)] = GroupSubscribedToTopicError.code
                continue
            results[(topic, partition)] = NO_ERROR
            if (topic, partition) in offsets:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        if records:
            try:
                self._write_and_replay(records)
            except KafkaError as e:
                return map_append_error(e).code, {}
        return NO_ERROR, results

    def delete_all_offsets(self, group_id: str, records: list[CoordinatorRecord]) -> int:
        """Add a tombstone for every committed offset of the group (DeleteGroups); returns how many."""
        offsets = self.offsets.get(group_id, {})
        tps = dict.fromkeys(offsets)
        # Pending transactional offsets get a tombstone too (Kafka's deleteAllOffsets).
        for pid in self.open_transactions_by_group.get(group_id, ()):
            tps.update(dict.fromkeys(self.pending.get(pid, {}).get(group_id, {})))
        records += [(OffsetCommitKey(group_id, t, p), None) for t, p in tps]
        return len(tps)

    # ================================================================== expiration

    def cleanup_expired_offsets(self, group_id: str, records: list[CoordinatorRecord]) -> bool:
        """Add tombstones for the group's expired offsets; True when none is left (the group may go)."""
        offsets = self.offsets.get(group_id)
        if not offsets:
            return group_id not in self.open_transactions_by_group
        group = self.groups.group(group_id)
        base = _expiration_base(group) if group is not None else None
        consumer_group = self.groups.consumer_group(group_id)
        if consumer_group is not None:
            # Kafka's ConsumerGroup.offsetExpirationCondition: from the commit, topics subscribed to excepted.
            group = _ConsumerGroupView(consumer_group, self.groups.consumer.resolve)
            base = lambda om: om.commit_timestamp  # noqa: E731
        if base is None:
            return False
        now = self.wall_clock()
        all_expired = True
        for (topic, partition), om in offsets.items():
            if group.is_subscribed_to_topic(topic) or self.has_pending_offsets(group_id, topic, partition):
                all_expired = False
                continue
            if om.expire_timestamp >= 0:
                expired = now >= om.expire_timestamp
            else:
                expired = now - base(om) >= self.config.offsets_retention_ms
            if expired:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
            else:
                all_expired = False
        return all_expired and group_id not in self.open_transactions_by_group

    def on_partitions_deleted(self, topics: set[str]) -> dict[str, list[CoordinatorRecord]]:
        """Tombstones for the offsets of deleted topics, by group (Kafka's ``onPartitionsDeleted``)."""
        out: dict[str, list[CoordinatorRecord]] = {}
        for group_id, offsets in self.offsets.items():
            records: list[CoordinatorRecord] = [(OffsetCommitKey(group_id, t, p), None)
                                                for (t, p) in offsets if t in topics]
            if records:
                out[group_id] = records
        return out


def _expiration_base(group: ClassicGroup) -> Callable[[OffsetAndMetadata], int] | None:
    """Kafka's ``ClassicGroup.offsetExpirationCondition``: from when retention is counted."""
    if group.protocol_type is None:
        return lambda om: om.commit_timestamp  # simple group
    if group.is_in(EMPTY):
        ts = group.current_state_timestamp
        return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp)
    if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(STABLE):
        return lambda om: om.commit_timestamp
    return None


class _ConsumerGroupView:
    """What OffsetDelete asks of a group, for a consumer group (never NON_EMPTY_GROUP: only the subscribed
    topics are refused, GROUP_SUBSCRIBED_TO_TOPIC, as Kafka's ``ConsumerGroup.validateOffsetDelete``)."""

    def __init__(self, group, resolve):
        self.group = group
        self.resolve = resolve

    def is_in(self, *states) -> bool:
        return DEAD in states and self.group.dead

    def uses_consumer_protocol(self) -> bool:
        return True

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.group.is_subscribed_to_topic(topic, self.resolve)
