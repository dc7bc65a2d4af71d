"""The log manager: every partition log in every log dir, checkpoints and housekeeping.

Start-up takes a lock on each log dir, notes whether the last stop was clean (the
``.kafka_cleanshutdown`` marker), removes the marker, and opens every ``<topic>-<partition>``
folder. A clean stop skips validation; an unclean one validates everything after each partition's
recovery point. Shutdown flushes, snapshots producer state, writes the checkpoints and writes the
marker last.

Storage faults follow Kafka's log-dir failure channel (:mod:`tierlog.storage.failure`): an I/O error
in a log dir (while loading it, appending, rolling, flushing, writing an index, a snapshot or a
checkpoint, reading, deleting) takes that dir offline. Its logs then refuse every read and write with
KAFKA_STORAGE_ERROR, nothing more is written there (no checkpoint, no clean-shutdown marker, so the
next start recovers it), and the other dirs keep serving. The broker keeps running even when no dir is
left online (Kafka halts then; see docs/compatibility.md). A dir that fails while loading keeps its
partitions as offline logs, so they are never created again in another dir.

Housekeeping (retention, time-based flush, checkpoints, delayed file deletes) is a plain method the
broker calls on a timer, so it is easy to drive from tests.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierlog.errors import KafkaError, KafkaStorageError, StartupError
from tierlog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CleanShutdownFile,
    OffsetCheckpointFile,
)
from tierlog.storage.cleaner import CleanerConfig, LogCleaner
from tierlog.storage.failure import LogDirFailureChannel
from tierlog.storage.log import Log, parse_partition_dir
from tierlog.storage.log_config import LogConfig

if TYPE_CHECKING:
    from tierlog.metrics import MetricsRegistry

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
# Kafka's kafka.log:type=LogManager gauges, named as Prometheus' JMX exporter spells them.
OFFLINE_LOG_DIRECTORY_COUNT = "kafka_log_logmanager_offlinelogdirectorycount"
LOG_DIRECTORY_OFFLINE = "kafka_log_logmanager_logdirectoryoffline"
# Kafka's DescribeLogDirsResponse constants: the lag of a log that is not online, a volume size not known.
INVALID_OFFSET_LAG = -1
UNKNOWN_VOLUME_BYTES = -1


@dataclass(frozen=True, slots=True, order=True)
class LogDirReplica:
    """One partition's log in a log dir, as DescribeLogDirs reports it (a DescribeLogDirsPartition)."""

    topic: str
    partition: int
    size: int  # bytes of its local segments
    offset_lag: int  # high watermark minus log end offset, never below 0; INVALID_OFFSET_LAG when offline
    is_future: bool = False  # a copy being moved in by AlterReplicaLogDirs (tierlog has none)


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir as DescribeLogDirs reports it: ``offline`` is why it is offline (then it lists no
    partitions and no space, as Kafka answers an offline dir), else None."""

    log_dir: str
    offline: str | None
    replicas: list[LogDirReplica] = field(default_factory=list)
    total_bytes: int = UNKNOWN_VOLUME_BYTES
    usable_bytes: int = UNKNOWN_VOLUME_BYTES


class LogManager:
    def __init__(self, log_dirs: list[str], config_for: Callable[[str], LogConfig] | None = None, *,
                 retention_check_interval_ms: int = 300000, checkpoint_interval_ms: int = 60000,
                 producer_id_expiration_ms: int = 86400000, failure_channel: LogDirFailureChannel | None = None,
                 metrics: MetricsRegistry | None = None, cleaner_config: CleanerConfig | None = None,
                 cleaner_config_source: Callable[[], CleanerConfig] | None = None,
                 cordoned_source: Callable[[], list[str]] | None = None):
        if not log_dirs:
            raise KafkaStorageError("no log dirs configured (log.dirs)")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._config_for = config_for or (lambda topic: LogConfig())
        self._cordoned_source = cordoned_source or (lambda: [])  # cordoned.log.dirs in effect (KIP-1066)
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.logs: dict[tuple[str, int], Log] = {}
        self._retired: dict[tuple[str, int], Log] = {}  # deleted, files not yet closed and renamed
        self._dir_of: dict[tuple[str, int], str] = {}
        self._locks: list[int] = []
        self.had_clean_shutdown: dict[str, bool] = {}
        self.unclean_at_shutdown: list[str] = []  # log dirs the last shutdown left for recovery
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        self.started = False
        # The channel every log of these dirs reports I/O errors to; this manager reacts first.
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self.failure_channel.add_listener(self.handle_log_dir_failure)
        self._unlisted_offline: set[str] = set()  # dirs that failed before their partitions were listed
        # The log cleaner (compacted topics); its threads start with start_cleaner(), on the event loop.
        self.cleaner = LogCleaner(cleaner_config or CleanerConfig(enable=False), lambda: self.logs,
                                  self._dir_of.get, self.log_dirs, metrics, cleaner_config_source)
        self._gauges = None
        if metrics is not None:
            self._gauges = (
                metrics.gauge(OFFLINE_LOG_DIRECTORY_COUNT, "Log dirs offline after an I/O error (Kafka's "
                              "LogManager OfflineLogDirectoryCount)."),
                metrics.gauge(LOG_DIRECTORY_OFFLINE, "1 while the log dir is offline after an I/O error, else 0 "
                              "(Kafka's LogManager LogDirectoryOffline).", ("logDirectory",)))
            self._update_metrics()

    # ------------------------------------------------------------------ log dir failures

    @property
    def cordoned_log_dirs(self) -> set[str]:
        """The log dirs ``cordoned.log.dirs`` names now (``*``: all): they take no new partitions (KIP-1066)."""
        cordoned = self._cordoned_source()
        if "*" in cordoned:
            return set(self.log_dirs)
        return {os.path.abspath(d) for d in cordoned}

    @property
    def live_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if not self.failure_channel.has_offline_log_dir(d)]

    def is_log_dir_online(self, log_dir: str) -> bool:
        return log_dir in self.log_dirs and not self.failure_channel.has_offline_log_dir(log_dir)

    def handle_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's LogManager.handleLogDirFailure: close every log of the dir to reads and writes (each then
        answers KAFKA_STORAGE_ERROR). The dir gets no more checkpoints and no clean-shutdown marker; its
        files stay open until shutdown (a response being sent may hold a region of one)."""
        cause = self.failure_channel.offline_log_dirs.get(log_dir, "offline")
        names = []
        for tp, lg in self.logs.items():
            if self._dir_of[tp] == log_dir:
                lg.mark_offline(f"log dir {log_dir} is offline: {cause}")
                names.append(lg.name)
        names.sort()
        shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        log.warning("Stopped serving the %d partition(s) in log dir %s%s", len(names), log_dir,
                    f": {shown}" if names else "")
        self._update_metrics()

    def _update_metrics(self) -> None:
        if self._gauges is None:
            return
        count, per_dir = self._gauges
        offline = self.failure_channel.offline_log_dirs
        count.set(sum(1 for d in self.log_dirs if d in offline))
        for d in self.log_dirs:
            per_dir.set(1 if d in offline else 0, logDirectory=d)

    def _report(self, log_dir: str, message: str, error: OSError) -> None:
        self.failure_channel.maybe_add_offline_log_dir(log_dir, message, error)

    def log_dir_status(self) -> list[dict]:
        """Each log dir: online or not (and why), its partitions, those whose logs are offline."""
        offline = self.failure_channel.offline_log_dirs
        out = []
        for d in self.log_dirs:
            logs = [lg for tp, lg in self.logs.items() if self._dir_of[tp] == d]
            out.append({"log_dir": d, "online": d not in offline, "error": offline.get(d),
                        "partitions": len(logs),
                        "offline_partitions": sorted(lg.name for lg in logs if lg.offline is not None)})
        return out

    def describe_log_dirs(self, partitions: Collection[tuple[str, int]] | None = None) -> list[LogDirDescription]:
        """Every log dir in ``log.dirs`` order with the logs it holds of ``partitions`` (all when None;
        partitions not hosted here are left out), what Kafka's ReplicaManager.describeLogDirs reports: each
        log's size and offset lag, and the total and usable bytes of the dir's file system. An offline dir
        lists nothing. A log offline in an online dir (refused by recovery) is listed with the size of its
        segment files on disk and INVALID_OFFSET_LAG, Kafka's lag of a replica that is not online."""
        offline = self.failure_channel.offline_log_dirs
        wanted = None if partitions is None else set(partitions)
        held: dict[str, list[LogDirReplica]] = {d: [] for d in self.log_dirs}
        for tp, lg in list(self.logs.items()):  # a snapshot: a metadata thread may add logs meanwhile
            d = self._dir_of.get(tp)
            if d in held and d not in offline and (wanted is None or tp in wanted):
                held[d].append(_log_dir_replica(lg))
        out = []
        for d in self.log_dirs:
            if d in offline:
                out.append(LogDirDescription(d, offline[d]))
            else:
                out.append(LogDirDescription(d, None, sorted(held[d]), *volume_space(d)))
        return out

    # ------------------------------------------------------------------ start and stop

    def startup(self) -> None:
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
                self._lock(d)
            except StartupError:
                raise  # in use by another broker: refuse to start
            except OSError as e:
                self._unlisted_offline.add(d)
                self._report(d, f"error while locking log dir {d}", e)
        for d in self.live_log_dirs:
            try:
                self._load_dir(d)
            except OSError as e:
                self._report(d, f"error while loading log dir {d}", e)
        if not self.live_log_dirs:
            causes = "; ".join(f"{d}: {cause}" for d, cause in self.failure_channel.offline_log_dirs.items())
            raise StartupError(f"no log dir can be used ({causes}); fix the folders' permissions or change "
                               f"log.dirs")
        self.cleaner.load_checkpoints(self.live_log_dirs)
        self.started = True

    def start_cleaner(self) -> None:
        """Start the cleaner threads (Kafka's LogCleaner.startup), when log.cleaner.enable."""
        self.cleaner.start()

    async def stop_cleaner(self) -> None:
        await self.cleaner.stop()

    def _load_dir(self, d: str) -> None:
        marker = CleanShutdownFile(d)
        clean = marker.exists()
        self.had_clean_shutdown[d] = clean
        # Removed before anything is loaded, as Kafka does: a stop before the next clean shutdown (a crash,
        # a failed disk) makes the next start recover.
        marker.delete()
        recovery = _read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
        if recovery is None:
            clean = False  # without recovery points, validate every segment
            recovery = {}
        starts = _read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT) or {}
        hws = _read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT) or {}
        t0 = time.monotonic()
        try:
            names = sorted(os.listdir(d))
        except OSError:
            self._unlisted_offline.add(d)
            raise
        folders = []
        for name in names:
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
            folders.append((path, tp))
        for i, (path, tp) in enumerate(folders):
            saved = {"recovery_point": recovery.get(tp, 0), "log_start_offset": starts.get(tp, 0),
                     "high_watermark": hws.get(tp, 0)}
            try:
                lg = Log.open(path, tp[0], tp[1], self._config_for(tp[0]), recovery_point=saved["recovery_point"],
                              log_start_offset=saved["log_start_offset"], clean_shutdown=clean)
            except OSError as e:
                # The dir failed: this partition and those not loaded yet stay offline here.
                for rest_path, rest_tp in folders[i:]:
                    self._register(self._offline_log(rest_path, rest_tp, "its log dir failed while loading", {
                        "recovery_point": recovery.get(rest_tp, 0), "log_start_offset": starts.get(rest_tp, 0),
                        "high_watermark": hws.get(rest_tp, 0)}), d)
                self._report(d, f"error while loading {os.path.basename(path)} in log dir {d}", e)
                return
            except KafkaError as e:
                # This log alone cannot be opened without dropping intact data (or is inconsistent): it stays
                # offline, untouched, and its dir gets no clean-shutdown marker.
                log.error("The log of %s-%d in %s stays offline: %s", *tp, d, e)
                lg = self._offline_log(path, tp, str(e), saved)
            else:
                if tp in hws:
                    lg.update_high_watermark(hws[tp])
            self._register(lg, d)
        # A dir without partitions has nothing to recover: a new dir is not an "unclean shutdown".
        how = "clean shutdown" if clean else "unclean shutdown" if folders else "no logs to recover"
        log.info("Loaded %d logs from %s in %.0f ms (%s)", len(folders), d, (time.monotonic() - t0) * 1000, how)

    def _offline_log(self, path: str, tp: tuple[str, int], cause: str, saved: dict) -> Log:
        lg = Log.offline_log(path, tp[0], tp[1], self._config_for(tp[0]), cause)
        # What the checkpoints said, written back unchanged while the log is offline.
        lg.recovery_point = saved["recovery_point"]
        lg.log_start_offset = saved["log_start_offset"]
        lg.high_watermark = saved["high_watermark"]
        return lg

    def _register(self, lg: Log, d: str) -> None:
        tp = (lg.topic, lg.partition)
        lg.failure_handler = self._report
        self.logs[tp] = lg
        self._dir_of[tp] = d

    def shutdown(self) -> None:
        """Clean shutdown: flush and close every log, write checkpoints, then the marker.

        A log dir is closed cleanly only when every one of its logs closed and its checkpoints were written;
        otherwise (an I/O error now or earlier, an offline log) it gets no clean-shutdown marker and the next
        start recovers it (listed in ``unclean_at_shutdown``). Every file is closed and every lock released
        either way."""
        self.unclean_at_shutdown = []
        self.delete_retired()
        try:
            for d in self.log_dirs:
                logs = [lg for tp, lg in self.logs.items() if self._dir_of[tp] == d]
                closed = True
                for lg in logs:
                    if lg.offline is not None or not self.is_log_dir_online(d):
                        lg.close_handles()
                        closed = False
                        continue
                    try:
                        lg.close()
                    except KafkaStorageError:
                        closed = False
                if self.is_log_dir_online(d) and all(lg.offline is None for lg in logs):
                    try:
                        self._checkpoint_dir(d, fsync=True)
                        if closed:
                            CleanShutdownFile(d).write()
                            continue
                    except OSError as e:
                        self._report(d, f"error while writing the checkpoints of log dir {d} at shutdown", e)
                log.warning("Log dir %s was not closed cleanly: its logs are recovered at the next start", d)
                self.unclean_at_shutdown.append(d)
        finally:
            for fd in self._locks:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                except OSError as e:
                    log.warning("Could not release a log dir lock: %s", e)
            self._locks.clear()
            self.started = False

    def _lock(self, log_dir: str) -> None:
        fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise StartupError(f"log dir {log_dir} is in use by another broker (it holds the lock on "
                               f"{os.path.join(log_dir, LOCK_FILE)}); stop that broker or give this one "
                               f"another log.dirs") from e
        self._locks.append(fd)

    # ------------------------------------------------------------------ logs

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None, *, is_new: bool = False) -> Log:
        """The partition's log, created in the online log dir holding the fewest partitions when there is
        none. A log that cannot be created is returned offline (its dir goes offline): the partition is then
        hosted and answers KAFKA_STORAGE_ERROR. While a dir that failed before its partitions could be
        listed is offline, only partitions known to be new (``is_new``: a topic just created) are created;
        any other may live in that dir, so it is offline too (Kafka's rule)."""
        tp = (topic, partition)
        lg = self.logs.get(tp)
        if lg is not None:
            return lg
        self._delete_retired_log(tp)  # a topic deleted and created again: the old folder goes first
        config = config or self._config_for(topic)
        name = f"{topic}-{partition}"
        live = self.live_log_dirs
        offline = self.failure_channel.offline_log_dirs
        unlisted = sorted(self._unlisted_offline)
        if unlisted and not is_new:
            cause = f"log dir {unlisted[0]}, which may hold it, is offline: {offline.get(unlisted[0])}"
            return self._add_offline(os.path.join(unlisted[0], name), tp, config, cause, topic_id)
        if not live:
            return self._add_offline(os.path.join(self.log_dirs[0], name), tp, config,
                                     "every log dir is offline", topic_id)
        # A new log goes to a dir that is not cordoned; were all cordoned, the least loaded one still takes it
        # (the controller chose this broker for it).
        open_dirs = [d for d in live if d not in self.cordoned_log_dirs]
        d = self._least_loaded_dir(open_dirs or live)
        try:
            lg = Log.open(os.path.join(d, name), topic, partition, config, topic_id=topic_id)
        except OSError as e:
            lg = self._add_offline(os.path.join(d, name), tp, config, f"its log could not be created: {e}", topic_id)
            self._report(d, f"error while creating the log of {name} in log dir {d}", e)
            return lg
        self._register(lg, d)
        return lg

    def _add_offline(self, path: str, tp: tuple[str, int], config: LogConfig, cause: str,
                     topic_id: uuid.UUID | None) -> Log:
        lg = Log.offline_log(path, tp[0], tp[1], config, cause, topic_id)
        self._register(lg, os.path.dirname(path))
        return lg

    def _least_loaded_dir(self, dirs: list[str]) -> str:
        counts = {d: 0 for d in dirs}
        for d in self._dir_of.values():
            if d in counts:
                counts[d] += 1
        return min(dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        self.retire_log(topic, partition)
        self._delete_retired_log((topic, partition))

    def retire_log(self, topic: str, partition: int) -> None:
        """Take a deleted partition's log out of the manager now (no request finds it, no checkpoint lists it)
        and leave its files to :meth:`delete_retired`: a topic of thousands of partitions is closed and
        renamed a slice at a time. A crash before that leaves a folder start-up deletes (its topic is gone);
        a log created again under the same name first finishes the retired one's deletion."""
        tp = (topic, partition)
        self.cleaner.forget(tp)
        lg = self.logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        if lg is not None:
            self._retired[tp] = lg

    def delete_retired(self, deadline: float | None = None) -> bool:
        """Delete retired logs until ``deadline`` (time.monotonic()); whether some remain."""
        while self._retired and (deadline is None or time.monotonic() < deadline):
            self._delete_retired_log(next(iter(self._retired)))
        return bool(self._retired)

    def _delete_retired_log(self, tp: tuple[str, int]) -> None:
        lg = self._retired.pop(tp, None)
        if lg is None:
            return
        if lg.offline is not None:
            # Nothing is written in a failed dir: the folder goes at the next start (its topic is gone).
            lg.close_handles()
            log.warning("The folder of deleted partition %s stays in %s until the next start: %s", lg.name,
                        lg.parent_dir, lg.offline)
            return
        try:
            lg.delete()
        except KafkaStorageError:
            lg.close_handles()  # its dir went offline (reported); the folder goes at the next start

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), lg in self.logs.items():
            if t == topic:
                lg.config = config

    # ------------------------------------------------------------------ housekeeping

    def checkpoint(self, fsync: bool = True) -> None:
        """Write the recovery points, log start offsets and high watermarks of every online log dir; a dir
        whose checkpoint cannot be written goes offline (Kafka's rule)."""
        for d in self.live_log_dirs:
            try:
                self._checkpoint_dir(d, fsync)
            except OSError as e:
                self._report(d, f"error while writing the checkpoints of log dir {d}", e)

    def _checkpoint_dir(self, d: str, fsync: bool) -> None:
        mine = {tp: lg for tp, lg in self.logs.items() if self._dir_of[tp] == d}
        OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).write(
            {tp: lg.recovery_point for tp, lg in mine.items()}, fsync)
        OffsetCheckpointFile(os.path.join(d, LOG_START_OFFSET_CHECKPOINT)).write(
            {tp: lg.log_start_offset for tp, lg in mine.items() if lg.log_start_offset > 0}, fsync)
        OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).write(
            {tp: lg.high_watermark for tp, lg in mine.items()}, fsync)

    def run_housekeeping(self, now_ms: int | None = None) -> None:
        """Time-based flushes and delayed deletes, retention, producer expiry and checkpoints of the logs that
        are online; an I/O error takes its dir offline (reported there) and the others go on."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for lg in self._online_logs():
            try:
                lg.flush_if_due(now)
                lg.delete_expired_files(now)
            except KafkaStorageError:
                pass
        if now - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now
            for lg in self._online_logs():
                try:
                    lg.delete_old_segments(now)
                except KafkaStorageError:
                    continue
                lg.producer_state.remove_expired(now, self.producer_id_expiration_ms)
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now
            self.checkpoint(fsync=False)

    def next_retention_check_ms(self) -> int:
        """When the next retention check runs (epoch ms; ``log.retention.check.interval.ms`` after the
        last one, on the next housekeeping tick)."""
        return self._last_retention_ms + self.retention_check_interval_ms

    def _online_logs(self) -> list[Log]:
        return [lg for lg in self.logs.values() if lg.offline is None]


def volume_space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``, as Java's FileStore reports them to Kafka
    (usable: what a process without root's reserve may still write); UNKNOWN_VOLUME_BYTES each when the
    file system cannot be asked."""
    try:
        st = os.statvfs(path)
    except OSError:
        return UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _log_dir_replica(lg: Log) -> LogDirReplica:
    if lg.offline is None:
        return LogDirReplica(lg.topic, lg.partition, lg.size_in_bytes, max(lg.high_watermark - lg.log_end_offset, 0))
    return LogDirReplica(lg.topic, lg.partition, _segment_files_size(lg.dir), INVALID_OFFSET_LAG)


def _segment_files_size(folder: str) -> int:
    """The bytes of a partition folder's ``.log`` files (0 when it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            return sum(e.stat().st_size for e in entries if e.name.endswith(".log") and e.is_file())
    except OSError:
        return 0


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
