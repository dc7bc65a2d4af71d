"""KIP-405's data model for remote log segments, shared by the storage managers, the metadata
manager, its cache and serde, the remote log manager and the Spark reader.

Everything is immutable: an update makes a new object (``with_update``), as Kafka's
``RemoteLogSegmentMetadata.createWithUpdates`` does. State ids are the bytes on the wire.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{uuid_to_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A segment upload attempt: every attempt (also a retry of the same local segment) gets a new id."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, new_kafka_uuid())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{uuid_to_str(self.id)}"


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_SEGMENT_NEXT: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({RemoteLogSegmentState.COPY_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset({RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                            RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


def valid_segment_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition``; a repeated state is valid (retries)."""
    return (src is not None and src == dst) or dst in _SEGMENT_NEXT[src]


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_D = RemotePartitionDeleteState
_PARTITION_DELETE_NEXT: dict[RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]] = {
    None: frozenset({_D.DELETE_PARTITION_MARKED}),
    _D.DELETE_PARTITION_MARKED: frozenset({_D.DELETE_PARTITION_STARTED}),
    _D.DELETE_PARTITION_STARTED: frozenset({_D.DELETE_PARTITION_FINISHED}),
    _D.DELETE_PARTITION_FINISHED: frozenset(),
}


def valid_partition_delete_transition(src: RemotePartitionDeleteState | None,
                                      dst: RemotePartitionDeleteState) -> bool:
    """Kafka's ``RemotePartitionDeleteState.isValidTransition``; a repeated state is valid (retries)."""
    return (src is not None and src == dst) or dst in _PARTITION_DELETE_NEXT[src]


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One remote segment as the metadata manager knows it.

    ``end_offset`` is inclusive. ``segment_leader_epochs`` maps each leader epoch in the segment to
    its first offset, ascending, never empty. ``segment_size_in_bytes`` is the local ``.log`` size
    (before any transform). ``custom_metadata`` is KIP-917's opaque bytes from the storage manager.
    ``broker_id`` and ``event_timestamp_ms`` describe the event that produced this version.
    """

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} must be >= 0")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end offset {self.end_offset} is below start offset {self.start_offset}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")
        # Keep epochs sorted whatever order the caller used; Kafka holds a NavigableMap.
        object.__setattr__(self, "segment_leader_epochs", dict(sorted(self.segment_leader_epochs.items())))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """The segment after ``update``: broker, time, custom metadata and state come from the update
        (custom metadata is replaced, not merged)."""
        if update.segment_id != self.segment_id:
            raise ValueError(f"update for {update.segment_id} applied to {self.segment_id}")
        return dataclasses.replace(self, broker_id=update.broker_id, event_timestamp_ms=update.event_timestamp_ms,
                                   custom_metadata=update.custom_metadata, state=update.state)

    def epoch_end_offset(self, epoch: int) -> int:
        """Last offset of ``epoch`` inside this segment (next epoch's start - 1, or the end offset)."""
        after = [start for e, start in self.segment_leader_epochs.items() if e > epoch]
        return after[0] - 1 if after else self.end_offset


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


RemoteLogMetadata = RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata


class IndexType(enum.Enum):
    """The per-segment files a storage manager keeps next to the segment (Kafka's ``IndexType``)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What the remote log manager hands to ``copy_log_segment_data``: paths of a rolled local
    segment's files, and the leader-epoch checkpoint content (text ``version\\ncount\\nepoch offset``
    lines) for epochs up to the next segment's base offset."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    producer_snapshot_index: Path | None
    leader_epoch_index: bytes
    transaction_index: Path | None = None
