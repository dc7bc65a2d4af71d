"""Share groups' membership (KIP-932; Kafka's ``ShareGroup`` in its group coordinator): ShareGroupHeartbeat and
ShareGroupDescribe.

A member joins with epoch 0 and the topics it subscribes to, heartbeats with its current epoch, leaves with
-1. Any change of the members, their subscriptions or the subscribed topics' partitions bumps the group epoch
and computes a new target assignment with the simple assignor; a share group has nothing to revoke, so every
member moves to the new assignment (and the group epoch) at its next heartbeat. A member that does not
heartbeat within ``group.share.session.timeout.ms`` is removed (:meth:`ShareGroupCoordinator.expire`).

The simple assignor, as Kafka's ``SimpleAssignor`` for share groups: with no more members than partitions each
partition goes to one member (round robin over the sorted partitions); with more members than partitions the
members are spread over the partitions, so every partition has members and every member one partition.

Membership lives in memory: a restarted broker has no share group until its members heartbeat again (their
next heartbeat answers UNKNOWN_MEMBER_ID and the client rejoins), while the delivery state of the records is
persisted by :mod:`.state_store`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

ASSIGNOR_NAME = "simple"

#: topic name -> (topic id, partition count), the cluster's topics now
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: list[str]
    member_epoch: int = 0
    assignment: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    last_seen: float = 0.0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, dict[uuid.UUID, list[int]]] = field(default_factory=dict)
    subscribed_topics: tuple = ()  # what the target assignment was computed from

    @property
    def state(self) -> str:
        # Kafka 4.4's ShareGroupState has no Reconciling: a share group with members is Stable (nothing to revoke)
        return "Stable" if self.members else "Empty"


def simple_assign(members: list[ShareMember], topics: Mapping[str, tuple[uuid.UUID, int]]
                  ) -> dict[str, dict[uuid.UUID, list[int]]]:
    """Each subscribed partition to at least one member; members spread evenly (see the module docstring)."""
    out: dict[str, dict[uuid.UUID, list[int]]] = {m.member_id: {} for m in members}
    subscribed = sorted({t for m in members for t in m.subscribed if t in topics})
    for name in subscribed:
        topic_id, count = topics[name]
        takers = sorted(m.member_id for m in members if name in m.subscribed)
        if not takers or count <= 0:
            continue
        if len(takers) <= count:
            for p in range(count):
                out[takers[p % len(takers)]].setdefault(topic_id, []).append(p)
        else:
            for i, member_id in enumerate(takers):
                out[member_id].setdefault(topic_id, []).append(i % count)
    return out


class ShareGroupCoordinator:
    def __init__(self, topics: TopicsView, *, session_timeout_ms: int, heartbeat_interval_ms: int,
                 max_size: int, clock: Callable[[], float] = time.monotonic):
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.clock = clock
        self.groups: dict[str, ShareGroup] = {}
        #: called with (group id, member id) when a member leaves or is removed: its acquired records go back
        self.on_member_removed: list[Callable[[str, str], None]] = []

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str) -> dict:
        """The ShareGroupHeartbeat response's fields (errors as ``error_code`` and ``error_message``)."""
        if not group_id:
            return _error(ErrorCode.invalid_group_id, "The group id must not be empty.")
        if not member_id:
            return _error(ErrorCode.invalid_request, "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:  # leave
            if group is not None and member_id in group.members:
                self._remove(group, member_id)
            return {"error_code": ErrorCode.none, "member_id": member_id, "member_epoch": -1,
                    "heartbeat_interval_ms": 0, "assignment": None}
        if member_epoch == 0:
            if not subscribed:
                return _error(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    return _error(ErrorCode.group_max_size_reached,
                                  f"The share group has reached its maximum capacity of {self.max_size} members.")
                member = group.members[member_id] = ShareMember(member_id, client_id, client_host, rack_id,
                                                                list(subscribed))
                group.group_epoch += 1
        else:
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                return _error(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.member_epoch:
                return _error(ErrorCode.fenced_member_epoch,
                              f"The share group member has a different epoch ({member.member_epoch}).")
        member.last_seen = self.clock()
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and sorted(subscribed) != sorted(member.subscribed):
            member.subscribed = list(subscribed)
            group.group_epoch += 1
        self._maybe_reassign(group)
        member.member_epoch = group.assignment_epoch
        member.assignment = group.target.get(member_id, {})
        return {"error_code": ErrorCode.none, "member_id": member_id, "member_epoch": member.member_epoch,
                "heartbeat_interval_ms": self.heartbeat_interval_ms,
                "assignment": {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                                    for t, ps in sorted(member.assignment.items())]}}

    def _maybe_reassign(self, group: ShareGroup) -> None:
        topics = self.topics()
        shape = tuple(sorted((name, topics[name][1]) for m in group.members.values() for name in m.subscribed
                             if name in topics))
        if shape != group.subscribed_topics:  # a topic created, deleted or given partitions
            group.subscribed_topics = shape
            if group.assignment_epoch == group.group_epoch:  # one bump per change, as a join already made one
                group.group_epoch += 1
        if group.assignment_epoch != group.group_epoch:
            group.target = simple_assign(list(group.members.values()), topics)
            group.assignment_epoch = group.group_epoch

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._maybe_reassign(group)
        for callback in self.on_member_removed:
            callback(group.group_id, member_id)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def expire(self) -> int:
        """Remove members whose session timed out; returns how many."""
        now = self.clock()
        n = 0
        for group in list(self.groups.values()):
            for member_id, m in list(group.members.items()):
                if now - m.last_seen > self.session_timeout_ms / 1000:
                    self._remove(group, member_id)
                    n += 1
        return n

    def list_groups(self, states: set[str], types: set[str]) -> list[dict]:
        """ListGroups' entries for the share groups (``states`` and ``types`` lower-case filters, empty: all), as
        Kafka 4.4 lists them: protocol type and group type ``share``."""
        if types and "share" not in types:
            return []
        return [{"group_id": g.group_id, "protocol_type": "share", "group_state": g.state, "group_type": "share"}
                for g in self.groups.values() if not states or g.state.lower() in states]

    def describe(self, group_id: str, topic_names: Mapping[uuid.UUID, str]) -> dict:
        group = self.groups.get(group_id)
        if group is None:
            return {"group_id": group_id, "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} not found.", "group_state": "Dead", "group_epoch": -1,
                    "assignment_epoch": -1, "assignor_name": "", "members": []}
        return {"group_id": group_id, "error_code": ErrorCode.none, "group_state": group.state,
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": ASSIGNOR_NAME, "members": [
                    {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                     "client_id": m.client_id, "client_host": m.client_host,
                     "subscribed_topic_names": list(m.subscribed),
                     "assignment": {"topic_partitions": [
                         {"topic_id": t, "topic_name": topic_names.get(t, ""), "partitions": sorted(ps)}
                         for t, ps in sorted(m.assignment.items())]}}
                    for m in group.members.values()]}


def _error(code: int, message: str) -> dict:
    return {"error_code": code, "error_message": message, "member_id": None, "member_epoch": -1,
            "heartbeat_interval_ms": 0, "assignment": None}
