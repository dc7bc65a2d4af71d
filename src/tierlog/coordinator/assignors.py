"""Server-side partition assignors of consumer groups (KIP-848): ``uniform`` and ``range``.

Both get the group's members (subscribed topic ids, rack) and the subscribed topics (partition count, the
racks of each partition's replicas) and return a target assignment, topic id -> sorted partitions per member.
As Kafka 4.4's (``group.consumer.assignors``, the member's ``ServerAssignor``):

- ``uniform``, all members subscribed to the same topics (Kafka's UniformHomogeneousAssignmentBuilder): each
  member keeps what it had in the previous target up to its quota (``partitions // members``, one more for
  the first ``partitions % members`` members that need it, or that must take it because too few members are
  left), then the members short of their quota take the free partitions in turn, a contiguous run each:
  first the partitions nobody held (by topic, then partition), then those given up.
- ``uniform`` with different subscriptions (Kafka's UniformHeterogeneousAssignmentBuilder): each member keeps
  its partitions of the topics it still subscribes to, the free ones go topic by topic to the least loaded
  subscribers, then topics are balanced one at a time (most loaded to least loaded) until nothing moves.
- ``range`` gives each member of a topic a contiguous range of its partitions (static members first in
  instance id order, then the others in member id order; the first ``partitions % members`` get one
  partition more), the same ranges for co-partitioned topics; not sticky.

Racks are carried (Kafka's MemberSubscription.rackId and SubscribedTopicDescriber.racksForPartition) but,
as in Kafka 4.4, neither built-in assignor uses them: a rack change only bumps the group epoch (the metadata
hash covers the partitions' racks, KIP-1101), and the assignment is the same with racks as without
(tests/coordinator/test_consumer_group_as_kafka.py runs Kafka 4.4's assignor classes on the same input).

Kafka walks members in the order of its member map and, with one subscription, topics in its hash set's order
(random member and topic ids); tierlog walks members by member id and those topics by name: Kafka's classes
given members and topics in that order give the same assignment, partition for partition. (A member over its
quota keeps its lowest partitions; Kafka keeps the first of its hash set, the same below partition 16.)
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
    if not members:
        return {}
    members = sorted(members, key=lambda m: m.member_id)
    subscriptions = {frozenset(m.topics & topics.keys()) for m in members}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, topics, sorted(next(iter(subscriptions)), key=lambda t: topics[t].name))
    return _uniform_heterogeneous(members, topics)


def _uniform_homogeneous(members: list[AssignmentMember], topics: dict[uuid.UUID, AssignmentTopic],
                         subscribed: list[uuid.UUID]) -> Assignment:
    """Kafka 4.4's UniformHomogeneousAssignmentBuilder, members and topics walked in the order given."""
    if not subscribed:
        return {m.member_id: {} for m in members}
    held = {(t, p) for m in members for t, ps in m.previous.items() if t in topics for p in ps}
    unassigned = [(t, p) for t in subscribed for p in range(topics[t].partitions) if (t, p) not in held]
    total = sum(topics[t].partitions for t in subscribed)
    minimum, extra = divmod(total, len(members))
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {}
    unfilled: list[tuple[str, int]] = []
    for index, m in enumerate(members):
        quota, gets_extra = minimum, extra > 0
        if gets_extra:
            quota += 1
        kept: list[tuple[uuid.UUID, int]] = []
        for t in sorted(m.previous, key=lambda t: (topics[t].name if t in topics else "", t)):
            if t not in topics or t not in subscribed:
                continue  # unsubscribed topics are dropped
            for p in sorted(m.previous[t]):
                if p >= topics[t].partitions:
                    continue
                if quota > 0:
                    kept.append((t, p))
                    quota -= 1
                else:
                    unassigned.append((t, p))  # over the quota: given up, reassigned after the free ones
        # A member that does not need its "+1" leaves it to a later one, while enough members are left.
        if quota > 0 and gets_extra and len(members) - index > extra:
            quota -= 1
            gets_extra = False
        if quota > 0:
            unfilled.append((m.member_id, quota))
        if gets_extra:
            extra -= 1
        owned[m.member_id] = kept
    i = 0
    for member_id, quota in unfilled:
        owned[member_id] += unassigned[i:i + quota]
        i += quota
    return _result(owned)


def _uniform_heterogeneous(members: list[AssignmentMember], topics: dict[uuid.UUID, AssignmentTopic]) -> Assignment:
    """Kafka 4.4's UniformHeterogeneousAssignmentBuilder: every member keeps the partitions of the topics it
    still subscribes to; the free partitions go, topic by topic, to the least loaded subscribers; then the
    topics with two subscribers or more are balanced, the most loaded giving their last partitions of the
    topic to the least loaded, until no topic moves a partition (16 passes at most)."""
    sizes = [0] * len(members)
    subscribers: dict[uuid.UUID, list[int]] = {}
    for i, m in enumerate(members):
        for t in m.topics:
            if t in topics:
                subscribers.setdefault(t, []).append(i)
    owners = {t: [-1] * topics[t].partitions for t in subscribers}
    owned: list[dict[uuid.UUID, set[int]]] = [{} for _ in members]

    def give(t: uuid.UUID, p: int, i: int) -> None:
        old = owners[t][p]
        if old != -1:
            owned[old][t].discard(p)
            sizes[old] -= 1
        owned[i].setdefault(t, set()).add(p)
        owners[t][p] = i
        sizes[i] += 1

    for i, m in enumerate(members):
        for t, ps in m.previous.items():
            if t in m.topics and t in owners:
                for p in ps:
                    if p < topics[t].partitions and owners[t][p] == -1:
                        give(t, p, i)

    def topic_order(t: uuid.UUID):
        # Partitions per subscriber descending, then subscribers ascending, then Kafka's Uuid order (signed).
        return (-topics[t].partitions / len(subscribers[t]), len(subscribers[t]), _java_uuid_order(t))

    balancer = _LoadBalancer(sizes)
    free = {t: [p for p, o in enumerate(own) if o == -1] for t, own in owners.items()}
    for t in sorted((t for t, ps in free.items() if ps), key=topic_order):
        balancer.start(subscribers[t])
        for p in free[t]:
            give(t, p, balancer.next_least_loaded())

    shared = sorted((t for t in subscribers if len(subscribers[t]) >= 2), key=topic_order)
    last_moved = -1
    for _ in range(16):
        for index, t in enumerate(shared):
            if index == last_moved:
                return _result({m.member_id: [(t, p) for t, ps in owned[i].items() for p in ps]
                                for i, m in enumerate(members)})
            if _balance_topic(t, topics[t].partitions, owners[t], balancer, subscribers[t], give) > 0 \
                    or last_moved == -1:
                last_moved = index
    return _result({m.member_id: [(t, p) for t, ps in owned[i].items() for p in ps] for i, m in enumerate(members)})


def _balance_topic(t, partitions: int, owners: list[int], balancer: _LoadBalancer, subscribers: list[int],
                   give) -> int:
    if balancer.start(subscribers) <= 1:
        return 0
    order = sorted(range(partitions), key=lambda p: (owners[p], p))  # each owner's partitions in a run
    first: dict[int, int] = {}
    end: dict[int, int] = {}
    for i, p in enumerate(order):
        first.setdefault(owners[p], i)
        end[owners[p]] = i + 1
    moved = 0
    while not balancer.balanced():
        while True:
            most = balancer.next_most_loaded()
            if most == -1 or (most in end and end[most] - first[most] > 0):
                break
            balancer.exclude_most_loaded()  # holds nothing of this topic to give
        if most == -1:
            break
        end[most] -= 1
        partition = order[end[most]]
        least = balancer.next_least_loaded()
        if balancer.balanced():
            break
        give(t, partition, least)
        moved += 1
    return moved


class _LoadBalancer:
    """Kafka's MemberAssignmentBalancer: the subscribers of one topic sorted by load, handing out the least
    loaded ones in turn (a load level at a time) and the most loaded ones from the other end."""

    def __init__(self, sizes: list[int]):
        self.sizes = sizes

    def start(self, members: list[int]) -> int:
        """Sort ``members``; returns the spread between the most and the least loaded."""
        s = self.sizes
        self.sorted = sorted(members, key=lambda i: (s[i], i))
        n = len(self.sorted)
        self.least_end, self.least_count, self.next_least = 0, s[self.sorted[0]] - 1, 0
        self.most_start, self.most_end, self.most_count, self.next_most = n, n, s[self.sorted[-1]] + 1, n - 1
        return s[self.sorted[-1]] - s[self.sorted[0]]

    def next_least_loaded(self) -> int:
        s, order = self.sizes, self.sorted
        if self.next_least >= self.least_end:
            self.least_count += 1
            while self.least_end < len(order) and s[order[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        member = order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        s, order = self.sizes, self.sorted
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                self.most_count = s[order[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and s[order[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        order = self.sorted
        i, j = self.next_most + 1, self.most_end - 1
        order[i], order[j] = order[j], order[i]
        self.most_end -= 1

    def balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


def _java_uuid_order(t: uuid.UUID) -> tuple[int, int]:
    """Kafka's Uuid.compareTo: the most, then the least significant 64 bits, as signed longs."""
    def signed(v: int) -> int:
        return v - (1 << 64) if v >= 1 << 63 else v
    return signed(t.int >> 64), signed(t.int & ((1 << 64) - 1))


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
