"""The remote read path on real files: a tierlog Log rolled into segments, copied by the remote log
manager with the filesystem storage manager and the in-memory metadata manager, local segments
deleted by local retention, then read back through RemoteLogReader and its on-disk index cache."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.harness.waiting import wait_until
from tierlog.config import BrokerConfig
from tierlog.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
)
from tierlog.records import build_batch, iter_batches
from tierlog.server.partition import Partition
from tierlog.storage import FileRegion, Log, LogConfig
from tierlog.tiered import index_cache as index_cache_module
from tierlog.tiered import remote_reader as reader_module
from tierlog.tiered.index_cache import FOLDER, RemoteIndexCache, RemoteTransactionIndex
from tierlog.tiered.lineage import epochs_in_range
from tierlog.tiered.metadata import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.remote_reader import RemoteLogReader
from tierlog.tiered.rlmm.memory import InMemoryRemoteLogMetadataManager
from tierlog.tiered.rsm.filesystem import FileSystemRemoteStorageManager

T0 = 1_700_000_000_000
EPOCH_STARTS = {0: 0, 3: 150, 5: 300}  # leader epoch -> first offset
CODECS = ["none", "none", "lz4", "none", "zstd", "gzip", "snappy"]


def run(coro):
    return asyncio.run(coro)


def ts_of(offset: int) -> int:
    return T0 + 10 * offset


class CountingStorage(FileSystemRemoteStorageManager):
    """The filesystem storage manager, recording every ranged read (and the thread that made it) and
    every index fetch; ``block`` makes segment reads wait."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: list[tuple] = []
        self.index_fetches: list[tuple] = []
        self.block: threading.Event | None = None
        self._rec = threading.Lock()

    def fetch_log_segment(self, md, start_position, end_position=None):
        if self.block is not None:
            self.block.wait(10)
        data = super().fetch_log_segment(md, start_position, end_position)
        with self._rec:
            self.ranges.append((md.start_offset, start_position, end_position, threading.current_thread().name,
                                len(data)))
        return data

    def fetch_log_segment_buffer(self, md, start_position, end_position=None):
        return self.fetch_log_segment(md, start_position, end_position)  # the reader's reads, watched above

    #: False: every read goes through fetch_log_segment, where most tests here watch it; True: the
    #: broker's default for this backend, regions of the object files (sent with sendfile)
    files = False

    def log_segment_file(self, md):
        return super().log_segment_file(md) if self.files else None

    def fetch_index(self, md, index_type):
        with self._rec:
            self.index_fetches.append((md.start_offset, index_type))
        return super().fetch_index(md, index_type)


@dataclass
class Batch:
    base: int
    last: int
    data: bytes
    epoch: int
    transactional: bool = False


@dataclass
class Tiered:
    log: Log
    partition: Partition
    tp: TopicIdPartition
    rsm: CountingStorage
    rlmm: InMemoryRemoteLogMetadataManager
    rlm: RemoteLogManager
    batches: list[Batch]
    remote: list[RemoteLogSegmentMetadata]  # segments only in remote storage, by start offset
    segment_bytes: dict[int, bytes]  # start offset -> the segment's .log bytes as written locally
    log_dir: Path
    config: BrokerConfig

    def reader(self, **kw) -> RemoteLogReader:
        config = kw.pop("config", self.config)
        return RemoteLogReader(config, self.rsm, self.rlmm, self.rlm.metrics, str(self.log_dir), **kw)

    def first_batch_at(self, offset: int) -> Batch:
        return next(b for b in self.batches if b.last >= offset)

    @property
    def remote_offsets(self) -> range:
        return range(self.log.log_start_offset, self.log.local_log_start_offset)


def reader_config(**overrides) -> BrokerConfig:
    return BrokerConfig({"remote.log.storage.system.enable": "true", "rsm.config.dir": "/unused",
                         "remote.log.manager.task.interval.ms": "3600000",
                         **{k: str(v) for k, v in overrides.items()}})


def build(tmp: Path, *, topic: str = "t", records: int = 420, gap_after_segment: int | None = 1,
          local_from_segment: int = -2, seed: int = 11, transactions: bool = False,
          rlmm: InMemoryRemoteLogMetadataManager | None = None, rsm_config: dict | None = None) -> Tiered:
    """A log of ``records`` offsets in batches of 1-5 records (mixed codecs, three leader epochs, record
    timestamps ``ts_of(offset)``), 10 missing offsets after segment ``gap_after_segment`` (a gap at a
    segment end, as compaction leaves), every rolled segment copied, then local segments before
    ``local_from_segment`` deleted by local retention."""
    rnd = random.Random(seed)
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"{topic}-{seed}")
    cfg = LogConfig(segment_bytes=6000, index_interval_bytes=256, remote_storage_enable=True, retention_ms=-1,
                    local_retention_bytes=-1, file_delete_delay_ms=0)
    lg = Log.open(str(tmp / "logs" / f"{topic}-0"), topic, 0, cfg, topic_id=topic_id)
    batches: list[Batch] = []
    offset = 0
    gapped = aborted = False
    pid = 4000
    while offset < records:
        if gap_after_segment is not None and not gapped and len(lg.segments) == gap_after_segment + 1 \
                and lg.active_segment.size > 2000:  # one more batch (at most ~2.6 KB) could not roll it
            offset += 10
            lg.roll(base_offset=offset)
            gapped = True
        n = rnd.randint(1, 5)
        epoch = max(e for e, start in EPOCH_STARTS.items() if start <= offset)
        txn = transactions and 200 <= offset < 260
        recs = [(b"k%d" % (offset + i), rnd.randbytes(rnd.randint(20, 500)), [], ts_of(offset + i)) for i in range(n)]
        data = build_batch(recs, base_offset=offset, compression=CODECS[len(batches) % len(CODECS)],
                           partition_leader_epoch=epoch, producer_id=pid if txn else -1,
                           producer_epoch=0 if txn else -1, base_sequence=(offset - 200) if txn else -1,
                           is_transactional=txn)
        lg.append_as_follower(data)
        batches.append(Batch(offset, offset + n - 1, data, epoch, txn))
        offset += n
        if transactions and offset >= 260 and not aborted:
            # ABORT marker (control batch: key version 0 + type 0, value version 0 + coordinator epoch 0).
            marker = build_batch([(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 0), [], ts_of(offset))],
                                 base_offset=offset, partition_leader_epoch=epoch, producer_id=pid, producer_epoch=0,
                                 is_transactional=True, is_control=True)
            lg.append_as_follower(marker)
            batches.append(Batch(offset, offset, marker, epoch, True))
            offset += 1
            aborted = True
    assert gapped or gap_after_segment is None
    lg.roll()  # the last batches form a rolled segment too; the new active one stays empty
    lg.update_high_watermark(lg.log_end_offset)
    segment_bytes = {s.base_offset: Path(s.log_path).read_bytes() for s in lg.segments}
    keep = lg.segments[local_from_segment:]
    lg.config = replace(cfg, local_retention_bytes=sum(s.size for s in keep))

    rsm = CountingStorage()
    rsm.configure({"dir": str(tmp / "remote"), "fsync.enable": "false", **(rsm_config or {})})
    rlmm = rlmm or InMemoryRemoteLogMetadataManager()
    config = reader_config()
    rlm = build_remote_log_manager(config, 1, rsm, rlmm, str(tmp))
    partition = Partition(topic, 0, topic_id, lg, 5, leader_id=1)
    tp = TopicIdPartition(topic_id, topic, 0)

    async def tier():
        rlm.on_leadership_change([partition])
        rlm.cancel(tp)
        await rlm.run_copy(tp)
    run(tier())
    lg.delete_old_segments()
    assert lg.local_log_start_offset == keep[0].base_offset > 0 and lg.log_start_offset == 0
    # Segments only in remote storage (the last copied ones are still local too, and read there).
    remote = sorted((md for md in rlmm.list_remote_log_segments(tp)
                     if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                     and md.start_offset < lg.local_log_start_offset), key=lambda m: m.start_offset)
    return Tiered(lg, partition, tp, rsm, rlmm, rlm, batches, remote, segment_bytes, tmp / "logs", config)


@pytest.fixture
def tiered(tmp_path):
    t = build(tmp_path)
    yield t
    t.log.close()
    run(t.rlm.close())


@pytest.fixture(params=["window", "file"])
def tiered_any(request, tmp_path):
    """``tiered`` read both ways: through read-ahead windows, and as regions of the object files."""
    t = build(tmp_path)
    t.rsm.files = request.param == "file"
    yield t
    if t.rsm.files:
        assert not t.rsm.ranges, "file regions, not ranged reads"
    t.log.close()
    run(t.rlm.close())


def count_thread_hops(reader: RemoteLogReader) -> list[str]:
    """The names of the functions the reader sends to its pool from now on (the rest ran inline)."""
    submitted: list[str] = []
    real_submit = reader._submit

    async def counting_submit(*a):
        submitted.append(a[1].__name__)
        return await real_submit(*a)
    reader._submit = counting_submit
    return submitted


def batches_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


# --------------------------------------------------------------------------------------------- reads


def test_a_sequential_reader_gets_the_remote_history_byte_for_byte(tiered_any):
    t = tiered_any
    assert len(t.remote) >= 4 and len(t.log.segments) >= 2
    reader = t.reader(chunk_bytes=2048)
    remote_bytes = b"".join(t.segment_bytes[md.start_offset] for md in t.remote)
    got, offset = [], 0
    while offset < t.log.local_log_start_offset:
        data = run(reader.read(t.partition, offset, 3000, True))
        assert data, f"nothing at {offset}"
        spans = batches_of(data)
        assert sum(len(b.data) for b in t.batches if (b.base, b.last) in spans) == len(data), "whole batches"
        assert len(data) <= 3000 or len(spans) == 1
        want = t.first_batch_at(offset)
        assert spans[0] == (want.base, want.last)
        got.append(data)
        offset = spans[-1][1] + 1
    assert b"".join(got) == remote_bytes
    reader.close()


def test_read_now_answers_a_sequential_reader_at_once_and_defers_everything_else(tiered_any):
    """The Fetch handler's fast path: once a segment is open (window or file), the next sequential read
    is answered on the spot, the same bytes read_result gives; a cold read, read_committed, or an offset
    without remote data return None (the full path answers, errors included)."""
    t = tiered_any
    reader = t.reader()  # windows of 4 MiB: the first read brings the rest of the segment
    assert reader.read_now(t.partition, 0, 3000, True) is None  # cold: the segment is not open yet
    first = run(reader.read_result(t.partition, 0, 3000, True))
    now = reader.read_now(t.partition, first.next_offset, 3000, True)
    assert now is not None
    twin = t.reader()
    expected = run(twin.read_result(t.partition, first.next_offset, 3000, True))
    as_bytes = [r.read() if isinstance(r, FileRegion) else bytes(r) for r in (now.records, expected.records)]
    assert as_bytes[0] == as_bytes[1] and now.next_offset == expected.next_offset
    assert reader.read_now(t.partition, now.next_offset, 3000, True, isolation="committed") is None
    assert reader.read_now(t.partition, t.log.log_start_offset - 1, 3000, True) is None
    with pytest.raises(OffsetOutOfRangeError):
        run(reader.read_result(t.partition, t.log.log_start_offset - 1, 3000, True))
    reader.close()
    twin.close()


def test_every_offset_is_answered_from_the_batch_holding_it(tiered_any):
    t = tiered_any
    reader = t.reader()
    for offset in t.remote_offsets:
        data = run(reader.read(t.partition, offset, 1, True))  # one batch, whatever its size
        want = t.first_batch_at(offset)
        assert data == want.data, offset
    # Offsets in the gap after segment 1 (the segment has nothing at or after them) continue in segment 2.
    gap = [o for o in t.remote_offsets if not any(b.base <= o <= b.last for b in t.batches)]
    assert len(gap) == 10
    assert batches_of(run(reader.read(t.partition, gap[0], 1, True)))[0][0] == gap[-1] + 1
    reader.close()


def test_kafka_size_rules(tiered_any):
    t = tiered_any
    reader = t.reader()
    first = t.first_batch_at(0)
    assert len(first.data) > 1
    # The first batch does not fit: nothing without min_one_message, the whole batch with it.
    assert run(reader.read(t.partition, 0, len(first.data) - 1, False)) == b""
    assert run(reader.read(t.partition, 0, len(first.data) - 1, True)) == first.data
    # Whole batches up to the limit, never a partial one.
    two = t.batches[0].data + t.batches[1].data
    assert run(reader.read(t.partition, 0, len(two), False)) == two
    assert run(reader.read(t.partition, 0, len(two) + len(t.batches[2].data) - 1, True)) == two
    # An answer never crosses a segment end.
    md = t.remote[0]
    assert run(reader.read(t.partition, 0, 10**7, True)) == t.segment_bytes[md.start_offset]
    reader.close()


def test_only_the_needed_range_is_read(tiered):
    t = tiered
    reader = t.reader(chunk_bytes=1024)
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    middle = (md.start_offset + md.end_offset) // 2
    want = t.first_batch_at(middle)
    t.rsm.ranges.clear()
    assert run(reader.read(t.partition, middle, 1, True)) == want.data
    reader.close()
    reader.read_ahead.pool.shutdown(wait=True)  # the read-ahead begun with the first range has ended
    fetched = sum(r[4] for r in t.rsm.ranges if not r[3].startswith("remote-read-ahead"))
    assert all(r[2] is not None for r in t.rsm.ranges), "never an open-ended read of the object"
    assert fetched <= 1024 + 256 + len(want.data) < md.segment_size_in_bytes
    # and ahead of the reader at most one range, of less than two steps
    ahead = [r[4] for r in t.rsm.ranges if r[3].startswith("remote-read-ahead")]
    assert len(ahead) <= 1 and sum(ahead) <= 1024, ahead


def test_read_ahead_serves_a_sequential_reader_from_memory(tiered):
    t = tiered
    reader = t.reader(chunk_bytes=1500)
    offset = reads = 0
    t.rsm.ranges.clear()
    submitted = count_thread_hops(reader)
    while offset < t.log.local_log_start_offset:
        offset = batches_of(run(reader.read(t.partition, offset, 700, True)))[-1][1] + 1
        reads += 1
    # Reads whose bytes were in memory were answered on the event loop, without a thread hop.
    assert len(submitted) < reads / 2, (len(submitted), reads)
    total = sum(len(t.segment_bytes[md.start_offset]) for md in t.remote)
    fetched = sum(r[4] for r in t.rsm.ranges)
    by_read_ahead = sum(r[4] for r in t.rsm.ranges if r[3].startswith("remote-read-ahead"))
    assert fetched == total, "every byte fetched exactly once"
    assert by_read_ahead > total * 0.6, (by_read_ahead, total)
    # The first range of every segment after the first was fetched ahead, when the previous one ended.
    starts = {r[0]: r[3] for r in t.rsm.ranges if r[1] == 0}
    assert all(starts[md.start_offset].startswith("remote-read-ahead") for md in t.remote[1:])
    assert t.rsm.index_fetches == [], "a reader from the segment start needs no offset index"
    assert 0 < reader.read_ahead_bytes <= reader.read_ahead_budget
    reader.close()


def test_read_ahead_steps_grow_while_a_reader_goes_on(tiered):
    """Each read-ahead a sequential reader takes on makes the next one twice as long (fewer round trips to
    a distant store); none is longer than the step limit, and every byte is still fetched once."""
    t = tiered
    reader = t.reader(chunk_bytes=256)
    t.rsm.ranges.clear()
    offset = 0
    while offset < t.log.local_log_start_offset:
        offset = batches_of(run(reader.read(t.partition, offset, 200, True)))[-1][1] + 1
    total = sum(len(t.segment_bytes[md.start_offset]) for md in t.remote)
    assert sum(r[4] for r in t.rsm.ranges) == total, "every byte fetched exactly once"
    grown = 0
    for md in t.remote:
        ahead = sorted((r[1], r[4]) for r in t.rsm.ranges
                       if r[0] == md.start_offset and r[3].startswith("remote-read-ahead"))
        lengths = [n for _, n in ahead[:-1]]  # the last one is cut at the segment's end
        assert lengths == sorted(lengths), (md.start_offset, ahead)
        assert all(n in (256, 512) or n == 2 * m for m, n in zip(lengths, lengths[1:])), (md.start_offset, ahead)
        grown = max(grown, *(n for _, n in ahead))
    assert grown >= 4 * 256
    assert all(r[4] <= reader.read_ahead.max_step_bytes for r in t.rsm.ranges)
    reader.close()


def test_answers_from_memory_are_views_of_one_chunk(tiered):
    """An answer from read-ahead memory ends within the chunk (one ranged read) holding its first batch, so it
    is sent as a view of that chunk, never joined into new bytes; only a batch that itself runs past a
    chunk's end is copied, alone. A reader taking large answers still gets every byte, in order."""
    t = tiered
    reader = t.reader(chunk_bytes=2048)
    remote_bytes = b"".join(t.segment_bytes[md.start_offset] for md in t.remote)
    got, offset, views, several = [], 0, 0, 0
    while offset < t.log.local_log_start_offset:
        res = run(reader.read_result(t.partition, offset, 6000, True))
        data = bytes(res.records)
        assert data, f"nothing at {offset}"
        spans = batches_of(data)
        if isinstance(res.records, memoryview):
            views += 1
            several += len(spans) > 1
        else:
            assert len(spans) == 1, f"{len(spans)} batches at {offset} copied into new bytes"
        got.append(data)
        offset = res.next_offset
    assert b"".join(got) == remote_bytes
    assert views > len(got) / 2 and several > 0, (views, several, len(got))
    reader.close()


def test_an_answer_in_memory_does_not_wait_for_the_read_ahead_beyond_it(tiered):
    """A consumer asking more than the window holds is answered at once with what is in memory, up to the
    end of a chunk, while the next range is still being read (the store is held here): it does not wait
    for that range, nor read a header from it."""
    t = tiered
    reader = t.reader(chunk_bytes=2048)  # ranges of 2048, 2048, then 4096 bytes
    tp = reader.topic_id_partition(t.partition)
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    assert md.segment_size_in_bytes > 4096
    got = run(reader.read_result(t.partition, md.start_offset, 100, True))
    win = reader.read_ahead._windows[(tp, md.segment_id)]
    wait_until(lambda: win.pending is not None and win.pending[1].done(), timeout=10, what="the read-ahead")
    t.rsm.block = threading.Event()  # the next read-ahead waits until released
    try:
        now = reader.read_now(t.partition, got.next_offset, 10**6, True)
        assert now is not None and len(now.records), "answered from memory, on the spot"
        assert win.next_position <= win.end
        assert win.pending is not None and not win.pending[1].done(), "the next range is still in flight"
    finally:
        t.rsm.block.set()
    reader.close()


def test_the_next_segment_is_read_ahead_once_the_current_one_is_all_fetched(tiered):
    """When the window holds (or is fetching) a segment's last bytes, the next segment's first range starts
    at once, while the reader is still in the middle of the current one: a new segment costs no round trip
    of its own."""
    t = tiered
    reader = t.reader()  # 4 MiB: the first read fetches the whole (small) segment
    md, nxt = t.remote[0], t.remote[1]
    tp = reader.topic_id_partition(t.partition)
    got = run(reader.read_result(t.partition, 0, 100, True))
    assert got.next_offset < md.end_offset, "the reader is still inside the first segment"
    win = reader.read_ahead._windows.get((tp, nxt.segment_id))
    assert win is not None and (win.pending is not None or win.chunks)
    reader.close()


def test_a_cold_segment_reads_a_short_first_range(tiered, monkeypatch):
    """The first read of a cold window is FIRST_CHUNK_BYTES (unless the reader asks more), not a whole
    chunk: the first record comes sooner; the read-ahead follows."""
    import tierlog.tiered.remote_reader as remote_reader
    monkeypatch.setattr(remote_reader, "FIRST_CHUNK_BYTES", 300)
    t = tiered
    reader = t.reader(chunk_bytes=4096)
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    assert md.segment_size_in_bytes > 4096
    t.rsm.ranges.clear()
    first = t.first_batch_at(md.start_offset)
    assert run(reader.read(t.partition, md.start_offset, 1, True)) == first.data
    foreground = [r for r in t.rsm.ranges if not r[3].startswith("remote-read-ahead")]
    assert foreground[0][1] == 0 and foreground[0][4] == 300, foreground
    reader.close()


def test_a_cold_window_fetches_its_first_range_and_its_read_ahead_at_once(tiered):
    """A cold segment's short first range and the read-ahead after it are both in flight at the same time:
    a distant store's two round trips overlap instead of following each other."""
    t = tiered
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    assert md.segment_size_in_bytes > 3 * 512
    gate = threading.Event()
    waiting: list[tuple[int, str]] = []
    plain = t.rsm.fetch_log_segment

    def held(m, start, end=None):
        waiting.append((start, threading.current_thread().name))
        gate.wait(10)
        return plain(m, start, end)
    t.rsm.fetch_log_segment = held  # before the reader binds it
    reader = t.reader(chunk_bytes=512)
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(run, reader.read(t.partition, md.start_offset, 100, True))
        try:
            wait_until(lambda: len(waiting) >= 2, timeout=10, what="two ranges in flight")
        finally:
            gate.set()
        assert got.result(10) == t.first_batch_at(md.start_offset).data
    first, ahead = sorted(waiting)[:2]
    assert first[0] == 0 and not first[1].startswith("remote-read-ahead")
    assert ahead[0] > 0 and ahead[1].startswith("remote-read-ahead")
    reader.close()


@pytest.mark.parametrize("compressed", [False, True])
def test_plain_object_files_are_answered_as_regions_for_sendfile(tmp_path, compressed):
    """The filesystem backend's plain objects are sent like local segments (a region of the file, no
    copy through Python); a compressed object has no such file and goes through the windows."""
    t = build(tmp_path, rsm_config={"compression.enable": "true"} if compressed else None)
    t.rsm.files = True
    reader = t.reader()
    submitted = count_thread_hops(reader)
    offset = reads = 0
    got = []
    while offset < t.log.local_log_start_offset:
        result = run(reader.read_result(t.partition, offset, 2000, True))
        assert isinstance(result.records, FileRegion) != compressed
        data = result.records.read() if isinstance(result.records, FileRegion) else bytes(result.records)
        assert batches_of(data)[0][0] <= offset <= batches_of(data)[-1][1] or offset not in {
            o for b in t.batches for o in range(b.base, b.last + 1)}
        got.append(data)
        offset = result.next_offset
        reads += 1
    assert b"".join(got) == b"".join(t.segment_bytes[md.start_offset] for md in t.remote)
    if not compressed:
        assert not t.rsm.ranges
        # one thread hop per segment (asking the backend for its file); the rest on the event loop
        assert len(submitted) == len(t.remote) < reads / 2, (len(submitted), reads)
        assert reader.read_ahead_bytes == 0, "the page cache reads ahead, not the broker"
    else:
        assert t.rsm.ranges
    reader.close()
    t.log.close()
    run(t.rlm.close())


def test_read_ahead_memory_stays_within_its_budget(tmp_path):
    shared = InMemoryRemoteLogMetadataManager()
    parts = [build(tmp_path, topic=f"t{i}", seed=i, rlmm=shared) for i in range(3)]
    try:
        reader = parts[0].reader(chunk_bytes=1000, read_ahead_budget=3500)
        offsets = [0, 0, 0]
        for _ in range(12):  # three sequential readers, interleaved
            for i, t in enumerate(parts):
                data = run(reader.read(t.partition, offsets[i], 600, True))
                assert data == b"".join(b.data for b in t.batches if (b.base, b.last) in batches_of(data))
                offsets[i] = batches_of(data)[-1][1] + 1
                assert reader.read_ahead_bytes <= 3500 + 600 + 1000  # the window in use may exceed alone
        reader.close()
    finally:
        for t in parts:
            t.log.close()
            run(t.rlm.close())


def test_a_trimmed_answer_is_served_again_from_memory(tiered):
    t = tiered
    reader = t.reader(chunk_bytes=4096)
    data = run(reader.read(t.partition, 0, 3000, True))
    spans = batches_of(data)
    assert len(spans) >= 3
    t.rsm.ranges.clear()
    # The fetch handler sent only the first batch; the consumer asks for the second.
    again = run(reader.read(t.partition, spans[1][0], 3000, True))
    assert batches_of(again)[0] == spans[1]
    assert [r for r in t.rsm.ranges if not r[3].startswith("remote-read-ahead")] == []
    reader.close()


def test_an_answer_asked_again_is_found_without_the_offset_index(tiered):
    """A consumer whose fetch was answered empty (remote.fetch.max.wait.ms passed while the read ran) asks
    the same offset again: the window knows where that answer began, so no offset index is fetched."""
    t = tiered
    reader = t.reader()
    md = t.remote[0]
    first = run(reader.read_result(t.partition, 0, 300, True))
    second = run(reader.read_result(t.partition, first.next_offset, 300, True))
    assert md.start_offset < first.next_offset < second.next_offset <= md.end_offset
    again = run(reader.read_result(t.partition, first.next_offset, 300, True))
    assert bytes(again.records) == bytes(second.records) and again.next_offset == second.next_offset
    assert t.rsm.index_fetches == []
    reader.close()


def test_a_gap_at_the_end_of_the_last_remote_segment_continues_in_the_local_log(tmp_path):
    t = build(tmp_path, gap_after_segment=2, local_from_segment=3)
    try:
        reader = t.reader()
        gap_start = t.remote[-1].end_offset - 9
        assert not any(b.base <= gap_start <= b.last for b in t.batches)
        data = run(reader.read(t.partition, gap_start, 1, True))
        assert batches_of(data)[0][0] == t.log.local_log_start_offset
        assert data == t.first_batch_at(t.log.local_log_start_offset).data
        reader.close()
    finally:
        t.log.close()
        run(t.rlm.close())


def test_read_committed_returns_aborted_transactions_from_remote_transaction_indexes(tmp_path):
    t = build(tmp_path, transactions=True, gap_after_segment=None, local_from_segment=-1)
    try:
        txn = [b for b in t.batches if b.transactional]
        first, marker = txn[0], txn[-1]
        assert marker.base < t.log.local_log_start_offset, "the whole transaction is remote"
        # The log wrote the abort in its segment's .txnindex, and the copy uploaded it with the segment.
        reader = t.reader()
        got = run(reader.read_result(t.partition, first.base, 1, True, isolation="committed"))
        assert got.aborted_transactions == [(4000, first.base)]
        # A read of the whole transaction and its marker reports it once.
        got = run(reader.read_result(t.partition, first.base, 10**6, True, isolation="committed"))
        assert got.aborted_transactions == [(4000, first.base)]
        # read_uncommitted does not ask.
        assert run(reader.read_result(t.partition, first.base, 10**6, True)).aborted_transactions is None
        reader.close()
    finally:
        t.log.close()
        run(t.rlm.close())


def test_transaction_index_collection_rules():
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TopicIdPartition(uuid.uuid4(), "x", 0)), 0, 999, 0, 1,
                                  0, 100, {0: 0})
    entries = [(0, 1, 10, 20, 10), (0, 2, 30, 40, 25), (0, 3, 50, 60, 70)]
    idx = RemoteTransactionIndex(b"".join(struct.pack(">hqqqq", *e) for e in entries), md)
    # Complete once an entry's last stable offset reaches the upper bound (later segments need no search).
    assert idx.collect(0, 15) == ([(1, 10)], True)
    assert idx.collect(21, 45) == ([(2, 30)], True)
    assert idx.collect(35, 65) == ([(2, 30), (3, 50)], True)
    assert idx.collect(0, 100) == ([(1, 10), (2, 30), (3, 50)], False)  # go on in the next segment


# -------------------------------------------------------------------------------------------- errors


def test_offsets_without_remote_data_are_out_of_range(tiered_any):
    t = tiered_any
    reader = t.reader()
    t.log.increment_log_start_offset_from_remote(t.remote[1].start_offset)
    with pytest.raises(OffsetOutOfRangeError):
        run(reader.read(t.partition, t.remote[1].start_offset - 1, 100, True))
    # A segment whose metadata is gone (deleted by retention meanwhile).
    md = t.remote[1]
    run(t.rlmm.update_remote_log_segment_metadata(_update(md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)))
    with pytest.raises(OffsetOutOfRangeError) as e:
        run(reader.read(t.partition, md.start_offset, 100, True))
    assert e.value.code == 1
    reader.close()


def _update(md, state):
    from tierlog.tiered.metadata import RemoteLogSegmentMetadataUpdate
    return RemoteLogSegmentMetadataUpdate(md.segment_id, int(time.time() * 1000), None, state, 1)


def test_metadata_still_loading_is_replica_not_available(tiered):
    t = tiered
    loading = InMemoryRemoteLogMetadataManager()
    loading.store.maybe_load_partition(t.tp)  # followed, not yet initialized
    reader = RemoteLogReader(t.config, t.rsm, loading, t.rlm.metrics, str(t.log_dir))
    with pytest.raises(ReplicaNotAvailableError) as e:
        run(reader.read(t.partition, 0, 100, True))
    assert e.value.code == 9 and e.value.retriable
    with pytest.raises(ReplicaNotAvailableError):
        run(reader.find_offset_by_timestamp(t.partition, ts_of(5)))
    reader.close()


def test_a_missing_object_is_a_storage_error_naming_the_segment(tiered_any, caplog):
    t = tiered_any
    reader = t.reader()
    md = t.remote[2]
    obj = next(p for p in (t.log_dir.parent / "remote").rglob("*.log") if p.name.startswith(f"{md.start_offset:020d}"))
    hidden = obj.with_suffix(".hidden")
    obj.rename(hidden)
    errors_before = t.rlm.metrics.fetch_errors.value(topic=t.tp.topic)
    with caplog.at_level(logging.WARNING, logger="tierlog.tiered.remote_reader"):
        with pytest.raises(KafkaStorageError) as e:
            run(reader.read(t.partition, md.start_offset + 1, 100, True))
        with pytest.raises(KafkaStorageError):
            run(reader.read(t.partition, md.start_offset + 1, 100, True))
    from tierlog.kafka_uuid import uuid_to_str
    seg = uuid_to_str(md.segment_id.id)
    assert e.value.code == 56 and e.value.retriable and seg in str(e.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and seg in r.getMessage()]
    assert len(warnings) == 1, "logged once, not once per retry"
    assert t.rlm.metrics.fetch_errors.value(topic=t.tp.topic) == errors_before + 2
    hidden.rename(obj)
    assert run(reader.read(t.partition, md.start_offset + 1, 1, True)) == t.first_batch_at(md.start_offset + 1).data
    reader.close()


def test_a_corrupt_object_is_a_storage_error(tiered_any):
    t = tiered_any
    reader = t.reader()
    md = t.remote[0]
    obj = next(p for p in (t.log_dir.parent / "remote").rglob("*.log") if p.name.startswith(f"{md.start_offset:020d}"))
    obj.write_bytes(b"\xff" * obj.stat().st_size)
    with pytest.raises(KafkaStorageError) as e:
        run(reader.read(t.partition, 0, 100, True))
    assert e.value.code == 56
    reader.close()


def test_a_full_reader_queue_refuses_with_a_retriable_storage_error(tiered):
    t = tiered
    reader = t.reader(config=reader_config(**{"remote.log.reader.threads": 1,
                                              "remote.log.reader.max.pending.tasks": 1}))
    t.rsm.block = threading.Event()

    async def go():
        running = [asyncio.ensure_future(reader.read(t.partition, 0, 1, True)) for _ in range(2)]
        await asyncio.sleep(0.1)
        with pytest.raises(KafkaStorageError) as e:
            await reader.read(t.partition, 0, 1, True)
        assert e.value.code == 56 and e.value.retriable and "max.pending.tasks" in str(e.value)
        t.rsm.block.set()
        return await asyncio.gather(*running)
    first, second = run(go())
    assert first == second == t.batches[0].data
    reader.close()


def test_metrics_count_requests_bytes_and_errors(tiered):
    t = tiered
    m = t.rlm.metrics
    reader = t.reader()
    before = (m.fetch_requests.value(topic="t"), m.fetch_bytes.value(topic="t"), m.fetch_errors.value(topic="t"))
    data = run(reader.read(t.partition, 0, 5000, True))
    with pytest.raises(OffsetOutOfRangeError):
        run(reader.read(t.partition, -1, 5000, True))
    after = (m.fetch_requests.value(topic="t"), m.fetch_bytes.value(topic="t"), m.fetch_errors.value(topic="t"))
    assert after == (before[0] + 2, before[1] + len(data), before[2])  # out of range is not a failure (Kafka)
    reader.close()


# ---------------------------------------------------------------------------------------- timestamps


def test_find_offset_by_timestamp_searches_remote_then_local(tiered, monkeypatch):
    t = tiered
    reader = t.reader()
    decoded = []
    real_decode = reader_module.decode_batch
    monkeypatch.setattr(reader_module, "decode_batch", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    present = [o for o in range(t.log.log_end_offset) if any(b.base <= o <= b.last for b in t.batches)]
    local_start = t.log.local_log_start_offset
    probes = [0, 1, 7, 99, t.remote[1].start_offset, local_start - 1, local_start, present[-1]]
    probes += random.Random(3).sample(present, 25)
    for o in probes:
        decoded.clear()
        found = run(reader.find_offset_by_timestamp(t.partition, ts_of(o)))
        assert (found.offset, found.timestamp) == (o, ts_of(o)), o
        assert found.leader_epoch == t.first_batch_at(o).epoch
        assert len(decoded) <= 1 if o < local_start else not decoded, "one batch decoded, and only remotely"
        found = run(reader.find_offset_by_timestamp(t.partition, ts_of(o) - 5))  # between two records
        assert found.offset == max(p for p in present if p <= o)
    # In the gap: the first record after it.
    gap = [o for o in t.remote_offsets if o not in present]
    assert run(reader.find_offset_by_timestamp(t.partition, ts_of(gap[3]))).offset == gap[-1] + 1
    assert run(reader.find_offset_by_timestamp(t.partition, 0)).offset == 0
    assert run(reader.find_offset_by_timestamp(t.partition, ts_of(present[-1]) + 1)) is None
    # Below a raised log start: the first record at or after it.
    t.log.increment_log_start_offset_from_remote(120)
    found = run(reader.find_offset_by_timestamp(t.partition, ts_of(3)))
    assert found.offset == min(p for p in present if p >= 120)
    reader.close()


def test_timestamp_search_reads_small_ranges(tiered, monkeypatch):
    t = tiered
    monkeypatch.setattr(reader_module, "SEARCH_BYTES", 300)
    reader = t.reader(chunk_bytes=600)
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    target = md.end_offset - 3 if any(b.base <= md.end_offset - 3 <= b.last for b in t.batches) else md.start_offset
    t.rsm.ranges.clear()
    found = run(reader.find_offset_by_timestamp(t.partition, ts_of(target)))
    assert found.offset == target
    assert all(r[2] is not None and r[2] - r[1] + 1 <= max(600, max(len(b.data) for b in t.batches) * 2)
               for r in t.rsm.ranges)
    reader.close()


# --------------------------------------------------------------------------------------- index cache


def test_indexes_are_fetched_once_and_survive_a_restart(tiered):
    t = tiered
    reader = t.reader()
    sample = [md.start_offset + 1 for md in t.remote] + list(t.remote_offsets)[3::7]
    for o in sample:
        run(reader.read(t.partition, o, 1, True))
    offset_fetches = [f for f in t.rsm.index_fetches if f[1] == IndexType.OFFSET]
    assert len(offset_fetches) == len({f[0] for f in offset_fetches}) == len(t.remote)
    names = sorted(os.listdir(t.log_dir / FOLDER))
    assert len(names) == len(t.remote) and all(n.endswith(".index") for n in names)
    reader.close()
    # A restart: the folder is reloaded, nothing is fetched again.
    t.rsm.index_fetches.clear()
    again = t.reader()
    for o in sample:
        assert run(again.read(t.partition, o, 1, True)) == t.first_batch_at(o).data
    assert t.rsm.index_fetches == []
    assert again.index_cache.misses == 0 and again.index_cache.hits >= len(t.remote)
    again.close()


def test_corrupt_cached_indexes_are_dropped_and_fetched_again(tiered, caplog):
    t = tiered
    reader = t.reader()
    for md in t.remote:
        run(reader.read(t.partition, md.start_offset + 2, 1, True))
    reader.close()
    folder = t.log_dir / FOLDER
    files = sorted(folder.iterdir())
    files[0].write_bytes(files[0].read_bytes()[:-3])  # torn
    files[1].write_bytes(struct.pack(">ii", 0, 100) + struct.pack(">ii", 1, 10**8))  # a position past the segment
    files[2].write_bytes(struct.pack(">ii", 3, 100) + struct.pack(">ii", 2, 200))  # out of order
    (folder / "leftover.index.tmp").write_bytes(b"x")
    t.rsm.index_fetches.clear()
    with caplog.at_level(logging.WARNING, logger="tierlog.tiered.index_cache"):
        again = t.reader()
        assert not (folder / "leftover.index.tmp").exists()
        for md in t.remote:
            o = md.start_offset + 2
            assert run(again.read(t.partition, o, 1, True)) == t.first_batch_at(o).data
    assert len(t.rsm.index_fetches) == 3
    assert sum("Dropping the cached" in r.getMessage() for r in caplog.records) == 3
    again.close()


def test_an_index_pointing_past_the_offset_is_distrusted(tiered_any):
    t = tiered_any
    reader = t.reader()
    md = max(t.remote, key=lambda m: m.segment_size_in_bytes)
    o = md.end_offset - 1 if any(b.base <= md.end_offset - 1 <= b.last for b in t.batches) else md.start_offset + 1
    run(reader.read(t.partition, md.start_offset + 1, 1, True))
    reader.close()
    # A plausible but wrong index: every entry maps to the last batch's position.
    path = t.log_dir / FOLDER / RemoteIndexCache.file_name(md, IndexType.OFFSET)
    last_pos = max(p for p, _ in iter_batches(t.segment_bytes[md.start_offset]))
    path.write_bytes(struct.pack(">ii", 0, last_pos))
    again = t.reader()
    assert run(again.read(t.partition, md.start_offset + 1, 1, True)) == t.first_batch_at(md.start_offset + 1).data
    assert run(again.read(t.partition, o, 1, True)) == t.first_batch_at(o).data
    again.close()


def test_index_cache_is_lru_bounded_and_resizable(tiered):
    t = tiered
    sizes = [len(t.rsm.fetch_index(md, IndexType.OFFSET)) for md in t.remote]
    budget = sizes[0] + sizes[1] + sizes[2]
    reader = t.reader(config=reader_config(**{"remote.log.index.file.cache.total.size.bytes": budget}))
    for md in t.remote:
        run(reader.read(t.partition, md.start_offset + 1, 1, True))
    cache = reader.index_cache
    assert cache.size_bytes <= budget
    kept = [n[:20] for n in cache.names]
    assert kept[-1] == f"{t.remote[-1].start_offset:020d}", "the most recently used stays"
    assert f"{t.remote[0].start_offset:020d}" not in kept, "the least recently used went first"
    on_disk = sorted(os.listdir(t.log_dir / FOLDER))
    assert sorted(cache.names) == on_disk
    cache.resize(1)
    assert cache.size_bytes == 0 and cache.names == [] and os.listdir(t.log_dir / FOLDER) == []
    reader.close()


def test_dynamic_reader_settings_apply_on_the_next_read(tiered):
    t = tiered
    current = {"cfg": reader_config()}
    reader = t.reader(config=lambda: current["cfg"])
    run(reader.read(t.partition, 0, 100, True))
    pool = reader.pool
    current["cfg"] = reader_config(**{"remote.log.reader.threads": 3,
                                      "remote.log.index.file.cache.total.size.bytes": 1})
    run(reader.read(t.partition, t.remote[1].start_offset + 1, 100, True))
    assert reader.threads == 3 and reader.pool is not pool and reader.pool._max_workers == 3
    # Shrunk before the read: only the index that read needed is left (the one in use stays).
    assert reader.index_cache.max_bytes == 1 and len(reader.index_cache.names) == 1
    reader.close()


def test_deleting_a_segment_evicts_its_indexes_and_bytes(tiered):
    t = tiered
    reader = t.reader()
    md = t.remote[1]
    run(reader.read(t.partition, md.start_offset + 1, 100, True))
    names = [RemoteIndexCache.file_name(md, IndexType.OFFSET)]
    assert all((t.log_dir / FOLDER / n).exists() for n in names)
    assert reader.read_ahead_bytes > 0
    # The whole (small) segment was read, so the next one's read-ahead has started: it stays.
    others = sum(w.held for k, w in reader.read_ahead._windows.items() if k[1] != md.segment_id)
    reader.evict(md)
    assert not any((t.log_dir / FOLDER / n).exists() for n in names)
    assert reader.read_ahead_bytes == others
    assert all(k[1] != md.segment_id for k in reader.read_ahead._windows)
    reader.close()


def test_index_cache_downloads_once_under_concurrency(tiered):
    t = tiered
    fetches = []
    gate = threading.Event()

    def slow_fetch(md, index_type):
        fetches.append(md.start_offset)
        gate.wait(5)
        return t.rsm.fetch_index(md, index_type)
    cache = RemoteIndexCache(str(t.log_dir / "concurrent"), 10**9, slow_fetch)
    results = []

    def get(md):
        results.append(cache.offset_index(md).lookup(md.start_offset + 1))
    threads = [threading.Thread(target=get, args=(t.remote[i % 2],)) for i in range(10)]
    for th in threads:
        th.start()
    time.sleep(0.2)
    gate.set()
    for th in threads:
        th.join(10)
    assert sorted(fetches) == sorted(md.start_offset for md in t.remote[:2])
    assert len(results) == 10


def test_a_missing_transaction_index_is_cached_as_empty(tiered):
    t = tiered
    cache = RemoteIndexCache(str(t.log_dir / "txn"), 10**9, t.rsm.fetch_index)
    assert len(cache.txn_index(t.remote[0])) == 0
    assert len(cache.txn_index(t.remote[0])) == 0
    assert [f for f in t.rsm.index_fetches if f[1] == IndexType.TRANSACTION] == [(t.remote[0].start_offset,
                                                                                   IndexType.TRANSACTION)]
    assert index_cache_module.SUFFIXES[IndexType.TRANSACTION] in "".join(cache.names)


def test_epochs_of_the_fixture_match_the_segments(tiered):
    """The fixture's remote segments carry the leader epochs of their offsets (what lookups rely on)."""
    t = tiered
    for md in t.remote:
        assert md.segment_leader_epochs == epochs_in_range(t.log.leader_epoch_cache.entries, md.start_offset,
                                                           md.end_offset + 1)
