"""Kafka's record batch compression codecs, through cramjam.

The codec of a batch is in the low three bits of its attributes. The broker never compresses or
decompresses on the produce/fetch path (batches are stored as the producer sent them); this module
is for the client, tools, the Spark reader and tests.

Levels follow Kafka's meaning of ``compression.<codec>.level`` so a level from a Kafka config means
the same thing here (``CompressionType.defaultLevel()`` and the ``*Compression`` classes in
``org.apache.kafka.common``):

* gzip: 1..9, or -1 for zlib's default (6). Default -1, as Kafka. gzip is slow at 6 (about 40 MB/s
  on JSON-like data with cramjam here, 216 MB/s at level 1); a producer that wants speed passes 1.
* lz4: 1..17, default 9. Kafka's ``Lz4BlockOutputStream`` uses lz4-java's *fast* compressor for the
  default level 9 and the high-compression (HC) compressor at the given level for any other value.
  We do the same: level 9 maps to LZ4's fast mode (cramjam level 1, about 490 MB/s), other levels
  to LZ4 HC (cramjam level 9 would be HC-9, about 48 MB/s: that is what "level 9" must *not* mean).
* zstd: -131072..22, default 3 (ZSTD_CLEVEL_DEFAULT, about 245 MB/s; level 1 is about 475 MB/s).
* snappy and none have no level; a level passed for them is ignored.

Formats on the wire:

* gzip: RFC 1952 gzip stream.
* lz4: the LZ4 frame format with independent 64 KiB blocks. Kafka's ``Lz4BlockInputStream`` refuses
  dependent ("linked") blocks, and cramjam's one-shot ``lz4.compress`` writes linked blocks (FLG
  0x54), so we use ``cramjam.lz4.Compressor(block_linked=False)`` (FLG 0x70: independent blocks with
  block checksums, which Kafka's reader verifies). The Java client itself writes FLG 0x60.
* zstd: a zstd frame.
* snappy: the Java client writes xerial's ``SnappyOutputStream`` framing: a 16-byte header
  (``\\x82SNAPPY\\x00``, int32 version 1, int32 compatible version 1) followed by chunks of a
  big-endian int32 length and a raw snappy block of at most 32 KiB of input. We write exactly that.
  When reading we accept that framing (also several concatenated streams, and ignore the two version
  ints: some producers write them little-endian) and plain raw snappy (librdkafka sends raw snappy).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import cramjam
import numpy as np

from tierlog.errors import CorruptMessageError, UnsupportedCompressionTypeError

__all__ = ["CompressionType", "compress", "decompress", "decompress_bounded", "DecompressedTooLargeError",
           "decompression_limit", "MIN_DECOMPRESSION_LIMIT", "DECOMPRESSION_RECORDS_FACTOR",
           "DEFAULT_MAX_MESSAGE_BYTES",
           "XERIAL_MAGIC", "XERIAL_BLOCK_SIZE"]


class CompressionType(IntEnum):
    """Codec ids as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def name_lower(self) -> str:
        """Kafka's name for the codec: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """The codec for one of Kafka's ``compression.type`` names (case-insensitive)."""
        try:
            return _BY_NAME[name.strip().lower()]
        except (KeyError, AttributeError):
            raise UnsupportedCompressionTypeError(
                f"unknown compression type {name!r}; expected one of none, gzip, snappy, lz4, zstd"
            ) from None

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec for the id in a batch's attributes; ids 5-7 are not defined by Kafka."""
        try:
            return _BY_ID[codec_id]
        except (KeyError, TypeError):
            raise UnsupportedCompressionTypeError(
                f"unknown compression type id {codec_id!r}; Kafka defines 0 (none) to 4 (zstd)"
            ) from None


_BY_NAME = {c.name.lower(): c for c in CompressionType}
_BY_ID = {c.value: c for c in CompressionType}

# Kafka's level ranges and defaults (org.apache.kafka.common.record.CompressionType).
GZIP_DEFAULT_LEVEL = -1  # Deflater.DEFAULT_COMPRESSION, which zlib runs as level 6
LZ4_DEFAULT_LEVEL = 9  # runs lz4's fast compressor, see the module docstring
ZSTD_DEFAULT_LEVEL = 3
_LZ4_FAST = 1  # cramjam/LZ4F levels below 2 select LZ4's fast (non-HC) compressor

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
XERIAL_HEADER_SIZE = 16
XERIAL_BLOCK_SIZE = 32 * 1024  # xerial SnappyOutputStream's default block size, as the Java client uses

_gzip_compress = cramjam.gzip.compress
_gzip_decompress = cramjam.gzip.decompress
_Lz4Compressor = cramjam.lz4.Compressor
_lz4_decompress = cramjam.lz4.decompress
_zstd_compress = cramjam.zstd.compress
_zstd_decompress = cramjam.zstd.decompress
_DECOMPRESS_INTO = {1: cramjam.gzip.decompress_into, 3: cramjam.lz4.decompress_into, 4: cramjam.zstd.decompress_into}
# What cramjam's decompress_into says when the output buffer is full before the data ends.
_OUTPUT_FULL = "failed to write whole buffer"
_snappy_compress_raw = cramjam.snappy.compress_raw
_snappy_decompress_raw = cramjam.snappy.decompress_raw
_snappy_decompress_raw_len = cramjam.snappy.decompress_raw_len
_snappy_decompress_raw_into = cramjam.snappy.decompress_raw_into


def _level(codec: CompressionType, level: int | None) -> int:
    if codec is CompressionType.GZIP:
        if level is None or level == -1:
            return 6
        if not 1 <= level <= 9:
            raise ValueError(f"gzip compression level {level} is out of range: use 1..9 or -1 (default)")
        return level
    if codec is CompressionType.LZ4:
        if level is None:
            level = LZ4_DEFAULT_LEVEL
        if not 1 <= level <= 17:
            raise ValueError(f"lz4 compression level {level} is out of range: use 1..17 (default 9)")
        # Kafka: the default level means lz4's fast compressor, any other level the HC one.
        return _LZ4_FAST if level == LZ4_DEFAULT_LEVEL else level
    if codec is CompressionType.ZSTD:
        if level is None:
            return ZSTD_DEFAULT_LEVEL
        if not -131072 <= level <= 22:
            raise ValueError(f"zstd compression level {level} is out of range: use -131072..22 (default 3)")
        return level
    return 0


def _codec(codec: CompressionType | int | str) -> CompressionType:
    if isinstance(codec, str):
        return CompressionType.from_name(codec)
    return CompressionType.from_id(int(codec))


def compress(codec: CompressionType | int | str, data: Any, level: int | None = None) -> bytes:
    """Compress ``data`` (any bytes-like object) as Kafka's ``codec`` writes it.

    ``level`` uses Kafka's meaning and range for the codec (see the module docstring); ``None`` is
    Kafka's default level. Raises ValueError for an out-of-range level and
    UnsupportedCompressionTypeError for an unknown codec.
    """
    codec = _codec(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.SNAPPY:
        return _xerial_compress(data)
    lvl = _level(codec, level)
    if codec is CompressionType.GZIP:
        return bytes(_gzip_compress(data, level=lvl))
    if codec is CompressionType.LZ4:
        return _lz4_frame(data, lvl)
    return bytes(_zstd_compress(data, level=lvl))


def _lz4_frame(data: Any, level: int) -> bytes:
    compressor = _Lz4Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(data if type(data) is bytes else bytes(data))  # it accepts only bytes
    return bytes(compressor.finish())


def decompress(codec: CompressionType | int | str, data: Any) -> bytes:
    """Decompress ``data`` (any bytes-like object) written with ``codec``.

    Raises CorruptMessageError naming the codec and what failed when the data is not valid.
    """
    codec = _codec(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    try:
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec is CompressionType.GZIP:
            return bytes(_gzip_decompress(data))
        if codec is CompressionType.LZ4:
            return bytes(_lz4_decompress(data))
        return bytes(_zstd_decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(
            f"cannot decompress {codec.name_lower} data ({len(memoryview(data))} bytes): {exc}"
        ) from exc


def _xerial_compress(data: Any) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = _snappy_compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        out += len(block).to_bytes(4, "big")
        out += block
    return bytes(out)


def _snappy_decompress(data: Any) -> bytes:
    view = memoryview(data).cast("B")
    if len(view) < XERIAL_HEADER_SIZE or view[:8] != XERIAL_MAGIC:
        return bytes(_snappy_decompress_raw(view))
    # xerial framing: collect the chunks first so the output is allocated once.
    chunks: list[memoryview] = []
    sizes: list[int] = []
    pos = XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if end - pos >= XERIAL_HEADER_SIZE and view[pos:pos + 8] == XERIAL_MAGIC:
            pos += XERIAL_HEADER_SIZE  # a concatenated stream starts again; xerial's reader allows it
            continue
        if end - pos < 4:
            raise CorruptMessageError(
                f"xerial snappy stream is truncated: the {end - pos} bytes at byte {pos} "
                "cannot hold a chunk length"
            )
        length = int.from_bytes(view[pos:pos + 4], "big", signed=True)
        if length < 0 or pos + 4 + length > end:
            raise CorruptMessageError(
                f"xerial snappy chunk at byte {pos} has length {length} but {end - pos - 4} bytes remain"
            )
        chunk = view[pos + 4:pos + 4 + length]
        chunks.append(chunk)
        sizes.append(_snappy_decompress_raw_len(chunk))
        pos += 4 + length
    if len(chunks) == 1:
        return bytes(_snappy_decompress_raw(chunks[0]))
    out = bytearray(sum(sizes))
    target = memoryview(out)
    at = 0
    for index, (chunk, size) in enumerate(zip(chunks, sizes)):
        written = _snappy_decompress_raw_into(chunk, target[at:at + size])
        if written != size:
            raise CorruptMessageError(
                f"xerial snappy chunk {index} decompressed to {written} bytes, its header says {size}"
            )
        at += size
    return bytes(out)


class DecompressedTooLargeError(CorruptMessageError):
    """Compressed data that inflates past the bound its reader set (a decompression bomb, or a batch
    far beyond any size a producer writes). Raised before more than ``limit`` bytes were produced."""

    def __init__(self, message: str | None = None, limit: int = 0):
        super().__init__(message)
        self.limit = limit


def decompress_bounded(codec: CompressionType | int | str, data: Any, limit: int) -> memoryview:
    """Decompress ``data`` written with ``codec`` into at most ``limit`` bytes.

    Data that would inflate past ``limit`` raises :class:`DecompressedTooLargeError` after at most
    ``limit + 1`` bytes were produced: gzip, lz4 and zstd decompress into one buffer of ``limit + 1``
    bytes (``np.empty``: pages the codec never writes are never touched, so a large bound costs
    address space, not memory), and stop when it is full; snappy's sizes are read from its headers
    before anything is decompressed. Undecodable data raises CorruptMessageError as
    :func:`decompress`. Returns a read-only view of the decompressed bytes.
    """
    codec = _codec(codec)
    if limit < 0:
        raise ValueError(f"negative decompression limit {limit}")
    if codec is CompressionType.NONE:
        view = memoryview(data).cast("B")
        if len(view) > limit:
            raise DecompressedTooLargeError(f"{len(view)} bytes exceed the limit of {limit}", limit)
        return view
    try:
        if codec is CompressionType.SNAPPY:
            size = _snappy_size(data)
            if size > limit:
                raise DecompressedTooLargeError(
                    f"snappy data ({len(memoryview(data))} bytes) says it decompresses to {size} bytes, "
                    f"more than the limit of {limit}", limit)
            return memoryview(_snappy_decompress(data))
        # A first try in a buffer sized for ordinary ratios; only data inflating past it is decompressed
        # again into a buffer of the whole bound (a large np.empty costs an mmap and munmap per call).
        first = min(limit, max(_FIRST_TRY_MIN, _FIRST_TRY_RATIO * len(memoryview(data))))
        out, written = _decompress_into(codec, data, first)
        if written > first and first < limit:
            out, written = _decompress_into(codec, data, limit)
        if written > limit:
            raise DecompressedTooLargeError(
                f"{codec.name_lower} data ({len(memoryview(data))} bytes) decompresses to more than the "
                f"limit of {limit} bytes", limit)
        return memoryview(out[:written]).toreadonly()
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(
            f"cannot decompress {codec.name_lower} data ({len(memoryview(data))} bytes): {exc}"
        ) from exc


_FIRST_TRY_MIN = 256 << 10
_FIRST_TRY_RATIO = 16


def _decompress_into(codec: CompressionType, data: Any, size: int) -> tuple[np.ndarray, int]:
    """Decompress into a new buffer of ``size + 1`` bytes: (buffer, bytes written), ``size + 1`` when full."""
    out = np.empty(size + 1, dtype=np.uint8)
    try:
        return out, _DECOMPRESS_INTO[codec](data, out)
    except cramjam.DecompressionError as exc:
        if _OUTPUT_FULL in str(exc):
            return out, size + 1
        raise


def _snappy_size(data: Any) -> int:
    """The decompressed size of raw or xerial-framed snappy data, from its headers alone."""
    view = memoryview(data).cast("B")
    if len(view) < XERIAL_HEADER_SIZE or view[:8] != XERIAL_MAGIC:
        return _snappy_decompress_raw_len(view)
    total = 0
    pos = XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if end - pos >= XERIAL_HEADER_SIZE and view[pos:pos + 8] == XERIAL_MAGIC:
            pos += XERIAL_HEADER_SIZE
            continue
        if end - pos < 4:
            raise CorruptMessageError(f"xerial snappy stream is truncated at byte {pos}")
        length = int.from_bytes(view[pos:pos + 4], "big", signed=True)
        if length < 0 or pos + 4 + length > end:
            raise CorruptMessageError(
                f"xerial snappy chunk at byte {pos} has length {length} but {end - pos - 4} bytes remain")
        total += _snappy_decompress_raw_len(view[pos + 4:pos + 4 + length])
        pos += 4 + length
    return total


#: The decompressed records of one batch may take ``min(records_count, DECOMPRESSION_RECORDS_FACTOR) *
#: max.message.bytes`` bytes, and never less than ``MIN_DECOMPRESSION_LIMIT``: see decompression_limit.
MIN_DECOMPRESSION_LIMIT = 16 << 20
DECOMPRESSION_RECORDS_FACTOR = 64
#: Kafka's default max.message.bytes; readers that do not know the topic's (the client, Spark) bound with it.
DEFAULT_MAX_MESSAGE_BYTES = 1048588


def decompression_limit(records_count: int, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """How many bytes the decompressed records of a batch of ``records_count`` records may take.

    A record a producer sends is at most ``max.message.bytes`` uncompressed in practice (the Java
    producer refuses a record above ``max.request.size``, whose default matches, before compressing), so
    ``records_count * max.message.bytes`` bounds an honest batch; a batch of many records is bounded by
    64 times ``max.message.bytes`` (its compressed size is at most ``max.message.bytes``: a 64x ratio),
    and no batch is bounded below 16 MiB. With the defaults: 16 MiB to 64 MiB. Kafka itself reads a
    compressed batch as a stream, record by record, and never holds more than one record; tierlog
    decompresses a batch into one buffer, so it needs a bound Kafka does not. The client and the Spark
    reader use the same bound with the default ``max.message.bytes`` (a bomb raises
    DecompressedTooLargeError there instead of eating memory)."""
    return max(MIN_DECOMPRESSION_LIMIT, min(max(records_count, 1), DECOMPRESSION_RECORDS_FACTOR) * max_message_bytes)
