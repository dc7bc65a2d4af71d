"""Plain values the client hands to and gets from its users."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int = -1


class RecordMetadata(NamedTuple):
    """Where a produced record landed: offset, and timestamp (-1 unless the topic uses LogAppendTime)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: object
    value: object
    headers: tuple[tuple[str, bytes | None], ...]  # immutable, so records stay out of the GC's way
    leader_epoch: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's place in its group, for ``Producer.send_offsets_to_transaction`` (KIP-447): the
    group coordinator fences a transactional offset commit from a member of an old generation."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
