"""Small text files Kafka keeps beside its logs, in Kafka's formats.

- offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint``) in each log dir: version line ``0``, entry count, then
  ``topic partition offset`` lines;
- ``leader-epoch-checkpoint`` in each partition dir: version ``0``, count, ``epoch start_offset``;
- ``partition.metadata`` in each partition dir: ``version: 0`` and ``topic_id: <base64 uuid>``;
- ``.kafka_cleanshutdown`` in each log dir, present only after a clean shutdown.

Writes go to a temporary file that is fsynced and renamed over the old one, so a crash leaves
either the old or the new content, never a torn file.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterable

from tierlog.errors import KafkaStorageError
from tierlog.kafka_uuid import uuid_from_str, uuid_to_str
from tierlog.storage.background import fsync_with_folder, sync_later

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def write_atomically(path: str, data: bytes, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: the old content stays whole until the new one is complete. A failed
    write (ENOSPC) raises its OSError and removes the partial temporary file (start-up removes one a
    crash leaves behind)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(path) or ".")


_log = logging.getLogger(__name__)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lines(path: str, fields: int) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return _parse_lines(f.read(), fields, path)


def _parse_lines(text: str, fields: int, path: str) -> list[list[str]]:
    """The entries of a checkpoint's text (``path`` names it in errors)."""
    lines = [ln.strip() for ln in text.splitlines()]
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError) as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: bad header") from e
    if version != CHECKPOINT_VERSION:
        raise KafkaStorageError(f"checkpoint file {path} has unknown version {version}")
    entries = [ln.split() for ln in lines[2:] if ln]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise KafkaStorageError(f"malformed checkpoint file {path}: expected {count} entries of {fields} fields")
    return entries


def _write_lines(path: str, rows: list[str], fsync: bool = True) -> None:
    body = "\n".join([str(CHECKPOINT_VERSION), str(len(rows)), *rows]) + "\n"
    write_atomically(path, body.encode(), fsync)


class OffsetCheckpointFile:
    """``topic partition offset`` entries for every partition in one log dir."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        if not os.path.exists(self.path):
            return {}
        out = {}
        for topic, partition, offset in _read_lines(self.path, 3):
            out[(topic, int(partition))] = int(offset)
        return out

    def write(self, offsets: dict[tuple[str, int], int], fsync: bool = True) -> None:
        rows = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        _write_lines(self.path, rows, fsync)


class LeaderEpochCheckpointFile:
    """``epoch start_offset`` entries of one partition's leader epoch cache."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        if not os.path.exists(self.path):
            return []
        return [(int(e), int(o)) for e, o in _read_lines(self.path, 2)]

    def write(self, entries: Iterable[tuple[int, int]], fsync: bool = True) -> None:
        """``fsync=False``: written now, made durable on the background sync thread (:func:`sync_later`)."""
        _write_lines(self.path, [f"{e} {o}" for e, o in entries], fsync)
        if not fsync:
            sync_later(self.path)

    def sync(self) -> None:
        fsync_with_folder(self.path)


def parse_leader_epoch_checkpoint(data: bytes, name: str) -> list[tuple[int, int]]:
    """The entries of a leader-epoch checkpoint held in memory (one shipped with a remote segment)."""
    try:
        return [(int(e), int(o)) for e, o in _parse_lines(data.decode("utf-8"), 2, name)]
    except (UnicodeDecodeError, ValueError) as e:
        raise KafkaStorageError(f"malformed leader epoch checkpoint {name}: {e}") from None


class PartitionMetadataFile:
    """The topic id of a partition, so a re-created topic of the same name is told apart."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> uuid.UUID | None:
        """The stored topic id; None when there is none, or when the file is empty: a crash between its
        write and its background sync (:meth:`write`) leaves that, and the topic id is written again from
        the cluster metadata."""
        if not os.path.exists(self.path):
            return None
        fields = {}
        with open(self.path, encoding="utf-8") as f:
            text = f.read()
        if not text:
            _log.warning("Ignoring the empty %s (a crash before it was synced)", self.path)
            return None
        for line in text.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        if fields.get("version") != "0" or "topic_id" not in fields:
            raise KafkaStorageError(f"malformed partition metadata file {self.path}")
        return uuid_from_str(fields["topic_id"])

    def write(self, topic_id: uuid.UUID) -> None:
        """Written at once, synced on the background sync thread (Kafka flushes it on its scheduler): a new
        partition's log is opened on the event loop, and thousands of them at once must not stall it."""
        write_atomically(self.path, f"version: 0\ntopic_id: {uuid_to_str(topic_id)}\n".encode(), fsync=False)
        sync_later(self.path)


class CleanShutdownFile:
    """Marker written last on a clean shutdown and removed first on start-up."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, broker_epoch: int = -1) -> None:
        write_atomically(self.path, json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode())

    def delete(self) -> None:
        try:
            os.remove(self.path)
            fsync_dir(os.path.dirname(self.path))
        except FileNotFoundError:
            pass
