"""Cross-check against a real client's encoder/decoder: kafka-python 3.x ``kafka.protocol``."""

import uuid

import pytest

from tierlog.protocol.builder import build
from tierlog.protocol.messages import ApiKey, encode_response, parse_request
from tierlog.protocol.registry import (
    HandlerRegistry,
    api_versions_fallback_frame,
    build_api_versions_response,
)

kafka = pytest.importorskip("kafka", minversion="3.0")
kp_metadata = pytest.importorskip("kafka.protocol.metadata")
kp_producer = pytest.importorskip("kafka.protocol.producer")
from kafka.record.memory_records import MemoryRecordsBuilder  # noqa: E402

ApiVersionsRequest = kp_metadata.ApiVersionsRequest
ApiVersionsResponse = kp_metadata.ApiVersionsResponse
MetadataRequest = kp_metadata.MetadataRequest
MetadataResponse = kp_metadata.MetadataResponse
ProduceRequest = kp_producer.ProduceRequest

TOPIC_ID = uuid.UUID("0b6f7a54-3b7e-4f59-8b8e-3e55a6c9d001")


def _frame(kp_request, correlation_id, client_id="kafka-python-test") -> bytes:
    kp_request.with_header(correlation_id=correlation_id, client_id=client_id)
    wire = bytes(kp_request.encode(header=True, framed=True))
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4
    return wire[4:]


def _software(version: int) -> dict:
    if version < 3:
        return {}
    return {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}


async def _noop(ctx):
    return None


@pytest.fixture
def registry():
    reg = HandlerRegistry()
    for key, lo, hi in [(ApiKey.PRODUCE, 3, 11), (ApiKey.FETCH, 4, 16), (ApiKey.METADATA, 0, 13),
                        (ApiKey.API_VERSIONS, 0, 4)]:
        reg.register(key, lo, hi, _noop)
    return reg


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_request_from_kafka_python(version):
    ctx = parse_request(_frame(ApiVersionsRequest[version](**_software(version)), 21))
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (18, version, 21,
                                                                                "kafka-python-test")
    if version >= 3:
        assert ctx.request.client_software_name == "kafka-python"
        assert ctx.request.client_software_version == "3.0.12"
    assert ctx.trailing_bytes == 0


@pytest.mark.parametrize("version", [4, 9, 12, 13])
def test_metadata_request_from_kafka_python(version):
    topic_fields = {"name": "orders"}
    if version >= 10:
        topic_fields["topic_id"] = None
    fields = {"topics": [MetadataRequest.MetadataRequestTopic(**topic_fields)],
              "allow_auto_topic_creation": False}
    if version >= 8:
        fields["include_topic_authorized_operations"] = True
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    ctx = parse_request(_frame(MetadataRequest[version](**fields), 31))
    assert ctx.api_version == version and ctx.correlation_id == 31
    assert [t.name for t in ctx.request.topics] == ["orders"]
    assert ctx.request.allow_auto_topic_creation is False
    if version >= 8:
        assert ctx.request.include_topic_authorized_operations is True


def test_metadata_all_topics_request_from_kafka_python():
    ctx = parse_request(_frame(MetadataRequest[12](topics=None, allow_auto_topic_creation=True,
                                                   include_topic_authorized_operations=False), 32))
    assert ctx.request.topics is None


@pytest.mark.parametrize("compression", [0, 1])  # none, gzip
def test_produce_v9_with_record_batch_from_kafka_python(compression):
    builder = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=1 << 20)
    for i in range(10):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 1000, headers=[])
    builder.close()
    records = bytes(builder.buffer())
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="orders", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=records)])])
    ctx = parse_request(_frame(request, 41))
    assert ctx.api_key == ApiKey.PRODUCE and ctx.api_version == 9
    body = ctx.request
    assert body.acks == -1 and body.timeout.total_seconds() == 30 and body.transactional_id is None
    partition = body.topic_data[0].partition_data[0]
    assert body.topic_data[0].name == "orders" and partition.index == 3
    assert partition.records == records
    assert records[16] == 2  # magic byte of a v2 record batch


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_kafka_python_reads_our_api_versions_response(version, registry):
    ctx = parse_request(_frame(ApiVersionsRequest[version](**_software(version)), 50 + version))
    wire = encode_response(ctx, build_api_versions_response(ctx.api_version, registry))
    decoded = ApiVersionsResponse.decode(wire[4:], version=version, header=True)
    assert decoded.header.correlation_id == 50 + version
    assert decoded.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys} == {
        (0, 3, 11), (1, 4, 16), (3, 0, 13), (18, 0, 4)}


def test_kafka_python_reads_our_unsupported_version_fallback(registry):
    wire = api_versions_fallback_frame(60, registry)
    decoded = ApiVersionsResponse.decode(wire[4:], version=4, header=True)  # forced to v0 on error
    assert decoded.header.correlation_id == 60
    assert decoded.error_code == 35
    assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys}


METADATA = {
    "throttle_time_ms": 0,
    "brokers": [{"node_id": 1, "host": "localhost", "port": 9092}],
    "cluster_id": "tierlog",
    "controller_id": 1,
    "topics": [{"name": "orders", "topic_id": TOPIC_ID, "partitions": [
        {"partition_index": p, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1], "isr_nodes": [1]}
        for p in range(2)]}],
}


@pytest.mark.parametrize("version", range(14))
def test_kafka_python_reads_our_metadata_response(version):
    fields = {"topics": None}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    ctx = parse_request(_frame(MetadataRequest[version](**fields), 70 + version))
    wire = encode_response(ctx, build(ctx.response_type, METADATA))
    decoded = MetadataResponse.decode(wire[4:], version=version, header=True)
    assert decoded.header.correlation_id == 70 + version
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(1, "localhost", 9092)]
    (topic,) = decoded.topics
    assert topic.name == "orders" and topic.error_code == 0
    assert [p.partition_index for p in topic.partitions] == [0, 1]
    assert list(topic.partitions[1].replica_nodes) == [1]
    if version >= 10:
        assert topic.topic_id == TOPIC_ID
