"""The topic-based metadata manager inside a live broker: KIP-1197 (initialization starts once the broker
serves, its timeout counted from then; a permanent failure stops the broker) and KIP-1007 (while
metadata is being rebuilt after a restart, remote reads get a retriable error and clients wait, local
reads are not delayed)."""

from __future__ import annotations

import re
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.tiered import tier_status, tiered_settings, wait_for
from tierlog.protocol import ApiKey

# The manager's consumer fetches one metadata record (one event) per round trip: a replay of a few
# hundred events then takes a second or two, long enough to watch.
# One event per fetch, and each fetch held for fetch.max.wait.ms (it never reaches fetch.min.bytes):
# about 10 ms per event whatever the machine's speed, so the catch-up lasts seconds.
SLOW_CATCH_UP = {f"rlmm.config.remote.log.metadata.consumer.{k}": v for k, v in {
    "max.poll.records": "1", "fetch.max.bytes": "1", "max.partition.fetch.bytes": "1",
    "fetch.min.bytes": "1048576", "fetch.max.wait.ms": "10"}.items()}
TOPIC = {"remote.storage.enable": "true", "segment.bytes": "4000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def settings(root, **extra) -> dict:
    return tiered_settings(root, **extra)


def status(b: BrokerProcess, topic: str) -> list[dict]:
    return tier_status(b, topic)["partitions"]


def test_initialization_starts_when_the_broker_serves_and_its_timeout_counts_from_then(tmp_path):
    # Many partitions to load make the broker's start-up (the manager is configured before the logs
    # load) far longer than an initialization budget of 500 ms.
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("many", 3000, 1)])
    admin.close()
    port = b.port
    assert b.stop() == 0
    b = BrokerProcess(tmp_path / "logs", settings(
        tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}",
        **{"rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms": "500"})).start()
    try:
        ready_ms = int(re.search(r"Broker 1 ready in (\d+) ms", "".join(b.output)).group(1))
        started = wait_for(lambda: any("Initialized topic-based RLMM resources" in line for line in b.output),
                           "initialization")
        assert started
        assert ready_ms > 500, "the start-up must outlast the initialization budget for this test to mean anything"
        text = "".join(b.output)
        # KIP-1197: nothing from the manager before the broker was ready, and no connection complaints.
        assert text.index("Broker is ready for requests, now initializing") > text.index("Broker 1 ready in")
        assert not re.search(r"(?i)connection (refused|to node .* could not be established)|WARNING.*rebootstrap",
                             text), text
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        admin.create_topics([NewTopic("tiered", 1, 1, topic_configs=TOPIC)])
        admin.close()
        p = CKProducer({"bootstrap.servers": b.bootstrap, "batch.size": 1000, "linger.ms": 2})
        for _ in range(200):
            p.produce("tiered", b"x" * 100)
        p.flush(10)
        wait_for(lambda: (s := status(b, "tiered")) and s[0]["ready"] and (s[0]["remote_segments"] or 0) > 2,
                 "tiering to work")
    finally:
        b.kill()


def test_a_metadata_topic_of_another_size_stops_the_broker_with_the_reason(tmp_path):
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    wait_for(lambda: any("Initialized topic-based RLMM resources" in line for line in b.output), "initialization")
    assert b.stop() == 0
    again = BrokerProcess(tmp_path / "logs", settings(
        tmp_path, **{"rlmm.config.remote.log.metadata.topic.num.partitions": "5"})).start()
    assert again.proc.wait(60) != 0  # it started, then stopped: tiering cannot work
    text = "".join(again.output)
    assert "__remote_log_metadata has 3 partitions but remote.log.metadata.topic.num.partitions is 5" in text
    assert "tierlog broker stopped: " in text


def _fill(b: BrokerProcess, topic: str, records: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs=TOPIC)])
    admin.close()
    p = CKProducer({"bootstrap.servers": b.bootstrap, "batch.size": 1000, "linger.ms": 2})
    for i in range(records):
        p.produce(topic, b"%06d" % i + b"m" * 100)
    p.flush(30)
    wait_for(lambda: (s := status(b, topic)) and s[0]["ready"] and s[0]["copy_lag_segments"] == 0
             and s[0]["local_segments"] <= 2, "offload", timeout=120)


def _restart_with_slow_catch_up(tmp_path, records: int) -> tuple[BrokerProcess, dict]:
    """A tiered topic of ``records`` records, then a restart that replays all its metadata (no snapshot),
    deliberately slowed: the manager's consumer takes one event per fetch. Returns the broker and the
    partition's status before the restart."""
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    _fill(b, "history", records)
    before = status(b, "history")[0]
    assert before["remote_segments"] > 100
    port = b.port
    assert b.stop() == 0
    shutil.rmtree(tmp_path / "logs" / "__remote_log_metadata-snapshots")
    return BrokerProcess(tmp_path / "logs", settings(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}",
                                                     **SLOW_CATCH_UP)).start(), before


def test_clients_wait_for_metadata_catch_up_and_local_reads_are_not_delayed(tmp_path):
    records = 4000
    b, before = _restart_with_slow_catch_up(tmp_path, records)
    local_start = before["local_log_start_offset"]
    try:
        results: dict[str, object] = {}

        def read_kafka_python():
            c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
            c.assign([KTopicPartition("history", 0)])
            c.seek_to_beginning()
            got = []
            deadline = time.monotonic() + 90
            while len(got) < records and time.monotonic() < deadline:
                for recs in c.poll(500).values():
                    got += [r.offset for r in recs]
            c.close()
            results["kafka-python"] = got

        def read_confluent():
            c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "kip1007", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
            c.assign([CKTopicPartition("history", 0, 0)])
            got = []
            deadline = time.monotonic() + 90
            while len(got) < records and time.monotonic() < deadline:
                for m in c.consume(500, timeout=0.5):
                    assert m.error() is None, m.error()
                    got.append(m.offset())
            c.close()
            results["confluent-kafka"] = got

        readers = [threading.Thread(target=read_kafka_python), threading.Thread(target=read_confluent)]
        for t in readers:
            t.start()
        # Meanwhile: the remote range answers the retriable REPLICA_NOT_AVAILABLE, a local offset at once.
        client = RawClient(b.bootstrap)
        saw_not_ready = False
        try:
            for _ in range(20):
                if status(b, "history")[0]["ready"]:
                    break
                resp = client.request(ApiKey.FETCH, 12, {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "topics": [{"topic": "history", "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16},
                        {"partition": 0, "fetch_offset": local_start, "partition_max_bytes": 1 << 16}]}]})
                remote, local = resp.responses[0].partitions
                if remote.error_code == 9:
                    saw_not_ready = True
                    t0 = time.monotonic()
                    assert local.error_code == 0 and local.records, "the local read is served in the same fetch"
                    assert time.monotonic() - t0 < 1
                time.sleep(0.05)
        finally:
            client.close()
        assert saw_not_ready, "the metadata catch-up was too fast to observe; slow it down further"
        for t in readers:
            t.join()
        assert results["kafka-python"] == list(range(records))
        assert results["confluent-kafka"] == list(range(records))
    finally:
        b.kill()


def test_tierlogs_client_waits_with_remote_storage_not_ready(tmp_path):
    """tierlog's own consumer meets REPLICA_NOT_AVAILABLE while the metadata loads: it surfaces it as
    RemoteStorageNotReadyError (counted, and raised by a timed lookup that runs out of time) and keeps
    fetching until every record is read."""
    from tierlog.client.errors import RemoteStorageNotReadyError
    from tierlog.client.sync import Consumer
    from tierlog.client.types import TopicPartition
    records = 8000
    b, _ = _restart_with_slow_catch_up(tmp_path, records)
    try:
        c = Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest"})
        tp = TopicPartition("history", 0)
        c.assign([tp])
        got = [r.offset for recs in c.poll(200).values() for r in recs]
        # A timestamp lookup needs remote metadata: while loading it cannot be answered.
        assert not status(b, "history")[0]["ready"], "the catch-up was too fast to observe; slow it down"
        with pytest.raises(RemoteStorageNotReadyError) as e:
            c.offsets_for_times({tp: 1}, timeout_ms=200)
        assert e.value.retriable and e.value.code == 9
        deadline = time.monotonic() + 90
        while len(got) < records and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                got += [r.offset for r in recs]
        assert got == list(range(records))
        assert c.metrics["remote-storage-not-ready-total"] > 0
        assert c.offsets_for_times({tp: 1})[tp].offset == 0  # ready now
        c.close()
    finally:
        b.kill()
