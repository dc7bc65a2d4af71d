"""Codecs: round trips, Kafka levels and names, xerial snappy framing, corrupt input."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_testlib import ALL_CODECS, payload

from tierlog.errors import CorruptMessageError, UnsupportedCompressionTypeError
from tierlog.records import CompressionType, compress, decompress
from tierlog.records.compression import XERIAL_BLOCK_SIZE, XERIAL_MAGIC

data_strategy = st.one_of(
    st.just(b""),
    st.binary(max_size=300),
    st.builds(payload, st.integers(1, 300_000), st.integers(0, 2**32), st.booleans()),
)


@settings(max_examples=30, deadline=None)
@given(data=data_strategy, codec=st.sampled_from(ALL_CODECS),
       wrap=st.sampled_from([bytes, bytearray, memoryview]))
def test_round_trip_every_codec(data, codec, wrap):
    packed = compress(codec, wrap(data))
    assert isinstance(packed, bytes)
    assert decompress(codec, wrap(packed)) == data


@pytest.mark.parametrize("codec, levels", [
    (CompressionType.GZIP, [-1, 1, 5, 9]),
    (CompressionType.LZ4, [1, 2, 9, 12, 17]),
    (CompressionType.ZSTD, [-5, 1, 3, 19]),
    (CompressionType.SNAPPY, [None, 3]),
    (CompressionType.NONE, [None, 3]),
])
def test_valid_levels(codec, levels):
    data = payload(50_000, 1, True)
    for level in levels:
        assert decompress(codec, compress(codec, data, level)) == data


@pytest.mark.parametrize("codec, level", [
    (CompressionType.GZIP, 0), (CompressionType.GZIP, 10), (CompressionType.GZIP, -2),
    (CompressionType.LZ4, 0), (CompressionType.LZ4, 18), (CompressionType.ZSTD, 23),
    (CompressionType.ZSTD, -131073),
])
def test_invalid_levels(codec, level):
    with pytest.raises(ValueError, match=f"{codec.name_lower} compression level {level}"):
        compress(codec, b"abc", level)


def test_kafka_default_levels():
    data = payload(200_000, 2, True)
    # gzip -1 is zlib's default, 6
    assert compress("gzip", data) == compress("gzip", data, -1) == compress("gzip", data, 6)
    # lz4's Kafka default 9 is lz4's fast compressor, not HC level 9
    assert compress("lz4", data) == compress("lz4", data, 9) == compress("lz4", data, 1)
    assert len(compress("lz4", data, 9)) > len(compress("lz4", data, 8))
    assert compress("zstd", data) == compress("zstd", data, 3)


def test_lz4_frames_use_independent_blocks():
    # Kafka's Lz4BlockInputStream refuses dependent blocks: FLG bit 5 must be set, version 01.
    frame = compress(CompressionType.LZ4, payload(300_000, 3, True))
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg = frame[4]
    assert flg & 0x20 and flg >> 6 == 1 and flg & 0x03 == 0
    assert frame[5] == 0x40  # BD: 64 KiB blocks, as Kafka's writer


def test_names_and_ids():
    for codec in CompressionType:
        assert CompressionType.from_name(codec.name_lower) is codec
        assert CompressionType.from_id(int(codec)) is codec
    assert [c.name_lower for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert CompressionType.from_name("ZSTD") is CompressionType.ZSTD
    for bad in ("brotli", "", "producer", "uncompressed"):
        with pytest.raises(UnsupportedCompressionTypeError, match="unknown compression type"):
            CompressionType.from_name(bad)
    for bad in (5, 7, -1):
        with pytest.raises(UnsupportedCompressionTypeError, match=f"id {bad}"):
            CompressionType.from_id(bad)
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(6, b"x")
    assert compress(2, b"x" * 100) == compress("snappy", b"x" * 100)


def _xerial_chunks(stream: bytes) -> list[bytes]:
    assert stream[:16] == XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
    pos, chunks = 16, []
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        chunks.append(stream[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert pos == len(stream)
    return chunks


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = payload(100_000, 4, False)
    chunks = _xerial_chunks(compress(CompressionType.SNAPPY, data))
    sizes = [len(bytes(cramjam.snappy.decompress_raw(c))) for c in chunks]
    assert sizes == [XERIAL_BLOCK_SIZE] * 3 + [100_000 - 3 * XERIAL_BLOCK_SIZE]
    assert b"".join(bytes(cramjam.snappy.decompress_raw(c)) for c in chunks) == data
    assert _xerial_chunks(compress(CompressionType.SNAPPY, b"")) == []


def _xerial(data: bytes, block: int, version: bytes = b"\x00\x00\x00\x01\x00\x00\x00\x01") -> bytes:
    out = bytearray(XERIAL_MAGIC + version)
    for i in range(0, len(data), block):
        c = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(c)) + c
    return bytes(out)


def test_snappy_reads_other_xerial_writers():
    data = payload(70_000, 5, True)
    assert decompress(CompressionType.SNAPPY, _xerial(data, 1000)) == data
    assert decompress(CompressionType.SNAPPY, _xerial(data, 70_000)) == data
    # version ints written little-endian (seen from some non-Java producers) are ignored
    assert decompress(CompressionType.SNAPPY, _xerial(data, 4096, b"\x01\x00\x00\x00\x01\x00\x00\x00")) == data
    # concatenated streams, as xerial's SnappyInputStream accepts
    assert decompress(CompressionType.SNAPPY, _xerial(data[:300], 100) + _xerial(data[300:], 5000)) == data


@settings(max_examples=20, deadline=None)
@given(data=data_strategy)
def test_snappy_reads_raw_snappy(data):
    # librdkafka sends raw snappy without the xerial framing
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_corrupt_xerial_streams():
    good = _xerial(payload(10_000, 6, True), 3000)
    with pytest.raises(CorruptMessageError, match="truncated"):
        decompress(CompressionType.SNAPPY, good + b"\x00\x00")
    with pytest.raises(CorruptMessageError, match="chunk at byte"):
        decompress(CompressionType.SNAPPY, good[:-1])
    bad = bytearray(good)
    struct.pack_into(">i", bad, 16, -4)
    with pytest.raises(CorruptMessageError, match="length -4"):
        decompress(CompressionType.SNAPPY, bad)
    bad = bytearray(good)
    bad[20:30] = b"\xff" * 10  # the first chunk's length preamble (raw snappy has no checksum of its own)
    with pytest.raises(CorruptMessageError, match="cannot decompress snappy"):
        decompress(CompressionType.SNAPPY, bad)


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not CompressionType.NONE])
def test_corrupt_or_truncated_input_raises_corrupt_message(codec):
    packed = compress(codec, payload(50_000, 7, True))
    for bad in (b"\x00garbage-garbage-garbage", packed[: len(packed) // 2]):
        with pytest.raises(CorruptMessageError, match=f"cannot decompress {codec.name_lower}|xerial"):
            decompress(codec, bad)
