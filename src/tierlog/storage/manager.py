"""The log manager: every partition log in every log dir, checkpoints and housekeeping.

Start-up takes a lock on each log dir, notes whether the last stop was clean (the
``.kafka_cleanshutdown`` marker), removes the marker, and opens every ``<topic>-<partition>``
folder. A clean stop skips validation; an unclean one validates everything after each partition's
recovery point. Shutdown flushes, snapshots producer state, writes the checkpoints and writes the
marker last.

Housekeeping (retention, time-based flush, checkpoints, delayed file deletes) is a plain method the
broker calls on a timer, so it is easy to drive from tests.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable

from tierlog.errors import KafkaStorageError
from tierlog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CleanShutdownFile,
    OffsetCheckpointFile,
)
from tierlog.storage.log import Log, parse_partition_dir
from tierlog.storage.log_config import LogConfig

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class LogManager:
    def __init__(self, log_dirs: list[str], config_for: Callable[[str], LogConfig] | None = None, *,
                 retention_check_interval_ms: int = 300000, checkpoint_interval_ms: int = 60000,
                 producer_id_expiration_ms: int = 86400000):
        if not log_dirs:
            raise KafkaStorageError("no log dirs configured (log.dirs)")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._config_for = config_for or (lambda topic: LogConfig())
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self._locks: list[int] = []
        self.had_clean_shutdown: dict[str, bool] = {}
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        self.started = False

    # ------------------------------------------------------------------ start and stop

    def startup(self) -> None:
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            self._lock(d)
        for d in self.log_dirs:
            marker = CleanShutdownFile(d)
            clean = marker.exists()
            self.had_clean_shutdown[d] = clean
            recovery = _read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
            if recovery is None:
                clean = False  # without recovery points, validate every segment
                recovery = {}
            starts = _read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT) or {}
            hws = _read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT) or {}
            t0 = time.monotonic()
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith("-delete"):
                    _remove_tree(path)
                    continue
                tp = parse_partition_dir(name)
                if tp is None:
                    continue
                if tp in self.logs:
                    raise KafkaStorageError(f"duplicate log folders for {name}: {self._dir_of[tp]} and {d}")
                lg = Log.open(path, tp[0], tp[1], self._config_for(tp[0]), recovery_point=recovery.get(tp, 0),
                              log_start_offset=starts.get(tp, 0), clean_shutdown=clean)
                if tp in hws:
                    lg.update_high_watermark(hws[tp])
                self.logs[tp] = lg
                self._dir_of[tp] = d
            # Removed only after every log loaded: a crash during recovery recovers again.
            marker.delete()
            log.info("Loaded %d logs from %s in %.0f ms (%s shutdown)", sum(1 for v in self._dir_of.values()
                                                                             if v == d),
                     d, (time.monotonic() - t0) * 1000, "clean" if clean else "unclean")
        self.started = True

    def shutdown(self) -> None:
        """Clean shutdown: flush and close every log, write checkpoints, then the marker."""
        for lg in self.logs.values():
            lg.close()
        self.checkpoint(fsync=True)
        for d in self.log_dirs:
            CleanShutdownFile(d).write()
        for fd in self._locks:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._locks.clear()
        self.started = False

    def _lock(self, log_dir: str) -> None:
        fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise KafkaStorageError(f"log dir {log_dir} is in use by another process (lock on "
                                    f"{os.path.join(log_dir, LOCK_FILE)})") from e
        self._locks.append(fd)

    # ------------------------------------------------------------------ logs

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None) -> Log:
        tp = (topic, partition)
        lg = self.logs.get(tp)
        if lg is not None:
            return lg
        d = self._least_loaded_dir()
        lg = Log.open(os.path.join(d, f"{topic}-{partition}"), topic, partition,
                      config or self._config_for(topic), topic_id=topic_id)
        self.logs[tp] = lg
        self._dir_of[tp] = d
        return lg

    def _least_loaded_dir(self) -> str:
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        lg = self.logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        if lg is not None:
            lg.delete()

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), lg in self.logs.items():
            if t == topic:
                lg.config = config

    # ------------------------------------------------------------------ housekeeping

    def checkpoint(self, fsync: bool = True) -> None:
        for d in self.log_dirs:
            mine = {tp: lg for tp, lg in self.logs.items() if self._dir_of[tp] == d}
            OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).write(
                {tp: lg.recovery_point for tp, lg in mine.items()}, fsync)
            OffsetCheckpointFile(os.path.join(d, LOG_START_OFFSET_CHECKPOINT)).write(
                {tp: lg.log_start_offset for tp, lg in mine.items() if lg.log_start_offset > 0}, fsync)
            OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).write(
                {tp: lg.high_watermark for tp, lg in mine.items()}, fsync)

    def run_housekeeping(self, now_ms: int | None = None) -> None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for lg in self.logs.values():
            lg.flush_if_due(now)
            lg.delete_expired_files(now)
        if now - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now
            for lg in self.logs.values():
                lg.delete_old_segments(now)
                lg.producer_state.remove_expired(now, self.producer_id_expiration_ms)
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now
            self.checkpoint(fsync=False)


def _read_checkpoint(log_dir: str, name: str) -> dict | None:
    """A checkpoint's entries; None (with a warning naming the file) when it is unreadable."""
    path = os.path.join(log_dir, name)
    try:
        return OffsetCheckpointFile(path).read()
    except (KafkaStorageError, OSError, ValueError) as e:
        log.warning("Ignoring unreadable checkpoint %s (%s); falling back to what the segments say", path, e)
        return None


def _remove_tree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
