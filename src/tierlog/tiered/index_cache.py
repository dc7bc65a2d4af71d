"""Kafka's RemoteIndexCache: offset and time indexes of remote segments, fetched once, kept on disk.

A remote read needs the segment's offset index to turn an offset into a byte position; a timestamp
lookup needs its time index. Fetching them for every read would double the requests to the remote
store, so they are kept in ``<log dir>/remote-log-index-cache/`` as Kafka's own ``.index`` /
``.timeindex`` files named ``<start offset>_<segment id>``, least recently used evicted beyond
``remote.log.index.file.cache.total.size.bytes``. The folder survives restarts; leftovers of an
interrupted download are removed at start. Thread-safe: the remote readers run on a thread pool.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from tierlog.kafka_uuid import uuid_to_str
from tierlog.storage.index import OffsetIndex, TimeIndex
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

FOLDER = "remote-log-index-cache"
_SUFFIX = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex"}
_MAX_INDEX_SIZE = 2**31 - 1  # read-only: the size limit of an appending index does not apply


class RemoteIndexCache:
    def __init__(self, log_dir: str, max_bytes: int, fetch: Callable[[RemoteLogSegmentMetadata, IndexType], bytes]):
        self.dir = os.path.join(log_dir, FOLDER)
        self.max_bytes = max_bytes
        self._fetch = fetch
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # file name -> size, least recently used first
        self._loaded: dict[str, OffsetIndex | TimeIndex] = {}
        self._fetching: dict[str, threading.Event] = {}
        self.hits = self.misses = 0
        os.makedirs(self.dir, exist_ok=True)
        entries = []
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if name.endswith(".tmp"):
                os.remove(path)
                continue
            st = os.stat(path)
            entries.append((st.st_mtime, name, st.st_size))
        for _, name, size in sorted(entries):
            self._files[name] = size

    @property
    def size_bytes(self) -> int:
        return sum(self._files.values())

    @staticmethod
    def _name(md: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        return f"{md.start_offset:020d}_{uuid_to_str(md.segment_id.id)}{_SUFFIX[index_type]}"

    def offset_index(self, md: RemoteLogSegmentMetadata) -> OffsetIndex:
        return self._get(md, IndexType.OFFSET)  # type: ignore[return-value]

    def time_index(self, md: RemoteLogSegmentMetadata) -> TimeIndex:
        return self._get(md, IndexType.TIMESTAMP)  # type: ignore[return-value]

    def _get(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> OffsetIndex | TimeIndex:
        name = self._name(md, index_type)
        while True:
            with self._lock:
                if name in self._files:
                    self._files.move_to_end(name)
                    self.hits += 1
                    index = self._loaded.get(name)
                    if index is None:
                        cls = OffsetIndex if index_type == IndexType.OFFSET else TimeIndex
                        index = self._loaded[name] = cls(os.path.join(self.dir, name), md.start_offset,
                                                         _MAX_INDEX_SIZE)
                        index.entries  # noqa: B018 - load now: an eviction may remove the file later
                    return index
                waiting = self._fetching.get(name)
                if waiting is None:
                    waiting = self._fetching[name] = threading.Event()
                    break
            waiting.wait()  # another reader is downloading the same index
        try:
            self.misses += 1
            data = self._fetch(md, index_type)
            path = os.path.join(self.dir, name)
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
            with self._lock:
                self._files[name] = len(data)
                self._evict_over_budget(keep=name)
        finally:
            with self._lock:
                self._fetching.pop(name).set()
        return self._get(md, index_type)

    def _evict_over_budget(self, keep: str) -> None:
        while self.size_bytes > self.max_bytes and len(self._files) > 1:
            name = next(iter(self._files))
            if name == keep:
                self._files.move_to_end(name)
                continue
            self._remove(name)

    def _remove(self, name: str) -> None:
        self._files.pop(name, None)
        self._loaded.pop(name, None)
        try:
            os.remove(os.path.join(self.dir, name))
        except FileNotFoundError:
            pass

    def evict(self, md: RemoteLogSegmentMetadata) -> None:
        """Forget a deleted segment's indexes."""
        with self._lock:
            for index_type in _SUFFIX:
                self._remove(self._name(md, index_type))

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            if self._files:
                self._evict_over_budget(keep=next(reversed(self._files)))

    def clear(self) -> None:
        with self._lock:
            for name in list(self._files):
                self._remove(name)
