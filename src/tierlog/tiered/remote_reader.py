"""Reads below the local log start offset, answered from the remote tier (Kafka's RemoteLogReader).

For an offset: its leader epoch from the local epoch cache, the COPY_SEGMENT_FINISHED segment holding
it from the metadata manager, a byte position from the segment's offset index (cached on local disk,
:mod:`tierlog.tiered.index_cache`), then ranged reads of the segment object. Batches stay bytes: the
reader walks batch headers only, to start at the batch holding the offset and to stop at whole
batches within the byte limit. A segment with nothing at or after the offset (a gap) hands over to
the next segment; past the last remote one the answer says where the local log takes over, and the
caller (the replica manager) reads it.

Read-ahead (:mod:`tierlog.tiered.read_ahead`): the bytes read from a segment object stay in a
per-segment window; a consumer reading on from where its last answer ended needs no index lookup and,
once less than a step is left ahead, the next range is fetched in the background, in steps that grow while
the reader goes on (also the start of the next segment, as soon as the current one's last range is fetched
or in flight, so a new segment costs no round trip of its own; that segment's manifest is fetched earlier
still, while the reader is in the one before). A window keeps what it returned last, and where that began,
so a fetch that the replica manager trimmed to the response budget, or one answered empty because the read
outlasted ``remote.fetch.max.wait.ms``, is served again from memory without the offset index. An
answer from memory ends within the ranged read holding its first batch, so it is sent as a view of it
(joining two into new bytes cost 0.2-0.4 ms of CPU per MiB).

Storage calls run on a pool of ``remote.log.reader.threads`` threads (dynamic); at most
``remote.log.reader.max.pending.tasks`` reads wait for a thread, further ones are refused with the
retriable KAFKA_STORAGE_ERROR (56; Kafka answers -1, which kafka-python raises to the application).
Errors:

- no remote segment for the offset (or it is below the log start) -> OFFSET_OUT_OF_RANGE (1);
- metadata still loading after a restart -> REPLICA_NOT_AVAILABLE (9), retriable (KIP-1007's intent
  with the code clients already know);
- the remote store failing, an object missing or corrupt -> KAFKA_STORAGE_ERROR (56), logged with the
  segment's id and offsets. Kafka answers UNKNOWN_SERVER_ERROR (-1) here; 56 is retried quietly by
  every client (the Java consumer and librdkafka refresh metadata and fetch again, kafka-python does
  too), while -1 makes kafka-python's ``poll`` raise and librdkafka hand the application an error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tierlog.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    UnknownServerError,
)
from tierlog.kafka_uuid import uuid_to_str
from tierlog.records import RECORD_BATCH_OVERHEAD, decode_batch, iter_batches, read_header, walk_batches
from tierlog.storage.log import TimestampAndOffset
from tierlog.storage.segment import FileRegion
from tierlog.tiered.index_cache import RemoteIndexCache
from tierlog.tiered.lineage import filtered_epochs, segment_within_leader_epochs
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.partition import TopicPartitionLog
from tierlog.tiered.quota import RateQuota
from tierlog.tiered.read_ahead import CHUNK_BYTES, FIRST_CHUNK_BYTES, READ_AHEAD_BUDGET, ReadAheadCache, Window

log = logging.getLogger(__name__)

SEARCH_BYTES = 64 * 1024  # first range of a timestamp search (doubles while it finds nothing)
FAILURE_LOG_INTERVAL_S = 10.0  # a failing segment is logged at WARNING at most this often

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(slots=True)
class _Walk:
    first: int | None  # position of the first batch returned
    end: int  # position after the last one
    next_offset: int
    transactional: bool


class _WouldBlock(Exception):
    """A read tried on the event loop needs I/O: it goes to the reader pool instead."""


@dataclass(slots=True)
class RemoteReadResult:
    """Whole batches from the fetch offset (``records``, possibly empty; a memoryview of read-ahead memory
    when possible, to spare a copy), the offset after them, and for read_committed the aborted
    transactions overlapping them as (producer id, first offset). ``local_offset``: the remote segments
    hold nothing at or after the fetch offset before the local log starts; the caller reads the local
    log from this offset (the reader never reads the local log itself)."""

    records: bytes | memoryview | FileRegion
    next_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None
    local_offset: int | None = None


@dataclass(slots=True)
class _SegmentRead:
    records: bytes | memoryview | FileRegion
    next_offset: int
    end_of_segment: bool
    transactional: bool
    tail_fetched: bool = False  # the window holds or is fetching the segment's last bytes


class RemoteLogReader:
    def __init__(self, config, rsm, rlmm, metrics, log_dir: str, *, chunk_bytes: int = CHUNK_BYTES,
                 read_ahead_budget: int = READ_AHEAD_BUDGET) -> None:
        """``config``: the broker configuration, or a function returning the current one (dynamic
        ``remote.log.reader.threads`` and ``remote.log.index.file.cache.total.size.bytes``)."""
        self._config = config if callable(config) else (lambda: config)
        cfg = self._config()
        self.rsm = rsm
        self.rlmm = rlmm
        self.metrics = metrics
        self.max_pending = cfg["remote.log.reader.max.pending.tasks"]
        self.threads = cfg["remote.log.reader.threads"]
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="remote-reader")
        # As many read-ahead threads as reader threads: each partition read on keeps up to three calls in
        # flight at a segment's end (its last range, the next segment's manifest and first range), and
        # a call waiting for a free thread is a round trip lost (half as many made four readers queue).
        self.read_ahead = ReadAheadCache(rsm.fetch_log_segment_buffer, self.threads, chunk_bytes=chunk_bytes,
                                         budget=read_ahead_budget)
        self.index_cache = RemoteIndexCache(log_dir, cfg["remote.log.index.file.cache.total.size.bytes"],
                                            rsm.fetch_index)
        # Bytes answered from the remote tier count against the broker-wide fetch quota (KIP-956); the
        # Fetch handler asks it before reading.
        self.fetch_quota = RateQuota(lambda: self._config()["remote.log.manager.fetch.max.bytes.per.second"],
                                     cfg["remote.log.manager.fetch.quota.window.num"],
                                     cfg["remote.log.manager.fetch.quota.window.size.seconds"])
        self._pending = 0  # reads submitted and not finished (on the event loop only)
        self._in_flight: dict[TopicIdPartition, set[asyncio.Future]] = {}
        self._last_failure_log: dict = {}
        self.closed = False

    @property
    def read_ahead_bytes(self) -> int:
        """Bytes held by read-ahead windows and read-aheads in flight."""
        return self.read_ahead.held

    @property
    def read_ahead_budget(self) -> int:
        return self.read_ahead.budget

    # ---------------------------------------------------------------------------------- config

    def _reconfigure(self) -> None:
        cfg = self._config()
        threads = cfg["remote.log.reader.threads"]
        if threads != self.threads:
            # A new pool takes new reads; the old one finishes what it has.
            old, self.pool = self.pool, ThreadPoolExecutor(threads, thread_name_prefix="remote-reader")
            self.threads = threads
            old.shutdown(wait=False)
        size = cfg["remote.log.index.file.cache.total.size.bytes"]
        if size != self.index_cache.max_bytes:
            self.index_cache.resize(size)

    @staticmethod
    def topic_id_partition(partition: TopicPartitionLog) -> TopicIdPartition:
        return TopicIdPartition(partition.topic_id, partition.topic, partition.index)

    # ------------------------------------------------------------------------------------ reads

    async def read(self, partition: TopicPartitionLog, fetch_offset: int, max_bytes: int, min_one_message: bool,
                   isolation: str = "high_watermark") -> bytes:
        """Whole batches from ``fetch_offset`` on, at most ``max_bytes`` (at least the whole first batch
        with ``min_one_message``), from remote storage, continuing in the local log past the last remote
        segment (for tools and tests; the fetch path uses :meth:`read_result`)."""
        got = await self.read_result(partition, fetch_offset, max_bytes, min_one_message, isolation)
        if got.local_offset is not None:
            return partition.log.read(got.local_offset, max_bytes, isolation=isolation,
                                      min_one_message=min_one_message).read()
        return got.records.read() if isinstance(got.records, FileRegion) else bytes(got.records)

    def read_now(self, partition: TopicPartitionLog, fetch_offset: int, max_bytes: int, min_one_message: bool,
                 isolation: str = "high_watermark") -> RemoteReadResult | None:
        """:meth:`read_result` when it can be answered at once, on the event loop, without I/O waits: a
        sequential reader whose bytes are in the window or in a plain object file already known. None
        otherwise (also on any error): then call :meth:`read_result`, which reports errors. This spares a
        task and its event-loop rounds per partition on the common path."""
        if isolation == "committed" or self.closed:
            return None  # aborted transactions need the transaction indexes: the full path
        tp = self.topic_id_partition(partition)
        try:
            md = self._segment_for(tp, partition.log, fetch_offset)
            got = self._read_segment(tp, md, fetch_offset, max_bytes, min_one_message, inline=True)
        except Exception:  # noqa: BLE001 - _WouldBlock, or an error read_result reports properly
            return None
        if got is None:
            return None  # past this segment's end: the full path moves on
        self.metrics.fetch_requests.inc(topic=tp.topic)
        self._read_ahead_after(tp, partition.log, md, got)
        self._count_answer(tp, len(got.records))
        return RemoteReadResult(got.records, got.next_offset, None)

    async def read_result(self, partition: TopicPartitionLog, fetch_offset: int, max_bytes: int, min_one_message: bool,
                          isolation: str = "high_watermark") -> RemoteReadResult:
        """:meth:`read` with the offset after the answer and, for ``isolation="committed"``, the aborted
        transactions of the remote transaction indexes overlapping it."""
        self._reconfigure()
        tp = self.topic_id_partition(partition)
        lg = partition.log
        self.metrics.fetch_requests.inc(topic=tp.topic)
        try:
            md = self._segment_for(tp, lg, fetch_offset)
            offset = fetch_offset
            while True:
                try:
                    # A sequential reader's bytes are usually in the window already: no thread hop.
                    got = self._read_segment(tp, md, offset, max_bytes, min_one_message, inline=True)
                except _WouldBlock:
                    got = await self._submit(tp, self._read_segment, tp, md, offset, max_bytes, min_one_message)
                if got is not None:
                    break
                # Nothing at or after the offset in this segment: the next segment, or the local log.
                offset = md.end_offset + 1
                if offset >= lg.local_log_start_offset:
                    return RemoteReadResult(b"", offset, [] if isolation == "committed" else None, local_offset=offset)
                md = self._segment_for(tp, lg, offset)
            self._read_ahead_after(tp, lg, md, got)
            aborted = None
            if isolation == "committed":
                aborted = []
                if got.transactional:  # no transactional batch returned: no aborted transaction matters
                    later = sorted((m for m in self.rlmm.list_remote_log_segments(tp)
                                    if m.state == FINISHED and m.start_offset > md.end_offset),
                                   key=lambda m: m.start_offset)
                    aborted, complete = await self._submit(tp, self._aborted_transactions, [md, *later], offset,
                                                           got.next_offset)
                    if not complete:  # aborts whose markers are still only local (Kafka searches there next)
                        aborted += lg.collect_aborted_transactions(offset, got.next_offset)[0]
            self._count_answer(tp, len(got.records))
            return RemoteReadResult(got.records, got.next_offset, aborted)
        except OffsetOutOfRangeError:
            raise
        except KafkaError as e:
            self.metrics.fetch_errors.inc(topic=tp.topic)
            if e.code == UnknownServerError.code and e.retriable:
                # The metadata manager itself is still starting (or restarting): not ready, as for a
                # partition still loading.
                raise ReplicaNotAvailableError(f"remote log metadata of {tp.topic}-{tp.partition} is not "
                                               f"available yet: {e}") from e
            raise
        except Exception as e:
            self.metrics.fetch_errors.inc(topic=tp.topic)
            log.exception("Remote read of %s-%d at offset %d failed", tp.topic, tp.partition, fetch_offset)
            raise KafkaStorageError(f"remote read of {tp.topic}-{tp.partition} at offset {fetch_offset} "
                                    f"failed: {e}") from e

    def _count_answer(self, tp: TopicIdPartition, size: int) -> None:
        self.metrics.fetch_bytes.inc(size, topic=tp.topic)
        self.fetch_quota.record(size)

    def _segment_for(self, tp: TopicIdPartition, lg, offset: int) -> RemoteLogSegmentMetadata:
        if offset < lg.log_start_offset:
            raise OffsetOutOfRangeError(f"offset {offset} of {tp.topic}-{tp.partition} is below the log start "
                                        f"offset {lg.log_start_offset}")
        epoch = lg.leader_epoch_cache.epoch_for_offset(offset)
        md = self.rlmm.remote_log_segment_metadata(tp, epoch, offset)  # 9 while loading
        if md is None:
            raise OffsetOutOfRangeError(f"offset {offset} of {tp.topic}-{tp.partition} (leader epoch {epoch}) "
                                        f"is in no remote segment")
        return md

    async def _submit(self, tp: TopicIdPartition, fn, *args):
        if self.closed:
            raise KafkaStorageError("the remote log reader is closed")
        if self._pending >= self.threads + self.max_pending:
            raise KafkaStorageError(f"remote read of {tp.topic}-{tp.partition} refused for now: {self._pending} "
                                    f"reads in progress (remote.log.reader.max.pending.tasks={self.max_pending})")
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.pool, fn, *args)
        self._pending += 1
        flights = self._in_flight.setdefault(tp, set())
        flights.add(fut)

        def done(f):
            self._pending -= 1
            flights.discard(f)
            if not flights:
                self._in_flight.pop(tp, None)
        fut.add_done_callback(done)
        # Shielded: a request answered without this read (timeout) leaves it running; it warms the window.
        return await asyncio.shield(fut)

    # ------------------------------------------------------------------- one segment (pool thread)

    def _read_segment(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int,
                      max_bytes: int, min_one_message: bool, inline: bool = False) -> _SegmentRead | None:
        """Whole batches of ``md`` from the one holding ``fetch_offset``; None when the segment has none
        at or after it. ``inline`` (on the event loop): raise _WouldBlock rather than wait or do I/O."""
        win = self.read_ahead.window(tp, md)
        if not win.lock.acquire(blocking=not inline):
            raise _WouldBlock
        try:
            if win.file is None:
                if inline:
                    raise _WouldBlock  # asking the backend may need I/O (its manifest)
                win.file = self.rsm.log_segment_file(md) or ""
            if win.file:
                return self._read_file(win, md, fetch_offset, max_bytes, min_one_message, inline)
            return self._read_window(win, md, fetch_offset, max_bytes, min_one_message, inline)
        except _WouldBlock:
            raise
        except Exception as e:
            self._log_failure(tp, md, fetch_offset, e)
            raise KafkaStorageError(f"remote read of {tp.topic}-{tp.partition} at offset {fetch_offset} from "
                                    f"segment {uuid_to_str(md.segment_id.id)} (offsets {md.start_offset}-"
                                    f"{md.end_offset}) failed: {e}") from e
        finally:
            win.lock.release()

    def _read_window(self, win: Window, md: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int,
                     min_one_message: bool, inline: bool = False) -> _SegmentRead | None:
        def header(position: int, taken: int):
            self._ensure(win, position, position + RECORD_BATCH_OVERHEAD, position + max(max_bytes - taken, 0),
                         inline)
            return read_header(win.view(position, position + RECORD_BATCH_OVERHEAD))

        def whole(position: int, end: int, taken: int) -> None:
            self._ensure(win, position, end, position + max(max_bytes - taken, 0), inline)

        walked = self._walk(win, md, fetch_offset, max_bytes, min_one_message, inline, header, whole,
                            win.chunk_end)
        if walked is None:
            return None
        if walked.first is None:
            return _SegmentRead(b"", fetch_offset, False, False)
        records = win.view(walked.first, walked.end)
        self.read_ahead.drop_before(win, walked.first)
        if walked.end < md.segment_size_in_bytes:
            self.read_ahead.maybe_read_ahead(win)
        return _SegmentRead(records, walked.next_offset, walked.end >= md.segment_size_in_bytes,
                            walked.transactional, win.ahead_end >= md.segment_size_in_bytes)

    def _read_file(self, win: Window, md: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int,
                   min_one_message: bool, inline: bool = False) -> _SegmentRead | None:
        """:meth:`_read_window` for a segment the backend keeps as a file here: only batch headers are
        read (the page cache does the read-ahead) and the answer is a region of the file, which the
        socket server sends with ``sendfile``, as it sends local segments."""
        fd = os.open(win.file, os.O_RDONLY)
        try:
            def header(position: int, _taken: int):
                data = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
                if len(data) != RECORD_BATCH_OVERHEAD:
                    raise KafkaStorageError(f"{win.file} ends at {position + len(data)}, inside a batch header")
                return read_header(data)

            walked = self._walk(win, md, fetch_offset, max_bytes, min_one_message, inline, header, None)
        finally:
            os.close(fd)
        if walked is None:
            return None
        if walked.first is None:
            return _SegmentRead(b"", fetch_offset, False, False)
        # fd -1: the socket server opens the file by path (an object file is never rewritten in place)
        records = FileRegion(-1, win.file, walked.first, walked.end - walked.first)
        return _SegmentRead(records, walked.next_offset, walked.end >= md.segment_size_in_bytes,
                            walked.transactional)

    def _walk(self, win: Window, md: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int,
              min_one_message: bool, inline: bool, header, whole, chunk_end=None) -> _Walk | None:
        """The whole batches to return from ``md``, reading headers with ``header(position, taken)`` and
        making each chosen batch available with ``whole(position, end, taken)`` (when given). None: the
        segment has nothing at or after ``fetch_offset``; ``first`` None: nothing fits. With
        ``chunk_end(position)`` (read-ahead memory) the answer ends within the chunk holding its first
        batch, or after that batch when it runs past the chunk: a view of one chunk is sent without a
        copy, while an answer across two was joined into new bytes (0.2-0.4 ms of CPU per MiB); the
        consumer's next fetch takes the rest."""
        size = md.segment_size_in_bytes
        from_index = False
        if fetch_offset == win.next_offset:
            position = win.next_position  # a sequential reader: no index lookup
        elif fetch_offset == win.last_offset:
            position = win.last_position  # the last answer asked again (its fetch timed out meanwhile)
        elif fetch_offset <= md.start_offset:
            position = 0
        elif inline:
            index = self.index_cache.loaded_offset_index(md)
            if index is None:
                raise _WouldBlock
            position, from_index = index.lookup(fetch_offset)[1], True
        else:
            position, from_index = self.index_cache.offset_index(md).lookup(fetch_offset)[1], True
        if from_index and 0 < position < size and header(position, 0).base_offset > fetch_offset:
            # The index pointed past the offset: distrust it (fetched again next time).
            log.warning("Offset index of remote segment %s of %s points past offset %d; reading the segment from "
                        "its start", uuid_to_str(md.segment_id.id), md.topic_id_partition, fetch_offset)
            self.index_cache.evict(md)
            position = 0
        walked = _Walk(None, position, fetch_offset, False)
        taken = 0
        limit = size  # where the answer must end (chunk_end)

        def header_at(at: int):
            # taken as it is when the walk reads the header; none read past the limit or once the answer
            # is full (it may be in a read-ahead still in flight: the answer would wait for it)
            full = walked.first is not None and taken >= max_bytes
            return header(at, taken) if at < limit and not full else None
        for at, h in walk_batches(header_at, position, size):
            if h.last_offset < fetch_offset:
                position = at + h.size
                continue
            if (walked.first is not None or not min_one_message) and taken + h.size > max_bytes:
                break  # whole batches only; the first one may exceed the limit with min_one_message
            if walked.first is not None and at + h.size > limit:
                break  # (the first batch reaching past the limit is whole: limit is at least its end)
            end = at + h.size
            if end > size:
                raise KafkaStorageError(f"batch at position {at} ends at {end}, past the segment's {size} bytes")
            if whole is not None:
                whole(at, end, taken)
            if walked.first is None:
                walked.first = at
                if chunk_end is not None:
                    limit = max(chunk_end(at), end)
            taken += h.size
            walked.next_offset = h.next_offset
            walked.transactional = walked.transactional or h.is_transactional
            position = end
        walked.end = position
        if walked.first is None:
            return None if position >= size else walked
        win.next_offset, win.next_position = walked.next_offset, position
        win.last_offset, win.last_position = fetch_offset, walked.first
        return walked

    def _ensure(self, win: Window, start: int, end: int, hint_end: int, inline: bool = False) -> None:
        """Make the window hold ``[start, end)``: from a read-ahead in flight when it continues the window,
        else with one ranged read of at least ``chunk_bytes`` (up to ``hint_end``, where the caller
        expects to stop). ``inline``: only with what is in memory already."""
        size = win.md.segment_size_in_bytes
        end = min(end, size)
        while not win.covers(start, end):
            if win.pending is not None:
                pos, fut, length = win.pending
                if inline and not fut.done():
                    raise _WouldBlock
                win.pending = None
                try:
                    data = fut.result()
                except Exception as e:  # noqa: BLE001 - read it again in the foreground, which reports it
                    # a failed read of the store all the same, though no reader sees it
                    self.metrics.fetch_errors.inc(topic=win.md.topic_id_partition.topic)
                    log.debug("Read-ahead of %s at %d failed: %s", win.md.segment_id, pos, e)
                    data = None
                self.read_ahead.account(win, -length)
                if data and pos == win.end and win.start <= start:
                    if win.chunks:  # taken on from the window's end: a sequential reader
                        self.read_ahead.took_read_ahead(win)
                    self.read_ahead.append(win, pos, data)
                continue
            if inline:
                raise _WouldBlock
            begin = win.end if win.start <= start <= win.end and win.chunks else start
            # A cold window reads less first (its first record sooner); its read-ahead starts alongside
            # (the round trips overlap) and is taken on once this range is in the window.
            cold = not win.chunks
            least = min(FIRST_CHUNK_BYTES, self.read_ahead.chunk_bytes) if cold else self.read_ahead.chunk_bytes
            stop = min(max(end, hint_end, begin + least), size)
            if cold and stop < size and win.pending is None:
                self.read_ahead.start_read_ahead(win, stop, self.read_ahead.step(win))
            data = self.rsm.fetch_log_segment_buffer(win.md, begin, stop - 1)
            if len(data) != stop - begin:
                raise KafkaStorageError(f"the object returned {len(data)} bytes from position {begin}, expected "
                                        f"{stop - begin} (it is shorter than its metadata says)")
            self.read_ahead.append(win, begin, data)

    def _read_ahead_after(self, tp: TopicIdPartition, lg, md: RemoteLogSegmentMetadata, got: _SegmentRead) -> None:
        """A window whose last bytes are fetched or in flight starts on the next segment (its first range
        overlaps the rest of this one); before that, a reader in ``md`` has the next segment's manifest
        fetched, so that first range does not wait a round trip for it. A file region needs no read-ahead
        (the page cache does it)."""
        if isinstance(got.records, FileRegion):
            return
        if got.end_of_segment or got.tail_fetched:
            self._read_ahead_next_segment(tp, lg, md)
        else:
            self._fetch_next_manifest(tp, lg, md)

    def _next_segment(self, tp: TopicIdPartition, lg, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The remote segment right after ``md``, if there is one (on the event loop: it asks the metadata
        manager)."""
        nxt = md.end_offset + 1
        if nxt >= lg.local_log_start_offset:
            return None
        try:
            md2 = self.rlmm.remote_log_segment_metadata(tp, lg.leader_epoch_cache.epoch_for_offset(nxt), nxt)
        except Exception:  # noqa: BLE001 - best effort; the read itself will report problems
            return None
        return md2 if md2 is not None and md2.start_offset == nxt else None

    def _fetch_next_manifest(self, tp: TopicIdPartition, lg, md: RemoteLogSegmentMetadata) -> None:
        """Once per window of ``md``: the storage manager loads the next segment's manifest (it keeps it) in
        the background; no request more than the later read would send."""
        win = self.read_ahead.window(tp, md)
        if win.next_manifest:
            return
        win.next_manifest = True
        md2 = self._next_segment(tp, lg, md)
        if md2 is None:
            return

        def load() -> None:
            try:
                self.rsm.log_segment_file(md2)
            except Exception as e:  # noqa: BLE001 - the read of that segment will report it
                log.debug("Manifest of %s ahead of the reader failed: %s", md2.segment_id, e)
        try:
            self.read_ahead.pool.submit(load)
        except RuntimeError:  # shut down
            pass

    def _read_ahead_next_segment(self, tp: TopicIdPartition, lg, md: RemoteLogSegmentMetadata) -> None:
        """A reader finished ``md``: start reading the next remote segment."""
        md2 = self._next_segment(tp, lg, md)
        if md2 is None:
            return
        win = self.read_ahead.window(tp, md2)
        if win.lock.acquire(blocking=False):
            try:
                if win.pending is None and not win.chunks:
                    win.start = win.end = 0
                    self.read_ahead.start_read_ahead(win, 0)
            finally:
                win.lock.release()
        # and the manifest of the one after: when the reader gets there, its first range is one GET
        self._fetch_next_manifest(tp, lg, md2)

    # ------------------------------------------------------------------- read_committed (pool)

    def _aborted_transactions(self, segments: list[RemoteLogSegmentMetadata], start: int,
                              upper: int) -> tuple[list[tuple[int, int]], bool]:
        """Kafka's collection over remote transaction indexes: from the segment read on, until an entry's
        last stable offset reaches ``upper``; and whether that happened (else the local log's indexes
        follow)."""
        found: list[tuple[int, int]] = []
        for md in segments:
            try:
                got, complete = self.index_cache.txn_index(md).collect(start, upper)
            except Exception as e:
                self._log_failure(md.topic_id_partition, md, start, e)
                raise
            found += got
            if complete:
                return found, True
        return found, False

    # ------------------------------------------------------------------------------ timestamps

    async def find_offset_by_timestamp(self, partition: TopicPartitionLog, timestamp: int) -> TimestampAndOffset | None:
        """The first offset whose record timestamp is at least ``timestamp``: remote segments first
        (finished, ``max_timestamp_ms >= timestamp``, ending at or after the log start, in the local
        lineage's order, not also held locally), then the local log."""
        self._reconfigure()
        tp = self.topic_id_partition(partition)
        lg = partition.log
        log_start, local_start = lg.log_start_offset, lg.local_log_start_offset
        entries = filtered_epochs(lg.leader_epoch_cache.entries)
        seen = set()
        start_epoch = lg.leader_epoch_cache.epoch_for_offset(log_start)
        for epoch, _ in entries:
            if epoch < start_epoch:
                continue
            for md in self.rlmm.list_remote_log_segments(tp, epoch):  # 9 while loading
                if md.segment_id in seen or md.state != FINISHED:
                    continue
                seen.add(md.segment_id)
                if md.max_timestamp_ms < timestamp or md.end_offset < log_start or md.start_offset >= local_start:
                    continue
                if not segment_within_leader_epochs(md, lg.log_end_offset, entries):
                    continue
                found = await self._submit(tp, self._search_segment, md, timestamp, log_start)
                if found is not None:
                    ts, offset = found
                    return TimestampAndOffset(ts, offset, lg.leader_epoch_cache.epoch_for_offset(offset))
        return lg.fetch_offset_by_timestamp(timestamp)

    def _search_segment(self, md: RemoteLogSegmentMetadata, timestamp: int, log_start: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record of ``md`` at or after ``log_start`` with a timestamp at
        least ``timestamp``: ranged reads forward from the time index's hint, one batch decoded."""
        try:
            # Entries are (max timestamp so far, its offset): every record up to an entry below the target
            # is older, so the answer lies after it.
            _, near = self.index_cache.time_index(md).lookup(timestamp - 1)
            start_offset = max(near, log_start, md.start_offset)
            position = self.index_cache.offset_index(md).lookup(start_offset)[1]
            size = md.segment_size_in_bytes
            want = SEARCH_BYTES
            while position < size:
                length = min(want, size - position)
                data = self.rsm.fetch_log_segment(md, position, position + length - 1)
                if len(data) != length:
                    raise KafkaStorageError(f"the object returned {len(data)} bytes from position {position}, "
                                            f"expected {length}")
                used = 0  # bytes of the whole batches in data
                for at, h in iter_batches(data):
                    if h.last_offset >= start_offset and h.max_timestamp >= timestamp:
                        if h.timestamp_type == 1:  # LogAppendTime: every record has the batch timestamp
                            return h.max_timestamp, max(h.base_offset, start_offset)
                        _, records = decode_batch(data, at)
                        for r in records:
                            if r.offset >= start_offset and r.timestamp >= timestamp:
                                return r.timestamp, r.offset
                    used = at + h.size
                if used == 0:  # one batch larger than the range: read it whole
                    if length == size - position:
                        raise KafkaStorageError(f"batch at position {position} runs past the segment end")
                    want = max(want * 2, read_header(data).size if length >= RECORD_BATCH_OVERHEAD else 0)
                    continue
                position += used
                want = min(want * 2, self.read_ahead.chunk_bytes)
            return None
        except Exception as e:
            self._log_failure(md.topic_id_partition, md, -1, e)
            raise KafkaStorageError(f"timestamp search in remote segment {uuid_to_str(md.segment_id.id)} "
                                    f"(offsets {md.start_offset}-{md.end_offset}) failed: {e}") from e

    # ---------------------------------------------------------------------------------- upkeep

    def _log_failure(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, offset: int, e: Exception) -> None:
        """WARNING naming the segment, repeated at most every FAILURE_LOG_INTERVAL_S per segment (consumers
        retry a failing read several times a second)."""
        now = time.monotonic()
        last = self._last_failure_log.get(md.segment_id)
        level = logging.WARNING if last is None or now - last >= FAILURE_LOG_INTERVAL_S else logging.DEBUG
        if level == logging.WARNING:
            self._last_failure_log[md.segment_id] = now
            if len(self._last_failure_log) > 10_000:
                self._last_failure_log.clear()
        log.log(level, "Remote read of %s-%d at offset %d from segment %s (offsets %d-%d) failed: %s", tp.topic,
                tp.partition, offset, uuid_to_str(md.segment_id.id), md.start_offset, md.end_offset, e)

    async def drain(self, tp: TopicIdPartition) -> None:
        """Wait for the reads of ``tp`` in flight and drop its windows (a delete disablement fences new
        reads first)."""
        flights = list(self._in_flight.get(tp, ()))
        if flights:
            await asyncio.wait(flights)
        self.read_ahead.evict_partition(tp)

    def evict(self, md: RemoteLogSegmentMetadata) -> None:
        """A segment was deleted: forget its indexes and bytes."""
        self.index_cache.evict(md)
        self.read_ahead.evict_segment(md)

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.read_ahead.close()
