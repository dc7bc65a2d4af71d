"""``__consumer_offsets`` record formats and the group -> partition mapping."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.consumer_group_records import ConsumerGroupRegularExpressionKey
from tierlog.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)


def s16(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


# -- Java String.hashCode and Kafka's partitionFor ------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("\U0001F600", 31 * 0xD83D + 0xDE00),         # a surrogate pair counts as two UTF-16 units
    ("polygenelubricants", -(2**31)),             # the famous Integer.MIN_VALUE hash
    ("my-group-\u00e9", None),
])
def test_java_string_hash(text, expected):
    h = java_string_hash(text)
    assert -(2**31) <= h < 2**31
    if expected is not None:
        assert h == expected
    # Reference implementation straight from the Java spec.
    ref = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        ref = (31 * ref + int.from_bytes(units[i:i + 2], "big")) % 2**32
    assert h == (ref - 2**32 if ref >= 2**31 else ref)


def test_partition_for_matches_kafka():
    # Utils.abs(Integer.MIN_VALUE) is 0, not MIN_VALUE.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    # A negative hash uses its absolute value: "console-consumer" style names are common.
    h = java_string_hash("group-negative-zz")
    assert partition_for("group-negative-zz", 7) == abs(h) % 7
    assert all(0 <= partition_for(f"g{i}", 50) < 50 for i in range(200))


# -- keys -----------------------------------------------------------------------------------------

def test_offset_commit_key_bytes():
    key = OffsetCommitKey("grp", "topic", 3)
    raw = encode_key(key)
    assert raw == struct.pack(">h", 1) + s16("grp") + s16("topic") + struct.pack(">i", 3)
    assert decode_key(raw) == key
    # Version 0 keys (written by very old brokers) have the same layout.
    assert decode_key(struct.pack(">h", 0) + raw[2:]) == key


def test_group_metadata_key_bytes():
    raw = encode_key(GroupMetadataKey("grp"))
    assert raw == struct.pack(">h", 2) + s16("grp")
    assert decode_key(raw) == GroupMetadataKey("grp")


def test_newer_record_types_are_recognised_and_skipped():
    # Share group records (types 9-14) are not used; the consumer groups' regular expressions (16) are.
    assert decode_key(struct.pack(">h", 10) + s16("grp")) == UnknownKey(10)
    assert decode_key(struct.pack(">h", 16) + s16("grp") + s16("a.*")) == \
        ConsumerGroupRegularExpressionKey("grp", "a.*")


def test_truncated_key_is_a_format_error():
    with pytest.raises(RecordFormatError):
        decode_key(struct.pack(">h", 1) + s16("grp")[:-1])


# -- OffsetCommitValue ----------------------------------------------------------------------------

def test_offset_commit_value_v3_bytes():
    v = OffsetCommitValue(offset=42, metadata="meta", commit_timestamp=1700000000000, leader_epoch=7)
    raw = encode_value(v)
    assert raw == (struct.pack(">hqi", 3, 42, 7) + s16("meta") + struct.pack(">q", 1700000000000))
    assert decode_value(OffsetCommitKey("g", "t", 0), raw) == v


def test_offset_commit_value_with_expiry_is_v1():
    v = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=99)
    raw = encode_value(v)
    assert raw == struct.pack(">hq", 1, 1) + s16("") + struct.pack(">qq", 10, 99)
    assert decode_value(OffsetCommitKey("g", "t", 0), raw) == v


def test_offset_commit_value_v0_v2_and_flexible_v4():
    key = OffsetCommitKey("g", "t", 0)
    v0 = struct.pack(">hq", 0, 5) + s16("m") + struct.pack(">q", 11)
    assert decode_value(key, v0) == OffsetCommitValue(5, "m", 11)
    v2 = struct.pack(">hq", 2, 5) + s16("m") + struct.pack(">q", 11)
    assert decode_value(key, v2) == OffsetCommitValue(5, "m", 11)
    # v4: compact string (length + 1 as unsigned varint), tagged fields at the end (one unknown tag).
    v4 = struct.pack(">hqi", 4, 5, 2) + bytes([2]) + b"m" + struct.pack(">q", 11) + bytes([1, 9, 2, 0xAB, 0xCD])
    assert decode_value(key, v4) == OffsetCommitValue(5, "m", 11, leader_epoch=2)
    assert encode_value(OffsetCommitValue(5, "m", 11, leader_epoch=2), version=4) == v4[:-5] + bytes([0])


def test_tombstone_value():
    assert encode_value(None) is None
    assert decode_value(OffsetCommitKey("g", "t", 0), None) is None
    assert decode_value(GroupMetadataKey("g"), None) is None


def test_unknown_value_version():
    with pytest.raises(RecordFormatError):
        decode_value(OffsetCommitKey("g", "t", 0), struct.pack(">hq", 9, 0))


# -- GroupMetadataValue ---------------------------------------------------------------------------

def _member(**kw) -> MemberMetadata:
    base = dict(member_id="m-1", client_id="cid", client_host="/127.0.0.1", session_timeout=10000,
                subscription=b"\x00\x01sub", assignment=b"\x00\x01asg", rebalance_timeout=30000,
                group_instance_id=None)
    base.update(kw)
    return MemberMetadata(**base)


def test_group_metadata_value_v3_bytes():
    v = GroupMetadataValue("consumer", 5, "range", "m-1", 1700000000000,
                           (_member(), _member(member_id="m-2", group_instance_id="inst")))
    raw = encode_value(v)
    expected = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m-1") \
        + struct.pack(">q", 1700000000000) + struct.pack(">i", 2)
    for member_id, instance in (("m-1", None), ("m-2", "inst")):
        expected += s16(member_id) + (struct.pack(">h", -1) if instance is None else s16(instance)) \
            + s16("cid") + s16("/127.0.0.1") + struct.pack(">ii", 30000, 10000) \
            + struct.pack(">i", 5) + b"\x00\x01sub" + struct.pack(">i", 5) + b"\x00\x01asg"
    assert raw == expected
    assert decode_value(GroupMetadataKey("g"), raw) == v


def test_empty_group_metadata_value():
    v = GroupMetadataValue("", 0, None, None, 123, ())
    raw = encode_value(v)
    assert raw == struct.pack(">h", 3) + s16("") + struct.pack(">ihhqi", 0, -1, -1, 123, 0)
    assert decode_value(GroupMetadataKey("g"), raw) == v


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_every_version_round_trips(version):
    v = GroupMetadataValue("consumer", 3, "roundrobin", "m-1", 77 if version >= 2 else -1,
                           (_member(rebalance_timeout=30000 if version >= 1 else -1,
                                    group_instance_id="i" if version >= 3 else None),))
    assert decode_value(GroupMetadataKey("g"), encode_value(v, version=version)) == v


@given(st.text(max_size=40), st.text(max_size=40), st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
       st.text(max_size=200), st.integers(-1, 2**31 - 1), st.integers(0, 2**62))
def test_offset_commit_round_trip(group, topic, partition, offset, metadata, epoch, ts):
    key = OffsetCommitKey(group, topic, partition)
    assert decode_key(encode_key(key)) == key
    for version in (3, 4):
        value = OffsetCommitValue(offset, metadata, ts, epoch)
        assert decode_value(key, encode_value(value, version=version)) == value


@given(st.lists(st.tuples(st.text(min_size=1, max_size=20), st.none() | st.text(max_size=10), st.binary(max_size=50),
                          st.binary(max_size=50)), max_size=5),
       st.none() | st.text(max_size=10), st.integers(0, 2**31 - 1), st.sampled_from([3, 4]))
def test_group_metadata_round_trip(members, protocol, generation, version):
    value = GroupMetadataValue("consumer", generation, protocol, members[0][0] if members else None, 5, tuple(
        _member(member_id=mid, group_instance_id=inst, subscription=sub, assignment=asg)
        for mid, inst, sub, asg in members))
    assert decode_value(GroupMetadataKey("g"), encode_value(value, version=version)) == value
