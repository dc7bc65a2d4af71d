"""The options of the ``tierlog`` data source: Spark's Kafka source options, plus tierlog's own.

Spark's (same names, same meaning): ``subscribe`` / ``assign`` / ``subscribePattern``,
``kafka.bootstrap.servers`` and any other ``kafka.*`` client setting, ``startingOffsets`` /
``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` with -2 earliest
and -1 latest), ``startingTimestamp`` / ``endingTimestamp`` and ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``,
``includeHeaders``; for the sink ``topic``.

tierlog's:

- ``tierlog.readMode``: ``direct`` (the default when the remote store is given): remote segments are
  read straight from the remote store by the executors, only the local tail through the broker;
  ``broker``: everything through the broker, as Spark's Kafka source does;
- ``tierlog.remote.storage.manager``: ``filesystem`` or ``objectstore``, as the broker's
  ``remote.log.storage.manager.class.name``; ``tierlog.rsm.<key>``: its settings, as the broker's
  ``rsm.config.<key>`` (``tierlog.rsm.dir`` for the filesystem store; ``tierlog.rsm.url`` and the
  credentials for object storage);
- ``tierlog.metadataTopicPartitions``: partitions of ``__remote_log_metadata`` (read from the broker
  when not given);
- ``tierlog.deliveryGuarantee`` (sink): ``exactly_once`` (the default, :mod:`tierlog.spark.sink`) or
  ``at_least_once`` (as Spark's Kafka sink); ``tierlog.transactionalIdPrefix`` (sink): the prefix of
  the transactional ids and the batch marker group (default from the streaming query's id);
- ``tierlog.bootstrapTimeoutMs``: how long the driver waits for a first answer from
  ``kafka.bootstrap.servers`` before the query fails saying the broker is unreachable (default 15000);
- ``tierlog.view``, ``tierlog.asOfOffsets``, ``tierlog.asOfTimestamp``: a compacted topic read as a table,
  checked and read by :mod:`tierlog.spark.table`;
- ``tierlog.filterPushdown`` and ``tierlog.debug.readLog``: read by :mod:`tierlog.spark.pushdown`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

EARLIEST = -2
LATEST = -1

# The rows' columns, Spark's Kafka source's (``tierlog.spark.read`` makes them as Arrow).
SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")
SPARK_SCHEMA_HEADERS = SPARK_SCHEMA + ", headers array<struct<key: string, value: binary>>"


class SourceOptionError(ValueError):
    """An option a query cannot run with (said in one line, as Spark's Kafka source does)."""


class RemoteStoreConfigError(SourceOptionError):
    """The remote store the options name does not hold what the metadata lists (a wrong folder, URL or key
    prefix): a configuration error, never data loss, whatever ``failOnDataLoss`` says."""


class BrokerUnreachableError(RuntimeError):
    """No broker of ``kafka.bootstrap.servers`` answered within ``tierlog.bootstrapTimeoutMs``."""


DEFAULT_BOOTSTRAP_TIMEOUT_MS = 15_000


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise SourceOptionError(f"option {key} must be true or false, not {value!r}")
    return text == "true"


def _int(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    value = options.get(key)
    if value is None:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise SourceOptionError(f"option {key} must be a number, not {value!r}") from None


def _offsets_spec(options: Mapping[str, str], key: str, default: str) -> str | dict:
    value = options.get(key, default)
    text = str(value).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        spec = json.loads(text)
    except ValueError:
        raise SourceOptionError(f"option {key} must be earliest, latest or JSON like "
                                f'{{"topic": {{"0": 23}}}}, not {value!r}') from None
    if not isinstance(spec, dict) or not all(isinstance(v, dict) for v in spec.values()):
        raise SourceOptionError(f'option {key} must be JSON like {{"topic": {{"0": 23}}}}, not {value!r}')
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in spec.items()}


@dataclass
class SourceOptions:
    bootstrap_servers: str
    client_config: dict[str, str]
    subscribe: list[str] = field(default_factory=list)
    subscribe_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    starting: str | dict = "earliest"
    ending: str | dict = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict | None = None
    ending_by_timestamp: dict | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_mode: str = "broker"
    storage_manager: str | None = None
    storage_config: dict[str, str] = field(default_factory=dict)
    metadata_partitions: int | None = None
    bootstrap_timeout_ms: int = DEFAULT_BOOTSTRAP_TIMEOUT_MS
    topic: str | None = None  # sink
    delivery_guarantee: str = "exactly_once"  # sink: exactly_once (tierlog.spark.sink) or at_least_once
    transactional_id_prefix: str | None = None  # sink: tierlog.transactionalIdPrefix

    @property
    def direct(self) -> bool:
        return self.read_mode == "direct"

    @property
    def isolation_level(self) -> str:
        """``kafka.isolation.level``: read_uncommitted (the default) or read_committed."""
        return self.client_config.get("isolation.level", "read_uncommitted").lower()

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    def topics_matching(self, available: list[str]) -> list[str]:
        if self.assign is not None:
            return sorted(self.assign)
        if self.subscribe_pattern is not None:
            pattern = re.compile(self.subscribe_pattern)
            return sorted(t for t in available if pattern.fullmatch(t) and not t.startswith("__"))
        return sorted(self.subscribe)


def parse(options: Mapping[str, str], *, streaming: bool = False, sink: bool = False) -> SourceOptions:
    """Check and type the options of a query (``streaming`` changes the default starting offsets)."""
    opts = {str(k): str(v) for k, v in options.items()}
    lowered = {k.lower(): v for k, v in opts.items()}
    bootstrap = lowered.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise SourceOptionError("option kafka.bootstrap.servers is required")
    client = {k[len("kafka."):]: v for k, v in opts.items() if k.lower().startswith("kafka.")}
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in lowered]
    if not sink and len(chosen) != 1:
        raise SourceOptionError("exactly one of the options subscribe, subscribePattern or assign must be given"
                                + (f" (got {', '.join(chosen)})" if chosen else ""))
    assign = None
    if "assign" in lowered:
        try:
            raw = json.loads(lowered["assign"])
            assign = {str(t): sorted(int(p) for p in ps) for t, ps in raw.items()}
        except (ValueError, AttributeError, TypeError):
            raise SourceOptionError(f'option assign must be JSON like {{"topic": [0, 1]}}, not '
                                    f'{lowered["assign"]!r}') from None
    storage = {k[len("tierlog.rsm."):]: v for k, v in opts.items() if k.lower().startswith("tierlog.rsm.")}
    manager = lowered.get("tierlog.remote.storage.manager")
    if manager is None and storage:
        manager = "objectstore" if "url" in storage else "filesystem"
    mode = lowered.get("tierlog.readmode", "direct" if manager else "broker").lower()
    if mode not in ("direct", "broker"):
        raise SourceOptionError(f"option tierlog.readMode must be direct or broker, not {mode!r}")
    if mode == "direct" and not manager:
        raise SourceOptionError("tierlog.readMode=direct needs the remote store: tierlog.remote.storage.manager "
                                "and its tierlog.rsm.* settings (as the broker's rsm.config.*)")
    out = SourceOptions(
        bootstrap_servers=bootstrap, client_config=client,
        subscribe=[t.strip() for t in lowered.get("subscribe", "").split(",") if t.strip()],
        subscribe_pattern=lowered.get("subscribepattern"), assign=assign,
        starting=_offsets_spec(lowered, "startingoffsets", "latest" if streaming else "earliest"),
        ending=_offsets_spec(lowered, "endingoffsets", "latest"),
        starting_timestamp=_int(lowered, "startingtimestamp", None),
        ending_timestamp=_int(lowered, "endingtimestamp", None),
        max_offsets_per_trigger=_int(lowered, "maxoffsetspertrigger", None),
        min_partitions=_int(lowered, "minpartitions", None),
        fail_on_data_loss=_bool(lowered, "failondataloss", True),
        include_headers=_bool(lowered, "includeheaders", False),
        read_mode=mode, storage_manager=manager, storage_config=storage,
        metadata_partitions=_int(lowered, "tierlog.metadatatopicpartitions", None),
        bootstrap_timeout_ms=_int(lowered, "tierlog.bootstraptimeoutms", DEFAULT_BOOTSTRAP_TIMEOUT_MS),
        topic=lowered.get("topic"),
        delivery_guarantee=lowered.get("tierlog.deliveryguarantee", "exactly_once").strip().lower(),
        transactional_id_prefix=lowered.get("tierlog.transactionalidprefix"),
    )
    if out.delivery_guarantee not in ("exactly_once", "at_least_once"):
        raise SourceOptionError("option tierlog.deliveryGuarantee must be exactly_once or at_least_once, not "
                                f"{out.delivery_guarantee!r}")
    for key, attr in (("startingoffsetsbytimestamp", "starting_by_timestamp"),
                      ("endingoffsetsbytimestamp", "ending_by_timestamp")):
        if key in lowered:
            spec = _offsets_spec(lowered, key, "{}")
            if not isinstance(spec, dict):
                raise SourceOptionError(f"option {key} must be JSON of timestamps per partition")
            setattr(out, attr, spec)
    if streaming and "endingoffsets" in lowered:
        raise SourceOptionError("option endingOffsets is for batch queries only")
    if out.max_offsets_per_trigger is not None and out.max_offsets_per_trigger < 1:
        raise SourceOptionError("option maxOffsetsPerTrigger must be at least 1")
    if out.min_partitions is not None and out.min_partitions < 1:
        raise SourceOptionError("option minPartitions must be at least 1")
    if out.bootstrap_timeout_ms < 1:
        raise SourceOptionError("option tierlog.bootstrapTimeoutMs must be at least 1")
    return out


def resolve_config_path(value: str, config_file: str | None, setting: str) -> str:
    """An absolute path for a folder setting read from a broker configuration file (``rsm.config.dir``).

    A relative path is looked up beside the configuration file first, then in the current folder (where
    a broker started from here resolves it, as Kafka resolves relative paths against its working
    folder); the first that exists is used. When neither exists the path cannot be the broker's folder
    as seen from here: RemoteStoreConfigError names both places."""
    if os.path.isabs(value):
        return os.path.normpath(value)
    if not config_file:
        return os.path.abspath(value)
    beside = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(config_file)), value))
    here = os.path.abspath(value)
    for candidate in (beside, here):
        if os.path.isdir(candidate):
            return candidate
    where = (f"does not exist beside it ({beside})" if here == beside
             else f"exists neither beside it ({beside}) nor in the current folder ({here})")
    raise RemoteStoreConfigError(
        f"{setting}={value} in {config_file} is a relative path that {where}; give the remote store's "
        f"absolute path in the file, or --option tierlog.rsm.dir=PATH")
