"""Kafka record batch v2 (magic 2) headers: read, check and patch in place.

This is the broker's hot path: everything here works on the 61-byte batch header with precompiled
``struct.Struct`` objects and ``unpack_from``/``pack_into`` on the caller's buffer (bytes, bytearray
or memoryview), never copies the batch and never looks at individual records.

Layout (Kafka's ``DefaultRecordBatch``)::

    BaseOffset           int64   0   not covered by the CRC
    Length               int32   8   bytes after this field: batch size - LOG_OVERHEAD
    PartitionLeaderEpoch int32  12   not covered by the CRC
    Magic                int8   16   2
    CRC                  uint32 17   CRC-32C of bytes [21, size)
    Attributes           int16  21   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                     5 control, 6 delete horizon
    LastOffsetDelta      int32  23
    BaseTimestamp        int64  27
    MaxTimestamp         int64  35
    ProducerId           int64  43
    ProducerEpoch        int16  51
    BaseSequence         int32  53
    RecordsCount         int32  57
    Records              ...    61   compressed as a whole when the codec is not none

Every error names the batch's position in the buffer and, when it could be read, its base offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import Any, NamedTuple

from crc32c import crc32c as _crc32c

from tierlog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.records.compression import CompressionType

__all__ = [
    "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "HEADER_SIZE_UP_TO_MAGIC", "MIN_BATCH_LENGTH", "CURRENT_MAGIC",
    "BASE_OFFSET_POS", "LENGTH_POS", "PARTITION_LEADER_EPOCH_POS", "MAGIC_POS", "CRC_POS", "ATTRIBUTES_POS",
    "LAST_OFFSET_DELTA_POS", "BASE_TIMESTAMP_POS", "MAX_TIMESTAMP_POS", "PRODUCER_ID_POS",
    "PRODUCER_EPOCH_POS", "BASE_SEQUENCE_POS", "RECORDS_COUNT_POS", "RECORDS_POS",
    "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "NO_TIMESTAMP",
    "COMPRESSION_CODEC_MASK", "TIMESTAMP_TYPE_MASK", "TRANSACTIONAL_FLAG_MASK", "CONTROL_FLAG_MASK",
    "DELETE_HORIZON_FLAG_MASK",
    "TimestampType", "BatchHeader", "read_header", "verify_crc", "iter_batches", "walk_batches", "validate_batches",
    "is_transactional", "transactional_producer",
    "patch_base_offset", "patch_partition_leader_epoch", "patch_log_append_time",
]

LOG_OVERHEAD = 12  # base offset (8) + length (4): the part of a batch not counted by its length field
RECORD_BATCH_OVERHEAD = 61  # the whole v2 header
HEADER_SIZE_UP_TO_MAGIC = 17  # enough bytes to tell the message format
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49
CURRENT_MAGIC = 2

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
PRODUCER_EPOCH_POS = 51
BASE_SEQUENCE_POS = 53
RECORDS_COUNT_POS = 57
RECORDS_POS = 61

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40
# The attribute bits Kafka's DefaultRecordBatch.computeAttributes keeps (it drops unused bits 7-15).
_KNOWN_ATTRIBUTES_BUT_TIMESTAMP_TYPE = (COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
                                        | DELETE_HORIZON_FLAG_MASK)

_INT32_MAX = 0x7FFFFFFF

_HEADER = struct.Struct(">qiibIhiqqqhii")
_UP_TO_MAGIC = struct.Struct(">qiib")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
assert _HEADER.size == RECORD_BATCH_OVERHEAD and _UP_TO_MAGIC.size == HEADER_SIZE_UP_TO_MAGIC

_unpack_header = _HEADER.unpack_from
_unpack_up_to_magic = _UP_TO_MAGIC.unpack_from
_pack_int64 = _INT64.pack_into
_pack_int32 = _INT32.pack_into
_pack_int16 = _INT16.pack_into
_pack_uint32 = _UINT32.pack_into
_tuple_new = tuple.__new__


class TimestampType(IntEnum):
    """Bit 3 of a v2 batch's attributes."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 record batch, fields in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Total bytes of the batch on disk / on the wire, LOG_OVERHEAD included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        """The codec; raises UnsupportedCompressionTypeError for the undefined ids 5-7."""
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """When set, base_timestamp holds the delete horizon (KIP-534), not a record timestamp."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping past int32 max to 0 as Kafka's incrementSequence."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        delta = self.last_offset_delta
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta


def _where(pos: int, base_offset: int | None = None) -> str:
    if base_offset is None:
        return f"record batch at position {pos}"
    return f"record batch at position {pos} (base offset {base_offset})"


def _bad_prefix(buf: Any, pos: int) -> None:
    """Raise the right error for a batch whose first 17 bytes are not a valid v2 start.

    Returns normally when they are (magic 2 and a plausible length).
    """
    base_offset, length, _epoch, magic = _unpack_up_to_magic(buf, pos)
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} (magic {magic}) at position {pos} is not supported; "
                "tierlog only accepts record batch v2"
            )
        raise CorruptMessageError(f"{_where(pos, base_offset)} has unknown magic {magic}; expected 2")
    if length < MIN_BATCH_LENGTH:
        raise CorruptMessageError(
            f"{_where(pos, base_offset)} has batch length {length}, "
            f"less than the minimum {MIN_BATCH_LENGTH} of a v2 batch"
        )


_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence: adjacent from PRODUCER_ID_POS


def is_transactional(records: Any) -> bool:
    """Whether the first batch of ``records`` carries the transactional flag (Kafka's
    ``RequestUtils.hasTransactionalRecords`` looks at a partition's first batch); a buffer shorter than a batch
    header is not."""
    return len(records) >= RECORD_BATCH_OVERHEAD and bool(records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_FLAG_MASK)


def transactional_producer(records: Any) -> tuple[int, int, int] | None:
    """(producer id, producer epoch, base sequence) of the first batch of ``records`` when it is a transactional
    v2 batch, else None: what KIP-890's verification needs of a produced partition, without a full header
    parse (the append validates the batch)."""
    if (len(records) >= RECORD_BATCH_OVERHEAD and records[MAGIC_POS] == CURRENT_MAGIC
            and records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_FLAG_MASK):
        return _PRODUCER.unpack_from(records, PRODUCER_ID_POS)
    return None


def read_header(buf: Any, pos: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``pos``; only its 61 header bytes need to be in ``buf``.

    Raises UnsupportedForMessageFormatError for magic 0/1 and CorruptMessageError for a buffer too
    short for the header, an unknown magic or a batch length below 49.
    """
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    try:
        fields = _unpack_header(buf, pos)
    except struct.error:
        available = len(buf) - pos
        if available < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptMessageError(
                f"{_where(pos)} is truncated: {max(available, 0)} bytes available, "
                f"at least {HEADER_SIZE_UP_TO_MAGIC} are needed to read its magic"
            ) from None
        _bad_prefix(buf, pos)
        raise CorruptMessageError(
            f"{_where(pos, _unpack_up_to_magic(buf, pos)[0])} is truncated: {available} bytes available, "
            f"the v2 header needs {RECORD_BATCH_OVERHEAD}"
        ) from None
    if fields[3] != CURRENT_MAGIC or fields[1] < MIN_BATCH_LENGTH:
        _bad_prefix(buf, pos)
    return _tuple_new(BatchHeader, fields)


def _truncated(pos: int, header: BatchHeader, available: int) -> CorruptMessageError:
    return CorruptMessageError(
        f"{_where(pos, header.base_offset)} is truncated: its length says {header.size} bytes "
        f"but only {max(available, 0)} are available"
    )


def verify_crc(buf: Any, pos: int = 0, header: BatchHeader | None = None) -> None:
    """Check the CRC-32C of the batch at ``pos`` (bytes [pos+21, pos+size)); needs the whole batch.

    Pass ``header`` when it was already read, to skip reading it again.
    """
    if header is None:
        header = read_header(buf, pos)
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        raise _truncated(pos, header, len(buf) - pos)
    computed = _crc32c(memoryview(buf)[pos + ATTRIBUTES_POS:end])
    if computed != header.crc:
        raise CorruptMessageError(
            f"{_where(pos, header.base_offset)} is corrupt: stored CRC {header.crc:#010x}, "
            f"computed {computed:#010x}"
        )


def iter_batches(buf: Any, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Position and header of each complete batch in ``buf[pos:end]``.

    Stops without error at a trailing incomplete batch (a fetch response or a log being appended may
    end with one); the caller can tell from the last position + size whether anything was left.
    An invalid header (magic, length) raises as in ``read_header``. CRCs are not checked.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    while True:
        available = limit - pos
        if available < RECORD_BATCH_OVERHEAD:
            if available >= HEADER_SIZE_UP_TO_MAGIC:
                _bad_prefix(buf, pos)  # raise if what is there is already wrong
            return
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if size > available:
            return
        yield pos, header
        pos += size


def walk_batches(header_at: Callable[[int], BatchHeader | None], position: int = 0,
                 end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Position and header of each batch from ``position`` on, in data that is not one buffer in memory (a
    segment file read with pread, a remote object's window): ``header_at(position)`` reads the header
    there and returns None at the end of the data. Stops before ``end`` when given. For a buffer in
    memory, :func:`iter_batches` does the same without a callback."""
    while end is None or position < end:
        header = header_at(position)
        if header is None:
            return
        yield position, header
        position += header.batch_length + LOG_OVERHEAD


def validate_batches(
    buf: Any, *, max_batch_bytes: int | None = None, allow_multiple_batches: bool = False,
    from_coordinator: bool = False,
) -> list[BatchHeader]:
    """Validate the records of one partition in a Produce request, without looking at records.

    The rules are Kafka's for an append from a client (origin CLIENT), in the order that makes the
    most specific error come out:

    * the data holds at least one batch (ProduceRequest.validateRecords, v3+) -> InvalidRecordError;
    * each batch is complete and there are no trailing bytes -> CorruptMessageError (Kafka silently
      trims trailing partial bytes, UnifiedLog.trimInvalidBytes; tierlog refuses them);
    * magic 2: 0/1 -> UnsupportedForMessageFormatError, others -> CorruptMessageError;
    * size <= ``max_batch_bytes`` when given (``max.message.bytes``) -> MessageTooLargeError
      (Kafka's RecordTooLargeException, UnifiedLog.analyzeAndValidateRecords);
    * a valid CRC -> CorruptMessageError (analyzeAndValidateRecords);
    * a defined codec (ids 0-4) -> UnsupportedCompressionTypeError;
    * base offset 0 -> InvalidRecordError (analyzeAndValidateRecords has rejected other base
      offsets from clients since Kafka 0.11; it does not rewrite them);
    * last_offset_delta >= 0, records_count >= 1 and records_count == last_offset_delta + 1 ->
      InvalidRecordError (LogValidator.validateBatch; this holds for every codec. Batches whose
      offsets have gaps only come from compaction, never from a producer);
    * not a control batch -> InvalidRecordError (validateBatch: clients may not write control records);
    * a producer id implies a base sequence >= 0 -> InvalidRecordError (validateBatch), except for a
      coordinator's own write (``from_coordinator``, Kafka's origin COORDINATOR: a group coordinator's
      transactional offset commit carries no sequence);
    * exactly one batch (ProduceRequest.validateRecords, v3+; LogValidator
      getFirstBatchAndMaybeValidateNoMoreBatches) -> InvalidRecordError, unless
      ``allow_multiple_batches``.

    Not checked here, because they need the topic's config, the producer state or the records
    themselves: per-record timestamps against ``message.timestamp.*``, a producer-set
    LOG_APPEND_TIME (INVALID_TIMESTAMP in Kafka), keys on compacted topics, zstd with Produce < v7,
    sequence/epoch continuity, and whether records_count matches the records actually present.
    """
    limit = len(buf)
    if limit == 0:
        raise InvalidRecordError("produce request contains no record batch for the partition")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < limit:
        available = limit - pos
        if available < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptMessageError(
                f"{available} trailing bytes at position {pos} are not a complete record batch "
                f"(a v2 batch needs at least {RECORD_BATCH_OVERHEAD})"
            )
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if size > available:
            raise _truncated(pos, header, available)
        where = _where(pos, header.base_offset)
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise MessageTooLargeError(
                f"{where} is {size} bytes, more than the maximum {max_batch_bytes} (max.message.bytes)"
            )
        verify_crc(buf, pos, header)
        codec_id = header.attributes & COMPRESSION_CODEC_MASK
        if codec_id > CompressionType.ZSTD:
            raise UnsupportedCompressionTypeError(f"{where} uses undefined compression type id {codec_id}")
        if header.base_offset != 0:
            raise InvalidRecordError(
                f"{where}: a produced batch must have base offset 0, not {header.base_offset}"
            )
        count = header.records_count
        if header.last_offset_delta < 0:
            raise InvalidRecordError(f"{where} has an invalid last offset delta {header.last_offset_delta}")
        if count <= 0:
            raise InvalidRecordError(f"{where} has an invalid records count {count}; it must be at least 1")
        if count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"{where} has records count {count} but last offset delta {header.last_offset_delta}; "
                "a produced batch must have records count = last offset delta + 1"
            )
        if header.attributes & CONTROL_FLAG_MASK:
            raise InvalidRecordError(
                f"{where} is a control batch; clients are not allowed to write control records"
            )
        if header.producer_id > NO_PRODUCER_ID and header.base_sequence < 0 and not from_coordinator:
            raise InvalidRecordError(
                f"{where} has producer id {header.producer_id} "
                f"but invalid base sequence {header.base_sequence}"
            )
        headers.append(header)
        pos += size
    if len(headers) > 1 and not allow_multiple_batches:
        raise InvalidRecordError(
            f"produce request contains {len(headers)} record batches for one partition; "
            "exactly one is allowed (record batch v2)"
        )
    return headers


def patch_base_offset(buf: Any, pos: int, base_offset: int) -> None:
    """Write the base offset of the batch at ``pos`` in a writable buffer; the CRC does not cover it."""
    _pack_int64(buf, pos + BASE_OFFSET_POS, base_offset)


def patch_partition_leader_epoch(buf: Any, pos: int, epoch: int) -> None:
    """Write the partition leader epoch of the batch at ``pos``; the CRC does not cover it."""
    _pack_int32(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def patch_log_append_time(buf: Any, pos: int, timestamp_ms: int) -> None:
    """Stamp the batch at ``pos`` with the broker's time, as Kafka's DefaultRecordBatch.setMaxTimestamp.

    Sets the timestamp type to LOG_APPEND_TIME (keeping codec, transactional, control and delete
    horizon bits and clearing the unused ones, as Kafka's computeAttributes does), writes
    ``timestamp_ms`` as the max timestamp and rewrites the CRC. Nothing is written when the batch
    already has both. The whole batch must be in ``buf``; the CRC is recomputed, not checked, so
    verify the batch first.
    """
    header = read_header(buf, pos)
    if header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp == timestamp_ms:
        return
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        raise _truncated(pos, header, len(buf) - pos)
    attributes = (header.attributes & _KNOWN_ATTRIBUTES_BUT_TIMESTAMP_TYPE) | TIMESTAMP_TYPE_MASK
    _pack_int16(buf, pos + ATTRIBUTES_POS, attributes)
    _pack_int64(buf, pos + MAX_TIMESTAMP_POS, timestamp_ms)
    _pack_uint32(buf, pos + CRC_POS, _crc32c(memoryview(buf)[pos + ATTRIBUTES_POS:end]))
