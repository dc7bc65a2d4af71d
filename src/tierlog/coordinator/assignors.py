"""Server-side partition assignors of consumer groups (KIP-848): ``uniform`` and ``range``.

Both get the group's members (subscribed topic ids, rack) and the subscribed topics (partition count, the
racks of each partition's replicas) and return a target assignment, topic id -> sorted partitions per member.
As Kafka's (``group.consumer.assignors``, the member's ``ServerAssignor``):

- ``uniform`` spreads every subscribed partition evenly over the members subscribing to its topic and is
  sticky: a member keeps what it had in the previous target while that stays within its fair share. With
  racks on both sides a free partition goes first to a member in one of its replicas' racks.
- ``range`` gives each member of a topic a contiguous range of its partitions (static members first in
  instance id order, then the others in member id order; the first ``partitions % members`` get one
  partition more), the same ranges for co-partitioned topics.

Ties are broken by member id and (topic name, partition), so the same input gives the same assignment; the
exact partitions of a sticky rebalance may differ from Kafka's, the counts per member and the stickiness not.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = ["ASSIGNORS", "AssignmentMember", "AssignmentTopic", "range_assign", "uniform_assign"]


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    member_id: str
    topics: frozenset[uuid.UUID]
    rack: str | None = None
    previous: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)  # the current target
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class AssignmentTopic:
    topic_id: uuid.UUID
    name: str
    partitions: int
    racks: dict[int, frozenset[str]] = field(default_factory=dict)  # partition -> racks of its replicas


Assignment = dict[str, dict[uuid.UUID, tuple[int, ...]]]


def _result(owned: dict[str, list[tuple[uuid.UUID, int]]]) -> Assignment:
    out: Assignment = {}
    for member_id, tps in owned.items():
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        out[member_id] = {t: tuple(sorted(ps)) for t, ps in by_topic.items()}
    return out


def uniform_assign(members: list[AssignmentMember], topics: dict[uuid.UUID, AssignmentTopic]) -> Assignment:
    members = sorted(members, key=lambda m: m.member_id)
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m.member_id: [] for m in members}
    if not members:
        return {}
    subscribed = {t for m in members for t in m.topics if t in topics}
    all_partitions = sorted(((t, p) for t in subscribed for p in range(topics[t].partitions)),
                            key=lambda tp: (topics[tp[0]].name, tp[1]))
    homogeneous = len({m.topics & subscribed for m in members}) == 1
    if homogeneous:
        quota, extra = divmod(len(all_partitions), len(members))
    else:
        quota, extra = len(all_partitions), 0  # capacities do not apply; the fewest-first rule balances
    # Stickiness: keep the previous target's partitions that are still valid, up to the member's share. The
    # members keeping the most get the "+1" slots first, as Kafka's optimized uniform assignor does.
    taken: set[tuple[uuid.UUID, int]] = set()
    kept = {}
    for m in members:
        valid = sorted(((t, p) for t, ps in m.previous.items() if t in m.topics and t in topics
                        for p in ps if p < topics[t].partitions), key=lambda tp: (topics[tp[0]].name, tp[1]))
        kept[m.member_id] = valid
    capacity: dict[str, int] = {}
    for m in sorted(members, key=lambda m: (-len(kept[m.member_id]), m.member_id)):
        capacity[m.member_id] = quota + (1 if extra > 0 else 0)
        if extra > 0:
            extra -= 1
    for m in members:
        for tp in kept[m.member_id][:capacity[m.member_id]]:
            if tp not in taken:
                owned[m.member_id].append(tp)
                taken.add(tp)
    turn = 0  # homogeneous: the members short of their share take the free partitions in turn, as Kafka's
    for t, p in all_partitions:
        if (t, p) in taken:
            continue
        subscribers = [m for m in members if t in m.topics]
        candidates = [m for m in subscribers if len(owned[m.member_id]) < capacity[m.member_id]] or subscribers
        racks = topics[t].racks.get(p)
        if racks:
            local = [m for m in candidates if m.rack is not None and m.rack in racks]
            candidates = local or candidates
        if homogeneous:
            order = {m.member_id: (i - turn) % len(members) for i, m in enumerate(members)}
            best = min(candidates, key=lambda m: order[m.member_id])
            turn = (members.index(best) + 1) % len(members)
        else:
            best = min(candidates, key=lambda m: (len(owned[m.member_id]), m.member_id))
        owned[best.member_id].append((t, p))
        taken.add((t, p))
    return _result(owned)


def range_assign(members: list[AssignmentMember], topics: dict[uuid.UUID, AssignmentTopic]) -> Assignment:
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m.member_id: [] for m in members}
    for t in sorted((t for t in topics if any(t in m.topics for m in members)), key=lambda t: topics[t].name):
        # Kafka's order: static members by instance id, then the others by member id.
        subscribers = [m.member_id for m in sorted((m for m in members if t in m.topics), key=_range_order)]
        quota, extra = divmod(topics[t].partitions, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            n = quota + (1 if i < extra else 0)
            owned[member_id] += [(t, p) for p in range(start, start + n)]
            start += n
    return _result(owned)


def _range_order(m: AssignmentMember) -> tuple:
    return (0, m.instance_id) if m.instance_id is not None else (1, m.member_id)


#: Assignors by the name a member's ServerAssignor and ``group.consumer.assignors`` use.
ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
