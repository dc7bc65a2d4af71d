"""The log cleaner's offset map (Kafka's SkimpyOffsetMap): key hash -> the key's last offset, in arrays.

Kafka keys its map on the 16-byte MD5 of the key with an 8-byte offset, 24 bytes an entry, and holds at most
``memory / 24 x load factor`` entries (``log.cleaner.dedupe.buffer.size`` over the cleaner threads,
``log.cleaner.io.buffer.load.factor``). tierlog keeps that entry budget and layout: the two 64-bit key hashes
of the record scanner (:mod:`tierlog.records.scan`; two different constructions, 128 bits, so two keys
merge only if both collide) and the offset, in three numpy arrays with open addressing (linear probing).
The table starts small and doubles as keys come, up to the budget's slot count, so a small log does not
allocate the whole buffer.

Both passes of a cleaning round run in compiled code (``_offset_map.c``, built by ``pip install``) over the
scanner's tables, a read buffer of
batches at a time: :meth:`OffsetMap.put_batches` maps the records of the eligible batches (stopping at the
first batch that does not fit, as Kafka's ``buildOffsetMapForSegment``), :func:`retain_batches` decides
which records a batch keeps.
"""

from __future__ import annotations

import numpy as np

from tierlog.storage import _offset_map

__all__ = ["OFFSET_MAP_ENTRY_BYTES", "OffsetMap", "retain_batches", "MAP_DONE", "MAP_COMPRESSED", "MAP_FULL"]

# Kafka's SkimpyOffsetMap entry: a 16-byte MD5 hash and an 8-byte offset; here two 8-byte hashes and the offset.
OFFSET_MAP_ENTRY_BYTES = 24
_MIN_TABLE = 1024

# Why put_batches stopped (_offset_map.c has the same numbers).
MAP_DONE = 0
MAP_COMPRESSED = 1  # at a compressed batch: the caller decompresses and scans it, then goes on after it
MAP_FULL = 2  # at a batch whose records do not fit: the map ends before it


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
        _offset_map.rehash(*old, self.h1, self.h2, self.offsets)

    def put_batches(self, start: int, last_offsets, first_records, counts, eligible, records, first_dirty: int
                    ) -> tuple[int, int]:
        """Map the batches of one scanned read from batch ``start``, each whole or not at all (stopping at a
        compressed batch, or at the first whose records would pass ``max_entries``): (why it stopped, the batch
        it stopped at)."""
        self.reserve(self._count + int(records.offset.shape[0]))
        status, at, self._count, self.latest_offset, self.records_mapped = _offset_map.put_batches(
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
    """Which records of one scanned read stay, Kafka's ``shouldRetainRecord`` for the batches marked in
    ``decide``: a record past the map's end stays; one without a key goes; one whose key's last mapped offset
    is later goes; a tombstone goes once its batch's delete horizon passed (``keep_deletes`` false). (keep per
    record, kept per batch, whether a kept tombstone per batch)."""
    nb = first_records.shape[0]
    keep = np.zeros(records.offset.shape[0], dtype=np.bool_)
    n_kept = np.zeros(nb, dtype=np.int64)
    tombstones = np.zeros(nb, dtype=np.bool_)
    _offset_map.retain_batches(first_records, counts, decide, keep_deletes, records.offset, records.key_length,
                    records.value_length, records.key_hash, records.key_hash2, offset_map.h1, offset_map.h2,
                    offset_map.offsets, latest, keep, n_kept, tombstones)
    return keep, n_kept, tombstones

