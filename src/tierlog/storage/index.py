"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex`` (time -> offset).

Both files hold big-endian fixed-size entries exactly as Kafka writes them, so Kafka's
DumpLogSegments can read them:

- offset index entry, 8 bytes: relative offset (int32), physical position in the .log (int32);
- time index entry, 12 bytes: timestamp (int64), relative offset (int32).

Entries are kept in memory as ``array`` objects, loaded lazily on first use (a broker with
thousands of segments opens without reading every index). Files are appended to, never
preallocated, so a file's length is always a whole number of entries; a torn trailing entry after
a crash is ignored (the log recovery rebuilds the index anyway).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

from tierlog.errors import KafkaStorageError

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(KafkaStorageError):
    """An index file that contradicts its segment; the log rebuilds it."""


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _append_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class _Index:
    entry_size: int

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._loaded = False
        self._pending = bytearray()  # entries appended but not yet written to the file

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            data = _read_file(self.path)
            usable = len(data) - len(data) % self.entry_size
            self._load(data[:usable])
            self._loaded = True

    def _load(self, data: bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def entries(self) -> int:
        self._ensure_loaded()
        return self._count()

    def _count(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def flush(self) -> None:
        if self._pending:
            _append_file(self.path, bytes(self._pending))
            self._pending.clear()

    def fsync(self) -> None:
        self.flush()
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def reset(self) -> None:
        """Drop every entry (used before a rebuild)."""
        self._pending.clear()
        with open(self.path, "wb"):
            pass
        self._load(b"")
        self._loaded = True

    def rename(self, new_path: str) -> None:
        self.flush()
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self._pending.clear()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def _rewrite(self, data: bytes) -> None:
        self._pending.clear()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)


def _be_int32_array(data: bytes) -> array:
    a = array("i")
    a.frombytes(data)
    if a.itemsize != 4:  # pragma: no cover - every CPython platform has 4-byte "i"
        raise RuntimeError("unexpected int size")
    if sys.byteorder == "little":
        a.byteswap()
    return a


class OffsetEntries:
    """The entries of an offset index and Kafka's lookups over them, read-only. The local
    :class:`OffsetIndex` keeps its entries in one; a remote segment's index (tiered storage) and the Spark
    reader parse an index file's bytes into one."""

    __slots__ = ("base_offset", "offsets", "positions")

    def __init__(self, base_offset: int, data: bytes = b""):
        both = _be_int32_array(data[:len(data) - len(data) % OFFSET_ENTRY_SIZE])
        self.base_offset = base_offset
        self.offsets = both[0::2]  # relative to base_offset
        self.positions = both[1::2]

    def __len__(self) -> int:
        return len(self.offsets)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, as (absolute offset, position); (base, 0) if none."""
        i = bisect_right(self.offsets, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def lookup_position(self, max_position: int) -> tuple[int, int]:
        """Largest entry with position <= max_position (used to bound a read by bytes)."""
        i = bisect_right(self.positions, max_position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0) when empty."""
        if not self.offsets:
            return self.base_offset, 0
        return self.base_offset + self.offsets[-1], self.positions[-1]


class TimeEntries:
    """The entries of a time index and Kafka's lookup over them, read-only (see :class:`OffsetEntries`)."""

    __slots__ = ("base_offset", "timestamps", "offsets")

    def __init__(self, base_offset: int, data: bytes = b""):
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.offsets = array("i")  # relative to base_offset
        for ts, rel in _TIME_ENTRY.iter_unpack(data[:len(data) - len(data) % TIME_ENTRY_SIZE]):
            self.timestamps.append(ts)
            self.offsets.append(rel)

    def __len__(self) -> int:
        return len(self.timestamps)

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target as (timestamp, offset); (-1, base) if none."""
        i = bisect_right(self.timestamps, target_ts) - 1
        if i < 0:
            return -1, self.base_offset
        return self.timestamps[i], self.base_offset + self.offsets[i]

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base offset) when empty."""
        if not self.timestamps:
            return -1, self.base_offset
        return self.timestamps[-1], self.base_offset + self.offsets[-1]


class OffsetIndex(_Index):
    """Maps relative offsets to positions in the segment's .log file."""

    entry_size = OFFSET_ENTRY_SIZE

    def _load(self, data: bytes) -> None:
        self._entries = OffsetEntries(self.base_offset, data)
        self._offsets = self._entries.offsets
        self._positions = self._entries.positions

    def _count(self) -> int:
        return len(self._offsets)

    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0) when empty."""
        self._ensure_loaded()
        return self._entries.last_entry()

    def append(self, offset: int, position: int) -> None:
        self._ensure_loaded()
        rel = offset - self.base_offset
        if self._offsets and rel <= self._offsets[-1]:
            raise CorruptIndexError(
                f"index {self.path}: offset {offset} is not larger than the last entry "
                f"{self.base_offset + self._offsets[-1]}")
        self._offsets.append(rel)
        self._positions.append(position)
        self._pending += rel.to_bytes(4, "big", signed=True) + position.to_bytes(4, "big", signed=True)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, as (absolute offset, position); (base, 0) if none."""
        self._ensure_loaded()
        return self._entries.lookup(target_offset)

    def lookup_position(self, max_position: int) -> tuple[int, int]:
        """Largest entry with position <= max_position (used to bound a read by bytes)."""
        self._ensure_loaded()
        return self._entries.lookup_position(max_position)

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        self._ensure_loaded()
        i = bisect_right(self._offsets, offset - self.base_offset - 1)
        if i == len(self._offsets):
            return
        self.flush()
        del self._offsets[i:]
        del self._positions[i:]
        self._rewrite(self._encode())

    def _encode(self) -> bytes:
        both = array("i", bytes(8 * len(self._offsets)))
        both[0::2] = self._offsets
        both[1::2] = self._positions
        both.byteswap()
        return both.tobytes()

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError when the index cannot belong to a log of ``log_size`` bytes."""
        size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if size % self.entry_size:
            raise CorruptIndexError(f"index file {self.path} has size {size}, not a multiple of 8")
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - self.entry_size)
                last = f.read(self.entry_size)
            rel = int.from_bytes(last[:4], "big", signed=True)
            pos = int.from_bytes(last[4:], "big", signed=True)
            if rel < 0 or pos < 0 or pos >= max(log_size, 1):
                raise CorruptIndexError(
                    f"index file {self.path}: last entry (offset {self.base_offset + rel}, position {pos}) "
                    f"lies outside the log of {log_size} bytes")


class TimeIndex(_Index):
    """Maps timestamps to the last offset of the batch that reached them; timestamps only grow."""

    entry_size = TIME_ENTRY_SIZE

    def _load(self, data: bytes) -> None:
        self._entries = TimeEntries(self.base_offset, data)
        self._timestamps = self._entries.timestamps
        self._offsets = self._entries.offsets

    def _count(self) -> int:
        return len(self._timestamps)

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base offset) when empty."""
        self._ensure_loaded()
        return self._entries.last_entry()

    def peek_last_entry(self) -> tuple[int, int]:
        """Like last_entry, reading only the file's last 12 bytes when not loaded (cheap at open)."""
        if self._loaded:
            return self.last_entry()
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return -1, self.base_offset
        size -= size % TIME_ENTRY_SIZE
        if size <= 0:
            return -1, self.base_offset
        with open(self.path, "rb") as f:
            f.seek(size - TIME_ENTRY_SIZE)
            e = f.read(TIME_ENTRY_SIZE)
        return (int.from_bytes(e[:8], "big", signed=True),
                self.base_offset + int.from_bytes(e[8:], "big", signed=True))

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append only when the timestamp is larger than the last entry's (Kafka's rule)."""
        self._ensure_loaded()
        if not skip_full_check and self.is_full():
            return
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if timestamp < 0:
            return
        rel = offset - self.base_offset
        if self._offsets and rel < self._offsets[-1]:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        self._pending += timestamp.to_bytes(8, "big", signed=True) + rel.to_bytes(4, "big", signed=True)

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target as (timestamp, offset); (-1, base) if none."""
        self._ensure_loaded()
        return self._entries.lookup(target_ts)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        self._ensure_loaded()
        rel = offset - self.base_offset
        keep = len(self._offsets)
        while keep and self._offsets[keep - 1] >= rel:
            keep -= 1
        if keep == len(self._offsets):
            return
        self.flush()
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._rewrite(b"".join(t.to_bytes(8, "big", signed=True) + o.to_bytes(4, "big", signed=True)
                               for t, o in zip(self._timestamps, self._offsets)))

    def sanity_check(self) -> None:
        size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if size % self.entry_size:
            raise CorruptIndexError(f"time index file {self.path} has size {size}, not a multiple of 12")
