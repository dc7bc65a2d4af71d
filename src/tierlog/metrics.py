"""Broker metrics through ``prometheus-client``.

Names follow Kafka's MBeans the way Prometheus' JMX exporter spells them, so dashboards built for
Kafka read tierlog with few changes: Kafka's meter ``kafka.server:type=BrokerTopicMetrics,
name=RemoteCopyBytesPerSec,topic=T`` becomes the counter
``kafka_server_brokertopicmetrics_remotecopybytes_total{topic="T"}`` (Prometheus computes the rate),
and a gauge such as ``RemoteCopyLagBytes`` becomes ``kafka_server_brokertopicmetrics_remotecopylagbytes``.
docs/metrics.md lists every metric.

Each broker has its own :class:`MetricsRegistry` (a ``prometheus_client.CollectorRegistry``, never the
process-wide default: tests run several brokers in one process). Label names are declared when a metric
is registered; call sites on hot paths resolve a label set once with :meth:`Metric.labels` and keep the
child (a dict lookup and an add per update, no label string built per call).

The broker's HTTP endpoint (``tierlog.server.http_endpoint``, ``metrics.port``) serves ``render()`` as
``GET /metrics``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# Kafka's metrics have no ``_created`` series; without them the exposition is half the size.
prometheus_client.disable_created_metrics()

#: Buckets of the request time histograms, in milliseconds as Kafka's ``*TimeMs`` (long polls wait 500 ms+).
MS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class Metric:
    """One metric family: a ``prometheus_client`` metric and its children by label values.

    ``inc``/``set``/``observe`` take the labels as keywords (convenient, for rare updates); hot paths
    call :meth:`labels` once per label set and keep the child it returns."""

    kind = ""

    def __init__(self, family, name: str, labelnames: tuple[str, ...]) -> None:
        self.name = name
        self.labelnames = labelnames
        self._family = family
        self._children: dict[tuple[str, ...], object] = {}
        self._lock = threading.Lock()

    def labels(self, *values: object):
        """The child for these label values (in ``labelnames`` order), created once."""
        key = tuple(map(str, values))
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._family.labels(*key)
        return child

    def _child(self, labels: Mapping[str, object]):
        if not self.labelnames:
            if labels:
                raise ValueError(f"metric {self.name} has no labels, got {sorted(labels)}")
            return self._family
        if len(labels) != len(self.labelnames):
            raise ValueError(f"metric {self.name} has labels {list(self.labelnames)}, got {sorted(labels)}")
        return self.labels(*(labels[n] for n in self.labelnames))

    def value(self, **labels: object) -> float:
        """The current value of one label set (0 if it was never set); a histogram's observation count."""
        want = {k: str(v) for k, v in labels.items()}
        suffix = {"counter": "_total", "histogram": "_count"}.get(self.kind, "")
        for family in self._family.collect():
            for sample in family.samples:
                if sample.name == family.name + suffix and sample.labels == want:
                    return sample.value
        return 0

    def total(self) -> float:
        """The sum over every label set."""
        suffix = {"counter": "_total", "histogram": "_count"}.get(self.kind, "")
        return sum(s.value for family in self._family.collect() for s in family.samples
                   if s.name == family.name + suffix)

    def remove(self, **labels: object) -> None:
        """Drop one label set (a partition that moved away, a topic deleted)."""
        key = tuple(str(labels[n]) for n in self.labelnames)
        with self._lock:
            if self._children.pop(key, None) is not None:
                self._family.remove(*key)

    def remove_matching(self, **labels: object) -> None:
        """Drop every label set containing all of ``labels`` (e.g. all partitions of a deleted topic)."""
        idx = [(self.labelnames.index(k), str(v)) for k, v in labels.items()]
        with self._lock:
            for key in [k for k in self._children if all(k[i] == v for i, v in idx)]:
                del self._children[key]
                self._family.remove(*key)


class Counter(Metric):
    """A monotonically increasing count (thread-safe: storage threads count too)."""

    kind = "counter"

    def inc(self, amount: float = 1, **labels: object) -> None:
        self._child(labels).inc(amount)


class Gauge(Metric):
    """A value that goes up and down; ``remove`` drops a label set that no longer exists."""

    kind = "gauge"

    def set(self, value: float, **labels: object) -> None:
        self._child(labels).set(value)

    def inc(self, amount: float = 1, **labels: object) -> None:
        self._child(labels).inc(amount)


class Histogram(Metric):
    """Observations counted in buckets (Prometheus computes quantiles from them)."""

    kind = "histogram"

    def observe(self, amount: float, **labels: object) -> None:
        self._child(labels).observe(amount)


_KINDS = {"counter": (Counter, prometheus_client.Counter), "gauge": (Gauge, prometheus_client.Gauge),
          "histogram": (Histogram, prometheus_client.Histogram)}


class MetricsRegistry:
    """A broker's metrics: its own ``CollectorRegistry`` (``.registry``) and the families registered on it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return self._get("counter", name, doc, labels)  # type: ignore[return-value]

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return self._get("gauge", name, doc, labels)  # type: ignore[return-value]

    def histogram(self, name: str, doc: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = MS_BUCKETS) -> Histogram:
        return self._get("histogram", name, doc, labels, buckets=tuple(buckets))  # type: ignore[return-value]

    def _get(self, kind: str, name: str, doc: str, labels: Sequence[str], **extra) -> Metric:
        labelnames = tuple(labels)
        with self._lock:
            metric = self._metrics.get(name)
            if metric is None:
                ours, theirs = _KINDS[kind]
                family = theirs(name, doc, labelnames, registry=self.registry, **extra)
                metric = self._metrics[name] = ours(family, name, labelnames)
            elif metric.kind != kind:
                raise ValueError(f"metric {name} is already registered as a {metric.kind}")
            elif metric.labelnames != labelnames:
                raise ValueError(f"metric {name} is already registered with labels {list(metric.labelnames)}")
            return metric

    def register(self, collector: Collector) -> None:
        """Add a collector whose metrics are computed when scraped (log sizes, process figures)."""
        self.registry.register(collector)

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def render(self) -> str:
        """The exposition text (Prometheus text format 0.0.4)."""
        return generate_latest(self.registry).decode()
