"""A fault-injecting TCP proxy in front of a broker's inter-broker listener, with faults per link.

Each broker of a test cluster advertises its inter-broker listener at a ``LinkProxy`` that forwards to the
real port. The proxy tells links apart by who connects: the client id of the connection's first request
(tierlog's brokers connect to each other as ``broker-<id>``, their replica fetchers as
``broker-<id>-fetcher-<n>``, the name Kafka's fetchers use too), so ``proxy.cut(source=2)`` breaks every link
from broker 2 to this broker, replication included, and leaves the others alone;
``proxy.cut(source=fetchers_of(2))`` breaks broker 2's replica fetchers only (on tierlog and on Kafka alike:
Kafka's other inter-broker clients have names of their own). Faults:

- ``cut``: the link's connections are closed and new ones are closed at once (a partition);
- ``hold``: bytes stop flowing both ways on the link's connections, which stay open (a stalled peer,
  a black hole);
- ``delay``: every chunk waits that long first;
- ``heal``: back to normal (held bytes then flow); ``heal_all`` heals every rule.

Everything runs on daemon threads; ``close()`` stops the proxy and every connection.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

_HEADER = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length
ANY = "*"
_FETCHER = "-fetcher-"


def fetchers_of(broker_id: int) -> str:
    """The ``source`` naming every replica fetcher of ``broker_id`` (``broker-<id>-fetcher-<n>``), and nothing
    else of that broker."""
    return f"broker-{broker_id}{_FETCHER.rstrip('-')}"


def _rule_keys(client_id: str) -> tuple[str, ...]:
    """The rules a connection falls under, the most precise first: its client id, then for a replica fetcher
    the rule of its broker's fetchers and the rule of its broker."""
    if _FETCHER not in client_id:
        return (client_id,)
    owner = client_id.split(_FETCHER)[0]
    return client_id, owner + _FETCHER.rstrip("-"), owner


class _Link:
    def __init__(self) -> None:
        self.mode = "pass"
        self.delay_s = 0.0
        self.flowing = threading.Event()
        self.flowing.set()


class LinkProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._links: dict[str, _Link] = {}
        self._conns: list[tuple[str, socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.connections_seen: dict[str, int] = {}
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    # ------------------------------------------------------------------ faults

    def _link(self, source) -> _Link:
        key = ANY if source is None else f"broker-{source}" if isinstance(source, int) else str(source)
        with self._lock:
            return self._links.setdefault(key, _Link())

    def _rule(self, client_id: str) -> _Link:
        """A broker's replica fetchers (``broker-<id>-fetcher-<n>``) fall under the rule of its fetchers
        (``fetchers_of(id)``), else under its rule (``broker-<id>``)."""
        with self._lock:
            for key in _rule_keys(client_id):
                if key in self._links:
                    return self._links[key]
            return self._links.setdefault(ANY, _Link())

    def cut(self, source=None) -> None:
        """Break the link from ``source`` (a broker id, a client id; None: everyone)."""
        link = self._link(source)
        link.mode = "cut"
        link.flowing.set()
        self._close_matching(source)

    def hold(self, source=None) -> None:
        link = self._link(source)
        link.mode = "hold"
        link.flowing.clear()

    def delay(self, seconds: float, source=None) -> None:
        link = self._link(source)
        link.mode, link.delay_s = "delay", seconds
        link.flowing.set()

    def heal(self, source=None) -> None:
        link = self._link(source)
        link.mode, link.delay_s = "pass", 0.0
        link.flowing.set()

    def heal_all(self) -> None:
        """Every rule back to normal (a test's clean-up)."""
        with self._lock:
            links = list(self._links.values())
        for link in links:
            link.mode, link.delay_s = "pass", 0.0
            link.flowing.set()

    def _close_matching(self, source) -> None:
        key = None if source is None else f"broker-{source}" if isinstance(source, int) else str(source)
        with self._lock:
            doomed = [c for c in self._conns if key is None or key in _rule_keys(c[0])]
        for _, a, b in doomed:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # ------------------------------------------------------------------ plumbing

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        """Read the first request's header for the client id, then connect to the target and pump."""
        first = b""
        try:
            while len(first) < _HEADER.size:
                chunk = client.recv(65536)
                if not chunk:
                    client.close()
                    return
                first += chunk
            size, _, _, _, cid_len = _HEADER.unpack_from(first, 0)
            while len(first) < _HEADER.size + max(cid_len, 0):
                chunk = client.recv(65536)
                if not chunk:
                    client.close()
                    return
                first += chunk
            client_id = first[_HEADER.size:_HEADER.size + max(cid_len, 0)].decode(errors="replace")
        except OSError:
            client.close()
            return
        link = self._rule(client_id)
        with self._lock:
            self.connections_seen[client_id] = self.connections_seen.get(client_id, 0) + 1
        # A held link delivers nothing, the first request of a connection opened meanwhile included (a client
        # whose request timed out reconnects: its retry must not reach the broker either).
        link.flowing.wait()
        link = self._rule(client_id)
        if link.mode == "cut" or self._closed:
            client.close()
            return
        try:
            server = socket.create_connection(self.target, timeout=10)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns.append((client_id, client, server))
        try:
            server.sendall(first)
        except OSError:
            client.close()
            server.close()
            return
        threading.Thread(target=self._pump, args=(client_id, client, server), daemon=True).start()
        threading.Thread(target=self._pump, args=(client_id, server, client), daemon=True).start()

    def _pump(self, client_id: str, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                link = self._rule(client_id)
                link.flowing.wait()
                if link.mode == "cut":
                    break
                if link.delay_s:
                    time.sleep(link.delay_s)
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
                self._conns = [c for c in self._conns if c[1] is not src and c[2] is not src]

    def close(self) -> None:
        self._closed = True
        for link in list(self._links.values()):
            link.flowing.set()
        self._server.close()
        self._close_matching(None)
