"""The remote reader's read-ahead: windows of segment bytes kept in memory under one byte budget.

A :class:`Window` holds contiguous bytes ``[start, end)`` of one remote segment object, as the chunks
ranged reads returned, plus where the last answer ended and the read-ahead in flight. A consumer reading on
from where its last answer ended finds its bytes in the window; once less than the window's step is left
ahead, the next range of a step is fetched in the background (:meth:`ReadAheadCache.maybe_read_ahead`).
The step starts at ``chunk_bytes`` and doubles, up to ``max_step_bytes``, each time a reader takes a
read-ahead on from the window's end: a sequential reader of a distant store then pays one round trip per
larger range (a cold segment's first read is shorter still, ``FIRST_CHUNK_BYTES``: time to first byte). Windows of
all partitions together stay under ``budget`` bytes (read-aheads in flight count), least recently used
dropped first; at most ``MAX_WINDOWS`` exist, which also bounds windows left empty by failed reads.

Thread safety: the cache's lock guards the window table and the byte count; a window's own ``lock`` is
held by the reader for a whole read of that segment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tierlog.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

CHUNK_BYTES = 4 * 1024 * 1024  # a window's first read-ahead step
FIRST_CHUNK_BYTES = 1024 * 1024  # the first read of a cold window, unless the reader asks more
MAX_STEP_BYTES = 16 * 1024 * 1024  # the read-ahead step of a warm sequential reader grows to this
READ_AHEAD_BUDGET = 128 * 1024 * 1024  # every window together
MAX_WINDOWS = 4096

#: Reads bytes [start, end] (end inclusive) of a segment's object, as bytes or a read-only buffer: the
#: storage manager's fetch_log_segment_buffer.
FetchRange = Callable[[RemoteLogSegmentMetadata, int, int], "bytes | memoryview"]


@dataclass(eq=False)
class Window:
    """Contiguous bytes ``[start, end)`` of one segment object, held as chunks; the read-ahead being
    fetched; where the last answer ended. Guarded by ``lock`` (held for a whole read of the segment)."""

    key: tuple[TopicIdPartition, RemoteLogSegmentId]
    md: RemoteLogSegmentMetadata
    lock: threading.Lock = field(default_factory=threading.Lock)
    chunks: list = field(default_factory=list)  # [(position, bytes or read-only memoryview)], contiguous, ascending
    start: int = 0
    end: int = 0
    file: str | None = None  # the backend's file of the segment ("": it has none; None: not asked yet)
    pending: tuple | None = None  # (position, Future[bytes], length) of a read-ahead in flight
    step: int = 0  # bytes of the next read-ahead (0: the cache's chunk_bytes); grows on sequential reads
    next_offset: int = -1
    next_position: int = -1
    # where the last answer began: a fetch answered empty after remote.fetch.max.wait.ms while its read
    # ran on asks the same offset again, and finds it here rather than in the offset index
    last_offset: int = -1
    last_position: int = -1
    held: int = 0  # bytes counted against the budget (chunks + pending)
    next_manifest: bool = False  # the next segment's manifest was asked for
    evicted: bool = False

    @property
    def ahead_end(self) -> int:
        """Where the bytes fetched or being fetched end."""
        return self.pending[0] + self.pending[2] if self.pending is not None else self.end

    def covers(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.end

    def view(self, start: int, end: int):
        """Bytes ``[start, end)`` (covered), as a memoryview of a chunk when one holds them (no copy: chunks
        are immutable bytes or read-only buffers), else joined."""
        for pos, data in self.chunks:
            if pos <= start and end <= pos + len(data):
                return memoryview(data)[start - pos:end - pos]
        return self.join(start, end)

    def chunk_end(self, position: int) -> int:
        """Where the chunk holding ``position`` ends (the window's end if none does)."""
        for pos, data in self.chunks:
            if pos <= position < pos + len(data):
                return pos + len(data)
        return self.end

    def join(self, start: int, end: int) -> bytes:
        parts = []
        for pos, data in self.chunks:
            lo, hi = max(start, pos), min(end, pos + len(data))
            if lo < hi:
                parts.append(memoryview(data)[lo - pos:hi - pos])
        return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)


class ReadAheadCache:
    def __init__(self, fetch: FetchRange, threads: int, *, chunk_bytes: int = CHUNK_BYTES,
                 budget: int = READ_AHEAD_BUDGET, max_step_bytes: int = MAX_STEP_BYTES) -> None:
        self.fetch = fetch
        self.chunk_bytes = chunk_bytes
        self.max_step_bytes = max(chunk_bytes, max_step_bytes)
        self.budget = budget
        # Read-aheads have a pool of their own, so a read waiting for a read-ahead can never hold the thread
        # that read-ahead needs.
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="remote-read-ahead")
        self._lock = threading.Lock()  # guards _windows and _held
        self._windows: OrderedDict[tuple, Window] = OrderedDict()
        self._held = 0
        self.closed = False

    @property
    def held(self) -> int:
        """Bytes held by windows and read-aheads in flight."""
        return self._held

    def window(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata) -> Window:
        """The window of segment ``md`` (new and empty the first time), now the most recently used."""
        key = (tp, md.segment_id)
        with self._lock:
            win = self._windows.get(key)
            if win is None:
                win = self._windows[key] = Window(key, md)
                while len(self._windows) > MAX_WINDOWS:
                    self._evict_locked(next(iter(self._windows)))
            self._windows.move_to_end(key)
            return win

    # -- bytes in a window --

    def append(self, win: Window, pos: int, data: bytes) -> None:
        """Add ``data`` read at ``pos``: it extends the window when contiguous, else replaces its bytes."""
        if not win.chunks or pos != win.end:
            self.account(win, -sum(len(d) for _, d in win.chunks))
            win.chunks = []
            win.start = pos
        win.chunks.append((pos, data))
        win.end = pos + len(data)
        self.account(win, len(data))
        with self._lock:
            self._trim_locked(keep=win, need=0)

    def drop_before(self, win: Window, position: int) -> None:
        """Release the chunks wholly before ``position`` (the reader has moved past them)."""
        while win.chunks and win.chunks[0][0] + len(win.chunks[0][1]) <= position:
            _, data = win.chunks.pop(0)
            self.account(win, -len(data))
        win.start = win.chunks[0][0] if win.chunks else win.end

    def account(self, win: Window, delta: int) -> None:
        with self._lock:
            win.held += delta
            if not win.evicted:
                self._held += delta

    # -- read-ahead --

    def step(self, win: Window) -> int:
        return win.step or self.chunk_bytes

    def took_read_ahead(self, win: Window) -> None:
        """A reader took a read-ahead on from the window's end: the next one is twice as long (fewer round
        trips to a distant store), up to ``max_step_bytes``."""
        win.step = min(2 * self.step(win), self.max_step_bytes)

    def maybe_read_ahead(self, win: Window) -> None:
        """Less than a step left beyond where the reader is: fetch the next one in the background."""
        size = win.md.segment_size_in_bytes
        step = self.step(win)
        if win.pending is not None or win.end >= size or win.end - win.next_position >= step:
            return
        self.start_read_ahead(win, win.end, step)

    def start_read_ahead(self, win: Window, pos: int, length: int | None = None) -> None:
        """Fetch ``length`` bytes (``chunk_bytes`` by default) at ``pos`` in the background, if the budget
        has room for them once older windows are dropped (else for ``chunk_bytes``); otherwise the reader
        reads in the foreground."""
        left = win.md.segment_size_in_bytes - pos
        length = min(length or self.chunk_bytes, left)
        with self._lock:
            if self.closed or win.evicted:
                return
            self._trim_locked(keep=win, need=length)
            if self._held + length > self.budget:
                length = min(self.chunk_bytes, left)  # a grown step does not fit: the plain one may
                win.step = 0
                if self._held + length > self.budget:
                    return
        try:
            fut = self.pool.submit(self.fetch, win.md, pos, pos + length - 1)
        except RuntimeError:  # shut down
            return
        win.pending = (pos, fut, length)
        self.account(win, length)

    # -- eviction --

    def evict_partition(self, tp: TopicIdPartition) -> None:
        with self._lock:
            for key in [k for k in self._windows if k[0] == tp]:
                self._evict_locked(key)

    def evict_segment(self, md: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            self._evict_locked((md.topic_id_partition, md.segment_id))

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for key in list(self._windows):
                self._evict_locked(key)

    def _trim_locked(self, keep: Window, need: int) -> None:
        for key in list(self._windows):
            if self._held + need <= self.budget:
                return
            if self._windows[key] is not keep:
                self._evict_locked(key)

    def _evict_locked(self, key) -> None:
        win = self._windows.pop(key, None)
        if win is not None:
            self._held -= win.held
            win.evicted = True
