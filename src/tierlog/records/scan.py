"""Record scanner: where each record's key and value lie in a buffer of v2 batches, in compiled code.

Readers that only need a few records of many (the group coordinator loading ``__consumer_offsets``, the
log cleaner building its offset map) scan the records with these compiled kernels (``_scan.c``, built by
``pip install``) instead of decoding each one into Python objects, then decode only the ones they keep.

:func:`scan_batches` walks a buffer of whole batches (a read of the log) and returns two tables:

* per batch (:class:`ScannedBatches` ``b_*``): its position, base and last offset, attributes, producer id,
  and the index of its first record in the record table with its record count; the records of a compressed
  batch are not scanned (count -1): :func:`scan_batch_records` scans them once decompressed;
* per record (``r_*``): its offset, where it starts, the start and length of its key and value in the buffer
  (length -1 for null) and two 64-bit hashes of the key bytes (of no key: the hashes of nothing).

The walk checks every length against the bytes left (a malformed record stops it with an error status
rather than reading past the buffer) but not CRCs: callers that need them check the batches the table lists.

:func:`last_by_key` marks, among records eligible for it, which is the last occurrence of its key (hash
first, then the key bytes compared, so a hash collision never merges two keys).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tierlog.errors import CorruptMessageError
from tierlog.records import _scan
from tierlog.records.batch import RECORD_BATCH_OVERHEAD

__all__ = ["ScannedRecords", "ScannedBatches", "scan_batches", "scan_batch_records", "last_by_key", "key_hash"]

# Statuses of the walk (_scan.c has the same numbers).
_OK = 0
_BAD_RECORD = 1  # a record's fields do not fit its length or the batch
_BAD_BATCH = 2  # a batch header that is not v2 or is shorter than a header
_STATUS_TEXT = {_BAD_RECORD: "a record's fields run past its length or its batch",
                _BAD_BATCH: "a batch header is not a v2 header or declares a length below the header's"}
_MIN_RECORD = 7  # length, attributes, timestamp delta, offset delta, key and value lengths, header count


class ScannedRecords(NamedTuple):
    """The record table: offset, where the record starts (its length varint), key start and length, value
    start and length (-1: null), and two 64-bit hashes of the key (FNV-1a, and a second construction)."""
    offset: np.ndarray
    start: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    key_hash: np.ndarray
    key_hash2: np.ndarray


class ScannedBatches(NamedTuple):
    """The batch table (``count`` -1: a compressed batch, records not scanned), the record table of the
    uncompressed batches, and where the whole batches end in the buffer."""
    position: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    attributes: np.ndarray
    producer_id: np.ndarray
    first_record: np.ndarray
    count: np.ndarray
    records: ScannedRecords
    end: int


def _record_table(rows: int) -> tuple[np.ndarray, ...]:
    i64 = np.int64
    return (*(np.empty(rows, i64) for _ in range(6)), np.empty(rows, np.uint64), np.empty(rows, np.uint64))


def scan_batches(buf: Any, pos: int = 0, end: int | None = None, key_hash2: bool = True) -> ScannedBatches:
    """Scan the whole batches of ``buf[pos:end]`` (a trailing partial batch is left out: ``end`` of the result
    tells where the whole ones stop). CorruptMessageError for a malformed batch or record. Without
    ``key_hash2`` the second key hash is left 0 (readers that compare key bytes need only the first)."""
    size = memoryview(buf).nbytes
    stop = size if end is None else min(end, size)
    span = max(stop - pos, 0)
    # Upper bounds; np.empty leaves untouched pages unallocated, so a loose bound costs nothing.
    nb_cap = span // RECORD_BATCH_OVERHEAD + 1
    nr_cap = span // _MIN_RECORD + 1
    i64 = np.int64
    batches = tuple(np.empty(nb_cap, i64) for _ in range(7))
    records = _record_table(nr_cap)
    status, nb, nr, at = _scan.scan_batches(buf, pos, stop, key_hash2, *batches, *records)
    if status != _OK:
        raise CorruptMessageError(f"record batch at position {at}: {_STATUS_TEXT[status]}")
    return ScannedBatches(*(a[:nb] for a in batches), ScannedRecords(*(a[:nr] for a in records)), at)


def scan_batch_records(data: Any, count: int, base_offset: int, key_hash2: bool = True) -> ScannedRecords:
    """Scan the ``count`` records that fill ``data`` (a compressed batch's records, decompressed)."""
    table = _record_table(count)
    n = _scan.scan_records(data, count, base_offset, key_hash2, *table)
    if n < 0:
        raise CorruptMessageError(f"decompressed records of the batch at offset {base_offset}: "
                                  f"{_STATUS_TEXT[_BAD_RECORD]} or do not number {count}")
    return ScannedRecords(*table)


def last_by_key(buf: Any, records: ScannedRecords, eligible: np.ndarray) -> np.ndarray:
    """A bool array over ``records``: True where the record is not ``eligible`` or is the last eligible
    record of its key bytes."""
    keep = np.empty(records.offset.shape[0], dtype=np.bool_)
    _scan.last_by_key(buf, records.key_start, records.key_length, records.key_hash, eligible, keep)
    return keep


def key_hash(key: bytes) -> int:
    """The 64-bit FNV-1a hash the scanner gives ``key`` (for tests and callers hashing keys in Python)."""
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h

