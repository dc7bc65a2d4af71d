"""Kafka clients for the operator tools: one place that turns "this broker, give up after N seconds"
into client settings, so an unreachable broker fails every tool within its timeout instead of the
clients' minute-long defaults, and adds the user's client settings (security.protocol, ssl.*, sasl.*:
``--command-config`` and ``-X`` of the command) to every client a tool makes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.client.admin import Admin

CLIENT_ID = "tierlog-cli"


def settings(bootstrap: str, timeout_s: float, extra: Mapping[str, Any] | None = None,
             role: str = "admin") -> dict[str, Any]:
    """Settings of the admin, producer or consumer (``role``) of a tool: the user's client settings
    ``extra`` (only those of the role), then the tool's address and timeouts on top (its
    --bootstrap-server and --timeout win, so a tool gives up when it says it does)."""
    ms = max(1, int(timeout_s * 1000))
    out: dict[str, Any] = {"client.id": CLIENT_ID}
    if extra:
        from tierlog.config.definitions import CLIENT_CONFIGS

        out.update((k, v) for k, v in extra.items() if k in CLIENT_CONFIGS and role in CLIENT_CONFIGS[k].roles)
    out.update({"bootstrap.servers": bootstrap, "request.timeout.ms": ms, "socket.connection.setup.timeout.ms": ms,
                "socket.connection.setup.timeout.max.ms": ms})
    return out


def admin(bootstrap: str, timeout_s: float, extra: Mapping[str, Any] | None = None) -> Admin:
    """An admin client whose every call gives up after ``timeout_s`` (use ``async with``)."""
    return Admin({**settings(bootstrap, timeout_s, extra), "default.api.timeout.ms": max(1, int(timeout_s * 1000))})
