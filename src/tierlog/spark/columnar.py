"""Kafka record batches straight to Arrow columns, with no Python object per record.

The record format is a chain of varints, so finding where each key and value lies is a sequential
scan. Python does only per-batch work here (headers, decompression); the per-record scan and the copy
of keys and values into Arrow's contiguous buffers run in small C kernels (``_columnar.c``, built by
``pip install``), at memory speed. Their varint readers are the record validator's (``records/kernels.h``),
so every compiled scan reads a record's fields with the same bounds.

Semantics match Kafka's consumer: control batches are skipped, LogAppendTime batches give every record
the batch's max timestamp, CRCs are checked, and only offsets in ``[first, end)`` are kept; with an
:class:`AbortedFilter` (read_committed) the batches of aborted transactions are skipped too, batch by
batch, as Kafka's ``CompletedFetch`` does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from tierlog.client import errors
from tierlog.records import RECORD_BATCH_OVERHEAD, CompressionType, iter_batches, verify_crc
from tierlog.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
)
from tierlog.records.compression import decompress_bounded, decompression_limit
from tierlog.records.control import ABORT
from tierlog.records.record import decode_batch
from tierlog.spark import _columnar

# Arrow's binary type has 32-bit offsets: a batch of columns stays under this many bytes of values.
MAX_COLUMN_BYTES = 1 << 30


def _binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray, typ: pa.DataType) -> pa.Array:
    """An Arrow binary (or string) array of the slices, nulls where the length is negative."""
    n = len(pos)
    # Arrow's pool (mimalloc) keeps freed pages for the next batch; fresh numpy arrays would fault in
    # every page again
    offsets_buf = pa.allocate_buffer(4 * (n + 1))
    data_buf = pa.allocate_buffer(int(np.maximum(lens, 0).sum()))
    _columnar.gather(buf, pos, lens, np.frombuffer(offsets_buf, np.int32), np.frombuffer(data_buf, np.uint8))
    nulls = lens < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(typ, n, [validity, offsets_buf, data_buf], null_count)


class AbortedFilter:
    """read_committed over a run of batches read in offset order, Kafka's consumer rule
    (``CompletedFetch``): a min-heap of the aborted transactions (first offset, producer id); a batch
    with a producer id first moves every entry whose first offset is at or below the batch's last
    offset into the set of aborted producers; a transactional batch of an aborted producer is skipped,
    and that producer's ABORT marker takes it out of the set. Per batch, never per record.

    ``aborted`` is the list of (producer id, first offset), or a function returning it, called once, at
    the first batch with a producer id that is transactional or a control batch: a run without
    transactions never collects it (no transaction index is read)."""

    __slots__ = ("_heap", "_load", "_pids")

    def __init__(self, aborted: Iterable[tuple[int, int]] | Callable[[], Iterable[tuple[int, int]]]) -> None:
        self._load = aborted if callable(aborted) else None
        self._heap: list[tuple[int, int]] | None = None if callable(aborted) else self._make(aborted)
        self._pids: set[int] = set()

    @staticmethod
    def _make(aborted: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        heap = [(int(first), int(pid)) for pid, first in aborted]
        heapq.heapify(heap)
        return heap

    def skip(self, view: memoryview, pos: int, hdr: BatchHeader) -> bool:
        """Whether the batch at ``pos`` is (part of) an aborted transaction; called once per batch, in
        order, for every batch (control batches included)."""
        attrs = hdr.attributes
        if hdr.producer_id < 0 or not attrs & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK):
            return False
        heap = self._heap
        if heap is None:
            heap = self._heap = self._make(self._load())
            self._load = None
        last = hdr.last_offset
        while heap and heap[0][0] <= last:
            self._pids.add(heapq.heappop(heap)[1])
        if attrs & CONTROL_FLAG_MASK:
            if hdr.producer_id in self._pids and _is_abort_marker(view, pos):
                self._pids.discard(hdr.producer_id)
            return False
        return hdr.producer_id in self._pids


def _is_abort_marker(view: memoryview, pos: int) -> bool:
    """Whether the control batch at ``pos`` is an ABORT marker (its first record's key, Kafka's
    ``ControlRecordType``)."""
    _, records = decode_batch(view, pos, verify=False)
    key = records[0].key if records else None
    return key is not None and len(key) >= 4 and int.from_bytes(key[2:4], "big", signed=True) == ABORT


def _sections(view: memoryview, first: int, end: int, aborted: AbortedFilter | None = None
              ) -> tuple[bytes | memoryview, list, int]:
    """The record sections of the batches in ``view`` that hold offsets in ``[first, end)``, as
    (buffer, [(start, stop, count, base offset, base timestamp, timestamp type, max timestamp)], next
    offset). Compressed batches are decompressed into a buffer of their own sections."""
    found = []
    parts: list = []
    size = 0
    compressed = False
    next_offset = first
    for pos, hdr in iter_batches(view):
        next_offset = max(next_offset, hdr.next_offset)
        if hdr.next_offset <= first or hdr.base_offset >= end:
            continue
        attrs = hdr.attributes
        if aborted is not None:
            verify_crc(view, pos, hdr)  # before its producer id or a marker is trusted
            if aborted.skip(view, pos, hdr):
                continue
        if attrs & CONTROL_FLAG_MASK or hdr.records_count <= 0:
            continue
        if aborted is None:
            verify_crc(view, pos, hdr)
        section = view[pos + RECORD_BATCH_OVERHEAD:pos + hdr.size]
        codec = attrs & COMPRESSION_CODEC_MASK
        if codec:
            if codec > CompressionType.ZSTD:
                raise errors.UnsupportedCompressionTypeError(
                    f"batch at offset {hdr.base_offset} uses unknown codec id {codec}")
            # bounded: a decompression bomb raises DecompressedTooLargeError instead of taking GBs
            section = decompress_bounded(CompressionType(codec), section, decompression_limit(hdr.records_count))
            compressed = True
        ts_type = 1 if attrs & TIMESTAMP_TYPE_MASK else 0
        found.append([size, size + len(section), hdr.records_count, hdr.base_offset, hdr.base_timestamp, ts_type,
                      hdr.max_timestamp, pos + RECORD_BATCH_OVERHEAD])
        parts.append(section)
        size += len(section)
    if compressed:
        return b"".join(parts), [f[:7] for f in found], next_offset
    # nothing to decompress: scan the data in place
    return view, [[f[7], f[7] + f[1] - f[0]] + f[2:7] for f in found], next_offset


def decode(data: bytes | memoryview, topic: str, partition: int, first: int, end: int,
           include_headers: bool, schema: pa.Schema, aborted: AbortedFilter | None = None
           ) -> tuple[list[pa.RecordBatch], int]:
    """The records of the whole batches in ``data`` with offsets in ``[first, end)`` as Arrow record
    batches of ``schema`` (the Kafka source's columns), and the offset after the last batch seen. With
    ``aborted`` (read_committed; one filter for all the chunks of a run, in order) the batches of
    aborted transactions are left out."""
    view = memoryview(data)
    buf, found, next_offset = _sections(view, first, end, aborted)
    if not found:
        return [], next_offset
    arr = np.frombuffer(buf, np.uint8)
    per_batch = [np.array(c, np.int64) for c in zip(*found)]
    total = int(per_batch[2].sum())
    offsets, timestamps, key_pos, key_len, val_pos, val_len, hdr_pos, hdr_count = (
        np.empty(total, np.int64) for _ in range(8))
    types = np.empty(total, np.int32)
    n = _columnar.scan(arr, *per_batch, first, end, offsets, timestamps, types, key_pos, key_len, val_pos, val_len,
              hdr_pos, hdr_count)
    if n < 0:
        raise errors.CorruptMessageError(
            f"malformed record in the batch at offset {found[-1 - n][3]} of {topic}-{partition}")
    out = []
    start = 0
    value_bytes = np.cumsum(np.maximum(val_len[:n], 0) + np.maximum(key_len[:n], 0))
    while start < n:
        # keep each record batch's keys and values under Arrow's 32-bit offsets
        base = value_bytes[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(value_bytes, base + MAX_COLUMN_BYTES, side="right")))
        sl = slice(start, min(stop, n))
        m = sl.stop - sl.start
        columns = [
            _binary(arr, key_pos[sl], key_len[sl], pa.binary()),
            _binary(arr, val_pos[sl], val_len[sl], pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), m),
            pa.repeat(pa.scalar(partition, pa.int32()), m),
            pa.array(offsets[sl], pa.int64()),
            pa.array(timestamps[sl] * 1000, pa.int64()).view(pa.timestamp("us", tz="UTC")),
            pa.array(types[sl], pa.int32()),
        ]
        if include_headers:
            columns.append(_headers(arr, hdr_pos[sl], hdr_count[sl], schema.field("headers").type))
        out.append(pa.RecordBatch.from_arrays(columns, schema=schema))
        start = sl.stop
    return out, next_offset


def _headers(arr: np.ndarray, hdr_pos: np.ndarray, hdr_count: np.ndarray, typ: pa.DataType) -> pa.Array:
    total = int(hdr_count.sum())
    hk_pos, hk_len, hv_pos, hv_len = (np.empty(total, np.int64) for _ in range(4))
    if not _columnar.scan_headers(arr, hdr_pos, hdr_count, hk_pos, hk_len, hv_pos, hv_len):
        raise errors.CorruptMessageError("malformed record header")
    entries = pa.StructArray.from_arrays(
        [_binary(arr, hk_pos, hk_len, pa.string()), _binary(arr, hv_pos, hv_len, pa.binary())],
        fields=list(typ.value_type))
    list_offsets = np.zeros(len(hdr_pos) + 1, np.int32)
    np.cumsum(hdr_count, out=list_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(list_offsets), entries, type=typ)
