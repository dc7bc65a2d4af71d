"""The broker's HTTP endpoint (``metrics.host``:``metrics.port``): metrics, probes, tiered storage status.

Routes:

- ``GET /metrics``: every metric in Prometheus' text format (``MetricsRegistry.render``);
  ``?name[]=N&name[]=M``: only the samples of those names, as Prometheus' client libraries answer it
  (``tierlog console``'s metrics charts: the broker then skips the per-partition gauges);
- ``GET /health``: 200 while the process runs (a liveness probe);
- ``GET /ready``: 200 once the broker serves requests and, with tiered storage on, the remote log
  metadata manager has loaded the metadata of every partition it follows; else 503 with the reason
  (a readiness probe);
- ``GET /v1/tier/status[?topic=T]``: what ``tierlog tier status`` shows; ``?summary=topics``: one row per
  topic led here instead of one per partition (``tierlog console``'s topic list);
- ``GET /v1/tier/reconcile``: the reconciler's report, nothing changed;
- ``POST /v1/tier/reconcile?delete=true``: the report, and the orphaned objects deleted;
- ``GET /v1/cleaner/status[?topic=T]``: the log cleaner's state of each compacted partition.

A route answers JSON, Prometheus' text (a ``str``) or a :class:`Body` of its own content type; ``tierlog
console`` serves its pages on this server with the same rules.

Safety rules: it binds the loopback address unless ``metrics.host`` says otherwise; GET never changes
anything (a GET asking for a change is 405); every POST is an admin operation, refused (403) unless
``metrics.admin.enable=true`` and answered 401 without the bearer token ``metrics.admin.token``
(compared in constant time). Unknown paths are 404, unknown or malformed parameters 400, each with a
one-line JSON ``{"error": ...}``, never Python's exception text. A request head is at most
``MAX_HEAD_BYTES`` and must arrive within ``READ_TIMEOUT_S``; bodies are not used (at most
``MAX_BODY_BYTES`` are read and ignored). One request per connection.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.metrics import MetricsRegistry

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8 * 1024
MAX_BODY_BYTES = 1024
READ_TIMEOUT_S = 10.0
MAX_PARAMETERS = 16

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


@dataclass(frozen=True)
class Body:
    """A route's answer that is not JSON: bytes with their content type (``tierlog console``'s page and
    scripts are served this way)."""

    content: bytes
    content_type: str


class HttpError(Exception):
    """An answer other than 200: the status and a one-line message for the caller."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


# ------------------------------------------------------------------------------------- parameters


def topic_name(value: str) -> str:
    if not _TOPIC_RE.match(value) or value in (".", ".."):
        raise ValueError("must be a topic name (1-249 of a-z A-Z 0-9 . _ -)")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    """The parser of a query parameter that takes one of ``choices``."""
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value
    return parse


def boolean(value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


class Repeated:
    """A query parameter that may be given more than once (``name[]=a&name[]=b``): the list of its values,
    each parsed by ``parse``."""

    def __init__(self, parse: Callable[[str], Any]) -> None:
        self.parse = parse

    def __call__(self, value: str) -> Any:
        return self.parse(value)


def metric_name(value: str) -> str:
    if not value or len(value) > 200 or not value.replace("_", "a").replace(":", "a").isalnum():
        raise ValueError("must be a metric name")
    return value


@dataclass(frozen=True)
class Route:
    """One method on one path: ``handler(**params)`` returns the JSON answer (or a coroutine of it) or
    raises HttpError; ``params`` maps each accepted query parameter to its parser (ValueError = 400)."""

    handler: Callable[..., Any]
    params: Mapping[str, Callable[[str], Any]] = field(default_factory=dict)
    admin: bool = False  # a state change: POST, admin enabled, bearer token


def _parse_params(query: str, route: Route) -> dict[str, Any]:
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query),
                                       max_num_fields=MAX_PARAMETERS, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "malformed query string") from None
    out: dict[str, Any] = {}
    for name, raw in pairs:
        parser = route.params.get(name)
        if parser is None:
            allowed = ", ".join(sorted(route.params)) or "none"
            raise HttpError(400, f"unknown parameter {name[:40]!r} (allowed: {allowed})")
        repeated = isinstance(parser, Repeated)
        if name in out and not repeated:
            raise HttpError(400, f"parameter {name} given more than once")
        try:
            value = parser(raw)
        except ValueError as e:
            raise HttpError(400, f"parameter {name}: {e}") from None
        if repeated:
            out.setdefault(name, []).append(value)
        else:
            out[name] = value
    return out


# ----------------------------------------------------------------------------------------- server


class HttpEndpoint:
    """A small HTTP/1.1 server on the broker's event loop, one request per connection."""

    def __init__(self, registry: MetricsRegistry, routes: Mapping[tuple[str, str], Route] | None = None, *,
                 ready: Callable[[], str | None] = lambda: None, admin_enabled: bool = False,
                 admin_token: str | None = None, admin_off: str | None = None, token_source: str | None = None
                 ) -> None:
        """``routes``: (method, path) -> Route, besides /metrics, /health and /ready. ``ready`` returns
        None when the broker is ready, else why not. ``admin_off`` (why admin operations are refused) and
        ``token_source`` (where the token comes from) word the 403 and 401 answers of a server that is not
        the broker's own (``tierlog console``)."""
        self.registry = registry
        self.routes: dict[tuple[str, str], Route] = {
            ("GET", "/metrics"): Route(self._metrics, {"name[]": Repeated(metric_name)}),
            ("GET", "/health"): Route(lambda: {"status": "alive"}),
            ("GET", "/ready"): Route(self._ready),
            **(routes or {}),
        }
        self._ready_check = ready
        self.admin_enabled = admin_enabled
        self._token = (admin_token or "").encode()
        self._admin_off = admin_off or ("admin operations are off on this broker; set metrics.admin.enable=true "
                                        "and metrics.admin.token to allow them")
        self._token_source = token_source or "metrics.admin.token"
        self._server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Serve on ``host``:``port`` (HTTPS with ``ssl_context``, metrics.ssl.enable); the bound port."""
        self._server = await asyncio.start_server(self._handle, host, port, reuse_address=True,
                                                  limit=MAX_HEAD_BYTES, ssl=ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # -- built-in routes --

    def _metrics(self, **params: Any) -> str:
        return self.registry.render(params.get("name[]"))

    def _ready(self) -> dict:
        reason = self._ready_check()
        if reason is not None:
            raise HttpError(503, reason)
        return {"status": "ready"}

    # -- requests --

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                status, ctype, body, headers = await self._answer(reader)
            except HttpError as e:
                status, ctype, headers = e.status, "application/json", e.headers
                body = json.dumps({"error": e.message}).encode() + b"\n"
            head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1")
            writer.write(head + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except Exception:  # noqa: BLE001 - one broken request must not stop the endpoint
            log.exception("HTTP endpoint request failed")
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes, dict[str, str]]:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        except TimeoutError:
            raise HttpError(408, f"the request head did not arrive within {READ_TIMEOUT_S:.0f} s") from None
        except asyncio.LimitOverrunError:
            raise HttpError(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes") from None
        method, target, request_headers = _parse_head(raw)
        path, _, query = target.partition("?")
        allowed = sorted(m for m, p in self.routes if p == path)
        if not allowed:
            raise HttpError(404, f"no such path {path[:100]}")
        route = self.routes.get((method, path))
        if route is None:
            raise HttpError(405, f"{method[:10]} is not allowed on {path}; use {' or '.join(allowed)}",
                            {"Allow": ", ".join(allowed)})
        await _skip_body(reader, request_headers)
        if route.admin:
            self._authorize(request_headers)
        params = _parse_params(query, route)
        try:
            result = route.handler(**params)
            if asyncio.iscoroutine(result):
                result = await result
        except HttpError:
            raise
        except Exception:
            log.exception("HTTP endpoint: %s %s failed", method, path)
            raise HttpError(500, "internal error; the broker's log has the details") from None
        if isinstance(result, Body):
            return 200, result.content_type, result.content, {}
        if isinstance(result, str):
            return 200, "text/plain; version=0.0.4; charset=utf-8", result.encode(), {}
        return 200, "application/json", json.dumps(result, indent=1).encode() + b"\n", {}

    def _authorize(self, headers: Mapping[str, str]) -> None:
        if not self.admin_enabled:
            raise HttpError(403, self._admin_off)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        # Compared in constant time, so the answer's timing tells nothing about the token.
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
            raise HttpError(401, f"missing or wrong admin token (Authorization: Bearer <{self._token_source}>)",
                            {"WWW-Authenticate": 'Bearer realm="tierlog"'})


def _parse_head(raw: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        lines = raw.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    if not version.startswith("HTTP/1.") or not target.startswith("/"):
        raise HttpError(400, "malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        headers[name.lower()] = value.strip()
    return method, target, headers


async def _skip_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
    """Parameters travel in the query string; a small body is read and ignored, anything else refused."""
    if "transfer-encoding" in headers:
        raise HttpError(400, "request bodies are not used; give the parameters in the query string")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise HttpError(400, "malformed Content-Length")
    if int(length) > MAX_BODY_BYTES:
        raise HttpError(413, f"request bodies are not used (at most {MAX_BODY_BYTES} bytes accepted)")
    if int(length):
        try:
            await asyncio.wait_for(reader.readexactly(int(length)), READ_TIMEOUT_S)
        except TimeoutError:
            raise HttpError(408, f"the request body did not arrive within {READ_TIMEOUT_S:.0f} s") from None
