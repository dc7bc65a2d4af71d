"""Record-level validation of a produced v2 batch: Kafka's LogValidator rules, in compiled code.

``batch.validate_batches`` checks what the 61-byte header says (CRC, sizes, codec, counts against the
last offset delta, control batches, sequences). This module checks the records themselves, as Kafka's
``LogValidator`` does while it iterates them (``DefaultRecordBatch`` / ``DefaultRecord.readFrom``):

* every record's length varint and body lie within the batch (or within the decompressed records);
  each varint is at most 5 bytes (varlong 10); key, value, header keys and header values fit in what
  is left; the header count is not negative nor larger than the bytes left; a header key size is not
  negative; the fields read add up to the record's declared length;
* exactly ``records_count`` records, and no byte left after the last one;
* each record's offset delta is its index. Kafka does not check this: it rewrites the offsets of a
  compressed batch and stores an uncompressed one as sent. tierlog stores every batch as sent, so a
  consumer would see offsets past the batch's last offset; it refuses the batch instead (INVALID_RECORD,
  a deliberate difference in docs/compatibility.md);
* a compacted topic's records have keys (``cleanup.policy`` containing ``compact``);
* timestamps: for a CreateTime topic every record's timestamp (the base timestamp plus its delta) lies
  within ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now; a producer may not send a
  LogAppendTime batch;
* a compressed batch is decompressed with a bound (:func:`decompression_limit`): past it the batch is
  refused, the codec stops writing at the bound, so a bomb never inflates.

Errors, as Kafka answers them (ReplicaManager.appendToLocalLog):

* a record that cannot be read (lengths, varints, counts, bytes left over, offset deltas, the
  decompression bound) -> INVALID_RECORD (87), bare: Kafka's iterator throws InvalidRecordException,
  answered without an error message or record errors;
* compressed data that does not decompress -> UNKNOWN_SERVER_ERROR (-1), bare: Kafka's record stream
  throws a KafkaException ("Failed to decompress record stream") that no handler maps to a code (checked
  against Kafka 4.1 by tests/peer/test_poison_differential.py). Non-retriable, so a producer gives up at
  once, where CORRUPT_MESSAGE would have it retry the same bytes until its delivery timeout;
* a record without a key on a compacted topic -> INVALID_RECORD with ``record_errors`` (the index of each
  such record in the batch and a message) and an error message (Kafka's RecordValidationException);
* a timestamp out of range or a LogAppendTime batch -> INVALID_TIMESTAMP (32), likewise with
  ``record_errors``; when records have both kinds of error, INVALID_TIMESTAMP, as Kafka.

The exception's ``record_errors`` attribute is the list of ``(index, message)``; it is absent for the
bare errors. The walk over the records is compiled C (``_validation.c``, built by ``pip install``) over
the request's own buffer (an uncompressed batch) or the decompressed records, no Python per record and
nothing to compile or warm up when the broker starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tierlog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    UnknownServerError,
)
from tierlog.records._validation import walk as _walk
from tierlog.records.batch import (
    COMPRESSION_CODEC_MASK,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)
from tierlog.records.compression import (
    DECOMPRESSION_RECORDS_FACTOR,
    MIN_DECOMPRESSION_LIMIT,
    CompressionType,
    DecompressedTooLargeError,
    decompress_bounded,
    decompression_limit,
)

__all__ = ["validate_batch_records", "decompression_limit", "record_errors_of", "MIN_DECOMPRESSION_LIMIT",
           "DECOMPRESSION_RECORDS_FACTOR"]

# Kernel answers (_validation.c has the same numbers). Statuses of the walk:
_OK = 0
_EOF = 1  # a field runs past the end of the records
_VARINT_TOO_LONG = 2
_RECORD_SIZE_BEYOND = 3  # a record's length says more bytes than are left
_RECORD_SIZE_MISMATCH = 4  # the fields read do not add up to the record's length
_HEADER_COUNT = 5
_HEADER_KEY_SIZE = 6
_REMAINING = 7  # bytes left after records_count records
_OFFSET_DELTA = 8
# Kinds of record errors:
_KEY_MISSING = 1
_BAD_TIMESTAMP = 2
_LOG_APPEND_TIME = 3

_STATUS_TEXT = {
    _EOF: "a record field runs past the end of the batch's records (premature EOF)",
    _VARINT_TOO_LONG: "a varint is longer than its type allows",
    _RECORD_SIZE_BEYOND: "a record's length is larger than the bytes left in the batch",
    _RECORD_SIZE_MISMATCH: "a record's fields do not add up to its declared length",
    _HEADER_COUNT: "a record has an invalid number of headers",
    _HEADER_KEY_SIZE: "a record header has a negative key size",
    _REMAINING: "bytes are left after the batch's declared number of records "
                "(incorrect declared batch size, records still remaining)",
    _OFFSET_DELTA: "record offset deltas are not consecutive from 0",
}


# The kernel's switches, packed into one argument.
_LAT_BATCH = 1  # the batch says LogAppendTime
_CREATE_TIME = 2  # the topic's message.timestamp.type is CreateTime
_COMPACTED = 4  # the topic's cleanup.policy has compact
_CHECK_OFFSETS = 8


# The first walk collects no record errors, only their number (they are rare): a batch with some is walked
# again into arrays of that size. Zero-length arrays are never written, so one pair serves every thread.
_NO_INDEX = np.empty(0, dtype=np.int64)
_NO_KIND = np.empty(0, dtype=np.int8)


def record_errors_of(error: KafkaError) -> list[tuple[int, str]] | None:
    """The ``(index, message)`` record errors of a RecordValidationException-like error, else None."""
    return getattr(error, "record_errors", None)


def _with_record_errors(error: KafkaError, record_errors: list[tuple[int, str]]) -> KafkaError:
    error.record_errors = record_errors
    return error


def _where(pos: int, topic_partition) -> str:
    """Names the batch in an error message: built only when there is an error, not for every batch."""
    return f"record batch at position {pos}" + (f" in {topic_partition}" if topic_partition else "")


def validate_batch_records(buf: Any, pos: int, header: BatchHeader, *, now_ms: int, create_time: bool,
                           before_max_ms: int, after_max_ms: int, compacted: bool, max_message_bytes: int,
                           topic_partition: str = "", check_offsets: bool = True) -> None:
    """Check the records of the complete, CRC-checked v2 batch at ``pos`` of ``buf`` (see the module
    docstring for the rules and errors). ``create_time`` is the topic's ``message.timestamp.type`` being
    CreateTime; ``compacted`` its ``cleanup.policy`` containing compact."""
    end = pos + header.batch_length + 12
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec == 0:
        # The kernel walks the request's own buffer in place.
        arr, start, stop = buf, pos + RECORD_BATCH_OVERHEAD, end
    else:
        limit = decompression_limit(header.records_count, max_message_bytes)
        payload = memoryview(buf)[pos + RECORD_BATCH_OVERHEAD:end]
        try:
            arr = decompress_bounded(CompressionType(codec), payload, limit)
        except DecompressedTooLargeError as e:
            raise InvalidRecordError(
                f"{_where(pos, topic_partition)}: its {header.records_count} records decompress to more than "
                f"{e.limit} bytes, the bound "
                f"for the batch (records count x max.message.bytes {max_message_bytes}, at least "
                f"{MIN_DECOMPRESSION_LIMIT} and at most {DECOMPRESSION_RECORDS_FACTOR} x max.message.bytes)"
            ) from None
        except CorruptMessageError as e:
            raise UnknownServerError(
                f"{_where(pos, topic_partition)}: failed to decompress record stream: {e.message}") from None
        start, stop = 0, len(arr)
    flags = ((_LAT_BATCH if header.attributes & TIMESTAMP_TYPE_MASK else 0) | (_CREATE_TIME if create_time else 0)
             | (_COMPACTED if compacted else 0) | (_CHECK_OFFSETS if check_offsets else 0))
    args = (arr, start, stop, header.records_count, header.base_timestamp, header.max_timestamp, flags, now_ms,
            before_max_ms, after_max_ms)
    status, at, n_err = _walk(*args, _NO_INDEX, _NO_KIND)
    if status != _OK:
        raise InvalidRecordError(f"{_where(pos, topic_partition)}: {_STATUS_TEXT[status]} (at byte {at - start} "
                                 f"of its {'decompressed ' if codec else ''}records)")
    if n_err == 0:
        return
    idx = np.empty(n_err, dtype=np.int64)  # rare: walk again to collect every record error, as Kafka lists them all
    kind = np.empty(n_err, dtype=np.int8)
    _walk(*args, idx, kind)
    errors = []
    any_timestamp = False
    for i, k in zip(idx[:n_err].tolist(), kind[:n_err].tolist()):
        if k == _KEY_MISSING:
            message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}"
        elif k == _BAD_TIMESTAMP:
            any_timestamp = True
            message = (f"Timestamp of the record at index {i} is out of range. The timestamp should be within "
                       f"[{now_ms - before_max_ms}, {now_ms + after_max_ms}]")
        else:
            any_timestamp = True
            message = (f"Invalid timestamp type in the record at index {i}. "
                       "Producer should not set timestamp type to LogAppendTime.")
        errors.append((i, message))
    if any_timestamp:
        raise _with_record_errors(
            InvalidTimestampError("One or more records have been rejected due to invalid timestamp"), errors)
    raise _with_record_errors(InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only showing "
        f"the first three errors at most: {[m for _, m in errors[:3]]}"), errors)

