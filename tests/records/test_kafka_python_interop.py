"""Cross-check against an independent encoder/decoder: kafka-python's record batch v2 code.

Both directions, for every codec whose kafka-python backend is installed (python-snappy, lz4 and
zstandard in the ``test`` extra; gzip is the standard library).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_testlib import ALL_CODECS, payload, record_lists

from tierlog.records import (
    CompressionType,
    TimestampType,
    build_batch,
    compress,
    decode_batch,
    decompress,
    iter_records,
    patch_log_append_time,
    read_header,
    validate_batches,
)

kcodec = pytest.importorskip("kafka.codec")
default_records = pytest.importorskip("kafka.record.default_records")
memory_records = pytest.importorskip("kafka.record.memory_records")

_AVAILABLE = {
    CompressionType.NONE: True,
    CompressionType.GZIP: kcodec.has_gzip(),
    CompressionType.SNAPPY: kcodec.has_snappy(),
    CompressionType.LZ4: kcodec.has_lz4(),
    CompressionType.ZSTD: kcodec.has_zstd(),
}
CODECS = [pytest.param(c, marks=pytest.mark.skipif(not _AVAILABLE[c], reason=f"kafka-python has no {c.name_lower}"))
          for c in ALL_CODECS]
WORKING = [c for c in ALL_CODECS if _AVAILABLE[c]]

_ENCODE = {CompressionType.GZIP: "gzip_encode", CompressionType.SNAPPY: "snappy_encode",
           CompressionType.LZ4: "lz4_encode", CompressionType.ZSTD: "zstd_encode"}
_DECODE = {CompressionType.GZIP: "gzip_decode", CompressionType.SNAPPY: "snappy_decode",
           CompressionType.LZ4: "lz4_decode", CompressionType.ZSTD: "zstd_decode"}


def their_batch(records, codec, *, producer=None, fixed_ts=1_700_000_000_000):
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30)
    if producer is not None:
        builder.set_producer_state(*producer)
    for offset, (key, value, headers, ts) in enumerate(records):
        meta = builder.append(offset, timestamp=fixed_ts if ts is None else ts, key=key, value=value,
                              headers=list(headers))
        assert meta is not None
    return bytes(builder.build())


def their_records(buf):
    out = []
    records = memory_records.MemoryRecords(bytes(buf))
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch)
    return out


def ours(buf, **kwargs):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(buf, **kwargs)]


@settings(max_examples=25, deadline=None)
@given(records=record_lists, codec=st.sampled_from(WORKING))
def test_we_read_kafka_python_batches(records, codec):
    buf = their_batch(records, codec)
    (header,) = validate_batches(buf)  # their producer batches pass our produce validation
    # kafka-python sends uncompressed when compression does not shrink the data
    assert header.compression in (codec, CompressionType.NONE)
    assert header.records_count == len(records)
    assert ours(buf) == their_records(buf)
    got = decode_batch(buf)[1]
    assert [(r.key, r.value, r.headers) for r in got] == [(k, v, h) for k, v, h, _ in records]


@settings(max_examples=25, deadline=None)
@given(records=record_lists, codec=st.sampled_from(WORKING), base_offset=st.integers(0, 2**40),
       log_append=st.booleans())
def test_kafka_python_reads_our_batches(records, codec, base_offset, log_append):
    buf = bytearray(build_batch(records, compression=codec, base_offset=base_offset))
    if log_append:
        patch_log_append_time(buf, 0, 1_234_567)
    theirs = their_records(buf)
    assert theirs == ours(buf)
    assert [(k, v, h) for _, _, k, v, h in theirs] == [(k, v, h) for k, v, h, _ in records]
    assert [o for o, *_ in theirs] == list(range(base_offset, base_offset + len(records)))
    if log_append:
        assert {t for _, t, *_ in theirs} == {1_234_567}


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_both_ways(codec):
    records = [(b"key-%d" % i, payload(3000, i, True), [("n", b"%d" % i), ("null", None)], 1000 + i)
               for i in range(50)]
    theirs = their_batch(records, codec, producer=(42, 3, 100, True))
    header = read_header(theirs)
    assert header.compression is codec  # compressible data: they really compressed it
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 100)
    assert header.is_transactional and header.last_sequence == 149
    assert ours(theirs) == their_records(theirs)

    mine = build_batch(records, compression=codec, producer_id=42, producer_epoch=3, base_sequence=100,
                       is_transactional=True)
    batch = memory_records.MemoryRecords(mine).next_batch()
    assert (batch.compression_type, batch.producer_id, batch.producer_epoch, batch.base_sequence) == \
        (int(codec), 42, 3, 100)
    assert batch.is_transactional and batch.last_sequence == 149
    assert their_records(mine) == ours(theirs)
    if codec is CompressionType.NONE:
        # identical bytes, apart from the partition leader epoch kafka-python sets to 0 (we write -1)
        assert mine[16:] == theirs[16:]


def test_multi_batch_log_and_control_records():
    log = b"".join([
        build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, compression="gzip"),
        build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07")], base_offset=2, is_control=True,
                    is_transactional=True, producer_id=5, producer_epoch=1),
        build_batch([(b"c", b"3")], base_offset=3, compression="lz4" if _AVAILABLE[CompressionType.LZ4] else 0),
    ])
    records = memory_records.MemoryRecords(log)
    kinds = []
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            kinds.append((type(r).__name__, r.offset))
    assert kinds == [("DefaultRecord", 0), ("DefaultRecord", 1), ("ControlRecord", 2), ("DefaultRecord", 3)]
    control = [r for r in iter_records(log, skip_control=False) if r.offset == 2][0]
    assert control.key == b"\x00\x00\x00\x01"  # version 0, type 1 = COMMIT


@pytest.mark.parametrize("codec", [c for c in CODECS if c.values[0] is not CompressionType.NONE])
def test_raw_codec_streams_both_ways(codec):
    data = payload(150_000, 9, True)
    assert getattr(kcodec, _DECODE[codec])(compress(codec, data)) == data
    assert decompress(codec, getattr(kcodec, _ENCODE[codec])(data)) == data


@pytest.mark.skipif(not kcodec.has_snappy(), reason="python-snappy not installed")
def test_snappy_raw_and_xerial_from_kafka_python():
    data = payload(100_000, 10, False)
    xerial = kcodec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=32 * 1024)
    assert compress(CompressionType.SNAPPY, data) == xerial  # same framing, same blocks
    assert decompress(CompressionType.SNAPPY, xerial) == data
    assert decompress(CompressionType.SNAPPY, kcodec.snappy_encode(data, xerial_compatible=False)) == data


@pytest.mark.skipif(not kcodec.has_lz4(), reason="lz4 not installed")
def test_lz4_frames_decode_with_reference_liblz4():
    import lz4.frame

    for level in (None, 1, 9, 12, 17):
        data = payload(200_000, 11, True)
        assert lz4.frame.decompress(compress(CompressionType.LZ4, data, level)) == data
    # and frames with content size / linked blocks from other writers decode here
    assert decompress(CompressionType.LZ4, lz4.frame.compress(data, block_linked=True)) == data


def test_log_append_time_attribute_seen_by_kafka_python():
    buf = bytearray(build_batch([(b"k", b"v", [], 5)]))
    patch_log_append_time(buf, 0, 99)
    batch = memory_records.MemoryRecords(bytes(buf)).next_batch()
    assert batch.timestamp_type == int(TimestampType.LOG_APPEND_TIME) and batch.validate_crc()
