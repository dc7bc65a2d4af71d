"""What ``tierlog tier status`` and ``tierlog tier reconcile`` ask a broker, answered as JSON on its
metrics endpoint (``/v1/tier/status``, ``/v1/tier/reconcile``)."""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.tiered.remote_log_manager import RemoteLogManager


def tier_status(controller: Controller, rlm: RemoteLogManager | None, node_id: int, topic: str | None = None) -> dict:
    """Each tiered partition, and each topic's tiering state with what a disablement still has to delete."""
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
    return {"node_id": node_id, "remote_storage_enabled": rlm is not None, "topics": topics,
            "partitions": rlm.status(topic) if rlm is not None else []}


async def tier_reconcile(rlm: RemoteLogManager | None, delete: str = "false") -> dict:
    """Orphaned remote objects and segments whose objects are missing; ``delete=true`` removes the orphans."""
    if rlm is None:
        return {"error": "tiered storage is off on this broker (remote.log.storage.system.enable=false)"}
    return await rlm.reconcile(delete=delete.lower() == "true")
