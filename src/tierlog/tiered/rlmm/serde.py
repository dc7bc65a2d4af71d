"""Record values of the ``__remote_log_metadata`` topic, byte-compatible with Kafka's
``RemoteLogMetadataSerde``.

A value is ``uvarint(frame version 1) uvarint(api key) uvarint(record version 0) body``. Bodies are
Kafka's flexible encoding of the message schemas in Kafka's ``storage/src/main/resources/message``:

- 0 ``RemoteLogSegmentMetadataRecord``: SegmentId{TopicIdPartition{Name, Id, Partition}, Id},
  StartOffset, EndOffset, BrokerId, MaxTimestampMs, EventTimestampMs, SegmentLeaderEpochs[]{LeaderEpoch,
  Offset}, SegmentSizeInBytes, CustomMetadata (nullable bytes), RemoteLogSegmentState (int8)
- 1 ``RemoteLogSegmentMetadataUpdateRecord``: SegmentId, BrokerId, EventTimestampMs, CustomMetadata, State
- 2 ``RemotePartitionDeleteMetadataRecord``: TopicIdPartition, BrokerId, EventTimestampMs, State
- 3 ``RemoteLogSegmentMetadataSnapshotRecord``: like 0 but with only the segment's uuid (no topic
  partition); never produced to the topic, used in per-partition snapshot files.

Strings, bytes and arrays carry uvarint(length + 1) (0 is null); uuids are 16 raw bytes; every struct,
nested ones and array elements too, ends with a tagged-field section, whose unknown fields a reader
skips. Decoding runs for every metadata record a broker replays at start, so it works on offsets into
one ``bytes`` with precompiled structs.
"""

from __future__ import annotations

import struct
import uuid

from tierlog.tiered.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY = 3
RECORD_VERSION = 0
_API_KEYS = (SEGMENT_METADATA_API_KEY, SEGMENT_METADATA_UPDATE_API_KEY, PARTITION_DELETE_API_KEY,
             SEGMENT_METADATA_SNAPSHOT_API_KEY)

# StartOffset, EndOffset, BrokerId, MaxTimestampMs, EventTimestampMs: adjacent in records 0 and 3.
_SEGMENT_FIXED = struct.Struct(">qqiqq")
_EPOCH_ENTRY = struct.Struct(">iq")
# BrokerId, EventTimestampMs: adjacent in records 1 and 2.
_BROKER_TIME = struct.Struct(">iq")
_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")
_MAX_STRING_BYTES = 0x7FFF  # Kafka's generated code refuses longer strings both ways
_MIN_EPOCH_ENTRY_BYTES = _EPOCH_ENTRY.size + 1  # fields + empty tagged-field section
_SEGMENT_STATES = tuple(RemoteLogSegmentState)  # indexed by id: 0, 1, 2, 3
# Encoded TopicIdPartitionEntry (without its tagged fields) -> the decoded object; see _topic_id_partition.
_TOPIC_ID_PARTITIONS: dict[bytes, TopicIdPartition] = {}
_MAX_INTERNED = 100_000


class MetadataRecordError(ValueError):
    """A ``__remote_log_metadata`` value that cannot be encoded or decoded (Kafka's MetadataParseException)."""


# ---------------------------------------------------------------------------------------------- encoding

def _put_uvarint(out: bytearray, v: int) -> None:
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_string(out: bytearray, s: str) -> None:
    raw = s.encode()
    if len(raw) > _MAX_STRING_BYTES:
        raise MetadataRecordError(f"string of {len(raw)} bytes is too long to be serialized")
    _put_uvarint(out, len(raw) + 1)
    out += raw


def _put_nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(0)
    else:
        _put_uvarint(out, len(b) + 1)
        out += b


def _put_topic_id_partition(out: bytearray, tp: TopicIdPartition) -> None:
    _put_string(out, tp.topic)
    out += tp.topic_id.bytes
    out += _INT32.pack(tp.partition)
    out.append(0)  # tagged fields


def _put_segment_id(out: bytearray, segment_id: RemoteLogSegmentId) -> None:
    _put_topic_id_partition(out, segment_id.topic_id_partition)
    out += segment_id.id.bytes
    out.append(0)


def _put_segment_fields(out: bytearray, md: RemoteLogSegmentMetadata) -> None:
    """Everything of records 0 and 3 after the segment id, with the top-level tagged-field section."""
    out += _SEGMENT_FIXED.pack(md.start_offset, md.end_offset, md.broker_id, md.max_timestamp_ms,
                               md.event_timestamp_ms)
    epochs = md.segment_leader_epochs  # ascending, as Kafka's NavigableMap iterates
    _put_uvarint(out, len(epochs) + 1)
    for epoch, offset in epochs.items():
        out += _EPOCH_ENTRY.pack(epoch, offset)
        out.append(0)
    out += _INT32.pack(md.segment_size_in_bytes)
    _put_nullable_bytes(out, md.custom_metadata)
    out += _INT8.pack(md.state)
    out.append(0)


def serialize(event: RemoteLogMetadata) -> bytes:
    """The record value Kafka's ``RemoteLogMetadataSerde.serialize`` writes for ``event``."""
    try:
        if isinstance(event, RemoteLogSegmentMetadata):
            out = bytearray((FRAME_VERSION, SEGMENT_METADATA_API_KEY, RECORD_VERSION))
            _put_segment_id(out, event.segment_id)
            _put_segment_fields(out, event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            out = bytearray((FRAME_VERSION, SEGMENT_METADATA_UPDATE_API_KEY, RECORD_VERSION))
            _put_segment_id(out, event.segment_id)
            out += _BROKER_TIME.pack(event.broker_id, event.event_timestamp_ms)
            _put_nullable_bytes(out, event.custom_metadata)
            out += _INT8.pack(event.state)
            out.append(0)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            out = bytearray((FRAME_VERSION, PARTITION_DELETE_API_KEY, RECORD_VERSION))
            _put_topic_id_partition(out, event.topic_id_partition)
            out += _BROKER_TIME.pack(event.broker_id, event.event_timestamp_ms)
            out += _INT8.pack(event.state)
            out.append(0)
        else:
            raise TypeError(f"no remote log metadata record for {type(event).__name__}")
    except struct.error as e:  # a field out of its wire type's range
        raise MetadataRecordError(f"cannot serialize {event}: {e}") from e
    return bytes(out)


def serialize_snapshot(md: RemoteLogSegmentMetadata) -> bytes:
    """``md`` as a RemoteLogSegmentMetadataSnapshotRecord value: the segment without its topic partition."""
    out = bytearray((FRAME_VERSION, SEGMENT_METADATA_SNAPSHOT_API_KEY, RECORD_VERSION))
    out += md.segment_id.id.bytes
    try:
        _put_segment_fields(out, md)
    except struct.error as e:
        raise MetadataRecordError(f"cannot serialize {md}: {e}") from e
    return bytes(out)


# ---------------------------------------------------------------------------------------------- decoding
# Readers take (buffer, position) and return (value, new position). Fixed-size reads go through
# struct.unpack_from, whose struct.error on a short buffer is turned into MetadataRecordError once,
# at the top; variable-size reads check their bounds themselves.

def _truncated() -> MetadataRecordError:
    return MetadataRecordError("record value is truncated")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        b = buf[pos]
    except IndexError:
        raise _truncated() from None
    if b < 0x80:
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        try:
            b = buf[pos]
        except IndexError:
            raise _truncated() from None
        if b < 0x80:
            # Kafka reads unsigned varints into a 32-bit int.
            return (value | (b << shift)) & 0xFFFFFFFF, pos + 1
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > 28:
            raise MetadataRecordError("unsigned varint is longer than 5 bytes")


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    if pos < len(buf) and buf[pos] == 0:  # the usual case: no tagged fields
        return pos + 1
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise _truncated()
    return pos


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = _uvarint(buf, pos)
    if n == 0:
        raise MetadataRecordError("non-nullable string field was serialized as null")
    n -= 1
    if n > _MAX_STRING_BYTES:
        raise MetadataRecordError(f"string field has invalid length {n}")
    end = pos + n
    if end > len(buf):
        raise _truncated()
    # Java decodes with replacement characters rather than failing; so do we.
    return buf[pos:end].decode("utf-8", "replace"), end


def _nullable_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _truncated()
    return buf[pos:end], end


def _uuid(buf: bytes, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise _truncated()
    return uuid.UUID(bytes=buf[pos:end]), end


def _topic_id_partition(buf: bytes, pos: int) -> tuple[TopicIdPartition, int]:
    # Every record of a partition repeats its TopicIdPartitionEntry: reuse one object per distinct
    # encoding, which saves building a uuid and a dataclass per record and shares them in the cache.
    name_len, name_pos = _uvarint(buf, pos)
    fields_end = name_pos + name_len - 1 + 20  # name, topic id, partition
    key = buf[pos:fields_end]
    tp = _TOPIC_ID_PARTITIONS.get(key)
    if tp is None:  # a malformed or truncated entry never matches: cached keys are well-formed
        name, p = _string(buf, pos)
        topic_id, p = _uuid(buf, p)
        (partition,) = _INT32.unpack_from(buf, p)
        tp = TopicIdPartition(topic_id, name, partition)
        if len(_TOPIC_ID_PARTITIONS) >= _MAX_INTERNED:
            _TOPIC_ID_PARTITIONS.clear()
        _TOPIC_ID_PARTITIONS[key] = tp
    return tp, _skip_tagged_fields(buf, fields_end)


def _segment_id(buf: bytes, pos: int) -> tuple[RemoteLogSegmentId, int]:
    tp, pos = _topic_id_partition(buf, pos)
    seg_uuid, pos = _uuid(buf, pos)
    return RemoteLogSegmentId(tp, seg_uuid), _skip_tagged_fields(buf, pos)


def _segment_state(state_id: int) -> RemoteLogSegmentState:
    if 0 <= state_id < len(_SEGMENT_STATES):
        return _SEGMENT_STATES[state_id]
    raise MetadataRecordError(f"unknown remote log segment state {state_id}")


def _segment(buf: bytes, pos: int, segment_id: RemoteLogSegmentId) -> tuple[RemoteLogSegmentMetadata, int]:
    """Records 0 and 3 after the segment id."""
    start, end, broker_id, max_ts, event_ts = _SEGMENT_FIXED.unpack_from(buf, pos)
    pos += _SEGMENT_FIXED.size
    n, pos = _uvarint(buf, pos)
    if n == 0:
        raise MetadataRecordError("non-nullable field SegmentLeaderEpochs was serialized as null")
    n -= 1
    if n * _MIN_EPOCH_ENTRY_BYTES > len(buf) - pos:
        raise _truncated()
    epochs = {}
    for _ in range(n):
        epoch, offset = _EPOCH_ENTRY.unpack_from(buf, pos)
        pos = _skip_tagged_fields(buf, pos + _EPOCH_ENTRY.size)
        epochs[epoch] = offset  # a repeated epoch: the last one wins, as Java's HashMap.put
    (size,) = _INT32.unpack_from(buf, pos)
    custom, pos = _nullable_bytes(buf, pos + 4)
    (state,) = _INT8.unpack_from(buf, pos)
    pos = _skip_tagged_fields(buf, pos + 1)
    # A state other than COPY_SEGMENT_STARTED is kept: the serde does not enforce states, the RLMM does.
    md = RemoteLogSegmentMetadata(segment_id, start, end, max_ts, broker_id, event_ts, size, epochs, custom,
                                  _segment_state(state))
    return md, pos


def _update(buf: bytes, pos: int) -> tuple[RemoteLogSegmentMetadataUpdate, int]:
    segment_id, pos = _segment_id(buf, pos)
    broker_id, event_ts = _BROKER_TIME.unpack_from(buf, pos)
    custom, pos = _nullable_bytes(buf, pos + _BROKER_TIME.size)
    (state,) = _INT8.unpack_from(buf, pos)
    pos = _skip_tagged_fields(buf, pos + 1)
    return RemoteLogSegmentMetadataUpdate(segment_id, event_ts, custom, _segment_state(state), broker_id), pos


def _partition_delete(buf: bytes, pos: int) -> tuple[RemotePartitionDeleteMetadata, int]:
    tp, pos = _topic_id_partition(buf, pos)
    broker_id, event_ts = _BROKER_TIME.unpack_from(buf, pos)
    (state_id,) = _INT8.unpack_from(buf, pos + _BROKER_TIME.size)
    pos = _skip_tagged_fields(buf, pos + _BROKER_TIME.size + 1)
    try:
        state = RemotePartitionDeleteState(state_id)
    except ValueError:
        raise MetadataRecordError(f"unknown remote partition delete state {state_id}") from None
    return RemotePartitionDeleteMetadata(tp, state, event_ts, broker_id), pos


def _header(buf: bytes) -> tuple[int, int]:
    """(api key, body position) after checking the frame and record versions."""
    frame_version, pos = _uvarint(buf, 0)
    if frame_version == 0:
        raise MetadataRecordError("cannot deserialize a metadata record with frame version 0")
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(f"unknown frame version {frame_version} (only {FRAME_VERSION} is supported)")
    api_key, pos = _uvarint(buf, pos)
    if api_key not in _API_KEYS:
        raise MetadataRecordError(f"unknown remote log metadata api key {api_key}")
    version, pos = _uvarint(buf, pos)
    if version != RECORD_VERSION:
        raise MetadataRecordError(f"unsupported version {version} of remote log metadata api key {api_key}")
    return api_key, pos


def _check_end(buf: bytes, pos: int, api_key: int) -> None:
    if pos != len(buf):
        raise MetadataRecordError(f"found {len(buf) - pos} byte(s) of garbage after api key {api_key}")


def deserialize(value: bytes) -> RemoteLogMetadata:
    """The event in a ``__remote_log_metadata`` record value. Snapshot records (api key 3) carry no
    topic partition and are refused here: read them with :func:`deserialize_snapshot`."""
    buf = bytes(value)
    api_key, pos = _header(buf)
    try:
        event: RemoteLogMetadata
        if api_key == SEGMENT_METADATA_API_KEY:
            segment_id, pos = _segment_id(buf, pos)
            event, pos = _segment(buf, pos, segment_id)
        elif api_key == SEGMENT_METADATA_UPDATE_API_KEY:
            event, pos = _update(buf, pos)
        elif api_key == PARTITION_DELETE_API_KEY:
            event, pos = _partition_delete(buf, pos)
        else:
            raise MetadataRecordError("a RemoteLogSegmentMetadataSnapshotRecord has no topic partition; "
                                      "use deserialize_snapshot")
    except MetadataRecordError:
        raise
    except struct.error:
        raise _truncated() from None
    except ValueError as e:  # the data model refused a decoded value (negative start offset, no epochs, ...)
        raise MetadataRecordError(f"invalid record with api key {api_key}: {e}") from e
    _check_end(buf, pos, api_key)
    return event


def deserialize_snapshot(value: bytes, tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """A RemoteLogSegmentMetadataSnapshotRecord value as the segment of ``tp`` it describes."""
    buf = bytes(value)
    api_key, pos = _header(buf)
    if api_key != SEGMENT_METADATA_SNAPSHOT_API_KEY:
        raise MetadataRecordError(f"expected a snapshot record (api key {SEGMENT_METADATA_SNAPSHOT_API_KEY}), "
                                  f"got api key {api_key}")
    try:
        seg_uuid, pos = _uuid(buf, pos)
        md, pos = _segment(buf, pos, RemoteLogSegmentId(tp, seg_uuid))
    except MetadataRecordError:
        raise
    except struct.error:
        raise _truncated() from None
    except ValueError as e:
        raise MetadataRecordError(f"invalid snapshot record: {e}") from e
    _check_end(buf, pos, api_key)
    return md
