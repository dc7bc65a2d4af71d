"""The per-partition settings the log needs, resolved from a topic's configuration.

The config table (``tierlog.config``) resolves broker defaults and topic overrides; this module
only turns the resolved topic-level values into a typed object the storage engine reads on its
hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tierlog.records.compression import CompressionType

INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False  # in effect: broker switch, topic switch, not compacted/internal
    remote_log_copy_disable: bool = False
    remote_copy_lag_ms: int = 0
    remote_copy_lag_bytes: int = -1  # Kafka 4.4: local.retention.bytes
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    file_delete_delay_ms: int = 60000
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = 3600000
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    min_insync_replicas: int = 1
    # The log cleaner (cleanup.policy=compact)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5

    @classmethod
    def from_topic_config(cls, values: Mapping[str, Any]) -> LogConfig:
        """Build from resolved topic-level values keyed by Kafka's topic config names."""
        kwargs = {}
        for f in fields(cls):
            key = f.name.replace("_", ".")
            if key in values and values[key] is not None:
                v = values[key]
                if f.name == "cleanup_policy":
                    v = tuple(v) if not isinstance(v, str) else tuple(p.strip() for p in v.split(",") if p.strip())
                kwargs[f.name] = v
        if values.get("internal.segment.bytes") is not None:  # a test-only roll size below the minimum
            kwargs["segment_bytes"] = values["internal.segment.bytes"]
        return cls(**kwargs)

    @property
    def recompression(self) -> tuple[CompressionType, int | None] | None:
        """The codec and level batches are stored in, or None to keep the producer's."""
        if self.compression_type == "producer":
            return None
        codec = CompressionType.NONE if self.compression_type == "uncompressed" else \
            CompressionType.from_name(self.compression_type)
        level = {CompressionType.GZIP: self.compression_gzip_level, CompressionType.LZ4: self.compression_lz4_level,
                 CompressionType.ZSTD: self.compression_zstd_level}.get(codec)
        return codec, level

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """Age at which the active segment rolls: a compacted log also rolls by max.compaction.lag.ms, so
        that records never wait in the active segment, which the cleaner does not touch, longer than that."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def effective_local_retention_ms(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes
