"""Records: varints, build/decode round trips, record-level corruption, iter_records."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_testlib import ALL_CODECS, raw_batch, record_lists, stable_record_lists

from tierlog.errors import CorruptMessageError, InvalidRecordError, KafkaError, UnsupportedCompressionTypeError
from tierlog.records import (
    CompressionType,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_batches,
    iter_records,
    patch_log_append_time,
    read_header,
    validate_batches,
)
from tierlog.records.record import size_of_varint, zigzag_decode, zigzag_encode

# Values from the protobuf/Kafka zig-zag definition.
VECTORS = [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
           (64, b"\x80\x01"), (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
           (-(2**31), b"\xff\xff\xff\xff\x0f")]


@pytest.mark.parametrize("value, encoded", VECTORS)
def test_varint_vectors(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))
    assert size_of_varint(value) == len(encoded)


def test_varlong_extremes():
    assert encode_varlong(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(encode_varlong(-(2**63))) == (-(2**63), 10)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value):
    assert decode_varint(encode_varint(value)) == (value, len(encode_varint(value)))
    assert zigzag_decode(zigzag_encode(value)) == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value):
    assert decode_varlong(encode_varlong(value)) == (value, len(encode_varlong(value)))


def test_varint_errors():
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(2**63)
    with pytest.raises(InvalidRecordError, match="varint at byte 2 is longer than 5 bytes"):
        decode_varint(b"\x00\x00" + b"\xff" * 6, 2)
    with pytest.raises(InvalidRecordError, match="varint at byte 0 does not fit in 32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x1f")
    with pytest.raises(InvalidRecordError, match="varlong at byte 0 is truncated"):
        decode_varlong(b"\xff\xff")
    with pytest.raises(InvalidRecordError, match="varint at byte 3 is truncated"):
        decode_varint(b"abc", 3)


def _check(decoded, records, base_offset, ts_type, max_ts, t0, t1):
    assert len(decoded) == len(records)
    for i, (rec, (key, value, headers, ts)) in enumerate(zip(decoded, records)):
        assert rec.offset == base_offset + i
        assert rec.key == key and rec.value == value and rec.headers == headers
        if ts_type is TimestampType.LOG_APPEND_TIME:
            assert rec.timestamp == max_ts
        elif ts is None:
            assert t0 <= rec.timestamp <= t1
        else:
            assert rec.timestamp == ts


@settings(max_examples=40, deadline=None)
@given(records=record_lists, codec=st.sampled_from(ALL_CODECS), base_offset=st.integers(0, 2**62),
       ts_type=st.sampled_from(list(TimestampType)), as_record=st.booleans())
def test_build_decode_round_trip(records, codec, base_offset, ts_type, as_record):
    items = [Record(timestamp=ts, key=k, value=v, headers=h) if as_record else (k, v, h, ts)
             for k, v, h, ts in records]
    t0 = int(time.time() * 1000)
    buf = build_batch(items, base_offset=base_offset, compression=codec, timestamp_type=ts_type)
    t1 = int(time.time() * 1000)
    header, decoded = decode_batch(buf)
    assert header == read_header(buf) and header.compression is codec
    _check(decoded, records, base_offset, ts_type, header.max_timestamp, t0, t1)
    stamps = [r.timestamp for r in decode_batch(buf)[1]] if ts_type is TimestampType.CREATE_TIME else None
    if stamps:
        assert header.base_timestamp == stamps[0] and header.max_timestamp == max(stamps)
    # the same batch through a memoryview, at an offset, and via iter_records
    padded = b"\x01\x02" + buf
    assert decode_batch(memoryview(padded), 2)[1] == decoded
    assert list(iter_records(buf + buf)) == decoded + decoded


def test_tuple_shapes_and_explicit_base_timestamp():
    buf = build_batch([(b"a", b"1"), (b"b", b"2", [("x", b"y")]), (None, None, None, 50)], base_timestamp=10)
    h, recs = decode_batch(buf)
    assert h.base_timestamp == 10
    assert [(r.key, r.value, r.headers) for r in recs] == [(b"a", b"1", []), (b"b", b"2", [("x", b"y")]),
                                                            (None, None, [])]
    assert recs[2].timestamp == 50


def test_build_batch_argument_errors():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(TypeError, match="record 1: key must be bytes"):
        build_batch([(b"k", b"v"), ("text", b"v")])
    with pytest.raises(TypeError, match="record 0: header key"):
        build_batch([(b"k", b"v", [(b"bytes-key", b"v")])])
    with pytest.raises(TypeError, match="record 0: expected a Record or a tuple"):
        build_batch([b"just-bytes"])
    with pytest.raises(UnsupportedCompressionTypeError):
        build_batch([(b"k", b"v")], compression="brotli")


def test_build_batch_accepts_generators_and_unicode_headers():
    buf = build_batch(((b"%d" % i, b"v", [("clé-ü-😀", None)]) for i in range(300)), compression="zstd")
    h, recs = decode_batch(buf)
    assert h.records_count == 300 and recs[299].key == b"299" and recs[0].headers == [("clé-ü-😀", None)]


def test_log_append_time_timestamps_come_from_max_timestamp():
    buf = bytearray(build_batch([(b"k", b"v", [], 5), (b"k", b"v", [], 7)]))
    patch_log_append_time(buf, 0, 1234)
    assert [r.timestamp for r in decode_batch(buf)[1]] == [1234, 1234]


def test_decode_batch_verify_flag():
    buf = bytearray(build_batch([(b"k", b"value")]))
    buf[-2] ^= 1  # inside the value: only the CRC notices
    with pytest.raises(CorruptMessageError, match="stored CRC"):
        decode_batch(buf)
    assert decode_batch(buf, verify=False)[1][0].value == b"valud"


def _rec(body: bytes) -> bytes:
    from tierlog.records.record import encode_varint as ev
    return ev(len(body)) + body


GOOD_BODY = b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"  # attrs, ts 0, off 0, key "k", value "v", 0 headers


@pytest.mark.parametrize("body, count, pattern", [
    (_rec(GOOD_BODY), 2, r"record 1 \(byte 9 of the records data\): varint at byte 9 is truncated"),
    (_rec(GOOD_BODY) * 2, 1, "9 bytes remain after its 1 records"),
    (_rec(GOOD_BODY)[:-1], 1, "record length 8 does not fit"),
    (_rec(b"\x00\x00\x00" + b"\x10k" + b"\x02v" + b"\x00"), 1, "key length 8 runs past"),
    (_rec(b"\x00\x00\x00\x02k\x02v\x02\x01\x01"), 1, "invalid negative header key length -1"),
    (_rec(b"\x00\x00\x00\x02k\x02v\x01"), 1, "invalid number of headers -1"),
    (_rec(b"\x00\x00\x00\x02k\x02v\x02\x02\xff\xfe\x01"), 1, "header key is not valid UTF-8"),
    (_rec(GOOD_BODY + b"\x00"), 1, "record length says 9 bytes but its fields take 8"),
    (_rec(GOOD_BODY), -1, "invalid records count -1"),
])
def test_record_level_corruption_in_crc_valid_batches(body, count, pattern):
    buf = raw_batch(body, count, last_offset_delta=0)
    with pytest.raises(InvalidRecordError, match=pattern) as info:
        decode_batch(buf)
    assert info.value.message.startswith("record batch at position 0 (base offset 0)")


def test_raw_batch_good_body_decodes():
    recs = decode_batch(raw_batch(_rec(GOOD_BODY) * 2, 2))[1]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [(0, 1000, b"k", b"v")] * 2


def test_compressed_record_corruption_names_the_codec():
    from tierlog.records import compress
    body = compress(CompressionType.GZIP, _rec(GOOD_BODY))
    with pytest.raises(InvalidRecordError, match="gzip-decompressed records data"):
        decode_batch(raw_batch(body, 2, attributes=1))
    with pytest.raises(CorruptMessageError, match=r"position 0 \(base offset 0\): cannot decompress gzip"):
        decode_batch(raw_batch(b"not gzip at all", 1, attributes=1))
    with pytest.raises(UnsupportedCompressionTypeError, match="position 0.*id 7"):
        decode_batch(raw_batch(b"x", 1, attributes=7))
    # an emptied (compacted) compressed batch has no records and is not decompressed
    assert decode_batch(raw_batch(b"", 0, attributes=4))[1] == []


def test_iter_records_control_batches_and_tails():
    data = build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0)
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")], base_offset=2, is_control=True,
                         is_transactional=True, producer_id=1, producer_epoch=0)
    more = build_batch([(b"c", b"3")], base_offset=3, compression="lz4")
    log = data + marker + more
    assert [r.offset for r in iter_records(log)] == [0, 1, 3]
    assert [r.offset for r in iter_records(log, skip_control=False)] == [0, 1, 2, 3]
    # a partial trailing batch: an error by default, ignored on request (fetch responses)
    got = []
    with pytest.raises(CorruptMessageError, match=f"{len(more) - 1} bytes at position {len(data) + len(marker)}"):
        for r in iter_records(log[:-1]):
            got.append(r.offset)
    assert got == [0, 1]
    assert [r.offset for r in iter_records(log[:-1], allow_partial_tail=True)] == [0, 1]
    # a corrupt control batch is still noticed when skipped
    bad = bytearray(log)
    bad[len(data) + len(marker) - 1] ^= 1
    with pytest.raises(CorruptMessageError, match=f"position {len(data)} .*stored CRC"):
        list(iter_records(bad))
    assert list(iter_records(b"")) == []


@settings(max_examples=60, deadline=None)
@given(records=stable_record_lists, codec=st.sampled_from(ALL_CODECS), data=st.data())
def test_mutated_batches_only_raise_kafka_errors(records, codec, data):
    """Whatever the bytes, the codec answers with records or a KafkaError, never IndexError & co."""
    buf = bytearray(build_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        buf[data.draw(st.integers(0, len(buf) - 1), label="index")] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        buf = buf[:data.draw(st.integers(0, len(buf)), label="length")]
    for attempt in (lambda: decode_batch(buf, verify=False), lambda: list(iter_records(buf, verify=False)),
                    lambda: validate_batches(buf), lambda: list(iter_batches(buf))):
        try:
            attempt()
        except KafkaError:
            pass
