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
bare errors. The walk over the records is a numba kernel (``_walk``) over the request's own ``bytes``
(an uncompressed batch) or a uint8 numpy array (decompressed records), no Python per record;
:func:`warm_up` compiles it (or loads it from numba's cache) and should run in the background when the
broker starts: until it has, :func:`validate_batch_records` runs the same kernel as plain Python
(correct, slower), so a produce never waits for the compiler.
"""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import numpy as np
from numba import njit

from tierlog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    UnknownServerError,
)
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

__all__ = ["validate_batch_records", "decompression_limit", "warm_up", "is_compiled", "record_errors_of",
           "MIN_DECOMPRESSION_LIMIT", "DECOMPRESSION_RECORDS_FACTOR"]

# Kernel answers. Statuses of the walk:
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


@njit(cache=True, nogil=True, inline="always")
def _varint(buf, pos, end):
    """A zigzag varint of at most 5 bytes (Kafka's ByteUtils.readVarint): (value, next position), the
    position -1 at the end of the data, -2 for a sixth byte."""
    value = 0
    shift = 0
    for _ in range(5):
        if pos >= end:
            return 0, -1
        b = np.int64(buf[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value &= 0xFFFFFFFF
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    return 0, -2


@njit(cache=True, nogil=True, inline="always")
def _varlong(buf, pos, end):
    """A zigzag varlong of at most 10 bytes (ByteUtils.readVarlong), as _varint."""
    value = 0
    shift = 0
    for _ in range(10):
        if pos >= end:
            return 0, -1
        b = np.int64(buf[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return ((value >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(value & 1), pos
        shift += 7
    return 0, -2


# The varint readers are shared with the other compiled record scans (the Spark columnar decoder):
# numba inlines them into any njit caller.
read_varint = _varint
read_varlong = _varlong


# The kernel's switches, packed into one argument (each argument costs numba's dispatcher a type lookup).
_LAT_BATCH = 1  # the batch says LogAppendTime
_CREATE_TIME = 2  # the topic's message.timestamp.type is CreateTime
_COMPACTED = 4  # the topic's cleanup.policy has compact
_CHECK_OFFSETS = 8


# Not nogil: a walk takes microseconds on the event loop, where giving up the GIL and taking it back costs
# more than the walk (and lets another thread in between).
@njit(cache=True)
def _walk(buf, pos, end, count, base_ts, max_ts, flags, now, before, after, err_index, err_kind):
    """Walk ``count`` records in ``buf[pos:end]``. Returns (status, position of the failing record or the
    end, number of record errors); the first ``len(err_index)`` record errors are written to
    ``err_index`` / ``err_kind``. A status other than _OK means the records cannot be read."""
    lat_batch = (flags & _LAT_BATCH) != 0
    create_time = (flags & _CREATE_TIME) != 0
    compacted = (flags & _COMPACTED) != 0
    check_offsets = (flags & _CHECK_OFFSETS) != 0
    n_err = 0
    cap = err_index.shape[0]
    for i in range(count):
        at = pos
        size, pos = _varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if size > end - pos:
            return _RECORD_SIZE_BEYOND, at, 0
        start = pos
        if pos >= end:
            return _EOF, at, 0
        pos += 1  # attributes: unused in v2
        ts_delta, pos = _varlong(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        offset_delta, pos = _varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        key_size, pos = _varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if key_size >= 0:
            if key_size > end - pos:
                return _EOF, at, 0
            pos += key_size
        value_size, pos = _varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if value_size >= 0:
            if value_size > end - pos:
                return _EOF, at, 0
            pos += value_size
        n_headers, pos = _varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if n_headers < 0 or n_headers > end - pos:
            return _HEADER_COUNT, at, 0
        for _ in range(n_headers):
            hk, pos = _varint(buf, pos, end)
            if pos < 0:
                return -pos, at, 0
            if hk < 0:
                return _HEADER_KEY_SIZE, at, 0
            if hk > end - pos:
                return _EOF, at, 0
            pos += hk
            hv, pos = _varint(buf, pos, end)
            if pos < 0:
                return -pos, at, 0
            if hv >= 0:
                if hv > end - pos:
                    return _EOF, at, 0
                pos += hv
        if pos - start != size:
            return _RECORD_SIZE_MISMATCH, at, 0
        if check_offsets and offset_delta != i:
            return _OFFSET_DELTA, at, 0
        # LogValidator.validateRecord: the key first, then the timestamp; one error a record.
        kind = 0
        if compacted and key_size < 0:
            kind = _KEY_MISSING
        else:
            ts = max_ts if lat_batch else base_ts + ts_delta
            if create_time and ts != -1:
                if now - ts > before or ts - now > after:
                    kind = _BAD_TIMESTAMP
            elif lat_batch:
                kind = _LOG_APPEND_TIME
        if kind != 0:
            if n_err < cap:
                err_index[n_err] = i
                err_kind[n_err] = kind
            n_err += 1
    if pos != end:
        return _REMAINING, pos, n_err
    return _OK, pos, n_err


_compiled = threading.Event()
_U8 = np.dtype(np.uint8)
# The first walk collects no record errors, only their number (they are rare): a batch with some is walked
# again into arrays of that size. Zero-length arrays are never written, so one pair serves every thread.
_NO_INDEX = np.empty(0, dtype=np.int64)
_NO_KIND = np.empty(0, dtype=np.int8)


def is_compiled() -> bool:
    """Whether the kernel is compiled (or loaded from numba's cache) in this process."""
    return _compiled.is_set()


def warm_up() -> float:
    """Compile the kernel (or load it from numba's cache) by validating a small batch; returns the
    seconds it took. Thread-safe; later calls return at once."""
    if _compiled.is_set():
        return 0.0
    started = time.perf_counter()
    # One record: length 8, attributes, ts delta 0, offset delta 0, key -1, value -1, 0 headers. Numba
    # compiles a bytes object, read-only arrays (over bytes) and writable ones (over a bytearray, a
    # decompressed buffer) apart.
    record = bytes([16, 0, 0, 0, 1, 1, 0])
    for buf in (record, np.frombuffer(record, dtype=_U8), np.frombuffer(bytearray(record), dtype=_U8)):
        _walk(buf, 0, len(buf), 1, 0, 0, _CREATE_TIME | _CHECK_OFFSETS, 0, 0, 0, _NO_INDEX, _NO_KIND)
    _compiled.set()
    return time.perf_counter() - started


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
    start = 0  # where the records begin in what the kernel walks
    if codec == 0:
        whole = buf.obj if isinstance(buf, memoryview) else buf
        if type(whole) is bytes and (whole is buf or buf.nbytes == len(whole)):
            # The kernel walks the request's own bytes object (numba takes it as a read-only buffer): no
            # array view to make, which on the event loop cost more than the walk itself.
            arr, start = whole, pos + RECORD_BATCH_OVERHEAD
        else:
            arr = np.frombuffer(buf, dtype=_U8, count=end - pos - RECORD_BATCH_OVERHEAD,
                                offset=pos + RECORD_BATCH_OVERHEAD)
    else:
        limit = decompression_limit(header.records_count, max_message_bytes)
        payload = memoryview(buf)[pos + RECORD_BATCH_OVERHEAD:end]
        try:
            arr = np.frombuffer(decompress_bounded(CompressionType(codec), payload, limit), dtype=_U8)
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
    walk = _walk if _compiled.is_set() else _walk_twin
    flags = ((_LAT_BATCH if header.attributes & TIMESTAMP_TYPE_MASK else 0) | (_CREATE_TIME if create_time else 0)
             | (_COMPACTED if compacted else 0) | (_CHECK_OFFSETS if check_offsets else 0))
    stop = end if start else len(arr)
    args = (arr, start, stop, header.records_count, header.base_timestamp, header.max_timestamp, flags, now_ms,
            before_max_ms, after_max_ms)
    status, at, n_err = walk(*args, _NO_INDEX, _NO_KIND)
    if status != _OK:
        raise InvalidRecordError(f"{_where(pos, topic_partition)}: {_STATUS_TEXT[status]} (at byte {at - start} "
                                 f"of its {'decompressed ' if codec else ''}records)")
    if n_err == 0:
        return
    idx = np.empty(n_err, dtype=np.int64)  # rare: walk again to collect every record error, as Kafka lists them all
    kind = np.empty(n_err, dtype=np.int8)
    walk(*args, idx, kind)
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


# The kernel as plain Python, for produces while it compiles: ``_walk``'s code with the varint readers' own
# Python functions. ``_walk.py_func`` alone would call their numba dispatchers, which compile on the caller's
# thread (the event loop) under numba's compiler lock, held by the compiling thread: the first produce
# would wait for the whole compile (tens of seconds on a busy machine).
_walk_twin = types.FunctionType(_walk.py_func.__code__,
                                {**globals(), "_varint": _varint.py_func, "_varlong": _varlong.py_func},
                                "_walk_twin", _walk.py_func.__defaults__, _walk.py_func.__closure__)
