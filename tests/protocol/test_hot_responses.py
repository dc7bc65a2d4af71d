"""The hand-written Produce and Fetch responses hold byte for byte to kio's encoding, every version, every field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.protocol import ApiKey, build_response, encode_response_frame, parse_response
from tierlog.protocol.hot_responses import (
    FETCH_VERSIONS,
    OWN_PART_BYTES,
    PRODUCE_VERSIONS,
    encode_fetch_response,
    encode_produce_response,
)
from tierlog.protocol.messages import request_types

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=300)
record_error = st.fixed_dictionaries({"batch_index": i32, "batch_index_error_message": st.none() | text})
partition = st.fixed_dictionaries(
    {"index": i32, "error_code": st.sampled_from([0, 2, 6, 10, 56, 87, -1]), "base_offset": i64,
     "log_append_time_ms": st.sampled_from([-1, 0, 1_700_000_000_123]), "log_start_offset": i64},
    optional={"error_message": st.none() | text, "record_errors": st.lists(record_error, max_size=3)})
topic = st.fixed_dictionaries({"name": text, "topic_id": st.uuids(),  # v13 names topics by id, the others by name
                               "partition_responses": st.lists(partition, max_size=4)})


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(topics=st.lists(topic, max_size=3), correlation_id=i32, throttle=st.integers(0, 2**31 - 1))
def test_produce_same_bytes_as_kio(version, topics, correlation_id, throttle):
    _, response_type = request_types(ApiKey.PRODUCE, version)
    if version < 8:  # the fields that version does not carry
        topics = [{**t, "partition_responses": [{k: v for k, v in p.items() if k not in ("error_message",
                                                                                        "record_errors")}
                                                for p in t["partition_responses"]]} for t in topics]
    expected = encode_response_frame(correlation_id, build_response(
        response_type, {"responses": topics, "throttle_time_ms": throttle}))
    assert encode_produce_response(version, correlation_id, topics, throttle) == expected


def test_a_client_reads_what_the_broker_writes():
    topics = [{"name": "orders", "partition_responses": [
        {"index": 3, "error_code": 87, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": 12,
         "error_message": "record 1 is bad", "record_errors": [{"batch_index": 1,
                                                                "batch_index_error_message": "no key"}]}]}]
    _, response_type = request_types(ApiKey.PRODUCE, 11)
    frame = encode_produce_response(11, 77, topics)
    correlation_id, response = parse_response(frame[4:], response_type)
    assert correlation_id == 77
    (p,) = response.responses[0].partition_responses
    assert (response.responses[0].name, p.index, p.error_code, p.log_start_offset, p.error_message) == \
        ("orders", 3, 87, 12, "record 1 is bad")
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [(1, "no key")]


@pytest.mark.parametrize(("encode", "version"), [(encode_produce_response, 2), (encode_produce_response, 14),
                                                 (encode_fetch_response, 3), (encode_fetch_response, 19)])
def test_versions_outside_the_handlers_range_are_refused(encode, version):
    with pytest.raises(ValueError, match=f"v{version}"):
        encode(version, 1, [])


class Region:
    """A file region as the fetch path hands it over: only a length, its bytes sent apart (sendfile)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


aborted = st.fixed_dictionaries({"producer_id": i64, "first_offset": i64})
fetch_partition = st.fixed_dictionaries({
    "partition_index": i32, "error_code": st.sampled_from([0, 1, 3, 6, 9, 56, 74, 100]), "high_watermark": i64,
    "last_stable_offset": i64, "log_start_offset": i64,
    "aborted_transactions": st.none() | st.lists(aborted, max_size=3),
    "preferred_read_replica": st.sampled_from([-1, 0, 7]),
    "records": st.none() | st.binary(max_size=64) | st.builds(Region, st.binary(min_size=1, max_size=64))
    | st.just(b"r" * OWN_PART_BYTES)})


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(topics=st.lists(st.tuples(text, st.uuids(), st.lists(fetch_partition, max_size=4)), max_size=3),
       correlation_id=i32, throttle=st.integers(0, 2**31 - 1), error_code=st.sampled_from([0, 70]),
       session_id=i32)
def test_fetch_same_bytes_as_kio(version, topics, correlation_id, throttle, error_code, session_id):
    key = "topic_id" if version >= 13 else "topic"
    responses = [{key: topic_id if version >= 13 else name, "partitions": partitions}
                 for name, topic_id, partitions in topics]
    parts = encode_fetch_response(version, correlation_id, responses, throttle, error_code, session_id)
    # Records that are not bytes, or big ones, stay parts of their own; everything else is copied in.
    own = [p["records"] for _, _, ps in topics for p in ps
           if p["records"] is not None and (isinstance(p["records"], Region) or len(p["records"]) >= OWN_PART_BYTES)]
    assert parts[1::2] == own and all(isinstance(p, bytes) for p in parts[::2])
    sent = b"".join(p.data if isinstance(p, Region) else p for p in parts)
    as_bytes = [{**t, "partitions": [{**p, "records": p["records"].data if isinstance(p["records"], Region)
                                      else p["records"]} for p in t["partitions"]]} for t in responses]
    _, response_type = request_types(ApiKey.FETCH, version)
    expected = encode_response_frame(correlation_id, build_response(response_type, {
        "responses": as_bytes, "throttle_time_ms": throttle, "error_code": error_code, "session_id": session_id}))
    assert sent == expected
