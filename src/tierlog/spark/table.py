"""Compacted topics as tables: ``tierlog.view=table`` reads the latest value of every key (issue 41).

A batch read with ``tierlog.view=table`` returns, per topic partition, one row per key: the row of the
key's last record up to the as-of point, with the source's usual columns (its offset and timestamp are
those of that last write); keys whose last record is a tombstone (a null value) are left out, and so are
records without a key (a compacted topic refuses them; they have nothing to be the latest of). The
as-of point, per partition, is an exclusive end offset like ``endingOffsets``:

- ``tierlog.asOfOffsets``: ``latest`` (the default) or JSON ``{"topic": {"0": 1200}}`` (records below
  offset 1200; a partition not named is read to its latest offset);
- ``tierlog.asOfTimestamp``: milliseconds since the epoch, or JSON of them per partition: the records
  before the partition's first record later than that time (Kafka's ListOffsets by timestamp), so every
  record up to that time when timestamps grow with offsets.

The table is per (topic, partition, key), as Kafka's compaction is: a producer that partitions by key
writes every record of a key to one partition, so each Spark task reduces its own partition's records
and no shuffle is needed. A key written to two partitions (a partition count raised, another
partitioner) is a row in each.

Every Spark task reads one whole partition from its log start offset: the remote segments (cleaned by
the log cleaner before they were tiered) straight from the store when the remote store is given, then
the dirty tail through the broker, exactly the plan of a log read (:mod:`tierlog.spark.plan`). The
reduction runs on the Arrow batches the columnar decoder makes (a hash group-by of the keys keeps each
key's row of highest offset), a bounded number of rows at a time, so a task holds one row per key of its
partition (deleted ones too, until the end) plus one chunk.

Transactions: unless ``kafka.isolation.level`` is given, the table view reads ``read_committed``, so an
aborted upsert never becomes a key's value and ``latest`` is the last stable offset.

The view is exact (the latest value per key of the full history) for an as-of point at or past what the
cleaner has cleaned, which ``latest`` always is. Inside the cleaned part, where compaction already
dropped overwritten records, it is a subset of the table at that point: every row it returns holds the
value the key had there, but a key whose value was overwritten before the cleaned point is missing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition

from tierlog.client.types import TopicPartition

from .options import LATEST, SourceOptionError, SourceOptions
from .plan import Planner

if TYPE_CHECKING:  # Arrow is imported where rows are reduced: the source asks requested() in every worker
    import pyarrow as pa

VIEW = "tierlog.view"
AS_OF_OFFSETS = "tierlog.asOfOffsets"
AS_OF_TIMESTAMP = "tierlog.asOfTimestamp"

# A log read's options that would cut the history a table is made of.
_NOT_WITH_TABLE = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "endingOffsets",
                   "endingTimestamp", "endingOffsetsByTimestamp", "minPartitions")

# Rows decoded before they are reduced with the keys kept so far: bounds a task's memory.
CHUNK_ROWS = 500_000


@dataclasses.dataclass(frozen=True)
class TableView:
    """The as-of point: JSON-like offsets per topic and partition (None: latest) or timestamps."""

    offsets: dict[str, dict[int, int]] | None = None
    timestamp: int | None = None
    timestamps: dict[str, dict[int, int]] | None = None


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def requested(options: Mapping[str, str]) -> bool:
    """Whether the options ask for the table view (checking the value)."""
    value = _lowered(options).get(VIEW.lower())
    if value is None:
        return False
    view = value.strip().lower()
    if view not in ("log", "table"):
        raise SourceOptionError(f"option {VIEW} must be log or table, not {value!r}")
    return view == "table"


def _per_partition(key: str, text: str) -> dict[str, dict[int, int]]:
    try:
        spec = json.loads(text)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in spec.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceOptionError(f'option {key} must be JSON like {{"topic": {{"0": 23}}}}, not {text!r}') from None


def parse(options: Mapping[str, str]) -> TableView:
    """The table view's options (after :func:`requested`); refuses the log read's range options."""
    lowered = _lowered(options)
    given = [name for name in _NOT_WITH_TABLE if name.lower() in lowered]
    if given:
        raise SourceOptionError(f"option {given[0]} does not apply to {VIEW}=table (a table is read from the log's "
                                f"start, one Spark task per partition); give {AS_OF_OFFSETS} or {AS_OF_TIMESTAMP}")
    offsets = lowered.get(AS_OF_OFFSETS.lower())
    stamp = lowered.get(AS_OF_TIMESTAMP.lower())
    if offsets is not None and stamp is not None:
        raise SourceOptionError(f"give {AS_OF_OFFSETS} or {AS_OF_TIMESTAMP}, not both")
    if stamp is not None:
        text = stamp.strip()
        if text.lstrip("-").isdigit():
            return TableView(timestamp=int(text))
        return TableView(timestamps=_per_partition(AS_OF_TIMESTAMP, text))
    if offsets is None or offsets.strip().lower() == "latest":
        return TableView()
    return TableView(offsets=_per_partition(AS_OF_OFFSETS, offsets.strip()))


def table_options(opts: SourceOptions) -> SourceOptions:
    """read_committed unless the query chose its isolation level."""
    if any(k.lower() == "isolation.level" for k in opts.client_config):
        return opts
    return dataclasses.replace(opts, client_config={**opts.client_config, "isolation.level": "read_committed"})


def as_of_ends(planner: Planner, view: TableView, tps: list[TopicPartition],
               bounds: dict[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    """Each partition's exclusive end offset for the as-of point."""
    if view.timestamp is not None or view.timestamps is not None:
        # the first record later than the time: ListOffsets for one millisecond after it
        later = ({t: {p: ts + 1 for p, ts in ps.items()} for t, ps in view.timestamps.items()}
                 if view.timestamps is not None else None)
        at = view.timestamp + 1 if view.timestamp is not None else None
        return planner.resolve(tps, "latest", at, later, bounds, "ending")
    ends = planner.resolve(tps, view.offsets or "latest", None, None, bounds, "ending")
    for tp, end in ends.items():
        if end == LATEST:
            ends[tp] = bounds[tp][1]
        elif end > bounds[tp][1] or end < 0:
            raise SourceOptionError(f"{AS_OF_OFFSETS} gives offset {end} of {tp.topic}-{tp.partition}, outside its "
                                    f"log (latest offset {bounds[tp][1]})")
    return ends


class TableTask(InputPartition):
    """One partition's planned slices, read and reduced by one Spark task."""

    def __init__(self, tasks: list, opts: SourceOptions) -> None:
        super().__init__(tasks)
        self.tasks = tasks
        self.opts = opts

    def read(self) -> Iterator[pa.RecordBatch]:
        from .read import arrow_schema, read_tasks
        return latest_per_key(read_tasks(self.tasks, self.opts), arrow_schema(self.opts.include_headers))


class TableReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, view: TableView) -> None:
        self.opts = table_options(opts)
        self.view = view

    def partitions(self) -> list[InputPartition]:
        planner = Planner(self.opts)
        try:
            tps = planner.partitions()
            bounds = planner.bounds(tps)
            ends = as_of_ends(planner, self.view, tps, bounds)
            tasks = planner.plan({tp: (bounds[tp][0], max(bounds[tp][0], ends[tp])) for tp in tps})
        finally:
            planner.close()
        by_partition: dict[tuple[str, int], list] = {}
        for t in tasks:  # in offset order within a partition
            by_partition.setdefault((t.topic, t.partition), []).append(t)
        return [TableTask(g, self.opts) for g in by_partition.values()] or [TableTask([], self.opts)]

    def read(self, partition: TableTask) -> Iterator[pa.RecordBatch]:
        return partition.read()


def _last_per_key(table: pa.Table) -> pa.Table:
    """The row with the highest offset of each key (tombstones kept: a later chunk may need them to hide
    an older value). A hash group-by of the keys, then the rows whose offset is one of the maxima: the
    offsets of one partition are distinct (a task reduces one partition), so no join is needed."""
    import pyarrow.compute as pc
    if table.num_rows <= 1:
        return table
    found = table.select(["key", "offset"]).group_by("key", use_threads=False).aggregate([("offset", "max")])
    return table.filter(pc.is_in(table.column("offset"), value_set=found.column("offset_max")))


def latest_per_key(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The latest record of every key of one partition's records, tombstones and null keys left out, in
    offset order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    kept = schema.empty_table()
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        batch = batch.filter(pc.is_valid(batch.column("key")))
        if batch.num_rows:
            pending.append(batch)
            rows += batch.num_rows
        if rows >= CHUNK_ROWS:
            kept = _last_per_key(pa.concat_tables([kept, pa.Table.from_batches(pending, schema)]))
            pending, rows = [], 0
    if pending:
        kept = _last_per_key(pa.concat_tables([kept, pa.Table.from_batches(pending, schema)]))
    live = kept.filter(pc.is_valid(kept.column("value")))
    live = live.take(pc.sort_indices(live, sort_keys=[("offset", "ascending")]))
    yield from live.combine_chunks().to_batches()
