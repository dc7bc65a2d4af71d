"""Planning a read on the driver: which partitions, which offset ranges, and which tasks read them.

Offsets come from the broker (ListOffsets through tierlog's client). Remote segments come from
``__remote_log_metadata`` itself, read with tierlog's consumer and applied to Kafka's metadata cache
(:mod:`tierlog.tiered.rlmm.cache`), only the metadata partitions that hold the wanted partitions. A range
is cut into tasks:

- one slice per remote segment (or per part of one, for ``minPartitions`` / read limits), read by an
  executor straight from the remote store, for offsets below the partition's local log start; a Spark
  task reads consecutive slices of a partition up to :data:`TASK_BYTES`;
- the rest (the local tail, or everything in ``broker`` mode) through the broker, in slices; a local
  tail is read by the task of its partition's last remote slices, after them.

Only COPY_SEGMENT_FINISHED segments are used, and for each offset the segment the broker itself would
read (the newest upload covering it), so a segment re-uploaded by a later leader is read once. Before
the tasks are handed out the remote store is checked against them (:mod:`tierlog.spark.store`): a store
that holds none of them is a configuration error, not data loss.

The first request waits at most ``tierlog.bootstrapTimeoutMs`` for an answer from the bootstrap
servers, so an unreachable broker fails the query in seconds with one line naming the address.

A query's planning is a fixed cost paid again by every query, so it asks little (issue 41): one Metadata
request for every topic (the reachability check's, which also gives partitions, topic ids and the
metadata topic's partitions), then the offsets it needs, one ListOffsets per kind (earliest, latest,
local log start, a timestamp) for all partitions, the kinds in flight at once and kept for the query
(:meth:`Planner.prefetch`). The remote segment lists of ``__remote_log_metadata`` are kept per process
(:class:`SegmentLists`): Spark reuses its Python workers, and a worker that planned before reads only the
metadata records appended since, from where it stopped; whether anything was appended it learns from the
metadata partitions' end offsets, asked in the same ListOffsets as the partitions' own.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierlog.client.types import TopicPartition
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

from .options import EARLIEST, LATEST, BrokerUnreachableError, SourceOptionError, SourceOptions

if TYPE_CHECKING:  # the client and the metadata manager's cache are imported by the driver's planning only:
    # executors unpickle the slices (this module) and never plan
    from tierlog.client.admin import TopicDescription
    from tierlog.client.sync import Admin
    from tierlog.tiered.rlmm.cache import RemoteLogMetadataCache

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"


@dataclass(frozen=True)
class RemoteSlice:
    """Offsets ``[start, end)`` of one remote segment, read from the remote store by an executor."""

    topic: str
    partition: int
    start: int
    end: int
    segment: RemoteLogSegmentMetadata
    cluster_id: str | None = None  # the segment's objects may be in this cluster's key folder
    # read_committed only: the partition's remote segments from this one to the local log, in the
    # lineage the plan reads (one tuple shared by the partition's slices, pickled once per Spark task),
    # where the aborted transactions of the slice are searched (Kafka's collectAbortedTransactions)
    lineage: tuple[RemoteLogSegmentMetadata, ...] = ()


@dataclass(frozen=True)
class BrokerSlice:
    """Offsets ``[start, end)`` of a partition, read through the broker."""

    topic: str
    partition: int
    start: int
    end: int


LOCAL_START = -4  # ListOffsets' EARLIEST_LOCAL_TIMESTAMP: the local log start offset


class Planner:
    """The driver's connection to the cluster for one query (reused across micro-batches, which call
    :meth:`forget` so each asks the cluster anew)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None
        self._cluster_id: str | None = None
        self._topics: dict[str, TopicDescription] | None = None  # the query's one Metadata answer
        self._offsets: dict[tuple[TopicPartition, int], int] = {}  # the query's ListOffsets answers

    def client_config(self, **extra) -> dict:
        return {**self.opts.client_config, "bootstrap.servers": self.opts.bootstrap_servers, **extra}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            from tierlog.client.sync import Admin
            # isolation.level is the consumers' (ListOffsets takes it per call): not handed to the admin client,
            # which would warn that it ignores it on every query
            admin = Admin({k: v for k, v in self.client_config().items() if k != "isolation.level"})
            try:
                self._reach(admin)
            except BaseException:
                admin.close()
                raise
            self._admin = admin
        return self._admin

    def _reach(self, admin: Admin) -> None:
        """One bounded request, so an unreachable broker fails in seconds (not after the client's
        default.api.timeout.ms and retries) with one line naming the address and the option. It is the
        Metadata of every topic the query plans from (:meth:`topics`)."""
        from tierlog.client.errors import KafkaTimeoutError
        timeout = self.opts.bootstrap_timeout_ms
        try:
            self._topics = admin.describe_all_topics(internal=True, timeout_ms=timeout)
        except KafkaTimeoutError as e:
            raise BrokerUnreachableError(
                f"cannot reach the broker at {self.opts.bootstrap_servers} (kafka.bootstrap.servers) within "
                f"{timeout / 1000:g} s{_why(e)}; check the address and that the broker is running (the wait is "
                f"the option tierlog.bootstrapTimeoutMs)") from None

    def connect(self) -> None:
        """Check that the bootstrap servers answer (raises BrokerUnreachableError)."""
        _ = self.admin

    def forget(self) -> None:
        """Ask the cluster anew from here on (a streaming query's next micro-batch)."""
        self._topics = None
        self._offsets.clear()

    def topics(self) -> dict[str, TopicDescription]:
        """Every topic, internal ones too, from one Metadata request kept for the query."""
        admin = self.admin
        if self._topics is None:
            self._topics = admin.describe_all_topics(internal=True)
        return self._topics

    @property
    def cluster_id(self) -> str | None:
        """The cluster's id: remote keys carry it (docs/tiered-storage-layout.md)."""
        if self._cluster_id is None:
            self._cluster_id = self.admin.describe_cluster().cluster_id
        return self._cluster_id

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # ------------------------------------------------------------------------------ partitions

    def partitions(self) -> list[TopicPartition]:
        opts = self.opts
        if opts.assign is not None:
            return [TopicPartition(t, p) for t, ps in sorted(opts.assign.items()) for p in ps]
        topics = self.topics()
        names = opts.topics_matching([name for name, d in topics.items() if not d.internal])
        return [TopicPartition(t, p.partition) for t in names for p in topics[t].partitions]

    def topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID]:
        known = self.topics()
        for t in sorted(set(topics)):
            if t not in known:
                from tierlog.client.errors import UnknownTopicOrPartitionError
                raise UnknownTopicOrPartitionError(f"Topic {t} not found.")
        return {t: known[t].topic_id for t in set(topics)}

    # ---------------------------------------------------------------------------------- offsets

    def list_offsets(self, specs: dict[TopicPartition, int], cached: bool = True) -> dict[TopicPartition, int]:
        """With ``kafka.isolation.level=read_committed`` "latest" is the last stable offset, as in Spark's
        Kafka source. Answers are kept for the query; ``cached=False`` asks again."""
        if not specs:
            return {}
        wanted = {tp: s for tp, s in specs.items() if not cached or (tp, s) not in self._offsets}
        if wanted:
            self._keep(wanted, self.admin.list_offsets(wanted, isolation_level=self.opts.isolation_level))
        return {tp: self._offsets[(tp, s)] for tp, s in specs.items()}

    def _keep(self, specs: dict[TopicPartition, int], found: dict) -> None:
        for tp, r in found.items():
            self._offsets[(tp, specs[tp])] = r.offset

    def prefetch(self, *kinds: dict[TopicPartition, int], cluster_id: bool = False) -> None:
        """ListOffsets of several kinds (``{partition: spec}`` each) in flight at once, one request per
        kind and leader, their answers kept for :meth:`list_offsets`; with ``cluster_id`` the cluster's id
        too. One round trip where asking kind after kind takes one per kind."""
        import asyncio
        todo = [{tp: s for tp, s in k.items() if (tp, s) not in self._offsets} for k in kinds]
        todo = [k for k in todo if k]
        want_id = cluster_id and self._cluster_id is None
        if len(todo) + want_id < 2:
            for k in todo:
                self.list_offsets(k)
            if want_id:
                _ = self.cluster_id
            return
        iso = self.opts.isolation_level

        def calls(admin):
            asked = [admin.list_offsets(k, isolation_level=iso) for k in todo]
            return asyncio.gather(*asked, *([admin.describe_cluster()] if want_id else []))
        answers = self.admin.run(calls)
        for k, found in zip(todo, answers):
            self._keep(k, found)
        if want_id:
            self._cluster_id = answers[-1].cluster_id

    def bounds(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, high watermark) of each partition."""
        self.prefetch({tp: EARLIEST for tp in tps}, {tp: LATEST for tp in tps})
        starts = self.list_offsets({tp: EARLIEST for tp in tps})
        ends = self.list_offsets({tp: LATEST for tp in tps})
        return {tp: (starts[tp], ends[tp]) for tp in tps}

    def local_starts(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: LOCAL_START for tp in tps})

    def prefetch_plan(self, tps: list[TopicPartition], timestamps: tuple[int | None, ...] = ()) -> None:
        """What planning a read of ``tps`` asks, in one round trip: the partitions' bounds, the first
        offsets at ``timestamps``, and for direct reads their local log starts, the cluster id and the
        offsets of the metadata partitions holding their remote segment lists (:class:`SegmentLists`)."""
        latest = {tp: LATEST for tp in tps}
        earliest = {tp: EARLIEST for tp in tps}
        kinds = [earliest, latest]
        if self.opts.direct and tps:
            for mp in self._metadata_partitions(tps).values():
                latest[mp] = LATEST
                earliest[mp] = EARLIEST
            kinds.append({tp: LOCAL_START for tp in tps})
        kinds += [{tp: ts for tp in tps} for ts in dict.fromkeys(timestamps) if ts is not None and ts >= 0]
        self.prefetch(*kinds, cluster_id=self.opts.direct and bool(tps))

    def resolve(self, tps: list[TopicPartition], spec, timestamp: int | None, by_timestamp: dict | None,
                bounds: dict[TopicPartition, tuple[int, int]], what: str) -> dict[TopicPartition, int]:
        """Starting or ending offsets from ``earliest`` / ``latest`` / JSON / timestamps."""
        out: dict[TopicPartition, int] = {}
        by_time: dict[TopicPartition, int] = {}
        for tp in tps:
            if by_timestamp is not None and tp.partition in by_timestamp.get(tp.topic, {}):
                by_time[tp] = by_timestamp[tp.topic][tp.partition]
            elif timestamp is not None:
                by_time[tp] = timestamp
            elif isinstance(spec, dict):
                wanted = spec.get(tp.topic, {}).get(tp.partition)
                if wanted is None:
                    if what == "starting":
                        raise SourceOptionError(f"startingOffsets does not give {tp.topic}-{tp.partition}")
                    wanted = LATEST
                out[tp] = bounds[tp][0] if wanted == EARLIEST else bounds[tp][1] if wanted == LATEST else wanted
            else:
                out[tp] = bounds[tp][0] if spec == "earliest" else bounds[tp][1]
        if by_time:
            found = self.list_offsets(by_time)
            for tp, offset in found.items():
                out[tp] = offset if offset >= 0 else bounds[tp][1]  # nothing that late: the end
        return out

    # --------------------------------------------------------------------------- remote segments

    def _metadata_partitions(self, tps: list[TopicPartition]) -> dict[TopicIdPartition, TopicPartition]:
        """The ``__remote_log_metadata`` partition holding each partition's segment list (partitions of
        topics without an id have none)."""
        from tierlog.tiered.rlmm.partitioner import metadata_partition
        topics = self.topics()
        described = topics.get(METADATA_TOPIC)
        if described is None:
            return {}  # no metadata topic: nothing was ever tiered
        n = self.opts.metadata_partitions or len(described.partitions)
        ids = self.topic_ids([tp.topic for tp in tps])
        return {TopicIdPartition(ids[tp.topic], tp.topic, tp.partition):
                TopicPartition(METADATA_TOPIC, metadata_partition(ids[tp.topic], tp.partition, n))
                for tp in tps if ids.get(tp.topic)}

    def remote_segments(self, tps: list[TopicPartition], progress=None
                        ) -> dict[TopicPartition, list[RemoteLogSegmentMetadata]]:
        """The finished remote segments of each partition, from ``__remote_log_metadata`` through this
        process's :data:`SEGMENT_LISTS`; ``progress(records, bytes, total records)`` is called as the
        metadata is read."""
        if not tps:
            return {}
        located = self._metadata_partitions(tps)
        out: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {tp: [] for tp in tps}
        if not located:
            return out
        mps = sorted(set(located.values()))
        starts = self.list_offsets({mp: EARLIEST for mp in mps})
        ends = self.list_offsets({mp: LATEST for mp in mps})
        found = SEGMENT_LISTS.read(self, self.topics()[METADATA_TOPIC].topic_id, located, starts, ends, progress)
        for tip, segments in found.items():
            out[TopicPartition(tip.topic, tip.partition)] = [
                md for md in segments if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        return out

    # ----------------------------------------------------------------------------------- tasks

    def plan(self, ranges: dict[TopicPartition, tuple[int, int]], min_partitions: int | None = None
             ) -> list[RemoteSlice | BrokerSlice]:
        """Tasks covering ``[start, end)`` of each partition (empty ranges give no task)."""
        ranges = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        tasks: list[RemoteSlice | BrokerSlice] = []
        if self.opts.direct:
            self.prefetch_plan(list(ranges))  # what is not known yet, in one round trip
        remote = self.remote_segments(list(ranges)) if self.opts.direct else {}
        local_starts = self.local_starts(list(ranges)) if self.opts.direct else {}
        for tp, (start, end) in sorted(ranges.items()):
            cur = start
            if self.opts.direct:
                local_start = local_starts.get(tp, start)
                edge = min(end, local_start)
                lineage: tuple[RemoteLogSegmentMetadata, ...] = ()
                if self.opts.read_committed:
                    lineage = tuple(md for md, _, _ in covering(remote.get(tp, []), cur, local_start))
                for md, lo, hi in covering(remote.get(tp, []), cur, edge):
                    if lo > cur:
                        break  # a gap in remote storage: the broker reads on from here
                    tasks.append(RemoteSlice(tp.topic, tp.partition, lo, hi, md, self.cluster_id, lineage))
                    cur = hi
            if cur < end:
                tasks.append(BrokerSlice(tp.topic, tp.partition, cur, end))
        planned: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {}
        for t in tasks:
            if isinstance(t, RemoteSlice):
                planned.setdefault(TopicPartition(t.topic, t.partition), []).append(t.segment)
        if planned:
            from .store import verify
            # the log starts asked again: retention may have deleted the segments since the metadata was read
            verify(self.opts, planned, lambda tps: self.list_offsets({tp: EARLIEST for tp in tps}, cached=False),
                   self.cluster_id)
        return split(tasks, min_partitions)


def _why(e: Exception) -> str:
    """The client's last connection error, shortened to its cause (`` (connection refused)``)."""
    text = str(e)
    marker = text.find("cannot connect to node")
    if marker < 0:
        return ""
    cause = text[marker:].split(";", 1)[0]
    cause = cause.split("): ", 1)[1] if "): " in cause else cause
    if "Connect call failed" in cause or "Errno 111" in cause:
        return " (connection refused)"
    return f" ({cause.strip()})"


@dataclass
class _Followed:
    """One ``__remote_log_metadata`` partition as far as this process has read it."""

    position: int  # the next offset to read
    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = field(default_factory=dict)


class SegmentLists:
    """The remote segment lists this process has read, per metadata partition, for the partitions it was
    asked about: a later query reads only the records appended since, from where the last one stopped.

    Deletes are records too (DELETE_SEGMENT_STARTED/FINISHED updates, appended after the copy), so the
    lists stay right as they are read on. A metadata partition is read again from its start when its end
    offset is before where this process stopped or its log start after it (records gone unread), when
    the metadata topic's id changed (recreated, or another cluster behind the same address), or for a
    partition not followed yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followed: dict[tuple, _Followed] = {}
        self.records_read = 0  # metadata records read by this process: what tests and benchmarks count

    def clear(self) -> None:
        with self._lock:
            self._followed.clear()

    def read(self, planner: Planner, metadata_topic_id, located: dict[TopicIdPartition, TopicPartition],
             starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], progress=None
             ) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
        """The segment lists of the partitions ``located`` (each with its metadata partition), read on up
        to ``ends`` (the metadata partitions' end offsets, asked by the caller)."""
        from tierlog.tiered.rlmm.cache import RemoteLogMetadataCache
        by_mp: dict[TopicPartition, set[TopicIdPartition]] = {}
        for tip, mp in located.items():
            by_mp.setdefault(mp, set()).add(tip)
        with self._lock:
            followed: dict[TopicPartition, _Followed] = {}
            for mp, tips in by_mp.items():
                key = (planner.opts.bootstrap_servers, metadata_topic_id, mp.partition)
                f = self._followed.get(key)
                if f is None or not starts[mp] <= f.position <= ends[mp] or not tips <= f.caches.keys():
                    f = _Followed(starts[mp], {tip: RemoteLogMetadataCache()
                                               for tip in tips | (f.caches.keys() if f is not None else set())})
                    self._followed[key] = f
                followed[mp] = f
            behind = {mp: f for mp, f in followed.items() if f.position < ends[mp]}
            try:
                self._read_on(planner, behind, ends, progress)
            except BaseException:
                for mp in behind:  # read part way: the next query starts these again
                    self._followed.pop((planner.opts.bootstrap_servers, metadata_topic_id, mp.partition), None)
                raise
            return {tip: list(followed[mp].caches[tip].list_remote_log_segments()) for tip, mp in located.items()}

    def _read_on(self, planner: Planner, behind: dict[TopicPartition, _Followed], ends: dict[TopicPartition, int],
                 progress) -> None:
        total = sum(ends[mp] - f.position for mp, f in behind.items())
        if progress is not None:
            progress(0, 0, total)
        if not behind:
            return
        from tierlog.client.sync import Consumer
        from tierlog.tiered.rlmm.serde import MetadataRecordError, deserialize
        mps = sorted(behind)
        consumer = Consumer(planner.client_config(**{"enable.auto.commit": "false", "auto.offset.reset": "earliest",
                                                     "fetch.max.wait.ms": "20",
                                                     "exclude.internal.topics": "false"}))
        try:
            consumer.assign(mps)
            for mp in mps:
                consumer.seek(mp, behind[mp].position)
            positions = {mp: behind[mp].position for mp in mps}
            done = size = 0
            deadline = time.monotonic() + 600
            while any(positions[mp] < ends[mp] for mp in mps):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {METADATA_TOPIC} took too long")
                for mp, records in consumer.poll(500).items():
                    done += len(records)
                    caches = behind[mp].caches
                    for r in records:
                        size += len(r.value or b"")
                        try:
                            event = deserialize(r.value)
                        except MetadataRecordError as e:
                            log.warning("Skipping malformed %s record at %d: %s", mp, r.offset, e)
                            continue
                        cache = caches.get(event.topic_id_partition)
                        if cache is not None:
                            _apply(cache, event)
                for mp in mps:
                    positions[mp] = consumer.position(mp)
                if progress is not None:
                    progress(done, size, total)
        finally:
            consumer.close()
        self.records_read += done
        for mp in mps:
            behind[mp].position = positions[mp]


#: This process's remote segment lists (Spark reuses its Python workers: the planning of a later query
#: in the same worker reads only what was appended to ``__remote_log_metadata`` since).
SEGMENT_LISTS = SegmentLists()


def _apply(cache: RemoteLogMetadataCache, event) -> None:
    from tierlog.tiered.metadata import RemoteLogSegmentMetadataUpdate
    try:
        if isinstance(event, RemoteLogSegmentMetadata):
            cache.add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            cache.update_remote_log_segment_metadata(event)
    except Exception as e:  # noqa: BLE001 - the broker's cache drops such events the same way
        log.debug("Ignoring remote log metadata event %s: %s", event, e)


def covering(segments: list[RemoteLogSegmentMetadata], start: int, end: int):
    """(segment, from, until) pieces covering ``[start, end)`` in order, the newest upload winning where
    segments overlap; stops at the first offset no segment holds."""
    cur = start
    ordered = sorted(segments, key=lambda m: (m.start_offset, -m.event_timestamp_ms))
    while cur < end:
        holding = [m for m in ordered if m.start_offset <= cur <= m.end_offset]
        if not holding:
            return
        md = max(holding, key=lambda m: (m.event_timestamp_ms, m.end_offset))
        until = min(md.end_offset + 1, end)
        yield md, cur, until
        cur = until


# Consecutive remote slices of a partition share one Spark task up to this many bytes. Each Spark task of
# a Python data source costs about 0.15 s of scheduling and Python worker round trips (measured on Spark
# 4.2, local[2]), as long as reading 70 MiB of remote segments, so tasks are large: like Spark's Kafka
# source, one task per topic partition unless ``minPartitions`` asks for more.
TASK_BYTES = 1024 * 1024 * 1024


def _slice_bytes(task: RemoteSlice) -> int:
    md = task.segment
    return md.segment_size_in_bytes * (task.end - task.start) // max(1, md.end_offset - md.start_offset + 1)


def group(tasks: list, min_partitions: int | None, task_bytes: int = TASK_BYTES) -> list[list]:
    """The tasks as Spark tasks: runs of remote slices of one partition joined up to ``task_bytes``, the
    partition's local tail (a broker slice right after a remote one) in the task of its last remote
    slices, so a task reads a contiguous range of one partition (history, then tail) in parallel with
    the other partitions' tasks, as Spark's Kafka source reads a partition per task; other broker slices
    alone. With ``minPartitions`` set, every slice is a Spark task of its own."""
    if min_partitions:
        return [[t] for t in tasks]
    out: list[list] = []
    size = 0
    prev = None
    for t in tasks:
        same = prev is not None and (prev.topic, prev.partition) == (t.topic, t.partition)
        if isinstance(t, BrokerSlice):
            if same and isinstance(prev, RemoteSlice):
                out[-1].append(t)
            else:
                out.append([t])
        elif same and isinstance(prev, RemoteSlice) and size + _slice_bytes(t) <= task_bytes:
            out[-1].append(t)
            size += _slice_bytes(t)
        else:
            out.append([t])
            size = _slice_bytes(t)
        prev = t
    return out


def split(tasks: list, min_partitions: int | None) -> list:
    """Cut the largest ranges until there are at least ``min_partitions`` tasks (Spark's Kafka source
    does the same with offset ranges)."""
    if not min_partitions or len(tasks) >= min_partitions:
        return tasks
    tasks = list(tasks)
    while len(tasks) < min_partitions:
        i = max(range(len(tasks)), key=lambda k: tasks[k].end - tasks[k].start)
        t = tasks[i]
        if t.end - t.start < 2:
            break
        mid = t.start + (t.end - t.start) // 2
        first = type(t)(**{**t.__dict__, "end": mid})
        second = type(t)(**{**t.__dict__, "start": mid})
        tasks[i:i + 1] = [first, second]
    return tasks
