"""Planning a read on the driver: which partitions, which offset ranges, and which tasks read them.

Offsets come from the broker (ListOffsets through tierlog's client). Remote segments come from
``__remote_log_metadata`` itself, read with tierlog's consumer and applied to Kafka's metadata cache
(:mod:`tierlog.tiered.rlmm.cache`), only the metadata partitions that hold the wanted partitions. A range
is cut into tasks:

- one slice per remote segment (or per part of one, for ``minPartitions`` / read limits), read by an
  executor straight from the remote store, for offsets below the partition's local log start; a Spark
  task reads consecutive slices of a partition up to 128 MiB;
- the rest (the local tail, or everything in ``broker`` mode) through the broker, in slices.

Only COPY_SEGMENT_FINISHED segments are used, and for each offset the segment the broker itself would
read (the newest upload covering it), so a segment re-uploaded by a later leader is read once. Before
the tasks are handed out the remote store is checked against them (:mod:`tierlog.spark.store`): a store
that holds none of them is a configuration error, not data loss.

The first request waits at most ``tierlog.bootstrapTimeoutMs`` for an answer from the bootstrap
servers, so an unreachable broker fails the query in seconds with one line naming the address.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from tierlog.client.sync import Admin, Consumer
from tierlog.client.types import TopicPartition
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.rlmm.cache import RemoteLogMetadataCache
from tierlog.tiered.rlmm.partitioner import metadata_partition
from tierlog.tiered.rlmm.serde import MetadataRecordError, deserialize

from .options import EARLIEST, LATEST, BrokerUnreachableError, SourceOptionError, SourceOptions

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


class Planner:
    """The driver's connection to the cluster for one query (reused across micro-batches)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None
        self._cluster_id: str | None = None

    def client_config(self, **extra) -> dict:
        return {**self.opts.client_config, "bootstrap.servers": self.opts.bootstrap_servers, **extra}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
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
        default.api.timeout.ms and retries) with one line naming the address and the option."""
        from tierlog.client.errors import KafkaTimeoutError
        timeout = self.opts.bootstrap_timeout_ms
        try:
            admin.list_topics(timeout_ms=timeout)
        except KafkaTimeoutError as e:
            raise BrokerUnreachableError(
                f"cannot reach the broker at {self.opts.bootstrap_servers} (kafka.bootstrap.servers) within "
                f"{timeout / 1000:g} s{_why(e)}; check the address and that the broker is running (the wait is "
                f"the option tierlog.bootstrapTimeoutMs)") from None

    def connect(self) -> None:
        """Check that the bootstrap servers answer (raises BrokerUnreachableError)."""
        _ = self.admin

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
        names = opts.topics_matching(list(self.admin.list_topics()))
        if not names:
            return []
        described = self.admin.describe_topics(names)
        return [TopicPartition(t, p.partition) for t in names for p in described[t].partitions]

    def topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID]:
        described = self.admin.describe_topics(sorted(set(topics)))
        return {t: d.topic_id for t, d in described.items()}

    # ---------------------------------------------------------------------------------- offsets

    def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """With ``kafka.isolation.level=read_committed`` "latest" is the last stable offset, as in Spark's
        Kafka source."""
        if not specs:
            return {}
        found = self.admin.list_offsets(specs, isolation_level=self.opts.isolation_level)
        return {tp: r.offset for tp, r in found.items()}

    def bounds(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, high watermark) of each partition."""
        starts = self.list_offsets({tp: EARLIEST for tp in tps})
        ends = self.list_offsets({tp: LATEST for tp in tps})
        return {tp: (starts[tp], ends[tp]) for tp in tps}

    def local_starts(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: -4 for tp in tps})

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

    def remote_segments(self, tps: list[TopicPartition], progress=None
                        ) -> dict[TopicPartition, list[RemoteLogSegmentMetadata]]:
        """The finished remote segments of each partition, from ``__remote_log_metadata``;
        ``progress(records, bytes, total records)`` is called as the metadata is read."""
        if not tps:
            return {}
        ids = self.topic_ids([tp.topic for tp in tps])
        n = self.opts.metadata_partitions
        if n is None:
            try:
                n = len(self.admin.describe_topics([METADATA_TOPIC])[METADATA_TOPIC].partitions)
            except Exception:  # noqa: BLE001 - no metadata topic: nothing was ever tiered
                return {tp: [] for tp in tps}
        wanted = {TopicIdPartition(ids[tp.topic], tp.topic, tp.partition): tp for tp in tps if ids.get(tp.topic)}
        by_mp: dict[int, list[TopicIdPartition]] = {}
        for tip in wanted:
            by_mp.setdefault(metadata_partition(tip.topic_id, tip.partition, n), []).append(tip)
        caches = {tip: RemoteLogMetadataCache() for tip in wanted}
        mps = [TopicPartition(METADATA_TOPIC, mp) for mp in sorted(by_mp)]
        consumer = Consumer(self.client_config(**{"enable.auto.commit": "false", "auto.offset.reset": "earliest",
                                                  "fetch.max.wait.ms": "20",
                                                  "exclude.internal.topics": "false"}))
        try:
            consumer.assign(mps)
            ends = consumer.end_offsets(mps)
            consumer.seek_to_beginning(*mps)
            positions = {tp: consumer.position(tp) for tp in mps}
            total = sum(max(0, ends[tp] - positions[tp]) for tp in mps)
            done = size = 0
            if progress is not None:
                progress(0, 0, total)
            deadline = time.monotonic() + 600
            while any(positions[tp] < ends[tp] for tp in mps):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {METADATA_TOPIC} took too long")
                for tp, records in consumer.poll(500).items():
                    done += len(records)
                    for r in records:
                        size += len(r.value or b"")
                        try:
                            event = deserialize(r.value)
                        except MetadataRecordError as e:
                            log.warning("Skipping malformed %s record at %d: %s", tp, r.offset, e)
                            continue
                        cache = caches.get(event.topic_id_partition)
                        if cache is None:
                            continue
                        _apply(cache, event)
                for tp in mps:
                    positions[tp] = consumer.position(tp)
                if progress is not None:
                    progress(done, size, total)
        finally:
            consumer.close()
        out = {}
        for tip, tp in wanted.items():
            out[tp] = [md for md in caches[tip].list_remote_log_segments()
                       if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        for tp in tps:
            out.setdefault(tp, [])
        return out

    # ----------------------------------------------------------------------------------- tasks

    def plan(self, ranges: dict[TopicPartition, tuple[int, int]], min_partitions: int | None = None
             ) -> list[RemoteSlice | BrokerSlice]:
        """Tasks covering ``[start, end)`` of each partition (empty ranges give no task)."""
        ranges = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        tasks: list[RemoteSlice | BrokerSlice] = []
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
            verify(self.opts, planned, lambda tps: self.list_offsets({tp: EARLIEST for tp in tps}),
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
    """The tasks as Spark tasks: runs of remote slices of one partition joined up to ``task_bytes``; the
    local tails of partitions read from remote storage (a broker slice right after a remote one) together,
    one consumer for all, added to the smallest remote task; other broker slices alone. With
    ``minPartitions`` set, every slice is a Spark task of its own."""
    if min_partitions:
        return [[t] for t in tasks]
    out: list[list] = []
    tails: list[BrokerSlice] = []
    size = 0
    prev = None
    for t in tasks:
        same = prev is not None and (prev.topic, prev.partition) == (t.topic, t.partition)
        if isinstance(t, BrokerSlice):
            if same and isinstance(prev, RemoteSlice):
                tails.append(t)
            else:
                out.append([t])
        elif same and isinstance(prev, RemoteSlice) and size + _slice_bytes(t) <= task_bytes:
            out[-1].append(t)
            size += _slice_bytes(t)
        else:
            out.append([t])
            size = _slice_bytes(t)
        prev = t
    if tails:
        remote = [g for g in out if isinstance(g[0], RemoteSlice)]
        if remote:
            min(remote, key=lambda g: sum(map(_slice_bytes, g))).extend(tails)
        else:
            out.append(tails)
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
