import datetime
import os
import subprocess
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tierlog import errors
from tierlog.protocol import builder
from tierlog.protocol.builder import build, build_response, zero_value
from tierlog.protocol.messages import ApiKey, encode_response_frame, parse_request

from .helpers import kio_read_response, kio_request_frame, request_type, response_type

TOPIC_ID = uuid.UUID("6d4b8c3e-8f0e-4b1a-9a57-2f0c1d2e3f40")
BATCH = bytes(range(61)) * 3

# One description per API, written once for every version.
METADATA = {
    "throttle_time_ms": 7,
    "brokers": [{"node_id": 1, "host": "broker-1", "port": 9092, "rack": "rack-a"}],
    "cluster_id": "tierlog",
    "controller_id": 1,
    "topics": [{
        "error_code": 0,
        "name": "orders",
        "topic_id": str(TOPIC_ID),
        "is_internal": False,
        "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 3,
                        "replica_nodes": [1], "isr_nodes": (1,), "offline_replicas": []} for p in range(3)],
    }],
}
PRODUCE = {
    "responses": [{"name": "orders", "partition_responses": [{
        "index": 2, "error_code": errors.error_for_code(6), "base_offset": 42, "log_append_time_ms": -1,
        "log_start_offset": 5,
        "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
        "error_message": "not leader",
    }]}],
    "throttle_time_ms": 0,
}
FETCH = {
    "throttle_time_ms": 1,
    "error_code": 0,
    "session_id": 0,
    "responses": [{"topic": "orders", "topic_id": TOPIC_ID, "partitions": [{
        "partition_index": 0, "error_code": 0, "high_watermark": 100, "last_stable_offset": 100,
        "log_start_offset": 0, "aborted_transactions": [{"producer_id": 9, "first_offset": 10}],
        "records": BATCH,
    }]}],
}


def _round_trip(response):
    correlation_id, decoded = kio_read_response(encode_response_frame(99, response), type(response))
    assert correlation_id == 99
    assert decoded == response
    return decoded


@pytest.mark.parametrize("version", [0, 5, 12, 13])
def test_metadata_versions(version):
    r = _round_trip(build(response_type(ApiKey.METADATA, version), METADATA))
    assert r.brokers[0].host == "broker-1" and r.brokers[0].port == 9092
    topic = r.topics[0]
    assert topic.name == "orders" and topic.error_code is ErrorCode.none
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert topic.partitions[0].replica_nodes == (1,)
    if version >= 1:
        assert r.controller_id == 1 and r.brokers[0].rack == "rack-a"
    if version >= 3:
        assert r.throttle_time == datetime.timedelta(milliseconds=7)
    if version >= 5:
        assert topic.partitions[0].offline_replicas == ()
    if version >= 10:
        assert topic.topic_id == TOPIC_ID
    if version >= 13:
        assert r.error_code is ErrorCode.none  # zero-filled


@pytest.mark.parametrize("version", [0, 3])
def test_api_versions_versions(version):
    r = _round_trip(build(response_type(ApiKey.API_VERSIONS, version), {
        "error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time_ms": 0}))
    assert r.api_keys[0].max_version == 4
    if version == 3:
        assert r.supported_features == () and r.finalized_features_epoch == -1  # kio's defaults kept


@pytest.mark.parametrize("version", [3, 9, 11])
def test_produce_versions(version):
    r = _round_trip(build(response_type(ApiKey.PRODUCE, version), PRODUCE))
    p = r.responses[0].partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (2, ErrorCode.not_leader_or_follower, 42)
    assert p.log_append_time is None  # -1 on the wire
    if version >= 5:
        assert p.log_start_offset == 5
    if version >= 8:
        assert p.record_errors[0].batch_index_error_message == "bad" and p.error_message == "not leader"
    if version >= 10:
        assert p.current_leader.leader_id == -1  # kio default of the tagged struct


@pytest.mark.parametrize("version", [4, 12, 16])
def test_fetch_versions(version):
    r = _round_trip(build(response_type(ApiKey.FETCH, version), FETCH))
    topic = r.responses[0]
    part = topic.partitions[0]
    assert part.records == BATCH and part.high_watermark == 100
    assert part.aborted_transactions[0].first_offset == 10
    if version >= 13:
        assert topic.topic_id == TOPIC_ID
    else:
        assert topic.topic == "orders"
    if version >= 7:
        assert r.session_id == 0 and r.error_code is ErrorCode.none
    if version >= 11:
        assert part.preferred_read_replica == -1  # kio default kept


def test_zero_fill_of_required_fields():
    r = build(response_type(ApiKey.FETCH, 12), {"responses": [{"topic": "t", "partitions": [{}]}]})
    part = r.responses[0].partitions[0]
    assert part.error_code is ErrorCode.none and part.high_watermark == 0 and part.records == b""
    assert part.aborted_transactions == ()  # nullable array zero-filled as empty
    assert part.last_stable_offset == -1  # kio (Kafka) default, not zero
    assert r.throttle_time == datetime.timedelta(0)
    _round_trip(r)
    produce = build(response_type(ApiKey.PRODUCE, 9), responses=[{"name": "t", "partition_responses": [{}]}])
    assert produce.responses[0].partition_responses[0].log_append_time is None  # kio default null
    _round_trip(produce)


def test_conversions():
    r = build(response_type(ApiKey.PRODUCE, 9), {"responses": [{"name": "t", "partition_responses": [{
        "index": 0, "error_code": errors.UnknownTopicOrPartitionError(), "base_offset": -1,
        "log_append_time": 1_700_000_000_123}]}], "throttle_time": datetime.timedelta(milliseconds=5)})
    p = r.responses[0].partition_responses[0]
    assert p.error_code is ErrorCode.unknown_topic_or_partition
    assert p.log_append_time == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert r.throttle_time == datetime.timedelta(milliseconds=5)
    decoded = _round_trip(r)
    assert decoded.responses[0].partition_responses[0].log_append_time == p.log_append_time
    assert build(response_type(ApiKey.PRODUCE, 9), responses=[{"name": "t", "partition_responses": [
        {"error_code": errors.CorruptMessageError}]}]).responses[0].partition_responses[0].error_code == 2


def test_unknown_field_in_every_version_is_a_typo(monkeypatch):
    monkeypatch.setattr(builder, "CHECK_FIELDS", True)
    with pytest.raises(TypeError, match="hig_watermark"):
        build(response_type(ApiKey.FETCH, 12), {"responses": [{"topic": "t", "partitions": [
            {"hig_watermark": 1}]}]})
    with pytest.raises(TypeError, match="no field"):
        build(response_type(ApiKey.METADATA, 0), {"brokerz": []})


def test_without_the_check_a_key_of_another_version_imports_no_other_version():
    """A broker in service answers an old client without importing the message's other versions."""
    code = ("import sys\nfrom kio.schema.metadata.v1.response import MetadataResponse\n"
            "from tierlog.protocol.builder import build\n"
            "build(MetadataResponse, {'brokers': [], 'topics': [], 'throttle_time_ms': 0, 'no_such_field': 1})\n"
            "print(*sorted({m.split('.')[3] for m in sys.modules if m.startswith('kio.schema.metadata.v')}))")
    env = {k: v for k, v in os.environ.items() if k != "TIERLOG_CHECK_FIELDS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["v1"], out.stdout


def test_strict_rejects_fields_of_other_versions():
    with pytest.raises(TypeError, match="throttle_time"):
        build(response_type(ApiKey.METADATA, 0), {"throttle_time_ms": 1, "brokers": [], "topics": []},
              strict=True)
    build(response_type(ApiKey.METADATA, 3), {"throttle_time_ms": 1, "brokers": [], "topics": []},
          strict=True)


def test_range_checks_name_the_field():
    with pytest.raises(ValueError, match="port"):
        build(response_type(ApiKey.METADATA, 1), {"brokers": [{"node_id": 1, "host": "h", "port": 2**31}]})
    with pytest.raises(TypeError, match="partition_index"):
        build(response_type(ApiKey.FETCH, 12), {"responses": [{"topic": "t", "partitions": [
            {"partition_index": "0"}]}]})


def test_objects_of_another_version_are_converted():
    v12 = build(response_type(ApiKey.METADATA, 12), METADATA)
    v1 = build(response_type(ApiKey.METADATA, 1), {"brokers": v12.brokers, "topics": v12.topics,
                                                   "controller_id": 1})
    assert v1.topics[0].partitions[2].partition_index == 2
    _round_trip(v1)


def test_build_response_from_context():
    ctx = parse_request(kio_request_frame(request_type(ApiKey.API_VERSIONS, 2)()))
    r = build_response(ctx, error_code=0, api_keys=[])
    assert type(r) is ctx.response_type


def test_zero_value():
    assert zero_value(response_type(ApiKey.FETCH, 4).__dataclass_fields__["throttle_time"].type) == \
        datetime.timedelta(0)
    assert zero_value(uuid.UUID | None) == uuid.UUID(int=0)
    assert zero_value(str | None) == ""
