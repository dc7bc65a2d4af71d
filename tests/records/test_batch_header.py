"""Batch headers: fields, CRC, iteration, produce validation and in-place patching."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_testlib import ALL_CODECS, fix_crc, raw_batch, record_lists, set_field, stable_record_lists

from tierlog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.records import (
    ATTRIBUTES_POS,
    BASE_OFFSET_POS,
    BASE_SEQUENCE_POS,
    BASE_TIMESTAMP_POS,
    CRC_POS,
    LAST_OFFSET_DELTA_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    PARTITION_LEADER_EPOCH_POS,
    PRODUCER_EPOCH_POS,
    PRODUCER_ID_POS,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_POS,
    BatchHeader,
    CompressionType,
    TimestampType,
    build_batch,
    decode_batch,
    iter_batches,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_header,
    validate_batches,
    verify_crc,
)

FAST = settings(max_examples=40, deadline=None)


def small_batch(**kwargs) -> bytes:
    return build_batch([(b"key", b"value", [("h", b"1")], 1_700_000_000_000),
                        (None, b"v2", [], 1_700_000_000_005)], **kwargs)


def test_constants_match_kafka_layout():
    assert (LOG_OVERHEAD, RECORD_BATCH_OVERHEAD) == (12, 61)
    assert [BASE_OFFSET_POS, LENGTH_POS, PARTITION_LEADER_EPOCH_POS, MAGIC_POS, CRC_POS, ATTRIBUTES_POS,
            LAST_OFFSET_DELTA_POS, BASE_TIMESTAMP_POS, MAX_TIMESTAMP_POS, PRODUCER_ID_POS, PRODUCER_EPOCH_POS,
            BASE_SEQUENCE_POS, RECORDS_COUNT_POS] == [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57]
    assert BatchHeader._fields == ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                                   "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                                   "producer_id", "producer_epoch", "base_sequence", "records_count")


@FAST
@given(
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    codec=st.sampled_from(ALL_CODECS),
    transactional=st.booleans(),
    control=st.booleans(),
    ts_type=st.sampled_from(list(TimestampType)),
    n=st.integers(1, 30),
    base_ts=st.integers(0, 2**45),
)
def test_header_fields_round_trip(base_offset, epoch, producer_id, producer_epoch, base_sequence, codec,
                                  transactional, control, ts_type, n, base_ts):
    stamps = [base_ts + (i * 7919) % 1000 for i in range(n)]
    buf = build_batch([(b"k", b"v" * i, [], ts) for i, ts in enumerate(stamps)], base_offset=base_offset,
                      compression=codec, producer_id=producer_id, producer_epoch=producer_epoch,
                      base_sequence=base_sequence, partition_leader_epoch=epoch, is_transactional=transactional,
                      is_control=control, timestamp_type=ts_type)
    h = read_header(buf)
    assert h.base_offset == base_offset and h.partition_leader_epoch == epoch and h.magic == 2
    assert h.size == len(buf) and h.batch_length == len(buf) - 12
    assert h.compression is codec and h.timestamp_type is ts_type
    assert h.is_transactional is transactional and h.is_control is control and not h.has_delete_horizon
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, producer_epoch, base_sequence)
    assert h.records_count == n and h.last_offset_delta == n - 1
    assert h.last_offset == base_offset + n - 1 and h.next_offset == base_offset + n
    assert h.base_timestamp == stamps[0] and h.max_timestamp == max(stamps)
    expected_last_seq = -1 if base_sequence == -1 else (base_sequence + n - 1) % 2**31
    assert h.last_sequence == expected_last_seq
    verify_crc(buf)
    verify_crc(memoryview(buf), 0, h)


@pytest.mark.parametrize("base, delta, last", [
    (-1, 5, -1), (0, 0, 0), (10, 4, 14), (2**31 - 1, 0, 2**31 - 1), (2**31 - 1, 1, 0), (2**31 - 2, 3, 1),
])
def test_last_sequence_wraps_like_kafka(base, delta, last):
    h = read_header(small_batch())._replace(base_sequence=base, last_offset_delta=delta)
    assert h.last_sequence == last


def test_delete_horizon_and_unknown_codec_attributes():
    h = read_header(small_batch())
    assert h._replace(attributes=0x40).has_delete_horizon
    with pytest.raises(UnsupportedCompressionTypeError, match="id 5"):
        _ = h._replace(attributes=5).compression


def test_header_read_at_offset_and_from_memoryview_needs_only_61_bytes():
    a, b = small_batch(), small_batch(base_offset=2)
    buf = b"\x00" * 7 + a + b
    assert read_header(buf, 7 + len(a)).base_offset == 2
    # storage recovery reads headers before the rest of the batch is loaded
    assert read_header(memoryview(b)[:61]) == read_header(b)


@pytest.mark.parametrize("magic", [0, 1])
def test_magic_0_and_1_are_refused_with_unsupported_for_message_format(magic):
    # A legacy message: offset, size, crc, magic, attributes, [timestamp], key -1, value.
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic else b"") + struct.pack(">ii", -1, 1) + b"x"
    legacy = struct.pack(">qiI", 0, 4 + len(body), 0) + body
    for buf, pos in [(legacy, 0), (small_batch() + legacy, len(small_batch())),
                     (legacy + b"\x00" * 100, 0)]:
        with pytest.raises(UnsupportedForMessageFormatError) as info:
            read_header(buf, pos)
        msg = info.value.message
        assert f"magic {magic}" in msg and f"position {pos}" in msg and "record batch v2" in msg
        assert info.value.code == 43
        with pytest.raises(UnsupportedForMessageFormatError):
            list(iter_batches(buf))
        with pytest.raises(UnsupportedForMessageFormatError):
            validate_batches(buf)


@pytest.mark.parametrize("magic", [3, 127, -1])
def test_unknown_magic_is_corrupt(magic):
    buf = bytearray(small_batch())
    buf[MAGIC_POS] = magic & 0xFF
    with pytest.raises(CorruptMessageError, match=f"position 0 .*unknown magic {magic}"):
        read_header(buf)


@pytest.mark.parametrize("length", [48, 0, -5])
def test_batch_length_below_minimum_is_corrupt(length):
    buf = bytearray(small_batch())
    struct.pack_into(">i", buf, LENGTH_POS, length)
    with pytest.raises(CorruptMessageError, match=f"batch length {length}.*minimum 49"):
        read_header(buf)
    with pytest.raises(CorruptMessageError):
        list(iter_batches(buf))


def test_truncated_headers():
    buf = small_batch()
    for cut in range(0, 17):
        with pytest.raises(CorruptMessageError, match="position 0 is truncated"):
            read_header(buf[:cut])
    for cut in range(17, 61):
        with pytest.raises(CorruptMessageError, match="truncated.*needs 61"):
            read_header(buf[:cut])
    with pytest.raises(CorruptMessageError, match=f"position {len(buf) + 5} is truncated: 0 bytes"):
        read_header(buf, len(buf) + 5)
    with pytest.raises(ValueError):
        read_header(buf, -1)


def test_verify_crc_on_truncated_batch_is_corrupt():
    buf = small_batch()
    for cut in (61, len(buf) - 1):
        with pytest.raises(CorruptMessageError, match=r"position 0 \(base offset 0\) is truncated"):
            verify_crc(buf[:cut])


@settings(max_examples=25, deadline=None)
@given(records=stable_record_lists, codec=st.sampled_from(ALL_CODECS), data=st.data())
def test_any_flipped_byte_in_crc_range_is_detected(records, codec, data):
    buf = bytearray(build_batch(records, compression=codec, base_offset=40))
    verify_crc(buf)
    index = data.draw(st.integers(ATTRIBUTES_POS, len(buf) - 1), label="index")
    buf[index] ^= data.draw(st.integers(1, 255), label="mask")
    with pytest.raises(CorruptMessageError) as info:
        verify_crc(buf)
    assert "position 0 (base offset 40) is corrupt: stored CRC" in info.value.message
    assert "computed" in info.value.message


def test_every_single_byte_flip_of_one_batch_is_detected_or_outside_the_crc():
    buf = bytearray(small_batch(compression=CompressionType.LZ4))
    for index in range(len(buf)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(buf)
            flipped[index] ^= mask
            if index < LENGTH_POS or PARTITION_LEADER_EPOCH_POS <= index < MAGIC_POS:
                verify_crc(flipped)  # base offset and leader epoch are outside the CRC
            else:
                with pytest.raises(KafkaError):
                    verify_crc(flipped)


def test_flipped_crc_field_is_detected():
    buf = bytearray(small_batch())
    buf[CRC_POS + 2] ^= 0x10
    with pytest.raises(CorruptMessageError, match="stored CRC"):
        verify_crc(buf)


def test_iter_batches_positions_and_partial_tail():
    batches = [small_batch(base_offset=i * 2, compression=c) for i, c in enumerate(ALL_CODECS)]
    log = b"".join(batches)
    starts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    got = list(iter_batches(log))
    assert [p for p, _ in got] == starts
    assert [h.base_offset for _, h in got] == [0, 2, 4, 6, 8]
    # every possible truncation stops quietly after the last complete batch
    for cut in range(len(log)):
        complete = [s for s, b in zip(starts, batches) if s + len(b) <= cut]
        assert [p for p, _ in iter_batches(log[:cut])] == complete
    # start and end bounds
    assert [p for p, _ in iter_batches(log, starts[1], starts[3])] == starts[1:3]
    assert list(iter_batches(log, len(log))) == []


def test_validate_batches_accepts_a_normal_produce():
    for codec in ALL_CODECS:
        buf = small_batch(compression=codec, producer_id=7, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
        (h,) = validate_batches(buf)
        assert h.records_count == 2 and h.compression is codec
        assert validate_batches(memoryview(buf)) == [h]


def test_validate_batches_rejections():
    ok = small_batch()
    with pytest.raises(InvalidRecordError, match="no record batch"):
        validate_batches(b"")
    with pytest.raises(InvalidRecordError, match="2 record batches"):
        validate_batches(ok + ok)
    assert len(validate_batches(ok + ok, allow_multiple_batches=True)) == 2
    for cut in range(1, len(ok)):
        with pytest.raises(CorruptMessageError, match="position 0"):
            validate_batches(ok[:cut])
    for extra in (b"\x00", ok[:16], ok[:17], ok[:-1]):
        with pytest.raises(CorruptMessageError, match=f"position {len(ok)}"):
            validate_batches(ok + extra)
    with pytest.raises(MessageTooLargeError, match=f"position 0 .*{len(ok)} bytes, more than the maximum 80"):
        validate_batches(ok, max_batch_bytes=80)
    assert validate_batches(ok, max_batch_bytes=len(ok))

    corrupt = bytearray(ok)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptMessageError, match="stored CRC"):
        validate_batches(corrupt)

    moved = bytearray(ok)
    patch_base_offset(moved, 0, 5)
    with pytest.raises(InvalidRecordError, match="base offset 0, not 5"):
        validate_batches(moved)

    with pytest.raises(InvalidRecordError, match="control batch"):
        validate_batches(small_batch(is_control=True, producer_id=1, producer_epoch=0, base_sequence=0))
    with pytest.raises(InvalidRecordError, match="producer id 3 but invalid base sequence -1"):
        validate_batches(small_batch(producer_id=3, producer_epoch=0))

    for fmt, pos, value, pattern in [
        (">i", RECORDS_COUNT_POS, 3, "records count 3 but last offset delta 1"),
        (">i", RECORDS_COUNT_POS, 0, "invalid records count 0"),
        (">i", LAST_OFFSET_DELTA_POS, -1, "invalid last offset delta -1"),
        (">h", ATTRIBUTES_POS, 6, "undefined compression type id 6"),
    ]:
        bad = bytearray(ok)
        set_field(bad, fmt, pos, value)
        verify_crc(bad)
        with pytest.raises((InvalidRecordError, UnsupportedCompressionTypeError), match=pattern) as info:
            validate_batches(bad)
        assert "position 0 (base offset 0)" in info.value.message


def test_validate_batches_reports_the_position_of_the_second_batch():
    ok = small_batch()
    bad = bytearray(ok + ok)
    bad[-3] ^= 0x55
    with pytest.raises(CorruptMessageError, match=f"position {len(ok)}"):
        validate_batches(bad, allow_multiple_batches=True)


def test_patch_base_offset_and_epoch_do_not_touch_the_crc():
    prefix = b"\xaa" * 5
    for codec in ALL_CODECS:
        orig = prefix + small_batch(compression=codec)
        buf = bytearray(orig)
        view = memoryview(buf)
        patch_base_offset(view, 5, 2**40 + 3)
        patch_partition_leader_epoch(buf, 5, 17)
        h = read_header(buf, 5)
        assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (2**40 + 3, 17, 2**40 + 4)
        verify_crc(buf, 5)
        # only the two fields changed
        assert buf[:5] == prefix and buf[5 + 16:] == orig[5 + 16:] and buf[5 + 8:5 + 12] == orig[5 + 8:5 + 12]
        assert [r.offset for r in decode_batch(buf, 5)[1]] == [2**40 + 3, 2**40 + 4]


def test_patches_need_a_writable_buffer():
    with pytest.raises(TypeError):
        patch_base_offset(small_batch(), 0, 1)
    with pytest.raises(TypeError):
        patch_log_append_time(small_batch(), 0, 1)


@FAST
@given(records=record_lists, codec=st.sampled_from(ALL_CODECS), now=st.integers(0, 2**45),
       transactional=st.booleans(), control=st.booleans())
def test_patch_log_append_time_keeps_crc_valid(records, codec, now, transactional, control):
    orig = build_batch(records, compression=codec, is_transactional=transactional, is_control=control,
                       producer_id=1, producer_epoch=0, base_sequence=0)
    buf = bytearray(b"\x00" * 3 + orig)
    patch_log_append_time(buf, 3, now)
    h = read_header(buf, 3)
    verify_crc(buf, 3)
    before = read_header(orig)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.max_timestamp == now
    assert h.compression is codec and h.is_transactional is transactional and h.is_control is control
    assert h._replace(attributes=0, max_timestamp=0, crc=0) == before._replace(attributes=0, max_timestamp=0, crc=0)
    assert buf[3 + RECORD_BATCH_OVERHEAD:] == orig[RECORD_BATCH_OVERHEAD:]  # records untouched
    assert all(r.timestamp == now for r in decode_batch(buf, 3)[1])


def test_patch_log_append_time_is_a_no_op_when_already_stamped():
    buf = bytearray(small_batch())
    patch_log_append_time(buf, 0, 42)
    stamped = bytes(buf)
    patch_log_append_time(stamped, 0, 42)  # no write, so even read-only bytes are fine
    patch_log_append_time(buf, 0, 43)
    assert read_header(buf).max_timestamp == 43
    verify_crc(buf)


def test_patch_log_append_time_clears_unused_attribute_bits_like_kafka():
    buf = bytearray(small_batch(compression=CompressionType.GZIP))
    set_field(buf, ">h", ATTRIBUTES_POS, 0x0181)  # gzip plus unused bits 7 and 8
    patch_log_append_time(buf, 0, 9)
    assert read_header(buf).attributes == 0x09
    verify_crc(buf)


def test_patch_log_append_time_on_truncated_batch():
    buf = bytearray(small_batch())
    with pytest.raises(CorruptMessageError, match="truncated"):
        patch_log_append_time(buf[:-1], 0, 5)


def test_raw_batch_helper_is_valid():
    buf = raw_batch(b"", 0)
    fix_crc(buf)
    verify_crc(buf)
    assert read_header(buf).records_count == 0
    assert BASE_TIMESTAMP_POS == 27 and MAX_TIMESTAMP_POS == 35 and PRODUCER_ID_POS == 43
    assert PRODUCER_EPOCH_POS == 51
