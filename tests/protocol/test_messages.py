import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from tierlog import errors
from tierlog.protocol.framing import encode_frame
from tierlog.protocol.messages import (
    ApiKey,
    MalformedRequestError,
    RequestParseError,
    UnsupportedApiKeyError,
    UnsupportedApiVersionError,
    encode_request,
    encode_response,
    encode_response_frame,
    parse_request,
    parse_request_header,
    parse_response,
)
from tierlog.protocol.registry import (
    HandlerRegistry,
    build_api_versions_response,
    fallback_response_frame,
)

from .helpers import kio_read_response, kio_request_frame, request_type, response_type


async def _noop(ctx):
    return None


@pytest.fixture
def registry():
    reg = HandlerRegistry()
    reg.register(ApiKey.API_VERSIONS, 0, 4, _noop)
    reg.register(ApiKey.METADATA, 0, 13, _noop)
    reg.register(ApiKey.PRODUCE, 3, 11, _noop)
    reg.register(ApiKey.FETCH, 4, 16, _noop)
    return reg


def _api_versions_request(version: int):
    cls = request_type(ApiKey.API_VERSIONS, version)
    if version >= 3:
        return cls(client_software_name="tierlog-tests", client_software_version="1.0")
    return cls()


@pytest.mark.parametrize("version", range(5))
def test_api_versions_round_trip(version, registry):
    request = _api_versions_request(version)
    frame = kio_request_frame(request, correlation_id=1000 + version, client_id="cid")
    ctx = parse_request(frame)
    assert (ctx.api_key, ctx.api_version, ctx.client_id) == (18, version, "cid")
    assert ctx.correlation_id == 1000 + version
    assert ctx.request == request
    assert ctx.trailing_bytes == 0 and ctx.frame_size == len(frame)
    assert ctx.response_type is response_type(18, version)
    assert ctx.header.request_api_version == version

    response = build_api_versions_response(ctx.api_version, registry)
    wire = encode_response(ctx, response)
    # ApiVersions responses always use header v0: body starts right after the correlation id.
    assert struct.unpack_from(">ih", wire, 4) == (1000 + version, 0)
    correlation_id, decoded = kio_read_response(wire, response_type(18, version))
    assert correlation_id == 1000 + version
    assert decoded == response
    assert decoded.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (0, 3, 11), (1, 4, 16), (3, 0, 13), (18, 0, 4)]


@pytest.mark.parametrize("version", [6, 7, 127])
def test_unsupported_api_versions_version_answered_at_v0(version, registry):
    # A future ApiVersions request (v5 is Kafka 4.4's, known): flexible header v2 plus a body kio cannot know.
    frame = struct.pack(">hhih", 18, version, 4242, 3) + b"cli" + b"\x00" + b"\x05newer\x02\x00"
    with pytest.raises(UnsupportedApiVersionError) as info:
        parse_request(frame)
    exc = info.value
    assert exc.header.api_key == 18 and exc.header.api_version == version
    assert exc.header.correlation_id == 4242 and exc.header.client_id == "cli"
    assert exc.error_code == ErrorCode.unsupported_version and exc.code == 35
    assert isinstance(exc, errors.UnsupportedVersionError) and isinstance(exc, RequestParseError)

    wire = fallback_response_frame(exc, registry)
    correlation_id, decoded = kio_read_response(wire, response_type(18, 0))
    assert correlation_id == 4242
    assert decoded.error_code == ErrorCode.unsupported_version
    assert (18, 0, 4) in [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys]
    assert len(decoded.api_keys) == len(registry)
    # A client that asked for v3 reads an error response as v0 (KIP-511).
    _, as_v3 = parse_response(wire[4:], response_type(18, 3))
    assert as_v3.error_code == ErrorCode.unsupported_version


def test_api_versions_version_known_to_kio_but_not_registered():
    reg = HandlerRegistry()
    reg.register(ApiKey.API_VERSIONS, 0, 2, _noop)
    ctx = parse_request(kio_request_frame(_api_versions_request(3), correlation_id=9))
    with pytest.raises(UnsupportedApiVersionError) as info:
        reg.for_request(ctx)
    wire = fallback_response_frame(info.value, reg)
    _, decoded = kio_read_response(wire, response_type(18, 0))
    assert decoded.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 2)]
    # The v0 answer is also accepted by encode_response for an ApiVersions context.
    assert encode_response(ctx, decoded) == wire


@pytest.mark.parametrize("api_key", [999, 4, -1])
def test_unknown_api_key(api_key, registry):
    frame = struct.pack(">hhih", api_key, 0, 77, -1) + b"\x00\x00"
    with pytest.raises(UnsupportedApiKeyError) as info:
        parse_request(frame)
    assert info.value.header.correlation_id == 77 and info.value.header.client_id is None
    assert info.value.code == 42
    assert fallback_response_frame(info.value, registry) is None  # Kafka closes the connection


def test_unsupported_api_versions_with_cut_client_id_is_still_answerable(registry):
    frame = struct.pack(">hhih", 18, 9, 4343, 50) + b"short"
    with pytest.raises(UnsupportedApiVersionError) as info:
        parse_request(frame)
    assert info.value.header.correlation_id == 4343 and info.value.header.client_id is None
    assert kio_read_response(fallback_response_frame(info.value, registry), response_type(18, 0))[0] == 4343


def test_unsupported_version_of_other_api_closes(registry):
    frame = struct.pack(">hhih", ApiKey.METADATA, 99, 5, 0)
    with pytest.raises(UnsupportedApiVersionError) as info:
        parse_request(frame)
    assert fallback_response_frame(info.value, registry) is None


def test_trailing_bytes_are_tolerated():
    request = _api_versions_request(3)
    frame = kio_request_frame(request, correlation_id=3) + b"xyz"
    ctx = parse_request(frame)
    assert ctx.request == request and ctx.trailing_bytes == 3


def test_metadata_v13_with_three_trailing_bytes_like_librdkafka_admin():
    cls = request_type(ApiKey.METADATA, 13)
    topic = cls.__dataclass_fields__["topics"].type.__args__[0].__args__[0]
    request = cls(topics=(topic(topic_id=None, name="orders"),), allow_auto_topic_creation=False,
                  include_topic_authorized_operations=True)
    frame = kio_request_frame(request, correlation_id=11, client_id="rdkafka") + b"\x00\x00\x00"
    ctx = parse_request(frame)
    assert ctx.api_version == 13 and ctx.request == request and ctx.trailing_bytes == 3
    assert ctx.response_type is response_type(ApiKey.METADATA, 13)


def test_parse_request_header_alone():
    frame = kio_request_frame(_api_versions_request(4), correlation_id=-5, client_id="héllo")
    info = parse_request_header(frame)
    assert (info.api_key, info.api_version, info.correlation_id, info.client_id) == (18, 4, -5, "héllo")
    assert info.api_name == "API_VERSIONS"
    with pytest.raises(MalformedRequestError):
        parse_request_header(frame[:7])
    with pytest.raises(MalformedRequestError):
        parse_request_header(frame[:11])  # client_id cut short


@pytest.mark.parametrize("cut", [0, 3, 7, 9])
def test_short_frames_are_malformed(cut):
    frame = kio_request_frame(_api_versions_request(3))
    with pytest.raises(MalformedRequestError):
        parse_request(frame[:cut])


def test_truncated_body_is_malformed_and_keeps_header():
    frame = kio_request_frame(_api_versions_request(3), correlation_id=31)
    with pytest.raises(MalformedRequestError) as info:
        parse_request(frame[:-4])
    assert info.value.header.correlation_id == 31
    assert isinstance(info.value, errors.InvalidRequestError)


def test_huge_compact_array_length_does_not_reach_kio():
    # kio 0.6.5 reserves memory for the announced length; 2**35 elements aborts the process.
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"c" + b"\x00"
    with pytest.raises(MalformedRequestError, match="array"):
        parse_request(header + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]) + b"\x00" * 4)


def test_huge_legacy_array_length_does_not_reach_kio():
    header = struct.pack(">hhih", ApiKey.METADATA, 4, 1, 1) + b"c"
    with pytest.raises(MalformedRequestError, match="array"):
        parse_request(header + struct.pack(">i", 2**31 - 1) + b"\x00" * 4)


def test_writable_buffers_are_accepted():
    frame = kio_request_frame(_api_versions_request(3), correlation_id=8)
    assert parse_request(bytearray(frame)).correlation_id == 8
    assert parse_request(memoryview(bytearray(frame))).correlation_id == 8
    assert parse_request(memoryview(frame)).correlation_id == 8


def test_produce_v9_records_come_back_as_bytes():
    cls = request_type(ApiKey.PRODUCE, 9)
    topic_cls = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    records = Records(bytes(range(256)) * 64)
    request = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        topic_cls(name="t", partition_data=(part_cls(index=0, records=records),)),))
    ctx = parse_request(kio_request_frame(request))
    assert ctx.request.topic_data[0].partition_data[0].records == records


def test_encode_response_checks_the_type(registry):
    ctx = parse_request(kio_request_frame(_api_versions_request(3)))
    with pytest.raises(TypeError):
        encode_response(ctx, build_api_versions_response(2, registry))


def test_flexible_responses_use_header_v1(registry):
    from tierlog.protocol.builder import build_response

    cls = request_type(ApiKey.METADATA, 12)
    ctx = parse_request(kio_request_frame(cls(topics=None, allow_auto_topic_creation=True,
                                              include_topic_authorized_operations=False), correlation_id=12))
    wire = encode_response(ctx, build_response(ctx, {"brokers": [], "topics": []}))
    assert struct.unpack_from(">iiB", wire, 0)[1:] == (12, 0)  # correlation id, empty header tag buffer
    assert kio_read_response(wire, ctx.response_type)[0] == 12


def test_encode_request_and_parse_response_round_trip(registry):
    request = _api_versions_request(3)
    wire = encode_request(request, correlation_id=55, client_id="me")
    assert wire[4:] == kio_request_frame(request, correlation_id=55, client_id="me")
    response = build_api_versions_response(3, registry)
    correlation_id, decoded = parse_response(encode_response_frame(55, response)[4:], type(response))
    assert correlation_id == 55 and decoded == response


st.register_type_strategy(Records, st.binary(max_size=100).map(Records))

_ROUND_TRIP_TYPES = [request_type(k, v) for k, v in [
    (ApiKey.METADATA, 0), (ApiKey.METADATA, 4), (ApiKey.METADATA, 12), (ApiKey.METADATA, 13),
    (ApiKey.FETCH, 4), (ApiKey.FETCH, 12), (ApiKey.FETCH, 16), (ApiKey.LIST_OFFSETS, 7),
    (ApiKey.OFFSET_COMMIT, 8), (ApiKey.JOIN_GROUP, 7), (ApiKey.CREATE_TOPICS, 7),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), (ApiKey.PRODUCE, 7), (ApiKey.PRODUCE, 9),
]]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_parse_request_round_trips_generated_requests(data):
    cls = data.draw(st.sampled_from(_ROUND_TRIP_TYPES))
    request = data.draw(st.from_type(cls))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    client_id = data.draw(st.none() | st.text(max_size=20))
    frame = kio_request_frame(request, correlation_id, client_id)
    ctx = parse_request(frame)
    assert ctx.request == request
    assert (ctx.correlation_id, ctx.client_id, ctx.trailing_bytes) == (correlation_id, client_id, 0)


@settings(max_examples=500, deadline=None)
@given(cls=st.sampled_from(_ROUND_TRIP_TYPES), body=st.binary(max_size=64))
def test_garbage_bodies_raise_parse_errors_only(cls, body):
    header = struct.pack(">hhih", cls.__api_key__, cls.__version__, 1, -1)
    if cls.__flexible__:
        header += b"\x00"
    try:
        parse_request(header + body)
    except RequestParseError:
        pass


def test_frame_from_the_decoder_parses():
    from tierlog.protocol.framing import FrameDecoder

    wire = encode_frame(kio_request_frame(_api_versions_request(2), correlation_id=4))
    (frame,) = FrameDecoder().feed(wire)
    assert parse_request(frame).correlation_id == 4
