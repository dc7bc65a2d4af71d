"""Storage faults as Kafka handles them (issue 16): an I/O error takes its log dir offline, a partial write is cut
off and never followed by more appends, a clean stop that cannot write leaves an unclean (never a damaged) log,
and recovery never removes a batch whose CRC is intact. Errors are injected into the real files' system calls
(a partial write followed by ENOSPC, as a full tmpfs answers); tests/faults runs the same on a real full disk."""

from __future__ import annotations

import errno
import logging
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import logcapture
from tierlog.errors import KafkaStorageError
from tierlog.metrics import MetricsRegistry
from tierlog.records import iter_batches
from tierlog.storage import Log, LogConfig, LogManager
from tierlog.storage import index as index_module
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN_FILE, OffsetCheckpointFile
from tierlog.storage.manager import LOG_DIRECTORY_OFFLINE, OFFLINE_LOG_DIRECTORY_COUNT, LogDirReplica
from tierlog.storage.producer_state import ProducerStateManager
from tierlog.storage.segment import UnrecoverableSegmentError

from .storagelib import batch, crash

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def disk_full_after(monkeypatch, fd: int, allowed: int, *, cut_fails: bool = False) -> list:
    """Make writes to ``fd`` behave as on a full tmpfs: the first writev stores only ``allowed`` bytes and
    returns short, the next raises ENOSPC. With ``cut_fails`` ftruncate of ``fd`` fails too. Returns the list
    of writev calls made to ``fd``."""
    real_writev, real_ftruncate = os.writev, os.ftruncate
    calls = []

    def writev(target, buffers):
        if target != fd:
            return real_writev(target, buffers)
        calls.append(sum(len(b) for b in buffers))
        if len(calls) > 1:
            raise ENOSPC
        data = b"".join(bytes(b) for b in buffers)[:allowed]
        return os.write(target, data)

    def ftruncate(target, length):
        if cut_fails and target == fd:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_ftruncate(target, length)
    monkeypatch.setattr(os, "writev", writev)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    return calls


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def file_batches(path: str) -> list[tuple[int, int]]:
    """(base offset, size) of each complete batch of a .log file; asserts nothing trails the last one."""
    with open(path, "rb") as f:
        data = f.read()
    out = []
    end = 0
    for pos, h in iter_batches(data):
        out.append((h.base_offset, h.size))
        end = pos + h.size
    assert end == len(data), f"{len(data) - end} bytes trail the last batch of {path}"
    return out


@pytest.fixture
def two_dirs(tmp_path):
    """A log manager over two log dirs with metrics: partition a-0 lives in the first, b-0 in the second."""
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    metrics = MetricsRegistry()
    managers = []

    def start():
        m = LogManager(dirs, metrics=metrics)
        m.startup()
        managers.append(m)
        return m
    m = start()
    a = m.get_or_create_log("a", 0)
    b = m.get_or_create_log("b", 0)
    assert (a.parent_dir, b.parent_dir) == tuple(dirs)
    for lg in (a, b):
        for _ in range(3):
            lg.append_as_leader(batch(2))
    yield m, a, b, metrics, start
    for mgr in managers:
        if mgr.started:
            mgr.shutdown()


def test_a_partial_append_is_cut_off_and_takes_its_log_dir_offline(two_dirs, monkeypatch, caplog):
    m, a, b, metrics, start = two_dirs
    seg = a.active_segment
    size = seg.size
    calls = disk_full_after(monkeypatch, seg.fd, allowed=30)
    with caplog.at_level(logging.WARNING), pytest.raises(KafkaStorageError, match="No space left on device") as e:
        a.append_as_leader(batch(5, size=200))
    assert e.value.code == 56
    # The partial bytes were cut off: the file ends at its last complete batch, as the segment says.
    assert os.path.getsize(seg.log_path) == size == seg.size and seg.is_intact()
    assert a.log_end_offset == 6 and a.offline
    # Nothing more is appended (no write reaches the file) or read; the other dir keeps serving.
    with pytest.raises(KafkaStorageError, match="offline"):
        a.append_as_leader(batch(1))
    assert len(calls) == 2
    a.update_high_watermark(a.log_end_offset)
    with pytest.raises(KafkaStorageError):
        a.read(0, 1 << 20)
    assert b.append_as_leader(batch(1)).first_offset == 6
    b.update_high_watermark(b.log_end_offset)
    assert b.read(0, 1 << 20).size > 0
    monkeypatch.undo()
    errors = [r for r in logcapture.records(caplog) if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert a.parent_dir in errors[0].getMessage() and "No space left on device" in errors[0].getMessage()
    assert metrics.get(OFFLINE_LOG_DIRECTORY_COUNT).value() == 1
    assert metrics.get(LOG_DIRECTORY_OFFLINE).value(logDirectory=a.parent_dir) == 1
    assert metrics.get(LOG_DIRECTORY_OFFLINE).value(logDirectory=b.parent_dir) == 0
    status = {d["log_dir"]: d for d in m.log_dir_status()}
    assert status[a.parent_dir]["online"] is False and "No space left" in status[a.parent_dir]["error"]
    assert status[a.parent_dir]["offline_partitions"] == ["a-0"]
    assert status[b.parent_dir]["online"] is True and status[b.parent_dir]["offline_partitions"] == []
    # Checkpoints and the clean-shutdown marker go to the online dir only; locks are released.
    m.checkpoint()
    assert not os.path.exists(os.path.join(a.parent_dir, "recovery-point-offset-checkpoint"))
    assert OffsetCheckpointFile(os.path.join(b.parent_dir, "recovery-point-offset-checkpoint")).read() == {
        ("b", 0): b.recovery_point}
    m.shutdown()
    assert not os.path.exists(os.path.join(a.parent_dir, CLEAN_SHUTDOWN_FILE))
    assert os.path.exists(os.path.join(b.parent_dir, CLEAN_SHUTDOWN_FILE))
    m2 = start()
    assert m2.had_clean_shutdown == {a.parent_dir: False, b.parent_dir: True}
    assert m2.get_log("a", 0).log_end_offset == 6 and m2.get_log("b", 0).log_end_offset == 7
    assert file_batches(m2.get_log("a", 0).active_segment.log_path) == file_batches(seg.log_path)
    assert m2.get_log("a", 0).append_as_leader(batch(1)).first_offset == 6


def test_a_partial_write_that_cannot_be_cut_off_is_a_torn_tail_recovery_truncates(two_dirs, monkeypatch):
    m, a, _, _, start = two_dirs
    seg = a.active_segment
    good = file_batches(seg.log_path)
    disk_full_after(monkeypatch, seg.fd, allowed=100, cut_fails=True)
    with pytest.raises(KafkaStorageError):
        a.append_as_leader(batch(5, size=200))
    monkeypatch.undo()
    assert os.path.getsize(seg.log_path) == seg.size + 100
    assert not seg.is_intact()  # tiered storage would not upload it
    m.shutdown()
    m2 = start()
    a2 = m2.get_log("a", 0)
    assert a2.log_end_offset == 6
    assert file_batches(a2.active_segment.log_path) == good


def test_an_index_write_failure_leaves_whole_entries_and_takes_the_dir_offline(two_dirs, monkeypatch):
    m, _, _, _, start = two_dirs
    lg = m.get_or_create_log("c", 0, LogConfig(index_interval_bytes=1))  # an index entry per batch
    for _ in range(3):
        lg.append_as_leader(batch(1))
    index_path = lg.active_segment.offset_index.path
    entries = os.path.getsize(index_path)
    real_write = os.write

    def write(fd, data):  # the first entry's bytes fit, then the disk is full
        if os.path.realpath(f"/proc/self/fd/{fd}") != os.path.realpath(index_path):
            return real_write(fd, data)
        if getattr(write, "done", False):
            raise ENOSPC
        write.done = True
        return real_write(fd, bytes(data)[:5])
    monkeypatch.setattr(index_module.os, "write", write)
    with pytest.raises(KafkaStorageError, match="No space left"):
        lg.flush()
    monkeypatch.undo()
    assert os.path.getsize(index_path) == entries  # no partial entry for later ones to land behind
    assert lg.offline and not m.is_log_dir_online(lg.parent_dir)
    m.shutdown()
    assert start().get_log("c", 0).log_end_offset == 3


def test_a_checkpoint_write_failure_takes_only_that_dir_offline(two_dirs, monkeypatch, caplog):
    m, a, b, metrics, _ = two_dirs
    real = OffsetCheckpointFile.write

    def write(self, offsets, fsync=True):
        if self.path.startswith(a.parent_dir + os.sep):
            raise ENOSPC
        return real(self, offsets, fsync)
    monkeypatch.setattr(OffsetCheckpointFile, "write", write)
    with caplog.at_level(logging.ERROR):
        m.checkpoint()
        m.checkpoint()
    assert [r.getMessage() for r in logcapture.records(caplog) if r.levelno >= logging.ERROR] == [
        f"Log dir {a.parent_dir} is offline: error while writing the checkpoints of log dir {a.parent_dir}: "
        f"[Errno 28] No space left on device; its partitions answer KAFKA_STORAGE_ERROR until the broker restarts"]
    assert a.offline and b.offline is None
    assert metrics.get(OFFLINE_LOG_DIRECTORY_COUNT).value() == 1
    with pytest.raises(KafkaStorageError):
        a.append_as_leader(batch(1))
    b.append_as_leader(batch(1))


def test_a_clean_stop_that_cannot_write_its_snapshot_leaves_an_unclean_log_not_a_damaged_one(tmp_path, monkeypatch):
    d = str(tmp_path / "logs")
    m = LogManager([d])
    m.startup()
    lg = m.get_or_create_log("t", 0, LogConfig(segment_bytes=300))
    for i in range(12):
        lg.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=2 * i))
    written = {seg.log_path: file_batches(seg.log_path) for seg in lg.segments}

    def take_snapshot(self, fsync=True):
        raise ENOSPC
    monkeypatch.setattr(ProducerStateManager, "take_snapshot", take_snapshot)
    m.shutdown()  # does not raise: the stop completes
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert all(seg.fd == -1 for seg in lg.segments)  # files closed
    m2 = LogManager([d])
    m2.startup()  # the lock was released
    assert m2.had_clean_shutdown[os.path.abspath(d)] is False
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == 24
    assert {seg.log_path: file_batches(seg.log_path) for seg in lg2.segments} == written
    # Producer state was rebuilt from the batches: the producer's next sequence is accepted, a retry is not.
    assert lg2.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=22)).duplicate
    assert lg2.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=24)).first_offset == 24
    m2.shutdown()


def test_checkpoints_that_cannot_be_written_at_shutdown_leave_no_marker(tmp_path, monkeypatch):
    d = str(tmp_path / "logs")
    m = LogManager([d])
    m.startup()
    m.get_or_create_log("t", 0).append_as_leader(batch(3))

    def write(self, offsets, fsync=True):
        raise ENOSPC
    monkeypatch.setattr(OffsetCheckpointFile, "write", write)
    m.shutdown()
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    m2 = LogManager([d])
    m2.startup()
    assert m2.get_log("t", 0).log_end_offset == 3
    m2.shutdown()


def test_recovery_cuts_a_torn_first_batch_out_and_keeps_the_batches_written_behind_it(make_log):
    """The issue's run: the first append tore at position 0, later appends landed behind the torn bytes;
    recovery judged the first batch corrupt and Kafka's rule (truncate there) destroyed every acknowledged
    record. Only the torn bytes go."""
    lg = make_log()
    for _ in range(20):
        lg.append_as_leader(batch(3, size=50))
    path = lg.active_segment.log_path
    crash(lg)
    with open(path, "rb") as f:
        good = f.read()
    torn = batch(40, size=100)  # base offset 0, as the torn append had
    with open(path, "wb") as f:
        f.write(torn[:len(torn) // 2] + good)
    lg2 = make_log(clean_shutdown=False)
    assert lg2.log_end_offset == 60
    with open(path, "rb") as f:
        assert f.read() == good
    lg2.update_high_watermark(60)
    assert lg2.read(0, 1 << 20).read() == good


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=20), seed=st.integers(0, 2**32 - 1),
       kind=st.sampled_from(["insert", "overwrite", "zeros"]))
def test_recovery_never_removes_a_batch_whose_crc_is_intact(tmp_path_factory, sizes, seed, kind):
    tmp = str(tmp_path_factory.mktemp("damage"))
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=64)
    lg = Log.open(os.path.join(tmp, "t-0"), "t", 0, cfg)
    for i, n in enumerate(sizes):
        lg.append_as_leader(batch(n, size=10 + i % 40))
    before = {seg.log_path: file_batches(seg.log_path) for seg in lg.segments}
    crash(lg)
    rng = random.Random(seed)
    path = rng.choice(sorted(before))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    layout = before[path]
    starts = [0]
    for _, size in layout:
        starts.append(starts[-1] + size)
    victim = rng.randrange(len(layout))
    # The first 16 bytes of a header (base offset, length, leader epoch) are outside the CRC, as in Kafka:
    # damage there can make an intact-looking batch, so the damage starts at the magic byte or later.
    first, end_of_victim = starts[victim] + 16, starts[victim + 1]
    if kind == "insert":  # garbage between two batches (or at the end)
        at = starts[rng.randrange(len(starts))]
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        damaged = set()
    elif kind == "overwrite":  # a byte inside one batch changed
        data[rng.randrange(first, end_of_victim)] ^= 1 + rng.randrange(255)
        damaged = {layout[victim][0]}
    else:  # part of a batch the crash never wrote
        at = rng.randrange(first, end_of_victim)
        end = min(end_of_victim, at + rng.randint(1, 200))
        data[at:end] = bytes(end - at)
        damaged = {layout[victim][0]} if data != read(path) else set()
    with open(path, "wb") as f:
        f.write(data)
    lg2 = Log.open(os.path.join(tmp, "t-0"), "t", 0, cfg, clean_shutdown=False)
    kept = [h.base_offset for seg in lg2.segments for _, h in iter_batches(read(seg.log_path))]
    assert kept == [base for lay in before.values() for base, _ in lay if base not in damaged]
    for seg in lg2.segments:
        file_batches(seg.log_path)  # whole batches only
        seg.close()


def test_a_crc_valid_batch_whose_offsets_go_backwards_leaves_its_log_offline_and_untouched(tmp_path, caplog):
    d = str(tmp_path / "logs")
    m = LogManager([d])
    m.startup()
    lg = m.get_or_create_log("t", 0)
    for _ in range(4):
        lg.append_as_leader(batch(2))
    m.get_or_create_log("u", 0).append_as_leader(batch(1))
    path = lg.active_segment.log_path
    m.shutdown()
    with open(path, "rb") as f:
        data = f.read()
    first = next(iter_batches(data))[1]
    with open(path, "ab") as f:  # a copy of batch 0 at the end: intact, but offsets 0..1 again
        f.write(data[:first.size])
    os.remove(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # as after a crash
    with open(path, "rb") as f:
        damaged = f.read()
    with pytest.raises(UnrecoverableSegmentError):
        Log.open(os.path.dirname(path), "t", 0, LogConfig(), clean_shutdown=False)
    m2 = LogManager([d])
    with caplog.at_level(logging.ERROR):
        m2.startup()
    assert any("t-0" in r.getMessage() and "cannot follow" in r.getMessage() for r in logcapture.records(caplog))
    t = m2.get_or_create_log("t", 0)  # hosted, offline: never created again
    assert t.offline and m2.get_log("u", 0).offline is None
    with pytest.raises(KafkaStorageError):
        t.append_as_leader(batch(1))
    m2.get_log("u", 0).append_as_leader(batch(1))
    m2.shutdown()
    with open(path, "rb") as f:
        assert f.read() == damaged
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # the next start looks again


def test_a_log_dir_failing_at_start_up_keeps_its_partitions_offline_there(tmp_path, monkeypatch):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    m = LogManager(dirs)
    m.startup()
    for name in ("a", "b", "c"):
        m.get_or_create_log(name, 0).append_as_leader(batch(1))
    m.shutdown()
    failing = os.path.abspath(dirs[0])
    real_open = Log.open.__func__

    def open_(cls, directory, *args, **kwargs):
        if directory.startswith(failing + os.sep):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_open(cls, directory, *args, **kwargs)
    monkeypatch.setattr(Log, "open", classmethod(open_))
    m2 = LogManager(dirs)
    m2.startup()
    offline = [lg.name for lg in m2.logs.values() if lg.offline]
    assert sorted(offline) == ["a-0", "c-0"] and not m2.is_log_dir_online(failing)
    assert m2.get_or_create_log("a", 0).parent_dir == failing  # not created again in the other dir
    assert m2.get_or_create_log("new", 0).parent_dir == os.path.abspath(dirs[1])
    m2.shutdown()
    monkeypatch.undo()
    m3 = LogManager(dirs)
    m3.startup()
    assert {lg.name: lg.log_end_offset for lg in m3.logs.values()} == {"a-0": 1, "b-0": 1, "c-0": 1, "new-0": 0}
    m3.shutdown()


def test_a_torn_segment_is_never_a_copy_candidate(make_log, monkeypatch):
    from tierlog.tiered.tasks.copy import log_copy_candidates
    lg = make_log(segment_bytes=400)
    for _ in range(12):
        lg.append_as_leader(batch(2, size=40))
    lg.update_high_watermark(lg.log_end_offset)
    assert len(lg.segments) >= 4

    def candidates():
        return log_copy_candidates(lg, lambda topic, partition: None)
    assert [s.base_offset for s, _ in candidates()] == [s.base_offset for s in lg.segments[:-1]]
    with open(lg.segments[1].log_path, "ab") as f:  # bytes no append accounted for
        f.write(b"\x00" * 10)
    assert [s.base_offset for s, _ in candidates()] == [lg.segments[0].base_offset]
    lg.mark_offline("test")
    assert candidates() == []


def test_describe_log_dirs_sizes_lags_and_offline_dirs(tmp_path, monkeypatch):
    """What DescribeLogDirs answers from: each dir in log.dirs order with its logs' sizes and lags; a log
    refused by recovery sized from its files on disk with lag -1; an offline dir with nothing; -1 bytes when
    the file system cannot be asked."""
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    m = LogManager(dirs)
    m.startup()
    a, b = m.get_or_create_log("a", 0), m.get_or_create_log("b", 0)
    for _ in range(3):
        a.append_as_leader(batch(2))
    b.append_as_leader(batch(1))
    path = a.active_segment.log_path
    m.shutdown()
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "ab") as f:  # batch 0 again at the end: recovery refuses the log, the dir stays online
        f.write(data[:next(iter_batches(data))[1].size])
    os.remove(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE))
    m2 = LogManager(dirs)
    m2.startup()
    b = m2.get_log("b", 0)
    b.update_high_watermark(b.log_end_offset)
    st = os.statvfs(dirs[1])
    d1, d2 = m2.describe_log_dirs()
    assert (d1.log_dir, d1.offline, d1.replicas) == (dirs[0], None, [LogDirReplica("a", 0, os.path.getsize(path), -1)])
    assert (d2.log_dir, d2.offline, d2.replicas) == (dirs[1], None, [LogDirReplica("b", 0, b.size_in_bytes, 0)])
    assert d2.total_bytes == st.f_blocks * st.f_frsize and 0 < d2.usable_bytes <= d2.total_bytes
    assert [d.replicas for d in m2.describe_log_dirs([("b", 0), ("a", 5), ("zz", 0)])] == [[], d2.replicas]
    assert [d.replicas for d in m2.describe_log_dirs([])] == [[], []]

    m2.failure_channel.maybe_add_offline_log_dir(dirs[1], "testing", OSError(errno.EIO, os.strerror(errno.EIO)))

    def statvfs(path):
        raise OSError(errno.EIO, "no answer")
    monkeypatch.setattr(os, "statvfs", statvfs)
    d1, d2 = m2.describe_log_dirs()
    assert (d1.offline, d1.total_bytes, d1.usable_bytes, len(d1.replicas)) == (None, -1, -1, 1)
    assert (d2.offline, d2.replicas, d2.total_bytes, d2.usable_bytes) == (
        "testing: [Errno 5] Input/output error", [], -1, -1)
    monkeypatch.undo()
    m2.shutdown()
