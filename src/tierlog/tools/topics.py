"""Topics of a running broker: create, list, describe, alter configs, add partitions, delete
(``tierlog topic ...``, Kafka's kafka-topics and kafka-configs for topics).

Every function takes a started :class:`~tierlog.client.admin.Admin` and returns plain data (dicts and
lists, ready for JSON); failures are the broker's typed Kafka errors (TOPIC_ALREADY_EXISTS,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, INVALID_PARTITIONS, ...) with the broker's message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from tierlog import errors
from tierlog.client.admin import Admin, AlterConfigOp, NewTopic
from tierlog.client.types import TopicPartition
from tierlog.config.broker import ConfigSource


def _id(topic_id: Any) -> str | None:
    return None if topic_id is None else str(topic_id)


async def create(admin: Admin, names: Iterable[str], partitions: int = -1, replication_factor: int = -1,
                 configs: Mapping[str, str] | None = None, if_not_exists: bool = False) -> list[dict]:
    """Create topics (-1: the broker's default partitions / replication factor); one dict per topic,
    ``created`` false for one that existed already (with ``if_not_exists``)."""
    new = [NewTopic(n, partitions, replication_factor, dict(configs or {})) for n in names]
    results = await admin.create_topics(new, ignore_existing=if_not_exists)
    return [{"topic": name, "created": r is not None, "topic_id": _id(r.topic_id) if r else None,
             "partitions": r.num_partitions if r else None, "replication_factor": r.replication_factor if r else None}
            for name, r in results.items()]


async def list_topics(admin: Admin, internal: bool = False) -> list[dict]:
    """Every topic (internal ones only if asked) with its partition count and replication factor."""
    listings = await admin.list_topics(internal)
    described = await admin.describe_topics(listings) if listings else {}
    out = []
    for name, t in described.items():
        out.append({"topic": name, "topic_id": _id(t.topic_id), "internal": t.internal,
                    "partitions": len(t.partitions),
                    "replication_factor": max((len(p.replicas) for p in t.partitions), default=0)})
    return out


async def describe(admin: Admin, names: Iterable[str]) -> list[dict]:
    """Per topic: id, partitions (leader, replicas, ISR, offline replicas, log start and end offsets) and
    the settings that are not Kafka's defaults (topic overrides and the broker's own settings that apply)."""
    names = list(dict.fromkeys(names))
    topics = await admin.describe_topics(names)
    configs = await admin.describe_configs([("topic", n) for n in names])
    # Each leader is asked for its own partitions on its own, so a leader that is down (or died after the
    # metadata named it) leaves the other rows whole; the rows it leaves, and leaderless partitions, are then
    # asked of a live replica (in-sync ones first), which answers from its own log as Kafka's debugging replica.
    by_leader: dict[int, list[TopicPartition]] = {}
    for n in names:
        for p in topics[n].partitions:
            if p.leader is not None:
                by_leader.setdefault(p.leader, []).append(TopicPartition(n, p.partition))
    answers = await asyncio.gather(*(_offsets(admin, tps, spec) for tps in by_leader.values()
                                     for spec in ("earliest", "latest")))
    starts = {tp: o for a in answers[0::2] for tp, o in a.items()}
    ends = {tp: o for a in answers[1::2] for tp, o in a.items()}
    from_replica = await _replica_offsets(admin, [(n, p) for n in names for p in topics[n].partitions
                                                  if TopicPartition(n, p.partition) not in ends], starts, ends)
    out = []
    for n in names:
        t = topics[n]
        entries = configs[("topic", n)]
        parts = []
        for p in t.partitions:
            tp = TopicPartition(n, p.partition)
            parts.append({"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                          "replicas": list(p.replicas), "isr": list(p.isr),
                          "offline_replicas": list(p.offline_replicas),
                          "log_start_offset": starts[tp].offset if tp in starts else None,
                          "log_end_offset": ends[tp].offset if tp in ends else None,
                          "offsets": "known" if tp in starts and tp in ends and tp not in from_replica else
                          f"from replica {from_replica[tp]}" if tp in from_replica else
                          "no leader" if p.leader is None else "leader not answering"})
        non_default = [{"name": e.name, "value": None if e.sensitive else e.value, "source": e.source.name,
                        "sensitive": e.sensitive}
                       for e in sorted(entries.values(), key=lambda e: e.name)
                       if e.source not in (ConfigSource.DEFAULT_CONFIG, ConfigSource.UNKNOWN)]
        out.append({"topic": n, "topic_id": _id(t.topic_id), "internal": t.internal, "partitions": parts,
                    "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
                    "configs": non_default})
    return out


async def _replica_offsets(admin: Admin, missing: list, starts: dict, ends: dict) -> dict[TopicPartition, int]:
    """Offsets of partitions whose leader did not answer, from one live replica each (in-sync replicas first,
    never the leader that did not answer); fills ``starts`` and ``ends`` and returns which broker answered."""
    answered: dict[TopicPartition, int] = {}
    untried = {TopicPartition(n, p.partition): [r for r in dict.fromkeys([*p.isr, *p.replicas]) if r != p.leader
                                                and r not in p.offline_replicas] for n, p in missing}
    while untried:
        by_replica: dict[int, list[TopicPartition]] = {}
        for tp, replicas in list(untried.items()):
            if not replicas:
                del untried[tp]
            else:
                by_replica.setdefault(replicas.pop(0), []).append(tp)
        for broker, tps in by_replica.items():
            first, last = await asyncio.gather(*(admin.list_replica_offsets(broker, dict.fromkeys(tps, spec))
                                                 for spec in ("earliest", "latest")))
            for tp in tps:
                if tp in first and tp in last:
                    starts[tp], ends[tp], answered[tp] = first[tp], last[tp], broker
                    del untried[tp]
    return answered


async def _offsets(admin: Admin, tps: list[TopicPartition], spec: str) -> dict:
    """The ``spec`` offsets of one leader's partitions, those it answered for (none when it does not answer
    within the timeout); an error that waiting does not cure (an ACL's refusal) is raised."""
    try:
        return await admin.list_offsets(dict.fromkeys(tps, spec))
    except errors.KafkaError as exc:
        if not exc.retriable:
            raise
        return getattr(exc, "results", {})


async def alter_config(admin: Admin, name: str, set_: Mapping[str, str], delete: Iterable[str]) -> dict:
    """Set and remove topic overrides (IncrementalAlterConfigs); returns the overrides afterwards."""
    await admin.describe_topics([name])  # UNKNOWN_TOPIC_OR_PARTITION before anything else
    ops = [AlterConfigOp(k, "set", v) for k, v in set_.items()] + [AlterConfigOp(k, "delete") for k in delete]
    await admin.incremental_alter_configs({("topic", name): ops})
    entries = (await admin.describe_configs([("topic", name)]))[("topic", name)]
    return {"topic": name, "configs": {e.name: e.value for e in sorted(entries.values(), key=lambda e: e.name)
                                       if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}}


async def add_partitions(admin: Admin, name: str, total: int) -> dict:
    """Grow a topic to ``total`` partitions (Kafka's rule: never fewer than it has)."""
    before = len((await admin.describe_topics([name]))[name].partitions)
    if total <= before:
        raise errors.InvalidPartitionsError(
            f"Topic {name} has {before} partition(s) already, cannot go to {total}")
    await admin.create_partitions({name: total})
    return {"topic": name, "partitions_before": before, "partitions": total}


async def delete(admin: Admin, names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    await admin.delete_topics(names)
    return names
