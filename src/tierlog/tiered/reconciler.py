"""The reconciler (``tierlog tier reconcile``): the remote store compared with the remote log metadata of the
partitions a broker leads or follows."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from tierlog.kafka_uuid import uuid_to_str
from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.rsm import layout
from tierlog.tiered.tasks.state import now_ms

if TYPE_CHECKING:
    from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState


async def reconcile(rlm: RemoteLogManager, delete: bool = False, cluster_id: str | None = None,
                    known_topic_ids: set | None = None, deleted_topic_ids: set | None = None) -> dict:
    """Compare the remote store with the metadata: objects no metadata references (orphans, e.g. of an
    upload cut short by a crash) and finished segments whose objects are missing. With ``delete`` the
    orphans are removed. Partitions whose metadata is still loading, or whose remote data is being
    deleted right now, are left alone.

    A store may be shared with other clusters. Objects in another cluster's folder (``cluster_id`` is
    this cluster's), and objects of topic ids this cluster never knew (not in ``known_topic_ids``:
    its topics and the topics it deleted), are *foreign*: reported, never deleted. Objects of the
    partitions this broker leads or follows are checked against their metadata; orphans are deleted
    only where this broker knows the whole picture: partitions it leads (their metadata loaded) and
    topics this cluster deleted (``deleted_topic_ids``)."""
    loop = asyncio.get_running_loop()
    prefix = rlm.rsm.key_prefix
    # Objects first, metadata second: an upload always records COPY_SEGMENT_STARTED before it writes.
    objects = await loop.run_in_executor(rlm.expiration_pool, rlm.rsm.list_objects, prefix)
    busy = set(rlm.disabling)
    hosted = [*rlm.partitions, *rlm.followers]  # led or followed here: their metadata is read here
    not_ready = sorted(str(tp) for tp in hosted if not rlm.rlmm.is_ready(tp))
    referenced: set = set()
    finished: list[RemoteLogSegmentMetadata] = []
    followed = set()
    for tp in hosted:
        if not rlm.rlmm.is_ready(tp):
            busy.add(tp)
            continue
        if tp in rlm.partitions:
            # Deletable only where this broker leads: a follower may not have read an upload's
            # COPY_SEGMENT_STARTED yet, and would take the upload's objects for orphans.
            followed.add(tp)
        for md in rlm.rlmm.list_remote_log_segments(tp):
            referenced.add(md.segment_id.id)
            if md.state == S.COPY_SEGMENT_FINISHED:
                finished.append(md)
    deleted_topics = deleted_topic_ids or set()
    present = {key for key, _ in objects}
    orphans: dict[str, dict] = {}
    foreign: dict[tuple, dict] = {}
    unknown = []
    for key, size in objects:
        pk = layout.parse_key(key, prefix)
        if pk is None:
            unknown.append(key)
            continue
        other_cluster = pk.cluster_id is not None and pk.cluster_id != cluster_id
        if other_cluster or (known_topic_ids is not None and pk.topic_id not in known_topic_ids):
            group = foreign.setdefault((pk.cluster_id or "", pk.topic, pk.topic_id), {
                "cluster_id": pk.cluster_id, "topic": pk.topic, "topic_id": uuid_to_str(pk.topic_id),
                "reason": "another cluster's folder" if other_cluster else "a topic id this cluster never had",
                "objects": 0, "bytes": 0})
            group["objects"] += 1
            group["bytes"] += size
            continue
        tp = TopicIdPartition(pk.topic_id, pk.topic, pk.partition)
        if tp in busy or pk.segment_id in referenced:
            continue
        stem = key[:-len(pk.suffix)]
        entry = orphans.setdefault(stem, {"topic": pk.topic, "partition": pk.partition,
                                          "start_offset": pk.start_offset, "segment_id": str(pk.segment_id),
                                          "keys": [], "bytes": 0, "topic_followed": tp in followed,
                                          "deletable": tp in followed or pk.topic_id in deleted_topics,
                                          "parsed": pk})
        entry["keys"].append(key)
        entry["bytes"] += size
    missing = []
    for md in finished:
        candidates = rlm.rsm.segment_key_candidates(md)
        if not any(keys.manifest in present and keys.log in present for keys in candidates):
            keys = next((k for k in candidates if k.manifest in present or k.log in present), candidates[0])
            absent = [k for k in (keys.manifest, keys.log) if k not in present]
            missing.append({"topic": md.topic_id_partition.topic, "partition": md.topic_id_partition.partition,
                            "start_offset": md.start_offset, "end_offset": md.end_offset,
                            "segment_id": str(md.segment_id.id), "missing_keys": absent})
    deleted = 0
    if delete:
        for entry in orphans.values():
            if not entry["deletable"]:
                continue
            pk = entry["parsed"]
            tp = TopicIdPartition(pk.topic_id, pk.topic, pk.partition)
            # The prefix it was found under, as KIP-917 custom metadata: the delete touches that stem only.
            found_under = layout.cluster_prefix(prefix, pk.cluster_id) if pk.cluster_id else prefix
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, pk.segment_id), pk.start_offset,
                                          pk.start_offset, -1, rlm.broker_id, now_ms(), 0,
                                          {0: pk.start_offset},
                                          custom_metadata=json.dumps({"p": found_under}).encode())
            await loop.run_in_executor(rlm.expiration_pool, rlm.rsm.delete_log_segment_data, md)
            deleted += 1
    for entry in orphans.values():
        del entry["parsed"]
    return {"objects": len(objects), "orphans": sorted(orphans.values(), key=lambda e: e["keys"][0]),
            "missing": missing, "foreign": sorted(foreign.values(), key=lambda f: (f["cluster_id"] or "",
                                                                                   f["topic"], f["topic_id"])),
            "unrecognized_keys": unknown, "not_ready": not_ready, "orphans_deleted": deleted}
