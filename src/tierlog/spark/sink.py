"""The exactly-once ``tierlog`` sink: each Spark task writes its partition of a batch inside a Kafka
transaction that the driver commits (a two-phase commit), with the batch id committed in the same
transaction so that a batch re-run after a restart is not written twice.

- **Transactional id**: ``<prefix>-<Spark partition id>``. The prefix is ``tierlog.transactionalIdPrefix``
  when given, else ``tierlog-sink-<query id>`` for a streaming query (the id kept in its checkpoint, so
  a restarted query has the same ids) and ``tierlog-sink-<random>`` per batch write.
- **Phase one (task)**: ``init_transactions`` fences the attempt before this one (a retried task) and
  aborts its open transaction; the task reads the batch marker (below) and returns at once when this
  batch, or a later one, is already committed for its partition. Otherwise it sends its rows, adds the
  marker with ``send_offsets_to_transaction``, waits until every record is answered and returns the
  producer id and epoch in its commit message, leaving the transaction open.
- **Phase two (driver)**: ``commit`` resumes every task's transaction (EndTxn with its producer id and
  epoch) and commits it; ``abort`` (a failed job) aborts those that prepared, so read_committed readers
  are not held back until ``transaction.timeout.ms``.
- **Batch marker**: the consumer group named as the transactional id commits offset ``batch id + 1``
  (for partition 0 of the topic written, which must exist: group coordinators refuse offsets of unknown
  topics). It commits atomically with the rows, as Kafka Streams commits its input offsets. A query
  restarted from its checkpoint re-runs the batch that has no commit in the checkpoint; tasks of
  partitions whose transaction was committed before the crash find the marker and write nothing, the
  others write (their open transaction from before was aborted by ``init_transactions``).

This needs the batch re-run to give each Spark partition the same rows, true for a deterministic query
over a replayable source (Kafka, tierlog, files) read from the checkpoint's offsets, as every sink that
keys its idempotence on the partition needs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from tierlog.client.types import OffsetAndMetadata, TopicPartition
from tierlog.config.client import client_settings

from .options import SourceOptionError, SourceOptions

log = logging.getLogger(__name__)

# local properties Spark's micro-batch execution sets on every job of a batch (StreamExecution.QUERY_ID_KEY,
# MicroBatchExecution.BATCH_ID_KEY); tasks read them from their TaskContext
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
# Kafka's 16 KiB batches make a Python producer pay a Produce request per 16 records of 1 KiB, with at
# most 5 in flight per partition: 256 KiB writes 1 KiB records about 6x faster (unless kafka.batch.size)
DEFAULT_BATCH_SIZE = 262_144


@dataclass
class Prepared(WriterCommitMessage):
    """One task's answer: its open transaction, for the driver to commit or abort."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    batch_id: int
    rows: int
    skipped: bool = False  # nothing is open: the batch was committed before for this partition, or no row


def batch_prefix(opts: SourceOptions) -> str:
    """The prefix of a batch write (chosen on the driver, shared by its tasks)."""
    return opts.transactional_id_prefix or f"tierlog-sink-{uuid.uuid4()}"


def _task_identity(opts: SourceOptions, prefix: str | None, streaming: bool) -> tuple[str, int, int]:
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise SourceOptionError("the exactly-once tierlog sink runs in Spark tasks only")
    batch_id = 0
    if streaming:
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        raw_batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if raw_batch is None or (query_id is None and prefix is None):
            raise SourceOptionError("the exactly-once tierlog sink did not get the streaming query's id and batch id "
                                    "from Spark; set tierlog.transactionalIdPrefix or "
                                    "tierlog.deliveryGuarantee=at_least_once")
        batch_id = int(raw_batch)
        prefix = prefix or f"tierlog-sink-{query_id}"
    assert prefix is not None
    return prefix, ctx.partitionId(), batch_id


def _client_config(opts: SourceOptions) -> dict:
    return {**opts.client_config, "bootstrap.servers": opts.bootstrap_servers}


def write_prepared(opts: SourceOptions, schema, batches: Iterator, prefix: str | None, streaming: bool) -> Prepared:
    """Phase one, in a Spark task: Arrow record batches of the sink's columns into an open transaction."""
    names = set(schema.fieldNames()) if hasattr(schema, "fieldNames") else set()
    if "value" not in names:
        raise SourceOptionError("the tierlog sink needs a value column (string or binary)")
    if opts.topic is None and "topic" not in names:
        raise SourceOptionError("the tierlog sink needs a topic column or the topic option")
    prefix, partition, batch_id = _task_identity(opts, prefix, streaming)
    return asyncio.run(_prepare(opts, batches, prefix, partition, batch_id))


async def _prepare(opts: SourceOptions, batches: Iterator, prefix: str, partition: int, batch_id: int) -> Prepared:
    from tierlog.client.admin import Admin
    from tierlog.client.network import deadline_after
    from tierlog.client.producer import Producer

    txn_id = f"{prefix}-{partition}"
    config = _client_config(opts)
    # no transaction.timeout.ms given: Kafka's producer default (60 s) is too short for a slow stage
    # between a task's end and the driver's commit; 15 min as Kafka's transaction.max.timeout.ms allows
    producer = Producer({"transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS, "batch.size": DEFAULT_BATCH_SIZE,
                         **config, "transactional.id": txn_id, "acks": "all"})
    await producer.start()
    try:
        await producer.init_transactions()  # fences the attempt before this one and aborts what it left open
        admin_keys = set(client_settings("admin"))  # the kafka.* producer settings are not the admin's
        async with Admin({k: v for k, v in config.items() if k in admin_keys}) as admin:
            committed = await admin.list_consumer_group_offsets(txn_id, require_stable=True)
        done = max((om.offset for om in committed.values() if om is not None), default=0)
        if done > batch_id:
            log.info("%s: batch %d already committed (marker %d); nothing written", txn_id, batch_id, done)
            return Prepared(txn_id, -1, -1, batch_id, 0, skipped=True)
        producer.begin_transaction()
        rows = 0
        first_topic = opts.topic
        it = iter(batches)
        while (batch := await asyncio.to_thread(next, it, None)) is not None:
            # pulled in a thread: the sender (linger.ms, answers) runs while Spark computes the next batch
            if opts.topic and batch.num_rows and not producer.partitions_for(opts.topic):
                # the partition count before the first row, so that every batch's keys are hashed at once
                # (send would wait for it at its first record just the same)
                await producer.client.wait_for_topic(opts.topic, deadline_after(producer.config["max.block.ms"]))
            for topic, value, key, part, headers in _records(opts, batch, producer.partitions_for):
                await producer.send(topic, value, key, partition=part, headers=headers)
                first_topic = first_topic or topic
                rows += 1
        await producer.flush()
        if first_topic is None:  # no row and no topic option: nothing written, nothing to mark or commit
            return Prepared(txn_id, -1, -1, batch_id, 0, skipped=True)
        # raises the error of a record the broker refused: the task fails, its retry starts over
        await producer.send_offsets_to_transaction(
            {TopicPartition(first_topic, 0): OffsetAndMetadata(
                batch_id + 1, json.dumps({"batch": batch_id, "rows": rows}))}, txn_id)
        producer_id, epoch = producer.producer_id_and_epoch
        return Prepared(txn_id, producer_id, epoch, batch_id, rows)
    finally:
        await producer.close()  # leaves the transaction open: the driver ends it


def _records(opts: SourceOptions, batch, partitions_for=None) -> Iterable[tuple]:
    """(topic, value, key, partition, headers) per row of an Arrow record batch. With the ``topic`` option
    and its partitions known (``partitions_for``), a row with a key and no partition gets the default
    partitioner's partition for its key from one compiled pass over the key column (the producer would
    hash each key in Python: a fifth of its time per record)."""
    import pyarrow as pa
    names = batch.schema.names
    n = batch.num_rows

    def column(name: str, binary: bool = False) -> list:
        if name not in names:
            return [None] * n
        col = batch.column(names.index(name))
        if binary and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.binary())
        return col.to_pylist()

    values, keys = column("value", True), column("key", True)
    topics = [opts.topic] * n if opts.topic else column("topic")
    parts = column("partition")
    raw_headers = column("headers")
    if opts.topic and partitions_for is not None and "key" in names and not _ignore_keys(opts):
        count = len(partitions_for(opts.topic))
        if count:  # a null key stays unpartitioned: the producer's sticky partitioner places it, as Kafka's
            hashed = _key_partitions(batch.column(names.index("key")), count)
            parts = [h if p is None and k is not None else p for p, h, k in zip(parts, hashed, keys)]
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise SourceOptionError("a row has a null topic and no topic option is given")
        hs = raw_headers[i]
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in hs] if hs else None
        yield topic, values[i], keys[i], parts[i], headers


def _ignore_keys(opts: SourceOptions) -> bool:
    return str(opts.client_config.get("partitioner.ignore.keys", "false")).lower() == "true"


def _key_partitions(col, count: int) -> list:
    """Kafka's ``toPositive(murmur2(key)) % count`` of each key of an Arrow string or binary column (a null
    key gets a number too, which :func:`_records` leaves unused)."""
    import numpy as np
    import pyarrow as pa

    from ._columnar import key_partitions
    if pa.types.is_string(col.type):
        col = col.cast(pa.binary())  # the same buffers: UTF-8 bytes are the serialized key
    n = len(col)
    if not pa.types.is_binary(col.type) or n == 0:
        return [None] * n
    offsets, data = col.buffers()[1:3]
    out = np.empty(n, np.int32)
    key_partitions(data if data is not None else b"", np.frombuffer(offsets, np.int32)[col.offset:col.offset + n + 1],
                   count, out)
    return out.tolist()


def end_transactions(opts: SourceOptions, messages: list, commit: bool, batch_id: int | None = None) -> int:
    """Phase two, on the driver: commit (or abort) every prepared transaction; the rows committed."""
    prepared = [m for m in messages if isinstance(m, Prepared) and not m.skipped]
    if batch_id is not None:
        for m in prepared:
            if m.batch_id != batch_id:
                raise RuntimeError(f"{m.transactional_id} prepared batch {m.batch_id}, not batch {batch_id}")
    if not prepared:
        return 0
    return asyncio.run(_end_all(opts, prepared, commit))


async def _end_all(opts: SourceOptions, prepared: list[Prepared], commit: bool) -> int:
    from tierlog.client.producer import Producer

    async def end(m: Prepared) -> int:
        producer = Producer({**_client_config(opts), "transactional.id": m.transactional_id, "acks": "all"})
        await producer.start()
        try:
            await producer.resume_transaction(m.producer_id, m.producer_epoch)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
            return m.rows
        finally:
            await producer.close()

    results = await asyncio.gather(*(end(m) for m in prepared), return_exceptions=not commit)
    if not commit:
        for m, r in zip(prepared, results):
            if isinstance(r, BaseException):  # the coordinator aborts it at transaction.timeout.ms anyway
                log.warning("%s: abort failed: %s", m.transactional_id, r)
        return 0
    return sum(results)


class ExactlyOnceBatchWriter(DataSourceArrowWriter):
    """``df.write.format("tierlog")``: all of the write or none of it for read_committed readers."""

    def __init__(self, opts: SourceOptions, schema) -> None:
        self.opts = opts
        self.schema = schema
        self.prefix = batch_prefix(opts)  # on the driver: every task of this write shares it

    def write(self, iterator) -> WriterCommitMessage:
        return write_prepared(self.opts, self.schema, iterator, self.prefix, streaming=False)

    def commit(self, messages) -> None:
        end_transactions(self.opts, messages, commit=True)

    def abort(self, messages) -> None:
        end_transactions(self.opts, messages, commit=False)


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("tierlog")``: each micro-batch committed once, across task retries and restarts."""

    def __init__(self, opts: SourceOptions, schema) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator) -> WriterCommitMessage:
        return write_prepared(self.opts, self.schema, iterator, self.opts.transactional_id_prefix, streaming=True)

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 - Spark's parameter name
        end_transactions(self.opts, messages, commit=True, batch_id=batchId)

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        end_transactions(self.opts, messages, commit=False)
