"""Metadata, Produce, Fetch and offsets APIs at the versions real clients use and the newest ones."""

import os
import time
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema

from tests.harness.rawclient import RawClient, raw_client
from tierlog.protocol import ApiKey, build, encode_request, parse_response
from tierlog.records import build_batch, iter_records


@pytest.fixture
def client(broker):
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def create(client, name, partitions=1, version=12):
    resp = client.request(ApiKey.METADATA, version, {"topics": [{"name": name}], "allow_auto_topic_creation": True})
    t = resp.topics[0]
    assert t.error_code == 0, t
    assert len(t.partitions) == partitions
    return t


def produce(client, topic, batch, version=9, acks=-1, partition=0):
    resp = client.request(ApiKey.PRODUCE, version, {
        "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def test_metadata_auto_creates_and_reports_topic_ids(client, broker):
    t = create(client, "orders")
    assert t.topic_id != uuid.UUID(int=0)
    resp = client.request(ApiKey.METADATA, 13, {"topics": None})
    assert [x.name for x in resp.topics] == ["orders"] and resp.error_code == 0
    assert resp.brokers[0].port == broker.port and resp.cluster_id
    resp = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "bad name!"}]})
    assert resp.topics[0].error_code == 17
    resp = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
    assert resp.topics[0].error_code == 3
    resp = client.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": uuid.uuid4()}]})
    assert resp.topics[0].error_code == 100


@pytest.mark.parametrize("version", [4, 11, 12, 13, 15, 17])
def test_fetch_by_name_and_by_topic_id(client, version):
    t = create(client, "f")
    for i in range(3):
        assert produce(client, "f", build_batch([(b"k", b"v%d" % i)] * 2)).error_code == 0
    topic = {"topic_id": t.topic_id} if version >= 13 else {"topic": "f"}
    resp = client.request(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{**topic, "partitions": [{"partition": 0, "fetch_offset": 2, "partition_max_bytes": 1 << 20,
                                             "current_leader_epoch": -1, "log_start_offset": -1}]}]})
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0 and p.high_watermark == 6
    assert [r.offset for r in iter_records(p.records)] == [2, 3, 4, 5]


def test_fetch_long_polls_until_data_arrives(client, broker):
    create(client, "lp")
    waiter = RawClient(broker.bootstrap)
    req = {"replica_id": -1, "max_wait": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
           "topics": [{"topic": "lp", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 1 << 20}]}]}
    from kio.index import load_request_schema, load_response_schema

    from tierlog.protocol import build, encode_request, parse_response
    t0 = time.monotonic()
    waiter.send_frame(encode_request(build(load_request_schema(1, 12), req), 1))
    time.sleep(0.5)
    produce(client, "lp", build_batch([(None, b"late")]))
    _, resp = parse_response(waiter.read_frame(), load_response_schema(1, 12))
    elapsed = time.monotonic() - t0
    assert 0.4 < elapsed < 4, elapsed
    assert [r.value for r in iter_records(resp.responses[0].partitions[0].records)] == [b"late"]
    # Nothing arrives: the answer comes after max_wait, empty.
    t0 = time.monotonic()
    req["max_wait"] = 300
    req["topics"][0]["partitions"][0]["fetch_offset"] = 1
    waiter.send_frame(encode_request(build(load_request_schema(1, 12), req), 2))
    _, resp = parse_response(waiter.read_frame(), load_response_schema(1, 12))
    assert 0.25 < time.monotonic() - t0 < 3
    assert resp.responses[0].partitions[0].records in (b"", None)
    waiter.close()


def test_fetch_out_of_range_and_unknown_partition(client):
    create(client, "r")
    produce(client, "r", build_batch([(None, b"x")]))
    resp = client.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": "r", "partitions": [
            {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1000},
            {"partition": 7, "fetch_offset": 0, "partition_max_bytes": 1000}]}]})
    parts = resp.responses[0].partitions
    assert [p.error_code for p in parts] == [1, 3]
    # As in Kafka, an errored partition reports no offsets; the client asks ListOffsets to reset.
    assert (parts[0].high_watermark, parts[0].last_stable_offset, parts[0].log_start_offset) == (-1, -1, -1)


def test_produce_errors_per_partition(client):
    create(client, "p")
    assert produce(client, "nope-topic", build_batch([(None, b"x")])).error_code in (3,)
    v1 = bytearray(build_batch([(None, b"x")]))
    v1[16] = 1
    assert produce(client, "p", bytes(v1)).error_code == 87  # magic v0/v1 refused, as Kafka's validateRecords
    two = build_batch([(None, b"x")]) * 2
    assert produce(client, "p", two).error_code == 87  # exactly one batch per partition
    bad_crc = bytearray(build_batch([(None, b"x")]))
    bad_crc[-1] ^= 0xFF
    assert produce(client, "p", bytes(bad_crc)).error_code == 2
    big = build_batch([(None, b"x" * 2_000_000)])
    assert produce(client, "p", big).error_code == 10
    zstd = build_batch([(None, b"x" * 100)], compression="zstd")
    assert produce(client, "p", zstd, version=5).error_code == 76
    assert produce(client, "p", zstd, version=7).error_code == 0
    assert produce(client, "p", build_batch([(None, b"x")]), acks=2).error_code == 21


def test_idempotent_retry_is_deduplicated(client):
    create(client, "idem")
    pid = client.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                       "producer_id": -1, "producer_epoch": -1})
    assert pid.error_code == 0 and pid.producer_id >= 0
    b0 = build_batch([(None, b"a"), (None, b"b")], producer_id=pid.producer_id, producer_epoch=0, base_sequence=0)
    b1 = build_batch([(None, b"c")], producer_id=pid.producer_id, producer_epoch=0, base_sequence=2)
    assert produce(client, "idem", b0).base_offset == 0
    assert produce(client, "idem", b0).base_offset == 0  # a retry: same offsets, nothing appended
    assert produce(client, "idem", b1).base_offset == 2
    gap = build_batch([(None, b"d")], producer_id=pid.producer_id, producer_epoch=0, base_sequence=9)
    assert produce(client, "idem", gap).error_code == 45
    lo = client.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
        {"name": "idem", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert lo.topics[0].partitions[0].offset == 3


def test_list_offsets_special_timestamps(start_broker):
    # The records are stamped in 1970: without log.retention.ms=-1 the first retention check (half a second
    # after start) may delete them before the lookups.
    client = RawClient(start_broker(log_retention_ms=-1).bootstrap)
    create(client, "lo")
    for ts in (1000, 3000, 2000):
        produce(client, "lo", build_batch([(None, b"x", [], ts)]))
    def lo(ts, version=9):
        r = client.request(ApiKey.LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "lo", "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]})
        p = r.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp
    assert lo(-2) == (0, 0, -1)
    assert lo(-1) == (0, 3, -1)
    assert lo(-3) == (0, 1, 3000)
    assert lo(-4) == (0, 0, -1)
    assert lo(-5) == (0, -1, -1)  # nothing tiered
    assert lo(-6, version=11) == (0, -1, -1)  # no remote storage: no pending upload (KIP-1023)
    assert lo(-6, version=10)[0] == 35  # the earliest pending upload needs v11
    assert lo(1500) == (0, 1, 3000)
    assert lo(2500) == (0, 1, 3000)
    assert lo(3001)[1] == -1
    assert lo(-3, version=6)[0] == 35  # max timestamp needs v7
    client.close()


def test_list_offsets_of_a_partition_asked_twice_is_answered_once_as_an_invalid_request(client):
    for topic in ("lo2", "lo3"):
        create(client, topic)
        produce(client, topic, build_batch([(None, b"x")] * 3))

    def ask(*partitions):
        return {"partitions": [{"partition_index": i, "timestamp": -1, "current_leader_epoch": -1} for i in partitions]}
    r = client.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "lo2", **ask(0, 0)}, {"name": "lo3", **ask(0)}]})
    got = [(t.name, p.error_code, p.offset) for t in r.topics for p in t.partitions]
    assert got == [("lo2", 42, -1), ("lo3", 0, 3)]  # answered once, as Kafka answers


def test_offsets_for_leader_epoch(client):
    create(client, "e")
    produce(client, "e", build_batch([(None, b"x")] * 4))
    r = client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": "e", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 4)


def test_topics_and_epochs_survive_restarts(client, broker):
    t = create(client, "keep")
    produce(client, "keep", build_batch([(None, b"x")] * 3))
    client.close()
    broker.restart(clean=False)
    c2 = RawClient(broker.bootstrap)
    resp = c2.request(ApiKey.METADATA, 12, {"topics": [{"name": "keep"}], "allow_auto_topic_creation": False})
    t2 = resp.topics[0]
    assert t2.topic_id == t.topic_id
    assert t2.partitions[0].leader_epoch > t.partitions[0].leader_epoch
    # A fetch with the old epoch is fenced; with the new one it reads all three records.
    def fetch(epoch):
        r = c2.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                           "topics": [{"topic": "keep", "partitions": [
                                               {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                "current_leader_epoch": epoch}]}]})
        return r.responses[0].partitions[0]
    assert fetch(t.partitions[0].leader_epoch).error_code == 74
    assert len(list(iter_records(fetch(t2.partitions[0].leader_epoch).records))) == 3
    c2.close()


def test_fetch_naming_no_partition_returns_at_once(client):
    # A Java consumer closing its session sends one; answering it must not wait or spin.
    # max_wait is a minute: an answer well before it did not wait, however slow the machine.
    t0 = time.monotonic()
    resp = client.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 60_000, "min_bytes": 1,
                                             "max_bytes": 1 << 20, "topics": []})
    assert resp.error_code == 0 and resp.responses == ()
    assert time.monotonic() - t0 < 9  # (the raw client gives up after 10 s)


def test_min_insync_replicas_is_capped_at_the_replica_count(client):
    """Kafka's effectiveMinIsr: min.insync.replicas=2 on a one-replica topic still takes acks=all
    (Apache Kafka 4.1 answers the same; see the differential suite)."""
    resp = client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": "minisr", "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000, "validate_only": False})
    assert resp.topics[0].error_code == 0
    taken = produce(client, "minisr", build_batch([(None, b"x")]), acks=-1)
    assert (taken.error_code, taken.base_offset) == (0, 0)


def test_the_broker_fetch_max_bytes_caps_a_consumer_fetch(start_broker):
    b = start_broker(fetch_max_bytes=2048)
    c = RawClient(b.bootstrap)
    try:
        create(c, "capped")
        for i in range(6):
            assert produce(c, "capped", build_batch([(None, bytes([i]) * 900)])).error_code == 0

        def fetch(max_bytes):
            resp = c.request(ApiKey.FETCH, 12, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
                "topics": [{"topic": "capped", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                              "partition_max_bytes": 1 << 20,
                                                              "current_leader_epoch": -1, "log_start_offset": -1}]}]})
            return resp.responses[0].partitions[0].records or b""
        assert len(list(iter_records(fetch(1 << 20)))) == 2  # two ~970-byte batches fit in 2048
        assert len(list(iter_records(fetch(1000)))) == 1  # the request's own smaller limit still applies
    finally:
        c.close()


def test_pipelined_requests_are_answered_in_order_and_none_waits_for_a_later_ones_handler(client, broker):
    """A producer pipelines requests and the broker writes the answers to one read together: the answers keep
    the requests' order, and an answer already made never waits for a later request that waits (here a Fetch
    long poll, released by the test's own produce on another connection; max_wait is a minute, the raw
    client gives up after 10 s, so an answer held behind the poll fails the test on any machine)."""
    create(client, "pipelined")
    fetch = {"replica_id": -1, "max_wait": 60_000, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic": "pipelined", "partitions": [{"partition": 0, "fetch_offset": 2, "partition_max_bytes": 1 << 20,
                                               "current_leader_epoch": -1, "log_start_offset": -1}]}]}
    produce_one = {"acks": -1, "timeout": 5000, "topic_data": [{"name": "pipelined", "partition_data": [
        {"index": 0, "records": build_batch([(None, b"first")])}]}]}
    requests = [(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}),
                (ApiKey.PRODUCE, 9, produce_one), (ApiKey.PRODUCE, 9, produce_one),
                (ApiKey.FETCH, 12, fetch), (ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                                     "client_software_version": "1"})]
    client.send_frame(b"".join(encode_request(build(load_request_schema(k, v), values), corr, "pipeline")
                               for corr, (k, v, values) in enumerate(requests, start=100)))

    def answer(corr):
        k, v, _ = requests[corr - 100]
        got, resp = parse_response(client.read_frame(), load_response_schema(k, v))
        assert got == corr
        return resp

    assert answer(100).error_code == 0
    assert [answer(c).responses[0].partition_responses[0].base_offset for c in (101, 102)] == [0, 1]
    # The fetch at offset 2 is still waiting: the answers before it came without it.
    with raw_client(broker.bootstrap) as other:
        assert produce(other, "pipelined", build_batch([(None, b"release")])).base_offset == 2
    fetched = answer(103).responses[0].partitions[0]
    assert [r.value for r in iter_records(fetched.records)] == [b"release"]
    assert answer(104).error_code == 0


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_fetch_of_megabytes_reads_back_every_byte_on_either_event_loop(start_broker, monkeypatch, event_loop):
    """Big file regions go out by sendfile: asyncio's loop.sendfile, or on uvloop (no loop.sendfile) os.sendfile
    once the transport is empty, with whatever the socket does not take read and queued. A small send buffer
    on the broker makes the socket fill mid-region, so both halves of that path carry bytes."""
    monkeypatch.setenv("TIERLOG_EVENT_LOOP", event_loop)
    b = start_broker(socket_send_buffer_bytes=65536)
    values = [bytes([i]) * 100_000 + os.urandom(16) for i in range(40)]
    with raw_client(b.bootstrap) as c:
        create(c, "big-fetch")
        for v in values:
            assert produce(c, "big-fetch", build_batch([(None, v)])).error_code == 0
        got = []
        while len(got) < len(values):
            resp = c.request(ApiKey.FETCH, 12, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 8 << 20, "topics": [
                    {"topic": "big-fetch", "partitions": [{"partition": 0, "fetch_offset": len(got),
                                                           "partition_max_bytes": 8 << 20,
                                                           "current_leader_epoch": -1, "log_start_offset": -1}]}]})
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0
            got += [r.value for r in iter_records(p.records)]
        assert got == values
    assert f"Event loop: {event_loop}" in "".join(b.output)


def test_metadata_of_every_topic_answers_as_naming_them_and_follows_a_change(client):
    """A Metadata of every topic answers a topic from its built answer kept since the last such request
    (server/apis/metadata.py): it must stay what naming the topic answers (built afresh) at every version,
    and change with the topic."""
    create(client, "kept-a")
    create(client, "kept-b")

    def both(version):
        every = {t.name: t for t in client.request(ApiKey.METADATA, version, {"topics": None}).topics}
        named = client.request(ApiKey.METADATA, version, {"topics": [{"name": "kept-a"}, {"name": "kept-b"}],
                                                          "allow_auto_topic_creation": False}).topics
        return every, named

    for version in (1, 9, 12, 13, 1, 12):  # each twice at least: the second answer is the kept one
        every, named = both(version)
        assert [every["kept-a"], every["kept-b"]] == list(named), version
    grown = client.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": "kept-a", "count": 3,
                                                                     "assignments": None}],
                                                         "timeout_ms": 5000, "validate_only": False})
    assert grown.results[0].error_code == 0
    every, named = both(12)
    assert len(every["kept-a"].partitions) == 3 and [every["kept-a"], every["kept-b"]] == list(named)
