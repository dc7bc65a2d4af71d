"""Which ``__remote_log_metadata`` partition holds a user partition's metadata events.

Bit for bit Kafka's ``RemoteLogMetadataTopicPartitioner``, so tierlog and Java brokers sharing a
metadata topic agree on where each partition's events live. Only the topic id and partition number
count; the topic name does not.
"""

from __future__ import annotations

import struct
import uuid

from tierlog.hashing import murmur2, to_int32, to_positive

_U64 = 0xFFFFFFFFFFFFFFFF
_BE_INT32 = struct.Struct(">i")


def _long_hash(v: int) -> int:
    """Java's ``Long.hashCode``: the two 32-bit halves xored (``>>>`` on the unsigned value)."""
    u = v & _U64
    return to_int32(u ^ (u >> 32))


def _objects_hash(topic_id: uuid.UUID, partition: int) -> int:
    """Java's ``Objects.hash(lsb, msb, partition)``, the int Kafka feeds to murmur2."""
    # Long.hashCode does not depend on whether a half is read as signed, so no sign conversion is needed.
    msb, lsb = topic_id.int >> 64, topic_id.int & _U64
    h = 1
    for part in (_long_hash(lsb), _long_hash(msb), to_int32(partition)):
        h = to_int32(31 * h + part)
    return h


def metadata_partition(topic_id: uuid.UUID, partition: int, num_metadata_partitions: int) -> int:
    """The metadata partition for (``topic_id``, ``partition``) in a topic of ``num_metadata_partitions``."""
    if num_metadata_partitions <= 0:
        raise ValueError(f"number of metadata partitions must be > 0, got {num_metadata_partitions}")
    return to_positive(murmur2(_BE_INT32.pack(_objects_hash(topic_id, partition)))) % num_metadata_partitions
