"""Client quotas (Kafka's ClientQuotaManager and ClientRequestQuotaManager): produce and fetch byte rates and
the request percentage, per user, client id, or both.

Quotas are stored by entity path, as Kafka keeps them under ``/config``: ``users/<user>``,
``users/<user>/clients/<client-id>``, ``clients/<client-id>``, with ``<default>`` for a default entity and
names sanitized (URL-encoded) as Kafka's Sanitizer does. For a request of user U and client id C the quota of
each type is the first configured of (Kafka's DefaultQuotaCallback order)::

    users/U/clients/C, users/U/clients/<default>, users/U, users/<default>/clients/C,
    users/<default>/clients/<default>, users/<default>, clients/C, clients/<default>

The level that matched decides the sensor the request counts against (its metric tags): a user level
shares one sensor between all client ids of the user, a client level has one per client id.

The rate is Kafka's ``Rate`` over ``quota.window.num`` samples of ``quota.window.size.seconds``: the sum of
the live samples over the time since the oldest began, never less than ``num - 1`` full windows. A request
that takes the rate above the bound gets ``(rate - bound) / bound * window`` ms of throttle (the request
quota at most one window), which the response carries while the broker reads nothing more from the
connection for that long (KIP-219).

With no quota of a type configured, :attr:`ClientQuotaManager.enabled` is false and the request paths skip
everything else (one attribute read).
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Callable, Mapping

DEFAULT = "<default>"  # the default entity's name in a path

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
CONTROLLER_MUTATION = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION)
USER, CLIENT_ID, IP = "user", "client-id", "ip"
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9
MAX_INT32 = 2**31 - 1


def quota_user(ctx) -> str:
    """The user name of the request's principal (``ctx.session``, set per request by the socket server from its
    connection: the TLS client certificate's mapped principal, later SASL's), ``ANONYMOUS`` without
    authentication. The only place quotas read the principal."""
    session = getattr(ctx, "session", None)
    return (session.principal.name or "ANONYMOUS") if session is not None else "ANONYMOUS"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encode, with ``*`` as %2A and a space as %20."""
    return urllib.parse.quote(name, safe="").replace("*", "%2A").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def entity_path(user: str | None, client_id: str | None, default_user: bool = False,
                default_client: bool = False) -> str:
    """The stored path of an entity: a name, the default (``default_*``), or absent (None, not default)."""
    parts = []
    if user is not None or default_user:
        parts.append("users/" + (DEFAULT if default_user else sanitize(user)))
    if client_id is not None or default_client:
        parts.append("clients/" + (DEFAULT if default_client else sanitize(client_id)))
    return "/".join(parts)


_PATH_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP}


def parse_entity_path(path: str) -> dict[str, str | None]:
    """{"user"/"client-id"/"ip": name, None for the default}: the entity of a stored path."""
    items = path.split("/")
    out: dict[str, str | None] = {}
    for kind, name in zip(items[::2], items[1::2]):
        out[_PATH_TYPES.get(kind, kind)] = None if name == DEFAULT else desanitize(name)
    return out


def resolution_order(user: str, client_id: str) -> list[tuple[str, tuple[str, str]]]:
    """(path, sensor tags (user, client id)) of the levels a quota is looked up at, first wins."""
    u, c = sanitize(user), sanitize(client_id)
    return [
        (f"users/{u}/clients/{c}", (user, client_id)),
        (f"users/{u}/clients/{DEFAULT}", (user, client_id)),
        (f"users/{u}", (user, "")),
        (f"users/{DEFAULT}/clients/{c}", (user, client_id)),
        (f"users/{DEFAULT}/clients/{DEFAULT}", (user, client_id)),
        (f"users/{DEFAULT}", (user, "")),
        (f"clients/{c}", ("", client_id)),
        (f"clients/{DEFAULT}", ("", client_id)),
    ]


def _now_ms() -> float:
    return time.monotonic() * 1000


class Rate:
    """Kafka's ``Rate`` on a ``SampledStat`` (per second): single-threaded (the event loop)."""

    __slots__ = ("samples", "window_ms", "_starts", "_values")

    def __init__(self, samples: int, window_ms: float) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_ms
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0], self._values[0]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now - self._starts[-1] >= self.window_ms:
            self._starts.append(now)
            self._values.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0], self._values[0]
        self._values[-1] += value

    def window_size(self, now: float) -> float:
        """Kafka's Rate.windowSize: the time since the oldest sample began, at least ``samples - 1`` windows."""
        self._purge(now)
        elapsed = now - self._starts[0] if self._starts else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now: float) -> float:
        window = self.window_size(now)
        return sum(self._values) / (window / 1000)


def throttle_time_ms(observed: float, bound: float, window_ms: float) -> int:
    """Kafka's QuotaUtils.throttleTime: how long until ``observed`` falls back to ``bound``."""
    if observed <= bound:
        return 0
    throttle = (observed - bound) / bound * window_ms
    if throttle != throttle:  # a NaN bound (Kafka stores one): Java's Math.round makes it 0
        return 0
    return min(round(throttle), MAX_INT32) if throttle < MAX_INT32 else MAX_INT32  # the answers' field is an int32


class ClientQuotaManager:
    """One quota type (``producer_byte_rate``, ``consumer_byte_rate`` or ``request_percentage``)."""

    def __init__(self, key: str, samples: int, window_s: float, max_throttle_ms: int | None = None,
                 clock: Callable[[], float] = _now_ms, metrics=None) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self.enabled = False
        self._clock = clock
        self._quotas: dict[str, float] = {}  # entity path -> bound
        self._resolved: dict[tuple[str, str], tuple[float, tuple[str, str]] | None] = {}
        self._sensors: dict[tuple[str, str], Rate] = {}
        self._metrics = metrics  # ClientQuotaMetrics or None

    def update(self, quotas: Mapping[str, Mapping[str, str]]) -> None:
        """All stored quotas (entity path -> {key: value}); this manager keeps those of its key."""
        mine = {}
        for path, values in quotas.items():
            v = values.get(self.key)
            if v is not None:
                mine[path] = float(v)
        if mine != self._quotas:
            self._quotas = mine
            self._resolved = {}
        self.enabled = bool(mine)

    def quota(self, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(bound, sensor tags) for the request's user and client id, None without a quota."""
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = None
        for path, tags in resolution_order(user, client_id):
            bound = self._quotas.get(path)
            if bound is not None:
                found = (bound, tags)
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def _sensor(self, tags: tuple[str, str]) -> Rate:
        rate = self._sensors.get(tags)
        if rate is None:
            rate = self._sensors[tags] = Rate(self.samples, self.window_ms)
        return rate

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float) -> int:
        """Record ``value`` and return the throttle it earns (0 within the quota or without one)."""
        q = self.quota(user, client_id)
        if q is None:
            return 0
        bound, tags = q
        now = self._clock()
        rate = self._sensor(tags)
        rate.record(value, now)
        observed = rate.measure(now)
        throttle = throttle_time_ms(observed, bound, rate.window_size(now))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        if self._metrics is not None:
            self._metrics.observe(self.key, tags, value, throttle)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back ``value`` (a throttled fetch is answered empty: its bytes were never sent)."""
        q = self.quota(user, client_id)
        if q is not None:
            self._sensor(q[1]).record(-value, self._clock())

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most a client may take within the quota's window (Kafka bounds a fetch's size with it)."""
        q = self.quota(user, client_id)
        if q is None or not math.isfinite(q[0]):
            return None
        return q[0] * (self.samples - 1) * self.window_ms / 1000


_METRIC_TYPES = {PRODUCE: "produce", FETCH: "fetch", REQUEST: "request"}


class ClientQuotaMetrics:
    """Kafka's quota metrics per (user, client-id) (``kafka.server:type=Produce|Fetch|Request``) as counters:
    ``kafka_server_<type>_throttle_time_ms_total`` and the amount recorded, ``kafka_server_produce_bytes_total``,
    ``kafka_server_fetch_bytes_total``, ``kafka_server_request_request_time_percent_total``: take ``rate()`` for
    Kafka's throttle-time and byte-rate. Only requests that a quota applies to are counted."""

    def __init__(self, registry) -> None:
        labels = ("user", "client_id")
        self._children: dict[tuple[str, tuple[str, str]], tuple] = {}
        self._throttle = {k: registry.counter(f"kafka_server_{t}_throttle_time_ms",
                                              f"Throttle time given to the (user, client id) for its {t} quota, ms",
                                              labels) for k, t in _METRIC_TYPES.items()}
        self._amount = {
            PRODUCE: registry.counter("kafka_server_produce_bytes", "Bytes produced by the (user, client id)", labels),
            FETCH: registry.counter("kafka_server_fetch_bytes", "Bytes fetched by the (user, client id)", labels),
            REQUEST: registry.counter("kafka_server_request_request_time_percent",
                                      "Request handling time of the (user, client id), in percent-seconds", labels),
        }

    def observe(self, key: str, tags: tuple[str, str], value: float, throttle_ms: int) -> None:
        child = self._children.get((key, tags))
        if child is None:
            child = (self._amount[key].labels(*tags), self._throttle[key].labels(*tags))
            self._children[key, tags] = child
        if value > 0:
            child[0].inc(value)
        if throttle_ms:
            child[1].inc(throttle_ms)


class ClientQuotas:
    """The broker's client quota managers, fed with the stored quotas on every metadata change."""

    def __init__(self, samples: int = 11, window_s: float = 1, metrics=None,
                 clock: Callable[[], float] = _now_ms) -> None:
        self.produce = ClientQuotaManager(PRODUCE, samples, window_s, clock=clock, metrics=metrics)
        self.fetch = ClientQuotaManager(FETCH, samples, window_s, clock=clock, metrics=metrics)
        # Kafka's ClientRequestQuotaManager bounds its throttle at one window.
        self.request = ClientQuotaManager(REQUEST, samples, window_s, max_throttle_ms=int(window_s * 1000),
                                          clock=clock, metrics=metrics)
        self._stored: Mapping | None = None

    def update(self, quotas: Mapping[str, Mapping[str, str]]) -> None:
        if quotas is self._stored:
            return
        self._stored = quotas
        for m in (self.produce, self.fetch, self.request):
            m.update(quotas)


__all__ = ["ClientQuotaManager", "ClientQuotaMetrics", "ClientQuotas", "Rate", "entity_path",
           "parse_entity_path", "quota_user", "resolution_order", "sanitize", "throttle_time_ms"]
