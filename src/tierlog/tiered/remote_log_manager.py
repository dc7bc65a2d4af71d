"""The remote log manager (KIP-405): copies rolled segments to remote storage, expires remote data
by retention, deletes a deleted topic's remote data, and serves reads below the local log start.

Everything runs on the broker's event loop; calls into the storage plugin (blocking I/O) run on
thread pools sized like Kafka's (copier, expiration, reader). Per leader partition there is a copy
task and an expiration task, each run every ``remote.log.manager.task.interval.ms`` (fixed delay,
first run at once), skipped while the metadata manager is not ready for the partition (a restart
still replaying ``__remote_log_metadata``; it looks again every 0.2 s until it is).

Safety rules, as Kafka's:
- a segment is uploaded only once the next segment starts at or below the last stable offset, so
  only complete, committed data is tiered; the active segment never is;
- every upload is bracketed by COPY_SEGMENT_STARTED / COPY_SEGMENT_FINISHED; only then does the
  log's ``highest_offset_in_remote_storage`` move, which is what lets local retention delete the
  local copy; a failed upload is retried later under a new segment id;
- retention deletes a contiguous oldest prefix, moves the log start offset first (readers stop
  asking for those offsets) and only then deletes the objects.

Clean-up. A failed upload (and one this broker left unfinished in an earlier leadership or life) is
abandoned: the copy task marks it DELETE_SEGMENT_STARTED. Another broker's unfinished upload (a previous
leader's, which may still be writing it if it is only paused) is abandoned once retention passes it, as
Kafka does. Every run of the expiration task then deletes the objects of every
DELETE_SEGMENT_STARTED segment of the partition (failed uploads, deletions that failed half-way),
whether retention has reached them or not, and marks them DELETE_SEGMENT_FINISHED; until that works
they are tried again each run, and a failing clean-up never holds retention back. Only the expiration
task deletes, so no segment is deleted twice.

Errors. A partition's ``last_error`` names the first failure of an outage (the cause, not the
clean-up failures that follow) and clears once every task of the partition has run cleanly again,
clean-up included. The first failure of a task is logged at WARNING; repeats of that kind of failure
(the same error type, whatever segment it names) are counted and reported in one line every 5 minutes
(every failure is at DEBUG); the recovery is logged at INFO.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.kafka_uuid import uuid_to_str
from tierlog.logs import RepeatLimiter
from tierlog.metrics import MetricsRegistry
from tierlog.storage import Log, LogSegment
from tierlog.storage.checkpoints import parse_leader_epoch_checkpoint, write_atomically
from tierlog.storage.producer_state import snapshot_path
from tierlog.tiered import remote_rebuild
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.lineage import (
    epochs_in_range,
    filtered_epochs,
    find_highest_remote_offset,
    segment_within_leader_epochs,
)
from tierlog.tiered.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.partition import TopicPartitionLog
from tierlog.tiered.quota import RateQuota
from tierlog.tiered.remote_reader import RemoteLogReader
from tierlog.tiered.remote_rebuild import (
    Run,
    checkpoint_through,
    local_pieces,
    overlap_runs,
    run_epochs,
    within_lineage,
)
from tierlog.tiered.rlmm import RemoteLogMetadataManager
from tierlog.tiered.rsm import RemoteStorageError, RemoteStorageManager, layout

log = logging.getLogger(__name__)

S = RemoteLogSegmentState


class CustomMetadataSizeLimitExceededError(Exception):
    """KIP-917: the storage plugin returned more custom metadata than
    ``remote.log.metadata.custom.metadata.max.bytes``; copying stops for the partition."""


_QUOTA_RECHECK_MS = 1000  # a throttled copy looks at the quota again at least this often (Kafka: 1 s)
#: A task whose partition's metadata is still loading looks again this often (at most every task interval):
#: the first run after a restart reads the remote offsets, and until then status and readiness say "loading".
_NOT_READY_RECHECK_S = 0.2
#: How long the failures of one kind of one task stay one WARNING line, then one line with their count.
_FAILURE_REPORT_S = 300.0
#: How long a follower answering a delete disablement waits for its metadata to load (then the controller asks again).
_DISABLE_LOAD_WAIT_S = 20


def _now_ms() -> int:
    return int(time.time() * 1000)


def leader_epoch_checkpoint_bytes(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch-checkpoint text (version 0), as shipped with a remote segment."""
    entries = list(entries)
    return (f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)).encode()


class RemoteStorageMetrics:
    """The remote-storage metrics of Kafka's BrokerTopicMetrics, per topic (counters) and per partition
    (gauges)."""

    PREFIX = "kafka_server_brokertopicmetrics_"

    def __init__(self, registry: MetricsRegistry) -> None:
        topic, partition = ("topic",), ("topic", "partition")

        def c(name, doc, labels=topic):
            return registry.counter(name, doc, labels)

        def g(name, doc, labels=partition):
            return registry.gauge(name, doc, labels)

        p = self.PREFIX
        self.copy_requests = c(p + "remotecopyrequests_total", "Segment uploads started (RemoteCopyRequestsPerSec).")
        self.copy_bytes = c(p + "remotecopybytes_total", "Bytes of segments uploaded (RemoteCopyBytesPerSec).")
        self.copy_errors = c(p + "remotecopyerrors_total", "Failed segment uploads (RemoteCopyErrorsPerSec).")
        self.fetch_requests = c(p + "remotefetchrequests_total", "Remote reads (RemoteFetchRequestsPerSec).")
        self.fetch_bytes = c(p + "remotefetchbytes_total", "Bytes read from remote storage (RemoteFetchBytesPerSec).")
        self.fetch_errors = c(p + "remotefetcherrors_total", "Failed remote reads (RemoteFetchErrorsPerSec).")
        self.delete_requests = c(p + "remotedeleterequests_total",
                                 "Remote segment deletions (RemoteDeleteRequestsPerSec).")
        self.delete_errors = c(p + "remotedeleteerrors_total", "Failed remote deletions (RemoteDeleteErrorsPerSec).")
        self.copy_lag_bytes = g(p + "remotecopylagbytes",
                                "Bytes of rolled segments not yet uploaded (RemoteCopyLagBytes).")
        self.copy_lag_segments = g(p + "remotecopylagsegments",
                                   "Rolled segments not yet uploaded (RemoteCopyLagSegments).")
        self.delete_lag_bytes = g(p + "remotedeletelagbytes",
                                  "Bytes of remote segments due for deletion (RemoteDeleteLagBytes).")
        self.delete_lag_segments = g(p + "remotedeletelagsegments",
                                     "Remote segments due for deletion (RemoteDeleteLagSegments).")
        self.log_size_bytes = g(p + "remotelogsizebytes", "Bytes in remote storage (RemoteLogSizeBytes).")
        self.log_metadata_count = g(p + "remotelogmetadatacount",
                                    "Remote segments known to the metadata manager (RemoteLogMetadataCount).")
        self.disablements = c("tierlog_remote_topic_disablements_total",
                              "Tiered storage disablements completed on this broker, by policy (KIP-950).", ("policy",))
        self.disable_bytes_left = g("tierlog_remote_disable_bytes_left",
                                    "Remote bytes still to delete by delete-policy disablements (KIP-950).")
        self.copy_throttle_seconds = c("tierlog_remote_copy_throttle_seconds_total",
                                       "Time segment uploads waited for the copy quota (KIP-956).", ())
        self.fetch_throttled = c("tierlog_remote_fetch_throttled_total",
                                 "Partition reads answered empty because the remote fetch quota was exceeded "
                                 "(KIP-956).")

    def forget(self, tp: TopicIdPartition) -> None:
        for gauge in (self.copy_lag_bytes, self.copy_lag_segments, self.delete_lag_bytes, self.delete_lag_segments,
                      self.log_size_bytes, self.log_metadata_count):
            gauge.remove(topic=tp.topic, partition=tp.partition)


@dataclass(eq=False)
class PartitionTasks:
    """The remote log manager's state for one leader partition."""

    tp: TopicIdPartition
    partition: TopicPartitionLog
    copy_task: asyncio.Task | None = None
    copy_tasks_started: int = 0  # tells the expiration task whether an upload may have started meanwhile
    expiration_task: asyncio.Task | None = None
    first_copy_run: bool = True
    stop_copy: bool = False  # copying turned off: no new upload starts
    copy_stopped: str | None = None  # why copying stopped for good (KIP-917), until leadership changes
    being_copied: set = field(default_factory=set)  # segment ids with an upload in flight
    # Uploads whose copy task was cancelled (leadership moved, the partition stopped) before it could
    # publish COPY_SEGMENT_FINISHED; stop_tasks abandons them once their store calls have returned.
    cut_short: list = field(default_factory=list)
    # Failed or unfinished uploads whose DELETE_SEGMENT_STARTED event could not be written yet, by
    # segment id; the expiration task writes it (then deletes them like any other).
    abandoned: dict = field(default_factory=dict)
    in_flight: set = field(default_factory=set)  # executor futures of uploads and deletes
    failing: dict = field(default_factory=dict)  # task ("copy", "expiration") -> its last error, while failing
    last_error: str | None = None  # the first error of the current outage; None once all tasks work
    term: tuple | None = None  # (leader epoch, session) this broker leads in; see RemoteLogManager._term
    last_error_ms: int = -1

    @property
    def log(self):
        return self.partition.log


def build_remote_log_manager(config, broker_id: int, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                             log_dir: str, registry: MetricsRegistry | None = None,
                             effective_config=None, cleaned_up_to=None) -> RemoteLogManager:
    """The remote log manager with its metrics and its reader (remote reads of ``log_dir``'s index cache)
    wired together. ``effective_config`` returns the current configuration, dynamic changes included;
    ``cleaned_up_to(topic, partition)`` the log cleaner's checkpoint of a log (compacted topics)."""
    current = effective_config or (lambda: config)
    metrics = RemoteStorageMetrics(registry or MetricsRegistry())
    reader = RemoteLogReader(current, rsm, rlmm, metrics, log_dir)
    return RemoteLogManager(config, broker_id, rsm, rlmm, reader, metrics, current, cleaned_up_to)


class RemoteLogManager:
    def __init__(self, config, broker_id: int, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                 reader: RemoteLogReader, metrics: RemoteStorageMetrics, effective_config=None,
                 cleaned_up_to: Callable[[str, int], int | None] | None = None) -> None:
        """``reader`` serves reads below the local log start (it shares ``metrics``); ``effective_config``:
        a function returning the current configuration, dynamic changes included (the copy quota follows
        it); ``config`` by default. ``cleaned_up_to(topic, partition)``: the offset below which the log
        cleaner cleaned a log, None if it did not (a compacted topic uploads only what is below it)."""
        self.config = config
        self.cleaned_up_to = cleaned_up_to or (lambda topic, partition: None)
        current = effective_config or (lambda: config)
        self.copy_quota = RateQuota(lambda: current()["remote.log.manager.copy.max.bytes.per.second"],
                                    config["remote.log.manager.copy.quota.window.num"],
                                    config["remote.log.manager.copy.quota.window.size.seconds"])
        self.broker_id = broker_id
        self.rsm = rsm
        self.rlmm = rlmm
        self.metrics = metrics
        self.task_interval_s = config["remote.log.manager.task.interval.ms"] / 1000
        self.custom_metadata_max_bytes = config["remote.log.metadata.custom.metadata.max.bytes"]
        self._current = current
        self._pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
        self.partitions: dict[TopicIdPartition, PartitionTasks] = {}
        # Follower partitions: their partition and the task that follows the leader's uploads.
        self.followers: dict[TopicIdPartition, tuple[TopicPartitionLog, asyncio.Task]] = {}
        self.disabling: dict[TopicIdPartition, dict] = {}  # remote data still to delete, per partition
        self._background: set[asyncio.Task] = set()
        self.reader = reader
        self.closed = False
        # A store that stays down (full, say) fails every run with a message naming another segment:
        # one line per partition, task and kind of failure, the repeats counted.
        self._failure_log = RepeatLimiter(log, _FAILURE_REPORT_S, max_keys=10_000)
        # The session this broker's leaderships hold under (ZooKeeper's, set by the broker); None while
        # there is none. A leader whose session ended is fenced: the controller may have moved its
        # partitions before this broker hears of it, so it publishes no upload and deletes nothing.
        self.leader_session: Callable[[], object] = lambda: 0

    # ------------------------------------------------------------------------------------ pools

    def _pool(self, key: str, prefix: str) -> ThreadPoolExecutor:
        """The workers sized by ``key`` now: a dynamic change gives new work a new pool while the old
        one finishes what it has."""
        size = self._current()[key]
        held = self._pools.get(key)
        if held is None or held[0] != size:
            self._pools[key] = (size, ThreadPoolExecutor(size, thread_name_prefix=prefix))
            if held is not None:
                log.info("%s: %d -> %d workers", key, held[0], size)
                held[1].shutdown(wait=False)
        return self._pools[key][1]

    @property
    def copier_pool(self) -> ThreadPoolExecutor:
        return self._pool("remote.log.manager.copier.thread.pool.size", "rlm-copy")

    @property
    def expiration_pool(self) -> ThreadPoolExecutor:
        return self._pool("remote.log.manager.expiration.thread.pool.size", "rlm-expire")

    # ------------------------------------------------------------------------------------ leadership

    @staticmethod
    def topic_id_partition(partition: TopicPartitionLog) -> TopicIdPartition:
        return TopicIdPartition(partition.topic_id, partition.topic, partition.index)

    def on_leadership_change(self, leaders: Iterable[TopicPartitionLog]) -> None:
        """Start (or restart) the copy and expiration tasks of these leader partitions, whose logs have
        remote storage in effect. A partition already followed keeps its tasks."""
        fresh = []
        for partition in leaders:
            tp = self.topic_id_partition(partition)
            self._stop_following(tp)
            st = self.partitions.get(tp)
            if st is not None and st.partition is partition:
                continue
            if st is not None:
                self._cancel(st)
            st = PartitionTasks(tp, partition)
            self._term(st)  # the session this leadership was given in
            self.partitions[tp] = st
            fresh.append(tp)
            if partition.log.offline is not None:  # its log dir failed: listed, never copied
                st.copy_stopped = f"log offline: {partition.log.offline}"
                continue
            self._start_tasks(st)
        if fresh:
            self.rlmm.on_partition_leadership_changes(fresh, [])

    # ------------------------------------------------------------------------------------ followers

    def on_follow(self, followers: Iterable[TopicPartitionLog]) -> None:
        """Follower partitions whose logs have remote storage in effect (Kafka's RLMFollowerTask): the
        metadata manager follows their metadata partitions, and a task reads every task interval the highest
        offset the leader has uploaded within this replica's leader-epoch lineage, so local retention deletes
        here what the leader tiered, as it does on the leader. Leader tasks of a partition are stopped by
        the caller (``stop_tasks``) when it loses the leadership."""
        fresh = []
        for partition in followers:
            tp = self.topic_id_partition(partition)
            held = self.followers.get(tp)
            if held is not None and held[0] is partition and not held[1].done():
                continue
            self._stop_following(tp)
            task = asyncio.get_running_loop().create_task(self._follow(tp, partition),
                                                          name=f"rlm-follow-{tp.topic}-{tp.partition}")
            self.followers[tp] = (partition, task)
            fresh.append(tp)
        if fresh:
            self.rlmm.on_partition_leadership_changes([], fresh)

    def _stop_following(self, tp: TopicIdPartition) -> None:
        held = self.followers.pop(tp, None)
        if held is not None:
            held[1].cancel()

    async def _follow(self, tp: TopicIdPartition, partition: TopicPartitionLog) -> None:
        while True:
            if partition.log.offline is not None:
                return
            if not self.rlmm.is_ready(tp):
                await asyncio.sleep(min(self.task_interval_s, _NOT_READY_RECHECK_S))
                continue
            try:
                self.follow_once(tp, partition)
            except Exception as e:  # noqa: BLE001 - metadata read again next run
                log.debug("Following the remote offsets of %s failed: %s", tp, e)
            await asyncio.sleep(self.task_interval_s)

    def follow_once(self, tp: TopicIdPartition, partition: TopicPartitionLog) -> None:
        """Move the follower log's highest remote offset to what the leader uploaded in its lineage."""
        lg = partition.log
        offset, _ = find_highest_remote_offset(lg.leader_epoch_cache.entries, lg.log_end_offset,
                                               lambda e: self.rlmm.highest_offset_for_epoch(tp, e))
        if offset > lg.highest_offset_in_remote_storage:
            lg.highest_offset_in_remote_storage = offset

    async def build_follower_state(self, partition: TopicPartitionLog, target_epoch: int, offset: int,
                                   leader_log_start: int) -> int:
        """KIP-405's follower path (Kafka's TierStateMachine.buildRemoteLogAuxState): the follower needs
        ``offset``'s successor, which the leader holds only in the remote tier. From the remote segment
        holding ``offset`` in ``target_epoch`` it takes the leader-epoch checkpoint and the producer
        snapshot shipped with it, starts the log empty after that segment with that state, its log start
        at the leader's; returns the offset to fetch from (the segment's end + 1). Raises a retriable
        storage error while the metadata is loading or the segment is not known yet."""
        tp = self.topic_id_partition(partition)
        if tp not in self.followers and tp not in self.partitions:
            self.on_follow([partition])
        if not self.rlmm.is_ready(tp):
            raise RemoteResourceNotFoundError(f"the remote log metadata of {tp} is still loading")
        md = self.rlmm.remote_log_segment_metadata(tp, target_epoch, offset)
        if md is None:
            raise RemoteResourceNotFoundError(f"no remote segment of {tp} holds offset {offset} in leader "
                                              f"epoch {target_epoch}")
        loop = asyncio.get_running_loop()
        epochs_blob = await loop.run_in_executor(self.reader.pool, self.rsm.fetch_index, md, IndexType.LEADER_EPOCH)
        try:
            snapshot = await loop.run_in_executor(self.reader.pool, self.rsm.fetch_index, md,
                                                  IndexType.PRODUCER_SNAPSHOT)
        except RemoteResourceNotFoundError:
            snapshot = None  # a segment uploaded without producer state (no idempotent producer yet)
        epochs = parse_leader_epoch_checkpoint(epochs_blob, f"remote segment {md.segment_id.id} of {tp}")
        next_offset = md.end_offset + 1
        lg = partition.log
        lg.truncate_fully_and_start_at(next_offset)
        for epoch, start in epochs:
            if start < next_offset:
                lg.leader_epoch_cache.assign(epoch, start)
        if snapshot:
            write_atomically(snapshot_path(lg.dir, next_offset), snapshot, fsync=True)
            lg.producer_state.load_snapshot(next_offset)
        lg.log_start_offset = min(max(leader_log_start, 0), next_offset)
        lg.leader_epoch_cache.truncate_from_start(lg.log_start_offset)
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, md.end_offset)
        log.info("Built the state of follower %s from remote segment %s (offsets %d-%d, leader epochs %s): "
                 "fetching from %d, log start %d", tp, md.segment_id.id, md.start_offset, md.end_offset,
                 lg.leader_epoch_cache.entries, next_offset, lg.log_start_offset)
        return next_offset

    def _start_tasks(self, st: PartitionTasks) -> None:
        name = f"{st.tp.topic}-{st.tp.partition}"
        st.log.remote_copy_current = lambda: self.remote_copy_check(st)
        if st.copy_task is None and not st.log.config.remote_log_copy_disable:
            st.copy_tasks_started += 1
            st.copy_task = asyncio.get_running_loop().create_task(
                self._run_periodically(st, self._copy_once, "copy"), name=f"rlm-copy-{name}")
        if st.expiration_task is None:
            st.expiration_task = asyncio.get_running_loop().create_task(
                self._run_periodically(st, self._expire_once, "expiration"), name=f"rlm-expire-{name}")

    def on_config_change(self, partition: TopicPartitionLog) -> None:
        """The topic's configuration changed: copying follows ``remote.log.copy.disable``. Stopping takes
        effect before the next upload starts; one already running completes (no dangling segment)."""
        st = self.partitions.get(self.topic_id_partition(partition))
        if st is None:
            return
        if st.log.config.remote_log_copy_disable and st.copy_task is not None:
            st.stop_copy = True
            self.metrics.copy_lag_bytes.set(0, topic=st.tp.topic, partition=st.tp.partition)
            self.metrics.copy_lag_segments.set(0, topic=st.tp.topic, partition=st.tp.partition)
        elif not st.log.config.remote_log_copy_disable and (st.copy_task is None or st.stop_copy):
            st.first_copy_run = True
            st.copy_stopped = None
            st.stop_copy = False
            if st.copy_task is not None and st.copy_task.done():
                st.copy_task = None
            self._start_tasks(st)

    def on_log_dir_failure(self, partitions: Iterable[TopicPartitionLog]) -> None:
        """These partitions' log dir went offline: their copy and expiration tasks stop at once (an upload
        already running in a thread completes; its segment was rolled and intact). Each stays in the status
        with the cause as its last error, until the broker restarts."""
        for partition in partitions:
            st = self.partitions.get(self.topic_id_partition(partition))
            if st is None:
                continue
            st.stop_copy = True
            st.copy_stopped = f"log offline: {partition.log.offline}"
            self._record_error(st, "log dir", st.copy_stopped)
            self._cancel(st)
            self.metrics.copy_lag_bytes.set(0, topic=st.tp.topic, partition=st.tp.partition)
            self.metrics.copy_lag_segments.set(0, topic=st.tp.topic, partition=st.tp.partition)

    def _cancel(self, st: PartitionTasks) -> None:
        for task in (st.copy_task, st.expiration_task):
            if task is not None:
                task.cancel()
        st.copy_task = st.expiration_task = None

    async def stop_tasks(self, partitions: Iterable[TopicPartitionLog],
                         stop_following: bool = True) -> list[TopicIdPartition]:
        """Cancel the tasks of these partitions and wait for their storage calls still running in a
        thread (an upload finishing after a deletion would leave an object behind). ``stop_following``
        False: a follower task stays (a leader that resigned and follows now)."""
        stopped = []
        for partition in partitions:
            tp = self.topic_id_partition(partition)
            if stop_following:
                self._stop_following(tp)
            st = self.partitions.pop(tp, None)
            if st is not None:
                st.log.remote_copy_current = None
                tasks = [t for t in (st.copy_task, st.expiration_task) if t is not None]
                self._cancel(st)
                if tasks:  # each notes what it was uploading (cut_short)
                    await asyncio.wait(tasks)
                if st.in_flight:
                    await asyncio.wait(list(st.in_flight))
                await self._abandon_cut_short(st)
            self.metrics.forget(tp)
            stopped.append(tp)
        return stopped

    async def _abandon_cut_short(self, st: PartitionTasks) -> None:
        """Uploads of a leadership that ended mid-copy (a leader paused past its ZooKeeper session, say,
        woken while its upload still ran): their objects are complete now, but this broker no longer
        leads that epoch, so it never publishes them COPY_SEGMENT_FINISHED. The new leader counted
        nothing of them (it resumed after the highest *finished* offset) and uploads those offsets
        itself; marked DELETE_SEGMENT_STARTED here, the leader's expiration task deletes their objects.
        Left COPY_SEGMENT_STARTED, they would wait for remote retention (another broker's unfinished
        upload above the log start is never taken for dangling)."""
        for md in st.cut_short:
            log.info("Abandoning the upload %s of segment %d of %s: its leadership ended before it finished",
                     md.segment_id.id, md.start_offset, st.tp)
            await self._abandon(st, md)
        st.cut_short.clear()

    async def stop_partitions(self, partitions: Iterable[TopicPartitionLog], delete_remote: bool) -> None:
        """Stop tiering these partitions; with ``delete_remote`` (topic deletion) delete all their remote
        data: DELETE_SEGMENT_STARTED for every segment, the objects, then DELETE_SEGMENT_FINISHED."""
        stopped = await self.stop_tasks(partitions)
        if delete_remote:
            for tp in stopped:
                try:
                    await self._delete_all_remote(tp)
                except Exception as e:  # noqa: BLE001 - the topic is gone either way; say what is left
                    log.error("Could not delete the remote data of %s: %s; the reconciler lists what is left",
                              tp, e)
        self.rlmm.on_stop_partitions(stopped)

    async def disable_remote_topic(self, led: list[TopicPartitionLog], followed: list[TopicPartitionLog],
                                   policy: str) -> None:
        """DisableRemoteTopic (KIP-950) for the partitions of the topic hosted here, those this broker leads
        and those it follows. ``retain``: no upload starts any more (one running completes); remote data
        stays readable and expires by retention. ``delete``: the partitions' log start offsets already
        moved to their local log start (reads below get OFFSET_OUT_OF_RANGE); reads in flight are drained,
        then the leader deletes every remote segment with its events (as in Kafka, a partition's remote
        data is its leader's to delete). A follower stops and answers once its metadata shows nothing of
        the partition left: so when every hosting broker answered, the remote data is gone, also where the
        leader died mid-disablement (the controller keeps asking; the broker elected in its place leads
        now and deletes, without waiting for the dead one). Idempotent; raises when something is left, and
        the controller asks again."""
        partitions = [*led, *followed]
        if policy == "retain":
            for partition in partitions:
                st = self.partitions.get(self.topic_id_partition(partition))
                if st is not None and st.copy_task is not None:
                    st.stop_copy = True
                    await asyncio.wait([st.copy_task])
            return
        tps = await self.stop_tasks(partitions)
        for tp in tps:
            await self.reader.drain(tp)
        leading = [self.topic_id_partition(p) for p in led]
        # The manager follows the partitions again for as long as the deletion takes (after a restart it
        # has to load their metadata first).
        self.rlmm.on_partition_leadership_changes(leading, [tp for tp in tps if tp not in leading])
        for tp in leading:
            await self._delete_all_remote(tp)
        for tp in tps:
            if tp not in leading:
                await self._check_remote_deleted(tp)
        self.rlmm.on_stop_partitions(tps)
        self.metrics.disablements.inc(policy=policy)

    async def _check_remote_deleted(self, tp: TopicIdPartition) -> None:
        """A followed partition's part of a delete disablement: raise while its leader has not deleted all
        (not waiting for it: the controller asks again after a back-off)."""
        deadline = time.monotonic() + _DISABLE_LOAD_WAIT_S
        while not self.rlmm.is_ready(tp):  # after a restart the metadata may still be loading
            if time.monotonic() > deadline or self.closed:
                raise RemoteResourceNotFoundError(f"the remote log metadata of {tp} is still loading")
            await asyncio.sleep(0.1)
        left = [md for md in self.rlmm.list_remote_log_segments(tp) if md.state != S.DELETE_SEGMENT_FINISHED]
        if left:
            raise RemoteStorageError(f"{len(left)} remote segment(s) of {tp} are still to be deleted by its leader")

    async def _delete_all_remote(self, tp: TopicIdPartition) -> None:
        deadline = time.monotonic() + 300
        while not self.rlmm.is_ready(tp):  # after a restart the metadata may still be loading
            if time.monotonic() > deadline or self.closed:
                raise TimeoutError(f"remote log metadata of {tp} did not become ready")
            await asyncio.sleep(0.1)
        segments = [md for md in self.rlmm.list_remote_log_segments(tp) if md.state != S.DELETE_SEGMENT_FINISHED]
        left = self.disabling[tp] = {"segments": len(segments),
                                     "bytes": sum(md.segment_size_in_bytes for md in segments)}
        try:
            await self._delete_segments(tp, segments, left)
        finally:
            self.disabling.pop(tp, None)
            self.metrics.disable_bytes_left.remove(topic=tp.topic, partition=tp.partition)
        log.info("Deleted %d remote segment(s) of %s", len(segments), tp)

    async def _delete_segments(self, tp: TopicIdPartition, segments: list[RemoteLogSegmentMetadata],
                               left: dict) -> None:
        for md in segments:
            if md.state != S.DELETE_SEGMENT_STARTED:
                await self._update(md, S.DELETE_SEGMENT_STARTED)
        loop = asyncio.get_running_loop()
        for md in segments:
            self.metrics.delete_requests.inc(topic=tp.topic)
            try:
                await loop.run_in_executor(self.expiration_pool, self.rsm.delete_log_segment_data, md)
            except Exception:
                self.metrics.delete_errors.inc(topic=tp.topic)
                raise
            self._evict_from_index_cache(md)
            await self._update(md, S.DELETE_SEGMENT_FINISHED)
            left["segments"] -= 1
            left["bytes"] -= md.segment_size_in_bytes
            self.metrics.disable_bytes_left.set(left["bytes"], topic=tp.topic, partition=tp.partition)

    # ----------------------------------------------------------------------------------- scheduling

    async def _run_periodically(self, st: PartitionTasks, body, what: str) -> None:
        while not (what == "copy" and st.stop_copy):
            if not self.rlmm.is_ready(st.tp):
                await asyncio.sleep(min(self.task_interval_s, _NOT_READY_RECHECK_S))
                continue
            if not await self.run_once(st, body, what):
                return
            await asyncio.sleep(self.task_interval_s)

    async def run_once(self, st: PartitionTasks, body, what: str) -> bool:
        """One run of a task (``what``: "copy" or "expiration"), its failure recorded and logged; False
        when the task stops for good."""
        try:
            await body(st)
        except asyncio.CancelledError:
            raise
        except CustomMetadataSizeLimitExceededError as e:
            self._record_error(st, what, str(e))
            log.error("Stopping the copy task of %s: %s", st.tp, e)
            st.copy_stopped = str(e)
            st.copy_task = None
            return False
        except Exception as e:  # noqa: BLE001 - the next run retries
            self._record_error(st, what, f"{what}: {e}")
            log.debug("Remote log %s task of %s failed: %s", what, st.tp, e, exc_info=not isinstance(e, OSError))
            kind = (st.tp, what, type(e), getattr(e.__cause__, "errno", None))
            self._failure_log.warning(kind, "Remote log %s task of %s failed: %s (retried every run; repeats are "
                                            "counted)", what, st.tp, e)
        else:
            self._record_success(st, what)
        return True

    def _record_error(self, st: PartitionTasks, what: str, message: str) -> None:
        """A run of task ``what`` failed. The first failure of an outage stays the partition's
        ``last_error``: what follows (clean-up failing too) is usually a consequence."""
        if not st.failing:
            st.last_error = message
            st.last_error_ms = _now_ms()
        st.failing[what] = message

    def _record_success(self, st: PartitionTasks, what: str) -> None:
        """A run of task ``what`` completed; once no task of the partition is failing, the outage is over."""
        if st.failing.pop(what, None) is not None and not st.failing:
            log.info("Remote log tasks of %s work again (the outage began at %s with: %s)", st.tp,
                     time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.last_error_ms / 1000)), st.last_error)
            st.last_error = None
            st.last_error_ms = -1

    async def _in_pool(self, st: PartitionTasks, pool: ThreadPoolExecutor, fn, *args):
        """Run a blocking storage call; it keeps running if the task is cancelled, so stopping a
        partition waits for it (``in_flight``)."""
        fut = asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        st.in_flight.add(fut)
        fut.add_done_callback(st.in_flight.discard)
        return await asyncio.shield(fut)

    async def _update(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState,
                      custom_metadata: bytes | None | str = "same") -> RemoteLogSegmentMetadata:
        custom = md.custom_metadata if custom_metadata == "same" else custom_metadata
        update = RemoteLogSegmentMetadataUpdate(md.segment_id, _now_ms(), custom, state, self.broker_id)
        await self.rlmm.update_remote_log_segment_metadata(update)
        return md.with_update(update)

    def _term(self, st: PartitionTasks) -> tuple[int, object] | None:
        """(leader epoch, session) this broker leads ``st`` in now; None while it is fenced: no session, or
        a session that ended under an unchanged epoch (the controller may have moved the partition; it gives
        a broker back in a new session a new epoch, which starts a new term here)."""
        epoch, session = st.partition.leader_epoch, self.leader_session()
        if session is None:
            return None
        if st.term is None or st.term[0] != epoch:
            st.term = (epoch, session)
        return st.term if st.term[1] == session else None

    def _fenced(self, st: PartitionTasks, epoch: int, session: object) -> str | None:
        """Why this broker may no longer act as the leader of ``epoch`` it held in ``session``; None if it may.
        Checked right before an upload is published and before a delete (Kafka's tasks check isLeader())."""
        if self.partitions.get(st.tp) is not st:
            return "its leadership ended"
        if st.partition.leader_epoch != epoch:
            return f"leader epoch {epoch} ended"
        now = self.leader_session()
        if now is None or now != session:
            return "the ZooKeeper session it led in ended"
        return None

    # ----------------------------------------------------------------------------------------- copy

    def _init_remote_offsets(self, st: PartitionTasks) -> None:
        """First run as leader: the log start offset from the oldest remote segment in the lineage,
        and the highest offset already copied."""
        lg = st.log
        entries = lg.leader_epoch_cache.entries
        for epoch, _ in entries:
            listed = self.rlmm.list_remote_log_segments(st.tp, epoch)
            if listed:
                start = listed[0].start_offset
                if start > lg.log_start_offset:
                    lg.increment_log_start_offset_from_remote(start)
                break
        offset, _ = find_highest_remote_offset(entries, lg.log_end_offset,
                                               lambda e: self.rlmm.highest_offset_for_epoch(st.tp, e))
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, offset)

    def dangling_uploads(self, st: PartitionTasks, own: bool = True) -> list[RemoteLogSegmentMetadata]:
        """Unfinished uploads (COPY_SEGMENT_STARTED, not of this leadership) that may be removed now: those
        this broker started in an earlier leadership or an earlier life (its uploads of an earlier
        leadership were awaited when it resigned), and, as Kafka does, any whose data retention has passed
        (below the log start offset). Another broker's unfinished upload above the log start stays until
        retention reaches it: that broker may be a paused old leader still writing it, and deleting its
        objects now could leave what it writes on waking unreferenced. ``own`` False: only the latter
        (while a copy task of this leadership runs)."""
        log_start = st.log.log_start_offset
        return [md for md in self.rlmm.list_remote_log_segments(st.tp)
                if md.state == S.COPY_SEGMENT_STARTED and md.segment_id not in st.being_copied
                and md.segment_id not in st.abandoned
                and (own and md.broker_id == self.broker_id or md.end_offset < log_start)]

    async def _clean_dangling_uploads(self, st: PartitionTasks) -> None:
        """Abandon the :meth:`dangling_uploads` (deleted by the next expiration run). Runs in the copy task
        before its first upload, so no upload of this leadership is in flight."""
        dangling = self.dangling_uploads(st)
        for md in dangling:
            log.info("Removing the unfinished upload %s of segment %d of %s", md.segment_id.id, md.start_offset,
                     st.tp)
            await self._abandon(st, md)

    def copy_candidates(self, lg: Log) -> list[tuple[LogSegment, int]]:
        """(segment, next segment's base offset) of each rolled segment not yet copied whose data is
        all below the last stable offset, oldest first. Nothing of an offline log, and nothing from a
        segment whose file holds more than its batches (a torn write) on: a torn segment is never uploaded."""
        lso = lg.last_stable_offset
        if lg.config.compact:  # only cleaned segments (docs/tiered-storage.md, "Compacted topics")
            lso = min(lso, self.cleaned_up_to(lg.topic, lg.partition) or 0)
        if lso <= 0 or lg.offline is not None:
            return []
        start = max(lg.highest_offset_in_remote_storage + 1, lg.log_start_offset)
        segments = list(lg.segments)
        out = []
        for i in range(len(segments) - 1):
            seg, nxt = segments[i], segments[i + 1]
            if nxt.base_offset <= start:
                continue  # wholly copied (or below the log start offset)
            if nxt.base_offset > lso:
                break
            if not seg.is_intact():
                log.warning("Not copying segment %s: the file holds more than its %d bytes of batches",
                            seg.log_path, seg.size)
                break
            out.append((seg, nxt.base_offset))
        return out

    async def _copy_once(self, st: PartitionTasks) -> None:
        if st.copy_stopped or self._term(st) is None:  # fenced: nothing until the controller's next term
            return
        lg = st.log
        if st.first_copy_run:
            # Every event of the previous leader first (a broker that followed may not have read its last
            # uploads yet), then the highest offset already remote in this lineage.
            await self.rlmm.catch_up(st.tp)
            self._init_remote_offsets(st)
            await self._clean_dangling_uploads(st)
            st.first_copy_run = False
        # A segment copied only up to its middle (by an earlier leader) is uploaded whole again; the
        # metadata cache then serves each offset from the newest upload.
        candidates = self.copy_candidates(lg)
        delayed = copy_delayed(lg, [seg for seg, _ in candidates], time.time() * 1000)
        if lg.config.compact:
            # Replacements first (they are older offsets), then the new segments; before both, the
            # segments a finished replacement superseded (a crash may have come between the two). Runs
            # that cross this leader's segment boundaries are rebuilt from the local data; the local
            # segments they touch are not replaced whole.
            await self._retire_replaced(st)
            runs = [r for r in self.rebuild_runs(st) if r.replaceable]
            for run in runs:
                if st.stop_copy or not await self._within_copy_quota(st, run.local_bytes):
                    return
                if not await self._rebuild_run(st, run):
                    return
                await self._retire_replaced(st)
            aligned = [(seg, end) for seg, end in self.replacement_candidates(st)
                       if not any(r.overlaps(seg.base_offset, end) for r in runs)]
            candidates = aligned + candidates[:len(candidates) - delayed]
            delayed = 0
        for seg, next_base in candidates[:len(candidates) - delayed]:
            if st.stop_copy or not await self._within_copy_quota(st, seg.size):
                return
            if not await self._copy_segment(st, seg, next_base):
                return  # abandoned: the next round starts again from the highest finished offset
            if lg.config.compact:
                await self._retire_replaced(st)
        self._update_copy_lag(st)

    # ------------------------------------------------------------------------- compacted topics

    def _serving(self, st: PartitionTasks, offset: int) -> RemoteLogSegmentMetadata | None:
        """The finished segment a remote read of ``offset`` gets (the metadata cache's answer for the
        offset's leader epoch): the newest upload holding it, in the order uploads finished."""
        epoch = st.log.leader_epoch_cache.epoch_for_offset(offset)
        return None if epoch < 0 else self.rlmm.remote_log_segment_metadata(st.tp, epoch, offset)

    def remote_copy_state(self, st: PartitionTasks, base: int, end: int, size: int) -> str:
        """How the remote tier holds the local segment ``[base, end)`` of ``size`` bytes: ``current`` (the
        segments reads get for its offsets lie within it and their sizes add up), ``stale`` (the cleaner
        changed it after its upload, or part of it is missing), ``unaligned`` (a remote segment reaches
        outside it: never replaced)."""
        cur, total = base, 0
        while cur < end:
            md = self._serving(st, cur)
            if md is None:
                return "stale"
            if md.start_offset < base or md.end_offset >= end:
                return "unaligned"
            total += md.segment_size_in_bytes
            cur = md.end_offset + 1
        return "current" if total == size else "stale"

    def replacement_candidates(self, st: PartitionTasks) -> list[tuple[LogSegment, int]]:
        """(segment, next base) of each cleaned local segment already uploaded whose remote copy is stale:
        the log cleaner rewrote it after its upload (docs/tiered-storage.md, "Compacted topics")."""
        lg = st.log
        cleaned = self.cleaned_up_to(lg.topic, lg.partition) or 0
        highest = lg.highest_offset_in_remote_storage
        if lg.offline is not None or highest < 0:
            return []
        segments = list(lg.segments)
        out = []
        for seg, nxt in zip(segments, segments[1:]):
            end = nxt.base_offset
            if end - 1 > highest or end > cleaned:
                break
            if end <= lg.log_start_offset or not seg.is_intact():
                continue
            if self.remote_copy_state(st, seg.base_offset, end, seg.size) == "stale":
                out.append((seg, end))
        return out

    def remote_copy_check(self, st: PartitionTasks) -> Callable[[LogSegment, int], bool]:
        """Local retention's question, for one pass, for each copied segment of a led compacted log: may it go?
        Not while the cleaner's latest version of it still waits for its upload. The rebuild runs are worked
        out once per pass, at the first segment that needs them."""
        lg = st.log
        if not lg.config.compact or self.partitions.get(st.tp) is not st:
            return lambda seg, end: True
        runs: list[Run] | None = None

        def current(seg: LogSegment, end: int) -> bool:
            nonlocal runs
            try:
                if self.remote_copy_state(st, seg.base_offset, end, seg.size) == "stale":
                    return False
                if runs is None:
                    runs = [r for r in self.rebuild_runs(st) if r.stale]
                # A stale run of remote segments touching it waits for its rebuild from the local data.
                return not any(r.overlaps(seg.base_offset, end) for r in runs)
            except Exception:  # noqa: BLE001 - metadata still loading or unavailable: keep it, ask next pass
                return False
        return current

    def rebuild_runs(self, st: PartitionTasks) -> list[Run]:
        """The runs of finished remote segments (overlapping ranges chained, docs/tiered-storage.md, "When the
        boundaries differ") that touch a local segment whose remote offsets are not served by segments lying
        within it: this leader's boundaries differ from the uploader's. Each says whether it is stale
        (overlapping segments, or fewer local bytes than remote) and replaceable (the local log holds its
        whole range between batches, cleaned, below the last stable offset and the highest remote offset)."""
        lg = st.log
        highest = lg.highest_offset_in_remote_storage
        if lg.offline is not None or highest < 0:
            return []
        segments = list(lg.segments)
        unaligned = [(seg.base_offset, nxt.base_offset) for seg, nxt in zip(segments, segments[1:])
                     if seg.base_offset <= highest
                     and self.remote_copy_state(st, seg.base_offset, nxt.base_offset, seg.size) == "unaligned"]
        entries = filtered_epochs(lg.leader_epoch_cache.entries)
        leo = lg.log_end_offset
        finished = [md for md in self.rlmm.list_remote_log_segments(st.tp)
                    if md.state == S.COPY_SEGMENT_FINISHED and md.segment_id not in st.being_copied
                    and within_lineage(md, leo, entries)]
        limit = min(self.cleaned_up_to(lg.topic, lg.partition) or 0, lg.last_stable_offset, highest + 1)
        out = []
        for run in overlap_runs(finished):
            if len(run.members) == 1 and not any(run.overlaps(base, end) for base, end in unaligned) \
                    or run.start < lg.log_start_offset:
                continue
            run.pieces = local_pieces(segments, run.start, run.end + 1)
            if run.pieces is None:
                continue  # the local log does not hold the range (or not between batches): stays as it is
            # A member covering the whole run is an earlier rebuild whose replaced segments wait for their
            # retirement: the run is stale only if the cleaner shrank the range since.
            whole = [m for m in run.members if m.start_offset == run.start and m.end_offset == run.end]
            newest = max(whole or run.members, key=lambda m: m.event_timestamp_ms)
            run.stale = (len(run.members) > 1 and not whole) or run.local_bytes < newest.segment_size_in_bytes
            run.replaceable = run.stale and run.end + 1 <= limit and all(seg.is_intact() for seg, _, _ in run.pieces)
            out.append(run)
        return out

    async def _rebuild_run(self, st: PartitionTasks, run: Run) -> bool:
        """Upload one segment covering exactly ``run``'s range, written from the cleaned local batches of that
        range; the run's segments are retired after it finished (:meth:`_retire_replaced`). False when the
        upload was abandoned because the leadership ended meanwhile."""
        lg, tp = st.log, st.tp
        entries = lg.leader_epoch_cache.entries
        epochs = run_epochs(epochs_in_range(entries, run.start, run.end + 1), run)
        if not epochs:
            raise RuntimeError(f"no leader epoch covers offsets {run.start}..{run.end} of {tp}")
        root = os.path.join(os.path.dirname(lg.dir), remote_rebuild.FOLDER)
        prefix = f"{os.path.basename(lg.dir)}."
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.copier_pool, remote_rebuild.clear_leftovers, root, prefix)
        local = [seg for seg, _, _ in run.pieces]
        snapshot = None
        local_snapshot = snapshot_path(lg.dir, run.end + 1)
        try:
            snapshot = await self._in_pool(st, self.copier_pool, Path(local_snapshot).read_bytes)
        except FileNotFoundError:
            last = max((md for md in run.members if md.end_offset == run.end), key=lambda md: md.event_timestamp_ms)
            try:
                snapshot = await self._in_pool(st, self.copier_pool, self.rsm.fetch_index, last,
                                               IndexType.PRODUCER_SNAPSHOT)
            except RemoteResourceNotFoundError:
                snapshot = None  # uploaded without one (no idempotent producer yet)
        aborted = await self._in_pool(st, self.copier_pool, remote_rebuild.aborted_in, local, run.start, run.end)
        directory = os.path.join(root, prefix + uuid_to_str(RemoteLogSegmentId.generate(tp).id))
        cfg = lg.config
        built = await self._in_pool(st, self.copier_pool, functools.partial(
            remote_rebuild.build, directory, run.start, run.pieces, index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes, aborted=aborted, snapshot=snapshot))
        built.segment.close()
        cancelled = False
        try:
            current = list(lg.segments)
            if any(not any(seg is c for c in current) for seg in local):
                log.debug("Local segments of %s changed while rebuilding offsets %d-%d; trying again next round",
                          tp, run.start, run.end)
                return True
            max_ts = built.max_timestamp if built.max_timestamp >= 0 else max(
                md.max_timestamp_ms for md in run.members)
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), run.start, run.end, max_ts,
                                          self.broker_id, _now_ms(), built.size, epochs)
            seg = built.segment
            data = LogSegmentData(
                log_segment=Path(seg.log_path), offset_index=Path(seg.offset_index.path),
                time_index=Path(seg.time_index.path),
                producer_snapshot_index=Path(built.snapshot) if built.snapshot else None,
                leader_epoch_index=leader_epoch_checkpoint_bytes(checkpoint_through(entries, epochs, run.start)),
                transaction_index=Path(built.txn_index) if built.txn_index else None)
            log.info("Rebuilding remote offsets %d-%d of %s (%d segment(s), %d bytes) from the cleaned local log "
                     "as one segment of %d bytes", run.start, run.end, tp, len(run.members),
                     sum(m.segment_size_in_bytes for m in run.members), built.size)
            return await self._upload(st, md, data)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # Left in place when cancelled mid-upload (the store call may still read them): the next rebuild
            # of the partition removes them.
            if not cancelled:
                remote_rebuild.remove(directory)

    def replaced_segments(self, st: PartitionTasks) -> list[RemoteLogSegmentMetadata]:
        """Finished segments that reads no longer get because a segment finished after them contains them (a
        compacted segment's replacement): the metadata cache's order decides, as for readers, never clocks."""
        out = []
        for md in self.rlmm.list_remote_log_segments(st.tp):
            if md.state != S.COPY_SEGMENT_FINISHED:
                continue
            epoch, start = next(iter(md.segment_leader_epochs.items()))
            serving = self.rlmm.remote_log_segment_metadata(st.tp, epoch, start)
            if serving is not None and serving.segment_id != md.segment_id \
                    and serving.start_offset <= md.start_offset and serving.end_offset >= md.end_offset:
                out.append(md)
        return out

    async def _retire_replaced(self, st: PartitionTasks) -> None:
        """Mark replaced segments DELETE_SEGMENT_STARTED (the expiration task deletes their objects). Only
        ever after their replacement is COPY_SEGMENT_FINISHED, so a crash between the two leaves both
        readable and the next run (of whichever broker leads) comes back here."""
        for md in self.replaced_segments(st):
            if md.segment_id in st.being_copied:
                continue
            log.info("Remote segment %s (offsets %d-%d) of %s was replaced by a newer compacted upload",
                     md.segment_id.id, md.start_offset, md.end_offset, st.tp)
            await self._update(md, S.DELETE_SEGMENT_STARTED)

    async def _within_copy_quota(self, st: PartitionTasks, size: int) -> bool:
        """Wait until the broker-wide copy quota allows another upload, then count the segment against it
        before the upload starts (Kafka's order: one segment may overshoot, the next one waits). False
        when copying was turned off meanwhile."""
        while (throttle_ms := self.copy_quota.throttle_time_ms()) > 0:
            wait_s = min(throttle_ms, _QUOTA_RECHECK_MS) / 1000
            log.debug("Copy quota exceeded; %s waits %.3f s before its next upload", st.tp, wait_s)
            await asyncio.sleep(wait_s)
            self.metrics.copy_throttle_seconds.inc(wait_s)
            if st.stop_copy:
                return False
        self.copy_quota.record(size)  # no await between the check and this: copy tasks cannot both pass
        return True

    async def _copy_segment(self, st: PartitionTasks, seg, next_base: int) -> bool:
        """Upload one segment; True once it is COPY_SEGMENT_FINISHED, False when it was abandoned because
        the leadership it belongs to ended meanwhile."""
        lg, tp = st.log, st.tp
        entries = lg.leader_epoch_cache.entries
        epochs = epochs_in_range(entries, seg.base_offset, next_base)
        if not epochs:
            raise RuntimeError(f"no leader epoch covers offsets {seg.base_offset}..{next_base - 1} of {tp}")
        size = seg.size
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), seg.base_offset, next_base - 1,
                                      seg.largest_timestamp(), self.broker_id, _now_ms(), size, epochs)
        snapshot = snapshot_path(lg.dir, next_base)
        if not os.path.exists(snapshot):
            log.warning("No producer snapshot at offset %d for %s; uploading segment %d without one", next_base,
                        tp, seg.base_offset)
            snapshot = None
        # The transaction index exists only once a transaction was aborted in the segment (Kafka uploads it then).
        txn_index = Path(seg.txn_index.path) if seg.txn_index.exists() else None
        data = LogSegmentData(
            log_segment=Path(seg.log_path), offset_index=Path(seg.offset_index.path),
            time_index=Path(seg.time_index.path), producer_snapshot_index=Path(snapshot) if snapshot else None,
            leader_epoch_index=leader_epoch_checkpoint_bytes((e, o) for e, o in entries if o < next_base),
            transaction_index=txn_index)
        return await self._upload(st, md, data, seg.flush_indexes)

    async def _upload(self, st: PartitionTasks, md: RemoteLogSegmentMetadata, data: LogSegmentData,
                      before=None) -> bool:
        """COPY_SEGMENT_STARTED, the store call, COPY_SEGMENT_FINISHED; True once finished, False when it was
        abandoned because the leadership it belongs to ended meanwhile. ``before`` runs once the upload is
        announced, before the store reads the files."""
        lg, tp = st.log, st.tp
        size = md.segment_size_in_bytes
        term = self._term(st)
        if term is None:
            return False  # fenced: the caller stops the round
        epoch, session = term
        st.being_copied.add(md.segment_id)
        finishing = False
        try:
            await self.rlmm.add_remote_log_segment_metadata(md)
            self.metrics.copy_requests.inc(topic=tp.topic)
            if before is not None:
                before()
            try:
                custom = await self._in_pool(st, self.copier_pool, self.rsm.copy_log_segment_data, md, data)
            except Exception as e:
                self.metrics.copy_errors.inc(topic=tp.topic)
                log.debug("Copy of segment %d of %s (%s) failed: %s; what was uploaded is removed",
                          md.start_offset, tp, md.segment_id.id, e)
                await self._abandon(st, md)
                raise
            if custom is not None and len(custom) > self.custom_metadata_max_bytes:
                self.metrics.copy_errors.inc(topic=tp.topic)
                finished = md.with_update(RemoteLogSegmentMetadataUpdate(
                    md.segment_id, _now_ms(), custom, S.COPY_SEGMENT_FINISHED, self.broker_id))
                await self._abandon(st, finished)
                raise CustomMetadataSizeLimitExceededError(
                    f"custom metadata of {len(custom)} bytes for segment {md.start_offset} of {tp} exceeds "
                    f"remote.log.metadata.custom.metadata.max.bytes={self.custom_metadata_max_bytes}")
            fenced = self._fenced(st, epoch, session)
            if fenced is not None:
                # The leadership this upload belongs to ended while the store call ran (the replica
                # manager moved the epoch; stop_tasks has not cancelled this task yet). Kafka checks
                # isLeader() before each upload only; tierlog also checks after it: publishing
                # FINISHED now would race the new leader, which resumes after the highest finished
                # offset it read and may upload these offsets again (two live segments over the same
                # offsets). Abandoned, the new leader's expiration deletes the objects. When this broker
                # still leads (only the epoch moved: a follower left the ISR), the caller stops the round
                # and the next one uploads these offsets again in the new epoch: going on with the next
                # segment would leave a gap that local retention then makes permanent. A lost ZooKeeper
                # session fences the same way: the broker learns of it before the controller's push.
                log.info("Abandoning the upload %s of segment %d of %s: %s during it",
                         md.segment_id.id, md.start_offset, tp, fenced)
                await self._abandon(st, md)
                return False
            finishing = True
            await self._update(md, S.COPY_SEGMENT_FINISHED, custom)
        except asyncio.CancelledError:
            if not finishing:  # FINISHED maybe published: the new leader may count it, so it stays
                st.cut_short.append(md)
            raise
        finally:
            st.being_copied.discard(md.segment_id)
        self.metrics.copy_bytes.inc(size, topic=tp.topic)
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, md.end_offset)
        log.debug("Copied segment %d-%d of %s (%d bytes)", md.start_offset, md.end_offset, tp, size)
        return True

    async def _abandon(self, st: PartitionTasks, md: RemoteLogSegmentMetadata) -> None:
        """A failed, refused or unfinished upload: mark it DELETE_SEGMENT_STARTED; the expiration task
        deletes its objects. When even the event cannot be written, the expiration task writes it later."""
        try:
            await self._update(md, S.DELETE_SEGMENT_STARTED)
        except Exception as e:  # noqa: BLE001 - kept in abandoned: retried by every expiration run
            log.debug("Could not mark the failed upload %s of %s for deletion: %s", md.segment_id.id, st.tp, e)
            st.abandoned[md.segment_id] = md  # before the caller discards it from being_copied

    def _update_copy_lag(self, st: PartitionTasks) -> None:
        lag = self.copy_candidates(st.log)
        # Rolled segments beyond the last stable offset are not eligible yet but still count as lag.
        self.metrics.copy_lag_segments.set(len(lag), topic=st.tp.topic, partition=st.tp.partition)
        self.metrics.copy_lag_bytes.set(sum(s.size for s, _ in lag), topic=st.tp.topic, partition=st.tp.partition)

    # ----------------------------------------------------------------------------------- expiration

    def retention_candidates(self, st: PartitionTasks, now_ms: int | None = None
                             ) -> tuple[list[RemoteLogSegmentMetadata], int | None]:
        """The remote segments retention deletes now and the new log start offset (if it moves)."""
        lg, tp = st.log, st.tp
        cfg = lg.config
        now = _now_ms() if now_ms is None else now_ms
        entries = filtered_epochs(lg.leader_epoch_cache.entries)
        leo = lg.log_end_offset
        log_start = lg.log_start_offset
        everything = self.rlmm.list_remote_log_segments(tp)
        if not everything:
            return [], None
        remaining = None
        delete_policy = cfg.delete_enabled  # compact-only: no time or size retention (as a local compacted log)
        if cfg.retention_bytes > -1 and delete_policy:
            seen = set()
            remote_size = 0
            for md in everything:
                if md.state == S.COPY_SEGMENT_FINISHED and md.segment_id not in seen \
                        and segment_within_leader_epochs(md, leo, entries):
                    seen.add(md.segment_id)
                    remote_size += md.segment_size_in_bytes
            only_local = sum(s.size for s in lg.segments if s.base_offset > lg.highest_offset_in_remote_storage)
            total = remote_size + only_local
            if total > cfg.retention_bytes:
                remaining = total - cfg.retention_bytes
        cleanup_until = now - cfg.retention_ms if cfg.retention_ms > -1 and delete_policy else None
        first_epoch = entries[0][0] if entries else None
        doomed: list[RemoteLogSegmentMetadata] = []
        doomed_ids: set = set()
        new_start = None
        can_process = True
        for epoch, _ in entries:
            if not can_process:
                break
            for md in self.rlmm.list_remote_log_segments(tp, epoch):
                if not can_process:
                    break
                if md.segment_id in st.being_copied:
                    can_process = False
                    break
                if md.state != S.COPY_SEGMENT_FINISHED or md.segment_id in doomed_ids:
                    # Deleted, being deleted or abandoned (a failed or unfinished upload): the clean-up
                    # deletes those whatever retention says (see cleanup_candidates).
                    continue
                delete = (first_epoch is not None and all(e <= first_epoch for e in md.segment_leader_epochs)
                          and md.end_offset < log_start)
                valid = False
                if not delete:
                    valid = segment_within_leader_epochs(md, leo, entries)
                    if valid:
                        if cleanup_until is not None and md.max_timestamp_ms <= cleanup_until:
                            delete = True
                        elif remaining is not None and remaining - md.segment_size_in_bytes >= 0:
                            remaining -= md.segment_size_in_bytes
                            delete = True
                        if delete:
                            new_start = max(new_start or 0, md.end_offset + 1)
                if delete:
                    doomed.append(md)
                    doomed_ids.add(md.segment_id)
                can_process = delete or not valid
        # Segments of epochs older than the whole local lineage (an unclean election, or epochs trimmed
        # by a log start offset move): nothing can read them any more.
        if first_epoch is not None:
            for md in everything:
                if md.segment_id not in doomed_ids and md.segment_id not in st.being_copied \
                        and max(md.segment_leader_epochs) < first_epoch and md.state == S.COPY_SEGMENT_FINISHED:
                    doomed.append(md)
                    doomed_ids.add(md.segment_id)
        return doomed, new_start

    def cleanup_candidates(self, st: PartitionTasks) -> list[RemoteLogSegmentMetadata]:
        """The DELETE_SEGMENT_STARTED segments whose objects are still to delete (failed uploads,
        deletions that failed half-way), oldest first; not those whose upload is still being abandoned."""
        return sorted((md for md in self.rlmm.list_remote_log_segments(st.tp)
                       if md.state == S.DELETE_SEGMENT_STARTED and md.segment_id not in st.being_copied),
                      key=lambda md: md.start_offset)

    def _expiration_candidates(self, st: PartitionTasks, find_dangling: bool):
        dangling = self.dangling_uploads(st, own=find_dangling)
        return self.cleanup_candidates(st), dangling, *self.retention_candidates(st)

    async def _expire_once(self, st: PartitionTasks) -> None:
        tp, lg = st.tp, st.log
        term = self._term(st)
        if term is None:
            return  # fenced: nothing is deleted until the controller's next term
        epoch, session = term
        failure = await self._mark_abandoned(st)
        # Without a copy task (copying disabled, or stopped for good), nothing abandons the uploads a
        # previous leadership left unfinished: this task does, when no copy task started meanwhile. With one,
        # it abandons those retention passed (another broker's, which the copy task leaves alone).
        copy_tasks_started = st.copy_tasks_started
        find_dangling = st.copy_task is None
        # A scan over every remote segment of the partition (100,000s on a long-lived topic): on the
        # expiration pool, so the event loop keeps serving requests meanwhile.
        unclean, dangling, doomed, new_start = await asyncio.get_running_loop().run_in_executor(
            self.expiration_pool, self._expiration_candidates, st, find_dangling)
        if dangling and (not find_dangling or st.copy_task is None and st.copy_tasks_started == copy_tasks_started):
            for md in dangling:
                log.info("Removing the unfinished upload %s of segment %d of %s", md.segment_id.id, md.start_offset,
                         tp)
                await self._abandon(st, md)  # deleted by the next run
        if new_start is not None and new_start > lg.log_start_offset:
            # Readers stop asking for these offsets before the objects disappear.
            lg.increment_log_start_offset_from_remote(new_start)
            log.info("Remote retention moved the log start offset of %s to %d", tp, new_start)
        self.metrics.delete_lag_segments.set(len(doomed) + len(unclean), topic=tp.topic, partition=tp.partition)
        self.metrics.delete_lag_bytes.set(sum(md.segment_size_in_bytes for md in (*doomed, *unclean)),
                                          topic=tp.topic, partition=tp.partition)
        # Clean-up first, and never in retention's way: it stops at its first failure (the store is
        # probably down; the next run tries again) and retention still runs.
        for md in unclean:
            try:
                await self._delete_segment(st, md, epoch, session)
            except Exception as e:  # noqa: BLE001 - raised below, after retention had its turn
                failure = failure or e
                break
        for md in doomed:
            if self._fenced(st, epoch, session) is not None:
                break  # retention is the next leader's now
            md = await self._update(md, S.DELETE_SEGMENT_STARTED)
            # A failure leaves it DELETE_SEGMENT_STARTED: cleaned up later.
            await self._delete_segment(st, md, epoch, session)
        if failure is not None:
            raise failure
        await asyncio.get_running_loop().run_in_executor(self.expiration_pool, self._update_size_metrics, st)

    async def _mark_abandoned(self, st: PartitionTasks) -> Exception | None:
        """Write the DELETE_SEGMENT_STARTED events the copy task could not; the first failure, if any."""
        for segment_id, md in list(st.abandoned.items()):
            try:
                await self._update(md, S.DELETE_SEGMENT_STARTED)
            except Exception as e:  # noqa: BLE001 - stays abandoned: the next run tries again
                return e
            st.abandoned.pop(segment_id, None)
        return None

    async def _delete_segment(self, st: PartitionTasks, md: RemoteLogSegmentMetadata, epoch: int,
                              session: object) -> None:
        """Delete the objects of a DELETE_SEGMENT_STARTED segment, then mark it DELETE_SEGMENT_FINISHED; a
        fenced leader (``_fenced``) leaves it DELETE_SEGMENT_STARTED, for the next leader's clean-up."""
        fenced = self._fenced(st, epoch, session)
        if fenced is not None:
            log.info("Leaving the deletion of remote segment %s of %s to the next leader: %s", md.segment_id.id,
                     st.tp, fenced)
            return
        self.metrics.delete_requests.inc(topic=st.tp.topic)
        try:
            await self._in_pool(st, self.expiration_pool, self.rsm.delete_log_segment_data, md)
        except Exception:
            self.metrics.delete_errors.inc(topic=st.tp.topic)
            raise
        self._evict_from_index_cache(md)
        await self._update(md, S.DELETE_SEGMENT_FINISHED)

    def _update_size_metrics(self, st: PartitionTasks) -> None:
        segments = self.rlmm.list_remote_log_segments(st.tp)
        self.metrics.log_size_bytes.set(sum(md.segment_size_in_bytes for md in segments
                                            if md.state == S.COPY_SEGMENT_FINISHED),
                                        topic=st.tp.topic, partition=st.tp.partition)
        self.metrics.log_metadata_count.set(len(segments), topic=st.tp.topic, partition=st.tp.partition)
        self.metrics.delete_lag_segments.set(0, topic=st.tp.topic, partition=st.tp.partition)
        self.metrics.delete_lag_bytes.set(0, topic=st.tp.topic, partition=st.tp.partition)

    def _evict_from_index_cache(self, md: RemoteLogSegmentMetadata) -> None:
        self.reader.evict(md)

    # ---------------------------------------------------------------------------------------- status

    def loaded(self, st: PartitionTasks) -> bool:
        """Whether the partition's remote state is known: its metadata loaded and, with a copy task, that
        task's first run done (it reads the highest remote offset; until then the log says -1). A copy
        task that stopped before its first run (copying disabled right after this broker took the
        leadership) will not do it: the partition counts as loaded, not "loading" for good."""
        copying = st.copy_task is not None and not st.copy_task.done()
        return self.rlmm.is_ready(st.tp) and (not copying or not st.first_copy_run)

    def partition_status(self, st: PartitionTasks, now_ms: int | None = None) -> dict:
        """What ``tierlog tier status`` shows for one partition. While its remote metadata loads after a
        restart (``state`` "loading") every figure that depends on it is None, never a wrong number."""
        lg, tp = st.log, st.tp
        loaded = self.loaded(st)
        status = {
            "topic": tp.topic, "partition": tp.partition, "state": "ready" if loaded else "loading",
            "role": "leader", "leader": self.broker_id,  # the leader copies and expires
            "log_start_offset": lg.log_start_offset,
            "local_log_start_offset": lg.local_log_start_offset, "log_end_offset": lg.log_end_offset,
            "highest_offset_in_remote_storage": None,
            "local_segments": len(lg.segments), "local_bytes": lg.size_in_bytes,
            "ready": loaded, "copy_enabled": st.copy_task is not None and not st.stop_copy,
            "last_error": st.copy_stopped or st.last_error, "last_error_ms": st.last_error_ms,
            # Known once the partition's remote metadata is loaded:
            "remote_segments": None, "remote_bytes": None, "remote_segments_in_progress": None,
            "remote_segments_to_clean": None, "copy_lag_segments": None, "copy_lag_bytes": None,
            "pending_local_deletion_segments": None, "pending_local_deletion_bytes": None,
        }
        if loaded:
            segments = self.rlmm.list_remote_log_segments(tp)
            finished = [md for md in segments if md.state == S.COPY_SEGMENT_FINISHED]
            lag = self.copy_candidates(lg)
            # Failed uploads and deletions whose objects the clean-up still has to delete.
            to_clean = {md.segment_id for md in segments if md.state == S.DELETE_SEGMENT_STARTED} | set(st.abandoned)
            try:  # copied and past local retention: deleted by the next retention check
                due = [] if lg.offline is not None else lg.segments_due_for_deletion(now_ms)
            except Exception as e:  # noqa: BLE001 - a status answer, not a reason to fail it
                log.debug("Could not work out the pending local deletions of %s: %s", tp, e)
                due = []
            status.update(highest_offset_in_remote_storage=lg.highest_offset_in_remote_storage,
                          pending_local_deletion_segments=len(due),
                          pending_local_deletion_bytes=sum(seg.size for seg in due),
                          remote_segments=len(finished),
                          remote_bytes=sum(md.segment_size_in_bytes for md in finished),
                          remote_segments_in_progress=len(segments) - len(finished),
                          remote_segments_to_clean=len(to_clean),
                          copy_lag_segments=len(lag), copy_lag_bytes=sum(s.size for s, _ in lag))
        return status

    def follower_status(self, tp: TopicIdPartition, partition: TopicPartitionLog) -> dict:
        """A follower partition's row: its own log and how far it knows the leader's uploads to go (what it
        may delete locally); the copy and remote figures are the leader's to report."""
        lg = partition.log
        loaded = self.rlmm.is_ready(tp)
        return {
            "topic": tp.topic, "partition": tp.partition, "state": "ready" if loaded else "loading",
            "role": "follower", "leader": getattr(partition, "leader_id", -1),
            "log_start_offset": lg.log_start_offset, "local_log_start_offset": lg.local_log_start_offset,
            "log_end_offset": lg.log_end_offset,
            "highest_offset_in_remote_storage": lg.highest_offset_in_remote_storage if loaded else None,
            "local_segments": len(lg.segments), "local_bytes": lg.size_in_bytes, "ready": loaded,
            "copy_enabled": False, "last_error": lg.offline, "last_error_ms": -1,
        }

    def status(self, topic: str | None = None, now_ms: int | None = None) -> list[dict]:
        """Every partition tiered here, led (copy and remote figures) or followed, by topic and partition."""
        rows = [(tp, self.partition_status(st, now_ms)) for tp, st in self.partitions.items()]
        rows += [(tp, self.follower_status(tp, partition)) for tp, (partition, _) in self.followers.items()]
        return [row for tp, row in sorted(rows, key=lambda r: (r[0].topic, r[0].partition))
                if topic is None or tp.topic == topic]

    def not_ready_reason(self) -> str | None:
        """None once the metadata manager is up and every partition followed here is loaded (its remote
        offsets read); else why not (the broker's /ready answer)."""
        reason = self.rlmm.not_ready_reason()
        if reason is not None:
            return reason
        loading = sorted(str(st.tp) for st in self.partitions.values() if not self.loaded(st))
        if loading:
            shown = ", ".join(loading[:5]) + (f" and {len(loading) - 5} more" if len(loading) > 5 else "")
            return (f"remote log metadata of {len(loading)} of {len(self.partitions)} tiered partition(s) still "
                    f"loading: {shown}")
        return None

    # ------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, delete: bool = False, cluster_id: str | None = None,
                        known_topic_ids: set | None = None, deleted_topic_ids: set | None = None) -> dict:
        """Compare the remote store with the metadata: objects no metadata references (orphans, e.g. of an
        upload cut short by a crash) and finished segments whose objects are missing. With ``delete`` the
        orphans are removed. Partitions whose metadata is still loading, or whose remote data is being
        deleted right now, are left alone.

        A store may be shared with other clusters. Objects in another cluster's folder (``cluster_id`` is
        this cluster's), and objects of topic ids this cluster never knew (not in ``known_topic_ids``:
        its topics and the topics it deleted), are *foreign*: reported, never deleted. Objects of the
        partitions this broker leads or follows are checked against their metadata; orphans are deleted
        only where this broker knows the whole picture: partitions it leads (their metadata loaded) and
        topics this cluster deleted (``deleted_topic_ids``)."""
        loop = asyncio.get_running_loop()
        prefix = self.rsm.key_prefix
        # Objects first, metadata second: an upload always records COPY_SEGMENT_STARTED before it writes.
        objects = await loop.run_in_executor(self.expiration_pool, self.rsm.list_objects, prefix)
        busy = set(self.disabling)
        hosted = [*self.partitions, *self.followers]  # led or followed here: their metadata is read here
        not_ready = sorted(str(tp) for tp in hosted if not self.rlmm.is_ready(tp))
        referenced: set = set()
        finished: list[RemoteLogSegmentMetadata] = []
        followed = set()
        for tp in hosted:
            if not self.rlmm.is_ready(tp):
                busy.add(tp)
                continue
            if tp in self.partitions:
                # Deletable only where this broker leads: a follower may not have read an upload's
                # COPY_SEGMENT_STARTED yet, and would take the upload's objects for orphans.
                followed.add(tp)
            for md in self.rlmm.list_remote_log_segments(tp):
                referenced.add(md.segment_id.id)
                if md.state == S.COPY_SEGMENT_FINISHED:
                    finished.append(md)
        deleted_topics = deleted_topic_ids or set()
        present = {key for key, _ in objects}
        orphans: dict[str, dict] = {}
        foreign: dict[tuple, dict] = {}
        unknown = []
        for key, size in objects:
            pk = layout.parse_key(key, prefix)
            if pk is None:
                unknown.append(key)
                continue
            other_cluster = pk.cluster_id is not None and pk.cluster_id != cluster_id
            if other_cluster or (known_topic_ids is not None and pk.topic_id not in known_topic_ids):
                group = foreign.setdefault((pk.cluster_id or "", pk.topic, pk.topic_id), {
                    "cluster_id": pk.cluster_id, "topic": pk.topic, "topic_id": uuid_to_str(pk.topic_id),
                    "reason": "another cluster's folder" if other_cluster else "a topic id this cluster never had",
                    "objects": 0, "bytes": 0})
                group["objects"] += 1
                group["bytes"] += size
                continue
            tp = TopicIdPartition(pk.topic_id, pk.topic, pk.partition)
            if tp in busy or pk.segment_id in referenced:
                continue
            stem = key[:-len(pk.suffix)]
            entry = orphans.setdefault(stem, {"topic": pk.topic, "partition": pk.partition,
                                              "start_offset": pk.start_offset, "segment_id": str(pk.segment_id),
                                              "keys": [], "bytes": 0, "topic_followed": tp in followed,
                                              "deletable": tp in followed or pk.topic_id in deleted_topics,
                                              "parsed": pk})
            entry["keys"].append(key)
            entry["bytes"] += size
        missing = []
        for md in finished:
            candidates = self.rsm.segment_key_candidates(md)
            if not any(keys.manifest in present and keys.log in present for keys in candidates):
                keys = next((k for k in candidates if k.manifest in present or k.log in present), candidates[0])
                absent = [k for k in (keys.manifest, keys.log) if k not in present]
                missing.append({"topic": md.topic_id_partition.topic, "partition": md.topic_id_partition.partition,
                                "start_offset": md.start_offset, "end_offset": md.end_offset,
                                "segment_id": str(md.segment_id.id), "missing_keys": absent})
        deleted = 0
        if delete:
            for entry in orphans.values():
                if not entry["deletable"]:
                    continue
                pk = entry["parsed"]
                tp = TopicIdPartition(pk.topic_id, pk.topic, pk.partition)
                # The prefix it was found under, as KIP-917 custom metadata: the delete touches that stem only.
                found_under = layout.cluster_prefix(prefix, pk.cluster_id) if pk.cluster_id else prefix
                md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, pk.segment_id), pk.start_offset,
                                              pk.start_offset, -1, self.broker_id, _now_ms(), 0,
                                              {0: pk.start_offset},
                                              custom_metadata=json.dumps({"p": found_under}).encode())
                await loop.run_in_executor(self.expiration_pool, self.rsm.delete_log_segment_data, md)
                deleted += 1
        for entry in orphans.values():
            del entry["parsed"]
        return {"objects": len(objects), "orphans": sorted(orphans.values(), key=lambda e: e["keys"][0]),
                "missing": missing, "foreign": sorted(foreign.values(), key=lambda f: (f["cluster_id"] or "",
                                                                                       f["topic"], f["topic_id"])),
                "unrecognized_keys": unknown, "not_ready": not_ready, "orphans_deleted": deleted}

    # -------------------------------------------------------------------------------------- shutdown

    async def close(self) -> None:
        self.closed = True
        for st in self.partitions.values():
            self._cancel(st)
        pending = [f for st in self.partitions.values() for f in st.in_flight]
        if pending:
            await asyncio.wait(pending, timeout=30)
        for task in list(self._background):
            task.cancel()
        for _, pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        self.reader.close()

    def spawn(self, coro, name: str) -> asyncio.Task:
        """Run ``coro`` in the background, kept until it finishes (topic deletions)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


def copy_delayed(lg, candidates: list, now_ms: float) -> int:
    """How many of the newest ``candidates`` wait for ``remote.copy.lag.ms`` / ``remote.copy.lag.bytes``
    (Kafka trunk): a segment is uploaded once it is at least that old (by its largest timestamp) and at
    least that many bytes of the log follow it. 0 does not delay; -1 stands for the local retention
    value, and where that is unlimited the condition does not delay either (the data still tiers)."""
    cfg = lg.config
    lag_ms = cfg.effective_local_retention_ms if cfg.remote_copy_lag_ms == -1 else cfg.remote_copy_lag_ms
    lag_bytes = cfg.effective_local_retention_bytes if cfg.remote_copy_lag_bytes == -1 else cfg.remote_copy_lag_bytes
    if lag_ms <= 0 and lag_bytes <= 0:
        return 0
    after = {id(seg): 0 for seg in candidates}
    behind = 0
    for seg in reversed(lg.segments):  # bytes of the log after each segment
        if id(seg) in after:
            after[id(seg)] = behind
        behind += seg.size
    for i, seg in enumerate(candidates):  # oldest first: once one waits, every later one waits
        if (lag_ms > 0 and now_ms - seg.largest_timestamp() < lag_ms) or (lag_bytes > 0 and after[id(seg)] < lag_bytes):
            return len(candidates) - i
    return 0
