"""Tiered storage end to end at volume (issue 6's acceptance): 200 MB across several partitions of a
tiered topic with small segments and small local retention; once copy lag is 0 the local folders hold
only the tail, and confluent-kafka and kafka-python read back every record byte for byte from the
earliest offset, before and after a broker restart; the same on S3 (SeaweedFS and S3Proxy); deleting the
topic removes every remote object."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import urllib.request

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.waiting import TimedOut, not_yet, wait_until

PARTITIONS = 4
TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.bytes": "1",
                 "file.delete.delay.ms": "0"}


def broker_settings(storage: dict) -> dict:
    return {
        "remote.log.storage.system.enable": "true", **storage,
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "metrics.port": "0", "num.partitions": "1", "message.max.bytes": str(2 << 20),
    }


def status(b: BrokerProcess, topic: str) -> list[dict]:
    url = next(line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0] for line in b.output if "Metrics on " in line)
    return json.load(urllib.request.urlopen(url + f"/v1/tier/status?topic={topic}", timeout=30))["partitions"]


def wait_copied(b: BrokerProcess, topic: str, timeout: float = 240) -> list[dict]:
    def copied():
        parts = status(b, topic)
        if len(parts) == PARTITIONS and all(p["ready"] and p["copy_lag_segments"] == 0 and p["local_segments"] <= 2
                                            for p in parts):
            return parts
        return not_yet(parts)

    return wait_until(copied, timeout, interval=0.5, what=f"the copy lag of {topic} at 0 (its status)")


def produce(b: BrokerProcess, topic: str, megabytes: int) -> dict[int, tuple[int, str]]:
    """Produce about ``megabytes`` MB; returns {partition: (records, sha256 of (offset, key, value)...)}."""
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=TOPIC_CONFIGS)])
    admin.close()
    p = CKProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 256 * 1024,
                    "compression.type": "lz4", "queue.buffering.max.kbytes": 256 * 1024})
    value_size = 2000
    count = megabytes * (1 << 20) // value_size
    per_partition: dict[int, list] = {i: [] for i in range(PARTITIONS)}
    acked = []

    def done(err, msg):
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    for i in range(count):
        key = b"%09d" % i
        value = key + os.urandom(value_size - len(key))  # incompressible: the stored bytes are the volume
        while True:
            try:
                p.produce(topic, value, key, partition=i % PARTITIONS, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    for part, offset, key, value in sorted(acked):
        per_partition[part].append((offset, key, value))
    return {part: _digest(records) for part, records in per_partition.items()}


def _digest(records) -> tuple[int, str]:
    h = hashlib.sha256()
    for offset, key, value in records:
        h.update(b"%d|%d|" % (offset, len(key)) + key + b"|%d|" % len(value) + value)
    return len(records), h.hexdigest()


def read_confluent(b: BrokerProcess, topic: str, expected: dict) -> dict:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"e2e-{time.monotonic()}",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                    "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    total = sum(n for n, _ in expected.values())

    def consumed():
        if sum(map(len, got.values())) < total:
            for m in c.consume(10000, timeout=1):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.key(), m.value()))
        return sum(map(len, got.values())) >= total

    with contextlib.suppress(TimedOut):  # the caller compares the digests of what arrived
        wait_until(consumed, 180, interval=0, what=f"{total} records")
    c.close()
    return {p: _digest(records) for p, records in got.items()}


def read_kafka_python(b: BrokerProcess, topic: str, expected: dict) -> dict:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_bytes=16 << 20, max_partition_fetch_bytes=4 << 20)
    c.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
    c.seek_to_beginning()
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    total = sum(n for n, _ in expected.values())

    def consumed():
        if sum(map(len, got.values())) < total:
            for tp, records in c.poll(1000, max_records=20000).items():
                got[tp.partition] += [(r.offset, r.key, r.value) for r in records]
        return sum(map(len, got.values())) >= total

    with contextlib.suppress(TimedOut):  # the caller compares the digests of what arrived
        wait_until(consumed, 300, interval=0, what=f"{total} records")
    c.close()
    return {p: _digest(records) for p, records in got.items()}


def local_tail_only(b: BrokerProcess, topic: str, parts: list[dict]) -> None:
    for p in parts:
        assert p["local_log_start_offset"] > 0 and p["log_start_offset"] == 0
        assert p["remote_segments"] >= 10
        folder = b.log_dir / f"{topic}-{p['partition']}"
        local = sum(os.path.getsize(folder / f) for f in os.listdir(folder) if f.endswith(".log"))
        assert local <= 3 << 20, f"{folder} keeps {local} bytes, more than the tail"


def run_scenario(b: BrokerProcess, topic: str, megabytes: int, remote_count) -> BrokerProcess:
    expected = produce(b, topic, megabytes)
    parts = wait_copied(b, topic)
    local_tail_only(b, topic, parts)
    assert read_confluent(b, topic, expected) == expected
    assert read_kafka_python(b, topic, expected) == expected
    port = b.port
    assert b.stop() == 0
    b = BrokerProcess(b.log_dir, {**b.overrides, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}).start()
    assert read_confluent(b, topic, expected) == expected
    assert read_kafka_python(b, topic, expected) == expected
    assert remote_count() > 0
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.delete_topics([topic])
    admin.close()
    with contextlib.suppress(TimedOut):  # asserted just below
        wait_until(lambda: not remote_count(), 120, interval=0.5, what="no remote object")
    assert remote_count() == 0, "deleting the topic removes every remote object"
    return b


def test_200_mb_on_the_filesystem_store(tmp_path):
    remote = tmp_path / "remote"
    b = BrokerProcess(tmp_path / "logs", broker_settings({"rsm.config.dir": str(remote)})).start()
    try:
        b = run_scenario(b, "volume", 200, lambda: sum(1 for _ in remote.rglob("*") if _.is_file()))
    finally:
        b.kill()


def test_on_s3(tmp_path, real_s3):
    """On each real S3 server; S3Proxy refuses obstore's multi-object delete, which once stopped every copy."""
    prefix = f"e2e-{int(time.time())}/"
    configs = {f"rsm.config.{k}": v for k, v in real_s3.objectstore_configs("s3://tiered").items()}
    configs["rsm.config.key.prefix"] = prefix
    b = BrokerProcess(tmp_path / "logs", broker_settings({"remote.log.storage.manager.class.name": "objectstore",
                                                          **configs})).start()
    s3 = real_s3.boto3_client()

    def count() -> int:  # objects, not the folders a file-system-backed store lists too
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="tiered", Prefix=prefix)
        return sum(1 for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/"))
    try:
        b = run_scenario(b, "on-s3", 60, count)
    finally:
        b.kill()

