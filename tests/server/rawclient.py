"""A minimal blocking Kafka protocol client for tests: any API, any version, raw answers."""

from __future__ import annotations

import socket
import struct

from kio.index import load_request_schema, load_response_schema

from tierlog.protocol import build, encode_request, parse_response


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv(4))[0]
        return self._recv(size)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, values: dict):
        """Send a request built from plain values; return the parsed response object."""
        self.correlation_id += 1
        req = build(load_request_schema(api_key, version), values)
        self.send_frame(encode_request(req, self.correlation_id, "rawclient"))
        corr, resp = parse_response(self.read_frame(), load_response_schema(api_key, version))
        assert corr == self.correlation_id
        return resp
