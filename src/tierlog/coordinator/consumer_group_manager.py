"""Consumer groups of the consumer rebalance protocol (KIP-848) in one ``__consumer_offsets`` partition: the
``consumerGroup*`` half of Kafka's ``GroupMetadataManager``.

- ConsumerGroupHeartbeat: joining (epoch 0), heartbeats, leaving (epoch -1; -2 for a static member that will
  come back), static members (``InstanceId``: UNRELEASED_INSTANCE_ID while the instance id is held, the
  replacement inherits the old member's assignment), FENCED_MEMBER_EPOCH (an epoch ahead of the coordinator's,
  or behind it unless it is the previous epoch with a subset of the assignment, a lost response),
  UNKNOWN_MEMBER_ID, GROUP_MAX_SIZE_REACHED (``group.consumer.max.size``).
- The group epoch is bumped when a member joins, leaves or changes its subscription (topic names or a RE2
  regular expression, rack, server assignor) or when the subscribed topics change (partitions added, topics
  created matching a regex); then a new target assignment is computed by the member's assignor (or the first
  of ``group.consumer.assignors``) and each member reconciles towards it (:mod:`.consumer_group`).
- Session timeout (``group.consumer.session.timeout.ms``): a member that stops heartbeating is fenced;
  rebalance timeout: a member that does not revoke partitions within its rebalance timeout is fenced.
- ConsumerGroupDescribe; the consumer-group half of ListGroups, DescribeGroups, DeleteGroups, OffsetCommit
  (the member epoch is the generation: STALE_MEMBER_EPOCH) and OffsetDelete.

As in Kafka every change is a list of records (:mod:`.consumer_group_records`) written to the partition first
and then replayed into the in-memory state (:meth:`replay`), so a loaded partition rebuilds the same groups.
The subscribed topics' metadata is summarised by a hash written in the ConsumerGroupMetadata record (Kafka's
``MetadataHash``; tierlog's own hash function), so a restart with unchanged topics does not bump the epoch.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tierlog.coordinator.assignors import ASSIGNORS, AssignmentMember, AssignmentTopic
from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    next_assignment,
)
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
)
from tierlog.coordinator.records import GroupMetadataKey, RecordWriter
from tierlog.coordinator.regex import matches as regex_matches
from tierlog.coordinator.timer import ScopedTimer
from tierlog.errors import (
    NO_ERROR,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    KafkaError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)

log = logging.getLogger(__name__)

__all__ = ["ConsumerGroupManager", "TopicInfo"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the coordinator needs of a topic (the broker builds these from its metadata image)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    racks: dict[int, frozenset[str]] = field(default_factory=dict)
    internal: bool = False


#: The topics of the cluster by name (called on each heartbeat: the broker's current metadata).
TopicsSource = Callable[[], dict[str, TopicInfo]]


def _session_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-session", group_id, member_id)


def _rebalance_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-rebalance", group_id, member_id)


def _as_items(partitions: TopicPartitions) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple(sorted(partitions.items()))


def _from_items(items) -> TopicPartitions:
    return {t: tuple(sorted(ps)) for t, ps in items if ps}


def _is_subset(owned: dict[uuid.UUID, set[int]] | None, assigned: TopicPartitions) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, ()) for t, ps in owned.items() for p in ps)


class ConsumerGroupManager:
    def __init__(self, config: CoordinatorConfig, timer: ScopedTimer, write: RecordWriter,
                 wall_clock: Callable[[], int], topics: TopicsSource | None = None):
        self.config = config
        self.timer = timer
        self.write = write
        self.wall_clock = wall_clock
        self.topics: TopicsSource = topics or dict
        self.groups: dict[str, ConsumerGroup] = {}
        #: The subscribed topics' hash of each group, as last written (ConsumerGroupMetadataValue tag 0).
        self.metadata_hash: dict[str, int] = {}
        #: Called to drop an empty classic group whose id a consumer group takes (set by the group manager).
        self.on_group_created: Callable[[str], None] = lambda group_id: None
        #: The classic group of an id, if any (set by the group manager).
        self.classic_group: Callable[[str], Any] = lambda group_id: None

    # ================================================================== records

    def _write_and_replay(self, records: list) -> None:
        if records:
            self.write(records)
            for key, value in records:
                self.replay(key, value)

    def _group_for_replay(self, group_id: str, create: bool) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = ConsumerGroup(group_id)
            self.on_group_created(group_id)
        return group

    def replay(self, key, value) -> None:
        """Apply a consumer group record (or its tombstone), written now or read from the partition."""
        group = self._group_for_replay(key.group, value is not None)
        if group is None:
            return
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:
                self.remove_group(key.group)
            else:
                group.group_epoch = value.epoch
                self.metadata_hash[key.group] = getattr(value, "metadata_hash", 0)
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            if value is None:
                group.remove_member(key.member_id)
                group.target.pop(key.member_id, None)
                return
            old = group.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            group.set_member(replace(
                old, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor))
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch if value is not None else 0
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = _from_items(value.partitions)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            old = group.members.get(key.member_id)
            if value is None:
                if old is not None:
                    group.set_member(replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, assigned={},
                                             pending_revocation={}))
                return
            old = old or ConsumerGroupMember(key.member_id)
            epochs = {}
            for items, topic_epochs in ((value.assigned, value.assigned_epochs),
                                        (value.pending_revocation, value.pending_revocation_epochs)):
                for i, (t, ps) in enumerate(items):
                    es = topic_epochs[i] if i < len(topic_epochs) else ()
                    for j, p in enumerate(ps):
                        epochs[(t, p)] = es[j] if j < len(es) else value.member_epoch
            group.set_member(replace(old, member_epoch=value.member_epoch,
                                     previous_member_epoch=value.previous_member_epoch,
                                     state=MemberState(value.state), assigned=_from_items(value.assigned),
                                     pending_revocation=_from_items(value.pending_revocation),
                                     assignment_epochs=epochs))
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            pass  # not used since Kafka 4.1: the metadata hash replaced it

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        self.metadata_hash.pop(group_id, None)
        if group is not None:
            group.dead = True
            for member_id in group.members:
                self.timer.cancel(_session_key(group_id, member_id))
                self.timer.cancel(_rebalance_key(group_id, member_id))

    # ================================================================== load / unload

    def on_loaded(self) -> None:
        """Start the sessions of loaded members (Kafka gives them a full session after a load)."""
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group.group_id, member.member_id)

    def on_unloaded(self) -> None:
        for group in self.groups.values():
            group.dead = True
        self.groups.clear()

    # ================================================================== subscriptions and metadata

    def _subscribed_topics(self, members, topics: dict[str, TopicInfo]) -> dict[str, TopicInfo]:
        out: dict[str, TopicInfo] = {}
        for m in members:
            for name in m.subscribed_topic_names:
                info = topics.get(name)
                if info is not None:
                    out[name] = info
            if m.subscribed_topic_regex is not None:
                for name, info in topics.items():
                    if not info.internal and regex_matches(m.subscribed_topic_regex, name):
                        out[name] = info
        return out

    @staticmethod
    def _hash(subscribed: dict[str, TopicInfo]) -> int:
        if not subscribed:
            return 0  # as Kafka's for no topic
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(subscribed):
            info = subscribed[name]
            h.update(f"{name}\0{info.topic_id}\0{info.partitions}\0".encode())
            for p in sorted(info.racks):
                h.update(f"{p}:{','.join(sorted(info.racks[p]))};".encode())
        return int.from_bytes(h.digest(), "big", signed=True)

    def _member_topic_ids(self, member: ConsumerGroupMember, subscribed: dict[str, TopicInfo]) -> frozenset:
        ids = set()
        for name, info in subscribed.items():
            if name in member.subscribed_topic_names or (
                    member.subscribed_topic_regex is not None and regex_matches(member.subscribed_topic_regex, name)):
                ids.add(info.topic_id)
        return frozenset(ids)

    # ================================================================== ConsumerGroupHeartbeat

    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, subscribed_topic_names: tuple[str, ...] | None,
                  subscribed_topic_regex: str | None, server_assignor: str | None,
                  owned: dict[uuid.UUID, set[int]] | None, client_id: str, client_host: str) -> dict[str, Any]:
        """A validated ConsumerGroupHeartbeat (the service checked the request); the answer's fields, raises
        KafkaError for an error answer."""
        if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(group_id, member_id, member_epoch, instance_id)
        records: list = []
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != 0:
                raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
            classic = self.classic_group(group_id)
            if classic is not None:
                if not classic.is_empty:
                    # Kafka 4.4 converts a classic group with members (online upgrade); tierlog does not yet.
                    raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
                records.append((GroupMetadataKey(group_id), None))
                log.info("[GroupId %s] Converted the empty classic group to a consumer group.", group_id)
            group = ConsumerGroup(group_id)
        if len(group.members) >= self.config.consumer_max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(f"The consumer group has reached its maximum capacity of "
                                           f"{self.config.consumer_max_size} members.")
        member, replaced = self._member_for(group, member_id, member_epoch, instance_id, owned, records)
        updated = replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=server_assignor if server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(subscribed_topic_names) if subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(subscribed_topic_regex if subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex) or None,
            client_id=client_id, client_host=client_host)
        new_member = member_id not in group.members and replaced is None
        bump = False
        if new_member or updated.subscription() != member.subscription() or \
                (updated.client_id, updated.client_host, updated.rebalance_timeout_ms) != \
                (member.client_id, member.client_host, member.rebalance_timeout_ms):
            records.append((ConsumerGroupMemberMetadataKey(group_id, updated.member_id), self._member_value(updated)))
            bump = new_member or updated.subscription() != member.subscription()
        gone = {updated.member_id, replaced.member_id if replaced is not None else None}
        members = [m for mid, m in group.members.items() if mid not in gone] + [updated]
        topics = self.topics()
        subscribed = self._subscribed_topics(members, topics)
        metadata_hash = self._hash(subscribed)
        if metadata_hash != self.metadata_hash.get(group_id):
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append((ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(group_epoch, metadata_hash)))
            log.info("[GroupId %s] Bumped group epoch to %d.", group_id, group_epoch)
        if group_epoch > group.assignment_epoch:
            target = self._new_target_assignment(group, group_epoch, members, subscribed, updated, records)
            target_epoch = group_epoch
        else:
            target = group.target.get(replaced.member_id if replaced is not None else updated.member_id, {})
            target_epoch = group.assignment_epoch
        # The group as it will be once the records above are replayed, for who holds which partition.
        reconciled = next_assignment(updated, target_epoch, target, group.owner_epoch, owned)
        if reconciled.member_epoch != member.member_epoch or reconciled.state != member.state or \
                reconciled.assigned != member.assigned or reconciled.pending_revocation != member.pending_revocation \
                or reconciled.previous_member_epoch != member.previous_member_epoch or new_member:
            records.append((ConsumerGroupCurrentMemberAssignmentKey(group_id, reconciled.member_id),
                            self._assignment_value(reconciled)))
            log.info("[GroupId %s] Member %s new assignment state: epoch=%d, previousEpoch=%d, state=%s, "
                     "assignedPartitions=%s and revokedPartitions=%s.", group_id, reconciled.member_id,
                     reconciled.member_epoch, reconciled.previous_member_epoch, reconciled.state.name,
                     reconciled.assigned, reconciled.pending_revocation)
        created = group_id not in self.groups
        if created:
            self.groups[group_id] = group
            self.on_group_created(group_id)
        try:
            self._write_and_replay(records)
        except KafkaError:
            if created:  # nothing of the new group was written
                self.groups.pop(group_id, None)
            raise
        self._schedule_session(group_id, reconciled.member_id)
        self._schedule_rebalance_timeout(group_id, reconciled)
        full = member_epoch == 0 or (rebalance_timeout_ms != -1 and owned is not None and (
            subscribed_topic_names is not None or subscribed_topic_regex is not None))
        answer: dict[str, Any] = {"error_code": NO_ERROR, "member_id": reconciled.member_id,
                                  "member_epoch": reconciled.member_epoch,
                                  "heartbeat_interval_ms": self.config.consumer_heartbeat_interval_ms,
                                  "assignment": None}
        if full or reconciled.assigned != member.assigned:
            answer["assignment"] = _as_items(reconciled.assigned)
        return answer

    def _member_for(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                    owned, records: list) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member the heartbeat is from (new at epoch 0), after Kafka's epoch and static member checks, and
        the static member it replaces (None when it replaces none)."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member_epoch == 0:
                if member is None:
                    log.info("[GroupId %s] Member %s joins the consumer group using the consumer protocol.",
                             group.group_id, member_id)
                    return ConsumerGroupMember(member_id), None
                return member, None
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
            self._check_epoch(member, member_epoch, owned)
            return member, None
        existing = group.static_member(instance_id)
        if member_epoch == 0:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing.member_id != member_id:
                log.info("[GroupId %s] Static member %s with instance id %s cannot join the group because the "
                         "instance id is owned by member %s.", group.group_id, member_id, instance_id,
                         existing.member_id)
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                    f"instance id is owned by {existing.member_id} member.")
            if existing.member_id == member_id:
                return existing, None
            # The replacement takes over the old member's assignment (Kafka's replaceMember).
            new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._remove_member_records(group.group_id, existing.member_id, records)
            records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                            ConsumerGroupTargetAssignmentMemberValue(
                                _as_items(group.target.get(existing.member_id, {})))))
            records.append((ConsumerGroupMemberMetadataKey(group.group_id, member_id), self._member_value(new)))
            records.append((ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                            self._assignment_value(new)))
            log.info("[GroupId %s] Static member with instance id %s re-joins the consumer group using the "
                     "consumer protocol. Created a new member %s to replace the existing member %s.",
                     group.group_id, instance_id, member_id, existing.member_id)
            self.timer.cancel(_session_key(group.group_id, existing.member_id))
            self.timer.cancel(_rebalance_key(group.group_id, existing.member_id))
            return new, existing
        if existing is None:
            raise UnknownMemberIdError(f"Member with instance id {instance_id} is not a member of group "
                                       f"{group.group_id}.")
        if existing.member_id != member_id:
            raise error_fenced_instance(group.group_id, member_id, instance_id, existing.member_id)
        self._check_epoch(existing, member_epoch, owned)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned) -> None:
        if received > member.member_epoch:
            raise FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        if received < member.member_epoch and (received != member.previous_member_epoch
                                               or not _is_subset(owned, member.assigned)):
            raise FencedMemberEpochError(
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")

    def _new_target_assignment(self, group: ConsumerGroup, epoch: int, members: list[ConsumerGroupMember],
                               subscribed: dict[str, TopicInfo], updated: ConsumerGroupMember,
                               records: list) -> TopicPartitions:
        """Run the assignor; add the changed members' TargetAssignmentMember records and the metadata record;
        returns ``updated``'s target."""
        assignor = self._assignor_name(members)
        topics = {info.topic_id: AssignmentTopic(info.topic_id, info.name, info.partitions, info.racks)
                  for info in subscribed.values()}
        inputs = [AssignmentMember(m.member_id, self._member_topic_ids(m, subscribed), m.rack_id,
                                   group.target.get(m.member_id, {}), m.instance_id)
                  for m in members]  # static members away (epoch -2) keep their share, as in Kafka
        result = ASSIGNORS[assignor](inputs, topics)
        for m in members:
            new = result.get(m.member_id, {})
            if new != group.target.get(m.member_id) or m.member_id not in group.target:
                records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, m.member_id),
                                ConsumerGroupTargetAssignmentMemberValue(_as_items(new))))
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                        ConsumerGroupTargetAssignmentMetadataValue(epoch)))
        log.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.",
                 group.group_id, epoch, assignor)
        return result.get(updated.member_id, {})

    def _assignor_name(self, members: list[ConsumerGroupMember]) -> str:
        """The most used ServerAssignor of the members (Kafka's ``preferredServerAssignor``), else the default."""
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if counts:
            return max(sorted(counts), key=lambda name: counts[name])
        return self.config.consumer_assignors[0]

    @staticmethod
    def _member_value(m: ConsumerGroupMember) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host,
                                                tuple(m.subscribed_topic_names), m.subscribed_topic_regex,
                                                m.rebalance_timeout_ms, m.server_assignor)

    @staticmethod
    def _assignment_value(m: ConsumerGroupMember) -> ConsumerGroupCurrentMemberAssignmentValue:
        assigned, pending = _as_items(m.assigned), _as_items(m.pending_revocation)

        def epochs(items):
            return tuple(tuple(m.assignment_epochs.get((t, p), m.member_epoch) for p in ps) for t, ps in items)
        return ConsumerGroupCurrentMemberAssignmentValue(m.member_epoch, m.previous_member_epoch, int(m.state),
                                                         assigned, pending, epochs(assigned), epochs(pending))

    # ================================================================== leaving and fencing

    def _leave(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"Group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group_id}.")
            log.info("[GroupId %s] Member %s left the consumer group.", group_id, member_id)
            self.fence_member(group, member)
            return self._leave_answer(member_id, member_epoch)
        member = group.static_member(instance_id)
        if member is None:
            raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise error_fenced_instance(group_id, member_id, instance_id, member.member_id)
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("[GroupId %s] Static member %s with instance id %s temporarily left the consumer group.",
                     group_id, member_id, instance_id)
            left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            self._write_and_replay([(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
                                     self._assignment_value(left))])
            self.timer.cancel(_rebalance_key(group_id, member_id))
            return self._leave_answer(member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("[GroupId %s] Static member %s with instance id %s left the consumer group.", group_id, member_id,
                 instance_id)
        self.fence_member(group, member)
        return self._leave_answer(member_id, member_epoch)

    def _leave_answer(self, member_id: str, epoch: int) -> dict[str, Any]:
        return {"error_code": NO_ERROR, "member_id": member_id, "member_epoch": epoch, "heartbeat_interval_ms": 0,
                "assignment": None}

    @staticmethod
    def _remove_member_records(group_id: str, member_id: str, records: list) -> None:
        records += [(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
                    (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
                    (ConsumerGroupMemberMetadataKey(group_id, member_id), None)]

    def fence_member(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Remove the member and bump the group epoch (Kafka's ``consumerGroupFenceMember``)."""
        records: list = []
        self._remove_member_records(group.group_id, member.member_id, records)
        rest = [m for mid, m in group.members.items() if mid != member.member_id]
        metadata_hash = self._hash(self._subscribed_topics(rest, self.topics()))
        records.append((ConsumerGroupMetadataKey(group.group_id),
                        ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash)))
        self.timer.cancel(_session_key(group.group_id, member.member_id))
        self.timer.cancel(_rebalance_key(group.group_id, member.member_id))
        self._write_and_replay(records)
        log.info("[GroupId %s] Bumped group epoch to %d.", group.group_id, group.group_epoch)

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        self.timer.schedule(_session_key(group_id, member_id), self.config.consumer_session_timeout_ms,
                            lambda: self._expire(group_id, member_id, "session"))

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        key = _rebalance_key(group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if key not in self.timer:
                epoch = member.member_epoch
                self.timer.schedule(key, max(member.rebalance_timeout_ms, 0),
                                    lambda: self._expire(group_id, member.member_id, "rebalance", epoch))
        else:
            self.timer.cancel(key)

    def _expire(self, group_id: str, member_id: str, why: str, epoch: int | None = None) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return
        if why == "rebalance" and (member.member_epoch != epoch
                                   or member.state is not MemberState.UNREVOKED_PARTITIONS):
            return
        log.info("[GroupId %s] Member %s fenced from the group because its %s timeout expired.", group_id, member_id,
                 why)
        try:
            self.fence_member(group, member)
        except KafkaError as e:
            log.warning("[GroupId %s] Failed to fence member %s: %s", group_id, member_id, e)

    # ================================================================== offsets

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int
                               ) -> Callable[[str, int], int]:
        """Kafka 4.4's ``ConsumerGroup.validateOffsetCommit``: raises KafkaError for the whole commit, else
        returns the check of each partition (topic, partition) -> error code: the member epoch is the
        generation, and an older one is accepted for a partition the member has held since that epoch."""
        if member_epoch < 0 and not group.members:
            return lambda topic, partition: NO_ERROR  # an admin tool or a consumer without group management
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        if member_epoch > member.member_epoch:
            raise StaleMemberEpochError(f"Received member epoch {member_epoch} is newer than current member epoch "
                                        f"{member.member_epoch}.")
        if member_epoch == member.member_epoch:
            return lambda topic, partition: NO_ERROR
        ids = {name: info.topic_id for name, info in self.topics().items()}

        def check(topic: str, partition: int) -> int:
            assigned_at = member.assignment_epochs.get((ids.get(topic), partition))
            if assigned_at is None or member_epoch < assigned_at:
                return StaleMemberEpochError.code
            return NO_ERROR
        return check

    def resolve(self, regex: str, topic: str) -> bool:
        return regex_matches(regex, topic)

    # ================================================================== admin

    def list_entry(self, group: ConsumerGroup) -> dict[str, Any]:
        return {"group_id": group.group_id, "protocol_type": "consumer", "group_state": str(group.state),
                "group_type": "consumer"}

    def describe(self, group_id: str) -> dict[str, Any]:
        """A ConsumerGroupDescribe group entry (GROUP_ID_NOT_FOUND when there is no such consumer group)."""
        group = self.groups.get(group_id)
        if group is None:
            return {"group_id": group_id, "error_code": GroupIdNotFoundError.code,
                    "error_message": f"Group {group_id} not found."}
        names = {info.topic_id: name for name, info in self.topics().items()}

        def assignment(partitions: TopicPartitions) -> dict[str, Any]:
            return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": list(ps)}
                                         for t, ps in sorted(partitions.items(), key=lambda i: names.get(i[0], ""))]}

        members = []
        for m in group.members.values():
            members.append({
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex or "",  # Kafka 4.4 answers "", not null
                # What the member holds, partitions pending revocation included (as Kafka describes it).
                "assignment": assignment(_union(m.assigned, m.pending_revocation)),
                "target_assignment": assignment(group.target.get(m.member_id, {})),
                "member_type": 1})
        return {"group_id": group_id, "error_code": NO_ERROR, "group_state": str(group.state),
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": self._assignor_name(list(group.members.values())), "members": members}

    @staticmethod
    def describe_classic(group: ConsumerGroup) -> dict[str, Any]:
        """A DescribeGroups entry for a consumer group: as Kafka 4.4 answers DescribeGroups up to v5 for a group
        that is not a classic one, Dead with no members (ConsumerGroupDescribe describes it)."""
        return {"group_id": group.group_id, "error_code": NO_ERROR, "group_state": "Dead", "protocol_type": "",
                "protocol_data": "", "members": []}

    def validate_delete(self, group: ConsumerGroup) -> None:
        if group.members:
            raise NonEmptyGroupError(f"Group {group.group_id} is not empty.")

    @staticmethod
    def tombstones(group: ConsumerGroup, records: list) -> None:
        """The records deleting an (empty) consumer group (Kafka's ``createGroupTombstoneRecords``)."""
        for member_id in group.members:
            ConsumerGroupManager._remove_member_records(group.group_id, member_id, records)
        for member_id in group.target:
            if member_id not in group.members:
                records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id), None))
        records += [(ConsumerGroupTargetAssignmentMetadataKey(group.group_id), None),
                    (ConsumerGroupMetadataKey(group.group_id), None)]


def _union(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    return {t: tuple(sorted(set(a.get(t, ())) | set(b.get(t, ())))) for t in set(a) | set(b)}


def error_fenced_instance(group_id: str, member_id: str, instance_id: str, owner: str) -> KafkaError:
    return FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} is fenced by existing "
                                 f"member {owner}.")




