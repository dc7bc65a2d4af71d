"""What the log cleaner is doing, answered as JSON on the broker's HTTP endpoint (``/v1/cleaner/status``):
``tierlog topic describe --url`` shows it beside a compacted topic's partitions."""

from __future__ import annotations

from collections.abc import Callable

from tierlog.server.http.http_endpoint import HttpError, Route, topic_name
from tierlog.storage import LogManager


def cleaner_status(log_manager: LogManager, node_id: int, topic: str | None = None) -> dict:
    """The cleaner's settings and, for each compacted partition hosted here (of ``topic`` when given), its
    first dirty offset, dirty ratio, cleanable bytes, whether a round is running, why it is uncleanable and
    when its last round ended and how long it took."""
    cleaner = log_manager.cleaner
    partitions = []
    for tp in sorted(list(log_manager.logs)):
        if topic is not None and tp[0] != topic:
            continue
        state = cleaner.describe(tp)
        if state is not None:
            partitions.append({"topic": tp[0], "partition": tp[1], **state})
    cfg = cleaner.config
    return {"node_id": node_id, "enabled": cfg.enable, "threads": cfg.threads, "partitions": partitions}


def cleaner_routes(serving: Callable[[], str | None], log_manager: LogManager, node_id: int
                   ) -> dict[tuple[str, str], Route]:
    def status(topic: str | None = None) -> dict:
        state = serving()
        if state is not None:
            raise HttpError(503, f"the broker is {state}; try again once it is ready")
        return cleaner_status(log_manager, node_id, topic)

    return {("GET", "/v1/cleaner/status"): Route(status, {"topic": topic_name})}
