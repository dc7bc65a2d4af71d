"""Crash recovery: torn and corrupt bytes are removed, and never a batch whose CRC is intact."""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.storagelib import batch, crash
from tierlog.records import iter_batches
from tierlog.storage import LogManager
from tierlog.storage.segment import LogSegment


def write_log(make_log, sizes, name="t-0", **cfg):
    lg = make_log(name, **cfg)
    for i, n in enumerate(sizes):
        lg.append_as_leader(batch(n, size=20 + i % 50), leader_epoch=i // 4)
    return lg


def batch_ends(lg):
    """(segment path, end position, next offset) of every batch, in log order."""
    out = []
    for seg in lg.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        for pos, h in iter_batches(data):
            out.append((seg.base_offset, pos + h.size, h.last_offset + 1))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=25), cut_seed=st.integers(0, 2**32 - 1))
def test_cut_at_random_byte_keeps_exactly_the_complete_batches(tmp_path_factory, sizes, cut_seed):
    tmp = tmp_path_factory.mktemp("crash")
    make = _maker(tmp)
    lg = write_log(make, sizes, segment_bytes=600, index_interval_bytes=64)
    ends = batch_ends(lg)
    rng = random.Random(cut_seed)
    seg = rng.choice(lg.segments)
    boundaries = [0] + [e[1] for e in ends if e[0] == seg.base_offset]
    cut = rng.choice(boundaries) if rng.random() < 0.3 else rng.randint(0, seg.size)
    base = seg.base_offset
    crash(lg)
    with open(seg.log_path, "r+b") as f:
        f.truncate(cut)
    # Every batch survives but those the cut tore or removed: in the cut segment the batches ending by
    # the cut; a cut inside a batch leaves a torn tail, which recovery truncates, and the later segments
    # stay, since their batches are intact (Kafka would drop them).
    survivors = [e for e in ends if e[0] != base or e[1] <= cut]
    expected_end = survivors[-1][2] if survivors else 0
    reopened = make("t-0", clean_shutdown=False, recovery_point=0, segment_bytes=600, index_interval_bytes=64)
    assert reopened.log_end_offset == expected_end
    reopened.update_high_watermark(reopened.log_end_offset)
    offsets = [h.last_offset for _, _, h in reopened.batches()]
    assert offsets == [e[2] - 1 for e in survivors]
    # The recovered log accepts new appends right after the survivors.
    info = reopened.append_as_leader(batch(1))
    assert info.first_offset == expected_end
    for s in reopened.segments:
        s.close()


def _maker(tmp):
    from tierlog.storage import Log, LogConfig

    def make(name="t-0", clean_shutdown=True, recovery_point=0, **cfg):
        return Log.open(os.path.join(tmp, name), "t", 0, LogConfig(**cfg), clean_shutdown=clean_shutdown,
                        recovery_point=recovery_point)
    return make


def test_corrupt_batch_is_cut_out_never_served_and_the_intact_batches_after_it_stay(make_log):
    lg = write_log(make_log, [3] * 10)
    ends = batch_ends(lg)
    size = lg.segments[0].size
    crash(lg)
    path = lg.segments[0].log_path
    victim = ends[6][1] - 5  # inside batch 7 (a record byte covered by the CRC)
    with open(path, "r+b") as f:
        f.seek(victim)
        b = f.read(1)
        f.seek(victim)
        f.write(bytes([b[0] ^ 0xFF]))
    lg2 = make_log("t-0", clean_shutdown=False)
    # Batch 7 (offsets 18..20) is gone, batches 8..10 after it keep their offsets: only the corrupt
    # bytes were removed (Kafka would truncate the last four batches).
    assert lg2.log_end_offset == 30
    assert os.path.getsize(path) == size - (ends[6][1] - ends[5][1])
    lg2.update_high_watermark(lg2.log_end_offset)
    assert [h.base_offset for _, _, h in lg2.batches()] == [0, 3, 6, 9, 12, 15, 21, 24, 27]
    assert lg2.read(18, 10**6).first_batch_offset == 21
    assert lg2.read(19, 10**6).first_batch_offset == 21
    assert lg2.append_as_leader(batch(1)).first_offset == 30


def test_clean_shutdown_skips_validation(make_log, monkeypatch):
    lg = write_log(make_log, [2] * 30, segment_bytes=500)
    lg.close()
    calls = []
    orig = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, *a, **k: calls.append(self.base_offset) or orig(
        self, *a, **k))
    lg2 = make_log("t-0", clean_shutdown=True)
    assert calls == []
    assert lg2.log_end_offset == 60
    # An unclean stop validates only what lies after the recovery point.
    crash(lg2)
    make_log("t-0", clean_shutdown=False, recovery_point=lg2.segments[-2].base_offset)
    assert calls == [lg2.segments[-2].base_offset, lg2.segments[-1].base_offset]


def test_truncated_earlier_segment_is_detected_even_after_clean_shutdown(make_log):
    lg = write_log(make_log, [2] * 30, segment_bytes=500)
    lg.close()
    victim = lg.segments[1]
    with open(victim.log_path, "r+b") as f:
        f.truncate(victim.size - 7)
    lg2 = make_log("t-0", clean_shutdown=True)
    # The torn batch goes; every later segment stays (its batches are intact).
    assert [s.base_offset for s in lg2.segments] == [s.base_offset for s in lg.segments]
    assert lg2.segments[1].next_offset() == lg.segments[2].base_offset - 2
    assert lg2.log_end_offset == 60


def test_index_rebuilt_when_index_file_is_garbage(make_log):
    lg = write_log(make_log, [2] * 40, index_interval_bytes=100, segment_bytes=10**6)
    lg.close()
    with open(lg.segments[0].offset_index.path, "wb") as f:
        f.write(b"\x00\x00\x00\x05\x7f\xff\xff\xff")  # points far past the log end
    lg2 = make_log("t-0", index_interval_bytes=100)
    lg2.update_high_watermark(lg2.log_end_offset)
    assert lg2.log_end_offset == 80
    assert lg2.read(41, 100).first_batch_offset == 40
    assert lg2.segments[0].offset_index.entries > 3


def test_log_manager_unclean_restart_recovers_and_clean_restart_does_not(tmp_path):
    d = str(tmp_path / "logs")
    m = LogManager([d])
    m.startup()
    lg = m.get_or_create_log("orders", 0)
    for _ in range(5):
        lg.append_as_leader(batch(2))
    seg_path = lg.active_segment.log_path
    m.checkpoint()
    crash(lg)
    for fd in m._locks:
        os.close(fd)
    with open(seg_path, "r+b") as f:
        f.truncate(os.path.getsize(seg_path) - 3)
    m2 = LogManager([d])
    m2.startup()
    assert m2.had_clean_shutdown[os.path.abspath(d)] is False
    assert m2.get_log("orders", 0).log_end_offset == 8
    m2.shutdown()
    assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    with open(os.path.join(d, "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\norders 0 8\n"
    m3 = LogManager([d])
    m3.startup()
    assert m3.had_clean_shutdown[os.path.abspath(d)] is True
    assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    m3.shutdown()


def test_log_dir_lock_refuses_a_second_manager(tmp_path):
    from tierlog.errors import StartupError
    m = LogManager([str(tmp_path)])
    m.startup()
    with pytest.raises(StartupError, match="in use by another broker .*; stop that broker or give this one"):
        LogManager([str(tmp_path)]).startup()
    m.shutdown()


def test_unreadable_checkpoints_fall_back_to_the_segments(tmp_path):
    d = str(tmp_path / "logs")
    m = LogManager([d])
    m.startup()
    lg = m.get_or_create_log("orders", 0)
    for epoch in range(3):
        lg.append_as_leader(batch(2), leader_epoch=epoch)
    m.shutdown()
    for name in ("recovery-point-offset-checkpoint", "orders-0/leader-epoch-checkpoint"):
        with open(os.path.join(d, name), "w") as f:
            f.write("garbage\n")
    m2 = LogManager([d])
    m2.startup()
    lg2 = m2.get_log("orders", 0)
    assert lg2.log_end_offset == 6
    assert lg2.leader_epoch_cache.entries == [(0, 0), (1, 2), (2, 4)]
    m2.shutdown()


def test_unclean_recovery_keeps_a_segment_the_cleaner_emptied(make_log):
    # The first segments hold only keys written again later: the cleaner empties them. Their offset range is
    # still the log's (a tiered compacted log's remote copy of it is replaced from them), so recovery after a
    # kill keeps them; it removes only segments it empties itself.
    from tierlog.storage.cleaner import clean_log_now

    lg = make_log("t-0", segment_bytes=400, cleanup_policy=("compact",))
    for i in range(12):
        lg.append_as_leader(batch(1, key=b"k%d" % (i % 3), size=60), leader_epoch=0)
    for i in range(12):
        lg.append_as_leader(batch(1, key=b"k%d" % (i % 3), size=60), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    assert clean_log_now(lg) is not None
    emptied = [s.base_offset for s in lg.segments[:-1] if s.size == 0]
    assert emptied, [(s.base_offset, s.size) for s in lg.segments]
    bases = [s.base_offset for s in lg.segments]
    crash(lg)
    lg2 = make_log("t-0", clean_shutdown=False, recovery_point=0, segment_bytes=400, cleanup_policy=("compact",))
    assert [s.base_offset for s in lg2.segments] == bases
    assert lg2.local_log_start_offset == bases[0] == 0
