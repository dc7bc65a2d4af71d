"""Consumer groups of a running broker: list, describe with lag, reset offsets, delete (``tierlog group
...``, Kafka's kafka-consumer-groups).

Resetting follows kafka-consumer-groups: the new offsets are computed and shown, and written only when
asked (``execute``); only a group without members can be reset (its consumers would overwrite the
offsets at their next commit); an offset outside a partition's records is moved to its nearest end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tierlog import errors
from tierlog.client.admin import Admin, ConsumerGroupDescription
from tierlog.client.cluster import Node
from tierlog.client.types import TopicPartition

#: Group states in which a group has no members (Dead: it does not exist, or was just deleted).
INACTIVE = ("Empty", "Dead")


async def list_groups(admin: Admin) -> list[dict]:
    # type: the protocol type (consumer, or simple for a group that only commits offsets); group_type: the
    # group protocol, classic or consumer (KIP-848), "" from brokers whose ListGroups is older than v5
    return [{"group": g.group_id, "type": g.protocol_type or "simple", "state": g.state, "group_type": g.group_type}
            for g in await admin.list_consumer_groups()]


async def _description(admin: Admin, group: str) -> Any:
    """The group's description; a group the coordinator does not know (DescribeGroups v6 reports it
    GROUP_ID_NOT_FOUND, older versions Dead) is Dead with no members, as Kafka's consumer-groups tool sees it."""
    try:
        return (await admin.describe_consumer_groups([group]))[group]
    except errors.GroupIdNotFoundError:
        return ConsumerGroupDescription(group, "Dead", "", "", [], Node(-1, "", -1))


async def describe(admin: Admin, group: str) -> dict:
    """The group's state and members, and per partition (committed or assigned) the committed offset,
    the log end offset, the lag and the member that owns it. GROUP_ID_NOT_FOUND for an unknown group."""
    d = await _description(admin, group)
    committed = await admin.list_consumer_group_offsets(group)
    if d.state == "Dead" and not committed:
        raise errors.GroupIdNotFoundError(f"Consumer group {group!r} does not exist")
    owner = {tp: m for m in d.members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends = await admin.list_offsets(dict.fromkeys(tps, "latest")) if tps else {}
    partitions = []
    for tp in tps:
        om = committed.get(tp)
        end = ends[tp].offset if tp in ends else None
        m = owner.get(tp)
        partitions.append({"topic": tp.topic, "partition": tp.partition,
                           "current_offset": om.offset if om else None, "log_end_offset": end,
                           "lag": end - om.offset if om is not None and end is not None else None,
                           "consumer_id": m.member_id if m else None, "host": m.host if m else None,
                           "client_id": m.client_id if m else None})
    return {"group": group, "state": d.state, "group_type": d.group_type, "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch, "protocol_type": d.protocol_type, "assignor": d.protocol,
            "coordinator": {"id": d.coordinator.node_id, "host": d.coordinator.host, "port": d.coordinator.port},
            "members": [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                         "host": m.host, "member_epoch": m.member_epoch,
                         "partitions": [f"{tp.topic}-{tp.partition}" for tp in m.assignment]}
                        for m in d.members],
            "partitions": partitions}


async def reset_offsets(admin: Admin, group: str, topics: Iterable[str] | None, to: tuple[str, int],
                        execute: bool = False) -> list[dict]:
    """New offsets for the group's partitions of ``topics`` (all partitions of each), or of every
    partition it committed (``topics`` None). ``to``: ("earliest", 0), ("latest", 0), ("offset", N) or
    ("timestamp", ms). Written when ``execute``; returns the plan either way. NON_EMPTY_GROUP when the
    group has members."""
    d = await _description(admin, group)
    if d.state not in INACTIVE:
        raise errors.NonEmptyGroupError(
            f"Offsets of group {group} can only be reset while it has no members, but it is {d.state} with "
            f"{len(d.members)} member(s)")
    committed = await admin.list_consumer_group_offsets(group)
    if topics is None:
        tps = sorted(committed)
        if not tps:
            raise errors.GroupIdNotFoundError(f"Group {group!r} has no committed offsets to reset")
    else:
        names = list(dict.fromkeys(topics))
        described = await admin.describe_topics(names)
        tps = [TopicPartition(n, p.partition) for n in names for p in described[n].partitions]
    kind, value = to
    earliest = await admin.list_offsets(dict.fromkeys(tps, "earliest"))
    latest = await admin.list_offsets(dict.fromkeys(tps, "latest"))
    if kind == "timestamp":
        found = await admin.list_offsets(dict.fromkeys(tps, value))
    new: dict[TopicPartition, int] = {}
    for tp in tps:
        lo, hi = earliest[tp].offset, latest[tp].offset
        if kind == "earliest":
            new[tp] = lo
        elif kind == "latest":
            new[tp] = hi
        elif kind == "offset":
            new[tp] = min(max(value, lo), hi)
        else:  # the first record at or after the time; none: the end, as Kafka's tool does
            off = found[tp].offset
            new[tp] = hi if off < 0 else off
    if execute:
        await admin.alter_consumer_group_offsets(group, new)
    return [{"group": group, "topic": tp.topic, "partition": tp.partition,
             "current_offset": committed[tp].offset if committed.get(tp) else None, "new_offset": new[tp]}
            for tp in tps]


async def delete(admin: Admin, groups: Iterable[str]) -> list[str]:
    """Delete groups without members, with their offsets (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
    groups = list(dict.fromkeys(groups))
    await admin.delete_consumer_groups(groups)
    return groups
