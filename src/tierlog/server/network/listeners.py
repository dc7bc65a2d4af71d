"""The listening sockets: a bound listener's address (:class:`BoundListener`), binding every address of a
listener's host, and the one line that says why a socket cannot bind (:func:`bind_failure`).
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

LISTEN_BACKLOG = 100  # asyncio's default


@dataclass(frozen=True, slots=True)
class BoundListener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def _listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of ``host`` (as asyncio's
    ``create_server``: SO_REUSEADDR, IPv6 sockets v6-only); port 0 picks one port for all of them."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def bind_failure(host: str, port: int, e: OSError, *, setting: str = "listeners", name: str | None = None) -> str:
    """One line for a socket that cannot bind: what, why and what to do (``setting`` is the one to change;
    ``name`` the listener's)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if name:
        where += f" (listener {name})"
    if isinstance(e, socket.gaierror):
        return f"cannot listen on {where}: unknown host {host!r} ({e.strerror}); fix the host in {setting}"
    why = os.strerror(e.errno).lower() if e.errno else str(e)  # asyncio's strerror repeats the address
    if e.errno == errno.EADDRINUSE:
        todo = f"stop the other process or change {setting}"
    elif e.errno == errno.EACCES:
        todo = f"use a port above 1023 in {setting} or let the process bind it (CAP_NET_BIND_SERVICE)"
    elif e.errno == errno.EADDRNOTAVAIL:
        todo = f"this host has no such address; change the host in {setting}"
    else:
        todo = f"check {setting}"
    return f"cannot listen on {where}: {why}; {todo}"
