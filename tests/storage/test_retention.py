"""Time, size and log-start retention, and local retention under tiered storage."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.storagelib import batch

DAY = 86_400_000


def fill(lg, n, ts0=0, step=1000):
    for i in range(n):
        lg.append_as_leader(batch(2, ts=ts0 + i * step), now_ms=ts0 + i * step)
    lg.update_high_watermark(lg.log_end_offset)


def test_time_retention_deletes_oldest_segments_and_advances_log_start(make_log):
    one = len(batch(2, ts=0))
    lg = make_log(segment_bytes=one * 2, retention_ms=DAY, file_delete_delay_ms=0)
    fill(lg, 10, ts0=10 * DAY, step=DAY // 10)  # batches 10 apart in time, 2 per segment
    assert [s.base_offset for s in lg.segments] == [0, 4, 8, 12, 16]
    # At now = t0 + 1 day + 0.35 day, segments whose newest batch is older than 1 day go.
    now = 10 * DAY + DAY + int(0.35 * DAY)
    assert lg.delete_old_segments(now) == 2
    assert lg.log_start_offset == 8 and lg.segments[0].base_offset == 8
    # Deleted files are renamed, then removed after file.delete.delay.ms.
    assert any(n.endswith(".log.deleted") for n in os.listdir(lg.dir))
    lg.delete_expired_files(now)
    assert not any(n.endswith(".deleted") for n in os.listdir(lg.dir))


def test_size_retention_keeps_at_most_retention_bytes(make_log):
    one = len(batch(2, ts=0))
    lg = make_log(segment_bytes=one * 2, retention_bytes=one * 5)
    fill(lg, 10, ts0=10**12)
    assert lg.delete_old_segments(10**12) == 2  # 10 batches, 5 segments; 3 segments (6 batches) exceed 5
    assert lg.size_in_bytes == one * 6
    assert lg.log_start_offset == 8


def test_retention_never_passes_the_high_watermark_nor_deletes_the_last_data(make_log):
    one = len(batch(2, ts=0))
    lg = make_log(segment_bytes=one * 2, retention_ms=1)
    fill(lg, 6, ts0=1000)
    lg.update_high_watermark(4)
    assert lg.delete_old_segments(10**13) == 1
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.delete_old_segments(10**13) == 2
    # Everything expired: the active segment is rolled so the log keeps an empty active segment.
    assert lg.log_start_offset == lg.log_end_offset == 12
    assert [s.base_offset for s in lg.segments] == [12]
    assert lg.append_as_leader(batch(1)).first_offset == 12


def test_compact_only_topics_have_no_time_or_size_retention(make_log):
    lg = make_log(segment_bytes=len(batch(2, ts=0)) * 2, retention_ms=1, cleanup_policy=("compact",))
    fill(lg, 6, ts0=1000)
    assert lg.delete_old_segments(10**13) == 0


def test_tiered_local_retention_only_deletes_copied_segments(make_log):
    one = len(batch(2, ts=0))
    lg = make_log(segment_bytes=one * 2, remote_storage_enable=True, retention_ms=-1, local_retention_ms=1000)
    fill(lg, 8, ts0=1000)
    assert lg.delete_old_segments(10**13) == 0  # nothing copied yet
    lg.highest_offset_in_remote_storage = 7  # first two segments are in the remote tier
    assert lg.delete_old_segments(10**13) == 2
    assert lg.local_log_start_offset == 8 and lg.log_start_offset == 0


def test_local_retention_bytes_inherits_retention_bytes_when_minus_two(make_log):
    one = len(batch(2, ts=0))
    lg = make_log(segment_bytes=one * 2, remote_storage_enable=True, retention_bytes=one * 4,
                  local_retention_bytes=-2)
    fill(lg, 8, ts0=10**12)
    lg.highest_offset_in_remote_storage = lg.log_end_offset - 1
    assert lg.delete_old_segments(10**12) == 2
    assert lg.size_in_bytes == one * 4


def test_a_lone_active_segment_is_rolled_for_tiering_only_where_kafka_rolls_it(make_log):
    """Kafka's retention pass rolls the active segment of a tiered log when the same test that deletes
    older segments holds for it: for size, only with local.retention.bytes=0 (found against Kafka 4.1 with
    local.retention.bytes=1, where the last records stay local); for time, once it is older than local
    retention."""
    one = len(batch(2, ts=0))
    for local_bytes, rolled in ((1, False), (one, False), (0, True)):
        lg = make_log(f"roll{local_bytes}-0", segment_bytes=one * 2, remote_storage_enable=True,
                      local_retention_bytes=local_bytes, file_delete_delay_ms=0)
        fill(lg, 5, ts0=10**12)  # segments at 0, 4 and the active one at 8 (one batch)
        lg.highest_offset_in_remote_storage = 7  # the two rolled segments are in the remote tier
        lg.delete_old_segments(10**12)
        assert [s.base_offset for s in lg.segments] == ([8, 10] if rolled else [8]), local_bytes
        assert lg.local_log_start_offset == 8
    lg = make_log("rolltime-0", segment_bytes=one * 2, remote_storage_enable=True, retention_ms=-1,
                  local_retention_ms=1000, file_delete_delay_ms=0)
    fill(lg, 5, ts0=1000)
    lg.highest_offset_in_remote_storage = 7
    lg.delete_old_segments(1000 + 4 * 1000 + 500)  # the active segment is younger than local retention
    assert [s.base_offset for s in lg.segments] == [8]
    lg.delete_old_segments(10**13)
    assert [s.base_offset for s in lg.segments] == [8, 10]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(1, 400), min_size=1, max_size=40), segment_bytes=st.integers(150, 2000),
       retention_bytes=st.integers(0, 8000))
def test_roll_and_size_retention_rules(tmp_path_factory, values, segment_bytes, retention_bytes):
    from tierlog.storage import Log, LogConfig
    d = os.path.join(tmp_path_factory.mktemp("ret"), "t-0")
    lg = Log.open(d, "t", 0, LogConfig(segment_bytes=segment_bytes, retention_bytes=retention_bytes))
    sizes = []
    for v in values:
        b = batch(1, size=v, ts=10**12)
        sizes.append(len(b))
        lg.append_as_leader(b, now_ms=10**12)
    # Roll rule: a segment only exceeds segment.bytes when it holds a single larger batch.
    for seg in lg.segments:
        assert seg.size <= segment_bytes or len(list(_batches_of(seg))) == 1
    lg.update_high_watermark(lg.log_end_offset)
    before = [s.size for s in lg.segments]
    lg.delete_old_segments(10**12)
    kept = [s.size for s in lg.segments if s.size]
    dropped = before[:len(before) - len(lg.segments)]
    # Size rule: drop the oldest segments while what remains is still at least retention.bytes.
    assert sum(before) - sum(dropped) >= min(retention_bytes, sum(before)) or not kept
    if len(lg.segments) > 1 or lg.segments[0].size:
        first_kept = lg.segments[0].size
        assert sum(s.size for s in lg.segments) - first_kept < retention_bytes
    assert lg.log_start_offset == lg.segments[0].base_offset
    for seg in lg.segments:
        seg.close()


def _batches_of(seg):
    from tierlog.records import iter_batches
    with open(seg.log_path, "rb") as f:
        return iter_batches(f.read())
