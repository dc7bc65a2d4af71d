"""Records inside a v2 batch: build whole batches and decode them record by record.

Not a hot path: the broker never decodes records to produce or fetch. This is for tests, tools, the
client, the Spark reader and compaction of internal topics.

Record layout (Kafka's ``DefaultRecord``), after the batch's records are decompressed::

    Length          varint   bytes of the record after this field
    Attributes      int8     unused, 0
    TimestampDelta  varlong  from the batch's base timestamp
    OffsetDelta     varint   from the batch's base offset
    KeyLength       varint   -1 for a null key
    Key             bytes
    ValueLength     varint   -1 for a null value
    Value           bytes
    HeadersCount    varint
    Headers         [HeaderKeyLength varint, HeaderKey utf-8, HeaderValueLength varint (-1 null), Value]

Varints are zig-zag encoded LEB128 (protobuf's sint32/sint64): at most 5 bytes for a varint, 10 for
a varlong.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c as _crc32c

from tierlog.errors import CorruptMessageError, InvalidRecordError, UnsupportedCompressionTypeError
from tierlog.records.batch import (
    _HEADER,
    ATTRIBUTES_POS,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    TimestampType,
    _truncated,
    iter_batches,
    read_header,
    verify_crc,
)
from tierlog.records.compression import (
    CompressionType,
    DecompressedTooLargeError,
    compress,
    decompress,
    decompress_bounded,
    decompression_limit,
)

__all__ = [
    "Header", "Record", "build_batch", "decode_batch", "iter_records",
    "zigzag_encode", "zigzag_decode", "encode_varint", "encode_varlong", "decode_varint", "decode_varlong",
    "write_varint", "write_varlong", "size_of_varint", "size_of_varlong",
]

Header = tuple[str, bytes | None]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_BYTES_LIKE = (bytes, bytearray, memoryview)


@dataclass(slots=True)
class Record:
    """One record. ``timestamp`` None means "now" when building; decoded records always have one.

    ``offset`` is the absolute offset when decoded; ``build_batch`` ignores it (offsets inside a
    built batch are 0..n-1 from its base offset).
    """

    offset: int = 0
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# zig-zag varints


def zigzag_encode(value: int) -> int:
    """Map a signed int64 to an unsigned one: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ..."""
    return (value << 1) ^ (value >> 63)


def zigzag_decode(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def _write_unsigned(out: bytearray, raw: int) -> None:
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (an int32) to ``out`` as a zig-zag varint."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in an int32")
    _write_unsigned(out, (value << 1) ^ (value >> 31))


def write_varlong(out: bytearray, value: int) -> None:
    """Append ``value`` (an int64) to ``out`` as a zig-zag varlong."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in an int64")
    _write_unsigned(out, (value << 1) ^ (value >> 63))


def encode_uvarint(raw: int) -> bytes:
    """``raw`` (not negative) as an unsigned varint: the compact lengths and tags of flexible protocol versions."""
    out = bytearray()
    _write_unsigned(out, raw)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    raw = zigzag_encode(value)
    return max(1, (raw.bit_length() + 6) // 7)


size_of_varlong = size_of_varint


def _decode_slow(buf: Any, pos: int, max_bytes: int, bits: int, what: str) -> tuple[int, int]:
    raw = 0
    shift = 0
    start = pos
    try:
        for _ in range(max_bytes):
            b = buf[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                if raw >> bits:
                    raise InvalidRecordError(f"{what} at byte {start} does not fit in {bits} bits")
                return (raw >> 1) ^ -(raw & 1), pos
            shift += 7
    except IndexError:
        raise InvalidRecordError(f"{what} at byte {start} is truncated by the end of the data") from None
    raise InvalidRecordError(f"{what} at byte {start} is longer than {max_bytes} bytes")


def decode_varint(buf: Any, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint (int32) at ``pos``: returns (value, position after it)."""
    try:
        b = buf[pos]
    except IndexError:
        raise InvalidRecordError(f"varint at byte {pos} is truncated by the end of the data") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _decode_slow(buf, pos, 5, 32, "varint")


def decode_varlong(buf: Any, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varlong (int64) at ``pos``: returns (value, position after it)."""
    try:
        b = buf[pos]
    except IndexError:
        raise InvalidRecordError(f"varlong at byte {pos} is truncated by the end of the data") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _decode_slow(buf, pos, 10, 64, "varlong")


# ---------------------------------------------------------------------------------------------
# building


def _bytes_like(obj: Any, what: str, index: int) -> None:
    if obj is not None and not isinstance(obj, _BYTES_LIKE):
        raise TypeError(f"record {index}: {what} must be bytes, bytearray, memoryview or None, "
                        f"not {type(obj).__name__}")


def _normalize(item: Any, index: int) -> tuple[Any, Any, list[Header], int | None]:
    if isinstance(item, Record):
        return item.key, item.value, item.headers or [], item.timestamp
    if isinstance(item, tuple | list):
        if len(item) == 2:
            return item[0], item[1], [], None
        if len(item) == 3:
            return item[0], item[1], item[2] or [], None
        if len(item) == 4:
            return item[0], item[1], item[2] or [], item[3]
    raise TypeError(f"record {index}: expected a Record or a tuple (key, value[, headers[, timestamp]]), "
                    f"got {item!r:.100}")


def _write_record(out: bytearray, index: int, ts_delta: int, key: Any, value: Any,
                  headers: list[Header]) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varlong(body, ts_delta)
    write_varint(body, index)
    if key is None:
        body.append(1)  # zig-zag -1
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for header in headers:
        try:
            hkey, hvalue = header
        except (TypeError, ValueError):
            raise TypeError(
                f"record {index}: a header must be a (str, bytes | None) pair, not {header!r:.100}"
            ) from None
        if not isinstance(hkey, str):
            raise TypeError(f"record {index}: header key {hkey!r:.100} must be a str")
        _bytes_like(hvalue, f"the value of header {hkey!r}", index)
        encoded = hkey.encode("utf-8")
        write_varint(body, len(encoded))
        body += encoded
        if hvalue is None:
            body.append(1)
        else:
            write_varint(body, len(hvalue))
            body += hvalue
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[Record | tuple],
    *,
    base_offset: int = 0,
    compression: CompressionType | int | str = CompressionType.NONE,
    level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode a v2 record batch.

    ``records`` holds Records or tuples ``(key, value)``, ``(key, value, headers)`` or
    ``(key, value, headers, timestamp)``; a missing timestamp is the current time in ms (read once
    per batch). Offset deltas are 0..n-1. ``base_timestamp`` defaults to the first record's
    timestamp; max timestamp is the largest record timestamp. ``compression`` is a CompressionType,
    its id or Kafka's name; ``level`` uses Kafka's meaning (see ``compression``).
    """
    codec = CompressionType.from_name(compression) if isinstance(compression, str) \
        else CompressionType.from_id(int(compression))
    body = bytearray()
    now: int | None = None
    max_timestamp = 0
    count = 0
    for index, item in enumerate(records):
        key, value, headers, timestamp = _normalize(item, index)
        _bytes_like(key, "key", index)
        _bytes_like(value, "value", index)
        if timestamp is None:
            if now is None:
                now = int(time.time() * 1000)
            timestamp = now
        if count == 0:
            if base_timestamp is None:
                base_timestamp = timestamp
            max_timestamp = timestamp
        elif timestamp > max_timestamp:
            max_timestamp = timestamp
        _write_record(body, index, timestamp - base_timestamp, key, value, headers)
        count += 1
    if count == 0:
        raise ValueError("build_batch needs at least one record")
    if count - 1 > _INT32_MAX:
        raise ValueError(f"too many records for one batch: {count}")

    payload = body if codec is CompressionType.NONE else compress(codec, body, level)
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    if batch_length > _INT32_MAX:
        raise ValueError(f"batch of {batch_length + LOG_OVERHEAD} bytes is too large for a record batch")
    attributes = int(codec)
    if TimestampType(timestamp_type) is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    return build_batch_header(len(payload), count, attributes, base_timestamp, max_timestamp, producer_id,
                              producer_epoch, base_sequence, payload, base_offset=base_offset,
                              partition_leader_epoch=partition_leader_epoch) + payload


def build_batch_header(payload_size: int, count: int, attributes: int, base_timestamp: int, max_timestamp: int,
                       producer_id: int, producer_epoch: int, base_sequence: int, payload: Any, *,
                       base_offset: int = 0, partition_leader_epoch: int = -1,
                       last_offset_delta: int | None = None) -> bytes:
    """The 61-byte v2 header for ``payload`` (the records section, compressed or not), CRC included.
    ``last_offset_delta`` defaults to ``count - 1``; the log cleaner keeps a batch's original one when it
    drops records (Kafka keeps the last offset, so the producer's last sequence stays)."""
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + payload_size
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    fields = [base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, 0, attributes, delta,
              base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count]
    header = _HEADER.pack(*fields)
    fields[4] = _crc32c(payload, _crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    return _HEADER.pack(*fields)


def recompress_batches(buf: Any, headers: list[BatchHeader], codec: CompressionType, level: int | None) -> bytes:
    """The batches of ``buf`` (already validated, ``headers`` in order) with their records section in
    ``codec`` (a topic's ``compression.type``): only the section is decompressed and compressed again,
    records are never decoded; every other header field is kept and the CRC recomputed. Batches
    already in ``codec`` and control batches are copied as they are."""
    view = memoryview(buf)
    out = []
    pos = 0
    for h in headers:
        if h.compression is codec or h.is_control:
            out.append(view[pos:pos + h.size])
        else:
            section = view[pos + RECORD_BATCH_OVERHEAD:pos + h.size]
            raw = section if h.compression is CompressionType.NONE else decompress(h.compression, section)
            payload = compress(codec, raw, level)
            attributes = (h.attributes & ~COMPRESSION_CODEC_MASK) | int(codec)
            out.append(build_batch_header(len(payload), h.records_count, attributes, h.base_timestamp,
                                          h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence,
                                          payload, base_offset=h.base_offset,
                                          partition_leader_epoch=h.partition_leader_epoch))
            out.append(payload)
        pos += h.size
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# decoding


def _where(pos: int, header: BatchHeader) -> str:
    return f"record batch at position {pos} (base offset {header.base_offset})"


def _decode_records(data: memoryview, header: BatchHeader, where: str, data_name: str) -> list[Record]:
    n = len(data)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    read_varint = decode_varint
    read_varlong = decode_varlong
    records: list[Record] = []
    p = 0
    index = 0
    start = 0

    def fail(what: str) -> InvalidRecordError:
        # reads the loop's current ``index`` and ``start``
        return InvalidRecordError(f"{where}, record {index} (byte {start} of the {data_name}): {what}")

    try:
        for index in range(header.records_count):  # noqa: B007 (used by fail())
            start = p
            length, p = read_varint(data, p)
            end = p + length
            if length < 1 or end > n:
                raise fail(f"record length {length} does not fit in the {n - p} bytes left")
            p += 1  # attributes: unused in v2
            ts_delta, p = read_varlong(data, p)
            offset_delta, p = read_varint(data, p)
            size, p = read_varint(data, p)
            if size < 0:
                key = None
            else:
                if p + size > end:
                    raise fail(f"key length {size} runs past the end of the record")
                key = bytes(data[p:p + size])
                p += size
            size, p = read_varint(data, p)
            if size < 0:
                value = None
            else:
                if p + size > end:
                    raise fail(f"value length {size} runs past the end of the record")
                value = bytes(data[p:p + size])
                p += size
            count, p = read_varint(data, p)
            if count < 0:
                raise fail(f"invalid number of headers {count}")
            headers: list[Header] = []
            for _ in range(count):
                size, p = read_varint(data, p)
                if size < 0:
                    raise fail(f"invalid negative header key length {size}")
                if p + size > end:
                    raise fail(f"header key length {size} runs past the end of the record")
                try:
                    hkey = str(data[p:p + size], "utf-8")
                except UnicodeDecodeError as exc:
                    raise fail(f"header key is not valid UTF-8: {exc}") from None
                p += size
                size, p = read_varint(data, p)
                if size < 0:
                    hvalue = None
                else:
                    if p + size > end:
                        raise fail(f"header value length {size} runs past the end of the record")
                    hvalue = bytes(data[p:p + size])
                    p += size
                headers.append((hkey, hvalue))
            if p != end:
                raise fail(f"record length says {length} bytes but its fields take {p - (end - length)}")
            records.append(Record(
                base_offset + offset_delta,
                log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                key, value, headers,
            ))
    except InvalidRecordError as exc:
        if exc.message.startswith(where):
            raise
        raise fail(exc.message) from None
    if p != n:
        raise InvalidRecordError(
            f"{where}: {n - p} bytes remain after its {header.records_count} records "
            "(the records count does not match the data)"
        )
    return records


def _decode_at(buf: Any, pos: int, header: BatchHeader, verify: bool) -> list[Record]:
    where = _where(pos, header)
    end = pos + header.size
    if end > len(buf):
        raise _truncated(pos, header, len(buf) - pos)
    if verify:
        verify_crc(buf, pos, header)
    if header.records_count < 0:
        raise InvalidRecordError(f"{where} has an invalid records count {header.records_count}")
    codec_id = header.attributes & COMPRESSION_CODEC_MASK
    if codec_id > CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError(f"{where} uses undefined compression type id {codec_id}")
    codec = CompressionType(codec_id)
    payload = memoryview(buf)[pos + RECORD_BATCH_OVERHEAD:end]
    if codec is CompressionType.NONE:
        return _decode_records(payload, header, where, "records data")
    if header.records_count == 0:
        return []  # as Kafka: an emptied (compacted) batch is not decompressed
    try:
        data = decompress_bounded(codec, payload, decompression_limit(header.records_count))
    except DecompressedTooLargeError as exc:
        raise DecompressedTooLargeError(f"{where}: {exc.message}", exc.limit) from exc
    except CorruptMessageError as exc:
        raise CorruptMessageError(f"{where}: {exc.message}") from exc
    return _decode_records(memoryview(data), header, where, f"{codec.name_lower}-decompressed records data")


def decode_batch(buf: Any, pos: int = 0, verify: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Header and records of the complete v2 batch at ``pos``, decompressing as needed.

    ``verify`` checks the CRC first. For LOG_APPEND_TIME batches every record's timestamp is the
    batch's max timestamp, as in Kafka. Record-level inconsistencies (lengths, counts, varints)
    raise InvalidRecordError; a bad CRC, truncation or undecodable compressed data
    CorruptMessageError.
    """
    header = read_header(buf, pos)
    return header, _decode_at(buf, pos, header, verify)


def iter_records(buf: Any, *, skip_control: bool = True, verify: bool = True,
                 allow_partial_tail: bool = False) -> Iterator[Record]:
    """Every record of a concatenation of v2 batches (a .log segment, a fetch response...).

    Control batches (transaction markers) are skipped unless ``skip_control`` is False; their CRC is
    still checked. Bytes after the last complete batch raise CorruptMessageError, after every
    record before them was yielded, unless ``allow_partial_tail`` is True: a Kafka fetch response
    may end with a partial batch that clients ignore.
    """
    end = 0
    for pos, header in iter_batches(buf):
        end = pos + header.size
        if skip_control and header.attributes & CONTROL_FLAG_MASK:
            if verify:
                verify_crc(buf, pos, header)
            continue
        yield from _decode_at(buf, pos, header, verify)
    if end != len(buf) and not allow_partial_tail:
        raise CorruptMessageError(
            f"{len(buf) - end} bytes at position {end} after the last complete record batch "
            "are an incomplete batch"
        )

