"""``tierlog tier restore``: re-create topics from their remote segments after their cluster is lost.

No Kafka release rebuilds a topic from its bucket; Redpanda's topic recovery is the model. When a cluster
and its ZooKeeper data are gone but the remote tier survives, a new cluster pointed at the same store gets
each topic back with its original topic id, and every tiered record at its original offset, timestamp,
key, value and headers. What was never uploaded (each partition's untiered tail) is not in the store and
is lost, unless replicas of it survive elsewhere.

Three steps, each its own function:

1. :func:`scan` reads the store's ``.manifest`` objects (docs/tiered-storage-layout.md: a manifest is
   written last, so each one is a complete segment) and :func:`plan_partition` picks, per partition, the
   chain of segments to restore: from the segment of the newest leader epoch ending last, back through
   predecessors that reach its first offset, until a gap. A manifest off that chain (an upload a fenced
   leader made, a segment beyond a gap) is reported and left alone.
2. :func:`write_metadata` writes COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED for the chain's segments,
   under their original segment ids, to ``__remote_log_metadata`` (the topic-based metadata manager's
   record format and partitioning), with KIP-917 custom metadata naming the key folder the segment lives
   in: the new cluster has a new cluster id, so without it the storage manager would look in its own.
3. :func:`create_topic` sends CreateTopics with the reserved configs of :mod:`tierlog.cluster.restore`:
   the controller gives the topic its original id, starts every partition's leader epoch above the
   restored ones, and each replica positions its new log at the restore point (log start = the oldest
   restored offset, log end = one past the newest), so new records continue after the restored ones.

Events go before the topic: by the time a broker leads a partition its metadata is there to load.
Running restore again is safe: a topic that exists with its original id is reported as restored and
left alone; one that exists with another id is an error (nothing written for it); after an interruption
between steps 2 and 3 the events are written again, and the metadata manager ignores the repeats.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.client.admin import Admin, NewTopic
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition
from tierlog.cluster.image import RestorePoint
from tierlog.cluster.restore import restore_configs
from tierlog.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError, describe_error
from tierlog.kafka_uuid import uuid_to_str
from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm.consumer_task import METADATA_TOPIC
from tierlog.tiered.rlmm.partitioner import metadata_partition
from tierlog.tiered.rlmm.serde import serialize
from tierlog.tiered.rsm import RemoteStorageError, RemoteStorageManager, create_remote_storage_manager, layout
from tierlog.tiered.rsm.base import LayoutRemoteStorageManager
from tierlog.tools import clients


class RestoreError(Exception):
    """The restore cannot go on (one line for the operator)."""


# ----------------------------------------------------------------------------------------------- scan


def open_store(cfg: Any) -> RemoteStorageManager:
    """The storage manager the broker configuration ``cfg`` (a BrokerConfig) names, opened read-only: a
    wrong path or bucket stays visibly empty instead of being created."""
    if cfg["remote.log.metadata.manager.class.name"] != "topic":
        raise RestoreError("restore writes the remote segment metadata to __remote_log_metadata: the cluster needs "
                           "the topic-based metadata manager (remote.log.metadata.manager.class.name=topic)")
    return create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"], cfg.rsm_config(),
                                         cfg["remote.log.storage.manager.class.path"], read_only=True)


@dataclass(frozen=True, slots=True)
class FoundSegment:
    """One manifest in the store, and the key folder (prefix plus cluster folder) it lives under."""

    prefix: str
    manifest: layout.SegmentManifest

    @property
    def first_epoch(self) -> int:
        return min(self.manifest.leader_epochs)

    @property
    def last_epoch(self) -> int:
        return max(self.manifest.leader_epochs)


@dataclass
class PartitionPlan:
    partition: int
    chain: list[FoundSegment]  # oldest first
    skipped: list[FoundSegment] = field(default_factory=list)

    @property
    def point(self) -> RestorePoint:
        epochs: list[tuple[int, int]] = []
        for seg in self.chain:
            for epoch, offset in sorted(seg.manifest.leader_epochs.items()):
                if not epochs or epoch > epochs[-1][0]:
                    epochs.append((epoch, max(offset, epochs[-1][1] if epochs else offset)))
        return RestorePoint(self.chain[0].manifest.start_offset, self.chain[-1].manifest.end_offset + 1,
                            tuple(epochs))

    def to_json(self) -> dict:
        point = self.point
        return {"partition": self.partition, "segments": len(self.chain), "skipped_segments": len(self.skipped),
                "log_start_offset": point.log_start_offset, "log_end_offset": point.log_end_offset,
                "bytes": sum(s.manifest.log_size for s in self.chain),
                "leader_epochs": [list(e) for e in point.leader_epochs],
                "max_timestamp_ms": max(s.manifest.max_timestamp_ms for s in self.chain)}


@dataclass
class TopicPlan:
    topic: str
    topic_id: uuid.UUID
    # The key folders holding its segments (None: the older layout without one): the lost cluster's, and
    # after a restore also those of the clusters that held it since (its segments are in both).
    cluster_ids: list[str | None]
    partitions: dict[int, PartitionPlan]
    min_partitions: int = 0  # asked for (--partitions): a high partition that never tiered still comes back

    @property
    def num_partitions(self) -> int:
        return max(max(self.partitions) + 1, self.min_partitions)

    def to_json(self) -> dict:
        return {"topic": self.topic, "topic_id": uuid_to_str(self.topic_id), "source_cluster_ids": self.cluster_ids,
                "partitions": self.num_partitions,
                "restored_partitions": [p.to_json() for _, p in sorted(self.partitions.items())]}


def plan_partition(partition: int, found: Iterable[FoundSegment]) -> PartitionPlan:
    """The segments to restore: from the segment of the highest leader epoch that ends last (Kafka's rule:
    the newest leader's lineage wins), back through predecessors that start earlier and reach its first
    offset (ending right before it, or overlapping it, as a segment a new leader uploaded again whole
    does) with no newer epoch than its first, until none does."""
    found = list(found)
    tail = max(found, key=lambda f: (f.last_epoch, f.manifest.end_offset, f.manifest.written_ms))
    chain = [tail]
    while True:
        cur = chain[-1]
        start = cur.manifest.start_offset
        before = [f for f in found if f.manifest.start_offset < start <= f.manifest.end_offset + 1
                  and f.last_epoch <= cur.first_epoch]
        if not before:
            break
        # Exactly adjacent first, then the one reaching furthest back, then the newest upload.
        chain.append(max(before, key=lambda f: (f.manifest.end_offset == start - 1, -f.manifest.start_offset,
                                                f.manifest.written_ms)))
    chain.reverse()
    used = {id(f) for f in chain}
    return PartitionPlan(partition, chain, [f for f in found if id(f) not in used])


def scan(rsm: RemoteStorageManager, topics: Iterable[str] | None = None,
         source_cluster_id: str | None = None, min_partitions: int = 0) -> list[TopicPlan]:
    """A plan for each topic found in the store (only ``topics`` when given; only under the cluster folder
    ``source_cluster_id`` when given), with at least ``min_partitions`` partitions. Segments of one topic
    id in several cluster folders are one topic (a topic restored before, then tiered by its new cluster);
    a topic name found under two topic ids is an error naming them, unless ``source_cluster_id`` tells
    which."""
    if not isinstance(rsm, LayoutRemoteStorageManager):
        raise RestoreError("restore reads the built-in storage layout's manifests: it needs the filesystem or "
                           "objectstore storage manager")
    wanted = set(topics) if topics is not None else None
    prefix = rsm.key_prefix
    groups: dict[tuple[str, uuid.UUID], dict[int, list[FoundSegment]]] = defaultdict(lambda: defaultdict(list))
    folders: dict[tuple[str, uuid.UUID], set[str | None]] = defaultdict(set)
    try:
        keys = rsm.list_objects(prefix)
    except RemoteStorageError as e:
        raise RestoreError(f"cannot list the remote store: {e}") from None
    for key, _ in keys:
        parsed = layout.parse_key(key, prefix)
        if parsed is None or parsed.suffix != layout.MANIFEST_SUFFIX:
            continue
        if wanted is not None and parsed.topic not in wanted:
            continue
        if source_cluster_id is not None and parsed.cluster_id != source_cluster_id:
            continue
        try:
            manifest = rsm.read_manifest(key)
        except RemoteStorageError as e:
            raise RestoreError(f"cannot read manifest {key}: {e}") from None
        folder = layout.cluster_prefix(prefix, parsed.cluster_id) if parsed.cluster_id else prefix
        groups[(parsed.topic, parsed.topic_id)][parsed.partition].append(FoundSegment(folder, manifest))
        folders[(parsed.topic, parsed.topic_id)].add(parsed.cluster_id)
    by_name: dict[str, list[uuid.UUID]] = defaultdict(list)
    for name, topic_id in groups:
        by_name[name].append(topic_id)
    plans = []
    for name, ids in sorted(by_name.items()):
        if len(ids) > 1:
            listed = "; ".join(f"topic id {uuid_to_str(i)} in cluster folder(s) "
                               f"{', '.join(sorted(c or '(none)' for c in folders[(name, i)]))}" for i in ids)
            raise RestoreError(f"topic {name} is in the store under {len(ids)} topic ids ({listed}); pick the "
                               "cluster folder with --source-cluster-id")
        key = (name, ids[0])
        plans.append(TopicPlan(name, ids[0], sorted(folders[key], key=lambda c: c or ""),
                               {p: plan_partition(p, found) for p, found in sorted(groups[key].items())},
                               min_partitions))
    missing = sorted((wanted or set()) - {p.topic for p in plans})
    if missing:
        raise RestoreError(f"no remote segment of topic {missing[0]} in the store"
                           + (f" under cluster folder {source_cluster_id}" if source_cluster_id else ""))
    return plans


# ------------------------------------------------------------------------------------------- restore


def segment_events(plan: TopicPlan, now_ms: int | None = None
                   ) -> list[tuple[TopicIdPartition, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate]]:
    """The COPY_SEGMENT_STARTED / COPY_SEGMENT_FINISHED pair of every segment to restore, as the copy task
    of the broker that uploaded it wrote them, plus custom metadata naming the segment's key folder."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out = []
    for p, pp in sorted(plan.partitions.items()):
        tp = TopicIdPartition(plan.topic_id, plan.topic, p)
        for seg in pp.chain:
            m = seg.manifest
            segment_id = RemoteLogSegmentId(tp, m.segment_id)
            md = RemoteLogSegmentMetadata(segment_id, m.start_offset, m.end_offset, m.max_timestamp_ms, m.broker_id,
                                          now, m.log_size, dict(m.leader_epochs))
            # The storage manager's own custom metadata: the key folder ("p") and the stored size ("s").
            custom = json.dumps({"p": seg.prefix, "s": m.log_stored_size + m.indexes_size},
                                separators=(",", ":")).encode()
            out.append((tp, md, RemoteLogSegmentMetadataUpdate(segment_id, now, custom,
                                                               RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                               m.broker_id)))
    return out


async def metadata_partitions(admin: Admin, deadline: float) -> int:
    """The partition count of ``__remote_log_metadata``, waiting for the brokers' metadata managers to
    create it (at broker ready) until ``deadline``."""
    while True:
        try:
            described = await admin.describe_topics([METADATA_TOPIC])
            return len(described[METADATA_TOPIC].partitions)
        except UnknownTopicOrPartitionError:
            if time.monotonic() >= deadline:
                raise RestoreError(f"{METADATA_TOPIC} does not exist: the cluster's brokers need "
                                   "remote.log.storage.system.enable=true and the topic-based metadata manager "
                                   "(remote.log.metadata.manager.class.name=topic)") from None
            await asyncio.sleep(0.2)


async def write_metadata(producer: Producer, plan: TopicPlan, num_metadata_partitions: int) -> int:
    """Write the segment events of ``plan``; the number of segments."""
    events = segment_events(plan)
    sent = []
    for tp, started, finished in events:
        mp = metadata_partition(tp.topic_id, tp.partition, num_metadata_partitions)
        sent.append(await producer.send(METADATA_TOPIC, serialize(started), partition=mp))
        sent.append(await producer.send(METADATA_TOPIC, serialize(finished), partition=mp))
    for fut in sent:
        await fut
    return len(events)


async def create_topic(admin: Admin, plan: TopicPlan, replication_factor: int, configs: Mapping[str, str]) -> None:
    points = {p: pp.point for p, pp in plan.partitions.items()}
    topic_configs = {**configs, "remote.storage.enable": "true", **restore_configs(plan.topic_id, points)}
    await admin.create_topics([NewTopic(plan.topic, plan.num_partitions, replication_factor, topic_configs)])


async def existing_topic_ids(admin: Admin, names: Iterable[str]) -> dict[str, uuid.UUID | None]:
    listed = await admin.list_topics()
    present = [n for n in names if n in listed]
    if not present:
        return {}
    described = await admin.describe_topics(present)
    return {n: d.topic_id for n, d in described.items()}


async def wait_positioned(admin: Admin, plan: TopicPlan, deadline: float) -> bool:
    """Whether every restored partition's leader answers ListOffsets with the restore point's log start and
    at least its log end, before ``deadline``."""
    want = {TopicPartition(plan.topic, p): pp.point for p, pp in plan.partitions.items()}
    while True:
        try:
            earliest = await admin.list_offsets({tp: "earliest" for tp in want})
            latest = await admin.list_offsets({tp: "latest" for tp in want})
            if all(earliest[tp].offset == pt.log_start_offset and latest[tp].offset >= pt.log_end_offset
                   for tp, pt in want.items()):
                return True
        except KafkaError:
            pass  # leaders not elected yet
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


async def restore(bootstrap: str, plans: list[TopicPlan], *, replication_factor: int = -1,
                  configs: Mapping[str, str] | None = None, timeout_s: float = 30.0,
                  client_config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Restore every planned topic into the cluster at ``bootstrap``; one result per topic, ``status``
    ``restored``, ``exists`` (already restored, with the same topic id) or ``error``."""
    configs = dict(configs or {})
    deadline = time.monotonic() + timeout_s
    results = []
    async with clients.admin(bootstrap, timeout_s, client_config) as admin:
        existing = await existing_topic_ids(admin, [p.topic for p in plans])
        todo = []
        for plan in plans:
            result = plan.to_json()
            results.append(result)
            if plan.topic not in existing:
                todo.append((plan, result))
            elif existing[plan.topic] == plan.topic_id:
                result["status"] = "exists"
            else:
                result["status"] = "error"
                result["error"] = (f"topic {plan.topic} exists with another topic id "
                                   f"({uuid_to_str(existing[plan.topic]) if existing[plan.topic] else 'none'}); "
                                   "delete it or restore into another cluster")
        if not todo:
            return results
        n = await metadata_partitions(admin, deadline)
        producer = Producer({**clients.settings(bootstrap, timeout_s, client_config, "producer"), "acks": "all",
                             "enable.idempotence": "true",
                             "linger.ms": "0"})
        await producer.start()
        try:
            for plan, result in todo:
                result["segments_written"] = await write_metadata(producer, plan, n)
        finally:
            await producer.close()
        for plan, result in todo:
            try:
                await create_topic(admin, plan, replication_factor, configs)
            except TopicAlreadyExistsError:
                pass  # created meanwhile (a concurrent restore): checked below
            except KafkaError as e:
                result["status"], result["error"] = "error", describe_error(e)
                continue
            result["status"] = "restored"
        created = await existing_topic_ids(admin, [p.topic for p, r in todo if r["status"] == "restored"])
        for plan, result in todo:
            if result["status"] != "restored":
                continue
            if created.get(plan.topic) != plan.topic_id:  # another creation won the name meanwhile
                result["status"], result["error"] = "error", f"topic {plan.topic} was created meanwhile with another id"
                continue
            result["positioned"] = await wait_positioned(admin, plan, deadline)
    return results


# -------------------------------------------------------------------------------------------- output


def format_plan(results: list[dict[str, Any]]) -> str:
    """One block per topic: its source and status, then a line per restored partition."""
    lines = []
    for t in results:
        status = t.get("status", "planned")
        folders = ", ".join(c or "(none)" for c in t["source_cluster_ids"])
        head = (f"{t['topic']} (topic id {t['topic_id']}, cluster folder(s) {folders}, {t['partitions']} "
                f"partition(s)): {status}")
        if "error" in t:
            head += f": {t['error']}"
        if t.get("positioned") is False:
            head += " (the leaders did not report the restored offsets in time; check `tierlog topic describe`)"
        lines.append(head)
        for p in t["restored_partitions"]:
            skipped = f", {p['skipped_segments']} manifest(s) off the chain left alone" if p["skipped_segments"] else ""
            lines.append(f"  partition {p['partition']}: offsets {p['log_start_offset']}..{p['log_end_offset'] - 1} "
                         f"in {p['segments']} segment(s), {p['bytes']} bytes, leader epochs "
                         f"{[e for e, _ in p['leader_epochs']]}{skipped}")
    return "\n".join(lines) if lines else "no topic to restore"
