"""A consumer group of the consumer rebalance protocol (KIP-848): Kafka's ``ConsumerGroup``,
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``.

The group has an epoch, bumped when its members or their subscriptions change, and a *target assignment*
computed by a server-side assignor at some epoch. Each member converges on its target one step per heartbeat
(:func:`next_assignment`): partitions it must give up are *pending revocation* and the member keeps its epoch
until it reports (in its owned partitions) that it released them; partitions another member still holds are
*unreleased* and handed over only once free. Only then is the member at the target epoch and STABLE.

Partitions are keyed by topic id as in Kafka's records; a member's assignment maps topic id -> sorted tuple.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from tierlog.coordinator.consumer_group_records import (
    ClassicMemberMetadata,
    ConsumerGroupRegularExpressionValue,
    TopicPartitions,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberState",
    "next_assignment",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (the byte written in ConsumerGroupCurrentMemberAssignmentValue)."""

    UNKNOWN = 0
    STABLE = 1
    UNREVOKED_PARTITIONS = 2
    UNRELEASED_PARTITIONS = 3


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)
    #: (topic id, partition) -> the member epoch it was assigned at (Kafka 4.4: offset commits at an older
    #: member epoch are accepted for partitions held since then)
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    #: Set for a member that joined with JoinGroup (the classic protocol) in a consumer group
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def subscription(self) -> tuple:
        """What a change of bumps the group epoch (Kafka's ``hasMemberSubscriptionChanged``)."""
        return (self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.rack_id)


def _sorted(d: dict[uuid.UUID, set[int]]) -> TopicPartitions:
    return {t: tuple(sorted(ps)) for t, ps in d.items() if ps}


def _owns_any(owned: dict[uuid.UUID, set[int]] | None, partitions: TopicPartitions) -> bool:
    """Whether the member still reports one of ``partitions`` (None: the heartbeat did not say; assume so)."""
    if owned is None:
        return True
    return any(p in partitions.get(t, ()) for t, ps in owned.items() for p in ps)


def next_assignment(member: ConsumerGroupMember, target_epoch: int, target: TopicPartitions,
                    owner_epoch, owned: dict[uuid.UUID, set[int]] | None) -> ConsumerGroupMember:
    """The member one reconciliation step closer to ``target`` (Kafka's ``CurrentAssignmentBuilder.build``).

    ``owner_epoch(topic_id, partition)`` is the epoch of the member holding a partition, -1 when free;
    ``owned`` the partitions the member reported in this heartbeat (None when it did not)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _compute(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _compute(member, member.member_epoch + 1, target_epoch, target, owner_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _compute(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    return _compute(member, target_epoch, target_epoch, target, owner_epoch, owned)


def _with_epoch(member: ConsumerGroupMember, epoch: int, **changes) -> ConsumerGroupMember:
    return replace(member, previous_member_epoch=member.member_epoch, member_epoch=epoch, **changes)


def _compute(member, epoch, target_epoch, target, owner_epoch, owned) -> ConsumerGroupMember:
    unreleased = False
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, set[int]] = {}
    pending: dict[uuid.UUID, set[int]] = {}
    for topic_id in set(target) | set(member.assigned):
        want = set(target.get(topic_id, ()))
        have = set(member.assigned.get(topic_id, ()))
        keep = have & want
        assigned[topic_id] = keep
        revoking[topic_id] = have - keep
        to_add = want - keep
        free = {p for p in to_add if owner_epoch(topic_id, p) == -1}
        unreleased = unreleased or free != to_add
        pending[topic_id] = free
    revoking_s = _sorted(revoking)
    old_epochs = member.assignment_epochs

    def epochs(new_epoch: int, *maps: TopicPartitions) -> dict[tuple[uuid.UUID, int], int]:
        return {(t, p): old_epochs.get((t, p), new_epoch) for m in maps for t, ps in m.items() for p in ps}

    if revoking_s and _owns_any(owned, revoking_s):
        kept = _sorted(assigned)
        return _with_epoch(member, epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept,
                           pending_revocation=revoking_s, assignment_epochs=epochs(epoch, kept, revoking_s))
    for topic_id, ps in pending.items():
        assigned[topic_id] |= ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    final = _sorted(assigned)
    return _with_epoch(member, target_epoch, state=state, assigned=final, pending_revocation={},
                       assignment_epochs=epochs(target_epoch, final))


class ConsumerGroup:
    """One consumer group's state: its epoch, members, target assignment and who holds each partition."""

    group_type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str):
        self.group_id = group_id
        # As Kafka 4.4: a new group starts at epoch 1, so its first member joins at epoch 2.
        self.group_epoch = 1
        self.assignment_epoch = 0
        #: when the target assignment was last computed (wall-clock ms; 0: never), for the assignment interval
        self.assignment_timestamp = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, TopicPartitions] = {}  # member id -> target partitions
        #: (topic id, partition) -> epoch of the member that holds it (assigned or pending revocation)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        #: regular expression -> its last resolution (the ConsumerGroupRegularExpression records)
        self.resolved_regexes: dict[str, ConsumerGroupRegularExpressionValue] = {}
        self.dead = False

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.group_id!r}, {self.state}, epoch={self.group_epoch}, members={list(self.members)})"

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def set_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member, keeping the partition owners and static members in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        return old

    def _hold(self, member: ConsumerGroupMember) -> None:
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, ps in partitions.items():
                for p in ps:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, ps in partitions.items():
                for p in ps:
                    self.partition_epochs.pop((topic_id, p), None)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol (Kafka's
        ``allMembersUseClassicProtocolExcept``)."""
        return all(m.uses_classic_protocol for mid, m in self.members.items() if mid != member_id)

    def waiting_on_unreleased(self, member: ConsumerGroupMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        for topic_id, ps in self.target.get(member.member_id, {}).items():
            for p in ps:
                if p not in member.assigned.get(topic_id, ()) and self.owner_epoch(topic_id, p) != -1:
                    return True
        return False

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return names

    def is_subscribed_to_topic(self, topic: str, resolve_regex=None) -> bool:
        for m in self.members.values():
            if topic in m.subscribed_topic_names:
                return True
            if m.subscribed_topic_regex is not None and resolve_regex is not None and \
                    resolve_regex(m.subscribed_topic_regex, topic):
                return True
        return False
