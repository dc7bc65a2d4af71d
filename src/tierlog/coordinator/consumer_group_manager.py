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
- Online migration (``group.consumer.migration.policy``): a consumer-protocol member joining a classic group
  with members converts it (:meth:`_upgrade`); classic members of a consumer group are served through
  JoinGroup/SyncGroup/Heartbeat/LeaveGroup (``classic_*``), their assignment from the server-side assignor, their
  ClassicMemberMetadata in the member record; the last consumer-protocol member leaving turns the group back into
  a classic group (:meth:`_maybe_downgrade`, the group manager's ``_downgrade``).
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

from tierlog.client.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
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
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
)
from tierlog.coordinator.group import UNKNOWN_MEMBER_ID
from tierlog.coordinator.records import GroupMetadataKey, RecordWriter
from tierlog.coordinator.regex import matches as regex_matches
from tierlog.coordinator.timer import ScopedTimer
from tierlog.errors import (
    NO_ERROR,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    KafkaError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
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
        #: Writes ``records`` (the consumer group's tombstones) with the classic group that replaces the group
        #: without the leaving member, and swaps them in memory (set by the group manager).
        self.downgrade: Callable[[ConsumerGroup, str, list], None] = lambda group, leaving, records: None

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
        if group is not None:
            self._apply(group, key, value)

    def _apply(self, group: ConsumerGroup, key, value) -> None:
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
                server_assignor=value.server_assignor, classic=value.classic_member_metadata))
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch if value is not None else 0
            group.assignment_timestamp = value.assignment_timestamp if value is not None else 0
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
        elif isinstance(key, ConsumerGroupRegularExpressionKey):
            if value is None:
                group.resolved_regexes.pop(key.regex, None)
            else:
                group.resolved_regexes[key.regex] = value
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

    def _regex_records(self, group: ConsumerGroup, members, topics: dict[str, TopicInfo], records: list) -> None:
        """Kafka 4.4's ConsumerGroupRegularExpression records for ``members`` (the group as it will be): a
        regular expression no member uses any more gets a tombstone; one that is new to the group or matches
        other topics than at its last resolution gets a record (the topics, a version, the time). Kafka resolves
        asynchronously and writes the record before it bumps the epoch; tierlog matches on every heartbeat, so
        the record only keeps ``__consumer_offsets`` as Kafka's. The version is Kafka's metadata log offset of
        the resolution; tierlog has no metadata log and writes 0 (a Kafka broker reading it resolves again)."""
        used = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        for regex in sorted(used):
            matched = tuple(sorted(name for name, info in topics.items()
                                   if not info.internal and regex_matches(regex, name)))
            old = group.resolved_regexes.get(regex)
            if old is None or old.topics != matched:
                records.append((ConsumerGroupRegularExpressionKey(group.group_id, regex),
                                ConsumerGroupRegularExpressionValue(matched, 0, self.wall_clock())))
        for regex in sorted(group.resolved_regexes.keys() - used):
            records.append((ConsumerGroupRegularExpressionKey(group.group_id, regex), None))

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
            if classic is not None and not classic.is_empty:
                group = self._upgrade(classic, records)
            else:
                if classic is not None:
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
            client_id=client_id, client_host=client_host, classic=None)
        reconciled = self._update_member(group, member, replaced, updated, owned, records)
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

    def _update_member(self, group: ConsumerGroup, member: ConsumerGroupMember,
                       replaced: ConsumerGroupMember | None, updated: ConsumerGroupMember, owned,
                       records: list) -> ConsumerGroupMember:
        """Write the member's changes, a new group epoch and target assignment when needed, and its next
        reconciliation step (Kafka's steps 1-3 of a heartbeat or a classic member's JoinGroup); returns the member
        as reconciled, its session started."""
        group_id = group.group_id
        member_id = member.member_id
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
        self._regex_records(group, members, topics, records)
        metadata_hash = self._hash(subscribed)
        if metadata_hash != self.metadata_hash.get(group_id):
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append((ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(group_epoch, metadata_hash)))
            log.info("[GroupId %s] Bumped group epoch to %d.", group_id, group_epoch)
        if group_epoch > group.assignment_epoch and self._can_compute_target_assignment(group):
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
        try:
            self._write_and_replay(records)
        except KafkaError:
            if created:  # nothing of the new group was written
                self.groups.pop(group_id, None)
            raise
        if created:  # the classic group it replaces goes once the records are written
            self.on_group_created(group_id)
            for m in group.members.values():
                if m.member_id != reconciled.member_id:
                    self._schedule_session(group_id, m.member_id)
        self._schedule_session(group_id, reconciled.member_id)
        return reconciled

    # ================================================================== online migration (KIP-848)

    def _upgrade(self, classic, records: list) -> ConsumerGroup:
        """The consumer group a classic group with members becomes when a consumer-protocol member joins it
        (Kafka's ``convertToConsumerGroup``): each member keeps its assignment at the classic generation, which
        becomes the group epoch. The group is not registered yet; ``records`` gets the conversion's records."""
        group_id = classic.group_id
        if self.config.consumer_migration_policy not in ("upgrade", "bidirectional"):
            log.info("[GroupId %s] Cannot upgrade the classic group: the online upgrade is disabled.", group_id)
            raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
        if not classic.uses_consumer_protocol():
            raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
        if len(classic.members) > self.config.consumer_max_size:
            raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
        topics = self.topics()
        ids = {name: info.topic_id for name, info in topics.items()}
        generation = classic.generation_id
        group = ConsumerGroup(group_id)
        conversion: list = []
        members = []
        for m in classic.members.values():
            try:
                subscription = decode_subscription(m.metadata(classic.protocol_name))
                assignment = decode_assignment(m.assignment)
            except ConsumerProtocolError:
                raise GroupIdNotFoundError(f"Cannot upgrade the classic group {group_id} to consumer group because "
                                           "the embedded consumer protocol is malformed.") from None
            assigned = {ids[t]: tuple(sorted(ps)) for t, ps in assignment.partitions.items() if t in ids and ps}
            member = ConsumerGroupMember(
                m.member_id, member_epoch=generation, previous_member_epoch=generation, state=MemberState.STABLE,
                instance_id=m.group_instance_id, rack_id=subscription.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=tuple(subscription.topics),
                rebalance_timeout_ms=m.rebalance_timeout_ms, assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple((n, bytes(d)) for n, d in m.protocols)))
            members.append(member)
            conversion += [
                (ConsumerGroupMemberMetadataKey(group_id, m.member_id), self._member_value(member)),
                (ConsumerGroupTargetAssignmentMemberKey(group_id, m.member_id),
                 ConsumerGroupTargetAssignmentMemberValue(_as_items(assigned))),
                (ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id), self._assignment_value(member))]
        conversion += [
            (ConsumerGroupMetadataKey(group_id),
             ConsumerGroupMetadataValue(generation, self._hash(self._subscribed_topics(members, topics)))),
            (ConsumerGroupTargetAssignmentMetadataKey(group_id),
             ConsumerGroupTargetAssignmentMetadataValue(generation))]
        for key, value in conversion:
            self._apply(group, key, value)
        records.append((GroupMetadataKey(group_id), None))
        records += conversion
        log.info("[GroupId %s] Upgrading the classic group with %d members to a consumer group at epoch %d.",
                 group_id, len(members), generation)
        return group

    def _maybe_downgrade(self, group: ConsumerGroup, leaving: ConsumerGroupMember) -> bool:
        """When the last consumer-protocol member leaves a group of classic members, the group becomes a classic
        group again (Kafka's ``validateOnlineDowngradeWithFencedMember`` and ``convertToClassicGroup``)."""
        if leaving.uses_classic_protocol or len(group.members) <= 1 or not group.all_classic_except(leaving.member_id):
            return False
        if self.config.consumer_migration_policy not in ("downgrade", "bidirectional"):
            log.info("[GroupId %s] Cannot downgrade the consumer group: the online downgrade is disabled.",
                     group.group_id)
            return False
        if len(group.members) - 1 > self.config.max_group_size:
            return False
        rest = [m.classic for mid, m in group.members.items() if mid != leaving.member_id]
        if not set.intersection(*({name for name, _ in c.supported_protocols} for c in rest)):
            return False  # a classic group needs a protocol every member supports
        records: list = []
        self.tombstones(group, records)
        self.downgrade(group, leaving.member_id, records)
        return True

    def classic_join(self, group: ConsumerGroup, *, member_id: str, instance_id: str | None, protocol_type: str,
                     protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                     client_id: str, client_host: str, api_version: int) -> dict[str, Any]:
        """A JoinGroup to a consumer group (Kafka's ``classicGroupJoinToConsumerGroup``): the member's assignment
        comes from the server-side assignor and is answered at once (no leader, no member list)."""
        group_id = group.group_id
        unknown = member_id == UNKNOWN_MEMBER_ID
        if unknown:
            member_id = str(uuid.uuid4())
        if len(group.members) >= self.config.consumer_max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(f"The consumer group has reached its maximum capacity of "
                                           f"{self.config.consumer_max_size} members.")
        if protocol_type != "consumer" or not protocols:
            raise InconsistentGroupProtocolError("Member does not support the consumer protocol of the group.")
        if unknown and instance_id is None and api_version >= 4:
            log.info("[GroupId %s] Dynamic member with unknown member id joins the consumer group. Created a new "
                     "member id %s and requesting the member to rejoin with this id.", group_id, member_id)
            return {"member_id": member_id, "error_code": MemberIdRequiredError.code}
        try:
            subscription = decode_subscription(protocols[0][1])
        except ConsumerProtocolError as e:
            raise InconsistentGroupProtocolError(f"Malformed consumer protocol subscription: {e}") from None
        topics = self.topics()
        owned: dict[uuid.UUID, set[int]] = {}
        for name, ps in subscription.owned_partitions.items():
            if name in topics:
                owned.setdefault(topics[name].topic_id, set()).update(ps)
        records: list = []
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:  # as Kafka, any member id joins (the one MEMBER_ID_REQUIRED gave, usually)
                log.info("[GroupId %s] Member %s joins the consumer group using the classic protocol.", group_id,
                         member_id)
                member = ConsumerGroupMember(member_id)
            replaced = None
        elif unknown:  # a static member joins, or rejoins and replaces its former member id
            member, replaced = self._member_for(group, member_id, 0, instance_id, owned, records, classic=True)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Static member {member_id} with instance id {instance_id} is not a "
                                           f"member of group {group_id}.")
            if member.member_id != member_id:
                raise error_fenced_instance(group_id, member_id, instance_id, member.member_id)
            replaced = None
        updated = replace(
            member, instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=None, subscribed_topic_names=tuple(subscription.topics), client_id=client_id,
            client_host=client_host, classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)))
        if updated.classic != member.classic and member.member_id in group.members:
            records.append((ConsumerGroupMemberMetadataKey(group_id, updated.member_id), self._member_value(updated)))
        reconciled = self._update_member(group, member, replaced, updated, owned, records)
        self._schedule_rebalance_timeout(group_id, reconciled)
        return {"member_id": reconciled.member_id, "error_code": NO_ERROR, "generation_id": reconciled.member_epoch,
                "protocol_type": "consumer", "protocol_name": protocols[0][0], "leader": "", "members": []}

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation_id: int) -> ConsumerGroupMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Member with instance id {instance_id} is not a member of group "
                                           f"{group.group_id}.")
            if member.member_id != member_id:
                raise error_fenced_instance(group.group_id, member_id, instance_id, member.member_id)
        if member.classic is None:
            raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
        if generation_id != member.member_epoch:
            raise IllegalGenerationError(f"The member {member.member_id} has a generation {generation_id} that "
                                         f"is not equal to its member epoch {member.member_epoch}.")
        return member

    def classic_sync(self, group: ConsumerGroup, *, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None) -> dict[str, Any]:
        """A SyncGroup of a classic member of a consumer group: its current assignment, the partitions it must
        revoke left out (Kafka's ``classicGroupSyncToConsumerGroup``)."""
        member = self._classic_member(group, member_id, instance_id, generation_id)
        first = member.classic.supported_protocols[0]
        if (protocol_type is not None and protocol_type != "consumer") or \
                (protocol_name is not None and protocol_name != first[0]):
            raise InconsistentGroupProtocolError("The protocol type or name is not the member's.")
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            raise RebalanceInProgressError(f"A new rebalance is triggered in group {group.group_id} and member "
                                           f"{member.member_id} should rejoin to catch up.")
        self._schedule_session(group.group_id, member.member_id)
        names = {info.topic_id: name for name, info in self.topics().items()}
        try:
            version = decode_subscription(first[1]).version
        except ConsumerProtocolError:
            version = 0
        assignment = encode_assignment({names[t]: ps for t, ps in member.assigned.items() if t in names},
                                       version=min(max(version, 0), 3))
        return {"error_code": NO_ERROR, "protocol_type": "consumer", "protocol_name": first[0],
                "assignment": assignment}

    def classic_heartbeat(self, group: ConsumerGroup, *, member_id: str, instance_id: str | None,
                          generation_id: int) -> int:
        """A classic member's Heartbeat: REBALANCE_IN_PROGRESS when it must rejoin to move towards its target
        (Kafka's ``classicGroupHeartbeatToConsumerGroup``)."""
        member = self._classic_member(group, member_id, instance_id, generation_id)
        self._schedule_session(group.group_id, member.member_id)
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member)):
            return RebalanceInProgressError.code
        return NO_ERROR

    def classic_leave(self, group: ConsumerGroup, members: list[tuple[str, str | None, str | None]]
                      ) -> list[dict[str, Any]]:
        """A LeaveGroup of classic members of a consumer group: removed with one group epoch bump."""
        results = []
        records: list = []
        gone = set()
        for member_id, instance_id, reason in members:
            try:
                if instance_id is None:
                    member = group.members.get(member_id)
                    if member is None:
                        raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
                    if member_id != UNKNOWN_MEMBER_ID and member.member_id != member_id:
                        raise error_fenced_instance(group.group_id, member_id, instance_id, member.member_id)
                if member.classic is None:
                    raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
                log.info("[GroupId %s] Member %s has left the group through an explicit LeaveGroup request; client "
                         "reason: %s.", group.group_id, member.member_id, reason or "not provided")
                self._remove_member_records(group.group_id, member.member_id, records)
                gone.add(member.member_id)
                results.append({"member_id": member.member_id, "group_instance_id": instance_id,
                                "error_code": NO_ERROR})
            except KafkaError as e:
                results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": e.code})
        if records:
            rest = [m for mid, m in group.members.items() if mid not in gone]
            metadata_hash = self._hash(self._subscribed_topics(rest, self.topics()))
            records.append((ConsumerGroupMetadataKey(group.group_id),
                            ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash)))
            self._write_and_replay(records)
            for member_id in gone:
                self.timer.cancel(_session_key(group.group_id, member_id))
                self.timer.cancel(_rebalance_key(group.group_id, member_id))
        return results

    def _member_for(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                    owned, records: list, classic: bool = False
                    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
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
            # A classic member (or one replacing a classic member) takes the instance id over at once, as in Kafka.
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing.member_id != member_id and \
                    not classic and existing.classic is None:
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

    def _can_compute_target_assignment(self, group: ConsumerGroup) -> bool:
        """Kafka's ``canComputeNextTargetAssignment``: at most one target assignment per
        group.consumer.assignment.interval.ms, so members joining together are assigned in one computation; the
        epoch bumps in between wait for the next heartbeat after the interval (the group shows Assigning)."""
        interval = self.config.assignment_interval_ms()
        return group.assignment_timestamp == 0 or interval == 0 or \
            self.wall_clock() >= group.assignment_timestamp + interval

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
                        ConsumerGroupTargetAssignmentMetadataValue(epoch, self.wall_clock())))
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
                                                m.rebalance_timeout_ms, m.server_assignor, m.classic)

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
        """Remove the member and bump the group epoch (Kafka's ``consumerGroupFenceMember``); the last
        consumer-protocol member of a group of classic members takes the group back to classic."""
        self.timer.cancel(_session_key(group.group_id, member.member_id))
        self.timer.cancel(_rebalance_key(group.group_id, member.member_id))
        if self._maybe_downgrade(group, member):
            return
        records: list = []
        self._remove_member_records(group.group_id, member.member_id, records)
        rest = [m for mid, m in group.members.items() if mid != member.member_id]
        topics = self.topics()
        self._regex_records(group, rest, topics, records)
        metadata_hash = self._hash(self._subscribed_topics(rest, topics))
        records.append((ConsumerGroupMetadataKey(group.group_id),
                        ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash)))
        self.timer.cancel(_session_key(group.group_id, member.member_id))
        self.timer.cancel(_rebalance_key(group.group_id, member.member_id))
        self._write_and_replay(records)
        log.info("[GroupId %s] Bumped group epoch to %d.", group.group_id, group.group_epoch)

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        """Start (again) the member's session: a classic member's is its JoinGroup session timeout."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        timeout = self.config.consumer_session_timeout_ms
        if member is not None and member.classic is not None:
            timeout = member.classic.session_timeout_ms
        self.timer.schedule(_session_key(group_id, member_id), timeout,
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
        if member.classic is not None:  # a classic member commits at its generation, as in a classic group
            if member_epoch != member.member_epoch:
                raise IllegalGenerationError(f"The member {member_id} commits at generation {member_epoch}, not at "
                                             f"its member epoch {member.member_epoch}.")
            return lambda topic, partition: NO_ERROR
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
                "member_type": 0 if m.classic is not None else 1})
        return {"group_id": group_id, "error_code": NO_ERROR, "group_state": str(group.state),
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": self._assignor_name(list(group.members.values())), "members": members}

    @staticmethod
    def describe_classic(group: ConsumerGroup) -> dict[str, Any]:
        """A DescribeGroups entry for a consumer group: as Kafka 4.4 answers a group that is not a classic one,
        GROUP_ID_NOT_FOUND from v6 (KIP-1043), Dead with no members before (ConsumerGroupDescribe describes it)."""
        return {"group_id": group.group_id, "error_code": GroupIdNotFoundError.code,
                "error_message": f"Group {group.group_id} is not a classic group.", "group_state": "Dead",
                "protocol_type": "", "protocol_data": "", "members": []}

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
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group.group_id), None))
        records += [(ConsumerGroupRegularExpressionKey(group.group_id, regex), None)
                    for regex in sorted(group.resolved_regexes)]
        records.append((ConsumerGroupMetadataKey(group.group_id), None))


def _union(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    return {t: tuple(sorted(set(a.get(t, ())) | set(b.get(t, ())))) for t in set(a) | set(b)}


def error_fenced_instance(group_id: str, member_id: str, instance_id: str, owner: str) -> KafkaError:
    return FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} is fenced by existing "
                                 f"member {owner}.")




