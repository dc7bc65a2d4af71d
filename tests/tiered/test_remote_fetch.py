"""Reading history from the remote tier through a live broker: real clients, real files, the
topic-based metadata manager.

One broker per module serves most tests (each test uses its own topics); tests that restart or
break the broker start their own.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.server.conftest import BrokerProcess
from tests.server.rawclient import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches

TIERED = {
    "remote.log.storage.system.enable": "true",
    "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "metrics.port": "0",
    "num.partitions": "1",
}
SMALL = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def start_tiered(log_dir, remote_dir, **extra) -> BrokerProcess:
    return BrokerProcess(log_dir, {**TIERED, "rsm.config.dir": str(remote_dir), **extra}).start()


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-fetch")
    b = start_tiered(root / "logs", root / "remote")
    b.remote_dir = root / "remote"
    yield b
    b.kill()


def metrics_url(b: BrokerProcess) -> str:
    for line in b.output:
        if "Metrics on " in line:
            return line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
    raise AssertionError("no metrics line")


def status(b: BrokerProcess, topic: str) -> list[dict]:
    return json.load(urllib.request.urlopen(metrics_url(b) + f"/v1/tier/status?topic={topic}"))["partitions"]


def wait_tiered(b: BrokerProcess, topic: str, partitions: int = 1, timeout: float = 60) -> list[dict]:
    """Until every partition has copied all rolled segments and kept at most two locally."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parts = status(b, topic)
        if len(parts) == partitions and all(p["ready"] and p["copy_lag_segments"] == 0 and p["remote_segments"] > 0
                                            and p["local_segments"] <= 2 for p in parts):
            return parts
        time.sleep(0.1)
    raise AssertionError(f"{topic} was not tiered in time: {status(b, topic)}")


def create(b: BrokerProcess, topic: str, partitions: int = 1, **configs) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={**SMALL, **configs})])
    finally:
        admin.close()


def produce(b: BrokerProcess, topic: str, count: int, codec: str | None = None, partition: int | None = None,
            timestamps: list[int] | None = None) -> list[tuple[int, bytes, bytes]]:
    """Produce ``count`` records; returns (partition, key, value) in order."""
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=2, batch_size=4096, compression_type=codec)
    sent = []
    for i in range(count):
        key, value = b"k%06d" % i, os.urandom(60) + b"v%06d" % i
        ts = timestamps[i] if timestamps else None
        md = p.send(topic, value, key, partition=partition, timestamp_ms=ts).get(30)
        sent.append((md.partition, key, value))
    p.close()
    return sent


def consume_confluent(b: BrokerProcess, topic: str, partitions: int, expected: int) -> list[tuple]:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(500, timeout=1):
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return out


def consume_kafka_python(b: BrokerProcess, topic: str, partitions: int, expected: int) -> list[tuple]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([KTopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    out = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for records in c.poll(1000).values():
            out += [(r.partition, r.offset, r.key, r.value) for r in records]
    c.close()
    return out


def consume_tierlog(b: BrokerProcess, topic: str, partitions: int, expected: int) -> list[tuple]:
    from tierlog.client.sync import Consumer
    from tierlog.client.types import TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for records in c.poll(1000).values():
            out += [(r.partition, r.offset, r.key, r.value) for r in records]
    c.close()
    return out


def expected_records(sent) -> list[tuple]:
    offsets: dict[int, int] = {}
    out = []
    for part, key, value in sent:
        off = offsets.get(part, 0)
        offsets[part] = off + 1
        out.append((part, off, key, value))
    return sorted(out)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_consumers_read_the_whole_history_byte_for_byte(tiered, codec):
    topic = f"history-{codec or 'none'}"
    create(tiered, topic, 2)
    sent = produce(tiered, topic, 1500, codec)
    parts = wait_tiered(tiered, topic, 2)
    assert all(p["local_log_start_offset"] > 0 and p["log_start_offset"] == 0 for p in parts)
    want = expected_records(sent)
    assert sorted(consume_confluent(tiered, topic, 2, len(want))) == want
    assert sorted(consume_kafka_python(tiered, topic, 2, len(want))) == want
    if codec in (None, "lz4"):
        assert sorted(consume_tierlog(tiered, topic, 2, len(want))) == want


def _fetch(client: RawClient, topic: str, partitions: dict[int, int], max_bytes: int = 1 << 20,
           partition_max: int = 1 << 20):
    resp = client.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": max_bytes,
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "fetch_offset": off, "partition_max_bytes": partition_max}
            for p, off in partitions.items()]}]})
    return {p.partition_index: p for p in resp.responses[0].partitions}


def _batches(records: bytes) -> list:
    return [h for _, h in iter_batches(records)] if records else []


def test_one_fetch_reads_several_remote_partitions_and_local_ones_within_limits(tiered):
    topic = "multi"
    create(tiered, topic, 3)
    for p in range(3):
        produce(tiered, topic, 600, partition=p)
    parts = wait_tiered(tiered, topic, 3)
    local_start = {p["partition"]: p["local_log_start_offset"] for p in parts}
    client = RawClient(tiered.bootstrap)
    try:
        # Partitions 0 and 1 from offset 0 (remote), partition 2 from its local start.
        got = _fetch(client, topic, {0: 0, 1: 0, 2: local_start[2]})
        for p in (0, 1, 2):
            assert got[p].error_code == 0
            batches = _batches(got[p].records)
            assert batches, f"partition {p} returned nothing"
        assert _batches(got[0].records)[0].base_offset == 0 and _batches(got[1].records)[0].base_offset == 0
        assert _batches(got[2].records)[0].base_offset == local_start[2]
        # Byte limits: per partition and for the whole response (whole batches only).
        got = _fetch(client, topic, {0: 0, 1: 0}, max_bytes=5000, partition_max=3000)
        sizes = [len(got[p].records) for p in (0, 1)]
        assert 0 < sizes[0] <= 3000 and sizes[1] <= 3000 and sum(sizes) <= 5000
        # An offset in the middle of a remote batch starts at that batch.
        first = _batches(_fetch(client, topic, {0: 0})[0].records)
        middle = first[1].base_offset + 1 if first[1].last_offset > first[1].base_offset else first[1].base_offset
        again = _batches(_fetch(client, topic, {0: middle})[0].records)
        assert again[0].base_offset <= middle <= again[0].last_offset
        # Reading a whole partition by following next offsets crosses segments and the remote/local edge.
        offset, seen = 0, 0
        while offset < 600:
            batches = _batches(_fetch(client, topic, {0: offset}, partition_max=7000)[0].records)
            assert batches and batches[0].base_offset <= offset
            offset = batches[-1].next_offset
            seen += 1
        assert seen > 3
    finally:
        client.close()


def _list_offsets(b: BrokerProcess, topic: str, timestamp: int, version: int = 9):
    client = RawClient(b.bootstrap)
    try:
        r = client.request(ApiKey.LIST_OFFSETS, version, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
        return r.topics[0].partitions[0]
    finally:
        client.close()


def test_list_offsets_with_remote_data(tiered):
    topic = "offsets"
    create(tiered, topic)
    base = int(time.time() * 1000) - 3_600_000
    stamps = [base + 1000 * i for i in range(800)]
    produce(tiered, topic, 800, timestamps=stamps)
    part = wait_tiered(tiered, topic)[0]
    assert _list_offsets(tiered, topic, -2).offset == 0
    assert _list_offsets(tiered, topic, -4, 8).offset == part["local_log_start_offset"] > 0
    assert _list_offsets(tiered, topic, -5).offset == part["highest_offset_in_remote_storage"]
    assert _list_offsets(tiered, topic, -1).offset == 800
    for i in (0, 1, 137, part["local_log_start_offset"] - 1, part["local_log_start_offset"], 799):
        r = _list_offsets(tiered, topic, stamps[i])
        assert (r.error_code, r.offset, r.timestamp) == (0, i, stamps[i])
    r = _list_offsets(tiered, topic, stamps[10] - 500)  # between two records
    assert (r.offset, r.timestamp) == (10, stamps[10])
    assert _list_offsets(tiered, topic, stamps[-1] + 1).offset == -1


def test_offsets_below_the_log_start_are_out_of_range(tiered):
    topic = "trimmed"
    create(tiered, topic)
    produce(tiered, topic, 600)
    wait_tiered(tiered, topic)
    admin = KafkaAdminClient(bootstrap_servers=tiered.bootstrap)
    admin.delete_records({KTopicPartition(topic, 0): 200})
    admin.close()
    client = RawClient(tiered.bootstrap)
    try:
        assert _fetch(client, topic, {0: 100})[0].error_code == 1  # OFFSET_OUT_OF_RANGE
        batches = _batches(_fetch(client, topic, {0: 200})[0].records)
        assert batches[0].base_offset <= 200 <= batches[0].last_offset
    finally:
        client.close()
    # auto.offset.reset=earliest lands on the new log start, in the remote tier.
    got = consume_confluent(tiered, topic, 1, 400)
    assert min(off for _, off, _, _ in got) == 200 and len(got) == 400


def test_a_missing_remote_object_is_a_retriable_error_and_reads_recover(tiered):
    topic = "missing"
    create(tiered, topic)
    sent = produce(tiered, topic, 500)
    wait_tiered(tiered, topic)
    logs = sorted((tiered.remote_dir).glob(f"{topic}-*/0/*.log"))
    victim = logs[0]
    hidden = victim.with_suffix(".hidden")
    victim.rename(hidden)
    try:
        client = RawClient(tiered.bootstrap)
        try:
            part = _fetch(client, topic, {0: 0})[0]
        finally:
            client.close()
        assert part.error_code == 56  # KAFKA_STORAGE_ERROR: every client retries it
        assert any("from segment" in line and "failed" in line and victim.stem.split("-", 1)[1] in line
                   for line in tiered.output), "the broker log names the segment"
    finally:
        hidden.rename(victim)
    assert sorted(consume_confluent(tiered, topic, 1, 500)) == expected_records(sent)


def test_history_survives_a_restart_and_metadata_loading_does_not_block_local_reads(tmp_path):
    b = start_tiered(tmp_path / "logs", tmp_path / "remote")
    try:
        create(b, "restart")
        sent = produce(b, "restart", 800)
        before = wait_tiered(b, "restart")[0]
        assert b.stop() == 0
        shutil.rmtree(tmp_path / "logs" / "__remote_log_metadata-snapshots", ignore_errors=True)  # full replay
        # A slow metadata catch-up: one event per poll.
        b = start_tiered(tmp_path / "logs", tmp_path / "remote",
                         **{"rlmm.config.remote.log.metadata.consumer.max.poll.records": "1",
                            "listeners": f"PLAINTEXT://127.0.0.1:{b.port}"})
        # While loading: a local offset is served at once, a remote one gets the retriable 9.
        client = RawClient(b.bootstrap)
        try:
            local = _fetch(client, "restart", {0: before["local_log_start_offset"]})[0]
            assert local.error_code == 0 and local.records
            early = _fetch(client, "restart", {0: 0})[0]
            assert early.error_code in (0, 9)
        finally:
            client.close()
        assert sorted(consume_confluent(b, "restart", 1, 800)) == expected_records(sent)
        assert sorted(consume_kafka_python(b, "restart", 1, 800)) == expected_records(sent)
        after = status(b, "restart")[0]
        # Nothing uploaded twice: the segments before the restart stay as they were; at most the segment
        # that was active (rolled after the restart, since it alone breaches local retention) is added.
        starts = sorted(int(p.name[:20]) for p in (tmp_path / "remote").glob("restart-*/0/*.log"))
        assert len(starts) == len(set(starts)) == after["remote_segments"]
        assert before["remote_segments"] <= after["remote_segments"] <= before["remote_segments"] + 1
        assert after["highest_offset_in_remote_storage"] >= before["highest_offset_in_remote_storage"]
    finally:
        b.kill()
