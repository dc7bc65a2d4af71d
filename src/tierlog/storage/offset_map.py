"""The log cleaner's offset map (Kafka's SkimpyOffsetMap): key hash -> the key's last offset, in arrays.

Kafka keys its map on the 16-byte MD5 of the key with an 8-byte offset, 24 bytes an entry, and holds at most
``memory / 24 x load factor`` entries (``log.cleaner.dedupe.buffer.size`` over the cleaner threads,
``log.cleaner.io.buffer.load.factor``). tierlog keeps that entry budget and layout: the two 64-bit key hashes
of the record scanner (:mod:`tierlog.records.scan`; two different constructions, 128 bits, so two keys
merge only if both collide) and the offset, in three numpy arrays with open addressing (linear probing).
The table starts small and doubles as keys come, up to the budget's slot count, so a small log does not
allocate the whole buffer.

Both passes of a cleaning round run here in compiled code over the scanner's tables, a read buffer of
batches at a time: :meth:`OffsetMap.put_batches` maps the records of the eligible batches (stopping at the
first batch that does not fit, as Kafka's ``buildOffsetMapForSegment``), :func:`retain_batches` decides
which records a batch keeps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["OFFSET_MAP_ENTRY_BYTES", "OffsetMap", "retain_batches", "MAP_DONE", "MAP_COMPRESSED", "MAP_FULL"]

# Kafka's SkimpyOffsetMap entry: a 16-byte MD5 hash and an 8-byte offset; here two 8-byte hashes and the offset.
OFFSET_MAP_ENTRY_BYTES = 24
_MIN_TABLE = 1024

# Why put_batches stopped.
MAP_DONE = 0
MAP_COMPRESSED = 1  # at a compressed batch: the caller decompresses and scans it, then goes on after it
MAP_FULL = 2  # at a batch whose records do not fit: the map ends before it


@njit(cache=True, nogil=True, inline="always")
def _slot_of(t_h1, t_h2, t_off, h1, h2):
    """The slot holding (h1, h2), else the empty slot where it would go; -1 when the table is full without it."""
    size = t_off.shape[0]
    if size == 0:
        return -1
    slot = h1 % np.uint64(size)
    for _ in range(size):
        if t_off[slot] < 0 or (t_h1[slot] == h1 and t_h2[slot] == h2):
            return np.int64(slot)
        slot += np.uint64(1)
        if slot == size:
            slot = np.uint64(0)
    return -1


@njit(cache=True, nogil=True)
def _put_batches(start, b_last, b_first, b_count, eligible, r_off, r_kl, r_h1, r_h2, first_dirty,
                 t_h1, t_h2, t_off, count, max_entries, latest, mapped):
    """Map batches from ``start``: (why it stopped, the batch it stopped at, entries, latest offset, records
    mapped). A batch is mapped whole or not at all."""
    nb = b_last.shape[0]
    for b in range(start, nb):
        last = b_last[b]
        if last < first_dirty:
            continue
        if eligible[b]:
            c = b_count[b]
            if c < 0:
                return MAP_COMPRESSED, b, count, latest, mapped
            if count + c > max_entries:
                return MAP_FULL, b, count, latest, mapped
            first = b_first[b]
            for i in range(first, first + c):
                if r_kl[i] >= 0 and r_off[i] >= first_dirty:
                    slot = _slot_of(t_h1, t_h2, t_off, r_h1[i], r_h2[i])
                    if t_off[slot] < 0:
                        count += 1
                        t_h1[slot] = r_h1[i]
                        t_h2[slot] = r_h2[i]
                    t_off[slot] = r_off[i]
            mapped += c
        if last > latest:
            latest = last
    return MAP_DONE, nb, count, latest, mapped


@njit(cache=True, nogil=True)
def _rehash(o_h1, o_h2, o_off, t_h1, t_h2, t_off):
    for i in range(o_off.shape[0]):
        if o_off[i] >= 0:
            slot = _slot_of(t_h1, t_h2, t_off, o_h1[i], o_h2[i])
            t_h1[slot] = o_h1[i]
            t_h2[slot] = o_h2[i]
            t_off[slot] = o_off[i]


@njit(cache=True, nogil=True)
def _retain_batches(b_first, b_count, decide, keep_deletes, r_off, r_kl, r_vl, r_h1, r_h2, t_h1, t_h2, t_off,
                    latest, keep, n_kept, tombstones):
    """Kafka's ``shouldRetainRecord`` for every record of the batches marked in ``decide``: a record past the
    map's end stays; one without a key goes; one whose key's last mapped offset is later goes; a tombstone
    goes once its batch's delete horizon passed (``keep_deletes`` false). Per batch: records kept, whether a
    tombstone is among them."""
    for b in range(b_first.shape[0]):
        c = b_count[b]
        if not decide[b] or c < 0:
            continue
        n = 0
        tomb = False
        for i in range(b_first[b], b_first[b] + c):
            o = r_off[i]
            k = False
            if o > latest:
                k = True
            elif r_kl[i] >= 0:
                slot = _slot_of(t_h1, t_h2, t_off, r_h1[i], r_h2[i])
                mapped = t_off[slot] if slot >= 0 else -1
                k = o >= mapped and (r_vl[i] >= 0 or keep_deletes[b])
            keep[i] = k
            if k:
                n += 1
                if r_vl[i] < 0:
                    tomb = True
        n_kept[b] = n
        tombstones[b] = tomb


class OffsetMap:
    """Key hashes -> last offset, with Kafka's SkimpyOffsetMap's capacity: ``memory`` bytes of 24-byte entries,
    filled up to ``load_factor``."""

    def __init__(self, memory: int, load_factor: float = 0.9):
        self.slots = max(0, memory // OFFSET_MAP_ENTRY_BYTES)
        self.load_factor = load_factor
        self.max_entries = min(int(self.slots * load_factor), self.slots)
        self.latest_offset = -1  # the last offset the round has looked at, keyed or not
        self.records_mapped = 0
        self._count = 0
        self._alloc(0)

    def _alloc(self, size: int) -> None:
        self.h1 = np.zeros(size, dtype=np.uint64)
        self.h2 = np.zeros(size, dtype=np.uint64)
        self.offsets = np.full(size, -1, dtype=np.int64)

    def __len__(self) -> int:
        return self._count

    def clear(self) -> None:
        self._count = 0
        self.records_mapped = 0
        self.latest_offset = -1
        self._alloc(0)

    def reserve(self, entries: int) -> None:
        """Grow the table so that ``entries`` keys leave it at most half full (never past ``slots``)."""
        entries = min(entries, self.max_entries)
        size = self.offsets.shape[0]
        if size >= self.slots or 2 * entries <= size:
            return
        new = _MIN_TABLE
        while new < 2 * entries:
            new *= 2
        new = min(new, self.slots)
        old = (self.h1, self.h2, self.offsets)
        self._alloc(new)
        _rehash(*old, self.h1, self.h2, self.offsets)

    def put_batches(self, start: int, last_offsets, first_records, counts, eligible, records, first_dirty: int
                    ) -> tuple[int, int]:
        """Map the batches of one scanned read from batch ``start`` (see ``_put_batches``): (why it stopped,
        the batch it stopped at)."""
        self.reserve(self._count + int(records.offset.shape[0]))
        status, at, self._count, self.latest_offset, self.records_mapped = _put_batches(
            start, last_offsets, first_records, counts, eligible, records.offset, records.key_length,
            records.key_hash, records.key_hash2, first_dirty, self.h1, self.h2, self.offsets, self._count,
            self.max_entries, self.latest_offset, self.records_mapped)
        return status, at

    def get(self, h1: int, h2: int) -> int:
        """The last offset mapped for the key of hashes (h1, h2), -1 if none (tests and tools; rounds look keys
        up in :func:`retain_batches`)."""
        found = self.offsets[(self.offsets >= 0) & (self.h1 == np.uint64(h1)) & (self.h2 == np.uint64(h2))]
        return int(found[0]) if found.size else -1

    @property
    def utilization(self) -> float:
        return self._count / self.slots if self.slots else 0.0


def retain_batches(offset_map: OffsetMap, first_records, counts, decide, keep_deletes, records, latest: int):
    """Which records of one scanned read stay (see ``_retain_batches``): (keep per record, kept per batch,
    whether a kept tombstone per batch)."""
    nb = first_records.shape[0]
    keep = np.zeros(records.offset.shape[0], dtype=np.bool_)
    n_kept = np.zeros(nb, dtype=np.int64)
    tombstones = np.zeros(nb, dtype=np.bool_)
    _retain_batches(first_records, counts, decide, keep_deletes, records.offset, records.key_length,
                    records.value_length, records.key_hash, records.key_hash2, offset_map.h1, offset_map.h2,
                    offset_map.offsets, latest, keep, n_kept, tombstones)
    return keep, n_kept, tombstones


def warm_up() -> float:
    """Compile the map's kernels (or load them from numba's cache) on a one-record batch, so a cleaner round
    does not; the seconds it took."""
    import time

    from tierlog.records.record import build_batch
    from tierlog.records.scan import scan_batches

    started = time.perf_counter()
    sc = scan_batches(build_batch([(b"k", b"v", [], 0)]))
    m = OffsetMap(24 * 16)
    one = np.ones(1, dtype=np.bool_)
    m.put_batches(0, sc.last_offset, sc.first_record, sc.count, one, sc.records, 0)
    retain_batches(m, sc.first_record, sc.count, one, one, sc.records, m.latest_offset)
    m.reserve(2000)  # the rehash
    return time.perf_counter() - started
