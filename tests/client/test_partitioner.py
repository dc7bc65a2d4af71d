"""The producer's default partitioner: murmur2 for keys exactly as Java, uniform sticky otherwise (KIP-794)."""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.client.partitioner import DefaultPartitioner, partition_for_key
from tierlog.hashing import murmur2, to_positive

# Kafka's UtilsTest.testMurmur2.
UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _vector_keys() -> list[bytes]:
    """Three keys of every length 0..40, pseudo-random bytes derived from sha256."""
    keys = []
    for n in range(41):
        for j in range(3):
            keys.append((hashlib.sha256(f"{n}-{j}".encode()).digest() * 2)[:n])
    return keys


# Utils.murmur2 of _vector_keys(), computed by the Java client (kafka-clients 4.1.0).
JAVA_MURMUR2 = [
    275646681, 275646681, 275646681, 565037905, 1005239505, 1592744578, 850083799, -122163618, -1211960258,
    -1470088246, -765606973, 1458165569, -833280794, 625752990, -1039496934, 1905765562, -482424624, 1839541946,
    1023429895, -336654159, 145662026, 1545969725, 1832682398, -1571739931, 286693109, 386327195, 1491302677,
    -1634408772, 469699147, 1176052428, -569750463, 1038648976, 1252659033, 1985478811, 1841186816, 622075934,
    -1453269872, -1752773819, 430825926, -2112718944, -1417120310, -509740418, -1809483178, 552271964,
    -1489830025, 1837227537, 1266139241, -131152096, -1243150522, 1746172406, 2042624878, 746942718, 205611741,
    -97702454, -1045685283, -1632012228, 1937865505, 2139717834, -863712619, 244041479, 144977848, 383015113,
    1728051744, 534042349, 336111526, -1301922900, -593651017, 1453494033, 800075671, 1297729763, -928873716,
    2101453498, 2061948385, -1984529519, -1795920982, -973518359, -261701537, -1773552633, 1863539156, 1151541066,
    1259536284, -1755549263, -1212027823, 1458426081, 1447555865, -1152840228, 1027428135, -1412702548, 902824833,
    987168055, 1725707359, 1167902690, -1890043197, -1543245201, -1511799747, 341043727, 2059285352, 950533997,
    736629587, -1831806696, -1104112049, 586519498, -898527032, -407683762, -821201898, -1771495276, 1130460881,
    440943571, -1504349311, -110065243, 721646387, -1452761455, 1671910440, 300408508, -1798090243, -426755573,
    -1190279467, -397425953, -2121492648, 450283671, 9785251, 1877844920, -1555564573,
]

# BuiltInPartitioner.partitionForKey(key, n) from the Java client, for a few keys.
JAVA_PARTITIONS = [
    # (key, partitions, partition)
    (b"", 3, 0), (b"", 100, 81),
    (bytes.fromhex("a3"), 3, 1), (bytes.fromhex("a3"), 100, 5),
    (bytes.fromhex("59"), 3, 0), (bytes.fromhex("59"), 100, 5),
]


class Sequential:
    """Java's test SequentialPartitioner: the "random" numbers 0, 1, 2, ..."""

    def __init__(self) -> None:
        self.counter = itertools.count()

    def __call__(self) -> int:
        return next(self.counter)


# ---------------------------------------------------------------------------------------- keyed


@pytest.mark.parametrize(("key", "expected"), UTILS_TEST_VECTORS.items())
def test_murmur2_utils_test_vectors(key, expected):
    assert murmur2(key) == expected


def test_murmur2_matches_java_for_keys_of_every_length():
    keys = _vector_keys()
    assert len(keys) == len(JAVA_MURMUR2)
    for key, expected in zip(keys, JAVA_MURMUR2, strict=True):
        assert murmur2(key) == expected, key.hex()
        for n in (1, 2, 3, 7, 12, 100, 1000, 2**31 - 1):
            # Java: Utils.toPositive(Utils.murmur2(key)) % numPartitions
            assert partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n


@pytest.mark.parametrize(("key", "n", "expected"), JAVA_PARTITIONS)
def test_partition_for_key_java_vectors(key, n, expected):
    assert partition_for_key(key, n) == expected
    assert DefaultPartitioner().partition("t", key, n, list(range(n))) == expected


def test_partition_for_key_handles_min_int_hash():
    # toPositive clears the sign bit; abs() would overflow in Java for MIN_VALUE.
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1


def test_partition_for_key_refuses_no_partitions():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(min_size=0, max_size=64), n=st.integers(min_value=1, max_value=10_000))
def test_murmur2_matches_kafka_python(key, n):
    default = pytest.importorskip("kafka.partitioner.default")
    theirs = default.murmur2(key)  # unsigned 32-bit
    assert murmur2(key) & 0xFFFFFFFF == theirs
    assert partition_for_key(key, n) == (theirs & 0x7FFFFFFF) % n


def test_kafka_python_partitioner_agrees_on_keyed_records():
    default = pytest.importorskip("kafka.partitioner.default")

    class Cluster:
        def topics(self):
            return {"t"}

        def partitions_for_topic(self, topic):
            return set(range(12))

        def available_partitions_for_topic(self, topic):
            return set(range(12))

    theirs = default.DefaultPartitioner()
    ours = DefaultPartitioner()
    for key in _vector_keys():
        assert ours.partition("t", key, 12, list(range(12))) == theirs.partition("t", None, key, None, None, Cluster())


def test_keyed_partition_is_stable_and_ignores_availability():
    p = DefaultPartitioner()
    first = p.partition("test", b"key", 3, [0, 2])
    assert first == partition_for_key(b"key", 3)
    assert all(p.partition("test", b"key", 3, avail) == first for avail in ([], [1], None))


# ---------------------------------------------------------------------------------------- explicit


def test_explicit_partition_wins():
    p = DefaultPartitioner(random=Sequential())
    assert p.partition("t", b"key", 10, [0], explicit_partition=7) == 7
    assert p.partition("t", None, 10, [0], explicit_partition=3) == 3
    assert not p.is_sticky(None, explicit_partition=3)
    assert not p.is_sticky(b"key", explicit_partition=3)


@pytest.mark.parametrize("bad", [-1, 10, 11])
def test_explicit_partition_out_of_range(bad):
    with pytest.raises(ValueError):
        DefaultPartitioner().partition("t", None, 10, None, explicit_partition=bad)


# ---------------------------------------------------------------------------------------- sticky


def test_null_key_and_ignore_keys_are_sticky():
    assert DefaultPartitioner().is_sticky(None)
    assert not DefaultPartitioner().is_sticky(b"k")
    p = DefaultPartitioner(batch_size=100, ignore_keys=True, random=Sequential())
    assert p.is_sticky(b"k")
    # Keys are ignored: every record sticks to the first choice, available[0 % 2].
    assert {p.partition("t", key, 10, [4, 6]) for key in (b"a", b"b", None, b"c")} == {4}


def test_sticky_partitioning_switches_after_batch_size():
    # Java's BuiltInPartitionerTest.testStickyPartitioning.
    p = DefaultPartitioner(batch_size=3, random=Sequential())
    part_a = p.partition("topicA", None, 3, [0, 1, 2])
    for _ in range(3):
        assert p.partition("topicA", None, 3, [0, 1, 2]) == part_a
        p.on_append("topicA", part_a, 1)
    assert p.partition("topicA", None, 3, [0, 1, 2]) != part_a

    # Switching works with one partition too.
    p_b = DefaultPartitioner(batch_size=1, random=Sequential())
    for _ in range(10):
        assert p_b.partition("topicB", None, 1, [0]) == 0
        assert p_b.on_append("topicB", 0, 1)


def test_sticky_counts_bytes_and_switches_in_sequence():
    p = DefaultPartitioner(batch_size=100, random=Sequential())
    avail = [0, 1, 2, 3]
    seen = []
    for _ in range(8):
        part = p.partition("t", None, 4, avail)
        seen.append(part)
        assert not p.on_append("t", part, 60)
        assert p.partition("t", None, 4, avail) == part
        assert p.on_append("t", part, 40)  # 100 bytes reached
    assert seen == [0, 1, 2, 3, 0, 1, 2, 3]


def test_unavailable_partitions_are_not_chosen():
    # Java's BuiltInPartitionerTest.unavailablePartitionsTest: topic A has no leader for partition 1,
    # topic B none for 0, topic C none at all.
    p = DefaultPartitioner(batch_size=1)
    seen = set()
    for _ in range(200):
        part = p.partition("topicA", None, 3, [0, 2])
        seen.add(part)
        p.on_append("topicA", part, 1)
    assert seen == {0, 2}
    for _ in range(100):
        assert p.partition("topicB", None, 2, [1]) == 1
        p.on_append("topicB", 1, 1)
    # Nothing available: choose among all partitions.
    assert p.partition("topicC", None, 1, []) == 0
    p.on_append("topicC", 0, 1)
    assert p.partition("topicC", None, 1, None) == 0


def test_no_available_partitions_picks_among_all():
    p = DefaultPartitioner(batch_size=1, random=Sequential())
    got = []
    for _ in range(6):
        got.append(p.partition("t", None, 3, []))
        p.on_append("t", got[-1], 1)
    assert got == [0, 1, 2, 0, 1, 2]


def test_available_partitions_indexed_in_given_order():
    # Java indexes cluster.availablePartitionsForTopic(topic), in metadata order.
    p = DefaultPartitioner(batch_size=1, random=Sequential())
    got = []
    for _ in range(4):
        got.append(p.partition("t", None, 5, [4, 1, 3]))
        p.on_append("t", got[-1], 1)
    assert got == [4, 1, 3, 4]


def test_switch_held_back_while_batch_open_until_twice_batch_size():
    p = DefaultPartitioner(batch_size=100, random=Sequential())
    part = p.partition("t", None, 4, [0, 1, 2, 3])
    assert not p.on_append("t", part, 120, enable_switch=False)
    assert p.partition("t", None, 4, [0, 1, 2, 3]) == part
    assert not p.on_append("t", part, 79, enable_switch=False)  # 199 < 200
    assert p.on_append("t", part, 1, enable_switch=False)  # 200: the cap forces the switch
    assert p.partition("t", None, 4, [0, 1, 2, 3]) != part


def test_zero_byte_append_completes_a_held_back_switch():
    # RecordAccumulator.partitionChanged: once the last batch is full, updatePartitionInfo(info, 0, true).
    p = DefaultPartitioner(batch_size=100, random=Sequential())
    part = p.partition("t", None, 4, [0, 1, 2, 3])
    assert not p.on_append("t", part, 150, enable_switch=False)
    assert p.on_append("t", part, 0)
    assert p.current_partition("t") is None
    assert p.partition("t", None, 4, [0, 1, 2, 3]) != part
    # Below batch.size a zero-byte append changes nothing.
    part = p.partition("t", None, 4, [0, 1, 2, 3])
    p.on_append("t", part, 10)
    assert not p.on_append("t", part, 0)
    assert p.current_partition("t") == part


def test_appends_to_other_partitions_do_not_count():
    p = DefaultPartitioner(batch_size=10, random=Sequential())
    part = p.partition("t", None, 4, [0, 1, 2, 3])
    assert not p.on_append("t", part + 1, 1000)
    assert not p.on_append("other", part, 1000)
    assert p.partition("t", None, 4, [0, 1, 2, 3]) == part


def test_topics_are_independent():
    p = DefaultPartitioner(batch_size=10, random=Sequential())
    a = p.partition("a", None, 4, None)
    b = p.partition("b", None, 4, None)
    assert (a, b) == (0, 1)
    assert p.on_append("a", a, 10)
    assert p.partition("b", None, 4, None) == b
    p.forget("b")
    assert p.current_partition("b") is None


def test_sticky_partition_beyond_count_is_rechosen():
    p = DefaultPartitioner(batch_size=10, random=lambda: 5)
    assert p.partition("t", None, 8, None) == 5
    assert p.partition("t", None, 4, None) == 1  # 5 % 4


def test_default_random_spreads_over_partitions():
    p = DefaultPartitioner(batch_size=1)
    seen = set()
    for _ in range(300):
        part = p.partition("t", None, 6, None)
        seen.add(part)
        p.on_append("t", part, 1)
    assert seen == set(range(6))


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError):
        DefaultPartitioner(batch_size=0)
    DefaultPartitioner(batch_size=1)


def test_from_config():
    p = DefaultPartitioner.from_config({"batch.size": 0, "partitioner.ignore.keys": True,
                                        "partitioner.adaptive.partitioning.enable": False})
    assert (p.batch_size, p.ignore_keys, p.adaptive) == (1, True, False)
    p = DefaultPartitioner.from_config({})
    assert (p.batch_size, p.ignore_keys, p.adaptive) == (16384, False, True)


# ---------------------------------------------------------------------------------------- adaptive


def test_adaptive_partitioning_weighs_by_queue_sizes():
    # Java's BuiltInPartitionerTest.adaptivePartitionsTest: frequencies are max+1 - queue size.
    p = DefaultPartitioner(batch_size=1, random=Sequential())
    queue_sizes = [5, 0, 3, 0, 1]
    p.update_partition_load_stats("topicA", queue_sizes, [0, 1, 2, 3, 4])
    expected = [6 - q for q in queue_sizes]
    cycles = 2
    counts = [0] * 5
    for _ in range(sum(expected) * cycles):
        part = p.partition("topicA", None, 5, [0, 1, 2, 3, 4])
        counts[part] += 1
        p.on_append("topicA", part, 1)
    assert counts == [e * cycles for e in expected]


def test_adaptive_respects_partition_ids_and_length():
    p = DefaultPartitioner(batch_size=1, random=Sequential())
    # Partitions 7 and 3 have leaders; only the first (7) stays eligible (3 is excluded for latency).
    p.update_partition_load_stats("t", [2, 0], [7, 3], length=1)
    for _ in range(5):
        assert p.partition("t", None, 8, [3, 7]) == 7
        p.on_append("t", 7, 1)


def test_adaptive_falls_back_to_uniform():
    for sizes, ids, length in (([1, 1, 1], [0, 1, 2], None),  # all equal
                               ([4], [0], None),  # a single partition
                               ([4, 1], [0, 1], 0),  # nothing eligible
                               (None, None, None)):
        p = DefaultPartitioner(batch_size=1, random=Sequential())
        p.update_partition_load_stats("t", [9, 0, 0], [0, 1, 2])  # replaced by the call below
        p.update_partition_load_stats("t", sizes, ids, length)
        got = []
        for _ in range(3):
            got.append(p.partition("t", None, 3, [0, 1, 2]))
            p.on_append("t", got[-1], 1)
        assert got == [0, 1, 2], (sizes, ids, length)


def test_adaptive_disabled_ignores_load_stats():
    p = DefaultPartitioner(batch_size=1, adaptive=False, random=Sequential())
    p.update_partition_load_stats("t", [9, 0, 0], [0, 1, 2])
    got = []
    for _ in range(3):
        got.append(p.partition("t", None, 3, [0, 1, 2]))
        p.on_append("t", got[-1], 1)
    assert got == [0, 1, 2]
