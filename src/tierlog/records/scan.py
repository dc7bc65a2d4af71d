"""Record scanner: where each record's key and value lie in a buffer of v2 batches, in compiled code.

Readers that only need a few records of many (the group coordinator loading ``__consumer_offsets``, the
log cleaner building its offset map) scan the records with these numba kernels instead of decoding each
one into Python objects, then decode only the ones they keep.

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

import threading
import time
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from tierlog.errors import CorruptMessageError
from tierlog.records.batch import COMPRESSION_CODEC_MASK, RECORD_BATCH_OVERHEAD
from tierlog.records.validation import read_varint, read_varlong

__all__ = ["ScannedRecords", "ScannedBatches", "scan_batches", "scan_batch_records", "last_by_key", "warm_up",
           "key_hash"]

_U8 = np.dtype(np.uint8)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX_START = np.uint64(0x9E3779B97F4A7C15)
_MIX_PRIME = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_PRIME = np.uint64(0xC4CEB9FE1A85EC53)

# Statuses of the walk.
_OK = 0
_BAD_RECORD = 1  # a record's fields do not fit its length or the batch
_BAD_BATCH = 2  # a batch header that is not v2 or is shorter than a header
_STATUS_TEXT = {_BAD_RECORD: "a record's fields run past its length or its batch",
                _BAD_BATCH: "a batch header is not a v2 header or declares a length below the header's"}
_MIN_RECORD = 7  # length, attributes, timestamp delta, offset delta, key and value lengths, header count


@njit(cache=True, nogil=True, inline="always")
def _be(buf, pos, n):
    """The big-endian signed integer of ``n`` bytes at ``pos``."""
    v = np.int64(0)
    for i in range(n):
        v = (v << 8) | np.int64(buf[pos + i])
    shift = 64 - 8 * n
    return (v << shift) >> shift


@njit(cache=True, nogil=True, inline="always")
def _fnv(buf, start, length):
    h = _FNV_OFFSET
    for i in range(start, start + length):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@njit(cache=True, nogil=True, inline="always")
def _mix(buf, start, length):
    """A second 64-bit hash of the key, of another construction than FNV-1a (a multiply-xorshift per byte and
    MurmurHash3's finalizer): the log cleaner's offset map keys on both, 128 bits like Kafka's MD5."""
    h = _MIX_START ^ np.uint64(length)
    for i in range(start, start + length):
        h = (h ^ np.uint64(buf[i])) * _MIX_PRIME
        h ^= h >> np.uint64(29)
    h ^= h >> np.uint64(33)
    h *= _MIX_PRIME
    h ^= h >> np.uint64(33)
    h *= _FMIX_PRIME
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, nogil=True, inline="always")
def _records(buf, pos, end, count, base_offset, r_off, r_start, r_ks, r_kl, r_vs, r_vl, r_hash, r_hash2, hash2, n):
    """Scan ``count`` records of ``buf[pos:end]`` into the record table from row ``n``; the next row, or -1
    for a malformed record."""
    for _ in range(count):
        start = pos
        size, pos = read_varint(buf, pos, end)
        if pos < 0 or size < _MIN_RECORD - 1 or size > end - pos:
            return -1
        rec_end = pos + size
        pos += 1  # attributes
        _, pos = read_varlong(buf, pos, rec_end)
        if pos < 0:
            return -1
        delta, pos = read_varint(buf, pos, rec_end)
        if pos < 0:
            return -1
        key_len, pos = read_varint(buf, pos, rec_end)
        if pos < 0 or key_len > rec_end - pos:
            return -1
        key_start = pos
        if key_len > 0:
            pos += key_len
        elif key_len < -1:
            return -1
        value_len, pos = read_varint(buf, pos, rec_end)
        if pos < 0 or value_len > rec_end - pos or value_len < -1:
            return -1
        r_off[n] = base_offset + delta
        r_start[n] = start
        r_ks[n] = key_start
        r_kl[n] = key_len
        r_vs[n] = pos
        r_vl[n] = value_len
        klen = max(key_len, 0)
        r_hash[n] = _fnv(buf, key_start, klen)
        r_hash2[n] = _mix(buf, key_start, klen) if hash2 else np.uint64(0)
        n += 1
        pos = rec_end  # headers: not needed by the readers of this table
    return n


@njit(cache=True, nogil=True)
def _scan_batches(buf, pos, end, hash2, b_pos, b_base, b_last, b_attr, b_pid, b_first, b_count,
                  r_off, r_start, r_ks, r_kl, r_vs, r_vl, r_hash, r_hash2):
    """Walk the whole batches of ``buf[pos:end]``: (status, batches, records, position after the last whole
    batch or of the failing one)."""
    nb = 0
    nr = 0
    while end - pos >= RECORD_BATCH_OVERHEAD:
        size = _be(buf, pos + 8, 4) + 12
        if buf[pos + 16] != 2 or size < RECORD_BATCH_OVERHEAD:
            return _BAD_BATCH, nb, nr, pos
        if size > end - pos:
            break
        base = _be(buf, pos, 8)
        attributes = _be(buf, pos + 21, 2)
        count = _be(buf, pos + 57, 4)
        b_pos[nb] = pos
        b_base[nb] = base
        b_last[nb] = base + _be(buf, pos + 23, 4)
        b_attr[nb] = attributes
        b_pid[nb] = _be(buf, pos + 43, 8)
        b_first[nb] = nr
        if attributes & COMPRESSION_CODEC_MASK and count > 0:
            b_count[nb] = -1
        else:
            if count < 0:
                return _BAD_RECORD, nb, nr, pos
            got = _records(buf, pos + RECORD_BATCH_OVERHEAD, pos + size, count, base, r_off, r_start, r_ks, r_kl,
                           r_vs, r_vl, r_hash, r_hash2, hash2, nr)
            if got < 0:
                return _BAD_RECORD, nb, nr, pos
            b_count[nb] = count
            nr = got
        nb += 1
        pos += size
    return _OK, nb, nr, pos


@njit(cache=True, nogil=True)
def _scan_records(buf, count, base_offset, hash2, r_off, r_start, r_ks, r_kl, r_vs, r_vl, r_hash, r_hash2):
    """Scan ``count`` records filling ``buf`` (decompressed records): the rows written, -1 if malformed."""
    n = _records(buf, 0, buf.shape[0], count, base_offset, r_off, r_start, r_ks, r_kl, r_vs, r_vl, r_hash, r_hash2,
                 hash2, 0)
    if n >= 0 and n != count:
        return -1
    return n


@njit(cache=True, nogil=True)
def _last_by_key(buf, r_ks, r_kl, r_hash, eligible, keep):
    """``keep[i]``: record i is not eligible, or no later eligible record has its key. Open addressing on
    the hash, walked from the last record back; equal hashes compare the key bytes."""
    n = r_hash.shape[0]
    size = 16
    while size < 2 * n:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.zeros(size, dtype=np.int64)  # record index + 1; 0: empty
    for i in range(n - 1, -1, -1):
        if not eligible[i]:
            keep[i] = True
            continue
        h = r_hash[i]
        slot = h & mask
        found = False
        while table[slot] != 0:
            j = table[slot] - 1
            if r_hash[j] == h and r_kl[j] == r_kl[i]:
                same = True
                a = r_ks[i]
                b = r_ks[j]
                for k in range(r_kl[i]):
                    if buf[a + k] != buf[b + k]:
                        same = False
                        break
                if same:
                    found = True
                    break
            slot = (slot + np.uint64(1)) & mask
        if found:
            keep[i] = False
        else:
            table[slot] = i + 1
            keep[i] = True


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


def as_array(buf: Any) -> np.ndarray:
    """A uint8 view of ``buf`` (bytes, bytearray, memoryview or an array)."""
    return buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=_U8)


def scan_batches(buf: Any, pos: int = 0, end: int | None = None, key_hash2: bool = True) -> ScannedBatches:
    """Scan the whole batches of ``buf[pos:end]`` (a trailing partial batch is left out: ``end`` of the result
    tells where the whole ones stop). CorruptMessageError for a malformed batch or record. Without
    ``key_hash2`` the second key hash is left 0 (readers that compare key bytes need only the first)."""
    arr = as_array(buf)
    stop = arr.shape[0] if end is None else min(end, arr.shape[0])
    span = max(stop - pos, 0)
    # Upper bounds; np.empty leaves untouched pages unallocated, so a loose bound costs nothing.
    nb_cap = span // RECORD_BATCH_OVERHEAD + 1
    nr_cap = span // _MIN_RECORD + 1
    i64 = np.int64
    batches = tuple(np.empty(nb_cap, i64) for _ in range(7))
    records = _record_table(nr_cap)
    status, nb, nr, at = _scan_batches(arr, pos, stop, key_hash2, *batches, *records)
    if status != _OK:
        raise CorruptMessageError(f"record batch at position {at}: {_STATUS_TEXT[status]}")
    return ScannedBatches(*(a[:nb] for a in batches), ScannedRecords(*(a[:nr] for a in records)), at)


def scan_batch_records(data: Any, count: int, base_offset: int, key_hash2: bool = True) -> ScannedRecords:
    """Scan the ``count`` records that fill ``data`` (a compressed batch's records, decompressed)."""
    arr = as_array(data)
    table = _record_table(count)
    n = _scan_records(arr, count, base_offset, key_hash2, *table)
    if n < 0:
        raise CorruptMessageError(f"decompressed records of the batch at offset {base_offset}: "
                                  f"{_STATUS_TEXT[_BAD_RECORD]} or do not number {count}")
    return ScannedRecords(*table)


def last_by_key(buf: Any, records: ScannedRecords, eligible: np.ndarray) -> np.ndarray:
    """A bool array over ``records``: True where the record is not ``eligible`` or is the last eligible
    record of its key bytes."""
    keep = np.empty(records.offset.shape[0], dtype=np.bool_)
    _last_by_key(as_array(buf), records.key_start, records.key_length, records.key_hash, eligible, keep)
    return keep


def key_hash(key: bytes) -> int:
    """The 64-bit FNV-1a hash the scanner gives ``key`` (for tests and callers hashing keys in Python)."""
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


_compiled = threading.Event()


def warm_up() -> float:
    """Compile the kernels (or load them from numba's cache) on a one-record batch; the seconds it took."""
    if _compiled.is_set():
        return 0.0
    started = time.perf_counter()
    from tierlog.records.record import build_batch
    batch = build_batch([(b"k", b"v", [], 0)])
    for buf in (batch, bytearray(batch)):
        scanned = scan_batches(buf)
        last_by_key(buf, scanned.records, np.ones(scanned.records.offset.shape[0], dtype=np.bool_))
    scan_batch_records(memoryview(batch)[RECORD_BATCH_OVERHEAD:].tobytes(), 1, 0)
    scan_batch_records(bytearray(memoryview(batch)[RECORD_BATCH_OVERHEAD:]), 1, 0)
    _compiled.set()
    return time.perf_counter() - started
