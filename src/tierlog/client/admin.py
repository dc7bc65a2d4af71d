"""tierlog's asyncio admin client: topics, partitions, configs, offsets, records, cluster and groups.

Every operation runs within ``default.api.timeout.ms`` (or the call's ``timeout_ms``), retrying
retriable errors with Kafka's ``retry.backoff.ms`` .. ``retry.backoff.max.ms`` back-off at most
``retries`` times, and raises :class:`~tierlog.client.errors.KafkaTimeoutError` when the time is up.
Requests go where Kafka's ``KafkaAdminClient`` sends them: topic creation, deletion, new partitions,
config changes, leader elections and partition reassignments to the controller the metadata names (any
broker otherwise: KRaft brokers forward), BROKER resources to that broker, ListOffsets and DeleteRecords
to each partition's leader, group requests to the group's coordinator.

Operations on several items (topics, partitions, resources, groups) return a dict keyed by the item
as the caller gave it. When items fail, the typed Kafka exception of the first failed item (in the
caller's order) is raised, carrying the broker's error message, with two attributes: ``errors``
(every failed item -> its exception) and ``results`` (what succeeded), so nothing is lost.
Per-item errors are final as in Kafka (an unknown topic is not retried for a minute); only
NOT_CONTROLLER, THROTTLING_QUOTA_EXCEEDED, leader moves and coordinator moves are retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tierlog import errors
from tierlog.client.cluster import Node
from tierlog.client.connection import (
    CLIENT_VERSIONS,
    OFFSET_COMMIT_LAST_VERSION_WITH_NAMES,
    OFFSET_FETCH_LAST_VERSION_WITH_NAMES,
)
from tierlog.client.errors import IllegalStateError, KafkaConnectionError, KafkaTimeoutError
from tierlog.client.group import offset_fetch_answer, offset_fetch_values
from tierlog.client.network import KafkaClient, deadline_after, retry_until
from tierlog.client.types import OffsetAndMetadata, TopicPartition
from tierlog.config.broker import CONFIG_TYPE_IDS, ConfigSource
from tierlog.config.client import validate_client_config
from tierlog.protocol import ApiKey

log = logging.getLogger("tierlog.client.admin")

__all__ = [
    "EARLIEST", "EARLIEST_LOCAL", "LATEST", "LATEST_TIERED", "MAX_TIMESTAMP",
    "Admin", "AlterConfigOp", "ClusterDescription", "ConfigEntry", "ConfigResource", "ConfigSource", "ConfigSynonym",
    "ConsumerGroupDescription", "CreateTopicResult", "GroupListing", "ListOffsetsResult", "LogDirDescription",
    "MemberDescription", "NewPartitions", "NewTopic", "PartitionDescription", "PartitionReassignment", "ReplicaInfo",
    "TopicDescription", "TopicListing", "TopicPartition",
]

# ListOffsets special timestamps (OffsetSpec in Kafka's admin) and the version that introduced each
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
_OFFSET_SPECS = {"earliest": EARLIEST, "latest": LATEST, "max_timestamp": MAX_TIMESTAMP,
                 "earliest_local": EARLIEST_LOCAL, "latest_tiered": LATEST_TIERED}
_SPEC_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}

# ConfigResource.Type and AlterConfigOp.OpType wire ids
_RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "client_metrics": 16, "group": 32}
_RESOURCE_NAMES = {v: k for k, v in _RESOURCE_TYPES.items()}
_BROKER, _BROKER_LOGGER = 4, 8
_CONFIG_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}
_CONFIG_TYPE_NAMES = {v: k for k, v in CONFIG_TYPE_IDS.items()}
_ELECTION_TYPES = {"preferred": 0, "unclean": 1}  # Kafka's ElectionType

# error codes the admin treats specially
_UNKNOWN_TOPIC = errors.UnknownTopicOrPartitionError.code
_TOPIC_EXISTS = errors.TopicAlreadyExistsError.code
_LEADER_NOT_AVAILABLE = errors.LeaderNotAvailableError.code
_NOT_LEADER = errors.NotLeaderOrFollowerError.code
_NOT_CONTROLLER = errors.NotControllerError.code
_THROTTLED = errors.ThrottlingQuotaExceededError.code
_LeaderNotAvailableError = errors.LeaderNotAvailableError
_CONTROLLER_RETRY = frozenset({_NOT_CONTROLLER, _THROTTLED})  # the per-topic errors Kafka retries


# ---------------------------------------------------------------------------------------------------
# Values handed in and out
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions / replication factor means the broker's default;
    ``assignments`` ({partition: [broker ids]}) excludes both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, Any] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class NewPartitions:
    """The new total partition count, optionally with the replicas of each added partition."""

    total_count: int
    assignments: Sequence[Sequence[int]] | None = None


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described setting. ``value`` is None for sensitive settings; ``synonyms`` only when asked
    for (``include_synonyms=True``), highest precedence first; ``type`` is Kafka's type name."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    type: str = "unknown"
    documentation: str | None = None


class ConfigResource(NamedTuple):
    """A config resource: ``type`` is "topic", "broker", "broker_logger", "client_metrics" or "group";
    a plain tuple like ("topic", "orders") or ("broker", 1) works the same."""

    type: str
    name: str


class AlterConfigOp(NamedTuple):
    """An incremental change: ``op`` is "set", "delete", "append" or "subtract" (or its id 0..3)."""

    name: str
    op: str | int
    value: Any = None


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: dict[str, ConfigEntry]


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    internal: bool


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """``leader`` is a broker id, None while the partition has no leader."""

    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: list[PartitionDescription]


class ListOffsetsResult(NamedTuple):
    """``timestamp`` is -1 for the earliest/latest specs; ``leader_epoch`` -1 when unknown."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[Node]

    @property
    def controller(self) -> Node | None:
        return next((b for b in self.brokers if b.node_id == self.controller_id), None)


class ReplicaInfo(NamedTuple):
    """A partition's log in a log dir: ``offset_lag`` is -1 when its log is not online; ``is_future`` marks
    a copy being moved in from another dir (AlterReplicaLogDirs)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of a broker (Kafka's ``LogDirDescription``): ``error`` is the dir's error (a
    KafkaStorageError instance when it is offline), else None; ``total_bytes`` and ``usable_bytes`` of its
    file system are None when the broker does not say (before DescribeLogDirs v4, or unknown)."""

    error: errors.KafkaError | None
    replica_infos: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None


class PartitionReassignment(NamedTuple):
    """A partition being moved (ListPartitionReassignments): its replica set while moving (the target
    followed by the original replicas it drops), and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """``state`` is empty when the broker's ListGroups is older than v4."""

    group_id: str
    protocol_type: str
    state: str
    #: "classic" or "consumer" (KIP-848); empty when the broker's ListGroups is older than v5
    group_type: str = ""

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    #: a consumer-protocol (KIP-848) member's epoch; None for a classic group's member
    member_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """``protocol`` is the assignor the group chose (empty unless the group is Stable)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    coordinator: Node
    #: "classic", or "consumer" for a KIP-848 group (described with ConsumerGroupDescribe, as Kafka's Admin)
    group_type: str = "classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


class _Exhausted(Exception):
    """Carries a retriable error past ``retry_until`` once ``retries`` is used up."""

    def __init__(self, error: errors.KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


def _error(code: int, message: str | None, context: str) -> errors.KafkaError:
    """The typed exception for a per-item error code: the broker's message, else the code's name."""
    cls = errors.error_for_code(code)
    return cls(message or f"{context}: {cls.name}")


def _finish(order: Iterable[Any], results: Mapping[Any, Any], failures: Mapping[Any, errors.KafkaError]) -> dict:
    order = list(dict.fromkeys(order))
    if failures:
        first = failures[next(k for k in order if k in failures)]
        first.errors = {k: failures[k] for k in order if k in failures}  # type: ignore[attr-defined]
        first.results = {k: results[k] for k in order if k in results}  # type: ignore[attr-defined]
        raise first
    return {k: results[k] for k in order if k in results}


def _text(value: Any) -> str | None:
    """A config value as the wire's string (True -> "true", lists comma-joined)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _source(n: int) -> ConfigSource:
    try:
        return ConfigSource(n)
    except ValueError:
        return ConfigSource.UNKNOWN


def _resource(resource: Any) -> tuple[int, str]:
    rtype, name = resource
    if isinstance(rtype, str):
        try:
            rtype = _RESOURCE_TYPES[rtype.lower()]
        except KeyError:
            raise ValueError(f"unknown config resource type {rtype!r}; use one of {', '.join(_RESOURCE_TYPES)}") \
                from None
    return int(rtype), "" if name is None else str(name)


def _offsets_result(p) -> ListOffsetsResult:
    """One partition of a ListOffsets answer (v4+ carry the leader epoch)."""
    return ListOffsetsResult(int(p.offset), int(p.timestamp), int(getattr(p, "leader_epoch", -1)))


def _offset_spec(spec: Any) -> int:
    if isinstance(spec, str):
        try:
            return _OFFSET_SPECS[spec.lower()]
        except KeyError:
            raise ValueError(f"unknown offset spec {spec!r}; use a timestamp or one of {', '.join(_OFFSET_SPECS)}") \
                from None
    spec = int(spec)
    if spec < LATEST_TIERED:
        raise ValueError(f"offset spec {spec} is neither a timestamp nor one of -1..-5")
    return spec


def _tp(key: Any) -> TopicPartition:
    return key if isinstance(key, TopicPartition) else TopicPartition(*key)


def _description(t: Any) -> TopicDescription:
    """Topic ``t`` of a Metadata answer, its partitions in order."""
    parts = sorted((PartitionDescription(
        int(p.partition_index), int(p.leader_id) if p.leader_id >= 0 else None,
        int(getattr(p, "leader_epoch", -1)), tuple(map(int, p.replica_nodes)),
        tuple(map(int, p.isr_nodes)), tuple(map(int, getattr(p, "offline_replicas", ()))))
        for p in t.partitions), key=lambda p: p.partition)
    return TopicDescription(t.name, _uuid(getattr(t, "topic_id", None)), bool(t.is_internal), parts)


def _uuid(value: Any) -> uuid.UUID | None:
    return None if value is None or value == uuid.UUID(int=0) else value


# ---------------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------------


class Admin:
    """Asyncio admin client. Settings are Kafka's admin settings, as a mapping with dotted names
    and/or keyword arguments with underscores (``bootstrap_servers="host:9092"``); they are checked
    here, so a bad value raises InvalidConfigError before any I/O.

    Use ``async with Admin(...) as admin`` or ``await admin.start()`` / ``await admin.close()``
    (an operation on an admin not started yet starts it)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        props = dict(config or {})
        props.update({k.replace("_", "."): v for k, v in kwargs.items()})
        self.config = validate_client_config("admin", props)
        self._client = KafkaClient(self.config, "admin")
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._client.closed:
            raise IllegalStateError("the admin client is closed")
        if not self._started:
            self._client.start()
            self._started = True

    async def close(self) -> None:
        await self._client.close()

    @property
    def closed(self) -> bool:
        return self._client.closed

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing --------------------------------------------------------------------------------------

    async def _call(self, what: str, timeout_ms: int | None, attempt: Callable[[float], Awaitable[Any]]) -> Any:
        """Run ``attempt(deadline)`` until it returns, retrying retriable errors within the timeout
        and at most ``retries`` times (then the last error itself is raised, as in Kafka)."""
        await self.start()
        timeout = self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        deadline = deadline_after(timeout)
        retries = self.config["retries"]
        tries = 0

        async def once() -> Any:
            nonlocal tries
            tries += 1
            try:
                return await attempt(deadline)
            except errors.KafkaError as exc:
                if exc.retriable and tries > retries:
                    raise _Exhausted(exc) from exc
                raise

        try:
            return await retry_until(once, deadline, self.config, what, self._client)
        except _Exhausted as e:
            raise e.error from None

    def _request_timeout(self, deadline: float) -> int:
        remaining = int((deadline - time.monotonic()) * 1000)
        if remaining <= 0:
            raise KafkaTimeoutError("the operation's timeout expired")
        return min(self.config["request.timeout.ms"], remaining)

    async def _send(self, node: Node, api: int, values: Mapping[str, Any], deadline: float, **kw: Any) -> Any:
        return await self._client.send(node, api, values, timeout_ms=self._request_timeout(deadline), **kw)

    async def _brokers_known(self, deadline: float) -> None:
        """Wait for the metadata that names the brokers while only bootstrap addresses are known. As in Kafka's
        AdminClient (its metadata manager is not ready on bootstrap addresses), no call goes to a bootstrap
        address: it could be a host the cluster no longer lists (with metadata.recovery.strategy=none, one
        another broker took over)."""
        if self._client.cluster.bootstrapped:
            await self._client.update_metadata(self._request_timeout(deadline))

    async def _send_any(self, api: int, values: Mapping[str, Any], deadline: float, **kw: Any) -> Any:
        await self._brokers_known(deadline)
        return await self._client.send_any(api, values, timeout_ms=self._request_timeout(deadline), **kw)

    async def _send_controller(self, api: int, values: Mapping[str, Any], deadline: float) -> Any:
        cluster = self._client.cluster
        node = self._client.node(cluster.controller_id) if cluster.controller_id >= 0 else None
        if node is not None and self._client.is_usable(node):
            return await self._send(node, api, values, deadline)
        return await self._send_any(api, values, deadline)

    async def _broker_node(self, broker_id: int, deadline: float) -> Node:
        """The broker with this id, waiting for metadata that names it (Kafka waits till the timeout)."""
        node = self._client.node(broker_id)
        if node is None:
            await self._client.wait_for_update(self._request_timeout(deadline) / 1000)
            node = self._client.node(broker_id)
        if node is None:
            raise KafkaConnectionError(f"broker {broker_id} is not in the cluster metadata")
        return node

    async def _all_brokers(self, deadline: float) -> list[Node]:
        await self._brokers_known(deadline)
        return sorted(self._client.cluster.brokers.values(), key=lambda n: n.node_id)

    async def _metadata(self, topics: Iterable[str] | None, deadline: float) -> Any:
        return await self._send_any(ApiKey.METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}, deadline)

    async def _leaders(self, pending: dict[TopicPartition, Any], failures: dict, deadline: float
                       ) -> tuple[dict[Node, list[TopicPartition]], errors.KafkaError | None]:
        """Group the pending partitions by leader from fresh metadata. Unknown topics and partitions
        fail (moved from ``pending`` to ``failures``); leaderless ones yield the error to retry with."""
        r = await self._metadata(sorted({tp.topic for tp in pending}), deadline)
        brokers = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port), b.rack) for b in r.brokers}
        topics = {t.name: t for t in r.topics}
        by_node: dict[Node, list[TopicPartition]] = {}
        retry: errors.KafkaError | None = None
        for tp in list(pending):
            t = topics.get(tp.topic)
            code = _UNKNOWN_TOPIC if t is None else t.error_code.value
            if code:
                exc = _error(code, None, f"Topic {tp.topic!r}")
                if code == _UNKNOWN_TOPIC or not exc.retriable:
                    failures[tp] = exc
                    del pending[tp]
                else:
                    retry = exc
                continue
            p = next((p for p in t.partitions if p.partition_index == tp.partition), None)
            if p is None:
                failures[tp] = errors.UnknownTopicOrPartitionError(
                    f"Partition {tp.partition} of topic {tp.topic!r} does not exist")
                del pending[tp]
            elif int(p.leader_id) not in brokers:
                retry = _LeaderNotAvailableError(f"No leader for partition {tp.topic}-{tp.partition}")
            else:
                by_node.setdefault(brokers[int(p.leader_id)], []).append(tp)
        return by_node, retry

    @staticmethod
    def _by_topic(tps: Iterable[TopicPartition], partition: Callable[[TopicPartition], dict]) -> list[dict]:
        topics: dict[str, list[dict]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(partition(tp))
        return [{"name": t, "partitions": ps} for t, ps in topics.items()]

    # -- topics ------------------------------------------------------------------------------------------

    async def create_topics(self, new_topics: Iterable[NewTopic | str], *, validate_only: bool = False,
                            ignore_existing: bool = False, timeout_ms: int | None = None
                            ) -> dict[str, CreateTopicResult | None]:
        """Create topics; returns {name: CreateTopicResult} (None for an existing topic when
        ``ignore_existing``). Raises TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError, InvalidConfigError, ... with the broker's message."""
        topics: dict[str, NewTopic] = {}
        for t in new_topics:
            t = NewTopic(t) if isinstance(t, str) else t
            topics.setdefault(t.name, t)  # Kafka's admin keeps the first of duplicate names
        pending = dict(topics)
        results: dict[str, CreateTopicResult | None] = {}
        failures: dict[str, errors.KafkaError] = {}

        def creatable(t: NewTopic) -> dict:
            return {"name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                    "assignments": [{"partition_index": p, "broker_ids": list(b)}
                                    for p, b in (t.assignments or {}).items()],
                    "configs": [{"name": k, "value": _text(v)} for k, v in t.configs.items()]}

        async def attempt(deadline: float) -> None:
            r = await self._send_controller(ApiKey.CREATE_TOPICS, {
                "topics": [creatable(t) for t in pending.values()], "validate_only": validate_only,
                "timeout_ms": self._request_timeout(deadline)}, deadline)
            retry = None
            for res in r.topics:
                if res.name not in pending:
                    continue
                code = res.error_code.value
                if code == errors.NO_ERROR:
                    configs = {c.name: ConfigEntry(c.name, c.value, _source(c.config_source), c.read_only,
                                                   c.is_sensitive) for c in (getattr(res, "configs", None) or ())}
                    results[res.name] = CreateTopicResult(res.name, _uuid(getattr(res, "topic_id", None)),
                                                          res.num_partitions, res.replication_factor, configs)
                elif code == _TOPIC_EXISTS and ignore_existing:
                    results[res.name] = None
                else:
                    exc = _error(code, res.error_message, f"Topic {res.name!r}")
                    if code in _CONTROLLER_RETRY:
                        retry = exc
                        self._client.request_update()
                        continue
                    failures[res.name] = exc
                del pending[res.name]
            self._missing(pending, failures, retry, "topic")
            if retry is not None:
                raise retry

        await self._call("create_topics", timeout_ms, attempt)
        return _finish(topics, results, failures)

    @staticmethod
    def _missing(pending: dict, failures: dict, retry: Exception | None, what: str) -> None:
        """Items the broker did not answer (Kafka's sanity check) fail unless a retry is due anyway."""
        if retry is None:
            for key in list(pending):
                failures[key] = errors.UnknownServerError(f"The response did not contain a result for {what} {key}")
                del pending[key]

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics by name; UnknownTopicOrPartitionError for a topic that does not exist."""
        order = list(dict.fromkeys(names))
        pending = dict.fromkeys(order)
        results: dict[str, None] = {}
        failures: dict[str, errors.KafkaError] = {}

        async def attempt(deadline: float) -> None:
            r = await self._send_controller(ApiKey.DELETE_TOPICS, {
                "topic_names": list(pending), "timeout_ms": self._request_timeout(deadline)}, deadline)
            retry = None
            for res in r.responses:
                if res.name not in pending:
                    continue
                code = res.error_code.value
                if code == errors.NO_ERROR:
                    results[res.name] = None
                else:
                    exc = _error(code, getattr(res, "error_message", None), f"Topic {res.name!r}")
                    if code in _CONTROLLER_RETRY:
                        retry = exc
                        self._client.request_update()
                        continue
                    failures[res.name] = exc
                del pending[res.name]
            self._missing(pending, failures, retry, "topic")
            if retry is not None:
                raise retry

        await self._call("delete_topics", timeout_ms, attempt)
        _finish(order, results, failures)

    async def list_topics(self, internal: bool = False, *, timeout_ms: int | None = None
                          ) -> dict[str, TopicListing]:
        """Every topic, sorted by name: {name: TopicListing}; internal topics only if asked for."""
        async def attempt(deadline: float) -> Any:
            return await self._metadata(None, deadline)

        r = await self._call("list_topics", timeout_ms, attempt)
        listings = (TopicListing(t.name, _uuid(getattr(t, "topic_id", None)), bool(t.is_internal))
                    for t in r.topics if t.name is not None and t.error_code.value == 0)
        return {t.name: t for t in sorted(listings, key=lambda t: t.name) if internal or not t.internal}

    async def describe_all_topics(self, internal: bool = True, *, timeout_ms: int | None = None
                                  ) -> dict[str, TopicDescription]:
        """Every topic described from one Metadata request (what list_topics then describe_topics learn
        from two), sorted by name; a topic still being created (no leader yet) or failing is left out."""
        async def attempt(deadline: float) -> Any:
            return await self._metadata(None, deadline)

        r = await self._call("describe_all_topics", timeout_ms, attempt)
        out = {}
        for t in sorted((t for t in r.topics if t.name is not None and t.error_code.value == 0),
                        key=lambda t: t.name):
            if internal or not t.is_internal:
                out[t.name] = _description(t)
        return out

    async def describe_topics(self, names: Iterable[str], *, timeout_ms: int | None = None
                              ) -> dict[str, TopicDescription]:
        """{name: TopicDescription}; UnknownTopicOrPartitionError for a topic that does not exist."""
        order = list(dict.fromkeys(names))
        pending = dict.fromkeys(order)
        results: dict[str, TopicDescription] = {}
        failures: dict[str, errors.KafkaError] = {}

        async def attempt(deadline: float) -> None:
            r = await self._metadata(list(pending), deadline)
            found = {t.name: t for t in r.topics}
            retry = None
            for name in list(pending):
                t = found.get(name)
                code = _UNKNOWN_TOPIC if t is None else t.error_code.value
                if code == _LEADER_NOT_AVAILABLE:  # still being created: look again
                    retry = _error(code, None, f"Topic {name!r}")
                    continue
                if code == _UNKNOWN_TOPIC:
                    failures[name] = errors.UnknownTopicOrPartitionError(f"Topic {name} not found.")
                elif code:
                    failures[name] = _error(code, None, f"Topic {name!r}")
                else:
                    results[name] = _description(t)
                del pending[name]
            if retry is not None:
                raise retry

        await self._call("describe_topics", timeout_ms, attempt)
        return _finish(order, results, failures)

    async def create_partitions(self, new_partitions: Mapping[str, int | NewPartitions], *,
                                validate_only: bool = False, timeout_ms: int | None = None) -> None:
        """Grow topics to ``{topic: new total}`` (an int or NewPartitions with replica assignments)."""
        wanted = {t: (n if isinstance(n, NewPartitions) else NewPartitions(int(n))) for t, n in new_partitions.items()}
        pending = dict(wanted)
        results: dict[str, None] = {}
        failures: dict[str, errors.KafkaError] = {}

        async def attempt(deadline: float) -> None:
            r = await self._send_controller(ApiKey.CREATE_PARTITIONS, {
                "topics": [{"name": t, "count": n.total_count,
                            "assignments": None if n.assignments is None
                            else [{"broker_ids": list(b)} for b in n.assignments]} for t, n in pending.items()],
                "timeout_ms": self._request_timeout(deadline), "validate_only": validate_only}, deadline)
            retry = None
            for res in r.results:
                if res.name not in pending:
                    continue
                code = res.error_code.value
                if code == errors.NO_ERROR:
                    results[res.name] = None
                else:
                    exc = _error(code, res.error_message, f"Topic {res.name!r}")
                    if code in _CONTROLLER_RETRY:
                        retry = exc
                        self._client.request_update()
                        continue
                    failures[res.name] = exc
                del pending[res.name]
            self._missing(pending, failures, retry, "topic")
            if retry is not None:
                raise retry

        await self._call("create_partitions", timeout_ms, attempt)
        _finish(wanted, results, failures)

    # -- configs -------------------------------------------------------------------------------------

    async def describe_configs(self, resources: Iterable[Any], *, config_names: Iterable[str] | None = None,
                               include_synonyms: bool = False, include_documentation: bool = False,
                               timeout_ms: int | None = None) -> dict[Any, dict[str, ConfigEntry]]:
        """{resource: {name: ConfigEntry}} for resources like ("topic", "orders") or ("broker", 1);
        ``config_names`` limits the answer to those keys."""
        order = list(dict.fromkeys(resources))
        keys = {r: _resource(r) for r in order}
        wanted_names = None if config_names is None else list(config_names)
        results: dict[Any, dict[str, ConfigEntry]] = {}
        failures: dict[Any, errors.KafkaError] = {}

        def entry(c: Any) -> ConfigEntry:
            synonyms = tuple(ConfigSynonym(s.name, s.value, _source(s.source)) for s in getattr(c, "synonyms", ()))
            return ConfigEntry(c.name, c.value, _source(c.config_source), c.read_only, c.is_sensitive, synonyms,
                               _CONFIG_TYPE_NAMES.get(getattr(c, "config_type", 0), "unknown"),
                               getattr(c, "documentation", None))

        async def one_node(node_id: int | None, batch: list[Any], deadline: float) -> None:
            body = {"resources": [{"resource_type": keys[r][0], "resource_name": keys[r][1],
                                   "configuration_keys": wanted_names} for r in batch],
                    "include_synonyms": include_synonyms, "include_documentation": include_documentation}
            if node_id is None:
                r = await self._send_any(ApiKey.DESCRIBE_CONFIGS, body, deadline)
            else:
                r = await self._send(await self._broker_node(node_id, deadline), ApiKey.DESCRIBE_CONFIGS, body,
                                     deadline)
            answered = {(int(x.resource_type), x.resource_name): x for x in r.results}
            for res in batch:
                x = answered.get(keys[res])
                if x is None:
                    failures[res] = errors.UnknownServerError(f"The response did not contain a result for {res}")
                elif x.error_code.value:
                    failures[res] = _error(x.error_code.value, x.error_message,
                                           f"{_RESOURCE_NAMES.get(keys[res][0], keys[res][0])} {keys[res][1]!r}")
                else:
                    results[res] = {c.name: entry(c) for c in x.configs}

        await self._per_node("describe_configs", order, keys, timeout_ms, one_node, results, failures)
        return _finish(order, results, failures)

    async def _per_node(self, what: str, order: list[Any], keys: Mapping[Any, tuple[int, str]],
                        timeout_ms: int | None, one_node: Callable, results: dict, failures: dict,
                        controller: bool = False) -> None:
        """Config requests: a BROKER / BROKER_LOGGER resource naming a broker goes to that broker, the
        rest together elsewhere; each batch retried on its own (a dead broker fails only its own)."""
        batches: dict[int | None, list[Any]] = {}
        for r in order:
            rtype, name = keys[r]
            target = int(name) if rtype in (_BROKER, _BROKER_LOGGER) and name.isdigit() else None
            batches.setdefault(target, []).append(r)

        async def run(node_id: int | None, batch: list[Any]) -> None:
            try:
                await self._call(what, timeout_ms, lambda deadline: one_node(node_id, batch, deadline))
            except errors.KafkaError as exc:
                for r in batch:
                    if r not in results:
                        failures.setdefault(r, exc)

        await asyncio.gather(*(run(n, b) for n, b in batches.items()))

    async def alter_configs(self, configs: Mapping[Any, Mapping[str, Any]], *, validate_only: bool = False,
                            timeout_ms: int | None = None) -> None:
        """Legacy AlterConfigs: replace each resource's whole set of dynamic settings with the given
        {name: value} (settings left out go back to their defaults)."""
        await self._alter("alter_configs", ApiKey.ALTER_CONFIGS, {
            r: [{"name": k, "value": _text(v)} for k, v in values.items()] for r, values in configs.items()},
            validate_only, timeout_ms)

    async def incremental_alter_configs(self, changes: Mapping[Any, Iterable[Any]], *, validate_only: bool = False,
                                        timeout_ms: int | None = None) -> None:
        """{resource: [(name, op, value), ...]} with op "set", "delete", "append" or "subtract";
        ("name", "delete") may leave the value out."""
        body: dict[Any, list[dict]] = {}
        for r, ops in changes.items():
            out = []
            for item in ops:
                op = AlterConfigOp(*item)
                code = _CONFIG_OPS.get(op.op.lower()) if isinstance(op.op, str) else int(op.op)
                if code is None:
                    raise ValueError(f"unknown config operation {op.op!r}; use one of {', '.join(_CONFIG_OPS)}")
                out.append({"name": op.name, "config_operation": code, "value": _text(op.value)})
            body[r] = out
        await self._alter("incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, body, validate_only,
                          timeout_ms)

    async def _alter(self, what: str, api: int, configs: Mapping[Any, list[dict]], validate_only: bool,
                     timeout_ms: int | None) -> None:
        order = list(dict.fromkeys(configs))
        keys = {r: _resource(r) for r in order}
        results: dict[Any, None] = {}
        failures: dict[Any, errors.KafkaError] = {}

        async def one_node(node_id: int | None, batch: list[Any], deadline: float) -> None:
            todo = [r for r in batch if r not in results and r not in failures]
            body = {"resources": [{"resource_type": keys[r][0], "resource_name": keys[r][1], "configs": configs[r]}
                                  for r in todo], "validate_only": validate_only}
            if node_id is None:
                r = await self._send_controller(api, body, deadline)
            else:
                r = await self._send(await self._broker_node(node_id, deadline), api, body, deadline)
            answered = {(int(x.resource_type), x.resource_name): x for x in r.responses}
            retry = None
            for res in todo:
                x = answered.get(keys[res])
                if x is None:
                    failures[res] = errors.UnknownServerError(f"The response did not contain a result for {res}")
                elif x.error_code.value in _CONTROLLER_RETRY:
                    retry = _error(x.error_code.value, x.error_message, str(res))
                    self._client.request_update()
                elif x.error_code.value:
                    failures[res] = _error(x.error_code.value, x.error_message,
                                           f"{_RESOURCE_NAMES.get(keys[res][0], keys[res][0])} {keys[res][1]!r}")
                else:
                    results[res] = None
            if retry is not None:
                raise retry

        await self._per_node(what, order, keys, timeout_ms, one_node, results, failures)
        _finish(order, results, failures)

    # -- offsets and records ------------------------------------------------------------------------------

    async def list_replica_offsets(self, broker_id: int, specs: Mapping[Any, int | str], *,
                                   timeout_ms: int | None = None) -> dict[TopicPartition, ListOffsetsResult]:
        """What one broker's replicas of these partitions hold, led there or not (ListOffsets as Kafka's
        debugging replica, id -2, one request, no retries): for tools that show offsets while a leader is away.
        A follower answers from its own log (its high watermark for "latest"); the partitions it does not
        host, and all of them when the broker cannot be reached, are left out."""
        await self.start()
        wanted = {_tp(tp): _offset_spec(s) for tp, s in specs.items()}
        deadline = deadline_after(self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms)
        body = self._list_offsets_body(wanted, list(wanted), replica_id=-2, isolation_level=0)
        try:
            node = await self._broker_node(broker_id, deadline)
            r = await self._send(node, ApiKey.LIST_OFFSETS, body, deadline)
        except errors.KafkaError as exc:  # connection failures and timeouts included
            if not exc.retriable:
                raise
            return {}
        return {TopicPartition(t.name, int(p.partition_index)): _offsets_result(p)
                for t in r.topics for p in t.partitions if p.error_code.value == errors.NO_ERROR}

    def _list_offsets_body(self, wanted: dict[TopicPartition, int], tps: list[TopicPartition], *, replica_id: int,
                           isolation_level: int) -> dict:
        return {"replica_id": replica_id, "isolation_level": isolation_level, "topics": self._by_topic(
            tps, lambda tp: {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": wanted[tp]})}

    async def list_offsets(self, specs: Mapping[Any, int | str], *, isolation_level: str | int = "read_uncommitted",
                           timeout_ms: int | None = None) -> dict[TopicPartition, ListOffsetsResult]:
        """{TopicPartition: spec} -> {TopicPartition: ListOffsetsResult(offset, timestamp, leader_epoch)}.
        A spec is a timestamp in ms (the first offset at or after it; offset -1 when none) or
        "earliest" (-2), "latest" (-1), "max_timestamp" (-3), "earliest_local" (-4) or
        "latest_tiered" (-5); the last three need ListOffsets v7, v8 and v9 on the leader
        (UnsupportedVersionError otherwise). ``isolation_level`` "read_committed" makes "latest"
        the last stable offset."""
        wanted = {_tp(tp): _offset_spec(s) for tp, s in specs.items()}
        if isinstance(isolation_level, str):
            try:
                iso = _ISOLATION[isolation_level.lower()]
            except KeyError:
                raise ValueError(f"isolation_level must be one of {', '.join(_ISOLATION)}") from None
        else:
            iso = int(isolation_level)
        pending = dict(wanted)
        results: dict[TopicPartition, ListOffsetsResult] = {}
        failures: dict[TopicPartition, errors.KafkaError] = {}

        async def one_request(node: Node, min_version: int, tps: list[TopicPartition], deadline: float
                              ) -> errors.KafkaError | None:
            body = self._list_offsets_body(wanted, tps, replica_id=-1, isolation_level=iso)
            try:
                r = await self._send(node, ApiKey.LIST_OFFSETS, body, deadline, min_version=min_version)
            except errors.KafkaError as exc:
                if exc.retriable:
                    return exc
                for tp in tps:  # e.g. UnsupportedVersionError: only the specs that need the version fail
                    failures[tp] = exc
                    pending.pop(tp, None)
                return None
            retry = None
            for t in r.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in pending:
                        continue
                    code = p.error_code.value
                    if code == errors.NO_ERROR:
                        results[tp] = _offsets_result(p)
                    else:
                        exc = _error(code, None, f"Partition {tp.topic}-{tp.partition}")
                        if exc.retriable:  # a leader move or a partition not there yet: ask the metadata again
                            retry = exc
                            continue
                        failures[tp] = exc
                    del pending[tp]
            return retry

        async def attempt(deadline: float) -> None:
            by_node, retry = await self._leaders(pending, failures, deadline)
            calls = []
            for node, tps in by_node.items():
                tiers: dict[int, list[TopicPartition]] = {}
                for tp in tps:
                    tiers.setdefault(_SPEC_MIN_VERSION.get(wanted[tp], CLIENT_VERSIONS[ApiKey.LIST_OFFSETS][0]),
                                     []).append(tp)
                calls += [one_request(node, v, group, deadline) for v, group in tiers.items()]
            for exc in await asyncio.gather(*calls):
                retry = exc or retry
            if pending:
                raise retry or _LeaderNotAvailableError("no leader for " + ", ".join(map(str, pending)))

        await self._call("list_offsets", timeout_ms, attempt)
        return _finish(wanted, results, failures)

    async def delete_records(self, before: Mapping[Any, int], *, timeout_ms: int | None = None
                             ) -> dict[TopicPartition, int]:
        """Delete the records before each offset ({TopicPartition: offset}, -1 for the high watermark);
        returns each partition's new low watermark (log start offset)."""
        wanted = {_tp(tp): int(o) for tp, o in before.items()}
        pending = dict(wanted)
        results: dict[TopicPartition, int] = {}
        failures: dict[TopicPartition, errors.KafkaError] = {}

        async def one_request(node: Node, tps: list[TopicPartition], deadline: float) -> errors.KafkaError | None:
            body = {"topics": self._by_topic(tps, lambda tp: {"partition_index": tp.partition, "offset": wanted[tp]}),
                    "timeout_ms": self._request_timeout(deadline)}
            try:
                r = await self._send(node, ApiKey.DELETE_RECORDS, body, deadline)
            except errors.KafkaError as exc:
                if exc.retriable:
                    return exc
                for tp in tps:
                    failures[tp] = exc
                    pending.pop(tp, None)
                return None
            retry = None
            for t in r.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in pending:
                        continue
                    code = p.error_code.value
                    if code == errors.NO_ERROR:
                        results[tp] = int(p.low_watermark)
                    else:
                        exc = _error(code, None, f"Partition {tp.topic}-{tp.partition}")
                        if exc.retriable:
                            retry = exc
                            continue
                        failures[tp] = exc
                    del pending[tp]
            return retry

        async def attempt(deadline: float) -> None:
            by_node, retry = await self._leaders(pending, failures, deadline)
            for exc in await asyncio.gather(*(one_request(n, tps, deadline) for n, tps in by_node.items())):
                retry = exc or retry
            if pending:
                raise retry or _LeaderNotAvailableError("no leader for " + ", ".join(map(str, pending)))

        await self._call("delete_records", timeout_ms, attempt)
        return _finish(wanted, results, failures)

    # -- leaders and reassignments ----------------------------------------------------------------------

    async def _controller_call(self, api: int, body: Mapping[str, Any], deadline: float, what: str) -> Any:
        """A request the controller answers, with its top-level error raised (NOT_CONTROLLER after a fresh
        metadata update, so the retry finds the new controller)."""
        r = await self._send_controller(api, body, deadline)
        code = getattr(r, "error_code", None)  # ElectLeaders v0 has none
        code = code.value if code is not None else errors.NO_ERROR
        if code:
            if code == _NOT_CONTROLLER:
                self._client.request_update()
            raise _error(code, getattr(r, "error_message", None) or None, what)
        return r

    async def elect_leaders(self, election_type: str | int, partitions: Iterable[Any] | None = None, *,
                            timeout_ms: int | None = None) -> dict[TopicPartition, errors.KafkaError | None]:
        """ElectLeaders, ``election_type`` "preferred" or "unclean" (Kafka's ElectionType, 0 or 1), for
        ``partitions`` (None: every partition). As Kafka's ``electLeaders``, answers {partition: None when a
        leader was elected, else its error} (ELECTION_NOT_NEEDED for one already led as asked); only a
        failure of the whole request is raised."""
        if isinstance(election_type, str):
            try:
                election = _ELECTION_TYPES[election_type.lower()]
            except KeyError:
                raise ValueError(f"unknown election type {election_type!r}; use preferred or unclean") from None
        else:
            election = int(election_type)
        order = None if partitions is None else list(dict.fromkeys(_tp(p) for p in partitions))
        if order == []:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in order or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        async def attempt(deadline: float) -> dict[TopicPartition, errors.KafkaError | None]:
            r = await self._controller_call(ApiKey.ELECT_LEADERS, {
                "election_type": election, "timeout": self._request_timeout(deadline),
                "topic_partitions": None if order is None else [{"topic": t, "partitions": ps}
                                                                for t, ps in by_topic.items()]},
                deadline, "ElectLeaders")
            out: dict[TopicPartition, errors.KafkaError | None] = {}
            for t in r.replica_election_results:
                for p in t.partition_result:
                    code = p.error_code.value
                    out[TopicPartition(t.topic, int(p.partition_id))] = None if code == errors.NO_ERROR else \
                        _error(code, p.error_message, f"Partition {t.topic}-{p.partition_id}")
            return out

        results = await self._call("elect_leaders", timeout_ms, attempt)
        if order is None:
            return dict(sorted(results.items()))
        return {tp: results.get(tp, errors.UnknownServerError(f"The response did not contain a result for {tp}"))
                for tp in order}

    async def alter_partition_reassignments(self, reassignments: Mapping[Any, Sequence[int] | None], *,
                                            timeout_ms: int | None = None) -> None:
        """AlterPartitionReassignments: move each partition ({TopicPartition: target replicas}) to its target
        replicas, or cancel its reassignment (None), as Kafka's ``alterPartitionReassignments``. Failed
        partitions raise as the other operations do (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION,
        NO_REASSIGNMENT_IN_PROGRESS, ... with the controller's message; ``errors`` has them all)."""
        wanted = {_tp(tp): None if r is None else [int(b) for b in r] for tp, r in reassignments.items()}
        pending = dict(wanted)
        results: dict[TopicPartition, None] = {}
        failures: dict[TopicPartition, errors.KafkaError] = {}

        async def attempt(deadline: float) -> None:
            r = await self._controller_call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
                "timeout": self._request_timeout(deadline),
                "topics": self._by_topic(pending, lambda tp: {"partition_index": tp.partition,
                                                              "replicas": wanted[tp]})},
                deadline, "AlterPartitionReassignments")
            for t in r.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in pending:
                        continue
                    code = p.error_code.value
                    if code == errors.NO_ERROR:
                        results[tp] = None
                    else:
                        failures[tp] = _error(code, p.error_message, f"Partition {tp.topic}-{tp.partition}")
                    del pending[tp]
            self._missing(pending, failures, None, "partition")

        if wanted:
            await self._call("alter_partition_reassignments", timeout_ms, attempt)
        _finish(wanted, results, failures)

    async def list_partition_reassignments(self, partitions: Iterable[Any] | None = None, *,
                                           timeout_ms: int | None = None
                                           ) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments: the partitions being moved among ``partitions`` (None: all of the
        cluster), sorted; a partition that is not moving (or does not exist) is left out, as in Kafka."""
        tps = None if partitions is None else list(dict.fromkeys(_tp(p) for p in partitions))
        if tps == []:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in tps or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        async def attempt(deadline: float) -> Any:
            return await self._controller_call(ApiKey.LIST_PARTITION_REASSIGNMENTS, {
                "timeout": self._request_timeout(deadline),
                "topics": None if tps is None else [{"name": t, "partition_indexes": ps}
                                                    for t, ps in by_topic.items()]},
                deadline, "ListPartitionReassignments")

        r = await self._call("list_partition_reassignments", timeout_ms, attempt)
        found = {TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
            tuple(map(int, p.replicas)), tuple(map(int, p.adding_replicas)), tuple(map(int, p.removing_replicas)))
            for t in r.topics for p in t.partitions}
        return dict(sorted(found.items()))

    # -- cluster ------------------------------------------------------------------------------------------

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller id and brokers (DescribeCluster; Metadata on brokers without it)."""
        async def attempt(deadline: float) -> ClusterDescription:
            try:
                r = await self._send_any(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False},
                                         deadline)
            except errors.UnsupportedVersionError:
                r = await self._metadata([], deadline)
                brokers = r.brokers
            else:
                if r.error_code.value:
                    raise _error(r.error_code.value, r.error_message, "DescribeCluster")
                brokers = r.brokers
            nodes = sorted((Node(int(getattr(b, "broker_id", getattr(b, "node_id", -1))), b.host, int(b.port), b.rack)
                            for b in brokers), key=lambda n: n.node_id)
            return ClusterDescription(r.cluster_id, int(r.controller_id), nodes)

        return await self._call("describe_cluster", timeout_ms, attempt)

    async def describe_log_dirs(self, brokers: Iterable[int] | None = None, *, timeout_ms: int | None = None
                                ) -> dict[int, dict[str, LogDirDescription]]:
        """{broker id: {log dir: LogDirDescription}} for ``brokers`` (every broker when None), each broker
        describing every partition it hosts, as Kafka's ``describeLogDirs``. A broker answering no log dir
        fails with the answer's error (CLUSTER_AUTHORIZATION_FAILED when it gives none, as Kafka's client)."""
        if brokers is None:
            brokers = [n.node_id for n in await self._call("describe_log_dirs", timeout_ms, self._all_brokers)]

        async def one(broker_id: int, deadline: float) -> dict[str, LogDirDescription]:
            r = await self._send(await self._broker_node(broker_id, deadline), ApiKey.DESCRIBE_LOG_DIRS,
                                 {"topics": None}, deadline)
            dirs = {}
            for d in r.results:
                replicas = {TopicPartition(t.name, int(p.partition_index)):
                            ReplicaInfo(int(p.partition_size), int(p.offset_lag), bool(p.is_future_key))
                            for t in d.topics for p in t.partitions}
                total, usable = int(getattr(d, "total_bytes", -1)), int(getattr(d, "usable_bytes", -1))
                dirs[d.log_dir] = LogDirDescription(
                    _error(d.error_code.value, None, f"Log dir {d.log_dir} of broker {broker_id}")
                    if d.error_code.value else None,
                    replicas, None if total < 0 else total, None if usable < 0 else usable)
            if not dirs:
                code = getattr(r, "error_code", None)  # v3+
                code = code.value if code is not None and code.value else errors.ClusterAuthorizationFailedError.code
                raise _error(code, None, f"DescribeLogDirs on broker {broker_id}")
            return dirs

        return await self._each("describe_log_dirs", brokers, timeout_ms, one)

    # -- consumer groups -------------------------------------------------------------------------------

    async def _coordinator(self, group_id: str, deadline: float) -> Node:
        r = await self._send_any(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0}, deadline)
        if r.error_code.value:
            raise _error(r.error_code.value, r.error_message, f"FindCoordinator for group {group_id!r}")
        return Node(int(r.node_id), r.host, int(r.port))

    async def _each(self, what: str, items: Iterable[Any], timeout_ms: int | None,
                    one: Callable[[Any, float], Awaitable[Any]]) -> dict[Any, Any]:
        """Run ``one(item, deadline)`` for every item (a group, a broker) concurrently, each with its own
        retries."""
        order = list(dict.fromkeys(items))
        outcomes = await asyncio.gather(*(self._call(f"{what} {g!r}", timeout_ms, lambda d, g=g: one(g, d))
                                          for g in order), return_exceptions=True)
        results, failures = {}, {}
        for g, out in zip(order, outcomes):
            if isinstance(out, errors.KafkaError):
                failures[g] = out
            elif isinstance(out, BaseException):
                raise out
            else:
                results[g] = out
        return _finish(order, results, failures)

    async def list_consumer_groups(self, states: Iterable[str] | None = None, *, timeout_ms: int | None = None
                                   ) -> list[GroupListing]:
        """Consumer groups (and simple groups that only commit offsets) known to any broker, sorted by
        id; ``states`` (e.g. ["Stable", "Empty"]) filters on brokers with ListGroups v4+."""
        states_filter = [] if states is None else list(states)

        async def attempt(deadline: float) -> list[GroupListing]:
            brokers = await self._all_brokers(deadline)
            answers = await asyncio.gather(*(self._send(b, ApiKey.LIST_GROUPS, {"states_filter": states_filter},
                                                        deadline) for b in brokers))
            found: dict[str, GroupListing] = {}
            for b, r in zip(brokers, answers):
                if r.error_code.value:
                    raise _error(r.error_code.value, None, f"ListGroups on broker {b.node_id}")
                for g in r.groups:
                    if g.protocol_type in ("consumer", ""):
                        found[g.group_id] = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", ""),
                                                         getattr(g, "group_type", "") or "")
            return [found[k] for k in sorted(found)]

        return await self._call("list_consumer_groups", timeout_ms, attempt)

    async def describe_consumer_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                                       ) -> dict[str, ConsumerGroupDescription]:
        """{group: ConsumerGroupDescription} with members and their assigned partitions. A group that
        does not exist is described as state "Dead" with no members, as Kafka's classic groups are."""
        from tierlog.client.consumer_protocol import decode_assignment

        def assignment(protocol_type: str, data: bytes) -> list[TopicPartition]:
            if protocol_type != "consumer" or not data:
                return []
            try:
                return decode_assignment(data).topic_partitions()
            except ValueError:  # not a ConsumerProtocolAssignment after all
                return []

        async def one(group: str, deadline: float) -> ConsumerGroupDescription:
            node = await self._coordinator(group, deadline)
            r = await self._send(node, ApiKey.DESCRIBE_GROUPS, {"groups": [group],
                                                                "include_authorized_operations": False}, deadline)
            g = next((g for g in r.groups if g.group_id == group), None)
            if g is None:
                raise errors.UnknownServerError(f"The response did not contain a result for group {group!r}")
            if g.error_code.value == errors.GroupIdNotFoundError.code:
                # DescribeGroups v6 (KIP-1043) answers an unknown group, or one of the consumer protocol, so
                # where older versions said Dead: as Kafka's admin, the group is a consumer group or unknown
                found = await consumer_group(group, node, deadline)
                if found is not None:
                    return found
            if g.error_code.value:
                raise _error(g.error_code.value, getattr(g, "error_message", None), f"Group {group!r}")
            members = [MemberDescription(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                                         m.client_host, assignment(g.protocol_type, m.member_assignment))
                       for m in g.members]
            if g.group_state == "Dead" and not members:  # maybe a consumer-protocol group: DescribeGroups
                found = await consumer_group(group, node, deadline)  # answers those Dead (Kafka 4.4)
                if found is not None:
                    return found
            return ConsumerGroupDescription(group, g.group_state, g.protocol_type, g.protocol_data, members, node)

        async def consumer_group(group: str, node: Node, deadline: float) -> ConsumerGroupDescription | None:
            """The group as ConsumerGroupDescribe (KIP-848) describes it; None when it is no consumer group
            or the broker does not know the API."""
            try:
                r = await self._send(node, ApiKey.CONSUMER_GROUP_DESCRIBE, {
                    "group_ids": [group], "include_authorized_operations": False}, deadline)
            except errors.UnsupportedVersionError:
                return None
            g = next((g for g in r.groups if g.group_id == group), None)
            # UNSUPPORTED_VERSION for the group: a broker without the consumer protocol (Kafka 3.9 in
            # ZooKeeper mode) lists the API but refuses it; as Kafka's admin, the classic answer stands
            if g is None or g.error_code.value in (errors.GroupIdNotFoundError.code,
                                                   errors.UnsupportedVersionError.code):
                return None
            if g.error_code.value:
                raise _error(g.error_code.value, g.error_message, f"Group {group!r}")
            members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                         [TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                                          for p in t.partitions], m.member_epoch)
                       for m in g.members]
            return ConsumerGroupDescription(group, g.group_state, "consumer", g.assignor_name, members, node,
                                            "consumer", g.group_epoch, g.assignment_epoch)

        return await self._each("describe_consumer_groups", group_ids, timeout_ms, one)

    async def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[Any] | None = None, *,
                                          require_stable: bool = False, timeout_ms: int | None = None
                                          ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets: every partition it committed, or just ``partitions``
        (None for one without a committed offset)."""
        tps = None if partitions is None else [_tp(tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, OffsetAndMetadata | None]:
            node = await self._coordinator(group_id, deadline)
            topics = None
            if tps is not None:
                topics = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
            # by name (v9 at most): the group may have committed topics this admin has no metadata of
            version = await self._client.version(node, ApiKey.OFFSET_FETCH, OFFSET_FETCH_LAST_VERSION_WITH_NAMES)
            r = await self._send(node, ApiKey.OFFSET_FETCH, offset_fetch_values(
                version, group_id, topics, {}, require_stable), deadline, max_version=version)
            code, answered = offset_fetch_answer(r, version, {})
            if code:
                raise _error(code, None, f"OffsetFetch for group {group_id!r}")
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for name, parts in answered:
                for p in parts:
                    tp = TopicPartition(name, int(p.partition_index))
                    pcode = p.error_code.value
                    if pcode:
                        exc = _error(pcode, None, f"OffsetFetch of {tp.topic}-{tp.partition} for group {group_id!r}")
                        if exc.retriable:  # UNSTABLE_OFFSET_COMMIT: a transaction is still open
                            raise exc
                        log.warning("Skipping the offset of %s: %s", tp, exc)
                        continue
                    off = int(p.committed_offset)
                    out[tp] = None if off < 0 else OffsetAndMetadata(
                        off, p.metadata or "", int(getattr(p, "committed_leader_epoch", -1)))
            return out

        return await self._call("list_consumer_group_offsets", timeout_ms, attempt)

    async def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[Any, int | OffsetAndMetadata], *,
                                           timeout_ms: int | None = None) -> None:
        """Set the committed offsets of a group that has no members ({TopicPartition: offset}), as Kafka's
        ``alterConsumerGroupOffsets``: an OffsetCommit with generation -1 to the group's coordinator (a
        group that does not exist yet is created empty). A group with members refuses it
        (UNKNOWN_MEMBER_ID); a partition's error is raised as in the other operations."""
        wanted = {_tp(tp): (v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v)))
                  for tp, v in offsets.items()}
        for tp, om in wanted.items():
            if om.offset < 0:
                raise ValueError(f"Invalid offset {om.offset} for partition {tp}")
        pending = dict(wanted)
        results: dict[TopicPartition, None] = {}
        failures: dict[TopicPartition, errors.KafkaError] = {}

        async def attempt(deadline: float) -> None:
            node = await self._coordinator(group_id, deadline)
            r = await self._send(node, ApiKey.OFFSET_COMMIT, {
                "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None,
                "topics": self._by_topic(pending, lambda tp: {
                    "partition_index": tp.partition, "committed_offset": wanted[tp].offset,
                    "committed_leader_epoch": wanted[tp].leader_epoch,
                    "committed_metadata": wanted[tp].metadata or ""})}, deadline,
                max_version=OFFSET_COMMIT_LAST_VERSION_WITH_NAMES)  # by name, as the OffsetFetch above
            retry = None
            for t in r.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in pending:
                        continue
                    code = p.error_code.value
                    if code == errors.NO_ERROR:
                        results[tp] = None
                    else:
                        exc = _error(code, None, f"OffsetCommit of {tp.topic}-{tp.partition} for group {group_id!r}")
                        if exc.retriable:  # the coordinator moved or is loading: find it again
                            retry = exc
                            continue
                        failures[tp] = exc
                    del pending[tp]
            self._missing(pending, failures, retry, "partition")
            if retry is not None:
                raise retry

        await self._call("alter_consumer_group_offsets", timeout_ms, attempt)
        _finish(wanted, results, failures)

    async def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete groups with no members (and their offsets). NonEmptyGroupError for a group with
        members, GroupIdNotFoundError for one that does not exist."""
        async def one(group: str, deadline: float) -> None:
            node = await self._coordinator(group, deadline)
            r = await self._send(node, ApiKey.DELETE_GROUPS, {"groups_names": [group]}, deadline)
            res = next((x for x in r.results if x.group_id == group), None)
            if res is None:
                raise errors.UnknownServerError(f"The response did not contain a result for group {group!r}")
            if res.error_code.value:
                raise _error(res.error_code.value, None, f"Group {group!r}")

        await self._each("delete_consumer_groups", group_ids, timeout_ms, one)
