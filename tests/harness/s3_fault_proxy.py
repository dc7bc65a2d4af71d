"""An HTTP-aware TCP proxy between a broker and a real S3 server, injecting the faults real stores have.

``S3FaultProxy(target_port)`` listens on 127.0.0.1 and a free port (``endpoint`` is its URL, given to the
broker as ``aws_endpoint``) and forwards HTTP/1.1 requests one by one, keep-alive included, to the server.
Rules (``add(Fault(...))``) say what happens to the requests they match (method, and a test on the path
with its query):

- ``status``: the server never sees the request; the client gets that status with an S3 error body
  (503 ``SlowDown``, 500 ``InternalError``, 501 ``NotImplemented``, ...);
- ``cut_request``: half the request body goes to the server, then both connections close (a connection
  cut mid-upload);
- ``cut_response``: the server answers; the client gets the head and half the body, then the connection
  closes (cut mid-read);
- ``stall``: the request is held unanswered until the rule is cleared or the proxy closes (a timeout);
- ``slow_body``: the answer's body goes out in ``chunk`` bytes every ``delay`` seconds;
- ``down()``: every connection, new or open, is closed at once until ``up()`` (a store down for a while).

A rule applies ``times`` times (None: until removed). ``fault.hit`` is an Event set on its first match and
``fault.hits`` counts them, so a test waits for a fault to have happened instead of sleeping. Everything
runs on daemon threads; ``close()`` stops the proxy and releases stalled requests.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.harness.tcp_proxy import TcpProxy

_ERROR_CODES = {500: "InternalError", 501: "NotImplemented", 503: "SlowDown", 403: "AccessDenied",
                404: "NoSuchKey", 400: "InvalidRequest"}
_REASONS = {500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable", 403: "Forbidden",
            404: "Not Found", 400: "Bad Request"}


@dataclass
class Fault:
    action: str  # status, cut_request, cut_response, stall, slow_body
    method: str | None = None  # None: any
    match: Callable[[str], bool] = lambda target: True  # on the request target (path and query)
    status: int = 503
    times: int | None = None
    chunk: int = 1024
    delay: float = 0.05
    hits: int = 0
    hit: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and self.match(target) \
            and (self.times is None or self.hits < self.times)


class _Closed(Exception):
    pass


class _Reader:
    """Buffered reads of a socket: lines and exact byte counts."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise _Closed()
        self.buf += data

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def rest(self) -> bytes:
        out = [self.buf]
        self.buf = b""
        with contextlib.suppress(_Closed, OSError):
            while True:
                self._more()
                out.append(self.buf)
                self.buf = b""
        return b"".join(out)


def _read_message(reader: _Reader, request: bool, head_only_body: bool = False) -> tuple[bytes, dict, bytes]:
    """(start line and headers as sent, lower-cased headers, body) of one HTTP/1.1 message; a chunked
    body is returned de-chunked and its head rewritten with a Content-Length."""
    start = reader.line()
    lines = [start]
    headers: dict[str, str] = {}
    while (line := reader.line()) != b"\r\n":
        lines.append(line)
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    status = 0 if request else int(start.split(b" ", 2)[1])
    if head_only_body or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while (size := int(reader.line().split(b";")[0].strip(), 16)) > 0:
            parts.append(reader.exact(size))
            reader.exact(2)
        while reader.line() != b"\r\n":  # trailers
            pass
        body = b"".join(parts)
        lines = [ln for ln in lines if not ln.lower().startswith(b"transfer-encoding:")]
        lines.append(f"Content-Length: {len(body)}\r\n".encode())
        headers["content-length"] = str(len(body))
    elif "content-length" in headers:
        body = reader.exact(int(headers["content-length"]))
    elif request:
        body = b""
    else:
        body = reader.rest()  # delimited by the close
    return b"".join(lines) + b"\r\n", headers, body


class S3FaultProxy(TcpProxy):
    """:class:`TcpProxy` (its ``cut``/``heal`` are ``down``/``up`` here) reading the HTTP it forwards."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.faults: list[Fault] = []
        self.requests = 0
        self.seen: collections.deque[tuple[str, str]] = collections.deque(maxlen=2000)  # (method, target)
        super().__init__(target_port, target_host)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- control --

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            faults, self.faults = self.faults, []
        for f in faults:
            f.released.set()

    def down(self) -> None:
        """Close every connection; new ones are closed as soon as they are accepted."""
        self.cut()

    def up(self) -> None:
        self.heal()

    def close(self) -> None:
        self.clear()
        super().close()

    # -- forwarding --

    def _pick(self, method: str, target: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.matches(method, target):
                    f.hits += 1
                    f.hit.set()
                    return f
        return None

    def _open(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=120)
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns.append((client, upstream))
        try:
            self._serve(_Reader(client), _Reader(upstream))
        except (_Closed, OSError, ValueError, IndexError):
            pass
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self._conns = [c for c in self._conns if client not in c]

    def _serve(self, reader: _Reader, up_reader: _Reader) -> None:
        """Requests of one connection, one at a time, until a fault or either side ends it."""
        client, upstream = reader.sock, up_reader.sock
        while not self._closed:
            head, headers, body = _read_message(reader, request=True)
            method, target = (part.decode() for part in head.split(b" ", 2)[:2])
            self.requests += 1
            self.seen.append((method, target))
            fault = self._pick(method, target)
            action = fault.action if fault else None
            if action == "status":
                client.sendall(_error_answer(fault.status))
                continue
            if action == "stall":
                fault.released.wait()
                return
            if action == "cut_request":
                upstream.sendall(head + body[:len(body) // 2])
                return
            upstream.sendall(head + body)
            answer_head, answer_headers, answer_body = _read_message(up_reader, request=False,
                                                                     head_only_body=method == "HEAD")
            if action == "cut_response":
                client.sendall(answer_head + answer_body[:len(answer_body) // 2])
                return
            if action == "slow_body":
                client.sendall(answer_head)
                for i in range(0, len(answer_body), fault.chunk):
                    client.sendall(answer_body[i:i + fault.chunk])
                    time.sleep(fault.delay)  # the fault itself: a store sending slowly
            else:
                client.sendall(answer_head + answer_body)
            if answer_headers.get("connection", "").lower() == "close":
                return


def _error_answer(status: int) -> bytes:
    code = _ERROR_CODES.get(status, "InternalError")
    body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the "
            f"test's fault proxy</Message></Error>").encode()
    return (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def delete_faults(action: str = "status", status: int = 500, times: int | None = None) -> list[Fault]:
    """Rules for deletes of every kind: a DELETE, and a multi-object delete (``POST /bucket?delete``)."""
    return [Fault(action, "DELETE", status=status, times=times),
            Fault(action, "POST", lambda target: "?delete" in target, status=status, times=times)]


def log_object(target: str) -> bool:
    """The request is for a segment's ``.log`` object (an upload's parts included)."""
    return ".log" in target.split("?", 1)[0]
