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

Counters and histograms count in plain Python numbers (:class:`CounterChild`, :class:`HistogramChild`) and
are handed to ``prometheus_client`` as metric families when scraped (each family is a collector on the
registry): every Produce request updates five of them, and ``prometheus_client``'s own update path (checks,
a lock per value, a Python walk over the buckets) cost about 7 us of a 100 us request. The exposed series
and values are exactly those ``prometheus_client.Counter``/``Histogram`` would give (tests/test_metrics.py
compares both). Gauges stay ``prometheus_client`` objects (rarely set).

The broker's HTTP endpoint (``tierlog.server.http.http_endpoint``, ``metrics.port``) serves ``render()`` as
``GET /metrics``.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Collection, Mapping, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import INF, floatToGoString

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
        self._unlabelled = None if labelnames else self._new_child(())

    def _new_child(self, key: tuple[str, ...]):
        return self._family.labels(*key) if key else self._family

    def labels(self, *values: object):
        """The child for these label values (in ``labelnames`` order), created once."""
        key = tuple(map(str, values))
        child = self._children.get(key)
        if child is None:
            if not key or len(key) != len(self.labelnames):
                raise ValueError(f"metric {self.name} has labels {list(self.labelnames)}, got {list(key)}")
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._new_child(key)
        return child

    def _child(self, labels: Mapping[str, object]):
        if not self.labelnames:
            if labels:
                raise ValueError(f"metric {self.name} has no labels, got {sorted(labels)}")
            return self._unlabelled
        if len(labels) != len(self.labelnames):
            raise ValueError(f"metric {self.name} has labels {list(self.labelnames)}, got {sorted(labels)}")
        return self.labels(*(labels[n] for n in self.labelnames))

    def value(self, **labels: object) -> float:
        """The current value of one label set (0 if it was never set); a histogram's observation count."""
        want = {k: str(v) for k, v in labels.items()}
        suffix = {"counter": "_total", "histogram": "_count"}.get(self.kind, "")
        for family in self._families():
            for sample in family.samples:
                if sample.name == family.name + suffix and sample.labels == want:
                    return sample.value
        return 0

    def total(self) -> float:
        """The sum over every label set."""
        suffix = {"counter": "_total", "histogram": "_count"}.get(self.kind, "")
        return sum(s.value for family in self._families() for s in family.samples
                   if s.name == family.name + suffix)

    def remove(self, **labels: object) -> None:
        """Drop one label set (a partition that moved away, a topic deleted)."""
        key = tuple(str(labels[n]) for n in self.labelnames)
        with self._lock:
            if self._children.pop(key, None) is not None:
                self._forget(key)

    def remove_matching(self, **labels: object) -> None:
        """Drop every label set containing all of ``labels`` (e.g. all partitions of a deleted topic)."""
        idx = [(self.labelnames.index(k), str(v)) for k, v in labels.items()]
        with self._lock:
            for key in [k for k in self._children if all(k[i] == v for i, v in idx)]:
                del self._children[key]
                self._forget(key)

    def _forget(self, key: tuple[str, ...]) -> None:
        self._family.remove(*key)

    def _families(self):
        return self._family.collect()


class _OwnFamily(Metric, Collector):
    """A family whose children count in plain Python numbers; it is its own collector, building the metric
    family ``prometheus_client`` would when scraped (same name, help, type, samples and their order)."""

    def __init__(self, name: str, doc: str, labelnames: tuple[str, ...]) -> None:
        self.doc = doc
        super().__init__(None, name, labelnames)

    def _forget(self, key: tuple[str, ...]) -> None:
        pass  # gone from _children: no longer collected

    def _families(self):
        return self.collect()

    def describe(self):
        return [MetricFamily(self._exposed_name, self.doc, self.kind)]

    def collect(self):
        family = MetricFamily(self._exposed_name, self.doc, self.kind)
        if self.labelnames:
            with self._lock:
                children = list(self._children.items())
        else:
            children = [((), self._unlabelled)]
        name = self._exposed_name
        for key, child in children:
            series = list(zip(self.labelnames, key))
            for suffix, extra, value in child.samples():
                family.add_sample(name + suffix, dict(series + extra), value)
        return [family]


class CounterChild:
    """One counter series: a number behind a lock (storage threads count too; the lock costs ~0.1 us)."""

    __slots__ = ("_value", "_lock")

    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self._lock:
            self._value += amount

    def get(self) -> float:
        return float(self._value)

    def samples(self):
        return (("_total", [], float(self._value)),)


class Counter(_OwnFamily):
    """A monotonically increasing count (thread-safe: storage threads count too)."""

    kind = "counter"

    def __init__(self, name: str, doc: str, labelnames: tuple[str, ...]) -> None:
        # prometheus_client names a counter's family without ``_total`` and its sample with it.
        self._exposed_name = name[:-6] if name.endswith("_total") else name
        super().__init__(name, doc, labelnames)

    def _new_child(self, key: tuple[str, ...]) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1, **labels: object) -> None:
        self._child(labels).inc(amount)


class Gauge(Metric):
    """A value that goes up and down; ``remove`` drops a label set that no longer exists."""

    kind = "gauge"

    def set(self, value: float, **labels: object) -> None:
        self._child(labels).set(value)

    def inc(self, amount: float = 1, **labels: object) -> None:
        self._child(labels).inc(amount)


class HistogramChild:
    """One histogram series: a count per bucket (not cumulative; summed when scraped) and the sum. An
    observation is a bisect (in C) and two adds under a lock, where prometheus_client walks the buckets in
    Python taking a lock per bucket touched."""

    __slots__ = ("_bounds", "_labels", "_counts", "_sum", "_lock")

    def __init__(self, bounds: tuple[float, ...], labels: tuple[str, ...]) -> None:
        self._bounds = bounds  # ascending, the last +Inf
        self._labels = labels  # each bound as its ``le`` label
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        i = bisect.bisect_left(self._bounds, amount)  # the first bucket whose bound is >= amount
        with self._lock:
            self._counts[i] += 1
            self._sum += amount

    def samples(self):
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        out = []
        acc = 0.0
        for le, n in zip(self._labels, counts):
            acc += n
            out.append(("_bucket", [("le", le)], acc))
        out.append(("_count", [], acc))
        if self._bounds[0] >= 0:
            out.append(("_sum", [], total))
        return out


class Histogram(_OwnFamily):
    """Observations counted in buckets (Prometheus computes quantiles from them)."""

    kind = "histogram"

    def __init__(self, name: str, doc: str, labelnames: tuple[str, ...], buckets: Sequence[float]) -> None:
        if "le" in labelnames:
            raise ValueError("a histogram cannot have a label named le")
        bounds = sorted(float(b) for b in buckets)
        if list(bounds) != [float(b) for b in buckets]:
            raise ValueError("histogram buckets must be in sorted order")
        if not bounds or bounds[-1] != INF:
            bounds.append(INF)
        if len(bounds) < 2:
            raise ValueError("a histogram must have at least two buckets (including +Inf)")
        self._bounds = tuple(bounds)
        self._le = tuple(floatToGoString(b) for b in bounds)
        self._exposed_name = name
        super().__init__(name, doc, labelnames)

    def _new_child(self, key: tuple[str, ...]) -> HistogramChild:
        return HistogramChild(self._bounds, self._le)

    def observe(self, amount: float, **labels: object) -> None:
        self._child(labels).observe(amount)


_KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


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
                if kind == "gauge":
                    family = prometheus_client.Gauge(name, doc, labelnames, registry=self.registry)
                    metric = Gauge(family, name, labelnames)
                else:
                    metric = _KINDS[kind](name, doc, labelnames, **extra)
                    self.registry.register(metric)
                self._metrics[name] = metric
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

    def render(self, names: Collection[str] | None = None) -> str:
        """The exposition text (Prometheus text format 0.0.4); with ``names``, only the samples of those names
        (as Prometheus' client libraries answer ``/metrics?name[]=...``): a collector that says which names it
        makes (``describe``) is not run at all for others."""
        return generate_latest(self.registry.restricted_registry(names) if names else self.registry).decode()
