"""Broker metrics in Prometheus' text format.

Names follow Kafka's MBeans the way Prometheus' JMX exporter spells them, so dashboards built for
Kafka read tierlog with few changes: Kafka's meter ``kafka.server:type=BrokerTopicMetrics,
name=RemoteCopyBytesPerSec,topic=T`` becomes the counter
``kafka_server_brokertopicmetrics_remotecopybytes_total{topic="T"}`` (Prometheus computes the rate),
and a gauge such as ``RemoteCopyLagBytes`` becomes ``kafka_server_brokertopicmetrics_remotecopylagbytes``.

The broker's HTTP endpoint (``tierlog.server.http_endpoint``, ``metrics.port``) serves ``render()`` as
``GET /metrics``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

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
