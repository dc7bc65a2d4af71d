"""The broker's own metrics, with the names Prometheus' JMX exporter gives Kafka's MBeans.

- :class:`RequestMetrics`: ``kafka.network:type=RequestMetrics`` per API (``request="Produce"``, a consumer's
  Fetch also as ``FetchConsumer``, a follower's as ``FetchFollower``, as Kafka counts both): requests,
  errors by name, and the request queue and total time histograms (ms); and
  ``kafka.server:type=socket-server-metrics`` per listener (connections open, created, closed).
- :class:`BrokerTopicMetrics`: bytes in and out and messages in per topic (``BytesInPerSec``,
  ``BytesOutPerSec``, ``MessagesInPerSec``); the tiered ones live with the remote log manager.
- :class:`BrokerStateCollector`: figures computed when scraped, never on a hot path: log size, offsets and
  segment count per partition (``kafka.log:type=Log``), partition, leader and under-replicated partition
  counts (``kafka.server:type=ReplicaManager``), and whether the remote log metadata manager is ready.

Hot paths update children resolved once per API, error, listener or topic and kept in a dict: an update is
a lookup and an add, never a label string built per request. docs/metrics.md lists every metric.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tierlog.errors import error_for_code
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import ApiKey

_RM = "kafka_network_requestmetrics_"
REQUESTS = _RM + "requests_total"
ERRORS = _RM + "errors_total"
TOTAL_TIME = _RM + "totaltimems"
QUEUE_TIME = _RM + "requestqueuetimems"
_BTM = "kafka_server_brokertopicmetrics_"
BYTES_IN = _BTM + "bytesin_total"
BYTES_OUT = _BTM + "bytesout_total"
MESSAGES_IN = _BTM + "messagesin_total"
_SSM = "kafka_server_socket_server_metrics_"
CONNECTION_COUNT = _SSM + "connection_count"
CONNECTION_CREATION = _SSM + "connection_creation_total"
CONNECTION_CLOSE = _SSM + "connection_close_total"
LOG_SIZE = "kafka_log_log_size"
LOG_START_OFFSET = "kafka_log_log_logstartoffset"
LOG_END_OFFSET = "kafka_log_log_logendoffset"
LOG_SEGMENTS = "kafka_log_log_numlogsegments"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
PARTITION_COUNT = "kafka_server_replicamanager_partitioncount"
LEADER_COUNT = "kafka_server_replicamanager_leadercount"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
AT_MIN_ISR = "kafka_server_replicamanager_atminisrpartitioncount"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands_total"
RLMM_READY = "tierlog_remote_log_metadata_manager_ready"


def kafka_api_name(api_key: int) -> str:
    """Kafka's name of an API as its metrics spell it: ``Produce``, ``ListOffsets``, ``ApiVersions``."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return f"Unknown{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


def fetch_replica_id(request) -> int:
    """The replica a Fetch comes from (-1 for consumers): a field of its own up to v14, in ReplicaState
    from v15."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(request, "replica_id", -1)


class ApiMetrics:
    """The children one request of an API updates (Kafka's RequestMetrics of one name)."""

    __slots__ = ("requests", "total_time", "queue_time")

    def __init__(self, requests, total_time, queue_time) -> None:
        self.requests = requests
        self.total_time = total_time
        self.queue_time = queue_time


class RequestMetrics:
    def __init__(self, registry: MetricsRegistry) -> None:
        self._requests = registry.counter(REQUESTS, "Requests answered, by API and API version (Kafka's "
                                          "RequestMetrics RequestsPerSec).", ("request", "version"))
        self._errors = registry.counter(ERRORS, "Errors in answers, by API and error name; NONE is not counted "
                                        "(Kafka's RequestMetrics ErrorsPerSec).", ("request", "error"))
        self._total_time = registry.histogram(TOTAL_TIME, "Milliseconds from a request's last byte read to its "
                                              "answer written (Kafka's RequestMetrics TotalTimeMs).", ("request",))
        self._queue_time = registry.histogram(QUEUE_TIME, "Milliseconds from a request's last byte read to its "
                                              "handler starting: parsing and waiting behind the connection's "
                                              "earlier requests (Kafka's RequestMetrics RequestQueueTimeMs).",
                                              ("request",))
        self._connections = registry.gauge(CONNECTION_COUNT, "Open client connections, by listener (Kafka's "
                                           "socket-server-metrics connection-count).", ("listener",))
        self._created = registry.counter(CONNECTION_CREATION, "Connections accepted, by listener (Kafka's "
                                         "socket-server-metrics connection-creation-total).", ("listener",))
        self._closed = registry.counter(CONNECTION_CLOSE, "Connections closed, by listener (Kafka's "
                                        "socket-server-metrics connection-close-total).", ("listener",))
        self._by_api: dict[tuple[int, bool, int], tuple[ApiMetrics, ...]] = {}
        self._names: dict[tuple[int, bool], tuple[str, ...]] = {}
        self._by_error: dict[tuple[int, bool, int], tuple] = {}
        self._by_listener: dict[str, tuple] = {}

    # ------------------------------------------------------------------ requests

    def names(self, api_key: int, follower: bool = False) -> tuple[str, ...]:
        key = (api_key, follower)
        names = self._names.get(key)
        if names is None:
            names = (kafka_api_name(api_key),)
            if api_key == ApiKey.FETCH:  # Kafka counts a fetch under Fetch and under who fetched
                names += ("FetchFollower" if follower else "FetchConsumer",)
            self._names[key] = names
        return names

    def for_api(self, api_key: int, follower: bool = False, version: int = 0) -> tuple[ApiMetrics, ...]:
        """The children a request updates (one set, two for a Fetch), resolved once per API and version: the
        request count has Kafka's ``version`` tag (which versions clients send), the times do not."""
        found = self._by_api.get((api_key, follower, version))
        if found is None:
            found = self._by_api[(api_key, follower, version)] = tuple(
                ApiMetrics(self._requests.labels(n, str(version)), self._total_time.labels(n),
                           self._queue_time.labels(n))
                for n in self.names(api_key, follower))
        return found

    def for_request(self, ctx) -> tuple[ApiMetrics, ...]:
        api_key = ctx.api_key
        if api_key == ApiKey.FETCH:
            return self.for_api(api_key, fetch_replica_id(ctx.request) >= 0, ctx.api_version)
        return self.for_api(api_key, False, ctx.api_version)

    def error(self, api_key: int, code: int, follower: bool = False, count: int = 1) -> None:
        """Count ``count`` answers (partitions, topics, or the whole request) carrying error ``code``."""
        children = self._by_error.get((api_key, follower, code))
        if children is None:
            name = error_for_code(code).name
            children = self._by_error[(api_key, follower, code)] = tuple(
                self._errors.labels(n, name) for n in self.names(api_key, follower))
        for child in children:
            child.inc(count)

    def request_error(self, ctx, code: int) -> None:
        """Count a request answered with one error (a handler that raised)."""
        follower = ctx.api_key == ApiKey.FETCH and fetch_replica_id(ctx.request) >= 0
        self.error(ctx.api_key, code, follower)

    def count_response_errors(self, ctx, response) -> None:
        """Count the error codes of a kio response (top level and nested, as Kafka's errorCounts); the
        Produce and Fetch handlers count theirs themselves."""
        plan = _plan(type(response))
        if plan is None:
            return
        counts: dict[int, int] = {}
        _walk(response, plan, counts)
        for code, n in counts.items():
            self.error(ctx.api_key, code, count=n)

    # ------------------------------------------------------------------ connections

    def listener(self, name: str) -> tuple:
        """(open gauge, created counter, closed counter) of a listener."""
        found = self._by_listener.get(name)
        if found is None:
            found = self._by_listener[name] = (self._connections.labels(name), self._created.labels(name),
                                               self._closed.labels(name))
            found[0].set(0)
        return found


# A response type's plan: (has a top-level error_code, ((field, element plan), ...) for nested entities
# holding error codes), or None when the type holds none. Computed once per type.
_PLANS: dict[type, tuple | None] = {}


def _plan(cls: type) -> tuple | None:
    if cls in _PLANS:
        return _PLANS[cls]
    _PLANS[cls] = None  # recursive schemas end here
    plan = None
    if dataclasses.is_dataclass(cls):
        has_code = False
        nested = []
        for f in dataclasses.fields(cls):
            if f.name == "error_code":
                has_code = True
                continue
            t = f.type
            args = typing.get_args(t)
            if typing.get_origin(t) is tuple and args and dataclasses.is_dataclass(args[0]):
                sub = _plan(args[0])
                if sub is not None:
                    nested.append((f.name, True, sub))
            elif isinstance(t, type) and dataclasses.is_dataclass(t):
                sub = _plan(t)
                if sub is not None:
                    nested.append((f.name, False, sub))
        if has_code or nested:
            plan = (has_code, tuple(nested))
    _PLANS[cls] = plan
    return plan


_ERROR_CODE = operator.attrgetter("error_code")


def _walk(obj, plan: tuple, counts: dict[int, int]) -> None:
    has_code, nested = plan
    if has_code:
        code = obj.error_code
        if code:
            code = int(code)
            counts[code] = counts.get(code, 0) + 1
    for name, many, sub in nested:
        value = getattr(obj, name)
        if value is None:
            continue
        if not many:
            _walk(value, sub, counts)
        elif sub[1]:
            for item in value:
                _walk(item, sub, counts)
        elif any(map(_ERROR_CODE, value)):  # entries holding only codes (partitions): read in C, mostly all 0
            for code in map(_ERROR_CODE, value):
                if code:
                    code = int(code)
                    counts[code] = counts.get(code, 0) + 1


class BrokerTopicMetrics:
    """Bytes in, messages in and bytes out per topic, children kept per topic."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self._bytes_in = registry.counter(BYTES_IN, "Bytes of record batches appended, per topic (Kafka's "
                                          "BrokerTopicMetrics BytesInPerSec).", ("topic",))
        self._messages_in = registry.counter(MESSAGES_IN, "Records appended, per topic, counted from the batch "
                                             "headers (Kafka's BrokerTopicMetrics MessagesInPerSec).", ("topic",))
        self._bytes_out = registry.counter(BYTES_OUT, "Bytes of record batches sent to consumers, per topic "
                                           "(Kafka's BrokerTopicMetrics BytesOutPerSec).", ("topic",))
        self._in: dict[str, tuple] = {}
        self._out: dict[str, object] = {}

    def appended(self, topic: str, size: int, records: int) -> None:
        children = self._in.get(topic)
        if children is None:
            children = self._in[topic] = (self._bytes_in.labels(topic), self._messages_in.labels(topic))
        children[0].inc(size)
        if records:
            children[1].inc(records)

    def sent(self, topic: str, size: int) -> None:
        child = self._out.get(topic)
        if child is None:
            child = self._out[topic] = self._bytes_out.labels(topic)
        child.inc(size)

    def forget(self, topic: str) -> None:
        """A deleted topic's series go (a topic created again with that name starts from 0)."""
        self._in.pop(topic, None)
        self._out.pop(topic, None)
        for metric in (self._bytes_in, self._messages_in, self._bytes_out):
            metric.remove_matching(topic=topic)


class IsrChangeMetrics:
    """ISR changes of partitions led here, counted when the controller accepts them (Kafka's ReplicaManager
    IsrShrinksPerSec and IsrExpandsPerSec)."""

    def __init__(self, registry: MetricsRegistry):
        self.shrinks = registry.counter(ISR_SHRINKS, "ISR shrinks of partitions led here (Kafka's ReplicaManager "
                                        "IsrShrinksPerSec).")
        self.expands = registry.counter(ISR_EXPANDS, "ISR expansions of partitions led here (Kafka's ReplicaManager "
                                        "IsrExpandsPerSec).")

    def changed(self, before: int, after: int) -> None:
        if after < before:
            self.shrinks.inc()
        elif after > before:
            self.expands.inc()


class BrokerStateCollector(Collector):
    """Figures read from the broker's state when scraped. ``partitions()`` gives the hosted partitions
    (:class:`tierlog.server.partition.Partition`); ``rlmm_ready()`` None without tiered storage."""

    def __init__(self, node_id: int, partitions: Callable[[], Iterable], rlmm_ready: Callable[[], bool | None]):
        self.node_id = node_id
        self._partitions = partitions
        self._rlmm_ready = rlmm_ready

    def collect(self):
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(LOG_SIZE, "Bytes of a partition's local log segments (Kafka's Log Size).",
                                 labels=labels)
        start = GaugeMetricFamily(LOG_START_OFFSET, "A partition's log start offset (Kafka's Log LogStartOffset).",
                                  labels=labels)
        end = GaugeMetricFamily(LOG_END_OFFSET, "A partition's log end offset (Kafka's Log LogEndOffset).",
                                labels=labels)
        segments = GaugeMetricFamily(LOG_SEGMENTS, "A partition's local log segments (Kafka's Log "
                                     "NumLogSegments).", labels=labels)
        count = leaders = under = under_min = at_min = 0
        for p in list(self._partitions()):
            lg = p.log
            values = [p.topic, str(p.index)]
            size.add_metric(values, sum(seg.size for seg in list(lg.segments)))
            start.add_metric(values, lg.log_start_offset)
            end.add_metric(values, lg.log_end_offset)
            segments.add_metric(values, len(lg.segments))
            count += 1
            if p.leader_id == self.node_id:
                leaders += 1
                # Kafka's Partition.isUnderReplicated: the leader's ISR is smaller than the assignment.
                if len(p.isr) < len(p.replicas):
                    under += 1
                min_isr = p.log.config.min_insync_replicas
                under_min += len(p.isr) < min_isr
                at_min += len(p.isr) == min_isr
        yield from (size, start, end, segments)
        yield GaugeMetricFamily(PARTITION_COUNT, "Partitions hosted (Kafka's ReplicaManager PartitionCount).",
                                value=count)
        yield GaugeMetricFamily(LEADER_COUNT, "Partitions led (Kafka's ReplicaManager LeaderCount).", value=leaders)
        yield GaugeMetricFamily(UNDER_REPLICATED, "Partitions led here whose in-sync replicas are fewer than their "
                                "replicas (Kafka's ReplicaManager UnderReplicatedPartitions); 0 on one node.",
                                value=under)
        yield GaugeMetricFamily(UNDER_MIN_ISR, "Partitions led here whose in-sync replicas are fewer than their "
                                "min.insync.replicas: acks=all writes are refused (Kafka's ReplicaManager "
                                "UnderMinIsrPartitionCount).", value=under_min)
        yield GaugeMetricFamily(AT_MIN_ISR, "Partitions led here whose in-sync replicas are exactly their "
                                "min.insync.replicas: one more loss refuses acks=all (Kafka's ReplicaManager "
                                "AtMinIsrPartitionCount).", value=at_min)
        ready = self._rlmm_ready()
        if ready is not None:
            yield GaugeMetricFamily(RLMM_READY, "1 once the remote log metadata manager is initialized and every "
                                    "tiered partition led here has its metadata loaded, else 0.", value=int(ready))
