"""Kafka clients for the operator tools: one place that turns "this broker, give up after N seconds"
into client settings, so an unreachable broker fails every tool within its timeout instead of the
clients' minute-long defaults."""

from __future__ import annotations

from typing import Any

from tierlog.client.admin import Admin

CLIENT_ID = "tierlog-cli"


def settings(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    """Settings common to the admin, producer and consumer of a tool."""
    ms = max(1, int(timeout_s * 1000))
    return {"bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "request.timeout.ms": ms,
            "socket.connection.setup.timeout.ms": ms, "socket.connection.setup.timeout.max.ms": ms}


def admin(bootstrap: str, timeout_s: float) -> Admin:
    """An admin client whose every call gives up after ``timeout_s`` (use ``async with``)."""
    return Admin({**settings(bootstrap, timeout_s), "default.api.timeout.ms": max(1, int(timeout_s * 1000))})
