"""The remote store's requests by operation as counters, read from the storage manager when scraped
(its counts, :mod:`tierlog.tiered.rsm.requests`, are the only copy: nothing is added on the request path).

Named as a Kafka MBean ``kafka.server:type=RemoteStorageMetrics,name=RequestsPerSec,operation=PUT`` would be
by Prometheus' JMX exporter; Kafka has none (its storage plugins count their own requests).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

REQUESTS = "kafka_server_remotestoragemetrics_requests"
BYTES = "kafka_server_remotestoragemetrics_bytes"


class StoreRequestsCollector(Collector):
    """``*_requests_total`` and ``*_bytes_total`` per ``operation`` of ``rsm.store_requests()``; nothing when the
    storage manager does not count (the filesystem backend, third-party plugins)."""

    def __init__(self, rsm) -> None:
        self.rsm = rsm

    def collect(self):
        counts = self.rsm.store_requests()
        if counts is None:
            return
        requests = CounterMetricFamily(REQUESTS, "Requests sent to the remote object store, by operation (a "
                                       "multipart upload counts its create, parts and complete).",
                                       labels=["operation"])
        sent = CounterMetricFamily(BYTES, "Bytes uploaded (PUT, UPLOAD_PART) or read (GET, GET_RANGE) by the "
                                   "requests to the remote object store, by operation.", labels=["operation"])
        for op, c in counts.items():
            requests.add_metric([op], c["requests"])
            sent.add_metric([op], c["bytes"])
        yield from (requests, sent)
