"""The broker's metrics on a live broker, read from /metrics as Prometheus parses them: bytes and messages
per topic, requests, latency histograms and errors per API, connections per listener, log sizes against
the segment files, replica manager gauges and the process figures."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.harness.rawclient import RawClient, create_topic
from tests.harness.tiered import sample_value, scrape, wait_for
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

RM = "kafka_network_requestmetrics_"
BTM = "kafka_server_brokertopicmetrics_"
SSM = "kafka_server_socket_server_metrics_"


@pytest.fixture
def metrics_broker(start_broker):
    return start_broker({"metrics.port": "0", "num.partitions": "1"})


def produce(client: RawClient, topic: str, batch: bytes, partition: int = 0, acks: int = -1):
    resp = client.request(ApiKey.PRODUCE, 9, {
        "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def fetch(client: RawClient, topic: str, partition: int = 0, offset: int = 0):
    resp = client.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                   "partition_max_bytes": 1 << 24, "current_leader_epoch": -1,
                                                   "log_start_offset": -1}]}]})
    return resp.responses[0].partitions[0]


def value(samples, name: str, **labels) -> float:
    """A sample's value, 0 when the series does not exist (yet)."""
    found = sample_value(samples, name, **labels)
    return 0 if found is None else found


def test_bytes_messages_requests_latency_and_errors(metrics_broker):
    b = metrics_broker
    create_topic(b.bootstrap, "m")
    client = RawClient(b.bootstrap)
    try:
        before = scrape(b)
        batches = [build_batch([(b"k%d" % i, b"v" * (100 + i))] * (i + 1)) for i in range(5)]  # 1..5 records
        for batch in batches:
            assert produce(client, "m", batch).error_code == 0
        got = fetch(client, "m")
        assert got.error_code == 0 and got.high_watermark == 15
        # Errors: a partition the topic does not have, required acks Kafka refuses, a topic that does not exist.
        assert produce(client, "m", batches[0], partition=7).error_code == 3
        assert produce(client, "m", batches[0], acks=5).error_code == 21
        assert fetch(client, "m", partition=9).error_code == 3
        md = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
        assert md.topics[0].error_code == 3
        after = scrape(b)
    finally:
        client.close()

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta(BTM + "bytesin_total", topic="m") == sum(map(len, batches))
    assert delta(BTM + "messagesin_total", topic="m") == 15
    assert delta(BTM + "bytesout_total", topic="m") == len(got.records) == sum(map(len, batches))
    # counted by API and version, as Kafka's RequestsPerSec (request=Produce,version=9)
    assert delta(RM + "requests_total", request="Produce", version=9) == 7
    assert delta(RM + "requests_total", request="Fetch", version=12) == 2
    assert delta(RM + "requests_total", request="FetchConsumer", version=12) == 2
    assert delta(RM + "requests_total", request="FetchFollower", version=12) == 0
    assert delta(RM + "requests_total", request="Metadata", version=12) == 1
    for request, count in (("Produce", 7), ("Fetch", 2), ("FetchConsumer", 2)):
        for hist in ("totaltimems", "requestqueuetimems"):
            assert delta(RM + hist + "_count", request=request) == count
            assert delta(RM + hist + "_bucket", request=request, le="+Inf") == count
            assert delta(RM + hist + "_sum", request=request) > 0
    # The buckets are cumulative and a request of this size is answered within 30 s.
    assert value(after, RM + "totaltimems_bucket", request="Produce", le="30000.0") == value(
        after, RM + "totaltimems_count", request="Produce")
    assert delta(RM + "errors_total", request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta(RM + "errors_total", request="Produce", error="INVALID_REQUIRED_ACKS") == 1
    assert delta(RM + "errors_total", request="Fetch", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta(RM + "errors_total", request="FetchConsumer", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta(RM + "errors_total", request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert not [s for s in after if s.name == RM + "errors_total" and s.labels["error"] == "NONE"]


def test_connections_go_up_and_down(metrics_broker):
    b = metrics_broker
    listener = {"listener": "PLAINTEXT"}
    start = scrape(b)
    base = value(start, SSM + "connection_count", **listener)
    created = value(start, SSM + "connection_creation_total", **listener)
    closed = value(start, SSM + "connection_close_total", **listener)
    host, port = b.bootstrap.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        wait_for(lambda: value(scrape(b), SSM + "connection_count", **listener) == base + 3, "3 more connections")
        assert value(scrape(b), SSM + "connection_creation_total", **listener) == created + 3
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: value(scrape(b), SSM + "connection_count", **listener) == base, "the connections closed")
    assert value(scrape(b), SSM + "connection_close_total", **listener) == closed + 3


def test_log_size_matches_segment_files_and_broker_gauges(metrics_broker):
    b = metrics_broker
    create_topic(b.bootstrap, "sized", partitions=2, configs={"segment.bytes": "4096"})
    client = RawClient(b.bootstrap)
    try:
        for i in range(12):
            assert produce(client, "sized", build_batch([(None, b"x" * 1000)]), partition=i % 2).error_code == 0
    finally:
        client.close()
    samples = scrape(b)
    for p in (0, 1):
        folder = Path(b.log_dir) / f"sized-{p}"
        logs = sorted(folder.glob("*.log"))
        assert len(logs) > 1  # rolled: the size sums several segments
        assert value(samples, "kafka_log_log_size", topic="sized", partition=p) == sum(f.stat().st_size for f in logs)
        assert value(samples, "kafka_log_log_numlogsegments", topic="sized", partition=p) == len(logs)
        assert value(samples, "kafka_log_log_logendoffset", topic="sized", partition=p) == 6
        assert value(samples, "kafka_log_log_logstartoffset", topic="sized", partition=p) == 0
    assert sample_value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample_value(samples, "kafka_server_replicamanager_partitioncount") >= 2
    assert sample_value(samples, "kafka_server_replicamanager_leadercount") >= 2
    assert sample_value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    # Without tiered storage there is no metadata manager to be ready.
    assert sample_value(samples, "tierlog_remote_log_metadata_manager_ready") is None
    # The process, from prometheus-client's ProcessCollector on the broker's own registry.
    assert sample_value(samples, "process_resident_memory_bytes") > 10 * 2**20
    assert sample_value(samples, "process_open_fds") > 3
    assert sample_value(samples, "process_cpu_seconds_total") > 0
    assert sample_value(samples, "process_max_fds") > 0


def test_a_deleted_topic_leaves_no_series(metrics_broker):
    b = metrics_broker
    create_topic(b.bootstrap, "gone")
    client = RawClient(b.bootstrap)
    try:
        assert produce(client, "gone", build_batch([(None, b"x")])).error_code == 0
        assert value(scrape(b), BTM + "bytesin_total", topic="gone") > 0
        resp = client.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "gone", "topic_id": None}],
                                                        "timeout": 10000})
        assert resp.responses[0].error_code == 0
    finally:
        client.close()
    wait_for(lambda: not [s for s in scrape(b) if s.labels.get("topic") == "gone"], "the topic's series removed")
