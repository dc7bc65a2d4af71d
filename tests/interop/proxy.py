"""A small TCP proxy on 127.0.0.1 that breaks connections in the middle of Produce requests.

The broker advertises the proxy's port (``advertised.listeners``), so every connection a client
opens, bootstrap and leader alike, goes through it. The proxy splits both directions into Kafka
frames; for the Produce requests it picks (``fault_every``-th one, at most ``max_faults`` times)
it closes the client's connection, alternating between two faults:

- ``drop_request``: the request never reaches the broker (nothing was appended);
- ``drop_response``: the request is forwarded and appended, but the connection is closed before
  the answer reaches the client - the client cannot know the batch was written and must retry
  it, and the broker must recognise the retry by its producer id and sequence.

Every request pipelined on the same connection fails with it, which is the hard case for an
idempotent producer (several in-flight batches retried in order).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter

PRODUCE = 0


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    body = _recv_exact(sock, size) if size > 0 else b""
    if body is None:
        return None
    return head + body


class FaultyProxy:
    """``FaultyProxy()`` binds at once (``.port``); ``start(upstream_port)`` begins forwarding."""

    def __init__(self, fault_every: int = 3, max_faults: int = 6, first_fault: int = 2):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.upstream_port: int | None = None
        self.fault_every = fault_every
        self.max_faults = max_faults
        self.first_fault = first_fault
        self.stats: Counter = Counter()
        self._lock = threading.Lock()
        self._produce_seen = 0
        self._closed = False
        self._sockets: set[socket.socket] = set()

    def start(self, upstream_port: int) -> FaultyProxy:
        self.upstream_port = upstream_port
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            _close(s)

    @property
    def faults(self) -> int:
        return self.stats["drop_request"] + self.stats["drop_response"]

    # ------------------------------------------------------------------ internals

    def _decide(self) -> str:
        with self._lock:
            self._produce_seen += 1
            n = self._produce_seen
            if self.faults >= self.max_faults or n < self.first_fault or (n - self.first_fault) % self.fault_every:
                return "pass"
            action = "drop_response" if self.faults % 2 == 0 else "drop_request"
            self.stats[action] += 1
            return action

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, upstream))
                self.stats["connections"] += 1
            doomed: set[int] = set()
            pair = (client, upstream)
            threading.Thread(target=self._requests, args=(pair, doomed), daemon=True).start()
            threading.Thread(target=self._responses, args=(pair, doomed), daemon=True).start()

    def _cut(self, pair) -> None:
        for s in pair:
            _close(s)
        with self._lock:
            self._sockets.difference_update(pair)

    def _requests(self, pair, doomed: set[int]) -> None:
        client, upstream = pair
        while True:
            frame = _recv_frame(client)
            if frame is None:
                break
            api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4) if len(frame) >= 12 else (-1, 0, 0)
            if api_key == PRODUCE:
                action = self._decide()
                if action == "drop_request":
                    break
                if action == "drop_response":
                    doomed.add(correlation_id)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        self._cut(pair)

    def _responses(self, pair, doomed: set[int]) -> None:
        client, upstream = pair
        while True:
            frame = _recv_frame(upstream)
            if frame is None or len(frame) < 8:
                break
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id in doomed:
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        self._cut(pair)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
