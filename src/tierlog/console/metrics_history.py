"""The console's metrics charts: every broker's ``/metrics`` (Prometheus text) scraped at a fixed interval,
the figures the charts need kept for a short while in the console process, and each chart's series
computed from them.

Brokers export counters and histograms (docs/metrics.md), so a chart's point is the change between two
scrapes: a rate (the counter's increase over the seconds between them, as Prometheus' ``rate``) or, for
the request time histograms, a percentile of the requests answered in between (the bucket counts'
increase, interpolated inside the bucket as Prometheus' ``histogram_quantile``). A counter that went down
(the broker restarted) starts again from its new value: that interval has no point. The history is bounded:
``HISTORY_S`` seconds at the scrape interval, at most ``MAX_SAMPLES`` samples per broker.
"""

from __future__ import annotations

import asyncio
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

HISTORY_S = 15 * 60
MAX_SAMPLES = 1800
#: The longest /metrics answer read (a broker with many topics exports a series per topic).
MAX_SCRAPE_BYTES = 64 << 20

_BT = "kafka_server_brokertopicmetrics_"
_RM = "kafka_network_requestmetrics_"

#: (figure, metric family, the labels a sample must have) summed into one number per scrape. Fetch requests
#: and their errors are counted by Kafka as Fetch and again as FetchConsumer or FetchFollower: the sums keep
#: one of each.
COUNTERS: dict[str, tuple[str, dict[str, str]]] = {
    "produce_bytes": (_BT + "bytesin", {}),
    "fetch_bytes": (_BT + "bytesout", {}),
    "produce_requests": (_RM + "requests", {"request": "Produce"}),
    "fetch_requests": (_RM + "requests", {"request": "FetchConsumer"}),
    "follower_fetch_requests": (_RM + "requests", {"request": "FetchFollower"}),
    "remote_copy_bytes": (_BT + "remotecopybytes", {}),
    "remote_copy_requests": (_BT + "remotecopyrequests", {}),
    "remote_fetch_bytes": (_BT + "remotefetchbytes", {}),
    "remote_fetch_requests": (_BT + "remotefetchrequests", {}),
    "remote_copy_errors": (_BT + "remotecopyerrors", {}),
    "remote_fetch_errors": (_BT + "remotefetcherrors", {}),
}
#: The error counter: every API but the second count of a fetch.
ERRORS = _RM + "errors"
_FETCH_ALIASES = ("FetchConsumer", "FetchFollower")
#: The request time histograms charted as percentiles: (figure, request label).
LATENCIES = {"produce": "Produce", "fetch": "FetchConsumer"}
TOTAL_TIME = _RM + "totaltimems"
PERCENTILES = (0.5, 0.99)

#: The charts: title, unit, and the series of each (figure, label).
CHARTS = [
    {"id": "bytes", "title": "Produce and fetch (bytes/s)", "unit": "bytes/s",
     "series": [("produce_bytes", "produce"), ("fetch_bytes", "fetch")]},
    {"id": "requests", "title": "Produce and fetch requests/s", "unit": "req/s",
     "series": [("produce_requests", "produce"), ("fetch_requests", "fetch (consumers)"),
                ("follower_fetch_requests", "fetch (followers)")]},
    {"id": "latency", "title": "Request time percentiles (ms)", "unit": "ms",
     "series": [("produce_p50", "produce p50"), ("produce_p99", "produce p99"), ("fetch_p50", "fetch p50"),
                ("fetch_p99", "fetch p99")]},
    {"id": "remote", "title": "Remote tier copy and read (bytes/s)", "unit": "bytes/s",
     "series": [("remote_copy_bytes", "copied"), ("remote_fetch_bytes", "read")]},
    {"id": "errors", "title": "Errors/s", "unit": "errors/s",
     "series": [("errors", "request errors"), ("remote_copy_errors", "remote copy errors"),
                ("remote_fetch_errors", "remote read errors")]},
]


def parse(text: str) -> dict[str, Any]:
    """The figures of one scrape: each of ``COUNTERS`` summed, ``errors``, and for each of ``LATENCIES``
    the cumulative bucket counts ``[(upper bound, count), ...]``."""
    sums = dict.fromkeys(COUNTERS, 0.0)
    sums["errors"] = 0.0
    buckets: dict[str, dict[float, float]] = {name: {} for name in LATENCIES}
    families = {f for f, _ in COUNTERS.values()}
    for family in text_string_to_metric_families(text):
        if family.name in families:
            for s in family.samples:
                if not s.name.endswith("_total"):
                    continue
                for figure, (name, labels) in COUNTERS.items():
                    if name == family.name and all(s.labels.get(k) == v for k, v in labels.items()):
                        sums[figure] += s.value
        elif family.name == ERRORS:
            sums["errors"] += sum(s.value for s in family.samples
                                  if s.name.endswith("_total") and s.labels.get("request") not in _FETCH_ALIASES)
        elif family.name == TOTAL_TIME:
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    for figure, request in LATENCIES.items():
                        if s.labels.get("request") == request:
                            le = float(s.labels["le"])
                            buckets[figure][le] = buckets[figure].get(le, 0.0) + s.value
    return {**sums, "buckets": {k: sorted(v.items()) for k, v in buckets.items()}}


def quantile(q: float, before: list[tuple[float, float]], after: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile (0..1) of the observations between two scrapes of a histogram (cumulative buckets
    by upper bound), interpolated linearly inside its bucket from the bucket's lower bound (0 for the
    first), as Prometheus' ``histogram_quantile``; the highest finite bound when it falls in ``+Inf``. None
    without observations in between, or when the buckets went down (a restart)."""
    was = dict(before)
    counts = [(le, c - was.get(le, 0.0)) for le, c in after]
    if not counts or any(c < 0 for _, c in counts):
        return None
    total = counts[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, c in counts:
        if c >= rank:
            if math.isinf(le):
                return lower
            inside = c - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, c
    return lower


def points(before: dict, after: dict) -> dict[str, float | None]:
    """Each series' point for the interval between two samples (``t`` seconds and ``figures``)."""
    dt = after["t"] - before["t"]
    out: dict[str, float | None] = {}
    a, b = before["figures"], after["figures"]
    for name in [*COUNTERS, "errors"]:
        grew = b[name] - a[name]
        out[name] = grew / dt if dt > 0 and grew >= 0 else None
    for figure in LATENCIES:
        for q in PERCENTILES:
            out[f"{figure}_p{round(q * 100)}"] = quantile(q, a["buckets"][figure], b["buckets"][figure])
    return out


#: The samples the charts read: a scrape asks only for these (``/metrics?name[]=...``), where all of them
#: would be some 7 MB and 0.8 s of the broker's CPU with 10,000 partitions (a gauge per partition).
SCRAPED = tuple(sorted({family + "_total" for family, _ in COUNTERS.values()}
                       | {ERRORS + "_total"} | {TOTAL_TIME + s for s in ("_bucket", "_count", "_sum")}))


def scrape(url: str, timeout_s: float) -> str:
    query = urllib.parse.urlencode([("name[]", name) for name in SCRAPED])
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/metrics?{query}", timeout=timeout_s) as r:
            return r.read(MAX_SCRAPE_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        if e.code != 400:  # 400: a broker that takes no name[] (an older tierlog): every metric
            raise
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
        return r.read(MAX_SCRAPE_BYTES).decode("utf-8", "replace")


class MetricsHistory:
    """Every broker's figures, scraped each ``interval_s`` seconds while a page shows the charts (started by
    the first page that asks, stopped once none has asked for ``idle_after_s``: a console whose metrics page
    is closed scrapes nothing) and kept ``HISTORY_S`` seconds; the time it stopped is a gap in the charts.

    ``endpoints`` gives the brokers' HTTP endpoints (``tools.tier.cluster_endpoints``' answer)."""

    def __init__(self, endpoints: Callable[[], Awaitable[list[dict]]], interval_s: float = 5.0,
                 timeout_s: float = 5.0, idle_after_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self.idle_after_s = idle_after_s
        self.asked = time.monotonic()  # when a page last asked for the charts (start() is called then)
        self.timeout_s = timeout_s
        self._endpoints = endpoints
        keep = max(2, min(MAX_SAMPLES, int(HISTORY_S / interval_s) + 1))
        self._keep = keep
        self.samples: dict[int, deque] = {}
        self.errors: dict[int, str] = {}
        self._task: asyncio.Task | None = None
        self.last_scrape: float | None = None

    def start(self) -> None:
        self.asked = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="console-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        # a page polls at the interval: idle_after_s (at least a few intervals) without one, it is closed
        while time.monotonic() - self.asked < max(self.idle_after_s, 3 * self.interval_s):
            # the next scrape one interval after the last (the first page's call made one already)
            since = time.time() - (self.last_scrape or 0.0)
            await asyncio.sleep(max(0.0, self.interval_s - since))
            try:
                await self.scrape_once()
            except Exception as e:  # the cluster is away: the charts say so and keep their history
                self.errors = {-1: f"cannot find the brokers' endpoints: {e}"}
                self.last_scrape = time.time()

    async def scrape_once(self) -> None:
        endpoints = await self._endpoints()

        def one(endpoint: dict) -> tuple[int, dict | str]:
            if endpoint.get("url") is None:
                return endpoint["node_id"], endpoint.get("error") or "no HTTP endpoint"
            try:
                text = scrape(endpoint["url"], self.timeout_s)
                return endpoint["node_id"], {"t": time.time(), "figures": parse(text)}
            except Exception as e:  # one broker down must not stop the others' charts
                return endpoint["node_id"], f"cannot scrape {endpoint['url']}/metrics: {e}"

        answers = await asyncio.gather(*(asyncio.to_thread(one, e) for e in endpoints))
        errors: dict[int, str] = {}
        for node, answer in answers:
            if isinstance(answer, str):
                errors[node] = answer
            else:
                self.samples.setdefault(node, deque(maxlen=self._keep)).append(answer)
        self.errors = errors
        self.last_scrape = time.time()

    def charts(self, brokers: Iterable[int] | None = None) -> dict:
        """The charts' data: per broker the sample times (s since the epoch, from the second sample on) and
        each series' points, the latest cumulative figures (what the last scrape read), and why a broker
        has no new points."""
        out = {}
        for node in sorted(self.samples if brokers is None else brokers):
            samples = list(self.samples.get(node, ()))
            times, series = [], {s: [] for chart in CHARTS for s, _ in chart["series"]}
            for before, after in zip(samples, samples[1:]):
                times.append(after["t"])
                # scraping stopped in between (no page open): a gap, not a figure averaged over it
                p = points(before, after) if after["t"] - before["t"] < 3 * self.interval_s else {}
                for name in series:
                    series[name].append(p.get(name))
            latest = samples[-1]["figures"] if samples else None
            out[str(node)] = {"t": times, "series": series, "error": self.errors.get(node),
                              "latest": None if latest is None else
                              {k: v for k, v in latest.items() if k != "buckets"},
                              "latest_t": samples[-1]["t"] if samples else None}
        return {"interval_s": self.interval_s, "history_s": HISTORY_S, "last_scrape": self.last_scrape,
                "charts": [{**c, "series": [{"key": k, "label": label} for k, label in c["series"]]}
                           for c in CHARTS],
                "brokers": out, "error": self.errors.get(-1)}
