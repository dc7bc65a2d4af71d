"""Where and how the built-in storage managers keep a remote segment (docs/tiered-storage-layout.md).

A segment is three objects under one deterministic key stem::

    {prefix}{clusterId}/{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.log       the .log bytes
    {prefix}{clusterId}/{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.indexes   all indexes
    {prefix}{clusterId}/{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.manifest  JSON, last

The cluster folder keeps clusters that share a bucket or folder apart. The older layout has no
``{clusterId}/`` part (``rsm.config.key.cluster.id.enable=false`` still writes it); both are read.

Ids are Kafka's base64 text form. This module only builds and parses keys and the byte formats of
``.indexes`` and ``.manifest``; it does no I/O.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c

from tierlog.kafka_uuid import uuid_from_str, uuid_to_str
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentMetadata

LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
MANIFEST_SUFFIX = ".manifest"
SUFFIXES = (LOG_SUFFIX, INDEXES_SUFFIX, MANIFEST_SUFFIX)

_ID_LEN = 22  # a 16-byte id in unpadded base64
_OFFSET_DIGITS = 20
_STEM_RE = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})$")


# ---------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class SegmentKeys:
    """The object keys of one remote segment (relative to the storage root)."""

    stem: str

    @property
    def log(self) -> str:
        return self.stem + LOG_SUFFIX

    @property
    def indexes(self) -> str:
        return self.stem + INDEXES_SUFFIX

    @property
    def manifest(self) -> str:
        return self.stem + MANIFEST_SUFFIX

    def all(self) -> tuple[str, str, str]:
        # Manifest first: deleting in this order hides the segment from readers at once.
        return self.manifest, self.log, self.indexes


def check_prefix(prefix: str) -> str:
    """Validate a key prefix: relative, '/'-separated, no '.' or '..' parts (it becomes a path too)."""
    if prefix.startswith("/") or "\\" in prefix or "\0" in prefix:
        raise ValueError(f"key prefix {prefix!r} must be a relative '/'-separated path")
    if any(part in (".", "..") for part in prefix.split("/")):
        raise ValueError(f"key prefix {prefix!r} must not contain '.' or '..' parts")
    return prefix


def cluster_prefix(prefix: str, cluster_id: str) -> str:
    """``{prefix}{clusterId}/``: where the objects of one cluster live in the cluster layout."""
    if not cluster_id or "/" in cluster_id or "\\" in cluster_id or cluster_id in (".", "..") or "\0" in cluster_id:
        raise ValueError(f"cluster id {cluster_id!r} cannot be a key folder")
    return f"{prefix}{cluster_id}/"


def partition_dir(prefix: str, topic: str, topic_id: uuid.UUID, partition: int) -> str:
    """``{prefix}{topic}-{topicId}/{partition}/``: the folder holding every segment of a partition."""
    return f"{prefix}{topic}-{uuid_to_str(topic_id)}/{partition}/"


def segment_keys(md: RemoteLogSegmentMetadata, prefix: str = "") -> SegmentKeys:
    tp = md.topic_id_partition
    return SegmentKeys(f"{partition_dir(prefix, tp.topic, tp.topic_id, tp.partition)}"
                       f"{md.start_offset:0{_OFFSET_DIGITS}d}-{uuid_to_str(md.segment_id.id)}")


@dataclass(frozen=True, slots=True)
class ParsedKey:
    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    segment_id: uuid.UUID
    suffix: str
    cluster_id: str | None = None  # None: the older layout, without a cluster folder


def parse_key(key: str, prefix: str = "") -> ParsedKey | None:
    """Inverse of :func:`segment_keys` for any of the three objects, in either layout (below
    ``prefix``, with or without a cluster folder); None for a key that is not one.

    Topic names and base64 ids may both contain '-', so the id is cut by its fixed length."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    cluster_id = None
    if len(parts) == 4 and parts[0]:
        cluster_id, parts = parts[0], parts[1:]
    if len(parts) != 3:
        return None
    topic_dir, partition, name = parts
    suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
    if suffix is None or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        return None
    m = _STEM_RE.match(name[:-len(suffix)])
    if m is None or len(topic_dir) < _ID_LEN + 2 or topic_dir[-_ID_LEN - 1] != "-":
        return None
    try:
        topic_id = uuid_from_str(topic_dir[-_ID_LEN:])
        segment_id = uuid_from_str(m.group(2))
    except ValueError:
        return None
    return ParsedKey(topic_dir[:-_ID_LEN - 1], topic_id, int(partition), int(m.group(1)), segment_id, suffix,
                     cluster_id)


# ----------------------------------------------------------------------------------- .indexes object

INDEXES_MAGIC = b"TLIX"
INDEXES_VERSION = 1
# Kafka's IndexType order; the id is the table slot and the byte stored in the header.
INDEX_TYPE_IDS: dict[IndexType, int] = {
    IndexType.OFFSET: 0,
    IndexType.TIMESTAMP: 1,
    IndexType.PRODUCER_SNAPSHOT: 2,
    IndexType.TRANSACTION: 3,
    IndexType.LEADER_EPOCH: 4,
}
_TYPES_BY_ID = {v: k for k, v in INDEX_TYPE_IDS.items()}
_HEAD = struct.Struct(">4shh")  # magic, version, entry count
_ENTRY = struct.Struct(">bbhIqq")  # type id, flags, reserved, crc32c, position, size
_FLAG_PRESENT = 0x01
INDEXES_HEADER_SIZE = _HEAD.size + _ENTRY.size * len(INDEX_TYPE_IDS) + 4  # 132 bytes in version 1


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where one index sits in the ``.indexes`` object, with the CRC32C of its bytes."""

    position: int
    size: int
    crc: int


class IndexFormatError(ValueError):
    pass


def encode_indexes(indexes: Mapping[IndexType, bytes | None]) -> tuple[bytes, dict[IndexType, IndexEntry]]:
    """The ``.indexes`` object for the given index contents (None or missing = absent)."""
    entries: dict[IndexType, IndexEntry] = {}
    table = bytearray(_HEAD.pack(INDEXES_MAGIC, INDEXES_VERSION, len(INDEX_TYPE_IDS)))
    position = INDEXES_HEADER_SIZE
    payloads = []
    for index_type, type_id in INDEX_TYPE_IDS.items():
        data = indexes.get(index_type)
        if data is None:
            table += _ENTRY.pack(type_id, 0, 0, 0, 0, 0)
            continue
        entry = IndexEntry(position, len(data), crc32c.crc32c(data))
        entries[index_type] = entry
        table += _ENTRY.pack(type_id, _FLAG_PRESENT, 0, entry.crc, entry.position, entry.size)
        payloads.append(data)
        position += len(data)
    table += struct.pack(">I", crc32c.crc32c(table))
    return b"".join([bytes(table), *payloads]), entries


def decode_indexes_header(data: bytes) -> dict[IndexType, IndexEntry]:
    """The table of contents of a ``.indexes`` object from (at least) its first header bytes."""
    if len(data) < _HEAD.size:
        raise IndexFormatError(f"indexes header truncated at {len(data)} bytes")
    magic, version, count = _HEAD.unpack_from(data, 0)
    if magic != INDEXES_MAGIC:
        raise IndexFormatError(f"not an indexes object (magic {magic!r})")
    if version != INDEXES_VERSION:
        raise IndexFormatError(f"unsupported indexes format version {version}")
    end = _HEAD.size + count * _ENTRY.size
    if len(data) < end + 4:
        raise IndexFormatError(f"indexes header truncated at {len(data)} bytes, needs {end + 4}")
    (crc,) = struct.unpack_from(">I", data, end)
    if crc != crc32c.crc32c(data[:end]):
        raise IndexFormatError("indexes header CRC mismatch")
    out: dict[IndexType, IndexEntry] = {}
    for i in range(count):
        type_id, flags, _, entry_crc, position, size = _ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)
        # Unknown type ids come from a newer writer; skipping them keeps old readers working.
        if flags & _FLAG_PRESENT and type_id in _TYPES_BY_ID:
            out[_TYPES_BY_ID[type_id]] = IndexEntry(position, size, entry_crc)
    return out


def check_index_bytes(index_type: IndexType, entry: IndexEntry, data: bytes) -> bytes:
    if len(data) != entry.size or crc32c.crc32c(data) != entry.crc:
        raise IndexFormatError(f"{index_type.value} index is corrupt (size {len(data)} of {entry.size} "
                               f"or CRC mismatch)")
    return data


def read_index(blob: bytes, index_type: IndexType) -> bytes | None:
    """One index out of a whole ``.indexes`` object (for tools and external readers)."""
    entry = decode_indexes_header(blob).get(index_type)
    if entry is None:
        return None
    return check_index_bytes(index_type, entry, blob[entry.position:entry.position + entry.size])


# ---------------------------------------------------------------------------------- .manifest object

MANIFEST_VERSION = 1


class ManifestFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """What the ``.manifest`` object records about one uploaded segment.

    ``log_size`` is the original ``.log`` size, ``log_stored_size`` the size of the ``.log`` object
    after ``transforms`` (each a stage record from tierlog.tiered.rsm.transforms, applied in order).
    ``custom_metadata`` is the KIP-917 value returned to the broker, decoded (None when none)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    leader_epochs: Mapping[int, int]
    log_size: int
    log_stored_size: int
    indexes_size: int
    indexes: Mapping[IndexType, IndexEntry]
    transforms: Sequence[Mapping[str, Any]] = ()
    custom_metadata: Mapping[str, Any] | None = None
    broker_id: int = -1
    written_ms: int = 0
    version: int = field(default=MANIFEST_VERSION)

    def to_json(self) -> bytes:
        doc = {
            "version": self.version,
            "segment": {
                "topic": self.topic,
                "topic_id": uuid_to_str(self.topic_id),
                "partition": self.partition,
                "id": uuid_to_str(self.segment_id),
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "max_timestamp_ms": self.max_timestamp_ms,
                "leader_epochs": {str(e): o for e, o in self.leader_epochs.items()},
            },
            "log": {"size": self.log_size, "stored_size": self.log_stored_size,
                    "transforms": [dict(t) for t in self.transforms]},
            "indexes": {"size": self.indexes_size,
                        "entries": {t.value: {"position": e.position, "size": e.size, "crc32c": e.crc}
                                    for t, e in self.indexes.items()}},
            "custom_metadata": dict(self.custom_metadata) if self.custom_metadata is not None else None,
            "broker_id": self.broker_id,
            "written_ms": self.written_ms,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SegmentManifest:
        try:
            doc = json.loads(data)
            version = doc["version"]
        except (ValueError, TypeError, KeyError) as e:
            raise ManifestFormatError(f"unreadable manifest: {e}") from None
        if not isinstance(version, int) or version > MANIFEST_VERSION or version < 1:
            raise ManifestFormatError(f"manifest version {version!r} is not supported (this reader knows "
                                      f"1..{MANIFEST_VERSION})")
        try:
            seg, log_doc, idx = doc["segment"], doc["log"], doc["indexes"]
            return cls(
                topic=seg["topic"], topic_id=uuid_from_str(seg["topic_id"]), partition=int(seg["partition"]),
                segment_id=uuid_from_str(seg["id"]), start_offset=int(seg["start_offset"]),
                end_offset=int(seg["end_offset"]), max_timestamp_ms=int(seg["max_timestamp_ms"]),
                leader_epochs={int(e): int(o) for e, o in seg["leader_epochs"].items()},
                log_size=int(log_doc["size"]), log_stored_size=int(log_doc["stored_size"]),
                transforms=tuple(log_doc.get("transforms", ())),
                indexes_size=int(idx["size"]),
                indexes={IndexType(t): IndexEntry(int(e["position"]), int(e["size"]), int(e["crc32c"]))
                         for t, e in idx["entries"].items() if t in _INDEX_TYPE_VALUES},
                custom_metadata=doc.get("custom_metadata"), broker_id=int(doc.get("broker_id", -1)),
                written_ms=int(doc.get("written_ms", 0)), version=version)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ManifestFormatError(f"malformed manifest: {type(e).__name__}: {e}") from None


_INDEX_TYPE_VALUES = frozenset(t.value for t in IndexType)
