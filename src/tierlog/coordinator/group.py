"""A classic consumer group: its state machine, members, generation and protocol choice.

This follows Kafka's ``ClassicGroup`` / ``ClassicGroupMember`` / ``ClassicGroupState``: the same
states, the same legal transitions, the same bookkeeping of members awaiting a JoinGroup or SyncGroup
answer, pending (KIP-394) members, pending-sync members and static members (KIP-345). It holds no
timers and does no I/O; :class:`~tierlog.coordinator.group_metadata_manager.GroupMetadataManager`
drives it. Member validation raises :mod:`tierlog.errors` exceptions (Kafka's ``ApiException``).

Parked JoinGroup/SyncGroup answers are *responders*: callables taking the response as a dict of
plain values (the handler turns them into kio messages). A responder is called at most once.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tierlog.errors import FencedInstanceIdError, UnknownMemberIdError

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "NO_LEADER",
    "UNKNOWN_MEMBER_ID",
    "ClassicGroup",
    "GroupState",
    "IllegalTransitionError",
    "Member",
    "Responder",
    "parse_subscribed_topics",
]

UNKNOWN_MEMBER_ID = ""
NO_LEADER = ""
CONSUMER_PROTOCOL_TYPE = "consumer"

Responder = Callable[[dict[str, Any]], None]


class IllegalTransitionError(RuntimeError):
    pass


class GroupState(enum.Enum):
    """Kafka's ``ClassicGroupState``; the value is the name clients see (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


#: target state -> states it may be entered from (ClassicGroupState's validPreviousStates).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join_responder: Responder | None = field(default=None, repr=False)
    sync_responder: Responder | None = field(default=None, repr=False)
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_responder is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_responder is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: new members can expire while awaiting join; others awaiting join/sync are alive."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return list(protocols) == list(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


class ClassicGroup:
    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY, *, now_ms: int = -1,
                 generation_id: int = 0, protocol_type: str | None = None, protocol_name: str | None = None,
                 leader_id: str | None = None):
        self.group_id = group_id
        self.state = state
        self.previous_state = GroupState.DEAD
        self.current_state_timestamp: int | None = now_ms if now_ms >= 0 else None
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, Member] = {}          # insertion ordered, like Kafka's leader fallback
        self.static_members: dict[str, str] = {}      # group.instance.id -> member id
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}  # protocol name -> members supporting it
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)})")

    # ------------------------------------------------------------------ state

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransitionError(
                f"Group {self.group_id} should be in one of {sorted(map(str, VALID_PREVIOUS_STATES[target]))} "
                f"before moving to {target}, but it is {self.state}")
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = now_ms

    def is_simple_group(self) -> bool:
        return self.protocol_type is None and self.is_empty and not self.pending_join_members

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # ------------------------------------------------------------------ members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: Member, responder: Responder | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group and member's protocol type must be the same")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise ValueError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        member.join_responder = responder
        if member.is_awaiting_join:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def restore(self, member: Member) -> None:
        """Add a member loaded from ``__consumer_offsets`` (no protocol checks, no parked answer)."""
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)

    def remove(self, member_id: str) -> None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._count_protocols(removed, -1)
            if removed.is_awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, responder: Responder | None) -> None:
        self._count_protocols(member, -1)
        member.protocols = list(protocols)
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if responder is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif responder is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.join_responder = responder

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member rejoined with a new member id: fence the old one, keep its assignment."""
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise ValueError(f"cannot replace non-existing member id {old_member_id}")
        fenced = FencedInstanceIdError.code
        self.complete_join(old, {"error_code": fenced, "member_id": old_member_id, "protocol_name": None,
                                 "protocol_type": None, "leader": NO_LEADER, "members": []})
        self.complete_sync(old, {"error_code": fenced, "assignment": b"", "protocol_name": None,
                                 "protocol_type": None})
        new = Member(new_member_id, old.group_instance_id, old.client_id, old.client_host,
                     old.rebalance_timeout_ms, old.session_timeout_ms, old.protocol_type, list(old.protocols),
                     old.assignment)
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise ValueError(f"{member_id} is already a member of {self.group_id}")
        self.pending_join_members.add(member_id)

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return self.static_members.get(group_instance_id) if group_instance_id is not None else None

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str | None, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else (client_id or "")
        return f"{prefix}-{uuid.uuid4()}"

    def validate_member(self, member_id: str, group_instance_id: str | None) -> None:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID as Kafka's ``ClassicGroup.validateMember``."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise UnknownMemberIdError(f"no static member {group_instance_id} in group {self.group_id}")
            if existing != member_id:
                raise FencedInstanceIdError(
                    f"static member {group_instance_id} of group {self.group_id} is {existing}, not {member_id}")
        if member_id not in self.members:
            raise UnknownMemberIdError(f"{member_id} is not a member of group {self.group_id}")

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, pick a member that did; False when nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # ------------------------------------------------------------------ protocols

    def _count_protocols(self, member: Member, delta: int) -> None:
        for name in member.protocol_names():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        if self.is_empty:
            return bool(protocol_type) and bool(protocol_names)
        n = len(self.members)
        return self.protocol_type == protocol_type and \
            any(self.supported_protocols.get(name, 0) == n for name in protocol_names)

    def select_protocol(self) -> str:
        """The protocol every member supports with the most votes (each member votes its favourite)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties: the first protocol to reach the top count in member order (Kafka's choice among
        # equal counts depends on its hash map order, which is not part of the contract).
        return max(votes, key=lambda name: votes[name])

    # ------------------------------------------------------------------ parked responses

    def complete_join(self, member: Member, response: dict[str, Any]) -> bool:
        if member.join_responder is None:
            return False
        responder, member.join_responder = member.join_responder, None
        self.num_awaiting_join -= 1
        responder(response)
        return True

    def complete_all_joins(self, error_code: int) -> None:
        for member_id, m in list(self.members.items()):
            self.complete_join(m, {"error_code": error_code, "member_id": member_id})

    def complete_sync(self, member: Member, response: dict[str, Any]) -> bool:
        if member.sync_responder is None:
            return False
        responder, member.sync_responder = member.sync_responder, None
        responder(response)
        return True

    def complete_all_syncs(self, error_code: int) -> None:
        for m in list(self.members.values()):
            self.complete_sync(m, {"error_code": error_code})

    # ------------------------------------------------------------------ generations

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[dict[str, Any]]:
        """The members list of the leader's JoinGroup answer."""
        if self.is_in(GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise IllegalTransitionError(f"no member metadata for group {self.group_id} in state {self.state}")
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    # ------------------------------------------------------------------ subscriptions (offset expiry)

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the consumer-protocol members subscribe to, or None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscribed_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()


def parse_subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription, read with its v0 layout (every version starts so)."""
    try:
        pos = 2  # int16 version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos:pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
