"""Reading planned slices on the executors, as Arrow record batches with the Kafka source's columns.

A remote slice is read straight from the remote store: the segment's offset index gives the byte
position of its first offset, then the segment object is range-read in chunks; whole batches of every
codec are decoded into Arrow columns (:mod:`tierlog.spark.columnar`) and only the planned offsets are
kept. A broker slice is read with tierlog's consumer, assigned and sought, its undecoded batches through
the same decoder.

With ``read_committed`` a remote slice leaves out aborted transactions as a read_committed consumer
does. Its aborted transactions are collected, at its first transactional batch only, as Kafka's
``RemoteLogManager.collectAbortedTransactions``: from the ``.txnindex`` of its segment and of the later
remote segments of the plan's lineage, until an entry's last stable offset reaches the slice's end.
When the remote indexes do not complete that search (the next markers may be only in the broker's
local log), the rest of the slice is read through the broker, whose read_committed fetch completes it.

Storage managers are opened read-only and cached per worker process (:func:`tierlog.spark.store.open_store`;
Spark reuses its Python workers), so consecutive tasks do not open the store again. The driver has
checked that the store holds the planned segments (:mod:`tierlog.spark.store`), so one missing here was
deleted by retention after planning: data loss, governed by ``failOnDataLoss``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pyarrow as pa

from tierlog.client.types import TopicPartition
from tierlog.records import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, iter_batches, read_header
from tierlog.storage.index import OffsetEntries
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentMetadata

from .options import SPARK_SCHEMA, SPARK_SCHEMA_HEADERS, SourceOptions  # noqa: F401 - the schema also here
from .plan import BrokerSlice, RemoteSlice

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024
ROWS_PER_BATCH = 50_000

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class DataLossError(RuntimeError):
    """Planned offsets are gone (retention deleted them) and ``failOnDataLoss`` is true."""


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)




# ------------------------------------------------------------------------------------ remote slices

def storage_manager(opts: SourceOptions, cluster_id: str | None = None):
    """The remote storage manager the options name, read-only, one per worker process; with ``cluster_id``
    it finds segments in the cluster's key folder too (the broker's default layout)."""
    from .store import open_store
    return open_store(opts, cluster_id)


def _columnar():
    """The columnar decoder. Imported here, not at the top: its compiled kernels are needed where
    slices are read, not where they are planned."""
    from . import columnar
    return columnar


class IncompleteSearchError(Exception):
    """The remote transaction indexes do not complete a slice's search for aborted transactions."""


_TXN_CACHE_SIZE = 4096
_txn_entries: dict = {}  # segment id -> RemoteTransactionIndex, per worker process
_txn_lock = threading.Lock()


def _txn_index(rsm, md: RemoteLogSegmentMetadata):
    """A remote segment's transaction index, empty when it has none (the manifest says so: no store read)."""
    from tierlog.tiered.exceptions import RemoteResourceNotFoundError
    from tierlog.tiered.index_cache import RemoteTransactionIndex
    key = md.segment_id.id
    with _txn_lock:
        found = _txn_entries.get(key)
    if found is None:
        try:
            data = rsm.fetch_index(md, IndexType.TRANSACTION)
        except RemoteResourceNotFoundError:
            # no transaction index (the usual case); or a later segment deleted since planning, which
            # retention does only after this slice's older segment, whose read then reports the loss
            data = b""
        found = RemoteTransactionIndex(data, md)
        with _txn_lock:
            if len(_txn_entries) >= _TXN_CACHE_SIZE:
                _txn_entries.clear()
            _txn_entries[key] = found
    return found


def aborted_transactions(rsm, task: RemoteSlice) -> list[tuple[int, int]]:
    """(producer id, first offset) of the transactions aborted in ``[task.start, task.end)``: Kafka's
    search over the remote transaction indexes from the slice's segment on, until an entry's last
    stable offset reaches the end. IncompleteSearchError when they do not complete it."""
    lineage = task.lineage or (task.segment,)
    ids = [m.segment_id for m in lineage]
    segments = lineage[ids.index(task.segment.segment_id):] if task.segment.segment_id in ids else (task.segment,)
    found: list[tuple[int, int]] = []
    for md in segments:
        got, complete = _txn_index(rsm, md).collect(task.start, task.end)
        found += got
        if complete:
            return found
    raise IncompleteSearchError(f"{task.topic}-{task.partition} [{task.start}, {task.end})")


def read_remote(task: RemoteSlice, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    from tierlog.tiered.exceptions import RemoteResourceNotFoundError

    columnar = _columnar()
    rsm = storage_manager(opts, task.cluster_id)
    md = task.segment
    aborted = columnar.AbortedFilter(lambda: aborted_transactions(rsm, task)) if opts.read_committed else None
    try:
        position = OffsetEntries(md.start_offset, rsm.fetch_index(md, IndexType.OFFSET)).lookup(task.start)[1]
        size = md.segment_size_in_bytes
        offset = task.start
        schema = arrow_schema(opts.include_headers)
        buffer = _chunk_buffer(CHUNK_BYTES)
        while position < size and offset < task.end:
            chunk = buffer[:rsm.read_log_segment_into(md, position, buffer)]
            usable = _complete_prefix(chunk)
            if usable == 0 and len(chunk) >= RECORD_BATCH_OVERHEAD:
                # one batch larger than a chunk: read it whole
                need = read_header(chunk, 0).batch_length + LOG_OVERHEAD
                chunk = memoryview(bytearray(need))
                chunk = chunk[:rsm.read_log_segment_into(md, position, chunk)]
                usable = _complete_prefix(chunk)
            if usable == 0:
                break  # the segment ends in a partial batch
            # the next read starts at the first incomplete batch: re-reading its head is cheaper than
            # copying every chunk onto the leftover of the last
            position += usable
            buf = chunk[:usable]
            try:
                batches, next_offset = columnar.decode(buf, task.topic, task.partition, offset, task.end,
                                                       opts.include_headers, schema, aborted)
            except IncompleteSearchError:
                # the markers that decide may be only in the broker's local log: its read_committed
                # fetch searches there (nothing of this chunk was returned yet)
                log.info("aborted transactions of %s-%d [%d, %d) not all in the remote transaction indexes; "
                         "reading it through the broker", task.topic, task.partition, offset, task.end)
                yield from read_broker([BrokerSlice(task.topic, task.partition, offset, task.end)], opts)
                return
            yield from batches
            offset = max(offset, min(next_offset, task.end))
    except RemoteResourceNotFoundError as e:
        from .store import check_root
        check_root(rsm, opts)  # a store folder missing on this executor is a configuration error
        message = (f"remote segment {md.segment_id.id} of {task.topic}-{task.partition} (offsets "
                   f"{md.start_offset}-{md.end_offset}) is gone, deleted by retention after the query was "
                   f"planned: {e}")
        if opts.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to skip lost data") from None
        log.warning("%s; skipped (failOnDataLoss=false)", message)


_chunk_buffers = threading.local()


def _chunk_buffer(size: int) -> memoryview:
    """One read buffer per worker thread, reused by every read: a chunk is decoded (everything kept is
    copied out) before the next read, and a fresh buffer per chunk would cost page faults over every
    byte, about half the read time."""
    buffer = getattr(_chunk_buffers, "buffer", None)
    if buffer is None or len(buffer) != size:
        buffer = _chunk_buffers.buffer = memoryview(bytearray(size))
    return buffer


def _complete_prefix(buf: bytes) -> int:
    """Bytes of ``buf`` that hold whole batches."""
    end = 0
    for pos, h in iter_batches(buf):
        end = pos + h.size
    return end


# ------------------------------------------------------------------------------------ broker slices


def read_broker(tasks: list[BrokerSlice], opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The slices through the broker, with one consumer assigned to all their partitions (so the tail
    of every partition costs one connection and each fetch serves all of them)."""
    from tierlog.client.errors import NoOffsetForPartitionError
    from tierlog.client.sync import Consumer
    ends = {TopicPartition(t.topic, t.partition): t.end for t in tasks}
    positions = {TopicPartition(t.topic, t.partition): t.start for t in tasks if t.end > t.start}
    if not positions:
        return
    # The ends are below the high watermark, so no fetch needs to wait for data; a short wait keeps a
    # fetch of a partition already at its end (prefetched with the others) from holding the rest up.
    consumer = Consumer({"fetch.max.wait.ms": "20", **opts.client_config, "bootstrap.servers": opts.bootstrap_servers,
                         "enable.auto.commit": "false", "auto.offset.reset": "none",
                         "max.poll.records": str(ROWS_PER_BATCH)})
    # Undecoded batches through the columnar decoder, as remote slices: no Python object per record.
    # With read_committed the consumer leaves out aborted transactions and markers (from the fetch
    # responses' aborted transactions) before handing the batches over.
    columnar = _columnar()
    schema = arrow_schema(opts.include_headers)
    try:
        consumer.assign(list(positions))
        for tp, start in positions.items():
            consumer.seek(tp, start)
        idle = 0
        while positions:
            try:
                polled = consumer.poll_batches(1000)
            except NoOffsetForPartitionError as e:
                for tp in e.partitions if getattr(e, "partitions", None) else list(positions):
                    if tp not in positions:
                        continue
                    start = consumer.beginning_offsets([tp])[tp]
                    if start <= positions[tp]:
                        continue
                    message = (f"offsets {positions[tp]}-{start - 1} of {tp.topic}-{tp.partition} are gone (log "
                               f"start offset now {start}), deleted by retention while the query ran")
                    if opts.fail_on_data_loss:
                        raise DataLossError(message + "; set failOnDataLoss=false to skip lost data") from e
                    log.warning("%s; skipped (failOnDataLoss=false)", message)
                    consumer.seek(tp, start)
                    positions[tp] = start
                continue
            if not any(polled.values()):
                idle += 1
                if idle > 120:
                    raise TimeoutError(f"no records from {sorted(positions)} for 2 min")
                continue
            idle = 0
            for tp, got in polled.items():
                if tp not in positions:
                    continue
                end = ends[tp]
                for fetched in got:
                    batches, next_offset = columnar.decode(fetched.buf, tp.topic, tp.partition, positions[tp],
                                                           end, opts.include_headers, schema)
                    yield from batches
                    # end_offset: past what read_committed left out too (aborted batches, markers)
                    positions[tp] = max(positions[tp], min(max(next_offset, fetched.end_offset), end))
                if positions[tp] >= end:
                    del positions[tp]
                    consumer.pause([tp])
    finally:
        consumer.close()


def read_task(task, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    if isinstance(task, RemoteSlice):
        return read_remote(task, opts)
    return read_broker([task], opts)


def read_tasks(tasks: list, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """One Spark task's slices: the remote ones in order, then the broker ones (each partition's tail,
    after its remote slices) together, with one consumer."""
    for task in tasks:
        if isinstance(task, RemoteSlice):
            yield from read_remote(task, opts)
    brokers = [t for t in tasks if isinstance(t, BrokerSlice)]
    if brokers:
        yield from read_broker(brokers, opts)
