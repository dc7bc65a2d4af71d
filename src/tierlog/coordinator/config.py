"""The group coordinator's settings (Kafka's ``GroupCoordinatorConfig``: classic groups, KIP-848 consumer groups)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["INT32_MAX", "CoordinatorConfig"]

INT32_MAX = 2**31 - 1

_ASSIGNOR_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                   "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = INT32_MAX
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # KIP-848 consumer groups
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_max_size: int = INT32_MAX
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_assignment_interval_ms: int = 1000
    consumer_migration_policy: str = "bidirectional"
    #: the broker's current settings, for those a dynamic change applies to at once (Kafka 4.4 updates
    #: group.consumer.assignment.interval.ms dynamically); None keeps the values above
    live: Callable[[], Mapping[str, Any]] | None = None

    def assignment_interval_ms(self) -> int:
        """group.consumer.assignment.interval.ms as it is now (a dynamic broker setting, as in Kafka 4.4)."""
        if self.live is not None:
            try:
                return int(self.live()["group.consumer.assignment.interval.ms"])
            except KeyError:
                pass
        return self.consumer_assignment_interval_ms

    @classmethod
    def from_broker_config(cls, cfg, live: Callable[[], Mapping[str, Any]] | None = None) -> CoordinatorConfig:
        def get_list(key: str, default):
            try:
                return cfg[key]
            except KeyError:
                return default

        def get(key: str, default: int) -> int:
            try:
                return int(cfg[key])
            except KeyError:
                return default

        return cls(
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", 3000),
            min_session_timeout_ms=get("group.min.session.timeout.ms", 6000),
            max_session_timeout_ms=get("group.max.session.timeout.ms", 1_800_000),
            max_group_size=get("group.max.size", INT32_MAX),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", 4096),
            offsets_retention_ms=get("offsets.retention.minutes", 10080) * 60 * 1000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms", 600_000),
            rebalance_protocols=tuple(get_list("group.coordinator.rebalance.protocols", ["classic", "consumer"])),
            consumer_heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms", 5000),
            consumer_session_timeout_ms=get("group.consumer.session.timeout.ms", 45000),
            consumer_max_size=get("group.consumer.max.size", INT32_MAX),
            consumer_assignment_interval_ms=get("group.consumer.assignment.interval.ms", 1000),
            consumer_assignors=tuple(dict.fromkeys(_ASSIGNOR_NAMES.get(a, a) for a in get_list(
                "group.consumer.assignors", ["uniform", "range"]))),
            consumer_migration_policy=str(get_list("group.consumer.migration.policy", "bidirectional")).lower(),
            live=live,
        )

    def consumer_protocol_enabled(self) -> bool:
        """Whether consumer groups (KIP-848) are served: ``group.coordinator.rebalance.protocols`` names
        'consumer' (the handlers also need the finalized ``group.version`` >= 1: server/apis/consumer_groups.py)."""
        return "consumer" in self.rebalance_protocols
