"""Broker metrics in Prometheus' text format, and the small HTTP server that exposes them.

Names follow Kafka's MBeans the way Prometheus' JMX exporter spells them, so dashboards built for
Kafka read tierlog with few changes: Kafka's meter ``kafka.server:type=BrokerTopicMetrics,
name=RemoteCopyBytesPerSec,topic=T`` becomes the counter
``kafka_server_brokertopicmetrics_remotecopybytes_total{topic="T"}`` (Prometheus computes the rate),
and a gauge such as ``RemoteCopyLagBytes`` becomes ``kafka_server_brokertopicmetrics_remotecopylagbytes``.

The HTTP server (``metrics.port``) answers ``GET /metrics`` with every metric, and the JSON routes the
broker adds: ``/v1/tier/status`` (``tierlog tier status``) and ``POST /v1/tier/reconcile``
(``tierlog tier reconcile``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]


def _labels(values: Mapping[str, object]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


class Counter:
    """A monotonically increasing count per label set (thread-safe: storage threads count too)."""

    kind = "counter"

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.doc = doc
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1, **labels: object) -> None:
        key = _labels(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def value(self, **labels: object) -> float:
        return self._values.get(_labels(labels), 0)

    def total(self) -> float:
        return sum(self._values.values())

    def samples(self) -> Iterable[tuple[Labels, float]]:
        with self._lock:
            return list(self._values.items())


class Gauge(Counter):
    """A value that goes up and down, per label set; ``remove`` drops a label set that no longer exists."""

    kind = "gauge"

    def set(self, value: float, **labels: object) -> None:
        key = _labels(labels)
        with self._lock:
            self._values[key] = value

    def remove(self, **labels: object) -> None:
        with self._lock:
            self._values.pop(_labels(labels), None)

    def remove_matching(self, **labels: object) -> None:
        """Drop every label set containing all of ``labels`` (e.g. all partitions of a deleted topic)."""
        wanted = set(_labels(labels))
        with self._lock:
            for key in [k for k in self._values if wanted <= set(k)]:
                del self._values[key]


class MetricsRegistry:
    def __init__(self) -> None:
        self._metrics: dict[str, Counter] = {}

    def counter(self, name: str, doc: str) -> Counter:
        return self._get(name, doc, Counter)

    def gauge(self, name: str, doc: str) -> Gauge:
        return self._get(name, doc, Gauge)  # type: ignore[return-value]

    def _get(self, name: str, doc: str, cls: type[Counter]) -> Counter:
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = cls(name, doc)
        elif type(metric) is not cls:
            raise ValueError(f"metric {name} is already registered as a {metric.kind}")
        return metric

    def get(self, name: str) -> Counter | None:
        return self._metrics.get(name)

    def render(self) -> str:
        """The exposition text (Prometheus text format 0.0.4)."""
        lines = []
        for name in sorted(self._metrics):
            m = self._metrics[name]
            lines.append(f"# HELP {name} {m.doc}")
            lines.append(f"# TYPE {name} {m.kind}")
            for labels, value in sorted(m.samples()):
                text = repr(float(value)) if value != int(value) else str(int(value))
                lines.append(f"{name}{_render_labels(labels)} {text}")
        return "\n".join(lines) + "\n"


class MetricsServer:
    """A minimal HTTP/1.1 server on asyncio: GET only, one response per connection."""

    def __init__(self, registry: MetricsRegistry, routes: Mapping[str, Callable[[], object]] | None = None) -> None:
        self.registry = registry
        self.routes = dict(routes or {})
        self._server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = request.decode("latin-1").partition(" ")
            path, _, query = rest.partition(" ")[0].partition("?")
            params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
            if method not in ("GET", "POST"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET and POST\n"
            elif path == "/metrics":
                status, ctype = "200 OK", "text/plain; version=0.0.4"
                body = self.registry.render().encode()
            elif path in self.routes:
                status, ctype = "200 OK", "application/json"
                result = self.routes[path](**params)
                if asyncio.iscoroutine(result):
                    result = await result
                body = json.dumps(result, indent=1).encode() + b"\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", f"no such path {path}\n".encode()
            head = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                    f"Connection: close\r\n\r\n").encode()
            writer.write(head + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        except TypeError as e:  # unknown query parameter
            writer.write(f"HTTP/1.1 400 Bad Request\r\nContent-Length: {len(str(e)) + 1}\r\n"
                         f"Connection: close\r\n\r\n{e}\n".encode())
        except Exception:  # noqa: BLE001 - a broken status callback must not kill the server
            log.exception("metrics request failed")
        finally:
            writer.close()
