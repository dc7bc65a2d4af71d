"""The group coordinator's settings (Kafka's ``GroupCoordinatorConfig``, classic-group part)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INT32_MAX", "CoordinatorConfig"]

INT32_MAX = 2**31 - 1


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

    @classmethod
    def from_broker_config(cls, cfg) -> CoordinatorConfig:
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
        )
