"""The topic-based metadata manager inside a live broker: KIP-1197 (initialization starts once the broker
serves, its timeout counted from then; a permanent failure stops the broker) and KIP-1007 (while
metadata is being rebuilt after a restart, remote reads get a retriable error and clients wait, local
reads are not delayed).

The rebuild after a restart is held open by the test itself (tests/tiered/holds.py: the manager reads
no metadata while a file exists) and released when the test has seen what it must see during it; no
outcome depends on how fast the machine replays the metadata."""

from __future__ import annotations

import contextlib
import re
import shutil
import threading

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
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.tiered.holds import held_rlmm_settings
from tierlog.protocol import ApiKey

TOPIC = {"remote.storage.enable": "true", "segment.bytes": "4000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def settings(root, **extra) -> dict:
    return tiered_settings(root, **extra)


def status(b: BrokerProcess, topic: str) -> list[dict]:
    return tier_status(b, topic)["partitions"]


def test_initialization_starts_when_the_broker_serves_and_its_timeout_counts_from_then(tmp_path):
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()  # creates __remote_log_metadata
    wait_for(lambda: any("Initialized topic-based RLMM resources" in line for line in b.output), "initialization")
    port = b.port
    assert b.stop() == 0
    # The manager is configured before the logs load; its configure now returns 4 s late (holds.py), so
    # the start-up after it outlasts an initialization budget of 2 s on any machine.
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}", **{
        **held_rlmm_settings(tmp_path / "no-hold"), "rlmm.config.test.configure.delay.ms": "4000",
        "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms": "2000"})).start()
    try:
        ready_ms = int(re.search(r"Broker 1 ready in (\d+) ms", "".join(b.output)).group(1))
        started = wait_for(lambda: any("Initialized topic-based RLMM resources" in line for line in b.output),
                           "initialization")
        assert started
        assert ready_ms > 4000
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


def _restart_held(tmp_path, records: int) -> tuple[BrokerProcess, dict, object]:
    """A tiered topic of ``records`` records, then a restart that must replay all its metadata (no
    snapshot) and is held before reading any of it. Returns the broker, the partition's status before
    the restart and the hold file: removing it lets the catch-up run."""
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    _fill(b, "history", records)
    before = status(b, "history")[0]
    assert before["remote_segments"] > 10
    port = b.port
    assert b.stop() == 0
    shutil.rmtree(tmp_path / "logs" / "__remote_log_metadata-snapshots")
    hold = tmp_path / "hold-metadata"
    hold.touch()
    held = BrokerProcess(tmp_path / "logs", settings(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}",
                                                     **held_rlmm_settings(hold))).start()
    return held, before, hold


def test_clients_wait_for_metadata_catch_up_and_local_reads_are_not_delayed(tmp_path):
    records = 1500
    b, before, hold = _restart_held(tmp_path, records)
    local_start = before["local_log_start_offset"]
    try:
        results: dict[str, object] = {}

        def read_kafka_python():
            c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
            c.assign([KTopicPartition("history", 0)])
            c.seek_to_beginning()
            got = []

            def read():
                if len(got) < records:
                    for recs in c.poll(500).values():
                        got.extend(r.offset for r in recs)
                return len(got) >= records

            with contextlib.suppress(TimedOut):  # the test compares what arrived
                wait_until(read, 90, interval=0, what=f"{records} records")
            c.close()
            results["kafka-python"] = got

        def read_confluent():
            c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "kip1007", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
            c.assign([CKTopicPartition("history", 0, 0)])
            got = []

            def read():
                if len(got) < records:
                    for m in c.consume(500, timeout=0.5):
                        assert m.error() is None, m.error()
                        got.append(m.offset())
                return len(got) >= records

            with contextlib.suppress(TimedOut):  # the test compares what arrived
                wait_until(read, 90, interval=0, what=f"{records} records")
            c.close()
            results["confluent-kafka"] = got

        readers = [threading.Thread(target=read_kafka_python), threading.Thread(target=read_confluent)]
        for t in readers:
            t.start()
        # Meanwhile: the remote range answers the retriable REPLICA_NOT_AVAILABLE, a local offset at once,
        # in the same fetch; the readers wait.
        client = RawClient(b.bootstrap)
        try:
            # The catch-up is held for as long as the test likes: a local read answered now is not
            # waiting for it (no wall-clock bound needed).
            for _ in range(3):
                assert not status(b, "history")[0]["ready"]
                resp = client.request(ApiKey.FETCH, 12, {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "topics": [{"topic": "history", "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16},
                        {"partition": 0, "fetch_offset": local_start, "partition_max_bytes": 1 << 16}]}]})
                remote, local = resp.responses[0].partitions
                assert remote.error_code == 9 and not remote.records
                assert local.error_code == 0 and local.records, "the local read is served in the same fetch"
        finally:
            client.close()
        assert all(t.is_alive() for t in readers), "nothing below the local log start can be read yet"
        hold.unlink()  # the catch-up runs
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
    records = 1500
    b, _, hold = _restart_held(tmp_path, records)
    try:
        c = Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest"})
        tp = TopicPartition("history", 0)
        c.assign([tp])
        got = []

        def not_ready_met():  # the consumer meets REPLICA_NOT_AVAILABLE and keeps fetching
            if c.metrics["remote-storage-not-ready-total"] > 0:
                return True
            got.extend(r.offset for recs in c.poll(200).values() for r in recs)
            return not_yet(got)

        wait_until(not_ready_met, 60, interval=0, what="remote-storage-not-ready-total past 0 (offsets polled)")
        assert c.metrics["remote-storage-not-ready-total"] > 0 and got == []
        # A timestamp lookup needs remote metadata: while loading it cannot be answered.
        assert not status(b, "history")[0]["ready"]
        with pytest.raises(RemoteStorageNotReadyError) as e:
            c.offsets_for_times({tp: 1}, timeout_ms=200)
        assert e.value.retriable and e.value.code == 9
        hold.unlink()  # the catch-up runs

        def caught_up():
            if len(got) >= records:
                return True
            for recs in c.poll(500).values():
                got.extend(r.offset for r in recs)
            return not_yet(len(got))

        wait_until(caught_up, 90, interval=0, what=f"{records} records (how many arrived)")
        assert got == list(range(records))
        assert c.metrics["remote-storage-not-ready-total"] > 0
        assert c.offsets_for_times({tp: 1})[tp].offset == 0  # ready now
        c.close()
    finally:
        b.kill()
