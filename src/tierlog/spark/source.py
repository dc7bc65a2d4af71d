"""The ``tierlog`` PySpark data source: batch and streaming reads, batch and streaming writes.

Options and output schema are Spark's Kafka source's (see :mod:`tierlog.spark.options`), so a
pipeline moves from ``format("kafka")`` to ``format("tierlog")`` by changing the name. Reads plan on
the driver (:mod:`tierlog.spark.plan`) and read on the executors (:mod:`tierlog.spark.read`); a batch
read takes the filters of the query it can apply (:mod:`tierlog.spark.pushdown`).

Streaming offsets are ``{"topic": {"partition": next offset}}``; the checkpoint holds them, so a query
restarted from its checkpoint reads on exactly where it stopped. ``maxOffsetsPerTrigger`` (or a read
limit from Spark) caps each micro-batch, shared between partitions in proportion to what each has
waiting, as Spark's Kafka source does; ``trigger(availableNow=True)`` reads up to the offsets seen when
the query starts.

Writes are exactly once by default (:mod:`tierlog.spark.sink`: transactions the driver commits);
``tierlog.deliveryGuarantee=at_least_once`` gives Spark's Kafka sink's delivery (``_write_rows`` here).

Nothing here keeps a socket in ``__init__``: Spark pickles readers and writers to its Python workers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from tierlog.client.types import TopicPartition

from . import options as options_mod
from . import table
from .options import SPARK_SCHEMA, SPARK_SCHEMA_HEADERS, SourceOptionError, SourceOptions
from .plan import Planner, group, split
from .pushdown import Pushdown, enabled, read_log_folder

# Spark imports this module in every Python worker it forks, fresh ones too (the DataSource is pickled by
# reference), and most of them only parse options or push filters: what plans a read (the client, the
# remote log metadata), reads it (Arrow, the decoder) or writes (the sink) is imported where it is used.

log = logging.getLogger(__name__)


class SliceTask(InputPartition):
    """Planned slices read one after another by one Spark task."""

    def __init__(self, tasks: list, opts: SourceOptions, pushdown: Pushdown | None = None) -> None:
        super().__init__(tasks)
        self.tasks = tasks
        self.opts = opts
        self.pushdown = pushdown

    def read(self) -> Iterator:
        from .read import read_tasks
        if self.pushdown is None:
            return read_tasks(self.tasks, self.opts)
        self.pushdown.record(self.tasks)
        return self.pushdown.rows(read_tasks(self.tasks, self.opts))


class TierlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tierlog"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false"))).lower()
        return SPARK_SCHEMA_HEADERS if include == "true" else SPARK_SCHEMA

    def reader(self, schema) -> DataSourceReader:
        opts = options_mod.parse(self.options)
        if table.requested(self.options):  # compacted topics as tables (tierlog.spark.table)
            return table.TableReader(opts, table.parse(self.options))
        if enabled(self.options):
            return PushdownBatchReader(opts, Pushdown(read_log=read_log_folder(self.options)))
        return BatchReader(opts)

    def streamReader(self, schema) -> DataSourceStreamReader:
        if table.requested(self.options):
            raise SourceOptionError(f"{table.VIEW}=table is for batch reads only")
        return StreamReader(options_mod.parse(self.options, streaming=True))

    def writer(self, schema, overwrite: bool) -> DataSourceWriter:
        opts = options_mod.parse(self.options, sink=True)
        if opts.delivery_guarantee == "exactly_once":
            from . import sink
            return sink.ExactlyOnceBatchWriter(opts, schema)
        return BatchWriter(opts, schema)

    def streamWriter(self, schema, overwrite: bool) -> DataSourceStreamWriter:
        opts = options_mod.parse(self.options, sink=True)
        if opts.delivery_guarantee == "exactly_once":
            from . import sink
            return sink.ExactlyOnceStreamWriter(opts, schema)
        return StreamWriter(opts, schema)


# ------------------------------------------------------------------------------------------- reads


def _ranges(planner: Planner, opts: SourceOptions, start: dict[TopicPartition, int],
            end: dict[TopicPartition, int], bounds: dict[TopicPartition, tuple[int, int]]
            ) -> dict[TopicPartition, tuple[int, int]]:
    """Checked ranges: a start below the log start offset is data loss (failOnDataLoss)."""
    out = {}
    for tp, e in end.items():
        s = start.get(tp, bounds[tp][0])
        first = bounds[tp][0]
        if s < first:
            message = (f"offsets {s}-{first - 1} of {tp.topic}-{tp.partition} were deleted before they were read "
                       f"(log start offset {first})")
            if opts.fail_on_data_loss:
                raise SourceOptionError(message + "; set failOnDataLoss=false to skip lost data")
            log.warning("%s; skipped (failOnDataLoss=false)", message)
            s = first
        out[tp] = (s, max(s, e))
    return out


class BatchReader(DataSourceReader):
    """A batch read; with a :class:`Pushdown` (see :class:`PushdownBatchReader`) it plans and reads only
    what the pushed filters let through."""

    def __init__(self, opts: SourceOptions, pushdown: Pushdown | None = None) -> None:
        self.opts = opts
        self.pushdown = pushdown

    def partitions(self) -> list[InputPartition]:
        opts, pd = self.opts, self.pushdown
        if pd is not None and pd.nothing:
            return [SliceTask([], opts)]
        planner = Planner(opts)
        try:
            tps = planner.partitions()
            if pd is not None:
                tps = [tp for tp in tps if pd.keeps(tp)]
            # every offset the plan asks for, in one round trip (a timestamp filter's bounds included)
            stamps = (opts.starting_timestamp, opts.ending_timestamp)
            if pd is not None:
                stamps += (pd.ts_lo, None if pd.ts_hi is None else pd.ts_hi + 1)
            planner.prefetch_plan(tps, stamps)
            bounds = planner.bounds(tps)
            start = planner.resolve(tps, opts.starting, opts.starting_timestamp, opts.starting_by_timestamp,
                                    bounds, "starting")
            end = planner.resolve(tps, opts.ending, opts.ending_timestamp, opts.ending_by_timestamp, bounds,
                                  "ending")
            ranges = _ranges(planner, opts, start, end, bounds)
            if pd is None:
                tasks = planner.plan(ranges, opts.min_partitions)
            else:
                # pruned before minPartitions cuts the slices, so the cuts share out what is read
                tasks = split(pd.prune(planner, planner.plan(pd.cut_offsets(ranges))), opts.min_partitions)
        finally:
            planner.close()
        groups = group(tasks, opts.min_partitions)
        if pd is not None and not opts.min_partitions:
            groups = pd.pack(groups)
        return [SliceTask(g, opts, pd) for g in groups] or [SliceTask([], opts)]

    def read(self, partition: SliceTask) -> Iterator:
        return partition.read()


class PushdownBatchReader(BatchReader):
    """A batch read taking Spark's filters (:mod:`tierlog.spark.pushdown`): those it applies exactly are
    kept from Spark, the others returned for Spark to evaluate."""

    def pushFilters(self, filters: list) -> Iterator:
        return list(self.pushdown.accept(filters))


def _to_json(offsets: dict[TopicPartition, int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for tp, o in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(o)
    return out


def _from_json(offsets: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._frozen: dict | None = None  # availableNow: the end offsets seen when the query started

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def initialOffset(self) -> dict:
        p = self.planner
        p.forget()
        tps = p.partitions()
        bounds = p.bounds(tps)
        opts = self.opts
        return _to_json(p.resolve(tps, opts.starting, opts.starting_timestamp, opts.starting_by_timestamp, bounds,
                                  "starting"))

    def _latest(self) -> dict[TopicPartition, int]:
        p = self.planner
        p.forget()  # new partitions, new offsets
        tps = p.partitions()
        return p.list_offsets({tp: options_mod.LATEST for tp in tps})

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen = _to_json(self._latest())

    def latestOffset(self, start: dict, limit=None) -> dict:
        latest = _from_json(self._frozen) if self._frozen is not None else self._latest()
        begin = _from_json(start or {})
        for tp in latest:
            begin.setdefault(tp, 0)  # a partition added since: from its beginning, as Spark's Kafka source
        max_rows = getattr(limit, "max_rows", None) if limit is not None else None
        if max_rows is None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        if max_rows is None or isinstance(limit, ReadAllAvailable):
            return _to_json({tp: max(latest[tp], begin[tp]) for tp in latest})
        return _to_json(rate_limit(begin, latest, max_rows))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = _from_json(start), _from_json(end)
        p = self.planner
        p.forget()
        tps = list(until)
        bounds = p.bounds(tps)
        tasks = p.plan(_ranges(p, self.opts, {tp: begin.get(tp, 0) for tp in tps}, until, bounds),
                       self.opts.min_partitions)
        return [SliceTask(g, self.opts) for g in group(tasks, self.opts.min_partitions)]

    def read(self, partition: SliceTask) -> Iterator:
        return partition.read()

    def commit(self, end: dict) -> None:
        pass  # the checkpoint holds the offsets; nothing is committed to the cluster

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


def rate_limit(begin: dict[TopicPartition, int], latest: dict[TopicPartition, int], max_rows: int
               ) -> dict[TopicPartition, int]:
    """Spark's Kafka rate limit: ``max_rows`` offsets shared between partitions in proportion to what
    each has waiting (each gets at least one offset when it has any)."""
    waiting = {tp: max(0, latest[tp] - begin.get(tp, 0)) for tp in latest}
    total = sum(waiting.values())
    if total <= max_rows:
        return {tp: begin.get(tp, 0) + w for tp, w in waiting.items()}
    out = {}
    for tp, w in waiting.items():
        share = int(max_rows * w / total) if w else 0
        if w and share == 0:
            share = 1
        out[tp] = begin.get(tp, 0) + min(w, share)
    return out


# ------------------------------------------------------------------------------------------ writes


class _Written(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


def _write_rows(opts: SourceOptions, schema, rows) -> _Written:
    """Produce rows with Spark's Kafka sink columns: ``value`` (required), ``key``, ``topic`` (unless the
    ``topic`` option is given), ``partition``, ``headers``."""
    from tierlog.client.sync import Producer
    names = set(schema.fieldNames()) if hasattr(schema, "fieldNames") else set()
    if "value" not in names:
        raise SourceOptionError("the tierlog sink needs a value column (string or binary)")
    if opts.topic is None and "topic" not in names:
        raise SourceOptionError("the tierlog sink needs a topic column or the topic option")
    producer = Producer({**opts.client_config, "bootstrap.servers": opts.bootstrap_servers, "acks": "all"})
    count = 0
    futures = []
    try:
        for row in rows:
            d = row.asDict()
            topic = opts.topic or d.get("topic")
            if topic is None:
                raise SourceOptionError("a row has a null topic and no topic option is given")
            value, key = d.get("value"), d.get("key")
            headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in d.get("headers") or ()]
            futures.append(producer.send(topic, _bytes(value), _bytes(key), partition=d.get("partition"),
                                         headers=headers or None))
            count += 1
        producer.flush()
        for f in futures:
            f.get()  # raise the first failed record
    finally:
        producer.close()
    return _Written(count)


def _bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: SourceOptions, schema) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, rows) -> WriterCommitMessage:
        return _write_rows(self.opts, self.schema, rows)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SourceOptions, schema) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, rows) -> WriterCommitMessage:
        return _write_rows(self.opts, self.schema, rows)

    def commit(self, messages, batch_id: int) -> None:
        pass  # records are acknowledged by the brokers when write() returns (at_least_once, as Kafka's sink)

    def abort(self, messages, batch_id: int) -> None:
        pass
