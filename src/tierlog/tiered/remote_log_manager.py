"""The remote log manager (KIP-405): copies rolled segments to remote storage, expires remote data
by retention, deletes a deleted topic's remote data, and serves reads below the local log start.

``RemoteLogManager`` is the scheduler and owner, as Kafka's: on leadership changes it creates a
``RemotePartitionState`` per led partition and schedules its tasks, each in ``tiered/tasks/``:
``RLMCopyTask`` (with ``CompactionRebuild`` for compacted topics) and ``RLMExpirationTask`` per leader
partition, ``RLMFollowerTask`` per follower partition; ``RemoteTopicDisablement`` carries out KIP-950's
disablement and a deleted topic's remote deletion. Each task runs every ``remote.log.manager.task.interval.ms``
(fixed delay, first run at once), skipped while the metadata manager is not ready for the partition (a restart
still replaying ``__remote_log_metadata``; it looks again every 0.2 s until it is). ``run_copy`` and
``run_expiration`` make one run of a partition's task on demand (tests drive the tasks with them).

Everything runs on the broker's event loop; calls into the storage plugin (blocking I/O) run on thread pools
sized like Kafka's (copier, expiration, reader).

Clean-up. A failed upload (and one this broker left unfinished in an earlier leadership or life) is
abandoned: the copy task marks it DELETE_SEGMENT_STARTED. Another broker's unfinished upload (a previous
leader's, which may still be writing it if it is only paused) is abandoned once retention passes it, as
Kafka does. The expiration task deletes the objects of every DELETE_SEGMENT_STARTED segment
(``tiered/tasks/expiration.py``).

Errors. A partition's ``last_error`` names the first failure of an outage (the cause, not the
clean-up failures that follow) and clears once every task of the partition has run cleanly again,
clean-up included. The first failure of a task is logged at WARNING; repeats of that kind of failure
(the same error type, whatever segment it names) are counted and reported in one line every 5 minutes
(every failure is at DEBUG); the recovery is logged at INFO.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from tierlog.logs import RepeatLimiter
from tierlog.metrics import MetricsRegistry
from tierlog.storage import Log, LogSegment
from tierlog.tiered import reconciler
from tierlog.tiered.metadata import RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.partition import TopicPartitionLog
from tierlog.tiered.quota import RateQuota
from tierlog.tiered.remote_reader import RemoteLogReader
from tierlog.tiered.rlmm import RemoteLogMetadataManager
from tierlog.tiered.rsm import RemoteStorageManager
from tierlog.tiered.tasks.base import RLMTask, leader_term
from tierlog.tiered.tasks.copy import RLMCopyTask, log_copy_candidates
from tierlog.tiered.tasks.disablement import RemoteTopicDisablement
from tierlog.tiered.tasks.expiration import RLMExpirationTask
from tierlog.tiered.tasks.follower import RLMFollowerTask, build_remote_log_aux_state
from tierlog.tiered.tasks.state import RemotePartitionState

log = logging.getLogger(__name__)

S = RemoteLogSegmentState

#: How long the failures of one kind of one task stay one WARNING line, then one line with their count.
_FAILURE_REPORT_S = 300.0


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



def build_remote_log_manager(config, broker_id: int, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                             log_dir: str, registry: MetricsRegistry | None = None,
                             effective_config=None, cleaned_up_to=None,
                             leader_session: Callable[[], object] | None = None) -> RemoteLogManager:
    """The remote log manager with its metrics and its reader (remote reads of ``log_dir``'s index cache)
    wired together. ``effective_config`` returns the current configuration, dynamic changes included;
    ``cleaned_up_to(topic, partition)`` the log cleaner's checkpoint of a log (compacted topics);
    ``leader_session`` a cluster's ZooKeeper session (see :class:`RemoteLogManager`)."""
    current = effective_config or (lambda: config)
    metrics = RemoteStorageMetrics(registry or MetricsRegistry())
    reader = RemoteLogReader(current, rsm, rlmm, metrics, log_dir)
    return RemoteLogManager(config, broker_id, rsm, rlmm, reader, metrics, current, cleaned_up_to,
                            leader_session=leader_session)


class RemoteLogManager:
    """The scheduler and owner of the remote log tasks of the partitions this broker hosts (Kafka's
    ``RemoteLogManager``): ``partitions`` holds the state of each led partition, ``followers`` the follower
    task of each followed one."""

    def __init__(self, config, broker_id: int, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                 reader: RemoteLogReader, metrics: RemoteStorageMetrics, effective_config=None,
                 cleaned_up_to: Callable[[str, int], int | None] | None = None, *,
                 leader_session: Callable[[], object] | None = None) -> None:
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
        self.partitions: dict[TopicIdPartition, RemotePartitionState] = {}
        # Follower partitions: their partition and the task that follows the leader's uploads.
        self.followers: dict[TopicIdPartition, tuple[TopicPartitionLog, asyncio.Task]] = {}
        self.disabling: dict[TopicIdPartition, dict] = {}  # remote data still to delete, per partition
        self._background: set[asyncio.Task] = set()
        self.reader = reader
        self.closed = False
        # A store that stays down (full, say) fails every run with a message naming another segment:
        # one line per partition, task and kind of failure, the repeats counted (the tasks' runs log here).
        self.failure_log = RepeatLimiter(log, _FAILURE_REPORT_S, max_keys=10_000)
        # The session this broker's leaderships hold under (a cluster's ZooKeeper session, ``leader_session``);
        # None while there is none. A leader whose session ended is fenced: the controller may have moved its
        # partitions before this broker hears of it, so it publishes no upload and deletes nothing.
        self.leader_session: Callable[[], object] = leader_session or (lambda: 0)

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
            st = RemotePartitionState(tp, partition)
            leader_term(st, self.leader_session())  # the session this leadership was given in
            self.partitions[tp] = st
            fresh.append(tp)
            if partition.log.offline is not None:  # its log dir failed: listed, never copied
                st.copy_stopped = f"log offline: {partition.log.offline}"
                continue
            self._start_tasks(st)
        if fresh:
            self.rlmm.on_partition_leadership_changes(fresh, [])

    def _start_tasks(self, st: RemotePartitionState) -> None:
        name = f"{st.tp.topic}-{st.tp.partition}"
        st.log.remote_copy_current = lambda: self.remote_copy_check(st)
        if st.copy_task is None and not st.log.config.remote_log_copy_disable:
            st.copy_tasks_started += 1
            st.copy_task = asyncio.get_running_loop().create_task(RLMCopyTask(self, st).loop(),
                                                                  name=f"rlm-copy-{name}")
        if st.expiration_task is None:
            st.expiration_task = asyncio.get_running_loop().create_task(RLMExpirationTask(self, st).loop(),
                                                                        name=f"rlm-expire-{name}")

    def _cancel(self, st: RemotePartitionState) -> None:
        for task in (st.copy_task, st.expiration_task):
            if task is not None:
                task.cancel()
        st.copy_task = st.expiration_task = None

    # ------------------------------------------------------------------------------------ followers

    def on_follow(self, followers: Iterable[TopicPartitionLog]) -> None:
        """Follower partitions whose logs have remote storage in effect: the metadata manager follows their
        metadata partitions, and an ``RLMFollowerTask`` reads every task interval the highest offset the leader
        has uploaded within this replica's leader-epoch lineage, so local retention deletes here what the
        leader tiered, as it does on the leader. Leader tasks of a partition are stopped by the caller
        (``stop_tasks``) when it loses the leadership."""
        fresh = []
        for partition in followers:
            tp = self.topic_id_partition(partition)
            held = self.followers.get(tp)
            if held is not None and held[0] is partition and not held[1].done():
                continue
            self._stop_following(tp)
            task = asyncio.get_running_loop().create_task(RLMFollowerTask(self, tp, partition).loop(),
                                                          name=f"rlm-follow-{tp.topic}-{tp.partition}")
            self.followers[tp] = (partition, task)
            fresh.append(tp)
        if fresh:
            self.rlmm.on_partition_leadership_changes([], fresh)

    def _stop_following(self, tp: TopicIdPartition) -> None:
        held = self.followers.pop(tp, None)
        if held is not None:
            held[1].cancel()

    async def build_follower_state(self, partition: TopicPartitionLog, target_epoch: int, offset: int,
                                   leader_log_start: int) -> int:
        """KIP-405's follower path (Kafka's TierStateMachine.buildRemoteLogAuxState): the follower starts its
        log after the remote segment holding ``offset`` in ``target_epoch``; the offset to fetch from. See
        ``tasks.follower.build_remote_log_aux_state``. The partition is followed here from then on."""
        tp = self.topic_id_partition(partition)
        if tp not in self.followers and tp not in self.partitions:
            self.on_follow([partition])
        return await build_remote_log_aux_state(self, tp, partition, target_epoch, offset, leader_log_start)

    # ------------------------------------------------------------------------ configuration, failures

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
            st.record_error("log dir", st.copy_stopped)
            self._cancel(st)
            self.metrics.copy_lag_bytes.set(0, topic=st.tp.topic, partition=st.tp.partition)
            self.metrics.copy_lag_segments.set(0, topic=st.tp.topic, partition=st.tp.partition)

    # ------------------------------------------------------------------------------------- stopping

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
                await RLMCopyTask(self, st).abandon_cut_short()
            self.metrics.forget(tp)
            stopped.append(tp)
        return stopped

    async def stop_partitions(self, partitions: Iterable[TopicPartitionLog], delete_remote: bool) -> None:
        """Stop tiering these partitions; with ``delete_remote`` (topic deletion) delete all their remote
        data: DELETE_SEGMENT_STARTED for every segment, the objects, then DELETE_SEGMENT_FINISHED."""
        stopped = await self.stop_tasks(partitions)
        if delete_remote:
            for tp in stopped:
                try:
                    await RemoteTopicDisablement(self).delete_all_remote(tp)
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
        await RemoteTopicDisablement(self).disable(led, followed, policy)

    # ------------------------------------------------------------------------------ one run, on demand

    def cancel(self, tp: TopicIdPartition) -> None:
        """Cancel the scheduled copy and expiration runs of led partition ``tp``; its state stays, so
        ``run_copy`` and ``run_expiration`` then drive it one run at a time (tests, tools)."""
        self._cancel(self.partitions[tp])

    async def run_copy(self, tp: TopicIdPartition, raise_errors: bool = True) -> bool:
        """One run of the copy task of led partition ``tp``, now. ``raise_errors``: its failure is raised;
        False: as the scheduler runs it, the failure recorded (``last_error``) and logged, and the answer is
        False when the task stopped for good (KIP-917's size limit), else True."""
        return await self._run(RLMCopyTask(self, self.partitions[tp]), raise_errors)

    async def run_expiration(self, tp: TopicIdPartition, raise_errors: bool = True) -> bool:
        """One run of the expiration task of led partition ``tp``, now; ``raise_errors`` as for ``run_copy``."""
        return await self._run(RLMExpirationTask(self, self.partitions[tp]), raise_errors)

    @staticmethod
    async def _run(task: RLMTask, raise_errors: bool) -> bool:
        if not raise_errors:
            return await task.run()
        await task.execute()
        return True

    def copy_candidates(self, lg: Log) -> list[tuple[LogSegment, int]]:
        """(segment, next segment's base offset) of each rolled segment of ``lg`` not yet copied whose data is
        all below the last stable offset (and cleaned, on a compacted log), oldest first."""
        return log_copy_candidates(lg, self.cleaned_up_to)

    def remote_copy_check(self, st: RemotePartitionState) -> Callable[[LogSegment, int], bool]:
        """Local retention's question, for one pass, for each copied segment of a led compacted log: may it
        go? See ``CompactionRebuild.remote_copy_check``."""
        return RLMCopyTask(self, st).compaction.remote_copy_check()

    # ---------------------------------------------------------------------------------------- status

    def loaded(self, st: RemotePartitionState) -> bool:
        """Whether the partition's remote state is known: its metadata loaded and, with a copy task, that
        task's first run done (it reads the highest remote offset; until then the log says -1). A copy
        task that stopped before its first run (copying disabled right after this broker took the
        leadership) will not do it: the partition counts as loaded, not "loading" for good."""
        copying = st.copy_task is not None and not st.copy_task.done()
        return self.rlmm.is_ready(st.tp) and (not copying or not st.first_copy_run)

    def partition_status(self, st: RemotePartitionState, now_ms: int | None = None) -> dict:
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
        """Compare the remote store with the metadata (orphans, missing objects, foreign objects); with
        ``delete`` remove the orphans this broker may. See ``tiered/reconciler.py``."""
        return await reconciler.reconcile(self, delete, cluster_id, known_topic_ids, deleted_topic_ids)

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
