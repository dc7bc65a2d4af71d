"""The log cleaner on real Log objects and files: compaction, tombstones, lags, transactions, the swap protocol
and its recovery after a crash at each step."""

import os

import pytest

from tests.harness.waiting import wait_until_async
from tierlog.records import build_batch, decode_batch, read_header
from tierlog.records.control import end_txn_marker_batch
from tierlog.storage import cleaner as cleaner_mod
from tierlog.storage.cleaner import OffsetMap, clean_log_now, log_to_clean
from tierlog.storage.log import seg_region_bytes

from .storagelib import crash

NOW = 1_800_000_000_000
COMPACT = {"cleanup_policy": ("compact",), "segment_bytes": 600, "min_cleanable_dirty_ratio": 0.01}


def produce(lg, key: bytes, value: bytes | None, ts: int = NOW - 10_000, **kw):
    info = lg.append_as_leader(build_batch([(key, value, [], ts)], **kw), now_ms=ts)
    lg.update_high_watermark(lg.log_end_offset)  # what the replica manager does once replicated
    return info


def records(lg):
    """(offset, key, value) of every record in the log, in order."""
    out = []
    for seg, pos, h in lg.batches():
        _, recs = decode_batch(seg_region_bytes(seg, pos, h.size), 0)
        if h.is_control:
            continue
        out += [(r.offset, r.key, r.value) for r in recs]
    return out


def latest(rows):
    last = {}
    for off, k, v in rows:
        last[k] = (off, v)
    return last


def fill(lg, n=502, keys=10):
    for i in range(n):
        produce(lg, b"key-%d" % (i % keys), b"value-%d" % i)


def test_compaction_keeps_the_last_value_of_each_key_with_its_offset(make_log):
    lg = make_log(**COMPACT)
    fill(lg)
    before = records(lg)
    active = [r for r in before if r[0] >= lg.active_segment.base_offset]
    assert len(lg.segments) > 5
    result = clean_log_now(lg, now_ms=NOW)
    assert result is not None and result.end_offset == lg.active_segment.base_offset
    after = records(lg)
    cleaned = [r for r in after if r[0] < lg.active_segment.base_offset]
    # one record per key below the active segment, each the latest value the cleaned part had for it
    below = latest([r for r in before if r[0] < lg.active_segment.base_offset])
    assert sorted(cleaned) == sorted((off, k, v) for k, (off, v) in below.items())
    assert [r for r in after if r[0] >= lg.active_segment.base_offset] == active  # untouched
    assert latest(after) == latest(before)
    assert lg.log_end_offset == 502
    # reads by offset work across the rewritten segments (indexes rebuilt)
    for off, _k, _v in cleaned:
        data = lg.read(off, 1 << 20).read()
        h = read_header(data)
        assert h.base_offset <= off <= h.last_offset


def test_second_round_with_new_dirty_data_cleans_old_keys_away(make_log):
    lg = make_log(**COMPACT)
    fill(lg, 200)
    first = clean_log_now(lg, now_ms=NOW)
    fill(lg, 200)
    lg.roll()
    clean_log_now(lg, first.end_offset, now_ms=NOW)
    rows = records(lg)
    assert len(rows) == 10 and latest(rows) == latest(rows)
    assert {k for _, k, _ in rows} == {b"key-%d" % i for i in range(10)}
    assert all(off >= 390 for off, _, _ in rows)


def test_tombstones_stay_delete_retention_ms_after_cleaning_then_go(make_log):
    lg = make_log(**COMPACT, delete_retention_ms=60_000)
    fill(lg, 100)
    produce(lg, b"key-3", None)
    fill(lg, 30, keys=1)  # other keys after the tombstone, so it is in a cleanable segment
    lg.roll()
    first = clean_log_now(lg, now_ms=NOW)
    rows = records(lg)
    assert (100, b"key-3", None) in rows  # kept: its horizon is stamped now + delete.retention.ms
    horizon_batches = [h for _, _, h in lg.batches() if h.has_delete_horizon]
    assert [h.base_timestamp for h in horizon_batches] == [NOW + 60_000]
    assert first.delete_horizon_ms == NOW + 60_000
    # before the horizon it stays
    clean_log_now(lg, first.end_offset, now_ms=NOW + 59_000)
    assert (100, b"key-3", None) in records(lg)
    # a round after the horizon (nothing dirty: the horizon alone asks for it) removes it
    ltc = log_to_clean(lg, first.end_offset, NOW + 61_000, first.delete_horizon_ms)
    assert ltc.cleanable and ltc.dirty_bytes == 0
    clean_log_now(lg, first.end_offset, now_ms=NOW + 61_000)
    assert all(k != b"key-3" for _, k, _ in records(lg))


def test_min_compaction_lag_keeps_young_segments_dirty(make_log):
    lg = make_log(**COMPACT, min_compaction_lag_ms=3_600_000)
    for i in range(60):  # old records, then young ones
        produce(lg, b"k%d" % (i % 3), b"old-%d" % i, ts=NOW - 7_200_000)
    lg.roll()
    young_base = lg.log_end_offset
    for i in range(60):
        produce(lg, b"k%d" % (i % 3), b"young-%d" % i, ts=NOW - 60_000)
    lg.roll()
    result = clean_log_now(lg, now_ms=NOW)
    assert result.end_offset == young_base
    rows = records(lg)
    assert [r for r in rows if r[0] < young_base] == sorted(
        (off, k, v) for k, (off, v) in latest([r for r in rows if r[0] < young_base]).items())
    assert len([r for r in rows if r[0] >= young_base]) == 60  # nothing younger than the lag was cleaned


def test_dirty_ratio_and_max_compaction_lag(make_log):
    lg = make_log(**{**COMPACT, "min_cleanable_dirty_ratio": 0.99}, max_compaction_lag_ms=1000)
    fill(lg, 100)
    ltc = log_to_clean(lg, None, NOW)
    assert ltc.ratio == 1.0 and ltc.clean_bytes == 0
    assert ltc.compaction_delay_ms > 0 and ltc.cleanable
    result = clean_log_now(lg, now_ms=NOW)
    ltc = log_to_clean(lg, result.end_offset, NOW)
    assert ltc.dirty_bytes == 0 and not ltc.cleanable


def test_compressed_batches_keep_codec_offsets_and_producer_fields(make_log):
    lg = make_log(**COMPACT)
    for i in range(40):
        recs = [(b"k%d" % (j % 4), b"v-%d-%d" % (i, j), [("h", b"x")], NOW - 5000 + j) for j in range(5)]
        lg.append_as_leader(build_batch(recs, compression="zstd", producer_id=7, producer_epoch=1,
                                        base_sequence=i * 5), now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    before = latest(records(lg))
    clean_log_now(lg, now_ms=NOW)
    assert latest(records(lg)) == before
    for seg, pos, h in lg.batches():
        data = seg_region_bytes(seg, pos, h.size)
        got, recs = decode_batch(data, 0)  # CRC checked
        assert h.compression.name_lower == "zstd" and h.producer_id == 7 and h.producer_epoch == 1
        assert h.last_offset_delta == 4 and h.base_sequence == (h.base_offset // 5) * 5
        for r in recs:
            assert r.headers == [("h", b"x")] and r.timestamp == NOW - 5000 + (r.offset - h.base_offset)
    # the producer's last batch stays whole-or-empty, so its sequence state survives a reload
    assert lg.producer_state.producers[7].last_seq == 199


def test_aborted_transaction_records_are_removed(make_log):
    lg = make_log(**COMPACT)
    produce(lg, b"a", b"committed-before")
    lg.append_as_leader(build_batch([(b"a", b"aborted", [], NOW)], producer_id=9, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now_ms=NOW)
    lg.append_txn_marker(9, 0, 0, commit=False, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    produce(lg, b"b", b"other")
    lg.roll()
    produce(lg, b"c", b"active")
    clean_log_now(lg, now_ms=NOW)
    rows = records(lg)
    assert (0, b"a", b"committed-before") in rows
    assert all(v != b"aborted" for _, _, v in rows)
    markers = [h for _, _, h in lg.batches() if h.is_control]
    # The aborted batch is producer 9's last: it stays, empty, so its transaction is not empty and its
    # marker stays without a horizon, and so does its transaction index entry (Kafka's rule).
    assert len(markers) == 1 and not markers[0].has_delete_horizon
    assert [b for _, _, b in lg.batches() if b.producer_id == 9 and not b.is_control][0].records_count == 0
    assert [(t.producer_id, t.first_offset) for seg in lg.segments for t in seg.txn_index.entries] == [(9, 1)]
    assert end_txn_marker_batch  # the helper the marker came from


def test_offset_map_capacity_limits_a_round(make_log):
    lg = make_log(**COMPACT)
    fill(lg, 300, keys=300)  # every key distinct
    lg.roll()
    small = OffsetMap(24 * 40, 1.0)  # 40 entries
    rnd_ltc = log_to_clean(lg, None, NOW)
    rnd = cleaner_mod.CleaningRound(lg, rnd_ltc, small, cleaner_mod.Throttler(float("inf")), NOW)
    result = rnd.run(lambda base, old, sizes: lg.replace_segments(base, old, sizes) is not None)
    assert 0 < result.end_offset < 300  # the round stopped where the map filled
    assert len(records(lg)) == 300  # distinct keys: nothing to drop


def _dir_files(lg):
    return sorted(os.listdir(lg.dir))


@pytest.mark.parametrize("precleaned", [False, True], ids=["one-segment-groups", "many-segment-groups"])
@pytest.mark.parametrize("fail_at", range(1, 12))
def test_a_crash_at_each_step_of_the_swap_recovers_every_key(make_log, monkeypatch, fail_at, precleaned):
    lg = make_log(**COMPACT)
    for i in range(40):  # keys written once, in the first segments only: losing a segment loses them
        produce(lg, b"once-%d" % i, b"only-value-%d" % i)
    fill(lg)
    if precleaned:  # cleaned segments are small: the next round groups several into one
        first = clean_log_now(lg, now_ms=NOW)
        lg.roll()
        assert len(log_to_clean(lg, first.end_offset, NOW).log.segments) > 3
    expected = latest(records(lg))
    calls = {"n": 0}
    real_replace = os.replace

    def failing_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise OSError(5, "simulated crash")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    try:
        clean_log_now(lg, now_ms=NOW)
    except Exception:  # noqa: BLE001 - the simulated crash
        pass
    monkeypatch.setattr(os, "replace", real_replace)
    crashed = calls["n"] >= fail_at
    crash(lg)
    lg2 = make_log(**COMPACT, clean_shutdown=False)
    rows = records(lg2)
    assert latest(rows) == expected
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)  # offsets increase, no duplicates
    assert not [f for f in _dir_files(lg2) if f.endswith((".cleaned", ".swap", ".deleted"))]
    assert lg2.log_end_offset == 542
    if not crashed and not precleaned:
        assert len(rows) < 542


def test_left_over_swap_files_are_completed_or_discarded(make_log):
    lg = make_log(**COMPACT)
    fill(lg)
    expected = latest(records(lg))
    # a swap that got as far as ".log.swap" for the first group, then the process died
    base = lg.segments[0].base_offset
    real_replace = os.replace
    seen = []

    def stop_after_log_swap(src, dst):
        real_replace(src, dst)
        seen.append(dst)
        if dst.endswith(".log.swap"):
            raise OSError(5, "simulated crash after the .log.swap rename")

    os.replace = stop_after_log_swap
    try:
        with pytest.raises(Exception):  # noqa: B017 - the simulated crash
            clean_log_now(lg, now_ms=NOW)
    finally:
        os.replace = real_replace
    assert any(s.endswith(f"{base:020d}.log.swap") for s in seen)
    assert os.path.exists(os.path.join(lg.dir, f"{base:020d}.log.swap"))
    crash(lg)
    lg2 = make_log(**COMPACT, clean_shutdown=False)
    rows = records(lg2)
    assert latest(rows) == expected and len(rows) < 502  # the cleaned group was swapped in


def test_the_active_segment_is_never_cleaned(make_log):
    lg = make_log(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.01)  # one big segment
    fill(lg, 100)
    assert len(lg.segments) == 1
    assert clean_log_now(lg, now_ms=NOW) is None
    assert len(records(lg)) == 100


def test_aborted_records_go_even_when_the_marker_is_in_the_active_segment(make_log):
    lg = make_log(**COMPACT)
    produce(lg, b"a", b"committed-before")
    lg.append_as_leader(build_batch([(b"a", b"aborted", [], NOW)], producer_id=9, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    lg.append_txn_marker(9, 0, 0, commit=False, now_ms=NOW)  # the ABORT lands in the active segment
    lg.update_high_watermark(lg.log_end_offset)
    clean_log_now(lg, now_ms=NOW)
    assert [v for _, k, v in records(lg)] == [b"committed-before"]
    # the producer's last data batch stays, emptied, so its state survives a rebuild
    data = [h for _, _, h in lg.batches() if h.producer_id == 9 and not h.is_control]
    assert len(data) == 1 and data[0].records_count == 0 and data[0].base_sequence == 0


def test_a_committed_transaction_marker_goes_after_its_records_and_the_horizon(make_log):
    """Kafka's rule: the pass that removes a transaction's last record keeps its marker as it is; the next pass,
    finding no batch of it, stamps the marker with a horizon; a pass after the horizon removes it."""
    lg = make_log(**COMPACT, delete_retention_ms=1000)
    lg.append_as_leader(build_batch([(b"a", b"txn-value", [], NOW)], producer_id=5, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now_ms=NOW)
    lg.append_txn_marker(5, 0, 0, commit=True, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    produce(lg, b"a", b"newer")  # supersedes the transaction's only record
    lg.append_as_leader(build_batch([(b"b", b"txn-2", [], NOW)], producer_id=5, producer_epoch=0,
                                    base_sequence=1, is_transactional=True), now_ms=NOW)  # producer 5's last
    lg.append_txn_marker(5, 0, 0, commit=True, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()

    def marker_at_1():
        return [h for _, _, h in lg.batches() if h.is_control and h.base_offset == 1]

    first = clean_log_now(lg, now_ms=NOW)
    assert [h.base_offset for _, _, h in lg.batches() if h.producer_id == 5] == [1, 3, 4]  # the batch at 0 went
    assert len(marker_at_1()) == 1 and not marker_at_1()[0].has_delete_horizon
    produce(lg, b"c", b"dirty")  # the next rounds need dirty data
    lg.roll()
    second = clean_log_now(lg, first.end_offset, now_ms=NOW + 10)
    assert len(marker_at_1()) == 1 and marker_at_1()[0].has_delete_horizon
    assert marker_at_1()[0].base_timestamp == NOW + 10 + 1000
    produce(lg, b"d", b"dirty")
    lg.roll()
    clean_log_now(lg, second.end_offset, now_ms=NOW + 2000)
    assert marker_at_1() == []
    assert [h.base_offset for _, _, h in lg.batches() if h.is_control] == [4]  # the live transaction's
    assert latest(records(lg)) == {b"a": (2, b"newer"), b"b": (3, b"txn-2"), b"c": (5, b"dirty"),
                                   b"d": (6, b"dirty")}


def test_an_aborted_transaction_keeps_its_index_entry_while_a_batch_of_it_is_left(make_log):
    """Kafka's rule for an abort marker: the pass that removes the aborted data keeps the marker unstamped and
    its transaction index entry; the next pass stamps the marker and drops the entry; then the marker goes."""
    lg = make_log(**COMPACT, delete_retention_ms=1000)
    lg.append_as_leader(build_batch([(b"a", b"aborted", [], NOW)], producer_id=9, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now_ms=NOW)
    lg.append_txn_marker(9, 0, 0, commit=False, now_ms=NOW)
    lg.append_as_leader(build_batch([(b"b", b"committed", [], NOW)], producer_id=9, producer_epoch=0,
                                    base_sequence=1, is_transactional=True), now_ms=NOW)  # producer 9's last
    lg.append_txn_marker(9, 0, 0, commit=True, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()

    def abort_marker():
        return [(h.has_delete_horizon, h.base_timestamp) for _, _, h in lg.batches() if h.base_offset == 1]

    def index_entries():
        return [(t.producer_id, t.first_offset, t.last_offset) for seg in lg.segments for t in seg.txn_index.entries]

    first = clean_log_now(lg, now_ms=NOW)
    assert all(v != b"aborted" for _, _, v in records(lg))
    assert abort_marker() == [(False, NOW)] and index_entries() == [(9, 0, 1)]
    produce(lg, b"c", b"dirty")
    lg.roll()
    second = clean_log_now(lg, first.end_offset, now_ms=NOW + 10)
    assert abort_marker() == [(True, NOW + 10 + 1000)] and index_entries() == []
    produce(lg, b"d", b"dirty")
    lg.roll()
    clean_log_now(lg, second.end_offset, now_ms=NOW + 2000)
    assert abort_marker() == []
    assert latest(records(lg)) == {b"b": (2, b"committed"), b"c": (4, b"dirty"), b"d": (5, b"dirty")}


def test_the_markers_of_a_producer_without_data_stay_empty_for_its_epoch(make_log):
    """Kafka's rule for a producer with only markers here (a transaction that added the partition and wrote
    nothing to it): its marker is stamped, then emptied, never removed, so its epoch survives a rebuild of
    the producer state; a marker of an older epoch than the producer's goes."""
    lg = make_log(**COMPACT, delete_retention_ms=1000)
    lg.append_txn_marker(7, 0, 0, commit=False, now_ms=NOW)
    lg.append_txn_marker(8, 0, 0, commit=True, now_ms=NOW)
    lg.append_txn_marker(8, 1, 0, commit=True, now_ms=NOW)  # producer 8's epoch is 1 now
    produce(lg, b"a", b"value")
    lg.roll()

    def markers():
        return [(h.producer_id, h.producer_epoch, h.records_count, h.has_delete_horizon)
                for _, _, h in lg.batches() if h.is_control]

    first = clean_log_now(lg, now_ms=NOW)
    assert markers() == [(7, 0, 1, True), (8, 0, 1, True), (8, 1, 1, True)]
    produce(lg, b"b", b"dirty")
    lg.roll()
    second = clean_log_now(lg, first.end_offset, now_ms=NOW + 2000)
    assert markers() == [(7, 0, 0, False), (8, 1, 0, False)]
    produce(lg, b"c", b"dirty")
    lg.roll()
    third = clean_log_now(lg, second.end_offset, now_ms=NOW + 4000)
    assert markers() == [(7, 0, 0, False), (8, 1, 0, False)]
    assert third.delete_horizon_ms is None  # an empty marker does not make the log due again


def test_a_truncation_below_the_checkpoint_moves_it_down(make_log):
    from tierlog.storage.cleaner import CleanerConfig, LogCleaner

    lg = make_log(**COMPACT)
    fill(lg, 200)
    tp = (lg.topic, lg.partition)
    cleaner = LogCleaner(CleanerConfig(enable=False), lambda: {tp: lg}, lambda _tp: lg.parent_dir, [lg.parent_dir])
    result = clean_log_now(lg, now_ms=NOW)
    cleaner.checkpoints[lg.parent_dir] = {tp: result.end_offset}
    assert cleaner.checkpoint_of(tp) == result.end_offset
    lg.truncate_to(result.end_offset - 30)
    assert cleaner.checkpoint_of(tp) == result.end_offset - 30
    assert cleaner.checkpoints[lg.parent_dir][tp] == result.end_offset - 30


def test_the_cleaner_threads_clean_in_a_worker_and_swap_on_the_event_loop(make_log):
    import asyncio
    import dataclasses
    import threading

    from tierlog.metrics import MetricsRegistry
    from tierlog.storage.cleaner import CleanerConfig, LogCleaner

    lg = make_log(**COMPACT)
    fill(lg)
    expected = latest(records(lg))
    tp = (lg.topic, lg.partition)
    settings = [CleanerConfig(threads=1, backoff_ms=20)]
    metrics = MetricsRegistry()
    cleaner = LogCleaner(settings[0], lambda: {tp: lg}, lambda _tp: lg.parent_dir, [lg.parent_dir], metrics,
                         config_source=lambda: settings[0])
    cleaner.load_checkpoints([lg.parent_dir])
    swapped_on = set()
    real_replace = lg.replace_segments

    def replace_segments(*args):
        swapped_on.add(threading.current_thread() is threading.main_thread())
        return real_replace(*args)

    lg.replace_segments = replace_segments

    async def until(condition):
        await wait_until_async(condition, 30, interval=0.01, what="the condition")

    async def main():
        cleaner.start()
        await until(lambda: tp in cleaner.last_clean)
        assert cleaner.checkpoint_of(tp) == lg.active_segment.base_offset
        settings[0] = dataclasses.replace(settings[0], threads=3)  # a dynamic change: more threads
        await until(lambda: len([t for t in cleaner._tasks if not t.done()]) == 3)
        await cleaner.stop()

    asyncio.run(main())
    assert swapped_on == {True}  # every swap ran on the event loop's thread
    assert latest(records(lg)) == expected and len(records(lg)) < 100
    with open(os.path.join(lg.parent_dir, "cleaner-offset-checkpoint")) as f:
        assert f.read().split("\n")[2] == f"t 0 {lg.active_segment.base_offset}"
    text = metrics.render()
    assert "kafka_log_logcleanermanager_max_dirty_percent 0.0" in text
    assert 'tierlog_log_cleaner_last_clean_duration_seconds{partition="0",topic="t"}' in text
