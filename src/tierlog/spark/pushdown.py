"""Filter pushdown for batch reads: Spark's pushed filters on ``topic``, ``partition``, ``offset`` and
``timestamp`` turned into the partitions, offset ranges, segments and byte ranges a read plans.

Spark (4.1+, ``spark.sql.python.filterPushdown.enabled``, which :func:`tierlog.spark.register` turns on)
hands :meth:`BatchReader.pushFilters` the conjuncts of a query's ``where``; what :func:`accept` takes is
applied exactly, so Spark drops it (``explain()`` lists it under ``PushedFilters``), everything else is
returned and Spark evaluates it after the scan:

- ``topic`` (=, IN) and ``partition`` (=, IN, <, <=, >, >=): only the matching partitions are planned;
- ``offset`` (=, <, <=, >, >=): the offset range of each partition is narrowed; ``offset IN (...)``
  narrows it to the list's smallest and largest offset and stays with Spark;
- ``timestamp`` (=, <, <=, >, >=; milliseconds, as Kafka stores them): rows are filtered exactly by the
  reader, and the plan skips what cannot match. Timestamps need not grow with offsets (CreateTime), so
  only a segment's *maximum* rules it out: a remote segment whose ``max_timestamp_ms`` (its metadata) is
  below the lower bound is not read; in the first remote segment read of a partition, the time index
  entries below the bound say which leading offsets hold nothing newer (every offset up to an entry's
  offset has a timestamp at or below the entry's); a local tail with no remote segment read before it
  starts at the broker's ListOffsets answer for the bound (the first offset whose timestamp reaches it,
  found in the broker's local time index). An upper bound cuts the plan only on LogAppendTime topics,
  whose timestamps grow with offsets: after the first remote segment whose maximum passes it, nothing
  is read (its time index cuts it), and a local tail ends at ListOffsets of the bound plus one;
- ``IS NOT NULL`` on those columns holds always; ``IS NULL`` never.

Streaming reads get no filters: Spark 4.2 pushes filters into batch scans only (its micro-batch streams
are built without them), so a streaming query's ``where`` is Spark's.

``tierlog.debug.readLog=<folder>`` makes every Spark task write the slices it reads (one line per
slice: tier, topic, partition, segment id, first and end offset) to a file in that folder: what the
tests count to check that only the needed segments are read.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from tierlog.client.types import TopicPartition

from .plan import BrokerSlice, Planner, RemoteSlice

log = logging.getLogger(__name__)

#: The columns that are never null in the source's rows.
NOT_NULL = ("topic", "partition", "offset", "timestamp", "timestampType")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_US = datetime.timedelta(microseconds=1)


def enabled(options: Mapping[str, str]) -> bool:
    """``tierlog.filterPushdown`` (default true): false gives a reader without pushFilters, for sessions
    where ``spark.sql.python.filterPushdown.enabled`` is off (Spark refuses such a reader then)."""
    for k, v in options.items():
        if str(k).lower() == "tierlog.filterpushdown":
            text = str(v).strip().lower()
            if text not in ("true", "false"):
                from .options import SourceOptionError
                raise SourceOptionError(f"option tierlog.filterPushdown must be true or false, not {v!r}")
            return text == "true"
    return True


def read_log_folder(options: Mapping[str, str]) -> str | None:
    for k, v in options.items():
        if str(k).lower() == "tierlog.debug.readlog":
            return str(v)
    return None


def _micros(value) -> int | None:
    """A timestamp literal as microseconds since the epoch; None for what is not an aware datetime."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _US
    return None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class Pushdown:
    """What the accepted filters allow: sets and closed ranges, None meaning anything."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_range: tuple[int, int] = (-(1 << 63), (1 << 63) - 1)
    offset_range: tuple[int, int] = (-(1 << 63), (1 << 63) - 1)  # closed
    ts_lo: int | None = None  # ms, closed
    ts_hi: int | None = None
    empty: bool = False  # a contradiction (IS NULL on a column never null, disjoint sets)
    read_log: str | None = None
    used: bool = False  # a filter was taken: the plan may be a small part of the topic

    # ------------------------------------------------------------------------------- accepting

    def accept(self, filters: Iterable) -> Iterator:
        """Take what can be applied exactly; yield the rest (by reference, as Spark asks)."""
        for f in filters:
            if self._take(f):
                self.used = True
            else:
                yield f

    def _take(self, f) -> bool:
        from pyspark.sql.datasource import (
            EqualNullSafe,
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            IsNotNull,
            IsNull,
            LessThan,
            LessThanOrEqual,
        )
        column = getattr(f, "attribute", None)
        if not isinstance(column, tuple) or len(column) != 1:
            return False
        name = column[0]
        if isinstance(f, IsNotNull):
            return name in NOT_NULL
        if isinstance(f, IsNull):
            if name in NOT_NULL:
                self.empty = True
                return True
            return False
        if name == "topic":
            if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
                return self._topics({f.value})
            if isinstance(f, In) and f.value and all(isinstance(v, str) for v in f.value):
                return self._topics(set(f.value))
            return False
        if name == "partition":
            if isinstance(f, (EqualTo, EqualNullSafe)) and _int(f.value) is not None:
                return self._partitions({f.value})
            if isinstance(f, In) and f.value and all(_int(v) is not None for v in f.value):
                return self._partitions(set(f.value))
            bound = _comparison(f, _int(getattr(f, "value", None)), 1)
            if bound is None:
                return False
            self.partition_range = _intersect(self.partition_range, bound)
            return True
        if name == "offset":
            if isinstance(f, (EqualTo, EqualNullSafe)) and _int(f.value) is not None:
                self.offset_range = _intersect(self.offset_range, (f.value, f.value))
                return True
            if isinstance(f, In) and f.value and all(_int(v) is not None for v in f.value):
                # narrows the range, but the rows between the listed offsets are Spark's to drop
                self.offset_range = _intersect(self.offset_range, (min(f.value), max(f.value)))
                return False
            bound = _comparison(f, _int(getattr(f, "value", None)), 1)
            if bound is None:
                return False
            self.offset_range = _intersect(self.offset_range, bound)
            return True
        if name == "timestamp":
            us = _micros(getattr(f, "value", None))
            if us is None:
                return False
            # rows hold whole milliseconds (ms * 1000 us): a bound in microseconds rounds inwards
            if isinstance(f, (EqualTo, EqualNullSafe)):
                if us % 1000:
                    self.empty = True
                    return True
                lo = hi = us // 1000
            elif isinstance(f, GreaterThan):
                lo, hi = us // 1000 + 1, None
            elif isinstance(f, GreaterThanOrEqual):
                lo, hi = -(-us // 1000), None
            elif isinstance(f, LessThan):
                lo, hi = None, -(-us // 1000) - 1
            elif isinstance(f, LessThanOrEqual):
                lo, hi = None, us // 1000
            else:
                return False
            if lo is not None:
                self.ts_lo = lo if self.ts_lo is None else max(self.ts_lo, lo)
            if hi is not None:
                self.ts_hi = hi if self.ts_hi is None else min(self.ts_hi, hi)
            return True
        return False

    def _topics(self, names: set[str]) -> bool:
        self.topics = frozenset(names) if self.topics is None else self.topics & names
        return True

    def _partitions(self, ids: set[int]) -> bool:
        self.partitions = frozenset(ids) if self.partitions is None else self.partitions & ids
        return True

    # ------------------------------------------------------------------------------- planning

    @property
    def filters_time(self) -> bool:
        return self.ts_lo is not None or self.ts_hi is not None

    @property
    def nothing(self) -> bool:
        """No row can match."""
        lo, hi = self.offset_range
        plo, phi = self.partition_range
        return (self.empty or lo > hi or plo > phi or self.topics == frozenset() or self.partitions == frozenset()
                or (self.ts_lo is not None and self.ts_hi is not None and self.ts_lo > self.ts_hi))

    def keeps(self, tp: TopicPartition) -> bool:
        if self.topics is not None and tp.topic not in self.topics:
            return False
        if self.partitions is not None and tp.partition not in self.partitions:
            return False
        return self.partition_range[0] <= tp.partition <= self.partition_range[1]

    def cut_offsets(self, ranges: dict[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, tuple[int, int]]:
        """``[start, end)`` ranges narrowed to the offset filters."""
        lo, hi = self.offset_range
        out = {}
        for tp, (start, end) in ranges.items():
            s, e = max(start, lo), min(end, hi + 1 if hi < (1 << 63) - 1 else end)
            out[tp] = (s, max(s, e))
        return out

    def prune(self, planner: Planner, tasks: list) -> list:
        """The planned slices without what the timestamp filters rule out (see the module's text)."""
        if not self.filters_time or not tasks:
            return tasks
        lo, hi = self.ts_lo, self.ts_hi
        by_tp: dict[TopicPartition, list] = {}
        for t in tasks:
            by_tp.setdefault(TopicPartition(t.topic, t.partition), []).append(t)
        log_append = set()
        if hi is not None:
            log_append = planner_log_append_topics(planner, sorted({tp.topic for tp in by_tp}))
        out: dict[TopicPartition, list] = {}
        need_lo: dict[TopicPartition, int] = {}  # broker slices to start at ListOffsets(lo)
        need_hi: dict[TopicPartition, int] = {}  # broker slices to end at ListOffsets(hi + 1)
        skipped = cut = 0
        for tp, group in by_tp.items():
            kept: list = []
            lower_done = lo is None
            upper = hi is not None and tp.topic in log_append
            stop = False
            for t in group:
                if stop:
                    skipped += isinstance(t, RemoteSlice)
                    continue
                if isinstance(t, RemoteSlice):
                    md = t.segment
                    known = md.max_timestamp_ms >= 0  # -1: unknown (no timestamp seen), never skipped
                    if known and lo is not None and md.max_timestamp_ms < lo:
                        skipped += 1
                        continue
                    passes = upper and known and md.max_timestamp_ms > hi
                    if not lower_done or passes:
                        entries = _time_entries(planner, t)
                        if not lower_done and entries is not None:
                            # offsets up to an entry's offset hold timestamps at or below the entry's
                            i = bisect_left(entries.timestamps, lo) - 1
                            if i >= 0:
                                t = replace(t, start=max(t.start, entries.base_offset + entries.offsets[i] + 1))
                                cut += 1
                        if passes:
                            stop = True  # LogAppendTime: every later offset is at least this segment's max
                            if entries is not None:
                                i = bisect_right(entries.timestamps, hi)
                                if i < len(entries.timestamps):
                                    t = replace(t, end=min(t.end, entries.base_offset + entries.offsets[i]))
                    lower_done = True
                    if t.end > t.start:
                        kept.append(t)
                else:
                    # ListOffsets takes timestamps from 0 (negative ones ask for earliest, latest ...)
                    if not lower_done and lo >= 0:
                        need_lo[tp] = len(kept)
                    if upper and hi >= 0:
                        need_hi[tp] = len(kept)
                    kept.append(t)
            out[tp] = kept
        if need_lo:
            found = planner.list_offsets({tp: lo for tp in need_lo})
            for tp, i in need_lo.items():
                t = out[tp][i]
                first = found.get(tp, -1)
                out[tp][i] = replace(t, start=t.end if first < 0 else min(t.end, max(t.start, first)))
        if need_hi:
            found = planner.list_offsets({tp: hi + 1 for tp in need_hi})
            for tp, i in need_hi.items():
                t = out[tp][i]
                past = found.get(tp, -1)
                if past >= 0:
                    out[tp][i] = replace(t, end=max(t.start, min(t.end, past)))
        result = [t for tp in by_tp for t in out[tp] if t.end > t.start]
        log.info("Filter pushdown (timestamp %s..%s): %d remote segment(s) skipped, %d cut by its time index, "
                 "%d slice(s) left of %d", lo, hi, skipped, cut, len(result), len(tasks))
        return result

    def pack(self, groups: list[list]) -> list[list]:
        """Spark tasks for a filtered read. What is left of each partition is often small, and each Spark
        task of a Python data source costs about 0.15 s (as much as reading 70 MiB, :data:`plan.TASK_BYTES`),
        so the read is cut into as few tasks as hold :data:`SMALL_TASK_BYTES` each, balanced: the remote
        slices one by one and the local tails (often most of a recent time range, read by one consumer)
        as one piece, largest first into the lightest task. A tail's bytes are guessed from the remote
        segments and weighed :data:`BROKER_WEIGHT` (the broker path is slower per byte). Each task reads
        its remote slices in offset order, then its tails. Measured (docs/benchmarks.md): with three tasks
        on two cores a third waited for a core; two balanced tasks read the last hour of ten in 0.7 s
        where the three took 1.0 s; whole partition tasks (remote slices then tail) were slower still."""
        if not self.used or len(groups) < 2:
            return groups
        slices = [t for g in groups for t in g]
        tails = [t for t in slices if not isinstance(t, RemoteSlice)]
        remote = [t for t in slices if isinstance(t, RemoteSlice)]
        if not remote:
            return [tails]
        segments = {t.segment.segment_id: t.segment for t in remote}.values()
        rate = sum(md.segment_size_in_bytes for md in segments) / max(
            1, sum(md.end_offset - md.start_offset + 1 for md in segments))
        items = [(_estimate(t), [t]) for t in remote]
        if tails:
            items.append((BROKER_WEIGHT * rate * sum(t.end - t.start for t in tails), tails))
        total = sum(size for size, _ in items)
        bins: list[list] = [[0.0, []] for _ in range(max(1, min(len(items), math.ceil(total / SMALL_TASK_BYTES))))]
        for size, ts in sorted(items, key=lambda x: -x[0]):
            lightest = min(bins, key=lambda b: b[0])
            lightest[0] += size
            lightest[1].extend(ts)
        return [sorted(ts, key=lambda t: (not isinstance(t, RemoteSlice), t.topic, t.partition, t.start))
                for _, ts in bins if ts]

    # ------------------------------------------------------------------------------- reading

    def rows(self, batches: Iterator):
        """Only the rows inside the timestamp bounds (the plan read whole segments or ranges)."""
        if not self.filters_time:
            yield from batches
            return
        import pyarrow as pa
        import pyarrow.compute as pc
        for batch in batches:
            column = batch.column("timestamp")
            mask = None
            if self.ts_lo is not None:
                mask = pc.greater_equal(column, pa.scalar(self.ts_lo * 1000, column.type))
            if self.ts_hi is not None:
                upper = pc.less_equal(column, pa.scalar(self.ts_hi * 1000, column.type))
                mask = upper if mask is None else pc.and_(mask, upper)
            kept = batch.filter(mask)
            if kept.num_rows:
                yield kept

    def record(self, tasks: list) -> None:
        """``tierlog.debug.readLog``: the slices a Spark task reads, one file per task."""
        if not self.read_log or not tasks:
            return
        lines = []
        for t in tasks:
            if isinstance(t, RemoteSlice):
                lines.append(f"remote {t.topic} {t.partition} {t.segment.segment_id.id} {t.start} {t.end}\n")
            elif isinstance(t, BrokerSlice):
                lines.append(f"broker {t.topic} {t.partition} - {t.start} {t.end}\n")
        os.makedirs(self.read_log, exist_ok=True)
        with open(os.path.join(self.read_log, f"{uuid.uuid4().hex}.log"), "w") as f:
            f.writelines(lines)


SMALL_TASK_BYTES = 64 * 1024 * 1024
BROKER_WEIGHT = 1.5  # bytes read through the broker cost about 1.5x a remote read (bench/spark_read.py)


def _estimate(t: RemoteSlice) -> float:
    md = t.segment
    return (t.end - t.start) * md.segment_size_in_bytes / max(1, md.end_offset - md.start_offset + 1)


def _comparison(f, value: int | None, unit: int) -> tuple[int, int] | None:
    """A closed range for an integer comparison, or None when ``f`` is not one."""
    from pyspark.sql.datasource import GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual
    if value is None:
        return None
    low, high = -(1 << 63), (1 << 63) - 1
    if isinstance(f, GreaterThan):
        return value + unit, high
    if isinstance(f, GreaterThanOrEqual):
        return value, high
    if isinstance(f, LessThan):
        return low, value - unit
    if isinstance(f, LessThanOrEqual):
        return low, value
    return None


def _intersect(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return max(a[0], b[0]), min(a[1], b[1])


def planner_log_append_topics(planner: Planner, topics: list[str]) -> set[str]:
    """The topics whose ``message.timestamp.type`` is LogAppendTime."""
    if not topics:
        return set()
    found = planner.admin.describe_configs([("topic", t) for t in topics], config_names=["message.timestamp.type"])
    out = set()
    for resource, entries in found.items():
        entry = entries.get("message.timestamp.type")
        if entry is not None and str(entry.value) == "LogAppendTime":
            out.add(resource[1] if isinstance(resource, tuple) else getattr(resource, "name", resource))
    return out


def _time_entries(planner: Planner, t: RemoteSlice):
    """The remote segment's time index, or None when the store has none for it (then nothing is cut)."""
    from tierlog.storage.index import TimeEntries
    from tierlog.tiered.exceptions import RemoteResourceNotFoundError
    from tierlog.tiered.metadata import IndexType

    from .store import open_store
    try:
        data = open_store(planner.opts, t.cluster_id).fetch_index(t.segment, IndexType.TIMESTAMP)
    except RemoteResourceNotFoundError:
        return None
    return TimeEntries(t.segment.start_offset, data)
