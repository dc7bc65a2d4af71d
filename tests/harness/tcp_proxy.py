"""A plain TCP forwarder that can cut its link: a broker's own way to ZooKeeper in fault tests.

``TcpProxy(target_port)`` listens on 127.0.0.1 and a free port and forwards every connection to the target
byte for byte, without reading the protocol (ZooKeeper's, here; ``link_proxy.LinkProxy`` is the Kafka-aware
proxy between brokers). ``cut()`` closes every connection and closes new ones at once, so the client behind
it loses its server while the server stays up for everyone else; ``heal()`` lets connections through again.
The target may go away and come back on the same port (a ZooKeeper restart): each new connection dials it
afresh. Everything runs on daemon threads; ``close()`` stops the proxy and every connection.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.is_cut = False
        self.connections_seen = 0
        threading.Thread(target=self._accept, daemon=True, name=f"tcp-proxy-{self.port}").start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def cut(self) -> None:
        """Close every connection; new ones are closed as soon as they are accepted."""
        self.is_cut = True
        self._close_all()

    def heal(self) -> None:
        self.is_cut = False

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            doomed = list(self._conns)
        for pair in doomed:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections_seen += 1
            if self.is_cut or self._closed:
                client.close()
                continue
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns.append((client, server))
        if self.is_cut:  # cut while dialling
            self._close_all()
        for src, dst in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.is_cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            with self._lock:
                self._conns = [c for c in self._conns if src not in c]
