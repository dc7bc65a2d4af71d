"""Records of ``__consumer_offsets`` in Kafka's format, and the group-to-partition mapping.

Every record's key is ``int16 record type`` + the key message; its value is ``int16 version`` + the
value message, or null (a tombstone). The record type is the key's schema version
(Kafka's ``CoordinatorRecordSerde``):

- types 0 and 1: ``OffsetCommitKey`` (group, topic, partition) -> ``OffsetCommitValue`` v0-4;
- type 2: ``GroupMetadataKey`` (group) -> ``GroupMetadataValue`` v0-4;
- types 3 to 8 are the consumer group (KIP-848) records, in :mod:`.consumer_group_records`; the other types
  (share and streams groups, the regular expressions' records) are recognised as :class:`UnknownKey` and
  skipped when loading.

Kafka writes keys of type 1 and 2, ``OffsetCommitValue`` v3 (v1 when an expire timestamp is set,
OffsetCommit v2-v4 with a retention time) and ``GroupMetadataValue`` v3 - the newest non-flexible
versions (``MetadataVersion.offsetCommitValueVersion`` / ``groupMetadataValueVersion``); tierlog
writes the same. Versions 4 (flexible: compact strings and tagged fields) are read as well.

Field layouts come from Kafka's ``OffsetCommitKey.json``, ``OffsetCommitValue.json``,
``GroupMetadataKey.json`` and ``GroupMetadataValue.json``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.records.record import encode_uvarint as _uvarint

__all__ = [
    "CoordinatorRecord",
    "RecordWriter",
    "GROUP_METADATA_KEY_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSETS_TOPIC",
    "OFFSET_COMMIT_KEY_TYPE",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "UnknownKey",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_TYPE = 1
GROUP_METADATA_KEY_TYPE = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
_FLEXIBLE = 4  # first flexible version of both values


class RecordFormatError(ValueError):
    """A ``__consumer_offsets`` record that does not follow Kafka's schemas."""


# -- group -> partition -------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``31*h + c`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % numPartitions`` (``Utils.abs(MIN_VALUE)`` is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- messages -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record type tierlog does not use (consumer/share group records of KIP-848/932)."""

    record_type: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1        # v3+
    expire_timestamp: int = -1    # v1 only


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1             # v1+
    group_instance_id: str | None = None    # v3+


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1       # v2+
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


#: A decoded record: (key, value), the value None for a tombstone (Kafka's ``CoordinatorRecord``).
CoordinatorRecord = tuple[OffsetCommitKey | GroupMetadataKey, OffsetCommitValue | GroupMetadataValue | None]

#: Appends records to the ``__consumer_offsets`` partition a manager serves, as one batch; raises
#: :class:`~tierlog.errors.KafkaError` when the write fails (nothing is then applied).
RecordWriter = Callable[[list[CoordinatorRecord]], None]


# -- primitive writers/readers ------------------------------------------------------------------



class _Writer:
    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.buf = bytearray()

    def int16(self, v: int) -> None:
        self.buf += struct.pack(">h", v)

    def int32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def int64(self, v: int) -> None:
        self.buf += struct.pack(">q", v)

    def string(self, v: str | None) -> None:
        if v is None:
            if self.flexible:
                self.buf += _uvarint(0)
            else:
                self.int16(-1)
            return
        data = v.encode("utf-8")
        if self.flexible:
            self.buf += _uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise RecordFormatError(f"string of {len(data)} bytes is too long")
            self.int16(len(data))
        self.buf += data

    def bytes_(self, v: bytes) -> None:
        if self.flexible:
            self.buf += _uvarint(len(v) + 1)
        else:
            self.int32(len(v))
        self.buf += v

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.buf += _uvarint(n + 1)
        else:
            self.int32(n)

    def tagged_fields(self) -> None:
        if self.flexible:
            self.buf += _uvarint(0)


class _Reader:
    def __init__(self, data: bytes | memoryview, flexible: bool = False):
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"record ends after {len(self.data)} bytes, needed {self.pos + n}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise RecordFormatError("record ends inside an unsigned varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("unsigned varint longer than 5 bytes")

    def string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            if not nullable:
                raise RecordFormatError("null for a non-nullable string")
            return None
        try:
            return str(self._take(n), "utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"invalid UTF-8 string: {e}") from None

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null for non-nullable bytes")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null for a non-nullable array")
        return n

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())  # unknown tagged fields are skipped, as Kafka does


# -- keys ---------------------------------------------------------------------------------------

def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    w = _Writer(flexible=False)
    if isinstance(key, OffsetCommitKey):
        w.int16(OFFSET_COMMIT_KEY_TYPE)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        w.int16(GROUP_METADATA_KEY_TYPE)
        w.string(key.group)
    else:
        from tierlog.coordinator import consumer_group_records as cg
        if cg.is_consumer_group_key(key):
            return cg.encode_consumer_group_key(key)
        raise TypeError(f"not a __consumer_offsets key: {key!r}")
    return bytes(w.buf)


# Fast paths for what loading decodes most (an OffsetCommit key and a non-flexible OffsetCommit value): a
# struct unpack per fixed run of fields instead of one call per field. Anything unusual (short data, a null
# or bad string, another version) returns None and goes through _Reader, which names the problem.
_HH = struct.Struct(">hh")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_HQ = struct.Struct(">hq")
_HQIH = struct.Struct(">hqih")


def _fast_offset_commit_key(data) -> OffsetCommitKey | None:
    try:
        record_type, n = _HH.unpack_from(data)
        if record_type not in (0, 1) or n < 0:
            return None
        p = 4 + n
        (m,) = _H.unpack_from(data, p)
        q = p + 2 + m
        if m < 0 or q + 4 > len(data):
            return None
        return OffsetCommitKey(str(data[4:p], "utf-8"), str(data[p + 2:q], "utf-8"), _I.unpack_from(data, q)[0])
    except (struct.error, UnicodeDecodeError):
        return None


def _fast_offset_commit_value(data) -> OffsetCommitValue | None:
    try:
        (version,) = _H.unpack_from(data)
        if version == 3:
            _, offset, leader_epoch, n = _HQIH.unpack_from(data)
            p = 16
        elif 0 <= version <= 2:
            _, offset = _HQ.unpack_from(data)
            (n,) = _H.unpack_from(data, 10)
            leader_epoch, p = -1, 12
        else:
            return None
        if n < 0:
            return None
        metadata = str(data[p:p + n], "utf-8")
        p += n
        if version == 1:
            commit_timestamp, expire_timestamp = _QQ.unpack_from(data, p)
        else:
            (commit_timestamp,), expire_timestamp = _Q.unpack_from(data, p), -1
        return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)
    except (struct.error, UnicodeDecodeError):
        return None


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    key = _fast_offset_commit_key(data)
    if key is not None:
        return key
    r = _Reader(data)
    record_type = r.int16()
    if record_type in (0, 1):
        key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif record_type == 2:
        key = GroupMetadataKey(r.string())
    elif 3 <= record_type <= 8 or record_type == 16:  # consumer_group_records.CONSUMER_GROUP_KEY_TYPES
        from tierlog.coordinator import consumer_group_records as cg
        key = cg.decode_consumer_group_key(record_type, r)
    else:
        return UnknownKey(record_type)
    return key


# -- values -------------------------------------------------------------------------------------

def encode_value(value: OffsetCommitValue | GroupMetadataValue | None, version: int | None = None) -> bytes | None:
    """The value bytes (``None`` stays ``None``: a tombstone). ``version`` defaults to Kafka's choice."""
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        if version is None:
            version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 \
                else OFFSET_COMMIT_VALUE_VERSION
        return _encode_offset_commit_value(value, version)
    if isinstance(value, GroupMetadataValue):
        return _encode_group_metadata_value(value, GROUP_METADATA_VALUE_VERSION if version is None else version)
    from tierlog.coordinator import consumer_group_records as cg
    return cg.encode_consumer_group_value(value)  # raises TypeError for anything else


def decode_value(key: OffsetCommitKey | GroupMetadataKey, data: bytes | memoryview | None):
    """The value for ``key``'s record type, or None for a tombstone."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return _fast_offset_commit_value(data) or _decode_offset_commit_value(data)
    if isinstance(key, GroupMetadataKey):
        return _decode_group_metadata_value(data)
    from tierlog.coordinator import consumer_group_records as cg
    if cg.is_consumer_group_key(key):
        return cg.decode_consumer_group_value(key, data)
    raise TypeError(f"no value schema for {key!r}")


def _encode_offset_commit_value(v: OffsetCommitValue, version: int) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"OffsetCommitValue has no version {version}")
    w = _Writer(flexible=version >= _FLEXIBLE)
    w.int16(version)
    w.int64(v.offset)
    if version >= 3:
        w.int32(v.leader_epoch)
    w.string(v.metadata)
    w.int64(v.commit_timestamp)
    if version == 1:
        w.int64(v.expire_timestamp)
    w.tagged_fields()
    return bytes(w.buf)


def _decode_offset_commit_value(data) -> OffsetCommitValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= _FLEXIBLE
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.tagged_fields()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def _encode_group_metadata_value(v: GroupMetadataValue, version: int) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue has no version {version}")
    w = _Writer(flexible=version >= _FLEXIBLE)
    w.int16(version)
    w.string(v.protocol_type)
    w.int32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    if version >= 2:
        w.int64(v.current_state_timestamp)
    w.array_len(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tagged_fields()
    w.tagged_fields()
    return bytes(w.buf)


def _decode_group_metadata_value(data) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= _FLEXIBLE
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        group_instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(MemberMetadata(member_id, client_id, client_host, session_timeout, subscription, assignment,
                                      rebalance_timeout, group_instance_id))
    r.tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
