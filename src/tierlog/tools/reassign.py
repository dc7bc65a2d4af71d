"""Partition reassignment (``tierlog reassign``, Kafka's kafka-reassign-partitions): generate a plan, execute
it with an optional replication throttle, verify it (removing the throttles once nothing moves), cancel it,
list what moves.

The files are Kafka's: a topics-to-move file ``{"version":1,"topics":[{"topic":"orders"}]}`` and a
reassignment file ``{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4],
"log_dirs":["any","any","any"]}]}`` (``log_dirs`` optional), so a plan made by either tool runs with the
other. The throttle is Kafka's too: the topic configs ``leader.replication.throttled.replicas`` (the
replicas copied from, ``partition:broker``) and ``follower.replication.throttled.replicas`` (the replicas
copied to), and the dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` on every broker the move involves. tierlog's brokers have no
AlterReplicaLogDirs, so a replica cannot be sent to a given log dir: ``log_dirs`` must be ``any``.

Input mistakes raise ValueError (``<what>; <what to do>``); the brokers' answers are their typed Kafka errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog import errors
from tierlog.client.admin import Admin, AlterConfigOp
from tierlog.client.types import TopicPartition
from tierlog.cluster.placement import assign_replicas

ANY_LOG_DIR = "any"
VERSION = 1
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
#: Kafka's tool clears this one too (it has AlterReplicaLogDirs); deleting a config a broker lacks is harmless
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

TOPICS_EXAMPLE = '{"version":1,"topics":[{"topic":"orders"}]}'
PLAN_EXAMPLE = '{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3]}]}'


def name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


# ------------------------------------------------------------------------------------------ the files


def _load(text: str, what: str, example: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the {what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                         f"write it as {example}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"the {what} must be a JSON object; write it as {example}")
    version = doc.get("version", VERSION)
    if version != VERSION:
        raise ValueError(f"the {what} has version {version!r}, Kafka's format knows version 1 only; "
                         "set \"version\": 1")
    return doc


def _entries(doc: dict, key: str, what: str, example: str) -> list[dict]:
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError(f"\"{key}\" of the {what} must be a list of objects; write it as {example}")
    return items


def _field(entry: dict, key: str, kind: type, what: str, example: str) -> Any:
    value = entry.get(key)
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is list:
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ok:
        expected = {str: "a string", int: "a whole number", list: "a list of broker ids"}[kind]
        raise ValueError(f"\"{key}\" of {json.dumps(entry)} in the {what} must be {expected}; "
                         f"write it as {example}")
    return value


def parse_topics(text: str) -> list[str]:
    """The topics of a topics-to-move file, in order; duplicates and an empty list are refused."""
    what = "topics-to-move file"
    doc = _load(text, what, TOPICS_EXAMPLE)
    topics = [_field(e, "topic", str, what, TOPICS_EXAMPLE) for e in _entries(doc, "topics", what, TOPICS_EXAMPLE)]
    if not topics:
        raise ValueError(f"the {what} names no topic; write it as {TOPICS_EXAMPLE}")
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise ValueError(f"List of topics to reassign contains duplicate entries: {', '.join(twice)}; "
                         "name each topic once")
    return topics


@dataclass
class Plan:
    """A reassignment file: each partition's target replicas, in the file's order, and the replicas given a
    log dir other than ``any``."""

    partitions: list[tuple[TopicPartition, list[int]]]
    log_dirs: dict[tuple[TopicPartition, int], str] = field(default_factory=dict)

    @property
    def targets(self) -> dict[TopicPartition, list[int]]:
        return dict(self.partitions)


def parse_plan(text: str) -> Plan:
    """A reassignment file in Kafka's format, checked as Kafka's tool checks it."""
    what = "reassignment file"
    doc = _load(text, what, PLAN_EXAMPLE)
    plan = Plan([])
    for e in _entries(doc, "partitions", what, PLAN_EXAMPLE):
        tp = TopicPartition(_field(e, "topic", str, what, PLAN_EXAMPLE), _field(e, "partition", int, what,
                                                                                  PLAN_EXAMPLE))
        replicas = _field(e, "replicas", list, what, PLAN_EXAMPLE)
        dirs = e.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ValueError(f"\"log_dirs\" of {name(tp)} in the {what} must be a list of strings (\"any\" or a "
                             "path); leave it out for \"any\"")
        if len(dirs) != len(replicas):
            raise ValueError(f"Size of replicas list {replicas} is different from size of log dirs list {dirs} for "
                             f"partition {name(tp)}; give one log dir per replica, or leave log_dirs out")
        plan.partitions.append((tp, replicas))
        plan.log_dirs.update({(tp, r): d for r, d in zip(replicas, dirs) if d != ANY_LOG_DIR})
    return plan


def check_executable(plan: Plan) -> None:
    """Kafka's checks before executing a plan, and tierlog's lack of AlterReplicaLogDirs."""
    if not plan.partitions:
        raise ValueError(f"Partition reassignment list cannot be empty; write the plan as {PLAN_EXAMPLE}")
    empty = [name(tp) for tp, replicas in plan.partitions if not replicas]
    if empty:
        raise ValueError(f"Partition replica list cannot be empty ({', '.join(empty)}); give each partition its "
                         "target brokers")
    tps = [tp for tp, _ in plan.partitions]
    twice = sorted({tp for tp in tps if tps.count(tp) > 1})
    if twice:
        raise ValueError(f"Partition reassignment contains duplicate topic partitions: "
                         f"{','.join(map(name, twice))}; give each partition once")
    doubled = [f"{name(tp)} contains multiple entries for "
               f"{','.join(str(r) for r in sorted(set(rs)) if rs.count(r) > 1)}"
               for tp, rs in plan.partitions if len(set(rs)) != len(rs)]
    if doubled:
        raise ValueError(f"Partition replica lists may not contain duplicate entries: {'. '.join(doubled)}; name "
                         "each broker once per partition")
    if plan.log_dirs:
        (tp, broker), where = next(iter(plan.log_dirs.items()))
        raise ValueError(f"the plan sends replica {name(tp)} on broker {broker} to log dir {where}, but tierlog's "
                         "brokers cannot move a replica between log dirs (no AlterReplicaLogDirs); write \"any\" "
                         "in log_dirs, or leave log_dirs out")


def format_plan(assignment: Mapping[TopicPartition, Iterable[int]]) -> dict:
    """A reassignment document in Kafka's layout: partitions sorted by topic and partition, log dirs ``any``."""
    return {"version": VERSION, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
         "log_dirs": [ANY_LOG_DIR] * len(list(replicas))} for tp, replicas in sorted(assignment.items())]}


def to_json(doc: dict) -> str:
    """Compact, as Kafka's tool prints it (one line an operator saves as the plan file)."""
    return json.dumps(doc, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ throttles


def throttled_replicas(moves: Mapping[TopicPartition, tuple[set[int], set[int]]]) -> dict[str, tuple[str, str]]:
    """{topic: (leader value, follower value)} for the moves {partition: (sources, destinations)}: the leader
    side names every source replica, the follower side every destination that is no source, as
    ``partition:broker`` sorted as text (Kafka's TreeSet of strings)."""
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    for tp, (sources, destinations) in moves.items():
        leader.setdefault(tp.topic, set()).update(f"{tp.partition}:{b}" for b in sources)
        follower.setdefault(tp.topic, set()).update(f"{tp.partition}:{b}" for b in destinations - sources)
    return {t: (",".join(sorted(leader[t])), ",".join(sorted(follower[t]))) for t in leader}


def moves(current: Mapping[TopicPartition, Any], targets: Mapping[TopicPartition, list[int]],
          replicas: Mapping[TopicPartition, list[int]]) -> dict[TopicPartition, tuple[set[int], set[int]]]:
    """Kafka's proposed move map: every reassignment in progress (sources: its original replicas, destinations:
    those it adds), with each target of the plan on top (sources: the original replicas of one in progress,
    else the current replicas; destinations: the target's others)."""
    out = {tp: (set(r.replicas) - set(r.adding_replicas), set(r.adding_replicas)) for tp, r in current.items()}
    for tp, target in targets.items():
        sources = out[tp][0] if tp in out else set(replicas[tp])
        out[tp] = (sources, set(target) - sources)
    return out


async def set_throttle(admin: Admin, moving: Mapping[TopicPartition, tuple[set[int], set[int]]], rate: int
                       ) -> list[int]:
    """The throttled replicas on each moving topic and the rate on each broker involved; the brokers."""
    await admin.incremental_alter_configs({
        ("topic", t): [AlterConfigOp(LEADER_REPLICAS, "set", lead), AlterConfigOp(FOLLOWER_REPLICAS, "set", follow)]
        for t, (lead, follow) in throttled_replicas(moving).items()})
    brokers = sorted({b for sources, destinations in moving.values() for b in sources | destinations})
    await admin.incremental_alter_configs({
        ("broker", str(b)): [AlterConfigOp(k, "set", str(rate)) for k in (LEADER_RATE, FOLLOWER_RATE)]
        for b in brokers})
    return brokers


async def clear_throttles(admin: Admin, plan: Plan) -> dict:
    """Remove the rates from every live broker and the throttled replicas from the plan's topics (those that
    exist): Kafka clears them all, not knowing which brokers earlier reassignments involved."""
    brokers = [n.node_id for n in (await admin.describe_cluster()).brokers]
    existing = await admin.list_topics(internal=True)
    topics = sorted({tp.topic for tp, _ in plan.partitions if tp.topic in existing})
    await admin.incremental_alter_configs({("broker", str(b)): [AlterConfigOp(k, "delete") for k in BROKER_THROTTLES]
                                           for b in brokers})
    if topics:
        await admin.incremental_alter_configs({("topic", t): [AlterConfigOp(k, "delete") for k in TOPIC_THROTTLES]
                                               for t in topics})
    return {"brokers": brokers, "topics": topics}


# ------------------------------------------------------------------------------------------ the actions


async def _assignment(admin: Admin, topics: Iterable[str]) -> dict[TopicPartition, list[int]]:
    described = await admin.describe_topics(topics)
    return {TopicPartition(t, p.partition): list(p.replicas) for t, d in described.items() for p in d.partitions}


async def _brokers(admin: Admin) -> dict[int, str | None]:
    return {n.node_id: n.rack for n in (await admin.describe_cluster()).brokers}


def _unknown_brokers(wanted: Iterable[int], live: Iterable[int], where: str) -> None:
    unknown = sorted(set(wanted) - set(live))
    if unknown:
        raise ValueError(f"Unknown broker id {', '.join(map(str, unknown))} in {where}: the cluster's brokers are "
                         f"{', '.join(map(str, sorted(live)))}; name brokers that are running")


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise ValueError(f"--broker-list {text!r} is not a comma-separated list of broker ids; write it as "
                         "1,2,3") from None
    twice = sorted({b for b in brokers if brokers.count(b) > 1})
    if twice:
        raise ValueError(f"Broker list contains duplicate entries: {', '.join(map(str, twice))}; name each "
                         "broker once")
    return brokers


async def generate(admin: Admin, topics: list[str], brokers: list[int], rack_aware: bool = True) -> dict:
    """The current assignment of ``topics`` and a proposed one over ``brokers`` (Kafka's placement, rack-aware
    when every chosen broker has a rack): {"current": plan document, "proposed": plan document}."""
    current = await _assignment(admin, topics)
    racks = await _brokers(admin)
    _unknown_brokers(brokers, racks, "--broker-list")
    chosen = {b: racks[b] if rack_aware else None for b in brokers}
    with_rack = [b for b, r in chosen.items() if r is not None]
    if with_rack and len(with_rack) != len(chosen):
        raise ValueError("Not all brokers have rack information (" + ", ".join(
            f"{b}: {r or 'none'}" for b, r in sorted(chosen.items())) + "); add --disable-rack-aware to place "
                         "replicas without racks")
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in dict.fromkeys(topics):
        parts = sorted(tp.partition for tp in current if tp.topic == topic)
        factor = len(current[TopicPartition(topic, parts[0])])
        if factor > len(chosen):
            raise ValueError(f"topic {topic} has {factor} replicas per partition, more than the {len(chosen)} "
                             f"broker(s) of --broker-list; name at least {factor} brokers")
        for p, replicas in assign_replicas(chosen, len(parts), factor).items():
            proposed[TopicPartition(topic, p)] = replicas
    return {"current": format_plan(current), "proposed": format_plan(proposed)}


async def execute(admin: Admin, plan: Plan, *, additional: bool = False, throttle: int | None = None) -> dict:
    """Start the plan's reassignments (AlterPartitionReassignments), first setting the throttle when given;
    refused while others are in progress unless ``additional``. Returns the current assignment of the plan's
    partitions (the rollback plan), the throttled brokers and the partitions started."""
    check_executable(plan)
    targets = plan.targets
    ongoing = await admin.list_partition_reassignments()
    if ongoing and not additional:
        raise ValueError(f"Cannot execute because there is an existing partition reassignment "
                         f"({', '.join(map(name, list(ongoing)[:5]))}{', ...' if len(ongoing) > 5 else ''}); add "
                         "--additional to start this one besides it (also how to change the throttle of the "
                         "running one: execute it again with --additional and the new --throttle)")
    _unknown_brokers({b for rs in targets.values() for b in rs}, await _brokers(admin), "the reassignment file")
    replicas = await _assignment(admin, sorted({tp.topic for tp in targets}))
    missing = [tp for tp in targets if tp not in replicas]
    if missing:
        raise errors.UnknownTopicOrPartitionError(f"Unable to find partition: {', '.join(map(name, missing))}")
    rollback = format_plan({tp: replicas[tp] for tp in targets})
    throttled: list[int] = []
    if throttle is not None:
        throttled = await set_throttle(admin, moves(ongoing, targets, replicas), throttle)
    try:
        await admin.alter_partition_reassignments(targets)
    except errors.KafkaError as e:
        raise _per_partition(e, "Error reassigning") from None
    return {"current": rollback, "throttle": throttle, "throttled_brokers": throttled,
            "started": [name(tp) for tp in sorted(targets)]}


def _per_partition(e: errors.KafkaError, what: str) -> errors.KafkaError:
    """One error naming every partition the controller refused (the first one's type, so its code shows)."""
    failed = getattr(e, "errors", None)
    if not failed:  # the whole request failed (NOT_CONTROLLER for too long, an authorization): as it is
        return e
    if len(failed) == 1:
        tp, x = next(iter(failed.items()))
        return type(e)(f"{what} partition {name(tp)}: {x.message}")
    return type(e)(f"{what} partitions: " + "; ".join(f"{name(tp)}: {x.message} ({x.name})"
                                                      for tp, x in sorted(failed.items())))


async def verify(admin: Admin, plan: Plan, *, preserve_throttles: bool = False) -> dict:
    """Each partition of the plan: moving, done at its target, or not moving but on other replicas. Once no
    reassignment is in progress in the cluster, the throttles are removed (unless ``preserve_throttles``)."""
    targets = plan.targets
    ongoing = await admin.list_partition_reassignments()
    topics = sorted({tp.topic for tp in targets if tp not in ongoing})
    existing = await admin.list_topics(internal=True)
    replicas = await _assignment(admin, [t for t in topics if t in existing]) if topics else {}
    states = []
    for tp, target in sorted(targets.items()):
        if tp in ongoing:
            states.append({"topic": tp.topic, "partition": tp.partition, "state": "in progress",
                           "replicas": list(ongoing[tp].replicas), "target": target})
        else:
            now = replicas.get(tp, [])
            states.append({"topic": tp.topic, "partition": tp.partition,
                           "state": "completed" if now == target else "other replicas", "replicas": now,
                           "target": target})
    cleared = None
    if not ongoing and not preserve_throttles:
        cleared = await clear_throttles(admin, plan)
    return {"partitions": states, "in_progress": bool(ongoing), "cleared": cleared}


async def cancel(admin: Admin, plan: Plan, *, preserve_throttles: bool = False) -> dict:
    """Cancel the plan's reassignments that are in progress (AlterPartitionReassignments with null replicas:
    back to the original replicas) and remove the throttles (unless ``preserve_throttles``)."""
    moving = await admin.list_partition_reassignments([tp for tp, _ in plan.partitions])
    cancelled = sorted(tp for tp, r in moving.items() if r.adding_replicas or r.removing_replicas)
    if cancelled:
        try:
            await admin.alter_partition_reassignments(dict.fromkeys(cancelled))
        except errors.KafkaError as e:
            raise _per_partition(e, "Error cancelling the reassignment of") from None
    cleared = None if preserve_throttles else await clear_throttles(admin, plan)
    return {"cancelled": [name(tp) for tp in cancelled], "cleared": cleared}


async def list_moving(admin: Admin) -> list[dict]:
    """Every partition being reassigned: its replicas while moving, those being added and removed."""
    return [{"topic": tp.topic, "partition": tp.partition, "replicas": list(r.replicas),
             "adding": list(r.adding_replicas), "removing": list(r.removing_replicas)}
            for tp, r in (await admin.list_partition_reassignments()).items()]
