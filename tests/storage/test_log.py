"""Append, read, roll, offsets and on-disk layout of a partition log."""

import os
import struct
import time

import pytest

from tests.storage.storagelib import batch
from tierlog.errors import (
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnsupportedForMessageFormatError,
)
from tierlog.records import CompressionType, build_batch, decode_batch, iter_batches, iter_records, read_header
from tierlog.storage import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetMovedToTieredStorageError,
)
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile


def all_offsets(lg):
    out = []
    for seg in lg.segments:
        with open(seg.log_path, "rb") as f:
            out += [r.offset for r in iter_records(f.read())]
    return out


def test_append_assigns_offsets_and_reads_back_whole_batches(make_log):
    lg = make_log()
    infos = [lg.append_as_leader(batch(3), leader_epoch=0) for _ in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert lg.log_end_offset == 12 and lg.high_watermark == 0
    lg.update_high_watermark(lg.log_end_offset)
    data = lg.read(4, 1 << 20).read()
    # Reads start at the batch holding the offset and hold whole batches only.
    assert [h.base_offset for _, h in iter_batches(data)] == [3, 6, 9]
    assert [r.offset for r in iter_records(data)] == list(range(3, 12))


def test_files_use_kafka_names_and_batches_are_stored_as_sent(make_log):
    lg = make_log(index_interval_bytes=1)
    sent = batch(2, size=50)
    lg.append_as_leader(sent, leader_epoch=7)
    lg.append_as_leader(batch(1), leader_epoch=7)
    lg.close()
    files = sorted(os.listdir(lg.dir))
    assert "00000000000000000000.log" in files
    assert "00000000000000000000.index" in files
    assert "00000000000000000000.timeindex" in files
    assert "00000000000000000003.snapshot" in files
    with open(os.path.join(lg.dir, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n1\n7 0\n"
    with open(lg.segments[0].log_path, "rb") as f:
        stored = f.read()
    # Only the base offset and partition leader epoch differ; the CRC-covered bytes are untouched.
    assert stored[21:len(sent)] == sent[21:]
    assert struct.unpack_from(">i", stored, 12)[0] == 7
    # index.interval.bytes=1: the second batch got an entry (last offset 2, its position).
    with open(lg.segments[0].offset_index.path, "rb") as f:
        assert struct.unpack(">ii", f.read()) == (2, len(sent))


def test_high_watermark_bounds_consumer_reads(make_log):
    lg = make_log()
    for _ in range(3):
        lg.append_as_leader(batch(2))
    lg.update_high_watermark(4)
    got = lg.read(0, 1 << 20)
    assert [h.last_offset for _, h in iter_batches(got.read())] == [1, 3]
    assert lg.read(4, 1 << 20).size == 0
    assert lg.read(4, 1 << 20, isolation="log_end").size > 0


def test_read_respects_max_bytes_but_returns_at_least_one_batch(make_log):
    lg = make_log()
    sizes = []
    for _ in range(5):
        b = batch(1, size=1000)
        sizes.append(len(b))
        lg.append_as_leader(b)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.read(0, sizes[0] * 2 + 10).size == sizes[0] * 2
    assert lg.read(0, 10).size == sizes[0]  # min one message
    assert lg.read(0, 10, min_one_message=False).size == 0


def test_out_of_range_and_tiered_offsets(make_log):
    lg = make_log()
    lg.append_as_leader(batch(2))
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(3, 100)
    lg.update_high_watermark(2)
    lg.maybe_increment_log_start_offset(1)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    tiered = make_log("tiered-0", remote_storage_enable=True, log_start_offset=0)
    tiered.append_as_leader(batch(1))
    tiered.roll()
    tiered.append_as_leader(batch(1))
    tiered.update_high_watermark(2)
    tiered.highest_offset_in_remote_storage = 0
    tiered.segments[0].size  # noqa: B018
    assert tiered.delete_old_segments(now_ms=10**15) == 1  # copied, and past local retention
    assert tiered.local_log_start_offset == 1 and tiered.log_start_offset == 0
    with pytest.raises(OffsetMovedToTieredStorageError) as e:
        tiered.read(0, 100)
    assert e.value.code == 109


def test_roll_on_segment_bytes_and_index_full(make_log):
    one = len(batch(1, size=100))
    lg = make_log(segment_bytes=one * 3)
    for _ in range(7):
        lg.append_as_leader(batch(1, size=100))
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    assert all(s.size <= one * 3 for s in lg.segments)
    full = make_log("full-0", segment_index_bytes=16, index_interval_bytes=1)
    for _ in range(8):
        full.append_as_leader(batch(1))
    assert all(s.offset_index.entries <= 2 for s in full.segments)
    assert len(full.segments) > 1


def test_roll_on_segment_ms_uses_batch_timestamps(make_log):
    lg = make_log(segment_ms=1000)
    lg.append_as_leader(batch(1, ts=10_000), now_ms=10_000)
    lg.append_as_leader(batch(1, ts=10_500), now_ms=10_500)
    assert len(lg.segments) == 1
    lg.append_as_leader(batch(1, ts=11_001), now_ms=11_001)
    assert [s.base_offset for s in lg.segments] == [0, 2]


def test_bad_batches_are_refused_without_touching_the_log(make_log):
    lg = make_log(max_message_bytes=200)
    with pytest.raises(MessageTooLargeError):
        lg.append_as_leader(batch(1, size=500))
    v1 = bytearray(batch(1))
    v1[16] = 1
    with pytest.raises(UnsupportedForMessageFormatError):
        lg.append_as_leader(bytes(v1))
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(batch(1, ts=10**13), now_ms=1000)
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0


def test_log_append_time_patches_batches_and_keeps_crc_valid(make_log):
    lg = make_log(message_timestamp_type="LogAppendTime")
    info = lg.append_as_leader(batch(3, ts=5), now_ms=123456)
    assert info.log_append_time == 123456
    lg.update_high_watermark(3)
    h, recs = decode_batch(lg.read(0, 1000).read(), 0, verify=True)
    assert h.max_timestamp == 123456 and h.timestamp_type == 1
    assert [r.timestamp for r in recs] == [123456] * 3


def test_list_offsets_special_values_and_by_timestamp(make_log):
    lg = make_log(index_interval_bytes=1, segment_bytes=400)
    for i in range(10):
        lg.append_as_leader(batch(2, ts=1000 + 100 * i))
    lg.update_high_watermark(lg.log_end_offset)
    assert len(lg.segments) > 2
    assert lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert lg.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 20
    assert lg.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP).offset == 0
    got = lg.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (got.timestamp, got.offset) == (1900, 18)
    for target, want in [(0, 0), (1000, 0), (1001, 2), (1450, 10), (1900, 18)]:
        got = lg.fetch_offset_by_timestamp(target)
        assert got.offset == want, target
    assert lg.fetch_offset_by_timestamp(1901) is None


def test_earliest_pending_upload_is_kafka_4_3s(make_log):
    """ListOffsets -6 (KIP-1023): the next offset to upload, never below the log start; with nothing uploaded
    the log start while nothing was deleted locally, else -1; -1 without remote storage."""
    plain = make_log("plain-0")
    plain.append_as_leader(batch(2))
    assert plain.fetch_offset_by_timestamp(EARLIEST_PENDING_UPLOAD_TIMESTAMP).offset == -1
    lg = make_log("tiered-0", remote_storage_enable=True, retention_ms=-1, local_retention_ms=0)
    for _ in range(3):
        lg.append_as_leader(batch(2))
        lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    pending = lambda: lg.fetch_offset_by_timestamp(EARLIEST_PENDING_UPLOAD_TIMESTAMP)  # noqa: E731
    assert (pending().offset, pending().leader_epoch) == (0, lg.leader_epoch_cache.epoch_for_offset(0))
    lg.highest_offset_in_remote_storage = 3  # two segments uploaded
    assert pending().offset == 4
    lg.delete_old_segments(now_ms=10**15)
    assert lg.local_log_start_offset == 4 and lg.log_start_offset == 0 and pending().offset == 4
    lg.highest_offset_in_remote_storage = -1  # uploads deleted locally but not known (yet)
    assert pending().offset == -1
    lg.highest_offset_in_remote_storage = 3
    lg.maybe_increment_log_start_offset(5)
    assert pending().offset == 5  # never below the log start


def test_max_timestamp_points_at_exact_record(make_log):
    from tierlog.records import build_batch
    lg = make_log()
    lg.append_as_leader(build_batch([(b"a", b"1", [], 50), (b"b", b"2", [], 90), (b"c", b"3", [], 70)]))
    got = lg.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (got.timestamp, got.offset) == (90, 1)
    got = lg.fetch_offset_by_timestamp(60)
    assert (got.timestamp, got.offset) == (90, 1)


def test_delete_records_moves_log_start_and_drops_whole_segments(make_log):
    lg = make_log(segment_bytes=len(batch(2)) * 2)
    for _ in range(6):
        lg.append_as_leader(batch(2))
    lg.update_high_watermark(lg.log_end_offset)
    bases = [s.base_offset for s in lg.segments]
    assert bases == [0, 4, 8]
    with pytest.raises(OffsetOutOfRangeError):
        lg.maybe_increment_log_start_offset(13)
    assert lg.maybe_increment_log_start_offset(5) == 5
    assert [s.base_offset for s in lg.segments] == [4, 8]
    assert lg.read(5, 1000).first_batch_offset == 4  # the batch holding offset 5
    assert lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 5


def test_truncate_to_removes_batches_and_later_segments(make_log):
    lg = make_log(segment_bytes=len(batch(2)) * 2)
    for e in range(6):
        lg.append_as_leader(batch(2), leader_epoch=e)
    lg.truncate_to(6)
    assert lg.log_end_offset == 6
    assert [s.base_offset for s in lg.segments] == [0, 4]
    assert lg.leader_epoch_cache.entries == [(0, 0), (1, 2), (2, 4)]
    lg.append_as_leader(batch(1), leader_epoch=9)
    assert lg.log_end_offset == 7
    lg.update_high_watermark(7)
    assert all_offsets(lg) == list(range(7))


def test_offsets_for_leader_epoch(make_log):
    lg = make_log()
    lg.append_as_leader(batch(3), leader_epoch=1)
    lg.append_as_leader(batch(2), leader_epoch=3)
    cache = lg.leader_epoch_cache
    assert cache.end_offset_for(1, lg.log_end_offset) == (1, 3)
    assert cache.end_offset_for(2, lg.log_end_offset) == (1, 3)
    assert cache.end_offset_for(3, lg.log_end_offset) == (3, 5)
    # As Kafka's LeaderEpochFileCache: an epoch older than the first answers the first one's start offset,
    # one newer than the latest is unknown.
    assert cache.end_offset_for(0, lg.log_end_offset) == (0, 0)
    assert cache.end_offset_for(4, lg.log_end_offset) == (-1, -1)


def test_a_new_terms_epoch_is_synced_before_the_recovery_point_passes_its_records(make_log, monkeypatch):
    """A leader's new term writes its epoch without fsync (thousands of partitions change leaders at once);
    the checkpoint is synced, once, before a flush moves the recovery point past records of that epoch."""
    lg = make_log()
    synced = []
    monkeypatch.setattr(LeaderEpochCheckpointFile, "sync", lambda self: synced.append(self.path))
    lg.leader_epoch_cache.assign(5, lg.log_end_offset, sync=False)
    lg.append_as_leader(batch(2), leader_epoch=5)
    assert synced == []
    lg.flush()
    path = os.path.join(lg.dir, "leader-epoch-checkpoint")
    assert synced == [path]
    lg.append_as_leader(batch(1), leader_epoch=5)
    lg.flush()
    assert synced == [path]  # nothing new to sync
    assert LeaderEpochCheckpointFile(path).read() == [(5, 0)]


@pytest.mark.parametrize("stored", ["zstd", "lz4", "uncompressed"])
def test_a_topic_compression_type_recompresses_batches_and_keeps_every_field(make_log, stored):
    """compression.type on the topic: the broker stores batches in that codec (Kafka's LogValidator);
    records, timestamps, producer id, epoch and sequence come back unchanged and the CRC is valid."""
    lg = make_log(compression_type=stored, compression_zstd_level=5)
    now = int(time.time() * 1000)
    sent = build_batch([(b"k%d" % i, b"value-%d" % i * 20, [("h", b"x")], now - 100 + i) for i in range(50)],
                       compression="gzip", producer_id=7, producer_epoch=2, base_sequence=0)
    lg.append_as_leader(sent, leader_epoch=3)
    lg.append_as_leader(batch(2, compression=stored if stored != "uncompressed" else "none"), leader_epoch=3)
    lg.update_high_watermark(lg.log_end_offset)
    data = lg.read(0, 1 << 20).read()
    (_, first), (_, second) = list(iter_batches(data))
    want = CompressionType.NONE if stored == "uncompressed" else CompressionType.from_name(stored)
    assert first.compression is want and second.compression is want
    original, records = decode_batch(sent)
    stored_header, stored_records = decode_batch(data[:first.size])  # verifies the CRC
    assert [(r.key, r.value, r.headers, r.timestamp) for r in stored_records] == \
        [(r.key, r.value, r.headers, r.timestamp) for r in records]
    assert (stored_header.producer_id, stored_header.producer_epoch, stored_header.base_sequence,
            stored_header.base_timestamp, stored_header.max_timestamp, stored_header.records_count) == \
        (7, 2, 0, original.base_timestamp, original.max_timestamp, 50)
    assert stored_header.partition_leader_epoch == 3


def test_producer_compression_type_stores_batches_as_sent(make_log):
    lg = make_log(compression_type="producer")
    sent = batch(5, compression="gzip")
    lg.append_as_leader(sent)
    with open(lg.segments[0].log_path, "rb") as f:
        stored = f.read()
    # the same bytes apart from the partition leader epoch the broker patches in (the CRC excludes it)
    assert stored[:12] == sent[:12] and stored[16:] == sent[16:]
    assert read_header(lg.read(0, 1 << 20, isolation="log_end").read()).compression is CompressionType.GZIP


def test_a_recompressed_batch_over_max_message_bytes_is_refused(make_log):
    values = [(None, b"a" * 100) for _ in range(10)]
    small = build_batch(values, compression="zstd")
    lg = make_log(compression_type="uncompressed", max_message_bytes=len(small) + 10)
    with pytest.raises(MessageTooLargeError):
        lg.append_as_leader(small)  # about 1 KiB once decompressed
    assert lg.log_end_offset == 0


def test_every_new_segment_draws_its_own_roll_jitter_below_segment_jitter_ms(make_log):
    lg = make_log(segment_bytes=len(batch(1)), segment_ms=10**9, segment_jitter_ms=10**6)
    for _ in range(30):
        lg.append_as_leader(batch(1))
    jitters = [s.roll_jitter_ms for s in lg.segments]
    assert len(jitters) >= 30 and all(0 <= j < 10**6 for j in jitters)
    assert len(set(jitters)) > 1
    assert {s.roll_jitter_ms for s in make_log("none-0", segment_jitter_ms=0).segments} == {0}
