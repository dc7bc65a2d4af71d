"""Ports a test keeps for itself while nothing listens on them.

``free_port()`` picks a port and lets it go, so between a broker's stop and its restart on the same port
another test's ``bind(0)`` can be handed it (a rebootstrap test once met a stranger's broker on its old
port). A reservation is a socket bound to the port with SO_REUSEADDR and never listening: the kernel hands
the port to no one else, refuses other binds without SO_REUSEADDR, and still lets the broker (which sets
SO_REUSEADDR, as Kafka's acceptor does) bind and listen on it. Clients meanwhile get connection refused,
as from a host that is gone."""

from __future__ import annotations

import socket


class PortReservation:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]

    def close(self) -> None:
        self._sock.close()
