"""The metadata-partition mapping must match Kafka's RemoteLogMetadataTopicPartitioner bit for bit."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiered.rlmm.partitioner import _objects_hash, metadata_partition

ONE = uuid.UUID("00000000-0000-0000-0000-000000000001")
SAMPLE = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")


def test_objects_hash_matches_the_jdk():
    # Objects.hash(0L, 0L, 0) = 31 * (31 * (31 + 0) + 0) + 0
    assert _objects_hash(uuid.UUID(int=0), 0) == 29791
    # Values printed by the JDK's Objects.hash(lsb, msb, partition).
    assert _objects_hash(ONE, 0) == 30752
    assert _objects_hash(SAMPLE, 0) == -32500719
    assert _objects_hash(SAMPLE, 3) == -32500716


@pytest.mark.parametrize(("topic_id", "expected"), [
    (ONE, [35, 6, 18, 29]),
    (SAMPLE, [19, 37, 35, 46]),
])
def test_spec_vectors(topic_id, expected):
    assert [metadata_partition(topic_id, p, 50) for p in range(4)] == expected


# Printed by Kafka 4.1's RemoteLogMetadataTopicPartitioner(50) for partitions 0, 1, 2, 3, 7, 1000, 2^31-1.
@pytest.mark.parametrize(("msb", "lsb", "expected"), [
    (0, 1, [35, 6, 18, 29, 46, 27, 45]),
    (0x123E4567E89B12D3, 0xA456426614174000, [19, 37, 35, 46, 39, 13, 12]),
    # Java longs -1 and -2: Long.hashCode gives 0 and 1, the same as for (0, 1) above.
    (0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, [35, 6, 18, 29, 46, 27, 45]),
    # Long.MIN_VALUE, Long.MAX_VALUE
    (0x8000000000000000, 0x7FFFFFFFFFFFFFFF, [6, 30, 28, 46, 31, 20, 10]),
])
def test_kafka_vectors(msb, lsb, expected):
    topic_id = uuid.UUID(int=(msb << 64) | lsb)
    assert [metadata_partition(topic_id, p, 50) for p in (0, 1, 2, 3, 7, 1000, 2**31 - 1)] == expected


@given(st.uuids(), st.integers(0, 2**31 - 1), st.integers(1, 1000))
def test_result_is_a_partition(topic_id, partition, n):
    assert 0 <= metadata_partition(topic_id, partition, n) < n


def test_single_partition_topic():
    assert metadata_partition(SAMPLE, 5, 1) == 0


@pytest.mark.parametrize("n", [0, -1])
def test_rejects_non_positive_partition_count(n):
    with pytest.raises(ValueError):
        metadata_partition(SAMPLE, 0, n)
