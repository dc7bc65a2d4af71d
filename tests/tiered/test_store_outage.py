"""A remote store that is unavailable, through live ``tierlog broker`` processes: the broker starts
anyway and serves local data, remote reads answer the retriable KAFKA_STORAGE_ERROR naming the store,
copying resumes by itself once the store is back; failed uploads whose clean-up failed too are cleaned
up once it works, and a partition's last_error names the first cause, then clears.

Tests run as root, where removing permissions stops nothing: the broken store is a file where the
folder should be, or the fault-injecting storage manager."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.tiered import call, metrics_url, tier_status, tiered_settings, wait_for
from tests.harness.waiting import TimedOut, wait_until
from tests.tiered.fetchlib import batches, fetch
from tierlog.errors import KafkaStorageError
from tierlog.tiered.rsm.faults import write_control

TIERED = {"remote.storage.enable": "true", "segment.bytes": "4000", "local.retention.bytes": "1",
          "file.delete.delay.ms": "0"}
FAULTS = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"


def create(b: BrokerProcess, topic: str, configs: dict | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def produce(b: BrokerProcess, topic: str, start: int, count: int) -> None:
    p = CKProducer({"bootstrap.servers": b.bootstrap, "batch.size": 1000, "linger.ms": 2, "acks": "all"})
    for i in range(start, start + count):
        p.produce(topic, b"%06d" % i + b"m" * 100)
    assert p.flush(30) == 0


def consume(b: BrokerProcess, topic: str, expected: int, timeout: float = 90) -> list[int]:
    """Record numbers read from offset 0 on with confluent-kafka, which retries errors itself."""
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{topic}-{time.monotonic()}",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, 0, 0)])
    got: list[int] = []

    def read():
        if len(got) < expected:
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    got.append(int(m.value()[:6]))
        return len(got) >= expected

    try:
        with contextlib.suppress(TimedOut):  # the caller judges what arrived
            wait_until(read, timeout, interval=0, what=f"{expected} records")
    finally:
        c.close()
    return got


def partition(b: BrokerProcess, topic: str) -> dict:
    return tier_status(b, topic)["partitions"][0]


def test_a_broker_whose_remote_folder_is_broken_starts_serves_local_data_and_recovers(tmp_path):
    remote = tmp_path / "remote"
    settings = tiered_settings(tmp_path)
    b = BrokerProcess(tmp_path / "logs", settings).start()
    try:
        create(b, "history", TIERED)
        create(b, "plain")
        produce(b, "history", 0, 400)
        before = wait_for(lambda: (p := partition(b, "history"))["ready"] and p["copy_lag_segments"] == 0
                          and p["remote_segments"] >= 3 and p["local_log_start_offset"] > 0 and p, "offload")
        produce(b, "plain", 0, 100)
        port = b.port
        assert b.stop() == 0
    finally:
        b.kill()
    # The store breaks while the broker is down: a file where its folder should be.
    os.rename(remote, tmp_path / "remote.away")
    remote.write_text("not a folder")
    b = BrokerProcess(tmp_path / "logs", {**settings, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}).start()
    try:
        startup = "".join(b.output)
        assert f"Remote storage folder {remote} is unavailable (it is not a folder); the broker starts anyway" \
            in startup
        # Local-only data: written and read as usual.
        produce(b, "plain", 100, 100)
        assert consume(b, "plain", 200) == list(range(200))
        # The tiered topic: its local tail is served, its remote range answers the retriable
        # KAFKA_STORAGE_ERROR, and the broker's log names the store.
        wait_for(lambda: partition(b, "history")["ready"], "metadata")
        client = RawClient(b.bootstrap)
        try:
            remote_part = fetch(client, "history", {0: 0})[0]
            assert remote_part.error_code == KafkaStorageError.code and not remote_part.records
            assert KafkaStorageError.retriable

            def local_tail():
                # Local retention may still drop segments uploaded before the restart (the local log start
                # moves forward, never back), so the tail is read where the local log starts now.
                start = partition(b, "history")["local_log_start_offset"]
                got = fetch(client, "history", {0: start})[0]
                return got.error_code == 0 and (start, got)
            local_start, tail = wait_for(local_tail, "the local tail")
            assert local_start >= before["local_log_start_offset"]
            assert batches(tail.records)[0].base_offset <= local_start
        finally:
            client.close()
        wait_for(lambda: any(f"filesystem remote storage {remote} is unavailable: it is not a folder" in line
                             for line in b.output), "the failed remote read naming the store in the log")
        # A consumer of the whole history started during the outage waits (retrying) and gets it all later.
        results: dict[str, list[int]] = {}
        reader = threading.Thread(target=lambda: results.update(history=consume(b, "history", 600, timeout=120)))
        reader.start()
        # New segments roll: their uploads fail with the store's name, nothing local is deleted.
        produce(b, "history", 400, 200)
        failing = wait_for(lambda: (p := partition(b, "history"))["last_error"] and p, "a failed upload")
        assert f"filesystem remote storage {remote} is unavailable" in failing["last_error"]
        assert failing["last_error"].startswith("copy: ")
        assert failing["highest_offset_in_remote_storage"] == before["highest_offset_in_remote_storage"]
        # Nothing that is not in the remote tier is deleted locally: local retention may still drop what
        # was uploaded before the restart, never more.
        assert local_start <= failing["local_log_start_offset"] <= before["highest_offset_in_remote_storage"] + 1
        assert failing["copy_lag_segments"] > 0
        # The reconciler cannot list the store: a 503 naming the store's error, one line from the command.
        cli = subprocess.run([sys.executable, "-m", "tierlog", "tier", "reconcile", "--url", metrics_url(b)],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert cli.returncode == 1 and cli.stderr.count("\n") == 1, cli.stderr
        assert "answered 503" in cli.stderr and f"filesystem remote storage {remote} is unavailable" in cli.stderr
        assert not any("Traceback" in line for line in b.output)
        assert reader.is_alive(), "the history cannot have been read while the store is down"
        # The store comes back: reads succeed and copying resumes by itself.
        remote.unlink()
        os.rename(tmp_path / "remote.away", remote)
        reader.join(150)
        assert results["history"] == list(range(600))
        healed = wait_for(lambda: (p := partition(b, "history"))["copy_lag_segments"] == 0
                          and p["last_error"] is None and p["local_log_start_offset"] > local_start and p,
                          "copying to resume and the error to clear")
        assert healed["remote_segments"] > before["remote_segments"]
        assert healed["remote_segments_to_clean"] == 0
        assert any(f"Remote storage folder {remote} is available again" in line for line in b.output)
        assert b.stop() == 0
    finally:
        b.kill()
    assert "stopped cleanly" in "".join(b.output)


def test_a_clean_up_that_failed_during_an_outage_is_retried_and_last_error_names_the_cause(tmp_path):
    """Uploads fail (leaving partial objects) and so do the deletes that would clean them up. Retention is
    unlimited, so only the clean-up retry can remove them: once the store works they are deleted, nothing
    is left in the store that no metadata references, and last_error, which named the failed upload (not
    the clean-up failures that followed), clears."""
    control = tmp_path / "faults.json"
    write_control(control, copy="error", copy_partial=True, delete="error")
    b = BrokerProcess(tmp_path / "logs", tiered_settings(tmp_path, **{
        "remote.log.storage.manager.class.name": FAULTS, "rsm.config.fault.delegate": "filesystem",
        "rsm.config.fault.control.file": str(control)})).start()
    try:
        create(b, "outage", {**TIERED, "retention.ms": "-1"})
        produce(b, "outage", 0, 200)
        metrics_before = _metric(b, "kafka_server_brokertopicmetrics_remotedeleteerrors_total", "outage")
        stuck = wait_for(lambda: (p := partition(b, "outage"))["ready"] and (p["remote_segments_to_clean"] or 0) >= 2
                         and p, "failed uploads waiting for clean-up")
        assert stuck["last_error"].startswith("copy: injected error: copy of segment")
        first_ms = stuck["last_error_ms"]
        # The clean-up is retried run after run, and keeps failing meanwhile.
        wait_for(lambda: _metric(b, "kafka_server_brokertopicmetrics_remotedeleteerrors_total", "outage")
                 >= metrics_before + 3, "clean-up retries")
        # The copy starts to work again; deletes still fail: the copy's own error is gone, but the
        # partition still fails (its clean-up), and last_error still names the first cause.
        write_control(control, delete="error")
        wait_for(lambda: partition(b, "outage")["copy_lag_segments"] == 0, "copies to resume")
        still = partition(b, "outage")
        assert still["last_error"].startswith("copy: injected error") and still["last_error_ms"] == first_ms
        assert still["remote_segments_to_clean"] >= 2
        partial = [f for _, _, fs in os.walk(tmp_path / "remote") for f in fs]
        assert partial  # the failed attempts' partial objects are still there
        # What an operator sees: the first cause, since when, and what is still to clean up.
        table = subprocess.run([sys.executable, "-m", "tierlog", "tier", "status", "--url", metrics_url(b)],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).stdout
        assert "copy: injected error" in table and "outage-0: failing since " in table
        assert "failed uploads or deletions whose remote objects are still to delete" in table
        write_control(control)  # deletes work again
        healed = wait_for(lambda: (p := partition(b, "outage"))["remote_segments_to_clean"] == 0
                          and p["last_error"] is None and p, "the clean-up to finish and the error to clear")
        assert healed["last_error_ms"] == -1
        report = call(b, "/v1/tier/reconcile")
        assert report["orphans"] == [] and report["missing"] == []
        assert consume(b, "outage", 200) == list(range(200))
    finally:
        b.kill()


def _metric(b: BrokerProcess, name: str, topic: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(metrics_url(b) + "/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'topic="{topic}"' in line)
