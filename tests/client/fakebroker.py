"""A scripted Kafka endpoint on 127.0.0.1 for client unit tests: it answers ApiVersions and Metadata
over a real socket from values the test sets, and records what it was asked.

Only what the metadata layer needs: ``advertise`` (the broker list its Metadata answers carry),
``metadata_error`` (a top-level Metadata error code, e.g. 129 REBOOTSTRAP_REQUIRED, answered once
per ``error_answers``), ``answers`` (per API key, a list of answers taken in order; one list may be
shared by several brokers). Anything else is answered as an empty response of the asked version.
``api_versions`` (what ApiVersions lists), ``topics`` (the topics of Metadata answers, as answer
dicts) and ``bodies`` (each request's kio object, as ``requests``) serve group protocol tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time

from tierlog.protocol import ApiKey, build_response, encode_response, parse_request

_API_VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 13), ApiKey.FIND_COORDINATOR: (0, 3),
                 ApiKey.INIT_PRODUCER_ID: (0, 4), ApiKey.ADD_OFFSETS_TO_TXN: (0, 3), ApiKey.END_TXN: (0, 4),
                 ApiKey.TXN_OFFSET_COMMIT: (0, 3)}


class FakeBroker:
    def __init__(self, node_id: int = 1) -> None:
        self.node_id = node_id
        self.port = 0
        self.advertise: list[tuple[int, str, int]] = []  # (node id, host, port); empty = only itself
        self.metadata_error = 0
        self.error_answers = 0  # how many Metadata answers still carry metadata_error
        self.requests: list[int] = []  # api keys, in arrival order
        self.bodies: list = []  # the requests (kio objects), as ``requests``
        self.api_versions: dict[int, tuple[int, int]] = dict(_API_VERSIONS)
        self.topics: list[dict] = []  # Metadata answers' topics
        self.arrivals: list[float] = []  # time.monotonic() of each request's arrival, as ``requests``
        self.answers: dict[int, list[dict]] = {}  # scripted answers per api key, taken in order
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metadata_requests(self) -> int:
        return self.requests.count(ApiKey.METADATA)

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and drop every connection (the port refuses connections afterwards)."""
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                ctx = parse_request(await reader.readexactly(size))
                self.requests.append(ctx.api_key)
                self.bodies.append(ctx.request)
                self.arrivals.append(time.monotonic())
                writer.write(encode_response(ctx, build_response(ctx, self._answer(ctx))))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _answer(self, ctx) -> dict:
        scripted = self.answers.get(ctx.api_key)
        if scripted:
            return scripted.pop(0)
        if ctx.api_key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                                  for k, (lo, hi) in self.api_versions.items()]}
        if ctx.api_key == ApiKey.METADATA:
            brokers = self.advertise or [(self.node_id, "127.0.0.1", self.port)]
            answer = {"brokers": [{"node_id": n, "host": h, "port": p} for n, h, p in brokers],
                      "cluster_id": "fake-cluster", "controller_id": brokers[0][0], "topics": list(self.topics)}
            if self.metadata_error and self.error_answers > 0:
                self.error_answers -= 1
                answer["error_code"] = self.metadata_error
            return answer
        return {}
