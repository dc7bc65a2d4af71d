"""The array-length guard must agree with kio on valid bytes and stop absurd lengths before kio."""

import io
import struct

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from tierlog.protocol._guard import ArrayTooLong, guard_for
from tierlog.protocol.messages import ApiKey, MalformedRequestError, parse_request, parse_response

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

_APIS = ["produce", "fetch", "metadata", "api_versions", "list_offsets", "offset_commit", "offset_fetch",
         "find_coordinator", "join_group", "sync_group", "create_topics", "describe_configs",
         "incremental_alter_configs", "init_producer_id", "describe_cluster"]
_KEYS = {name: key for key, name in api_key_map.items()}


def _types():
    out = []
    for api in _APIS:
        for version in schema_name_map[api]:
            for load in (load_request_schema, load_response_schema):
                try:
                    out.append(load(_KEYS[api], version))
                except Exception:
                    pass
    return out


TYPES = _types()


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_guard_consumes_exactly_what_kio_reads(data):
    cls = data.draw(st.sampled_from(TYPES))
    obj = data.draw(st.from_type(cls))
    out = io.BytesIO()
    entity_writer(cls)(out, obj)
    wire = out.getvalue() + b"trailing"
    try:
        _, consumed = entity_reader(cls)(wire, 0)
    except ValueError as exc:  # kio cannot read back some extreme timedeltas it wrote
        if "timedelta" not in str(exc):
            raise
        reject()
    assert guard_for(cls)(wire, 0) == consumed


def test_guard_stops_huge_tagged_array_in_a_response():
    cls = load_response_schema(ApiKey.API_VERSIONS, 3)
    body = struct.pack(">hb", 0, 1) + struct.pack(">i", 0)  # error, empty api_keys, throttle
    tags = b"\x01" + b"\x00" + b"\x05" + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])  # tag 0 = supported_features
    with pytest.raises(ArrayTooLong):
        guard_for(cls)(body + tags, 0)
    with pytest.raises(ValueError):
        parse_response(struct.pack(">i", 1) + body + tags, cls)


def test_guard_handles_null_arrays_and_nullable_structs():
    cls = load_request_schema(ApiKey.METADATA, 12)
    null_topics = b"\x00" + b"\x01\x00" + b"\x00"  # topics=null, two booleans, no tags
    assert guard_for(cls)(null_topics, 0) == len(null_topics)
    legacy = load_request_schema(ApiKey.METADATA, 3)
    assert guard_for(legacy)(struct.pack(">i", -1), 0) == 4


@pytest.mark.parametrize("length", [2, 100, 2**31 - 1])
def test_legacy_array_longer_than_the_frame_is_malformed(length):
    header = struct.pack(">hhih", ApiKey.PRODUCE, 7, 1, -1)
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", length)
    with pytest.raises(MalformedRequestError):
        parse_request(header + body)


@pytest.mark.xfail(strict=True, reason="kio 0.6.5 raises on unknown tagged fields; Kafka skips them")
def test_unknown_tagged_field_is_skipped():
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 1) + b"c" + b"\x00"
    body = b"\x02a" + b"\x021" + b"\x01" + b"\x07\x02hi"  # tag 7, two bytes
    assert parse_request(header + body).request.client_software_name == "a"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.parametrize("count", [1_000_000, 1_000_001])
def test_an_array_of_more_than_a_million_elements_is_malformed_as_in_kafka_44(count):
    # Kafka 4.4's readers refuse a collection above 1,000,000 elements even when the bytes are there:
    # OffsetFetch v7's partition indexes, int32 each, in one topic of one request
    header = struct.pack(">hhih", ApiKey.OFFSET_FETCH, 7, 1, -1) + b"\x00"
    body = (b"\x02g" + b"\x02" + b"\x02t" + _uvarint(count + 1) + bytes(4 * count)
            + b"\x00" * 3)  # the topic's tags, require_stable, the request's tags
    if count == 1_000_000:
        assert len(parse_request(header + body).request.topics[0].partition_indexes) == count
    else:
        with pytest.raises(MalformedRequestError, match="exceeds the maximum of 1000000"):
            parse_request(header + body)


@pytest.mark.parametrize("count", [10_000, 10_001])
def test_a_tagged_field_section_of_more_than_10000_fields_is_malformed_as_in_kafka_44(count):
    cls = load_request_schema(ApiKey.API_VERSIONS, 3)
    body = b"\x02a" + b"\x021" + _uvarint(count) + b"\x07\x00" * count  # empty unknown tags
    if count == 10_000:
        assert guard_for(cls)(body, 0) == len(body)  # kio then refuses the unknown tags (see the xfail above)
    else:
        with pytest.raises(ArrayTooLong, match="exceed the maximum of 10000"):
            guard_for(cls)(body, 0)
