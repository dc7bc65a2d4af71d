"""The log cleaner: compaction of the logs whose cleanup.policy has ``compact`` (Kafka's LogCleaner, Cleaner,
LogCleanerManager and SkimpyOffsetMap, for local logs; a tiered compacted log uploads what is below the
cleaner's checkpoint, :meth:`LogCleaner.cleaned_up_to`).

A cleaning round of one log, as Kafka does it:

1. **Choose.** Each log's cleaner checkpoint (``cleaner-offset-checkpoint`` in its log dir) is its first
   dirty offset: below it the log was cleaned. The cleanable part ends at the first uncleanable offset:
   the active segment, the last stable offset (open transactions, the high watermark) and the first
   segment newer than ``min.compaction.lag.ms``, whichever comes first (here always at a segment
   boundary). The dirty ratio is dirty bytes / (clean + dirty bytes); a log with a ratio above
   ``min.cleanable.dirty.ratio``, or whose oldest dirty batch waited longer than ``max.compaction.lag.ms``,
   or whose tombstones' delete horizon passed, is cleanable; the dirtiest goes first.
2. **Map.** The dirty segments' keys go into an :class:`OffsetMap` (128 bits of key hash -> its last offset),
   bounded by ``log.cleaner.dedupe.buffer.size`` over the threads times
   ``log.cleaner.io.buffer.load.factor``; when it fills, the round ends where the map ends. Control
   batches and the records of aborted transactions are not mapped.
3. **Copy.** Every segment from the log start to the map's end, in groups that fit one segment
   (``segment.bytes``, ``segment.index.bytes``), is copied to ``<base>.log.cleaned`` keeping a record only
   when it is the last of its key (or past the map's end), dropping aborted transactions' records,
   tombstones and transaction markers whose delete horizon passed (KIP-534: a batch that keeps a
   tombstone is stamped with ``now + delete.retention.ms`` when it is first cleaned; a marker when a round
   finds no batch of its transaction left, so the round that removes a transaction's last records leaves
   its marker as it is, and an aborted transaction's index entry stays as long as a batch of it does,
   as Kafka's CleanedTransactionMetadata). A batch that keeps every record is copied byte for byte;
   otherwise the kept records are written in a new batch with the original base and last offset, producer
   id, epoch, base sequence and codec (re-compressed at the codec's default level, as Kafka does); the last batch of an
   active producer stays, empty if need be, so producer state survives (for a producer with only markers
   here, its markers of its epoch).
4. **Swap.** The cleaned files replace the group on the event loop (:meth:`Log.replace_segments`: renames
   only, Kafka's ``.cleaned`` -> ``.swap`` -> final order, recovered at start-up by
   :func:`tierlog.storage.log.complete_swaps`), and the checkpoint moves to the map's end.

Steps 2 and 3 run in a worker thread on duplicated file descriptors, so produce and fetch of the
partition go on; the swap checks that the group is still the log's (retention, truncation or deletion
in between make the round's work void). Reads and writes of all threads together are throttled to
``log.cleaner.io.max.bytes.per.second``. No Python runs per record: both passes read a buffer of batches at a
time, the record scanner (:mod:`tierlog.records.scan`) tables its records, and the map's puts and the retain
decision run over those tables in compiled code (:mod:`tierlog.storage.offset_map`); Python runs per batch
(its header, the copy) and per record only of the batches rebuilt with fewer records.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tierlog.errors import KafkaError, KafkaStorageError
from tierlog.records import (
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    compress,
    read_header,
)
from tierlog.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tierlog.records.compression import decompress_bounded, decompression_limit
from tierlog.records.record import (
    build_batch_header,
    decode_varint,
    decode_varlong,
    write_varint,
    write_varlong,
)
from tierlog.records.scan import ScannedBatches, scan_batch_records, scan_batches
from tierlog.storage.checkpoints import OffsetCheckpointFile, fsync_dir
from tierlog.storage.index import OffsetIndex, TimeIndex
from tierlog.storage.log import discard_cleaned
from tierlog.storage.offset_map import MAP_COMPRESSED, MAP_FULL, OFFSET_MAP_ENTRY_BYTES, OffsetMap, retain_batches
from tierlog.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from tierlog.storage.transaction_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from tierlog.metrics import MetricsRegistry
    from tierlog.storage.log import Log

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

# Kafka's LogCleaner and LogCleanerManager gauges, named as Prometheus' JMX exporter spells them.
MAX_DIRTY_PERCENT = "kafka_log_logcleanermanager_max_dirty_percent"
UNCLEANABLE_PARTITIONS_COUNT = "kafka_log_logcleanermanager_uncleanable_partitions_count"
UNCLEANABLE_BYTES = "kafka_log_logcleanermanager_uncleanable_bytes"
TIME_SINCE_LAST_RUN_MS = "kafka_log_logcleanermanager_time_since_last_run_ms"
MAX_CLEAN_TIME_SECS = "kafka_log_logcleaner_max_clean_time_secs"
MAX_COMPACTION_DELAY_SECS = "kafka_log_logcleaner_max_compaction_delay_secs"
CLEANER_RECOPY_PERCENT = "kafka_log_logcleaner_cleaner_recopy_percent"
DEAD_THREAD_COUNT = "kafka_log_logcleaner_deadthreadcount"
# tierlog's own, per partition
LOG_DIRTY_RATIO = "tierlog_log_cleaner_dirty_ratio"
LOG_LAST_CLEAN_TIME = "tierlog_log_cleaner_last_clean_timestamp_ms"
LOG_LAST_CLEAN_DURATION = "tierlog_log_cleaner_last_clean_duration_seconds"


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Kafka's CleanerConfig, from the broker's ``log.cleaner.*`` settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 524288
    max_io_bytes_per_second: float = float("inf")
    backoff_ms: int = 15000

    @classmethod
    def from_broker_config(cls, cfg) -> CleanerConfig:
        return cls(enable=cfg["log.cleaner.enable"], threads=cfg["log.cleaner.threads"],
                   dedupe_buffer_size=cfg["log.cleaner.dedupe.buffer.size"],
                   io_buffer_load_factor=cfg["log.cleaner.io.buffer.load.factor"],
                   io_buffer_size=cfg["log.cleaner.io.buffer.size"],
                   max_io_bytes_per_second=cfg["log.cleaner.io.max.bytes.per.second"],
                   backoff_ms=cfg["log.cleaner.backoff.ms"])

    @property
    def map_memory_per_thread(self) -> int:
        return self.dedupe_buffer_size // max(1, self.threads)


class Throttler:
    """Kafka's Throttler: all cleaner threads together read and write at most ``rate`` bytes a second,
    measured over windows of at least 300 ms."""

    CHECK_MS = 300

    def __init__(self, rate: float):
        self.rate = rate
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._bytes = 0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate == float("inf") or self.rate <= 0:
            return
        with self._lock:
            self._bytes += nbytes
            elapsed = time.monotonic() - self._start
            if elapsed * 1000 < self.CHECK_MS:
                return
            sleep = self._bytes / self.rate - elapsed
            self._start = time.monotonic()
            self._bytes = 0
        if sleep > 0:
            time.sleep(sleep)


class CleanerAborted(Exception):
    """The log changed under a cleaning round (or the cleaner stops): the round's work is dropped."""


# ------------------------------------------------------------------------------------------------ choice

@dataclass(slots=True)
class LogToClean:
    """One compacted log's cleanable state (Kafka's LogToClean)."""

    log: Log
    first_dirty_offset: int
    end_index: int  # segments[:end_index] are cleanable (the active segment never is)
    clean_bytes: int
    dirty_bytes: int
    compaction_delay_ms: int  # how long past max.compaction.lag.ms the oldest dirty batch waits
    horizon_due: bool = False

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def cleanable(self) -> bool:
        if self.dirty_bytes <= 0 and not self.horizon_due:
            return False
        return (self.ratio > self.log.config.min_cleanable_dirty_ratio or self.compaction_delay_ms > 0
                or self.horizon_due)


def first_dirty_offset(lg: Log, checkpoint: int | None) -> int:
    """The checkpoint when it lies in the log, else the log start (Kafka resets an out-of-range one)."""
    start = lg.local_log_start_offset
    if checkpoint is None or checkpoint < start or checkpoint > lg.log_end_offset:
        return start
    return checkpoint


def log_to_clean(lg: Log, checkpoint: int | None, now_ms: int, horizon_ms: int | None = None) -> LogToClean:
    cfg = lg.config
    dirty_from = first_dirty_offset(lg, checkpoint)
    segments = lg.segments
    # The first uncleanable offset: active segment, last stable offset, min.compaction.lag.ms.
    uncleanable = min(lg.active_segment.base_offset, lg.last_stable_offset)
    end = lg._segment_index_for(uncleanable)  # segments[:end] lie wholly below it
    first_dirty_index = lg._segment_index_for(dirty_from)
    if cfg.min_compaction_lag_ms > 0:
        for i in range(first_dirty_index, end):
            if segments[i].largest_timestamp() > now_ms - cfg.min_compaction_lag_ms:
                end = i
                break
    clean_bytes = sum(s.size for s in segments[:min(first_dirty_index, end)])
    dirty_bytes = sum(s.size for s in segments[first_dirty_index:end])
    delay = 0
    if cfg.max_compaction_lag_ms < 2**62 and first_dirty_index < end:
        stamps = [ts for s in segments[first_dirty_index:end] if (ts := s.first_batch_timestamp()) is not None
                  and ts > 0]
        if stamps:
            clean_until = now_ms - cfg.max_compaction_lag_ms
            delay = max(0, clean_until - min(stamps))
    return LogToClean(lg, dirty_from, end, clean_bytes, dirty_bytes, delay,
                      horizon_due=horizon_ms is not None and horizon_ms <= now_ms and end > 0)


# ------------------------------------------------------------------------------------------------ records

def _records_section(data, h: BatchHeader, max_message_bytes: int):
    section = memoryview(data)[RECORD_BATCH_OVERHEAD:h.size]
    if h.compression is CompressionType.NONE:
        return section
    return decompress_bounded(h.compression, section, decompression_limit(h.records_count, max_message_bytes))


def _walk_records(section, count: int):
    """(start, end, body start, timestamp delta, offset delta, key, has value) of each record; ``body start``
    is where the key length begins (what follows the timestamp and offset deltas)."""
    pos = 0
    for _ in range(count):
        length, p = decode_varint(section, pos)
        end = p + length
        ts_delta, q = decode_varlong(section, p + 1)
        off_delta, q = decode_varint(section, q)
        body = q
        klen, q = decode_varint(section, q)
        key = bytes(section[q:q + klen]) if klen >= 0 else None
        q += max(klen, 0)
        vlen, _ = decode_varint(section, q)
        yield pos, end, p, body, ts_delta, off_delta, key, vlen >= 0
        pos = end


def _kept_records(buf, starts: list[int]) -> list[tuple]:
    """The :func:`_walk_records` tuples of the records starting at ``starts`` of ``buf`` (only the kept ones of
    a batch being rebuilt are decoded here; the scanner found them)."""
    out = []
    for pos in starts:
        length, p = decode_varint(buf, pos)
        ts_delta, q = decode_varlong(buf, p + 1)
        off_delta, q = decode_varint(buf, q)
        out.append((pos, p + length, p, q, ts_delta, off_delta, None, True))
    return out


def _rebuild_batch(h: BatchHeader, section, kept: list, delete_horizon: int | None) -> bytes:
    """A batch of the ``kept`` records of ``h`` (tuples from :func:`_walk_records`), with the original base
    and last offset, producer fields, codec and leader epoch; timestamps keep their values."""
    if not kept:  # Kafka's empty batch: header only, so the producer's last sequence stays
        attributes = h.attributes & ~(COMPRESSION_CODEC_MASK | DELETE_HORIZON_FLAG_MASK)
        return build_batch_header(0, 0, attributes, h.max_timestamp, h.max_timestamp, h.producer_id,
                                  h.producer_epoch, h.base_sequence, b"", base_offset=h.base_offset,
                                  partition_leader_epoch=h.partition_leader_epoch,
                                  last_offset_delta=h.last_offset_delta)
    stamps = [h.base_timestamp + r[4] for r in kept]
    base_ts = delete_horizon if delete_horizon is not None else stamps[0]
    body = bytearray()
    for (_start, end, attrs_at, rest, _ts, off_delta, _k, _v), ts in zip(kept, stamps):
        rec = bytearray(section[attrs_at:attrs_at + 1])
        write_varlong(rec, ts - base_ts)
        write_varint(rec, off_delta)
        rec += section[rest:end]
        write_varint(body, len(rec))
        body += rec
    codec = h.compression
    payload = bytes(body) if codec is CompressionType.NONE else compress(codec, body)
    attributes = h.attributes & ~DELETE_HORIZON_FLAG_MASK
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    max_ts = h.max_timestamp if h.timestamp_type == 1 else max(stamps)
    return build_batch_header(len(payload), len(kept), attributes, base_ts, max_ts, h.producer_id,
                              h.producer_epoch, h.base_sequence, payload, base_offset=h.base_offset,
                              partition_leader_epoch=h.partition_leader_epoch,
                              last_offset_delta=h.last_offset_delta) + payload


# ------------------------------------------------------------------------------------------------ a round

@dataclass(slots=True)
class _SegmentView:
    seg: LogSegment
    fd: int  # a duplicate: retention or truncation closing the segment does not disturb the round
    size: int
    base_offset: int
    next_base: int
    index_bytes: int
    time_index_bytes: int
    aborted: list[AbortedTxn]


@dataclass(slots=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    segments_cleaned: int = 0
    groups: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started


@dataclass(slots=True)
class CleanResult:
    end_offset: int  # the new cleaner checkpoint
    stats: CleanerStats
    delete_horizon_ms: int | None  # the earliest horizon stamped on or seen in a kept batch


class CleaningRound:
    """One log's cleaning: built on the event loop (the constructor takes a snapshot of the segments), run in a
    worker thread (:meth:`run`), each cleaned group swapped in through ``swap`` (called from the thread;
    it runs :meth:`Log.replace_segments` on the event loop)."""

    def __init__(self, lg: Log, to_clean: LogToClean, offset_map: OffsetMap, throttler: Throttler,
                 now_ms: int, io_buffer_size: int = 524288):
        self.log = lg
        self.dir = lg.dir
        self.config = lg.config
        self.first_dirty = to_clean.first_dirty_offset
        self.map = offset_map
        self.throttler = throttler
        self.now_ms = now_ms
        self.io_buffer_size = max(io_buffer_size, 1 << 16)
        self.stats = CleanerStats()
        self.aborting = threading.Event()
        segs = lg.segments[:to_clean.end_index]
        nexts = [s.base_offset for s in lg.segments[1:to_clean.end_index + 1]]
        self.views = [
            _SegmentView(s, os.dup(s.fd), s.size, s.base_offset, nb, os.path.getsize(s.offset_index.path)
                         if os.path.exists(s.offset_index.path) else 0,
                         os.path.getsize(s.time_index.path) if os.path.exists(s.time_index.path) else 0,
                         list(s.txn_index.entries))
            for s, nb in zip(segs, nexts)]
        # Kafka keeps the last batch of each producer still active (its state must survive a rebuild).
        self.active_producers = {pid: e.last_offset for pid, e in lg.producer_state.producers.items()
                                 if e.last_offset >= 0}
        # One with no data batch (only markers here, or its epoch bumped since) keeps its markers of its
        # epoch, emptied once they may go, so the epoch survives too (Kafka's isBatchLastRecordOfProducer).
        self.marker_only_producers = {pid: e.producer_epoch for pid, e in lg.producer_state.producers.items()
                                      if e.last_offset < 0}
        # Every aborted transaction of the log: one whose data is cleanable may have its marker later on.
        self.aborted: dict[int, list[AbortedTxn]] = {}
        for seg in lg.segments:
            for t in seg.txn_index.entries:
                self.aborted.setdefault(t.producer_id, []).append(t)
        self.earliest_horizon: int | None = None

    def close(self) -> None:
        for v in self.views:
            try:
                os.close(v.fd)
            except OSError:
                pass
        self.views = []

    # -- reading --

    def _chunks(self, v: _SegmentView):
        """(buffer, its scanned batches) of a segment, read a buffer at a time (a batch larger than the buffer is
        read whole)."""
        pos = 0
        while pos < v.size:
            if self.aborting.is_set():
                raise CleanerAborted("the cleaner is stopping")
            chunk = os.pread(v.fd, min(max(self.io_buffer_size, 0), v.size - pos), pos)
            if len(chunk) < RECORD_BATCH_OVERHEAD:
                raise KafkaStorageError(f"short read of segment {v.base_offset} of {self.log.name} at {pos}")
            h = read_header(chunk)
            if h.size > len(chunk):
                chunk = os.pread(v.fd, h.size, pos)
                if len(chunk) < h.size:
                    raise KafkaStorageError(f"short read of segment {v.base_offset} of {self.log.name} at {pos}")
            scanned = scan_batches(chunk, 0, min(len(chunk), v.size - pos))
            if scanned.end == 0:  # cannot be (the first batch is whole), but never loop on it
                raise KafkaStorageError(f"no whole batch in segment {v.base_offset} of {self.log.name} at {pos}")
            yield memoryview(chunk), scanned
            self.stats.bytes_read += scanned.end
            self.throttler.maybe_throttle(scanned.end)
            pos += scanned.end

    def _decompressed(self, view: memoryview, h: BatchHeader, pos: int):
        """(records section, scanned records) of the compressed batch ``h`` at ``pos`` of ``view``."""
        section = _records_section(view[pos:pos + h.size], h, self.config.max_message_bytes)
        return section, scan_batch_records(section, h.records_count, h.base_offset)

    def _is_aborted(self, h: BatchHeader) -> bool:
        if not h.is_transactional or h.is_control:
            return False
        return any(txn.first_offset <= h.base_offset <= txn.last_offset for txn in self.aborted.get(h.producer_id, ()))

    # -- step 2: the offset map --

    def build_offset_map(self) -> int:
        """Map the dirty segments' keys; returns the round's end offset (the map's end)."""
        m = self.map
        m.clear()
        # Below the first dirty offset the log is clean: a key not in the map is at its last offset there.
        m.latest_offset = self.first_dirty - 1
        full = False
        for v in self.views:
            if v.next_base <= self.first_dirty:
                continue
            for view, sc in self._chunks(v):
                full = self._map_read(view, sc)
                if full:
                    break
            if full:
                break
        self.stats.map_records = m.records_mapped
        return m.latest_offset + 1

    def _map_read(self, view: memoryview, sc: ScannedBatches) -> bool:
        """Map one read's batches (control batches and aborted transactions' data are not mapped); True when
        the map is full (it ends before the batch that did not fit)."""
        m = self.map
        eligible = (sc.attributes & CONTROL_FLAG_MASK) == 0
        for b in np.flatnonzero((sc.attributes & TRANSACTIONAL_FLAG_MASK) != 0).tolist():
            if eligible[b] and self._is_aborted(read_header(view, int(sc.position[b]))):
                eligible[b] = False
        b = 0
        while True:
            status, b = m.put_batches(b, sc.last_offset, sc.first_record, sc.count, eligible, sc.records,
                                      self.first_dirty)
            if status == MAP_COMPRESSED:
                pos = int(sc.position[b])
                h = read_header(view, pos)
                status = MAP_FULL if len(m) + h.records_count > m.max_entries else status
                if status == MAP_COMPRESSED:
                    _, recs = self._decompressed(view, h, pos)
                    one = np.ones(1, dtype=np.int64)
                    m.put_batches(0, sc.last_offset[b:b + 1], one * 0, one * h.records_count, eligible[b:b + 1],
                                  recs, self.first_dirty)
                    b += 1
                    continue
            if status == MAP_FULL:
                if m.latest_offset < self.first_dirty:
                    raise KafkaStorageError(
                        f"the cleaner's offset map ({m.max_entries} entries) cannot hold one batch of "
                        f"{self.log.name}; raise log.cleaner.dedupe.buffer.size")
                return True
            return False

    # -- step 3: groups and copies --

    def groups(self, end_offset: int) -> list[list[_SegmentView]]:
        """Kafka's groupSegmentsBySize: consecutive segments below ``end_offset`` whose sizes, index sizes
        and offset range fit one segment."""
        cfg = self.config
        views = [v for v in self.views if v.base_offset < end_offset]
        out = []
        while views:
            group = [views.pop(0)]
            size, index, tindex = group[0].size, group[0].index_bytes, group[0].time_index_bytes
            while views:
                v = views[0]
                if (size + v.size > cfg.segment_bytes or index + v.index_bytes > cfg.segment_index_bytes
                        or tindex + v.time_index_bytes > cfg.segment_index_bytes
                        or v.next_base - 1 - group[0].base_offset > INT32_MAX):
                    break
                group.append(views.pop(0))
                size += v.size
                index += v.index_bytes
                tindex += v.time_index_bytes
            out.append(group)
        return out

    def clean_group(self, group: list[_SegmentView], txn_state: dict[int, bool]) -> int:
        """Write the group's kept batches to ``<base>.*.cleaned`` files (fsynced); returns their size."""
        base = group[0].base_offset
        cfg = self.config
        paths = {s: os.path.join(self.dir, segment_file_name(base, s)) + CLEANED_SUFFIX
                 for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)}
        discard_cleaned(self.dir, base)
        out = os.open(paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        offset_index = OffsetIndex(paths[INDEX_SUFFIX], base, cfg.segment_index_bytes)
        time_index = TimeIndex(paths[TIME_INDEX_SUFFIX], base, cfg.segment_index_bytes)
        txn_index = TransactionIndex(paths[TXN_INDEX_SUFFIX], base)
        offset_index.reset()
        time_index.reset()
        markers = {t.last_offset: t for v in group for t in v.aborted}
        position = 0
        since_index = 0
        max_ts = (-1, base)
        try:
            for v in group:
                for h, data, retained in self._retained_batches(v):
                    # Kafka keeps an aborted transaction's index entry only while a batch of it is left
                    had_data = h.is_control and txn_state.get(h.producer_id, False)
                    piece = self._clean_batch(h, data, txn_state, retained)
                    if piece is None:
                        continue
                    written = read_header(piece) if piece is not data else h
                    _write_all(out, piece)
                    # an empty batch holds no record whose timestamp a time index entry could point at
                    if written.max_timestamp > max_ts[0] and written.records_count:
                        max_ts = (written.max_timestamp, written.last_offset)
                    if since_index > cfg.index_interval_bytes:
                        offset_index.append(written.last_offset, position)
                        time_index.maybe_append(*max_ts)
                        since_index = 0
                    since_index += len(piece)
                    position += len(piece)
                    if had_data and h.base_offset in markers:
                        txn_index.append(markers[h.base_offset])
                    self.stats.bytes_written += len(piece)
                    self.throttler.maybe_throttle(len(piece))
            if max_ts[0] >= 0:
                time_index.maybe_append(*max_ts, skip_full_check=True)
            os.fsync(out)
            offset_index.fsync()
            time_index.fsync()
            txn_index.fsync()
        finally:
            os.close(out)
        fsync_dir(self.dir)
        self.stats.segments_cleaned += len(group)
        self.stats.groups += 1
        return position

    def _retained_batches(self, v: _SegmentView):
        """(header, bytes, what it retains) of each batch of a segment; what a batch retains is decided for a
        whole read at once in compiled code (:func:`retain_batches`), None for a compressed batch (decided when
        it is cleaned) and for batches the records do not decide (markers, aborted data)."""
        now = self.now_ms
        latest = self.map.latest_offset
        for view, sc in self._chunks(v):
            headers = [read_header(view, p) for p in sc.position.tolist()]
            decide = np.array([not (h.is_control or self._is_aborted(h)) for h in headers], dtype=np.bool_)
            keep_deletes = np.array([not h.has_delete_horizon or now < h.base_timestamp for h in headers],
                                    dtype=np.bool_)
            keep, n_kept, tombstones = retain_batches(self.map, sc.first_record, sc.count, decide, keep_deletes,
                                                      sc.records, latest)
            records = sc.records
            for b, (pos, first, count, h) in enumerate(zip(sc.position.tolist(), sc.first_record.tolist(),
                                                            sc.count.tolist(), headers)):
                retained = None
                if decide[b] and count >= 0:
                    retained = (view, records, first + np.flatnonzero(keep[first:first + count]),
                                int(n_kept[b]), bool(tombstones[b]))
                yield h, view[pos:pos + h.size], retained

    def _retain_one(self, h: BatchHeader, data):
        """What a compressed batch retains: its records decompressed, scanned and decided."""
        section, recs = self._decompressed(memoryview(data), h, 0)
        one = np.ones(1, dtype=np.bool_)
        keep_deletes = one if not h.has_delete_horizon or self.now_ms < h.base_timestamp else ~one
        keep, n_kept, tombstones = retain_batches(self.map, np.zeros(1, np.int64),
                                                  np.full(1, h.records_count, np.int64), one, keep_deletes, recs,
                                                  self.map.latest_offset)
        return section, recs, np.flatnonzero(keep), int(n_kept[0]), bool(tombstones[0])

    def _clean_batch(self, h: BatchHeader, data: memoryview, txn_state: dict[int, bool], retained=None):
        """The batch as it stays (``data`` itself when unchanged, new bytes when rebuilt) or None. ``retained``:
        (buffer, scanned records, rows kept, how many, whether a tombstone among them), as
        :meth:`_retained_batches` gives it; computed here when None."""
        now = self.now_ms
        horizon = h.base_timestamp if h.has_delete_horizon else None
        retain_empty = h.producer_id >= 0 and self.active_producers.get(h.producer_id) == h.last_offset
        self.stats.records_read += h.records_count
        if h.is_control:
            # Kafka's rule: a marker whose transaction still had a batch in this pass (kept or not) is kept
            # without a horizon; once a pass finds none, it is stamped; once that horizon passed, it goes.
            had_data = txn_state.pop(h.producer_id, False)
            retain_empty = self.marker_only_producers.get(h.producer_id, -2) == h.producer_epoch
            if h.records_count == 0:  # a marker emptied before: kept only for its producer's epoch
                return data if retain_empty else None
            if horizon is not None and now >= horizon and not had_data:
                return self._rebuild(h, data, [], None) if retain_empty else None
            self.stats.records_kept += h.records_count
            if horizon is None and not had_data:
                return self._rebuild(h, data, None, now + self.config.delete_retention_ms)
            self._note_horizon(horizon)
            return data
        if h.is_transactional:
            txn_state[h.producer_id] = True  # read in this pass, whether its records stay or not
        if self._is_aborted(h):
            return self._rebuild(h, data, [], None) if retain_empty else None
        buf, records, rows, n_kept, tombstones = retained if retained is not None else self._retain_one(h, data)
        self.stats.records_kept += n_kept
        if not n_kept:
            return self._rebuild(h, data, [], None, b"") if retain_empty else None
        stamp = now + self.config.delete_retention_ms if tombstones and horizon is None else None
        if n_kept == h.records_count and stamp is None:
            self._note_horizon(horizon if tombstones else None)
            return data
        new_horizon = stamp if stamp is not None else (horizon if tombstones else None)
        self._note_horizon(new_horizon)
        return _rebuild_batch(h, buf, _kept_records(buf, records.start[rows].tolist()), new_horizon)

    def _rebuild(self, h: BatchHeader, data, kept, new_horizon, section=None):
        if kept is None:  # every record (a control batch getting its delete horizon)
            section = _records_section(data, h, self.config.max_message_bytes)
            kept = list(_walk_records(section, h.records_count))
        self._note_horizon(new_horizon)
        return _rebuild_batch(h, section if section is not None else b"", kept, new_horizon)

    def _note_horizon(self, horizon: int | None) -> None:
        """Remember the earliest future horizon: when it passes the log is cleaned again (a past one left
        behind, past the map's end, must not make the log due at once, round after round)."""
        if horizon is not None and horizon > self.now_ms and (self.earliest_horizon is None
                                                               or horizon < self.earliest_horizon):
            self.earliest_horizon = horizon

    # -- the whole round --

    def run(self, swap: Callable[[int, list[LogSegment], list[int]], bool]) -> CleanResult:
        """Map, then clean and swap group by group. ``swap(base, old segments, their sizes)`` returns False
        when the log changed meanwhile (the round stops; what was swapped stays)."""
        try:
            end = self.build_offset_map()
            txn_state: dict[int, bool] = {}
            for group in self.groups(end):
                self.clean_group(group, txn_state)
                if self.aborting.is_set():
                    discard_cleaned(self.dir, group[0].base_offset)
                    raise CleanerAborted("the cleaner is stopping")
                if not swap(group[0].base_offset, [v.seg for v in group], [v.size for v in group]):
                    raise CleanerAborted(f"the log of {self.log.name} changed while it was cleaned")
            return CleanResult(end, self._done(), self.earliest_horizon)
        except BaseException:
            for v in self.views:
                discard_cleaned(self.dir, v.base_offset)
            raise
        finally:
            self.close()

    def _done(self) -> CleanerStats:
        self.stats.ended = time.monotonic()
        return self.stats


def clean_log_now(lg: Log, checkpoint: int | None = None, *, now_ms: int | None = None,
                  map_memory: int = 134217728, load_factor: float = 0.9,
                  throttler: Throttler | None = None) -> CleanResult | None:
    """One round over ``lg`` in the calling thread, swapping directly (tools and tests; the broker's
    :class:`LogCleaner` runs rounds in threads and swaps on the event loop). None when nothing is
    cleanable."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    to_clean = log_to_clean(lg, checkpoint, now)
    if to_clean.end_index == 0:
        return None
    rnd = CleaningRound(lg, to_clean, OffsetMap(map_memory, load_factor), throttler or Throttler(float("inf")),
                        now)
    return rnd.run(lambda base, old, sizes: lg.replace_segments(base, old, sizes) is not None)


# ------------------------------------------------------------------------------------------------ the service

class LogCleaner:
    """The broker's cleaner threads (asyncio tasks that run each round in a worker thread) and Kafka's
    LogCleanerManager: which log is next, the checkpoints, the logs in progress and those that failed."""

    def __init__(self, config: CleanerConfig, logs: Callable[[], dict], dir_of: Callable[[tuple[str, int]], str | None],
                 log_dirs: list[str], metrics: MetricsRegistry | None = None,
                 config_source: Callable[[], CleanerConfig] | None = None):
        """``config_source``: the settings in effect now (dynamic broker configs), read before each round."""
        self.config = config
        self._config_source = config_source
        self._logs = logs
        self._dir_of = dir_of
        self.log_dirs = log_dirs
        self.throttler = Throttler(config.max_io_bytes_per_second)
        self.checkpoints: dict[str, dict[tuple[str, int], int]] = {}
        self.in_progress: dict[tuple[str, int], CleaningRound] = {}
        self.uncleanable: dict[tuple[str, int], str] = {}  # partitions whose cleaning failed, and why
        self.horizons: dict[tuple[str, int], int] = {}  # earliest delete horizon left in a cleaned log
        self.last_clean: dict[tuple[str, int], tuple[int, float, CleanerStats]] = {}  # end time ms, secs, stats
        self.last_run_ms = int(time.time() * 1000)
        self.dead_threads = 0
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._started = False
        self._max_clean_secs = 0.0
        self._max_delay_secs = 0.0
        self._recopy = 0.0
        self._metrics = metrics
        if metrics is not None:
            self._register_metrics(metrics)

    # -- checkpoints --

    def load_checkpoints(self, log_dirs: list[str]) -> None:
        self.checkpoints = {d: self.read_checkpoint(d) for d in log_dirs}

    @staticmethod
    def read_checkpoint(log_dir: str) -> dict[tuple[str, int], int]:
        path = os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
        try:
            return OffsetCheckpointFile(path).read()
        except (KafkaError, OSError, ValueError) as e:
            log.warning("Ignoring unreadable cleaner checkpoint %s (%s): logs are cleaned from their start", path, e)
            return {}

    def _write_checkpoint(self, log_dir: str) -> None:
        logs = self._logs()
        entries = {tp: off for tp, off in self.checkpoints.get(log_dir, {}).items() if tp in logs}
        self.checkpoints[log_dir] = entries
        try:
            OffsetCheckpointFile(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)).write(entries)
        except OSError as e:
            log.warning("Could not write the cleaner checkpoint of %s: %s", log_dir, e)

    def checkpoint_of(self, tp: tuple[str, int]) -> int | None:
        """The first dirty offset of a log; a truncation below it (a follower) moves it down, as Kafka's
        maybeTruncateCheckpoint: what is appended again there was never cleaned."""
        d = self._dir_of(tp)
        cp = self.checkpoints.get(d, {}).get(tp) if d is not None else None
        lg = self._logs().get(tp)
        if cp is not None and lg is not None and lg.truncated_below is not None and lg.truncated_below < cp:
            cp = self.checkpoints[d][tp] = lg.truncated_below
        if lg is not None:
            lg.truncated_below = None
        return cp

    def cleaned_up_to(self, tp: tuple[str, int]) -> int | None:
        """The offset below which the log was cleaned (its checkpoint, never above a truncation not yet
        applied to it), None when it never was or the cleaner is off. The copy to the remote tier uploads
        only segments below it (docs/tiered-storage.md, "Compacted topics"); this reads, never moves it."""
        if not self.config.enable:
            return None
        d = self._dir_of(tp)
        cp = self.checkpoints.get(d, {}).get(tp) if d is not None else None
        lg = self._logs().get(tp)
        if cp is None or lg is None:
            return None
        if lg.truncated_below is not None:
            cp = min(cp, lg.truncated_below)
        return cp if lg.local_log_start_offset <= cp <= lg.log_end_offset else None

    # -- choice --

    def compacted_logs(self) -> list[Log]:
        return [lg for lg in self._logs().values() if lg.offline is None and lg.config.compact]

    def states(self, now_ms: int | None = None) -> list[LogToClean]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        out = []
        for lg in self.compacted_logs():
            tp = (lg.topic, lg.partition)
            out.append(log_to_clean(lg, self.checkpoint_of(tp), now, self.horizons.get(tp)))
        return out

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        """Kafka's grabFilthiestCompactedLog: the cleanable log with the highest dirty ratio, not in progress
        and not uncleanable."""
        best = None
        max_ratio = 0.0
        max_delay = 0
        for ltc in self.states(now_ms):
            tp = (ltc.log.topic, ltc.log.partition)
            if tp in self.in_progress or tp in self.uncleanable:
                continue
            max_ratio = max(max_ratio, ltc.ratio)
            max_delay = max(max_delay, ltc.compaction_delay_ms)
            if ltc.cleanable and (best is None or ltc.ratio > best.ratio):
                best = ltc
        self._max_dirty = max_ratio
        self._max_delay_secs = max_delay / 1000
        return best

    # -- running --

    def start(self) -> None:
        if not self.config.enable:
            return
        self._started = True
        self._refresh_config()
        self._start_threads()

    def _start_threads(self) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        running = {t.get_name() for t in self._tasks}
        for i in range(self.config.threads):
            name = f"kafka-log-cleaner-thread-{i}"
            if name not in running:
                self._tasks.append(asyncio.create_task(self._thread(i), name=name))

    def _refresh_config(self) -> CleanerConfig:
        """Take up changed dynamic settings (Kafka reconfigures its cleaner likewise): the throttle at once,
        the map sizes from each thread's next round, more threads started, surplus ones ending."""
        if self._config_source is None:
            return self.config
        new = self._config_source()
        if new != self.config:
            log.info("Log cleaner settings changed: %s", new)
            grew = new.threads > self.config.threads
            self.config = new
            self.throttler.rate = new.max_io_bytes_per_second
            if grew and self._started and not self._stopping:
                self._start_threads()
        return self.config

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        """Stop the threads: a round in progress stops at its next batch and its cleaned files go."""
        self._stopping = True
        for rnd in self.in_progress.values():
            rnd.aborting.set()
        self._wake.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=30)
            for t in pending:
                t.cancel()
        self._tasks.clear()

    async def _thread(self, n: int) -> None:
        offset_map = None
        try:
            while not self._stopping:
                cfg = self._refresh_config()
                if n >= cfg.threads:
                    return  # log.cleaner.threads was lowered
                if offset_map is None or (offset_map.slots, offset_map.load_factor) != (
                        cfg.map_memory_per_thread // OFFSET_MAP_ENTRY_BYTES, cfg.io_buffer_load_factor):
                    offset_map = OffsetMap(cfg.map_memory_per_thread, cfg.io_buffer_load_factor)
                cleaned = False
                try:
                    cleaned = await self.clean_filthiest_log(offset_map)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - a failing round marks its log, the thread goes on
                    log.exception("Log cleaner thread %d failed a round", n)
                if not cleaned:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)
                    except TimeoutError:
                        pass
        except asyncio.CancelledError:
            return
        except BaseException:
            self.dead_threads += 1
            raise

    async def clean_filthiest_log(self, offset_map: OffsetMap) -> bool:
        """Clean the dirtiest cleanable log once; False when no log needed it."""
        now = int(time.time() * 1000)
        self.last_run_ms = now
        ltc = self.grab_filthiest_log(now)
        if ltc is None:
            return False
        lg = ltc.log
        tp = (lg.topic, lg.partition)
        loop = asyncio.get_running_loop()
        rnd = CleaningRound(lg, ltc, offset_map, self.throttler, now, self.config.io_buffer_size)
        self.in_progress[tp] = rnd

        def swap(base: int, old: list[LogSegment], sizes: list[int]) -> bool:
            fut = asyncio.run_coroutine_threadsafe(self._swap(tp, lg, base, old, sizes), loop)
            return fut.result()

        log.info("Cleaning %s: offsets %d to the first uncleanable segment, dirty ratio %.2f", lg.name,
                 ltc.first_dirty_offset, ltc.ratio)
        try:
            result = await asyncio.to_thread(rnd.run, swap)
        except CleanerAborted as e:
            log.info("Cleaning of %s stopped: %s", lg.name, e)
            return True
        except (KafkaError, OSError) as e:
            if self._logs().get(tp) is lg and lg.offline is None:
                self.uncleanable[tp] = str(e)
                log.error("Cleaning of %s failed; the partition is marked uncleanable: %s", lg.name, e)
            return True
        finally:
            self.in_progress.pop(tp, None)
        self._record(tp, lg, result)
        return True

    async def _swap(self, tp, lg: Log, base: int, old: list[LogSegment], sizes: list[int]) -> bool:
        if self._stopping or self._logs().get(tp) is not lg or lg.offline is not None:
            discard_cleaned(lg.dir, base)
            return False
        try:
            return lg.replace_segments(base, old, sizes) is not None
        except KafkaStorageError:
            discard_cleaned(lg.dir, base)
            return False

    def _record(self, tp: tuple[str, int], lg: Log, result: CleanResult) -> None:
        stats = result.stats
        d = self._dir_of(tp)
        if d is not None and self._logs().get(tp) is lg:
            self.checkpoints.setdefault(d, {})[tp] = result.end_offset
            self._write_checkpoint(d)
        if result.delete_horizon_ms is not None:
            self.horizons[tp] = result.delete_horizon_ms
        else:
            self.horizons.pop(tp, None)
        end_ms = int(time.time() * 1000)
        self.last_clean[tp] = (end_ms, stats.seconds, stats)
        self._max_clean_secs = stats.seconds
        self._recopy = 100.0 * stats.bytes_written / stats.bytes_read if stats.bytes_read else 0.0
        log.info("Cleaned %s up to offset %d in %.3f s: %d of %d records kept, %d bytes read, %d written, "
                 "%d segments in %d groups", lg.name, result.end_offset, stats.seconds, stats.records_kept,
                 stats.records_read, stats.bytes_read, stats.bytes_written, stats.segments_cleaned, stats.groups)
        if self._metrics is not None:
            self._per_log[1].set(end_ms, topic=tp[0], partition=tp[1])
            self._per_log[2].set(stats.seconds, topic=tp[0], partition=tp[1])

    def forget(self, tp: tuple[str, int]) -> None:
        """A log deleted: its checkpoint entry and state go (Kafka's updateCheckpoints on deletion)."""
        for entries in self.checkpoints.values():
            entries.pop(tp, None)
        self.uncleanable.pop(tp, None)
        self.horizons.pop(tp, None)
        self.last_clean.pop(tp, None)
        rnd = self.in_progress.get(tp)
        if rnd is not None:
            rnd.aborting.set()
        if self._metrics is not None:
            for g in self._per_log:
                g.remove_matching(topic=tp[0], partition=tp[1])

    def describe(self, tp: tuple[str, int]) -> dict | None:
        """The cleaner's view of one compacted partition (``tierlog topic describe``)."""
        lg = self._logs().get(tp)
        if lg is None or lg.offline is not None or not lg.config.compact:
            return None
        ltc = log_to_clean(lg, self.checkpoint_of(tp), int(time.time() * 1000), self.horizons.get(tp))
        last = self.last_clean.get(tp)
        return {"first_dirty_offset": ltc.first_dirty_offset, "dirty_ratio": round(ltc.ratio, 4),
                "cleanable_bytes": ltc.dirty_bytes, "in_progress": tp in self.in_progress,
                "uncleanable": self.uncleanable.get(tp),
                "last_clean_ms": last[0] if last else None, "last_clean_seconds": round(last[1], 3) if last else None}

    # -- metrics --

    def _register_metrics(self, metrics: MetricsRegistry) -> None:
        self._max_dirty = 0.0
        metrics.register(_CleanerCollector(self))  # first: it refreshes the gauges before they are read
        self._per_log = (
            metrics.gauge(LOG_DIRTY_RATIO, "Dirty fraction of a compacted log (cleanable bytes not cleaned yet "
                          "over all cleanable bytes).", ("topic", "partition")),
            metrics.gauge(LOG_LAST_CLEAN_TIME, "When the log cleaner last finished a round of the log (epoch ms).",
                          ("topic", "partition")),
            metrics.gauge(LOG_LAST_CLEAN_DURATION, "How long the log's last cleaning round took, in seconds.",
                          ("topic", "partition")))
        self._gauges = (
            metrics.gauge(MAX_DIRTY_PERCENT, "Highest dirty percent of the compacted logs (Kafka's "
                          "LogCleanerManager max-dirty-percent)."),
            metrics.gauge(UNCLEANABLE_PARTITIONS_COUNT, "Partitions whose cleaning failed (Kafka's "
                          "uncleanable-partitions-count).", ("logDirectory",)),
            metrics.gauge(UNCLEANABLE_BYTES, "Cleanable bytes of the uncleanable partitions (Kafka's "
                          "uncleanable-bytes).", ("logDirectory",)),
            metrics.gauge(TIME_SINCE_LAST_RUN_MS, "Time since a cleaner thread last looked for a log to clean "
                          "(Kafka's time-since-last-run-ms)."),
            metrics.gauge(MAX_CLEAN_TIME_SECS, "Duration of the last cleaning round (Kafka's max-clean-time-secs)."),
            metrics.gauge(MAX_COMPACTION_DELAY_SECS, "Longest time a log waited past max.compaction.lag.ms "
                          "(Kafka's max-compaction-delay-secs)."),
            metrics.gauge(CLEANER_RECOPY_PERCENT, "Bytes written over bytes read by the last round, in percent "
                          "(Kafka's cleaner-recopy-percent)."),
            metrics.gauge(DEAD_THREAD_COUNT, "Cleaner threads that died (Kafka's DeadThreadCount)."))

    def update_metrics(self) -> None:
        if self._metrics is None:
            return
        now = int(time.time() * 1000)
        states = self.states(now)
        ratio, *_ = self._per_log
        max_dirty, count, ubytes, since, clean_secs, delay, recopy, dead = self._gauges
        for ltc in states:
            ratio.set(ltc.ratio, topic=ltc.log.topic, partition=ltc.log.partition)
        max_dirty.set(100 * max((ltc.ratio for ltc in states), default=0.0))
        for d in self.log_dirs:
            bad = [ltc for ltc in states if (ltc.log.topic, ltc.log.partition) in self.uncleanable
                   and self._dir_of((ltc.log.topic, ltc.log.partition)) == d]
            count.set(len(bad), logDirectory=d)
            ubytes.set(sum(ltc.dirty_bytes for ltc in bad), logDirectory=d)
        since.set(now - self.last_run_ms)
        clean_secs.set(self._max_clean_secs)
        delay.set(max((ltc.compaction_delay_ms for ltc in states), default=0) / 1000)
        recopy.set(self._recopy)
        dead.set(self.dead_threads)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _CleanerCollector:
    """Refreshes the cleaner's gauges when the registry is scraped."""

    def __init__(self, cleaner: LogCleaner):
        self.cleaner = cleaner

    def collect(self):
        try:
            self.cleaner.update_metrics()
        except Exception:  # noqa: BLE001 - a scrape never fails on the cleaner's state
            log.debug("Could not refresh the cleaner metrics", exc_info=True)
        return []


__all__ = [
    "CLEANER_OFFSET_CHECKPOINT", "CleanResult", "CleanerConfig", "CleaningRound", "LogCleaner", "LogToClean",
    "OffsetMap", "Throttler", "clean_log_now", "log_to_clean",
]
