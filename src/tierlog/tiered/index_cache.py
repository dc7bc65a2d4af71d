"""Kafka's RemoteIndexCache: the indexes of remote segments, fetched once and kept on local disk.

A remote read turns an offset into a byte position with the segment's offset index; a timestamp
lookup needs its time index; a read_committed read needs its transaction index. Fetching them for
every read would double the requests to the remote store, so they are kept in
``<log dir>/remote-log-index-cache/`` in Kafka's own formats, named
``<20-digit start offset>_<segment id>.index|.timeindex|.txnindex``:

- bounded by ``remote.log.index.file.cache.total.size.bytes`` (dynamic, :meth:`RemoteIndexCache.resize`),
  least recently used files evicted first;
- a segment deleted by retention or topic deletion is evicted (:meth:`RemoteIndexCache.evict`);
- survives restarts: the folder is reloaded; leftovers of an interrupted download and unknown files
  are removed; an entry that does not pass the sanity checks when first used is dropped and fetched
  again (a fresh download that fails them is a storage error naming the segment);
- a segment without a transaction index (the usual case) is cached as an empty one, which is what a
  missing transaction index means (no aborted transactions);
- thread-safe, with one download per index however many readers want it at once.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from operator import le, lt

from tierlog.kafka_uuid import uuid_to_str
from tierlog.storage.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetEntries, TimeEntries
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentMetadata
from tierlog.tiered.rsm import RemoteStorageError

log = logging.getLogger(__name__)

FOLDER = "remote-log-index-cache"
SUFFIXES = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex", IndexType.TRANSACTION: ".txnindex"}
_NAME = re.compile(r"^\d{20}_[A-Za-z0-9_-]{22}\.(index|timeindex|txnindex)$")
# Parsed indexes kept in memory besides the files (the hot ones; the rest are re-read from disk).
MAX_LOADED = 1024
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset


class CorruptRemoteIndexError(ValueError):
    """An index that cannot belong to its segment."""


# ------------------------------------------------------------------------------- read-only indexes


class RemoteOffsetIndex(OffsetEntries):
    """A remote segment's ``.index``: relative offset -> position, read-only, checked against the segment."""

    __slots__ = ()

    def __init__(self, data: bytes, md: RemoteLogSegmentMetadata):
        if len(data) % OFFSET_ENTRY_SIZE:
            raise CorruptRemoteIndexError(f"offset index of {len(data)} bytes, not a multiple of {OFFSET_ENTRY_SIZE}")
        super().__init__(md.start_offset, data)
        offsets, positions = self.offsets, self.positions
        if offsets:
            if (offsets[0] < 0 or positions[0] < 0 or md.start_offset + offsets[-1] > md.end_offset
                    or positions[-1] >= max(md.segment_size_in_bytes, 1)):
                raise CorruptRemoteIndexError(
                    f"offset index entries outside the segment (offsets {md.start_offset}-{md.end_offset}, "
                    f"{md.segment_size_in_bytes} bytes)")
            if not all(map(lt, offsets, offsets[1:])) or not all(map(le, positions, positions[1:])):
                raise CorruptRemoteIndexError("offset index entries out of order")


class RemoteTimeIndex(TimeEntries):
    """A remote segment's ``.timeindex``: timestamp -> offset, read-only, checked against the segment."""

    __slots__ = ()

    def __init__(self, data: bytes, md: RemoteLogSegmentMetadata):
        if len(data) % TIME_ENTRY_SIZE:
            raise CorruptRemoteIndexError(f"time index of {len(data)} bytes, not a multiple of {TIME_ENTRY_SIZE}")
        super().__init__(md.start_offset, data)
        offsets, timestamps = self.offsets, self.timestamps
        if offsets:
            if offsets[0] < 0 or md.start_offset + offsets[-1] > md.end_offset:
                raise CorruptRemoteIndexError(f"time index offsets outside the segment ({md.start_offset}-"
                                              f"{md.end_offset})")
            if not all(map(le, offsets, offsets[1:])) or not all(map(le, timestamps, timestamps[1:])):
                raise CorruptRemoteIndexError("time index entries out of order")


class RemoteTransactionIndex:
    """A remote segment's ``.txnindex``: the transactions aborted in it, read-only."""

    def __init__(self, data: bytes, md: RemoteLogSegmentMetadata):
        if len(data) % TXN_ENTRY.size:
            raise CorruptRemoteIndexError(f"transaction index of {len(data)} bytes, not a multiple of "
                                          f"{TXN_ENTRY.size}")
        self.entries = list(TXN_ENTRY.iter_unpack(data))
        for version, _, first, last, _ in self.entries:
            if version != 0 or first > last:
                raise CorruptRemoteIndexError(f"transaction index entry (version {version}, offsets {first}-{last})")

    def __len__(self) -> int:
        return len(self.entries)

    def collect(self, start: int, upper: int) -> tuple[list[tuple[int, int]], bool]:
        """(producer id, first offset) of the aborted transactions overlapping ``[start, upper)``, and
        whether the search is complete (an entry's last stable offset reaches ``upper``), as Kafka's
        ``TransactionIndex.collectAbortedTxns``."""
        found = []
        for _, pid, first, last, lso in self.entries:
            if last >= start and first < upper:
                found.append((pid, first))
            if lso >= upper:
                return found, True
        return found, False


_PARSERS: dict[IndexType, type] = {IndexType.OFFSET: RemoteOffsetIndex, IndexType.TIMESTAMP: RemoteTimeIndex,
                                   IndexType.TRANSACTION: RemoteTransactionIndex}


# ------------------------------------------------------------------------------------------- cache


class RemoteIndexCache:
    def __init__(self, log_dir: str, max_bytes: int,
                 fetch: Callable[[RemoteLogSegmentMetadata, IndexType], bytes]):
        self.dir = os.path.join(log_dir, FOLDER)
        self.max_bytes = max_bytes
        self._fetch = fetch
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> size, least recently used first
        self._size = 0
        self._loaded: OrderedDict[str, object] = OrderedDict()
        self._busy: dict[str, threading.Event] = {}  # names being downloaded or loaded
        self._evicted: set[str] = set()  # evicted while being downloaded: discard the download
        self.hits = self.misses = 0
        os.makedirs(self.dir, exist_ok=True)
        entries = []
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if not _NAME.match(name):  # an interrupted download (.tmp) or something that is not ours
                _remove_file(path)
                continue
            st = os.stat(path)
            entries.append((st.st_mtime, name, st.st_size))
        for _, name, size in sorted(entries):
            self._files[name] = size
            self._size += size
        with self._lock:
            self._evict_over_budget(keep=None)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def names(self) -> list[str]:
        """Cached files, least recently used first."""
        with self._lock:
            return list(self._files)

    @staticmethod
    def file_name(md: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        return f"{md.start_offset:020d}_{uuid_to_str(md.segment_id.id)}{SUFFIXES[index_type]}"

    def offset_index(self, md: RemoteLogSegmentMetadata) -> RemoteOffsetIndex:
        return self._get(md, IndexType.OFFSET)  # type: ignore[return-value]

    def time_index(self, md: RemoteLogSegmentMetadata) -> RemoteTimeIndex:
        return self._get(md, IndexType.TIMESTAMP)  # type: ignore[return-value]

    def txn_index(self, md: RemoteLogSegmentMetadata) -> RemoteTransactionIndex:
        return self._get(md, IndexType.TRANSACTION)  # type: ignore[return-value]

    def loaded_offset_index(self, md: RemoteLogSegmentMetadata) -> RemoteOffsetIndex | None:
        """The offset index when it is in memory already, else None (never any I/O: for the event loop)."""
        with self._lock:
            return self._loaded.get(self.file_name(md, IndexType.OFFSET))  # type: ignore[return-value]

    def _get(self, md: RemoteLogSegmentMetadata, index_type: IndexType):
        name = self.file_name(md, index_type)
        while True:
            with self._lock:
                index = self._loaded.get(name)
                if index is not None:
                    self._loaded.move_to_end(name)
                    if name in self._files:
                        self._files.move_to_end(name)
                    self.hits += 1
                    return index
                waiting = self._busy.get(name)
                if waiting is None:
                    self._busy[name] = threading.Event()
                    on_disk = name in self._files
                    break
            waiting.wait()  # another reader is loading the same index
        try:
            index = self._load_from_disk(md, index_type, name) if on_disk else None
            if index is None:
                index = self._download(md, index_type, name)
            with self._lock:
                if name in self._evicted:
                    self._evicted.discard(name)
                    self._remove(name)
                else:
                    self._loaded[name] = index
                    while len(self._loaded) > MAX_LOADED:
                        self._loaded.popitem(last=False)
            return index
        finally:
            with self._lock:
                self._busy.pop(name).set()

    def _load_from_disk(self, md: RemoteLogSegmentMetadata, index_type: IndexType, name: str):
        path = os.path.join(self.dir, name)
        try:
            with open(path, "rb") as f:
                index = _PARSERS[index_type](f.read(), md)
        except (OSError, CorruptRemoteIndexError) as e:
            log.warning("Dropping the cached %s index %s of %s: %s; fetching it again", index_type.value, name,
                        md.topic_id_partition, e)
            with self._lock:
                self._remove(name)
            return None
        with self._lock:
            self.hits += 1
            if name in self._files:
                self._files.move_to_end(name)
        return index

    def _download(self, md: RemoteLogSegmentMetadata, index_type: IndexType, name: str):
        with self._lock:
            self.misses += 1
        try:
            data = self._fetch(md, index_type)
        except RemoteResourceNotFoundError:
            if index_type != IndexType.TRANSACTION:
                raise
            data = b""  # no transaction index: no aborted transactions
        tp = md.topic_id_partition
        try:
            index = _PARSERS[index_type](data, md)
        except CorruptRemoteIndexError as e:
            raise RemoteStorageError(f"{index_type.value} index of remote segment {uuid_to_str(md.segment_id.id)} "
                                     f"of {tp.topic}-{tp.partition} (start offset {md.start_offset}) is corrupt: "
                                     f"{e}") from None
        path = os.path.join(self.dir, name)
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        except OSError as e:  # a full disk must not fail the read: serve it from memory this time
            log.warning("Cannot cache the %s index %s on disk: %s", index_type.value, name, e)
            _remove_file(path + ".tmp")
            return index
        with self._lock:
            old = self._files.pop(name, None)
            self._size -= old or 0
            self._files[name] = len(data)
            self._size += len(data)
            self._evict_over_budget(keep=name)
        return index

    def _evict_over_budget(self, keep: str | None) -> None:
        """Remove least recently used files until within the budget (the one just added stays, even alone
        over the budget, as Kafka's cache keeps the entry it was asked for)."""
        for name in list(self._files):
            if self._size <= self.max_bytes:
                break
            if name != keep:
                self._remove(name)

    def _remove(self, name: str) -> None:
        size = self._files.pop(name, None)
        if size is not None:
            self._size -= size
        self._loaded.pop(name, None)
        _remove_file(os.path.join(self.dir, name))

    def evict(self, md: RemoteLogSegmentMetadata) -> None:
        """Forget a deleted segment's indexes."""
        with self._lock:
            for index_type in SUFFIXES:
                name = self.file_name(md, index_type)
                if name in self._busy:
                    self._evicted.add(name)
                self._remove(name)

    def resize(self, max_bytes: int) -> None:
        """``remote.log.index.file.cache.total.size.bytes`` changed (dynamic config)."""
        with self._lock:
            self.max_bytes = max_bytes
            self._evict_over_budget(keep=None)

    def clear(self) -> None:
        with self._lock:
            for name in list(self._files):
                self._remove(name)
            self._loaded.clear()


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
