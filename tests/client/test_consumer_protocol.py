"""Consumer protocol subscription and assignment bytes, checked against Java's and kafka-python's."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.client.consumer_protocol import (
    HIGHEST_VERSION,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tierlog.client.types import TopicPartition
from tierlog.coordinator.group import parse_subscribed_topics

# ConsumerProtocol.serializeSubscription(new Subscription(["foo", "bar"], "hello",
#     [foo-0, bar-0, foo-2], generationId 1, rack "rack-a"), version), from kafka-clients 4.1.0.
JAVA_FULL_SUBSCRIPTION = {
    0: "00000000000200036261720003666f6f0000000568656c6c6f",
    1: "00010000000200036261720003666f6f0000000568656c6c6f00000002000362617200000001000000000003666f6f0000"
       "00020000000000000002",
    2: "00020000000200036261720003666f6f0000000568656c6c6f00000002000362617200000001000000000003666f6f0000"
       "0002000000000000000200000001",
    3: "00030000000200036261720003666f6f0000000568656c6c6f00000002000362617200000001000000000003666f6f0000"
       "000200000000000000020000000100067261636b2d61",
}
# new Subscription([], null) at each version.
JAVA_EMPTY_SUBSCRIPTION = {
    0: "000000000000ffffffff",
    1: "000100000000ffffffff00000000",
    2: "000200000000ffffffff00000000ffffffff",
    3: "000300000000ffffffff00000000ffffffffffff",
}
# Topics ["t"], empty (not null) user data, rack "" (v3).
JAVA_EMPTY_USER_DATA_AND_RACK = "0003000000010001740000000000000000ffffffff0000"
# serializeAssignment(new Assignment([foo-1, bar-2, foo-0], "hello"), version): Java groups by topic
# in order of first appearance, keeping partition order.
JAVA_ASSIGNMENT = {
    v: f"000{v}000000020003666f6f000000020000000100000000000362617200000001000000020000000568656c6c6f"
    for v in range(4)
}
JAVA_EMPTY_ASSIGNMENT_NULL_USER_DATA = "000300000000ffffffff"
JAVA_EMPTY_ASSIGNMENT_EMPTY_USER_DATA = "00000000000000000000"


# ---------------------------------------------------------------------------------------- subscription


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_subscription_bytes_equal_java(version):
    data = encode_subscription(["foo", "bar"], b"hello", [("foo", 0), ("bar", 0), ("foo", 2)], 1, "rack-a",
                               version=version)
    assert data.hex() == JAVA_FULL_SUBSCRIPTION[version]
    assert encode_subscription([], version=version).hex() == JAVA_EMPTY_SUBSCRIPTION[version]


def test_subscription_with_empty_user_data_and_rack_equals_java():
    assert encode_subscription(["t"], b"", rack_id="").hex() == JAVA_EMPTY_USER_DATA_AND_RACK
    sub = decode_subscription(bytes.fromhex(JAVA_EMPTY_USER_DATA_AND_RACK))
    assert sub.user_data == b""
    assert sub.rack_id is None  # Java's ConsumerProtocol turns an empty rack into Optional.empty()


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_subscription_round_trip_every_version(version):
    # Java's ConsumerProtocolTest.serializeDeserializeSubscriptionAllVersions.
    data = encode_subscription(["foo", "bar"], b"hello", {"foo": [0], "bar": [0]}, 1, "rack-a", version=version)
    sub = decode_subscription(data)
    assert sub.version == version
    assert sub.topics == ["bar", "foo"]
    assert sub.user_data == b"hello"
    assert sub.owned_partitions == ({"bar": [0], "foo": [0]} if version >= 1 else {})
    assert sub.generation_id == (1 if version >= 2 else -1)
    assert sub.rack_id == ("rack-a" if version >= 3 else None)
    assert sub.group_instance_id is None


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_java_subscription_bytes_decode(version):
    sub = decode_subscription(bytes.fromhex(JAVA_FULL_SUBSCRIPTION[version]))
    assert sub.topics == ["bar", "foo"]
    if version >= 1:
        assert sub.owned_topic_partitions() == [TopicPartition("bar", 0), TopicPartition("foo", 0),
                                                TopicPartition("foo", 2)]
    empty = decode_subscription(bytes.fromhex(JAVA_EMPTY_SUBSCRIPTION[version]))
    assert empty == Subscription(topics=[], user_data=None, version=version)


def test_subscription_orders_topics_and_owned_partitions():
    # Java's serializeSubscriptionShouldOrderTopics / ...ShouldOrderOwnedPartitions.
    a = encode_subscription(["foo", "bar"], owned_partitions=[("foo", 1), ("bar", 2)])
    assert a == encode_subscription(["bar", "foo"], owned_partitions=[("bar", 2), ("foo", 1)])
    assert a == encode_subscription(["bar", "foo"], owned_partitions={"foo": [1], "bar": [2]})
    assert decode_subscription(a).owned_partitions == {"bar": [2], "foo": [1]}


def test_null_and_empty_user_data_differ():
    assert decode_subscription(encode_subscription(["t"], None)).user_data is None
    assert decode_subscription(encode_subscription(["t"], b"")).user_data == b""


def test_group_instance_id_is_not_on_the_wire():
    data = encode_subscription(["t"])
    sub = decode_subscription(data, group_instance_id="instance.id")
    assert sub.group_instance_id == "instance.id"
    assert decode_subscription(data).group_instance_id is None


def _future_subscription() -> bytes:
    # Java's ConsumerProtocolTest.generateFutureSubscriptionVersionData: v100 = v3 fields + a string.
    body = (struct.pack(">i", 1) + struct.pack(">h", 5) + b"topic"
            + struct.pack(">i", 0)  # user_data: empty
            + struct.pack(">i", 1) + struct.pack(">h", 3) + b"bar" + struct.pack(">ii", 1, 2)
            + struct.pack(">i", 1)  # generation_id
            + struct.pack(">h", 6) + b"rack-a"
            + struct.pack(">h", 3) + b"bar")
    return struct.pack(">h", 100) + body


def test_future_subscription_version_reads_known_fields():
    sub = decode_subscription(_future_subscription(), group_instance_id="instance.id")
    assert sub.version == 100
    assert sub.topics == ["topic"]
    assert sub.owned_topic_partitions() == [("bar", 2)]
    assert sub.generation_id == 1
    assert sub.rack_id == "rack-a"
    assert sub.group_instance_id == "instance.id"


def test_trailing_bytes_of_an_old_version_are_ignored():
    # Java reads a v3 subscription "as v0" by ignoring the rest; so do we when the header says v0.
    v3 = encode_subscription(["foo", "bar"], None, [("bar", 2)], 1, "rack-a")
    as_v0 = struct.pack(">h", 0) + v3[2:]
    sub = decode_subscription(as_v0)
    assert (sub.topics, sub.user_data, sub.owned_partitions, sub.generation_id, sub.rack_id) == (
        ["bar", "foo"], None, {}, -1, None)


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_broker_decoder_agrees(version):
    data = encode_subscription(["b", "a", "c.d-e_f"], b"ud", {"a": [1]}, 4, "r", version=version)
    assert parse_subscribed_topics(data) == set(decode_subscription(data).topics)
    assert parse_subscribed_topics(_future_subscription()) == set(decode_subscription(_future_subscription()).topics)


_topic = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=20)


@settings(max_examples=150, deadline=None)
@given(topics=st.lists(_topic, unique=True, max_size=6),
       user_data=st.none() | st.binary(max_size=30),
       owned=st.dictionaries(_topic, st.lists(st.integers(0, 2**31 - 1), unique=True, min_size=1, max_size=5),
                             max_size=4),
       generation=st.integers(-1, 2**31 - 1),
       rack=st.none() | st.text(min_size=1, max_size=10),
       version=st.integers(0, HIGHEST_VERSION))
def test_subscription_round_trip_and_broker_agreement(topics, user_data, owned, generation, rack, version):
    data = encode_subscription(topics, user_data, owned, generation, rack, version=version)
    sub = decode_subscription(data)
    assert sorted(sub.topics) == sorted(topics)
    assert sub.user_data == user_data
    assert sub.owned_partitions == ({t: sorted(ps) for t, ps in sorted(owned.items())} if version >= 1 else {})
    assert sub.generation_id == (generation if version >= 2 else -1)
    assert sub.rack_id == (rack if version >= 3 else None)
    assert parse_subscribed_topics(data) == set(topics)


# ---------------------------------------------------------------------------------------- assignment


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_assignment_bytes_equal_java(version):
    data = encode_assignment({"foo": [1, 0], "bar": [2]}, b"hello", version=version)
    assert data.hex() == JAVA_ASSIGNMENT[version]
    got = decode_assignment(data)
    assert got == Assignment({"foo": [1, 0], "bar": [2]}, b"hello", version)
    assert got.topic_partitions() == [("foo", 1), ("foo", 0), ("bar", 2)]


def test_empty_assignments():
    assert encode_assignment({}).hex() == JAVA_EMPTY_ASSIGNMENT_NULL_USER_DATA
    assert encode_assignment({}, b"", version=0).hex() == JAVA_EMPTY_ASSIGNMENT_EMPTY_USER_DATA
    assert decode_assignment(bytes.fromhex(JAVA_EMPTY_ASSIGNMENT_NULL_USER_DATA)) == Assignment({}, None, 3)
    assert decode_assignment(bytes.fromhex(JAVA_EMPTY_ASSIGNMENT_EMPTY_USER_DATA)) == Assignment({}, b"", 0)
    # Zero bytes: what the coordinator sends a member the leader gave nothing to.
    for empty in (b"", bytearray(), memoryview(b"")):
        assert decode_assignment(empty) == Assignment({}, None, 0)


def test_future_assignment_version_reads_known_fields():
    # Java's ConsumerProtocolTest.deserializeFutureAssignmentVersion: v100 adds a string field.
    data = (struct.pack(">hi", 100, 1) + struct.pack(">h", 3) + b"foo" + struct.pack(">ii", 1, 1)
            + struct.pack(">i", 0) + struct.pack(">h", 3) + b"bar")
    got = decode_assignment(data)
    assert got.topic_partitions() == [("foo", 1)]
    assert got.user_data == b""
    assert got.version == 100


def test_repeated_topic_on_the_wire_is_merged():
    data = (struct.pack(">hi", 0, 2) + struct.pack(">h", 1) + b"t" + struct.pack(">ii", 1, 0)
            + struct.pack(">h", 1) + b"t" + struct.pack(">ii", 1, 3) + struct.pack(">i", -1))
    assert decode_assignment(data).partitions == {"t": [0, 3]}


@settings(max_examples=150, deadline=None)
@given(parts=st.dictionaries(_topic, st.lists(st.integers(0, 2**31 - 1), max_size=6), max_size=5),
       user_data=st.none() | st.binary(max_size=30),
       version=st.integers(0, HIGHEST_VERSION))
def test_assignment_round_trip(parts, user_data, version):
    assert decode_assignment(encode_assignment(parts, user_data, version)) == Assignment(parts, user_data, version)


# ---------------------------------------------------------------------------------------- kafka-python


def _kafka_python():
    return pytest.importorskip("kafka.protocol.consumer.metadata")


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_kafka_python_subscription_bytes(version):
    meta = _kafka_python()
    sub_cls = meta.ConsumerProtocolSubscription
    fields = {"version": version, "topics": ["bar", "foo"], "user_data": b"hello"}
    if version >= 1:
        fields["owned_partitions"] = [sub_cls.TopicPartition(topic="bar", partitions=[0]),
                                      sub_cls.TopicPartition(topic="foo", partitions=[0, 2])]
    if version >= 2:
        fields["generation_id"] = 1
    if version >= 3:
        fields["rack_id"] = "rack-a"
    theirs = sub_cls(**fields).encode()
    assert theirs.hex() == JAVA_FULL_SUBSCRIPTION[version]
    sub = decode_subscription(theirs)
    assert sub.topics == ["bar", "foo"]
    assert sub.user_data == b"hello"
    # And kafka-python reads ours.
    ours = encode_subscription(["foo", "bar"], b"hello", [("foo", 0), ("bar", 0), ("foo", 2)], 1, "rack-a",
                               version=version)
    back = sub_cls.decode(ours)
    assert list(back.topics) == ["bar", "foo"]
    assert back.user_data == b"hello"


@pytest.mark.parametrize("version", range(HIGHEST_VERSION + 1))
def test_kafka_python_assignment_bytes(version):
    meta = _kafka_python()
    a_cls = meta.ConsumerProtocolAssignment
    theirs = a_cls(version=version, assigned_partitions=[a_cls.TopicPartition(topic="foo", partitions=[1, 0]),
                                                         a_cls.TopicPartition(topic="bar", partitions=[2])],
                   user_data=b"hello").encode()
    assert theirs.hex() == JAVA_ASSIGNMENT[version]
    assert decode_assignment(theirs).partitions == {"foo": [1, 0], "bar": [2]}
    back = a_cls.decode(encode_assignment({"t": [3, 1]}, None, version))
    assert [(tp.topic, list(tp.partitions)) for tp in back.assigned_partitions] == [("t", [3, 1])]
    assert back.user_data is None


# ---------------------------------------------------------------------------------------- malformed


@pytest.mark.parametrize("data", [
    b"",  # no header
    b"\x00",  # half a header
    b"\xff\xff" + bytes(8),  # negative version
    b"\x00\x00\x00\x00\x00\x01\x00\x05ab",  # topic shorter than announced
    b"\x00\x00\xff\xff\xff\xff",  # null topics array
    b"\x00\x00\x7f\xff\xff\xff",  # absurd topic count
    b"\x00\x00\x00\x00\x00\x01\xff\xff\x00\x00\x00\x00",  # null topic name
    b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\x00\x00\x00\x00",  # topic not UTF-8
    b"\x00\x00\x00\x00\x00\x00",  # no user_data
    b"\x00\x02\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00",  # v2 without generation_id
])
def test_malformed_subscription(data):
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


@pytest.mark.parametrize("data", [
    b"\x00",
    b"\xff\xfe\x00\x00\x00\x00\xff\xff\xff\xff",
    b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x02\x00\x00\x00\x01",  # one partition short
    b"\x00\x00\x00\x00\x00\x00",  # no user_data
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05abc",  # user_data shorter than announced
])
def test_malformed_assignment(data):
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


def test_encoder_checks():
    with pytest.raises(ValueError):
        encode_subscription(["t"], version=4)
    with pytest.raises(ValueError):
        encode_assignment({}, version=-1)
    with pytest.raises(ValueError):
        encode_subscription(["x" * 40000])
    # A consumer-protocol error is a ValueError, so callers may catch either.
    assert issubclass(ConsumerProtocolError, ValueError)
