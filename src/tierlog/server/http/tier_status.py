"""What ``tierlog tier status`` and ``tierlog tier reconcile`` ask a broker, answered as JSON on its
HTTP endpoint (``/v1/tier/status``, ``/v1/tier/reconcile``), and the routes that serve them."""

from __future__ import annotations

import time
from collections.abc import Callable

from tierlog.cluster import Controller
from tierlog.errors import KafkaStorageError
from tierlog.server.http.http_endpoint import HttpError, Route, boolean, one_of, topic_name
from tierlog.storage import LogManager
from tierlog.tiered.metadata import RemoteLogSegmentState
from tierlog.tiered.remote_log_manager import RemoteLogManager

#: ``/v1/tier/status?summary=...``: the per-partition answer (the default), or one row per topic.
SUMMARIES = ("partitions", "topics")


def tier_status(controller: Controller, rlm: RemoteLogManager | None, log_manager: LogManager, node_id: int,
                topic: str | None = None, *, partitions: bool = True) -> dict:
    """Each tiered partition (``state`` "loading" while its remote metadata loads after a restart, its
    remote figures None until then), each topic's tiering state with what a disablement still has to
    delete, each log dir's state (an offline one with its cause), when local retention runs next, and the
    requests this broker sent the remote store by operation (None from a manager that does not count).
    Without ``partitions`` the partition rows are left out (the broker's own lines only)."""
    now_ms = int(time.time() * 1000)
    loading = rlm.not_ready_reason() if rlm is not None else None
    return {"node_id": node_id, "remote_storage_enabled": rlm is not None,
            "state": "loading" if loading else "ready", "loading": loading,
            "now_ms": now_ms, "retention_check_interval_ms": log_manager.retention_check_interval_ms,
            "next_retention_check_ms": log_manager.next_retention_check_ms(),
            "topics": tier_status_topics(controller, rlm, topic),
            "partitions": rlm.status(topic, now_ms) if rlm is not None and partitions else [],
            "store_requests": rlm.rsm.store_requests() if rlm is not None else None,
            "log_dirs": log_manager.log_dir_status()}


def tier_status_topics(controller: Controller, rlm: RemoteLogManager | None, topic: str | None = None
                       ) -> list[dict]:
    """Each tiered topic's KIP-950 state (or only ``topic``'s), with what a disablement still has to delete."""
    driver = controller.disablements
    topics = []
    for t in sorted(controller.image.topics.values(), key=lambda t: t.name):
        if t.tiering is None or (topic is not None and t.name != topic):
            continue
        left = [v for tp, v in (rlm.disabling.items() if rlm is not None else ()) if tp.topic == t.name]
        topics.append({"topic": t.name, "state": t.tiering.state.value, "policy": t.tiering.policy,
                       "epoch": t.tiering.epoch,
                       "remote_segments_to_delete": sum(v["segments"] for v in left),
                       "remote_bytes_to_delete": sum(v["bytes"] for v in left),
                       "last_error": driver.last_error.get(t.name) if driver is not None else None})
    return topics


def topic_totals(controller: Controller, rlm: RemoteLogManager | None, log_manager: LogManager,
                 node_id: int) -> list[dict]:
    """One row per topic with a partition led here (``/v1/tier/status?summary=topics``, what a console's
    topic list needs): the partitions led, their local size, and for a tiered topic the remote size and copy
    lag of those partitions, summed as ``tierlog tier status`` shows them per partition; None while any
    part is unknown (remote metadata loading), never a sum short of a part. A fraction of the per-partition
    answer's cost: no follower rows, no pending local deletions, one small row per topic."""
    image = controller.image
    rows: dict[str, dict] = {}

    def row(topic: str) -> dict:
        if topic not in rows:
            rows[topic] = {"topic": topic, "leader_partitions": 0, "local_bytes": 0, "remote_bytes": None,
                           "copy_lag_bytes": None, "loading_partitions": 0}
        return rows[topic]

    tiered = {}
    if rlm is not None:
        for tp, st in rlm.partitions.items():
            tiered[(tp.topic, tp.partition)] = st
    for (topic, partition), lg in list(log_manager.logs.items()):
        t = image.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is None or p.leader != node_id or (topic, partition) in tiered:
            continue
        r = row(topic)
        r["leader_partitions"] += 1
        r["local_bytes"] += lg.size_in_bytes
    done = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    for (topic, _), st in tiered.items():
        r = row(topic)
        r["leader_partitions"] += 1
        r["local_bytes"] += st.log.size_in_bytes
        if r["remote_bytes"] is None and r["loading_partitions"] == 0:
            r["remote_bytes"] = r["copy_lag_bytes"] = 0
        if not rlm.loaded(st):
            r["loading_partitions"] += 1
            r["remote_bytes"] = r["copy_lag_bytes"] = None
        elif r["loading_partitions"] == 0:
            r["remote_bytes"] += sum(md.segment_size_in_bytes for md in rlm.rlmm.list_remote_log_segments(st.tp)
                                     if md.state == done)
            r["copy_lag_bytes"] += sum(seg.size for seg, _ in rlm.copy_candidates(st.log))
    return [rows[n] for n in sorted(rows)]


async def tier_reconcile(rlm: RemoteLogManager | None, controller: Controller, delete: bool = False) -> dict:
    """Orphaned remote objects, segments whose objects are missing, and objects of other clusters or of
    topic ids this cluster never had (foreign: never deleted); ``delete`` removes the orphans."""
    if rlm is None:
        return {"error": "tiered storage is off on this broker (remote.log.storage.system.enable=false)"}
    known, deleted = controller.image.known_topic_ids()
    return await rlm.reconcile(delete=delete, cluster_id=controller.image.cluster_id, known_topic_ids=known,
                               deleted_topic_ids=deleted)


def _report_only(value: str) -> bool:
    if boolean(value):
        raise HttpError(405, "GET never changes anything: deleting orphans needs POST "
                             "/v1/tier/reconcile?delete=true with the admin token (tierlog tier reconcile --delete)",
                        {"Allow": "GET, POST"})
    return False


def tier_routes(serving: Callable[[], str | None], controller: Controller, rlm: RemoteLogManager | None,
                log_manager: LogManager, node_id: int) -> dict[tuple[str, str], Route]:
    """The endpoint's tiered storage routes. ``serving`` returns None once the broker serves requests,
    else its state; until then they answer 503."""

    def status(topic: str | None = None, summary: str = "partitions") -> dict:
        _check_serving(serving)
        if topic is not None and topic not in controller.image.topics:  # as a Kafka request names it
            raise HttpError(404, f"Topic {topic} not found (UNKNOWN_TOPIC_OR_PARTITION)")
        if summary == "topics":  # the broker's lines and one row per topic instead of one per partition
            if topic is not None:
                raise HttpError(400, "summary=topics is every topic led here; it takes no topic parameter")
            return {**tier_status(controller, rlm, log_manager, node_id, partitions=False),
                    "topic_totals": topic_totals(controller, rlm, log_manager, node_id)}
        return tier_status(controller, rlm, log_manager, node_id, topic)

    async def reconcile(delete: bool = False) -> dict:
        _check_serving(serving)
        try:
            return await tier_reconcile(rlm, controller, delete)
        except (KafkaStorageError, OSError) as e:  # the store is down: say so, it is not the broker's fault
            raise HttpError(503, f"cannot reconcile while the remote store is unavailable: {e}") from None

    return {("GET", "/v1/tier/status"): Route(status, {"topic": topic_name, "summary": one_of(*SUMMARIES)}),
            ("GET", "/v1/tier/reconcile"): Route(reconcile, {"delete": _report_only}),
            ("POST", "/v1/tier/reconcile"): Route(reconcile, {"delete": boolean}, admin=True)}


def _check_serving(serving: Callable[[], str | None]) -> None:
    state = serving()
    if state is not None:
        raise HttpError(503, f"the broker is {state}; try again once it is ready")
