"""Snapshots of the topic-based metadata manager's cache, one file per metadata partition.

Kafka rebuilds its remote log metadata cache by replaying ``__remote_log_metadata`` from offset 0 at
every start (it dropped its snapshot files in 3.7/3.8), so a restart costs a replay of the whole
history. tierlog keeps, per metadata partition, the cache of every user partition it holds as of a
metadata offset; a restart loads the snapshot and replays only the events after that offset.

File ``<log dir>/__remote_log_metadata-snapshots/<metadata partition>.snapshot``, written to a
temporary file, fsynced and renamed, so a crash leaves the previous snapshot::

    magic "TLRS"  version int16  metadata partition int32  read offset int64  user partitions int32
    per user partition: topic id (16 bytes)  partition int32  name length int16  name (UTF-8)
                        last applied offset int64  segments int32
                        per segment: length int32  RemoteLogSegmentMetadataSnapshotRecord (Kafka's serde)
    CRC32C of everything before it, uint32

A file that is missing, truncated, of another version or with a wrong checksum is ignored (with a
warning): the manager falls back to a full replay of that metadata partition.
"""

from __future__ import annotations

import logging
import os
import struct
import uuid
from dataclasses import dataclass

import crc32c

from tierlog.storage.checkpoints import write_atomically
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.serde import MetadataRecordError, deserialize_snapshot, serialize_snapshot

log = logging.getLogger(__name__)

MAGIC = b"TLRS"
VERSION = 1
FOLDER = "__remote_log_metadata-snapshots"
_HEAD = struct.Struct(">4shiqi")
_PART = struct.Struct(">16sih")
_TAIL = struct.Struct(">qi")
_LEN = struct.Struct(">i")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One user partition's segments as of ``last_applied_offset`` (the metadata offset of the last event
    applied to it, -1 when none)."""

    tp: TopicIdPartition
    last_applied_offset: int
    segments: list[RemoteLogSegmentMetadata]


@dataclass(frozen=True, slots=True)
class Snapshot:
    metadata_partition: int
    read_offset: int  # the next metadata offset to read
    partitions: dict[TopicIdPartition, PartitionState]


def snapshot_path(log_dir: str, metadata_partition: int) -> str:
    return os.path.join(log_dir, FOLDER, f"{metadata_partition}.snapshot")


def encode(snap: Snapshot) -> bytes:
    out = bytearray(_HEAD.pack(MAGIC, VERSION, snap.metadata_partition, snap.read_offset, len(snap.partitions)))
    for state in snap.partitions.values():
        name = state.tp.topic.encode()
        out += _PART.pack(state.tp.topic_id.bytes, state.tp.partition, len(name))
        out += name
        out += _TAIL.pack(state.last_applied_offset, len(state.segments))
        for md in state.segments:
            record = serialize_snapshot(md)
            out += _LEN.pack(len(record))
            out += record
    out += _CRC.pack(crc32c.crc32c(bytes(out)))
    return bytes(out)


def decode(data: bytes) -> Snapshot:
    """Parse a snapshot file; ValueError for anything that is not a complete, intact one."""
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError("truncated snapshot")
    body, (crc,) = data[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise ValueError("checksum mismatch")
    magic, version, mp, read_offset, count = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a version {VERSION} snapshot")
    pos = _HEAD.size
    partitions = {}
    try:
        for _ in range(count):
            tid, partition, name_len = _PART.unpack_from(body, pos)
            pos += _PART.size
            tp = TopicIdPartition(uuid.UUID(bytes=tid), body[pos:pos + name_len].decode(), partition)
            pos += name_len
            last, n = _TAIL.unpack_from(body, pos)
            pos += _TAIL.size
            segments = []
            for _ in range(n):
                (length,) = _LEN.unpack_from(body, pos)
                pos += _LEN.size
                segments.append(deserialize_snapshot(body[pos:pos + length], tp))
                pos += length
            partitions[tp] = PartitionState(tp, last, segments)
    except (struct.error, MetadataRecordError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed snapshot: {e}") from None
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} unexpected trailing bytes")
    return Snapshot(mp, read_offset, partitions)


def write(log_dir: str, snap: Snapshot) -> None:
    path = snapshot_path(log_dir, snap.metadata_partition)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, encode(snap))


def read(log_dir: str, metadata_partition: int) -> Snapshot | None:
    """The snapshot of ``metadata_partition``, or None (missing, or unusable: logged)."""
    path = snapshot_path(log_dir, metadata_partition)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("Cannot read remote log metadata snapshot %s (%s); replaying the partition", path, e)
        return None
    try:
        snap = decode(data)
    except ValueError as e:
        log.warning("Ignoring remote log metadata snapshot %s: %s; replaying the partition", path, e)
        return None
    if snap.metadata_partition != metadata_partition:
        log.warning("Ignoring remote log metadata snapshot %s: it is of partition %d", path, snap.metadata_partition)
        return None
    return snap


def delete_all(log_dir: str) -> None:
    folder = os.path.join(log_dir, FOLDER)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
