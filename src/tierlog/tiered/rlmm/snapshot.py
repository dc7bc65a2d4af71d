"""Snapshots of the topic-based metadata manager's cache, one file per metadata partition.

Kafka rebuilds its remote log metadata cache by replaying ``__remote_log_metadata`` from offset 0 at
every start (it dropped its snapshot files in 3.7/3.8), so a restart costs a replay of the whole
history. tierlog keeps, per metadata partition, the cache of every user partition it holds as of a
metadata offset; a restart loads the snapshot and replays only the events after that offset.

The snapshot holds each cache exactly (segments and per-epoch state, de-duplication included), in a
fixed-size binary layout that loads 100,000 segments in well under a second. File
``<log dir>/__remote_log_metadata-snapshots/<metadata partition>.snapshot``, written to a temporary
file, fsynced and renamed, so a crash leaves the previous snapshot::

    magic "TLRS"  version int16 (2)  metadata partition int32  read offset int64  user partitions int32
    per user partition:
      topic id (16 bytes)  partition int32  name length int16  name (UTF-8)  last applied offset int64
      segments int32, each: segment id (16)  start int64  end int64  broker int32  max timestamp int64
                            event timestamp int64  size int32  state int8  epochs int16
                            custom metadata length int32 (-1: none)
                            epochs x (epoch int32, start offset int64)  custom metadata bytes
      epochs int32, each: epoch int32  highest offset int64 (-1: none)  referenced int32  unreferenced int32
                          referenced x (start offset int64, segment index int32)  unreferenced x (index int32)
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
from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

MAGIC = b"TLRS"
VERSION = 2
FOLDER = "__remote_log_metadata-snapshots"
_HEAD = struct.Struct(">4shiqi")
_PART = struct.Struct(">16sih")
_TAIL = struct.Struct(">qi")
_SEG = struct.Struct(">16sqqiqqibhi")
_EPOCH = struct.Struct(">iq")
_ESTATE = struct.Struct(">iqii")
_REF = struct.Struct(">qi")
_COUNT = struct.Struct(">i")
_CRC = struct.Struct(">I")
_STATES = tuple(RemoteLogSegmentState)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One user partition's cache as of ``last_applied_offset`` (the metadata offset of the last event
    applied to it, -1 when none): its segments, and per epoch (highest offset, referenced
    (start offset, segment index) pairs, unreferenced segment indexes) as ``RemoteLogMetadataCache``
    exports them."""

    tp: TopicIdPartition
    last_applied_offset: int
    segments: list[RemoteLogSegmentMetadata]
    epochs: dict[int, tuple]


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
            custom = md.custom_metadata
            out += _SEG.pack(md.segment_id.id.bytes, md.start_offset, md.end_offset, md.broker_id,
                             md.max_timestamp_ms, md.event_timestamp_ms, md.segment_size_in_bytes, md.state,
                             len(md.segment_leader_epochs), -1 if custom is None else len(custom))
            for epoch, start in md.segment_leader_epochs.items():
                out += _EPOCH.pack(epoch, start)
            if custom:
                out += custom
        out += _COUNT.pack(len(state.epochs))
        for epoch, (highest, refs, unref) in state.epochs.items():
            out += _ESTATE.pack(epoch, -1 if highest is None else highest, len(refs), len(unref))
            for ref in refs:
                out += _REF.pack(*ref)
            for i in unref:
                out += _COUNT.pack(i)
    out += _CRC.pack(crc32c.crc32c(bytes(out)))
    return bytes(out)


def decode(data: bytes) -> Snapshot:
    """Parse a snapshot file; ValueError for anything that is not a complete, intact one."""
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError("truncated snapshot")
    body, (crc,) = memoryview(data)[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise ValueError("checksum mismatch")
    magic, version, mp, read_offset, count = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a version {VERSION} snapshot")
    pos = _HEAD.size
    partitions = {}
    # Trusted input (checksummed, written by this code): build the frozen metadata objects without
    # running their validation again, which dominates the load time of large snapshots.
    new = object.__new__
    set_id, set_start, set_end, set_max_ts, set_broker, set_event_ts, set_size, set_epochs, set_custom, set_state = (
        RemoteLogSegmentMetadata.__dict__[f].__set__ for f in (
            "segment_id", "start_offset", "end_offset", "max_timestamp_ms", "broker_id", "event_timestamp_ms",
            "segment_size_in_bytes", "segment_leader_epochs", "custom_metadata", "state"))
    set_tp, set_sid = (RemoteLogSegmentId.__dict__[f].__set__ for f in ("topic_id_partition", "id"))
    set_uuid_int, set_uuid_safe = uuid.UUID.__dict__["int"].__set__, uuid.UUID.__dict__["is_safe"].__set__
    unknown_safety = uuid.SafeUUID.unknown
    from_bytes = int.from_bytes
    seg_unpack, epoch_unpack = _SEG.unpack_from, _EPOCH.unpack_from
    try:
        for _ in range(count):
            tid, partition, name_len = _PART.unpack_from(body, pos)
            pos += _PART.size
            tp = TopicIdPartition(uuid.UUID(bytes=tid), bytes(body[pos:pos + name_len]).decode(), partition)
            pos += name_len
            last, n = _TAIL.unpack_from(body, pos)
            pos += _TAIL.size
            segments = []
            for _ in range(n):
                sid, start, end, broker, max_ts, event_ts, size, state, n_epochs, custom_len = seg_unpack(body, pos)
                pos += _SEG.size
                epochs = {}
                for _ in range(n_epochs):
                    e, o = epoch_unpack(body, pos)
                    epochs[e] = o
                    pos += _EPOCH.size
                custom = None
                if custom_len >= 0:
                    custom = bytes(body[pos:pos + custom_len])
                    pos += custom_len
                u = new(uuid.UUID)
                set_uuid_int(u, from_bytes(sid, "big"))
                set_uuid_safe(u, unknown_safety)
                segment_id = new(RemoteLogSegmentId)
                set_tp(segment_id, tp)
                set_sid(segment_id, u)
                md = new(RemoteLogSegmentMetadata)
                set_id(md, segment_id)
                set_start(md, start)
                set_end(md, end)
                set_max_ts(md, max_ts)
                set_broker(md, broker)
                set_event_ts(md, event_ts)
                set_size(md, size)
                set_epochs(md, epochs)
                set_custom(md, custom)
                set_state(md, _STATES[state])
                segments.append(md)
            (n_epochs,) = _COUNT.unpack_from(body, pos)
            pos += _COUNT.size
            epoch_states = {}
            for _ in range(n_epochs):
                epoch, highest, n_ref, n_unref = _ESTATE.unpack_from(body, pos)
                pos += _ESTATE.size
                refs = [_REF.unpack_from(body, pos + k * _REF.size) for k in range(n_ref)]
                pos += n_ref * _REF.size
                unref = [_COUNT.unpack_from(body, pos + k * _COUNT.size)[0] for k in range(n_unref)]
                pos += n_unref * _COUNT.size
                if any(i >= len(segments) for _, i in refs) or any(i >= len(segments) for i in unref):
                    raise ValueError("segment index out of range")
                epoch_states[epoch] = (None if highest < 0 else highest, refs, unref)
            partitions[tp] = PartitionState(tp, last, segments, epoch_states)
    except (struct.error, UnicodeDecodeError, IndexError) as e:
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
