"""The ``__consumer_offsets`` records of consumer groups (KIP-848), in Kafka 4.4's formats.

Each key is ``int16 record type`` + the key message (not flexible); each value is ``int16 version`` (0) +
the value message (flexible: compact strings and arrays, tagged fields), or null, a tombstone. Types:

- 3 ``ConsumerGroupMetadataKey`` (group) -> ``ConsumerGroupMetadataValue`` (group epoch; tag 0 the metadata
  hash of Kafka 4.1+, not written: tierlog recomputes the subscribed topics on every heartbeat);
- 4 ``ConsumerGroupPartitionMetadataKey`` -> ``...Value``: Kafka 4.1+ no longer writes it; read and ignored;
- 5 ``ConsumerGroupMemberMetadataKey`` (group, member) -> ``ConsumerGroupMemberMetadataValue``;
- 6 ``ConsumerGroupTargetAssignmentMetadataKey`` (group) -> ``...Value`` (assignment epoch);
- 7 ``ConsumerGroupTargetAssignmentMemberKey`` (group, member) -> ``...Value`` (partitions by topic id);
- 8 ``ConsumerGroupCurrentMemberAssignmentKey`` (group, member) -> ``...Value`` (member epoch, previous
  epoch, state, assigned partitions, partitions pending revocation);
- 16 ``ConsumerGroupRegularExpressionKey`` (group, regular expression) -> ``...Value`` (the topics it
  matched, the metadata version and the time of that resolution), a tombstone once no member uses it.

Field layouts come from Kafka's ``ConsumerGroup*Key.json`` / ``ConsumerGroup*Value.json``. Unknown tagged
fields (the classic member metadata of an upgraded member, say) are skipped when read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tierlog.coordinator.records import RecordFormatError, _Reader, _uvarint, _Writer

__all__ = [
    "CONSUMER_GROUP_KEY_TYPES",
    "ClassicMemberMetadata",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "TopicPartitions",
]

#: A member's partitions: topic id -> partition ids (sorted tuples, so that equal assignments compare equal).
TopicPartitions = dict[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regex: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tagged field 0, written when not 0


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member of a consumer group that speaks the classic protocol (JoinGroup/SyncGroup), as in tag 0 of
    ConsumerGroupMemberMetadataValue (KIP-848's online migration)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    #: tagged field 0 (Kafka 4.4's AssignmentTimestamp): when the target was computed, wall-clock ms; written when
    #: not 0. group.consumer.assignment.interval.ms counts from it.
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    partitions: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
    pending_revocation: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
    # Kafka 4.4's tagged field 0 of each TopicPartitions: the member epoch each partition was assigned at,
    # parallel to the partitions (empty: not known, as in records of older brokers).
    assigned_epochs: tuple[tuple[int, ...], ...] = ()
    pending_revocation_epochs: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """A regular expression's resolution: the topics it matched (sorted), the version of the metadata it was
    matched against (Kafka: its metadata log offset) and when (ms)."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


_KEYS = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    5: ConsumerGroupMemberMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
    16: ConsumerGroupRegularExpressionKey,
}
_TYPES = {cls: t for t, cls in _KEYS.items()}
CONSUMER_GROUP_KEY_TYPES = frozenset(_KEYS)
_WITH_MEMBER = (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                ConsumerGroupCurrentMemberAssignmentKey)


def is_consumer_group_key(key: object) -> bool:
    return type(key) in _TYPES


def encode_consumer_group_key(key) -> bytes:
    w = _Writer(flexible=False)
    w.int16(_TYPES[type(key)])
    w.string(key.group)
    if isinstance(key, _WITH_MEMBER):
        w.string(key.member_id)
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        w.string(key.regex)
    return bytes(w.buf)


def decode_consumer_group_key(record_type: int, r: _Reader):
    cls = _KEYS[record_type]
    group = r.string()
    if cls in _WITH_MEMBER or cls is ConsumerGroupRegularExpressionKey:
        return cls(group, r.string())
    return cls(group)


# -- values -------------------------------------------------------------------------------------

def _write_uuid(w: _Writer, u: uuid.UUID) -> None:
    w.buf += u.bytes


def _write_topic_partitions(w: _Writer, items, epochs=()) -> None:
    w.array_len(len(items))
    for i, (topic_id, partitions) in enumerate(items):
        _write_uuid(w, topic_id)
        w.array_len(len(partitions))
        for p in partitions:
            w.int32(p)
        topic_epochs = epochs[i] if i < len(epochs) else ()
        if topic_epochs:  # tagged field 0: AssignmentEpochs
            body = _Writer(flexible=True)
            body.array_len(len(topic_epochs))
            for e in topic_epochs:
                body.int32(e)
            w.buf += _uvarint(1) + _uvarint(0) + _uvarint(len(body.buf)) + body.buf
        else:
            w.tagged_fields()


def _read_topic_partitions(r: _Reader) -> tuple[tuple[tuple[uuid.UUID, tuple[int, ...]], ...], tuple]:
    out = []
    epochs = []
    for _ in range(r.array_len()):
        topic_id = uuid.UUID(bytes=bytes(r._take(16)))
        partitions = tuple(r.int32() for _ in range(r.array_len()))
        topic_epochs: tuple[int, ...] = ()
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.pos + size
            if tag == 0:
                topic_epochs = tuple(r.int32() for _ in range(r.array_len()))
            r.pos = end
        out.append((topic_id, partitions))
        epochs.append(topic_epochs)
    return tuple(out), tuple(epochs) if any(epochs) else ()


def encode_consumer_group_value(value) -> bytes:
    w = _Writer(flexible=True)
    w.int16(0)
    if isinstance(value, ConsumerGroupMetadataValue):
        w.int32(value.epoch)
        if value.metadata_hash:
            w.buf += b"\x01\x00\x08" + value.metadata_hash.to_bytes(8, "big", signed=True)  # 1 field: tag 0, 8 B
            return bytes(w.buf)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        w.string(value.instance_id)
        w.string(value.rack_id)
        w.string(value.client_id)
        w.string(value.client_host)
        w.array_len(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.string(name)
        w.string(value.subscribed_topic_regex)
        w.int32(value.rebalance_timeout_ms)
        w.string(value.server_assignor)
        classic = value.classic_member_metadata
        if classic is not None:  # tagged field 0: a nullable struct (its presence byte, then the fields)
            body = _Writer(flexible=True)
            body.buf += b"\x01"
            body.int32(classic.session_timeout_ms)
            body.array_len(len(classic.supported_protocols))
            for name, metadata in classic.supported_protocols:
                body.string(name)
                body.bytes_(metadata)
                body.tagged_fields()
            body.tagged_fields()
            w.buf += _uvarint(1) + _uvarint(0) + _uvarint(len(body.buf)) + body.buf
            return bytes(w.buf)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
        if value.assignment_timestamp:
            w.buf += b"\x01\x00\x08" + value.assignment_timestamp.to_bytes(8, "big", signed=True)  # tag 0, 8 B
            return bytes(w.buf)
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        w.array_len(len(value.topics))
        for name in value.topics:
            w.string(name)
        w.int64(value.version)
        w.int64(value.timestamp)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        _write_topic_partitions(w, value.partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.buf += value.state.to_bytes(1, "big", signed=True)
        _write_topic_partitions(w, value.assigned, value.assigned_epochs)
        _write_topic_partitions(w, value.pending_revocation, value.pending_revocation_epochs)
    else:
        raise TypeError(f"not a consumer group value: {value!r}")
    w.tagged_fields()
    return bytes(w.buf)


def _tag0_int64(r: _Reader) -> int:
    """The int64 in tagged field 0 of the tagged fields at ``r`` (the metadata hash, the assignment's
    timestamp), 0 when absent; the other tags are skipped."""
    value = 0
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = bytes(r._take(size))
        if tag == 0 and size == 8:
            value = int.from_bytes(data, "big", signed=True)
    return value


def decode_consumer_group_value(key, data) -> object | None:
    """The value of ``key``'s type; None for a partition metadata record (not used since Kafka 4.1)."""
    r = _Reader(data, flexible=True)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown {type(key).__name__[:-3]}Value version {version}")
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch = r.int32()
        return ConsumerGroupMetadataValue(epoch, _tag0_int64(r))
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        instance_id = r.string(nullable=True)
        rack_id = r.string(nullable=True)
        client_id = r.string()
        client_host = r.string()
        names = tuple(r.string() for _ in range(r.array_len()))
        regex = r.string(nullable=True)
        timeout, assignor = r.int32(), r.string(nullable=True)
        classic = None
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.pos + size
            if tag == 0 and size > 0 and bytes(r._take(1)) == b"\x01":
                session_timeout = r.int32()
                protocols = []
                for _ in range(r.array_len()):
                    name, metadata = r.string(), r.bytes_()
                    r.tagged_fields()
                    protocols.append((name, bytes(metadata)))
                classic = ClassicMemberMetadata(session_timeout, tuple(protocols))
            r.pos = end
        return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                                timeout, assignor, classic)
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        epoch = r.int32()
        return ConsumerGroupTargetAssignmentMetadataValue(epoch, _tag0_int64(r))
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        topics = tuple(r.string() for _ in range(r.array_len()))
        value = ConsumerGroupRegularExpressionValue(topics, r.int64(), r.int64())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        value = ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(r)[0])
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member_epoch, previous = r.int32(), r.int32()
        state = int.from_bytes(r._take(1), "big", signed=True)
        assigned, assigned_epochs = _read_topic_partitions(r)
        pending, pending_epochs = _read_topic_partitions(r)
        value = ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous, state, assigned, pending,
                                                          assigned_epochs, pending_epochs)
    else:
        return None
    r.tagged_fields()
    return value
