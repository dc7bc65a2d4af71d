"""Client-side partition assignors of the classic consumer group protocol.

The group leader runs the assignor that the coordinator picked (the first protocol name all members
share) over every member's subscription, and sends each member its share through SyncGroup. The
results here equal those of Java's ``RangeAssignor`` and ``RoundRobinAssignor``, so a tierlog
consumer can lead a group of Java consumers and vice versa without partitions moving.

Member order, which decides who gets what, is Java's ``MemberInfo`` order: static members (with a
``group.instance.id``, KIP-345) first, by instance id, then dynamic members by member id; strings
compare as Java's ``String.compareTo``. Static members therefore keep their partitions across
restarts even though the coordinator hands them new member ids.

Java's range assignor can also align partitions with consumer racks (KIP-881), but only when it
knows the racks of partition replicas; :meth:`PartitionAssignor.assign` gets partition counts only,
which is Java's rack-unaware path (``assign(Map<String, Integer>, ...)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from tierlog.client.consumer_protocol import Assignment, Subscription, java_string_key

__all__ = [
    "ASSIGNORS",
    "EAGER",
    "COOPERATIVE",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assignor_for",
]

# RebalanceProtocol names (KIP-429).
EAGER = "eager"
COOPERATIVE = "cooperative"

GroupAssignment = dict[str, dict[str, list[int]]]


class PartitionAssignor(ABC):
    """Java's ``ConsumerPartitionAssignor``, reduced to what a classic-group leader needs."""

    name: str = ""
    version: int = 0
    supported_protocols: tuple[str, ...] = (EAGER,)

    @abstractmethod
    def assign(self, cluster_partitions: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> GroupAssignment:
        """Partitions per member: ``cluster_partitions`` maps each topic known to metadata to its
        partition count (subscribed topics missing from it are skipped, as Java does), and
        ``subscriptions`` maps member id to its decoded subscription. Every member appears in the
        result; topics map to ascending partitions, and topics without partitions are left out."""

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        """User data for this member's subscription (none for the stateless assignors)."""
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called with this member's assignment after each SyncGroup (stateless assignors ignore it)."""
        return None


def _member_order(member_id: str, subscription: Subscription) -> tuple[int, bytes]:
    # Java's MemberInfo.compareTo: static members first (by instance id), then by member id.
    if subscription.group_instance_id is not None:
        return (0, java_string_key(subscription.group_instance_id))
    return (1, java_string_key(member_id))


def _sorted_members(members: Mapping[str, Subscription]) -> list[str]:
    return sorted(members, key=lambda m: _member_order(m, members[m]))


def _tidy(raw: dict[str, dict[str, list[int]]]) -> GroupAssignment:
    return {member: {t: sorted(ps) for t, ps in sorted(topics.items(), key=lambda kv: java_string_key(kv[0])) if ps}
            for member, topics in raw.items()}


class RangeAssignor(PartitionAssignor):
    """Per topic: partitions in numeric order, the topic's subscribers in member order, each gets a
    contiguous range of ``count // members`` partitions and the first ``count % members`` one more.

    Two consumers C0, C1 subscribed to t0 and t1 of 3 partitions each: C0 gets t0p0, t0p1, t1p0,
    t1p1 and C1 gets t0p2, t1p2."""

    name = "range"

    def assign(self, cluster_partitions: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> GroupAssignment:
        result: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
        subscribers: dict[str, dict[str, Subscription]] = {}
        for member, sub in subscriptions.items():
            for topic in sub.topics:
                subscribers.setdefault(topic, {})[member] = sub
        for topic, count in cluster_partitions.items():
            members = subscribers.get(topic)
            if not members or count <= 0:
                continue
            ordered = _sorted_members(members)
            per_member, extra = divmod(count, len(ordered))
            start = 0
            for i, member in enumerate(ordered):
                n = per_member + (1 if i < extra else 0)
                if n:
                    result[member][topic] = list(range(start, start + n))
                start += n
        return _tidy(result)


class RoundRobinAssignor(PartitionAssignor):
    """All subscribed topic-partitions sorted by (topic, partition), dealt out to the members in
    member order, going round; a member not subscribed to a partition's topic is skipped (which
    unbalances the result when subscriptions differ).

    Two consumers C0, C1 subscribed to t0 and t1 of 3 partitions each: C0 gets t0p0, t0p2, t1p1
    and C1 gets t0p1, t1p0, t1p2."""

    name = "roundrobin"

    def assign(self, cluster_partitions: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> GroupAssignment:
        result: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
        members = _sorted_members(subscriptions)
        topics_of = {m: set(subscriptions[m].topics) for m in members}
        all_topics = sorted(set().union(*topics_of.values()), key=java_string_key)
        i = 0
        for topic in all_topics:
            for partition in range(max(cluster_partitions.get(topic, 0), 0)):
                # Some member subscribes to every topic listed here, so this loop ends.
                while topic not in topics_of[members[i]]:
                    i = (i + 1) % len(members)
                result[members[i]].setdefault(topic, []).append(partition)
                i = (i + 1) % len(members)
        return _tidy(result)


ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
}

# partition.assignment.strategy takes Java class names; these are the ones implemented here.
_JAVA_CLASSES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": RangeAssignor.name,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": RoundRobinAssignor.name,
}


def assignor_for(spec: str) -> PartitionAssignor:
    """An assignor from a ``partition.assignment.strategy`` entry: a protocol name ("range",
    "roundrobin") or the Java class name of one. Raises ValueError for anything else."""
    key = spec.strip()
    if key.startswith("class "):
        key = key[len("class "):].strip()
    cls = ASSIGNORS.get(_JAVA_CLASSES.get(key, key))
    if cls is None:
        raise ValueError(f"unknown partition assignor {spec!r}; known: {', '.join(sorted(ASSIGNORS))}")
    return cls()
