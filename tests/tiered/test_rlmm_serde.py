"""__remote_log_metadata record values: exact bytes, round trips and malformed input."""

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tierlog.tiered.rlmm import serde
from tierlog.tiered.rlmm.serde import MetadataRecordError

TP = TopicIdPartition(uuid.UUID("123e4567-e89b-12d3-a456-426614174000"), "foo", 0)
SEGMENT_ID = RemoteLogSegmentId(TP, uuid.UUID("11111111-2222-3333-4444-555555555555"))
SEGMENT = RemoteLogSegmentMetadata(SEGMENT_ID, start_offset=0, end_offset=100, max_timestamp_ms=-1, broker_id=1,
                                   event_timestamp_ms=123, segment_size_in_bytes=1024,
                                   segment_leader_epochs={0: 0, 1: 20, 2: 80}, custom_metadata=b"\x00\x01\x02\x03")

# SEGMENT as a RemoteLogSegmentMetadataRecord, derived field by field from Kafka's
# RemoteLogSegmentMetadataRecord.json (all fields v0, flexible). Kafka 4.1's RemoteLogMetadataSerde
# writes exactly these bytes for the same metadata.
SEGMENT_HEX = (
    "01" "00" "00"                          # frame version 1, api key 0, record version 0
    "04" "666f6f"                           # TopicIdPartition.Name: compact string, uvarint(3 + 1), "foo"
    "123e4567e89b12d3a456426614174000"      # TopicIdPartition.Id: uuid, msb then lsb
    "00000000"                              # TopicIdPartition.Partition: int32 0
    "00"                                    # TopicIdPartitionEntry tagged fields: count 0
    "11111111222233334444555555555555"      # RemoteLogSegmentId.Id: uuid
    "00"                                    # RemoteLogSegmentIdEntry tagged fields
    "0000000000000000"                      # StartOffset: int64 0
    "0000000000000064"                      # EndOffset: int64 100
    "00000001"                              # BrokerId: int32 1
    "ffffffffffffffff"                      # MaxTimestampMs: int64 -1
    "000000000000007b"                      # EventTimestampMs: int64 123
    "04"                                    # SegmentLeaderEpochs: compact array, uvarint(3 + 1)
    "00000000" "0000000000000000" "00"      #   LeaderEpoch 0, Offset 0, element tagged fields
    "00000001" "0000000000000014" "00"      #   LeaderEpoch 1, Offset 20
    "00000002" "0000000000000050" "00"      #   LeaderEpoch 2, Offset 80
    "00000400"                              # SegmentSizeInBytes: int32 1024
    "05" "00010203"                         # CustomMetadata: compact nullable bytes, uvarint(4 + 1)
    "00"                                    # RemoteLogSegmentState: int8 COPY_SEGMENT_STARTED
    "00"                                    # record tagged fields
)
UPDATE = RemoteLogSegmentMetadataUpdate(SEGMENT_ID, event_timestamp_ms=456, custom_metadata=None,
                                        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED, broker_id=2)
# Same segment id entry as above, then BrokerId 2, EventTimestampMs 456, CustomMetadata null, state 1.
UPDATE_HEX = ("010100" "04666f6f123e4567e89b12d3a4564266141740000000000000" "1111111122223333444455555555555500"
              "00000002" "00000000000001c8" "00" "01" "00")
DELETE = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                                       event_timestamp_ms=789, broker_id=3)
DELETE_HEX = "010200" "04666f6f123e4567e89b12d3a4564266141740000000000000" "00000003" "0000000000000315" "01" "00"
# Hex positions in SEGMENT_HEX: the epochs array's length, and the first field after the array.
EPOCHS = 2 * (3 + 4 + 16 + 4 + 1 + 16 + 1 + 36)
AFTER_EPOCHS = EPOCHS + 2 * (1 + 3 * 13)
# Snapshot record: only the segment's uuid, then the fields of SEGMENT_HEX after the segment id.
SNAPSHOT_HEX = "010300" "11111111222233334444555555555555" + SEGMENT_HEX[90:]


# ------------------------------------------------------------------------------------------ exact bytes

def test_segment_metadata_bytes():
    assert serde.serialize(SEGMENT).hex() == SEGMENT_HEX
    assert serde.deserialize(bytes.fromhex(SEGMENT_HEX)) == SEGMENT


def test_update_bytes():
    assert serde.serialize(UPDATE).hex() == UPDATE_HEX
    assert serde.deserialize(bytes.fromhex(UPDATE_HEX)) == UPDATE


def test_partition_delete_bytes():
    assert serde.serialize(DELETE).hex() == DELETE_HEX
    assert serde.deserialize(bytes.fromhex(DELETE_HEX)) == DELETE


def test_snapshot_bytes():
    assert serde.serialize_snapshot(SEGMENT).hex() == SNAPSHOT_HEX
    assert serde.deserialize_snapshot(bytes.fromhex(SNAPSHOT_HEX), TP) == SEGMENT


def test_epochs_are_written_in_ascending_order():
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 100, -1, 1, 123, 1024, {2: 80, 0: 0, 1: 20},
                                  custom_metadata=b"\x00\x01\x02\x03")
    assert serde.serialize(md).hex() == SEGMENT_HEX


def test_segment_record_with_a_later_state_decodes_with_that_state():
    value = bytearray.fromhex(SEGMENT_HEX)
    value[-2] = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    md = serde.deserialize(bytes(value))
    assert md.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    assert md == SEGMENT.with_update(RemoteLogSegmentMetadataUpdate(
        SEGMENT_ID, 123, b"\x00\x01\x02\x03", RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 1))


def test_unknown_tagged_fields_are_skipped_everywhere():
    two_fields = "02" "05" "02aabb" "07" "00"  # tag 5 with 2 bytes, tag 7 empty
    value = (SEGMENT_HEX[:54] + two_fields                       # in TopicIdPartitionEntry
             + SEGMENT_HEX[56:88] + two_fields                   # in RemoteLogSegmentIdEntry
             + SEGMENT_HEX[90:90 + 2 * 37 + 24] + two_fields     # in the first SegmentLeaderEpochEntry
             + SEGMENT_HEX[90 + 2 * 37 + 26:-2]
             + "01" "00" "0101")                                  # Kafka 4's TxnIndexEmpty=true (tag 0)
    # Kafka 4.1's serde reads this value as SEGMENT (with txnIdxEmpty=true).
    assert serde.deserialize(bytes.fromhex(value)) == SEGMENT


def test_accepts_bytearray_and_memoryview():
    raw = bytes.fromhex(SEGMENT_HEX)
    assert serde.deserialize(bytearray(raw)) == SEGMENT
    assert serde.deserialize(memoryview(raw)) == SEGMENT


def test_multi_byte_varints():
    name = "t" * 200  # compact length 201 needs two varint bytes
    tp = TopicIdPartition(TP.topic_id, name, 7)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, SEGMENT_ID.id), 5, 9, 0, 0, 0, 0,
                                  {e: 5 for e in range(130)}, custom_metadata=bytes(300))
    value = serde.serialize(md)
    assert value[3:5] == bytes([201 & 0x7F | 0x80, 201 >> 7])
    assert serde.deserialize(value) == md


# ------------------------------------------------------------------------------------------ round trips

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
tps = st.builds(TopicIdPartition, st.uuids(), st.text(max_size=20), int32)
segment_ids = st.builds(RemoteLogSegmentId, tps, st.uuids())
customs = st.none() | st.binary(max_size=40)


@st.composite
def segments(draw, tp=None):
    start = draw(st.integers(0, 2**63 - 1))
    end = draw(st.integers(start, 2**63 - 1))
    segment_id = RemoteLogSegmentId(tp, draw(st.uuids())) if tp else draw(segment_ids)
    return RemoteLogSegmentMetadata(
        segment_id, start, end, draw(int64), draw(int32), draw(int64), draw(int32),
        draw(st.dictionaries(int32, int64, min_size=1, max_size=5)), draw(customs),
        draw(st.sampled_from(RemoteLogSegmentState)))


updates = st.builds(RemoteLogSegmentMetadataUpdate, segment_ids, int64, customs,
                    st.sampled_from(RemoteLogSegmentState), int32)
deletes = st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(RemotePartitionDeleteState), int64, int32)


@given(segments() | updates | deletes)
def test_round_trip(event):
    assert serde.deserialize(serde.serialize(event)) == event


@given(segments(tp=TP))
def test_snapshot_round_trip(md):
    assert serde.deserialize_snapshot(serde.serialize_snapshot(md), TP) == md


@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_metadata_record_errors(value):
    try:
        serde.deserialize(value)
    except MetadataRecordError:
        pass


@given(st.integers(0, len(SEGMENT_HEX) // 2 - 1), st.integers(0, 255))
def test_corrupted_byte_raises_only_metadata_record_errors(index, byte):
    value = bytearray.fromhex(SEGMENT_HEX)
    value[index] = byte
    try:
        serde.deserialize(bytes(value))
    except MetadataRecordError:
        pass


# ------------------------------------------------------------------------------------------ bad values

def test_error_is_a_value_error():
    assert issubclass(MetadataRecordError, ValueError)


@pytest.mark.parametrize("hex_value", [SEGMENT_HEX, UPDATE_HEX, DELETE_HEX])
def test_every_truncation_is_rejected(hex_value):
    value = bytes.fromhex(hex_value)
    for n in range(len(value)):
        with pytest.raises(MetadataRecordError):
            serde.deserialize(value[:n])


def test_every_snapshot_truncation_is_rejected():
    value = bytes.fromhex(SNAPSHOT_HEX)
    for n in range(len(value)):
        with pytest.raises(MetadataRecordError):
            serde.deserialize_snapshot(value[:n], TP)


@pytest.mark.parametrize(("hex_value", "message"), [
    ("00" + SEGMENT_HEX[2:], "frame version 0"),
    ("02" + SEGMENT_HEX[2:], "unknown frame version 2"),
    ("0104" + SEGMENT_HEX[4:], "unknown remote log metadata api key 4"),
    ("010001" + SEGMENT_HEX[6:], "unsupported version 1"),
    (SEGMENT_HEX + "00", "1 byte(s) of garbage"),
    (DELETE_HEX + "0000", "2 byte(s) of garbage"),
    ("0100" + "80808080808080", "longer than 5 bytes"),
    ("010000" "00" + SEGMENT_HEX[8:], "string field was serialized as null"),
    ("010000" "ffff03", "invalid length 65534"),
    (SEGMENT_HEX[:EPOCHS] + "00" + SEGMENT_HEX[AFTER_EPOCHS:], "SegmentLeaderEpochs was serialized as null"),
    (SEGMENT_HEX[:EPOCHS] + "01" + SEGMENT_HEX[AFTER_EPOCHS:], "must not be empty"),
    (SEGMENT_HEX[:EPOCHS] + "ff0f" + SEGMENT_HEX[EPOCHS + 2:], "truncated"),  # 2046 epochs claimed
    (SEGMENT_HEX[:-4] + "0400", "unknown remote log segment state 4"),
    (UPDATE_HEX[:-4] + "ff00", "unknown remote log segment state -1"),
    (DELETE_HEX[:-4] + "0300", "unknown remote partition delete state 3"),
    (SEGMENT_HEX[:90] + "ffffffffffffffff" + SEGMENT_HEX[106:], "start offset -1"),
    (SNAPSHOT_HEX, "use deserialize_snapshot"),
])
def test_bad_values(hex_value, message):
    with pytest.raises(MetadataRecordError, match=re.escape(message)):
        serde.deserialize(bytes.fromhex(hex_value))


def test_end_offset_below_start_is_rejected():
    value = bytearray.fromhex(SEGMENT_HEX)
    value[45 + 7] = 0xFF  # StartOffset 255 > EndOffset 100
    with pytest.raises(MetadataRecordError, match="below start offset"):
        serde.deserialize(bytes(value))


def test_snapshot_reader_refuses_other_records():
    with pytest.raises(MetadataRecordError, match="expected a snapshot record"):
        serde.deserialize_snapshot(bytes.fromhex(SEGMENT_HEX), TP)


def test_serialize_refuses_other_types():
    with pytest.raises(TypeError):
        serde.serialize(TP)


def test_serialize_refuses_out_of_range_fields():
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 2**63, -1, 1, 123, 1024, {0: 0})
    with pytest.raises(MetadataRecordError):
        serde.serialize(md)
    with pytest.raises(MetadataRecordError):
        serde.serialize_snapshot(md)
    with pytest.raises(MetadataRecordError):
        serde.serialize(RemotePartitionDeleteMetadata(TopicIdPartition(TP.topic_id, "foo", 2**31),
                                                      RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 0, 0))


def test_serialize_refuses_too_long_topic_names():
    tp = TopicIdPartition(TP.topic_id, "x" * 0x8000, 0)
    with pytest.raises(MetadataRecordError, match="too long"):
        serde.serialize(RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 0, 0))
