"""Group configs (KIP-848's GROUP config resource, type 32), the share group ones tierlog honours.

Kafka 4.4 keeps per-group overrides of some broker-wide ``group.*`` settings (its ``GroupConfig``); an unset one
falls back to its broker setting (DescribeConfigs shows it as DEFAULT_CONFIG with the broker key as synonym). The
names, defaults, ranges and error messages are Kafka 4.4's:

* ``share.auto.offset.reset`` - where a share-partition without state starts: ``latest`` (default),
  ``earliest`` or ``by_duration:<ISO-8601 duration>`` (the first record at or after now minus the duration);
* ``share.record.lock.duration.ms`` - the acquisition lock of a delivered record, in Kafka's default
  ``group.share.min.record.lock.duration.ms``..``group.share.max.record.lock.duration.ms`` range (15000-60000);
  unset: the broker's ``group.share.record.lock.duration.ms``;
* ``share.isolation.level`` - ``read_uncommitted`` (default) or ``read_committed``;
* ``errors.deadletterqueue.topic.name`` - KIP-1191's dead-letter queue topic of the share group ("" (default):
  none; a name starting with ``__`` is refused here, the broker's prefix rule is checked at each DLQ write);
* ``errors.deadletterqueue.copy.record.enable`` - whether a DLQ record carries the original key and value
  (default false: the context headers only).

Kafka's other group configs (``consumer.*``, ``streams.*``, the remaining ``share.*``) are refused with
INVALID_CONFIG naming them as not supported here.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.errors import InvalidConfigError

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
ISOLATION_LEVEL = "share.isolation.level"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"

#: Kafka 4.4's defaults of group.share.min/max.record.lock.duration.ms, the range a group's value must be in.
MIN_RECORD_LOCK_DURATION_MS, MAX_RECORD_LOCK_DURATION_MS = 15000, 60000

#: Kafka 4.4's GroupConfig names tierlog does not serve (refused, never stored).
KAFKA_ONLY = frozenset({
    "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "consumer.assignment.interval.ms",
    "consumer.assignor.offload.enable", "share.session.timeout.ms", "share.heartbeat.interval.ms",
    "share.delivery.count.limit", "share.partition.max.record.locks", "share.renew.acknowledge.enable",
    "share.assignment.interval.ms", "share.assignor.offload.enable", "streams.session.timeout.ms",
    "streams.heartbeat.interval.ms", "streams.num.standby.replicas", "streams.initial.rebalance.delay.ms",
    "streams.assignment.interval.ms", "streams.rack.aware.assignment.tags", "streams.assignor.offload.enable",
    "streams.task.offset.interval.ms", "streams.num.warmup.replicas", "streams.acceptable.recovery.lag",
    "streams.assignor.name"})


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: str  # Kafka's ConfigDef type name: "string", "int" or "boolean"
    #: the broker setting an unset value falls back to (its synonym in DescribeConfigs), or None
    broker_key: str | None
    default: str | None  # the default when there is no broker key


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef(AUTO_OFFSET_RESET, "string", None, "latest"),
    GroupConfigDef(RECORD_LOCK_DURATION_MS, "int", "group.share.record.lock.duration.ms", None),
    GroupConfigDef(ISOLATION_LEVEL, "string", None, "read_uncommitted"),
    GroupConfigDef(DLQ_TOPIC_NAME, "string", None, ""),
    GroupConfigDef(DLQ_COPY_RECORD_ENABLE, "boolean", None, "false"),
)}

_ISO_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration(text: str) -> datetime.timedelta | None:
    """Java's ``Duration.parse`` for the non-negative forms Kafka accepts (PnDTnHnMn.nS); None when invalid."""
    m = _ISO_DURATION.match(text.upper())
    if m is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        return None
    days, hours, minutes, seconds = m.groups()
    return datetime.timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                              seconds=float(seconds or 0))


def _check(name: str, value: str) -> None:
    if name == AUTO_OFFSET_RESET:
        if value in ("earliest", "latest"):
            return
        if value.startswith("by_duration:") and parse_duration(value[len("by_duration:"):].strip()) is not None:
            return
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Invalid value `{value}` for configuration {name}. "
            "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    if name == ISOLATION_LEVEL:
        if value not in ("read_committed", "read_uncommitted"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                                     "read_committed, read_uncommitted")
        return
    if name == DLQ_TOPIC_NAME:
        if value.startswith("__"):  # Kafka's GroupConfig.validate: internal topics never take DLQ records
            raise InvalidConfigError(f"{name}: DLQ topic name must not start with '__'")
        return
    if name == DLQ_COPY_RECORD_ENABLE:
        if value.strip().lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Expected value to be "
                                     "either true or false")
        return
    if name == RECORD_LOCK_DURATION_MS:
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT"
                                     ) from None
        if not MIN_RECORD_LOCK_DURATION_MS <= number <= MAX_RECORD_LOCK_DURATION_MS:
            raise InvalidConfigError(f"{name} must be in the range {MIN_RECORD_LOCK_DURATION_MS} to "
                                     f"{MAX_RECORD_LOCK_DURATION_MS} inclusive.")


def validate_group_configs(configs: Mapping[str, str]) -> None:
    """INVALID_CONFIG (Kafka's messages) unless every key is a group config tierlog serves with a valid value."""
    for name, value in configs.items():
        if name not in GROUP_CONFIGS:
            if name in KAFKA_ONLY:
                raise InvalidConfigError(f"Group config {name} is not supported by tierlog.")
            raise InvalidConfigError(f"Unknown group config name: {name}")
        _check(name, value)


def group_config_value(overrides: Mapping[str, str] | None, name: str, broker_config=None) -> str:
    """The effective value of a group config: the group's override, else its broker setting, else its default."""
    if overrides and name in overrides:
        return overrides[name]
    d = GROUP_CONFIGS[name]
    if d.broker_key is not None and broker_config is not None:
        return str(broker_config[d.broker_key])
    return d.default or ""
