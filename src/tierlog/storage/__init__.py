"""Local log storage in Apache Kafka's on-disk format (segments, indexes, checkpoints, recovery)."""

from tierlog.storage.failure import LogDirFailureChannel
from tierlog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    Log,
    LogAppendInfo,
    OffsetMovedToTieredStorageError,
    TimestampAndOffset,
)
from tierlog.storage.log_config import LogConfig
from tierlog.storage.manager import LogManager
from tierlog.storage.segment import FileRegion, LogSegment

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP", "EARLIEST_PENDING_UPLOAD_TIMESTAMP", "EARLIEST_TIMESTAMP", "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP", "FetchDataInfo", "FileRegion", "Log", "LogAppendInfo", "LogConfig", "LogDirFailureChannel",
    "LogManager",
    "LogSegment", "OffsetMovedToTieredStorageError", "TimestampAndOffset",
]
