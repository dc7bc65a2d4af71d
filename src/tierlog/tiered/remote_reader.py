"""Reads below the local log start offset, answered from the remote tier (Kafka's RemoteLogReader).

For an offset: its leader epoch from the local epoch cache, the COPY_SEGMENT_FINISHED segment holding
it from the metadata manager, a byte position from the segment's offset index (cached on local disk),
then a ranged read of the segment object. Batches stay bytes: the reader only walks batch headers to
start at the batch holding the offset and to stop at whole batches within the byte limit.

Sequential consumers are served from a read-ahead buffer: every ranged read fetches at least
``READ_AHEAD_BYTES``; the part not yet returned waits for the next fetch (which continues where the
previous answer ended, without an index lookup), and when it runs low the next range is fetched in the
background. The buffers of all partitions together stay under ``READ_AHEAD_BUDGET`` bytes.

Storage calls run on a pool of ``remote.log.reader.threads`` threads; at most
``remote.log.reader.max.pending.tasks`` reads wait for one, further ones are refused (the partition
gets UNKNOWN_SERVER_ERROR, as in Kafka). Errors:

- offset without a remote segment -> OFFSET_OUT_OF_RANGE (1);
- metadata still loading after a restart -> REPLICA_NOT_AVAILABLE (9), retriable (KIP-1007's intent
  with the code clients already retry);
- the remote store failing, or an object missing -> KAFKA_STORAGE_ERROR (56), retriable for every
  client (the Java consumer refreshes metadata and fetches again), with a message naming the segment.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tierlog.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownServerError,
)
from tierlog.records import RECORD_BATCH_OVERHEAD, decode_batch, iter_batches, read_header
from tierlog.storage.log import TimestampAndOffset
from tierlog.tiered.index_cache import RemoteIndexCache
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.rsm import RemoteStorageError

log = logging.getLogger(__name__)

READ_AHEAD_BYTES = 4 * 1024 * 1024
READ_AHEAD_BUDGET = 256 * 1024 * 1024


@dataclass(slots=True)
class _Buffer:
    """Bytes ``[start, start + len(data))`` of one remote segment object, and where the next sequential
    read begins (``next_offset`` at ``next_position``)."""

    segment: RemoteLogSegmentMetadata
    start: int
    data: bytes
    next_offset: int = -1
    next_position: int = -1
    prefetching: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class RemoteLogReader:
    def __init__(self, config, rsm, rlmm, metrics, log_dir: str) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.metrics = metrics
        self.max_pending = config["remote.log.reader.max.pending.tasks"]
        self.pool = ThreadPoolExecutor(config["remote.log.reader.threads"], thread_name_prefix="rlm-reader")
        self.index_cache = RemoteIndexCache(log_dir, config["remote.log.index.file.cache.total.size.bytes"],
                                            rsm.fetch_index)
        self._buffers: OrderedDict[TopicIdPartition, _Buffer] = OrderedDict()
        self._buffers_lock = threading.Lock()
        self._pending = 0
        self._in_flight: dict[TopicIdPartition, set[asyncio.Future]] = {}

    # -------------------------------------------------------------------------------------- reads

    async def read(self, partition, tp: TopicIdPartition, fetch_offset: int, max_bytes: int,
                   min_one_message: bool) -> bytes:
        """Whole batches from ``fetch_offset`` on, at most ``max_bytes`` (at least one batch with
        ``min_one_message``), from remote storage."""
        lg = partition.log
        epoch = lg.leader_epoch_cache.epoch_for_offset(fetch_offset)
        md = self.rlmm.remote_log_segment_metadata(tp, epoch, fetch_offset)  # 9 while loading
        if md is None:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} of {tp.topic}-{tp.partition} (leader epoch {epoch}) "
                                        f"is in no remote segment")
        result = await self._submit(tp, self._read_blocking, partition, tp, md, fetch_offset, max_bytes,
                                    min_one_message)
        self.metrics.fetch_requests.inc(topic=tp.topic)
        self.metrics.fetch_bytes.inc(len(result), topic=tp.topic)
        return result

    async def _submit(self, tp: TopicIdPartition, fn, *args):
        if self._pending >= self.max_pending:
            raise UnknownServerError(f"remote read of {tp.topic}-{tp.partition} refused: "
                                     f"{self._pending} reads pending (remote.log.reader.max.pending.tasks)")
        loop = asyncio.get_running_loop()
        self._pending += 1
        fut = loop.run_in_executor(self.pool, fn, *args)
        flights = self._in_flight.setdefault(tp, set())
        flights.add(fut)

        def done(f):
            self._pending -= 1
            flights.discard(f)
        fut.add_done_callback(done)
        try:
            return await asyncio.shield(fut)
        except KafkaError:
            self.metrics.fetch_errors.inc(topic=tp.topic)
            raise
        except Exception as e:
            self.metrics.fetch_errors.inc(topic=tp.topic)
            raise KafkaStorageError(f"remote read of {tp.topic}-{tp.partition} failed: {e}") from e

    def _read_blocking(self, partition, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int,
                       max_bytes: int, min_one_message: bool) -> bytes:
        lg = partition.log
        while True:
            try:
                data = self._read_segment(tp, md, fetch_offset, max_bytes, min_one_message)
            except RemoteStorageError as e:
                log.warning("Remote read of %s-%d at offset %d from segment %s (offsets %d-%d) failed: %s",
                            tp.topic, tp.partition, fetch_offset, md.segment_id.id, md.start_offset, md.end_offset, e)
                raise
            if data is not None:
                return data
            # Nothing at or after the offset in this segment (compacted away, or the offset is its last
            # one): continue in the next segment, as Kafka does.
            nxt = md.end_offset + 1
            if nxt >= lg.local_log_start_offset:
                return b""
            md2 = self.rlmm.remote_log_segment_metadata(tp, lg.leader_epoch_cache.epoch_for_offset(nxt), nxt)
            if md2 is None:
                return b""
            md, fetch_offset = md2, nxt

    def _read_segment(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int,
                      max_bytes: int, min_one_message: bool) -> bytes | None:
        """Whole batches from the one holding ``fetch_offset``, or None when the segment has none at or
        after it."""
        buf = self._buffer_for(tp, md)
        if buf is not None and buf.next_offset == fetch_offset:
            position = buf.next_position  # a sequential read: no index lookup
        else:
            position = self.index_cache.offset_index(md).lookup(fetch_offset)[1]
        size_of_segment = md.segment_size_in_bytes
        want = max(max_bytes, RECORD_BATCH_OVERHEAD)
        pieces: list[bytes] = []
        taken = 0
        next_offset = fetch_offset
        need = want
        full = False
        while position < size_of_segment and not full:
            view = self._range(tp, md, position, need)
            rel = span = 0
            need = RECORD_BATCH_OVERHEAD
            while len(view) - rel >= RECORD_BATCH_OVERHEAD:
                h = read_header(view, rel)
                wanted = h.last_offset >= fetch_offset
                if wanted and taken + h.size > max_bytes and not (taken == 0 and min_one_message):
                    full = True
                    break
                if rel + h.size > len(view):
                    need = max(want - taken, h.size)  # read on from this batch's first byte
                    break
                if wanted:
                    if taken == 0:
                        span = rel
                    taken += h.size
                    next_offset = h.next_offset
                else:
                    span = rel + h.size
                rel += h.size
            if taken and rel > span:
                pieces.append(bytes(view[span:rel]))
            position += rel
        if not pieces:
            return b"" if full else None
        self._remember(tp, md, next_offset, position)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    # ---------------------------------------------------------------------------------- buffering

    def _buffer_for(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata) -> _Buffer | None:
        with self._buffers_lock:
            buf = self._buffers.get(tp)
            if buf is None or buf.segment.segment_id != md.segment_id:
                return None
            self._buffers.move_to_end(tp)
            return buf

    def _range(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, position: int, length: int) -> memoryview:
        """At least ``length`` bytes of the segment from ``position`` (fewer at its end); from the
        read-ahead buffer when it holds them, else read (at least ``READ_AHEAD_BYTES``)."""
        with self._buffers_lock:
            buf = self._buffers.get(tp)
            if buf is not None and buf.segment.segment_id == md.segment_id and buf.start <= position and (
                    position + length <= buf.end or buf.end >= md.segment_size_in_bytes):
                return memoryview(buf.data)[position - buf.start:]
        size = max(length, READ_AHEAD_BYTES)
        end = min(position + size, md.segment_size_in_bytes) - 1
        data = self.rsm.fetch_log_segment(md, position, end) if end >= position else b""
        if len(data) < min(size, md.segment_size_in_bytes - position):
            raise RemoteStorageError(f"segment {md.segment_id.id} of {tp.topic}-{tp.partition} returned "
                                     f"{len(data)} bytes from position {position}, expected more (the object is "
                                     f"shorter than its metadata says)")
        with self._buffers_lock:
            self._buffers[tp] = _Buffer(md, position, data)
            self._buffers.move_to_end(tp)
            self._trim_buffers()
        return memoryview(data)

    def _remember(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, next_offset: int,
                  next_position: int) -> None:
        """Where the next sequential read starts; when little is buffered beyond it, fetch the next range."""
        prefetch = None
        with self._buffers_lock:
            buf = self._buffers.get(tp)
            if buf is None or buf.segment.segment_id != md.segment_id:
                return
            buf.next_offset, buf.next_position = next_offset, next_position
            left = buf.end - next_position
            if left < READ_AHEAD_BYTES // 2 and buf.end < md.segment_size_in_bytes and not buf.prefetching:
                buf.prefetching = True
                prefetch = buf
        if prefetch is not None and self._pending < self.max_pending:
            self.pool.submit(self._prefetch, tp, prefetch)

    def _prefetch(self, tp: TopicIdPartition, buf: _Buffer) -> None:
        """Extend ``buf`` by the next range (background, best effort)."""
        try:
            end = min(buf.end + READ_AHEAD_BYTES, buf.segment.segment_size_in_bytes) - 1
            more = self.rsm.fetch_log_segment(buf.segment, buf.end, end)
        except Exception as e:  # noqa: BLE001 - the foreground read will retry and report it
            log.debug("Read-ahead of %s failed: %s", tp, e)
            more = b""
        with self._buffers_lock:
            current = self._buffers.get(tp)
            if current is buf and more:
                keep_from = max(buf.start, min(buf.next_position, buf.end)) if buf.next_position >= 0 else buf.start
                self._buffers[tp] = _Buffer(buf.segment, keep_from, buf.data[keep_from - buf.start:] + more,
                                            buf.next_offset, buf.next_position)
                self._trim_buffers()
            elif current is buf:
                buf.prefetching = False

    def _trim_buffers(self) -> None:
        total = sum(len(b.data) for b in self._buffers.values())
        while total > READ_AHEAD_BUDGET and len(self._buffers) > 1:
            _, old = self._buffers.popitem(last=False)
            total -= len(old.data)

    # ------------------------------------------------------------------------------ timestamps

    async def find_offset_by_timestamp(self, partition, tp: TopicIdPartition, timestamp: int
                                       ) -> TimestampAndOffset | None:
        """The first offset whose record timestamp is at least ``timestamp``: remote segments first (in
        the local lineage's order), then the local log."""
        lg = partition.log
        candidates = []
        seen = set()
        for epoch, _ in lg.leader_epoch_cache.entries:
            for md in self.rlmm.list_remote_log_segments(tp, epoch):  # 9 while loading
                if md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED or md.segment_id in seen:
                    continue
                seen.add(md.segment_id)
                if md.max_timestamp_ms >= timestamp and md.end_offset >= lg.log_start_offset \
                        and md.start_offset < lg.local_log_start_offset:
                    candidates.append(md)
        candidates.sort(key=lambda m: m.start_offset)
        for md in candidates:
            found = await self._submit(tp, self._search_segment, lg, md, timestamp)
            if found is not None:
                return found
        return lg.fetch_offset_by_timestamp(timestamp)

    def _search_segment(self, lg, md: RemoteLogSegmentMetadata, timestamp: int) -> TimestampAndOffset | None:
        _, near = self.index_cache.time_index(md).lookup(timestamp - 1)
        start_offset = max(near, lg.log_start_offset, md.start_offset)
        position = self.index_cache.offset_index(md).lookup(start_offset)[1]
        end = md.segment_size_in_bytes - 1
        data = self.rsm.fetch_log_segment(md, position, end)
        for pos, h in iter_batches(data):
            if h.last_offset < start_offset or h.max_timestamp < timestamp:
                continue
            if h.timestamp_type == 1:  # LogAppendTime: every record carries the batch timestamp
                offset = max(h.base_offset, lg.log_start_offset)
                return TimestampAndOffset(h.max_timestamp, offset, lg.leader_epoch_cache.epoch_for_offset(offset))
            _, records = decode_batch(data, pos)
            for r in records:
                if r.offset >= start_offset and r.timestamp >= timestamp:
                    return TimestampAndOffset(r.timestamp, r.offset, lg.leader_epoch_cache.epoch_for_offset(r.offset))
        return None

    # ----------------------------------------------------------------------------------- upkeep

    async def drain(self, tp: TopicIdPartition) -> None:
        """Wait for the reads of ``tp`` in flight (a delete disablement fences new ones first)."""
        flights = list(self._in_flight.get(tp, ()))
        if flights:
            await asyncio.wait(flights)
        with self._buffers_lock:
            self._buffers.pop(tp, None)

    def evict(self, md: RemoteLogSegmentMetadata) -> None:
        self.index_cache.evict(md)
        with self._buffers_lock:
            buf = self._buffers.get(md.topic_id_partition)
            if buf is not None and buf.segment.segment_id == md.segment_id:
                del self._buffers[md.topic_id_partition]

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
