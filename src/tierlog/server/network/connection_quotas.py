"""Limits on connections at accept (Kafka's ``ConnectionQuotas``): ``max.connections``,
``max.connections.per.ip`` and its overrides, and the descriptors kept free of connections (:func:`fd_reserve`).
The socket server (:mod:`.socket_server`) checks them as a connection is accepted.
"""

from __future__ import annotations

import logging
import resource
import socket
from collections.abc import Callable, Mapping

from tierlog.config.definitions import parse_connection_overrides
from tierlog.errors import InvalidConfigError

#: The socket server's logger: every module of this package logs as ``tierlog.server.network``.
log = logging.getLogger(__package__)


def fd_reserve(soft_limit: int) -> int:
    """Descriptors kept free of connections for storage and the broker's own files: a tenth of the open file
    limit, at least 16."""
    return max(16, soft_limit // 10)


def _fd_ceiling() -> int | None:
    """The lowest descriptor number a connection may not have, or None without a finite limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - fd_reserve(soft)


class ConnectionQuotas:
    """Kafka's ``ConnectionQuotas``: connections counted over the broker and per IP address, with the
    limits of ``max.connections``, ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
    read from ``config()`` (dynamic changes apply to the next connection)."""

    def __init__(self, config: Callable[[], Mapping]):
        self._config = config
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}
        self.overrides_for(config())  # an unresolvable host name fails the start

    def overrides_for(self, cfg: Mapping) -> dict[str, int]:
        """The overrides by IP address (host names resolved, as Kafka's ``InetAddress.getByName``)."""
        text = cfg["max.connections.per.ip.overrides"] or ""
        if text != self._overrides_text:
            resolved: dict[str, int] = {}
            for host, count in parse_connection_overrides(text).items():
                try:
                    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                except OSError as e:
                    raise InvalidConfigError(f"Invalid value {text} for configuration max.connections.per.ip."
                                             f"overrides: cannot resolve {host}: {e}") from None
                for info in infos:
                    resolved[info[4][0]] = count
            self._overrides_text, self._overrides = text, resolved
        return self._overrides

    def limit_for(self, ip: str, cfg: Mapping) -> int:
        try:
            overrides = self.overrides_for(cfg)
        except InvalidConfigError as e:  # a dynamic change naming a host that does not resolve (any more)
            log.error("%s; keeping the previous overrides", e.message)
            overrides = self._overrides
        limit = overrides.get(ip)
        return cfg["max.connections.per.ip"] if limit is None else limit

    def try_inc(self, ip: str) -> tuple[str, str] | None:
        """Count a new connection from ``ip``; or (the limit, why) it is refused, nothing counted."""
        cfg = self._config()
        broker_limit = cfg["max.connections"]
        if self.total >= broker_limit:
            return "max.connections", f"the broker has {self.total} connections (max.connections={broker_limit})"
        count = self.per_ip.get(ip, 0)
        ip_limit = self.limit_for(ip, cfg)
        if count >= ip_limit:
            return "max.connections.per.ip", (f"{ip} has {count} connections (max.connections.per.ip or its "
                                              f"override: {ip_limit})")
        self.total += 1
        self.per_ip[ip] = count + 1
        return None

    def dec(self, ip: str) -> None:
        self.total -= 1
        count = self.per_ip.get(ip, 0) - 1
        if count > 0:
            self.per_ip[ip] = count
        else:
            self.per_ip.pop(ip, None)


_NO_LIMITS: Mapping = {"max.connections": 2**31 - 1, "max.connections.per.ip": 2**31 - 1,
                       "max.connections.per.ip.overrides": ""}
