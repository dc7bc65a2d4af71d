"""A broker whose log dir fills up, for real (issue 16): a tmpfs mounted by the test holds the log dir and a
space-holding file leaves little room. confluent-kafka producers (acks=all, idempotent) must see
KAFKA_STORAGE_ERROR, nothing may be acknowledged after the first failed write, and once the space is back and
the broker restarted every acknowledged record must read back byte for byte; on a tiered topic no torn
segment may reach the remote tier. A clean stop on a full disk must leave an unclean log, never a damaged one.

Mounting needs root: elsewhere these tests skip with the reason, except under ``CI=true`` as root, where they
fail (tests/faults/tmpfs.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.faults.tmpfs import hold_space, mount_tmpfs, unmount
from tests.harness import ROOT
from tests.harness.broker import BrokerProcess, log_lines
from tests.harness.rawclient import RawClient
from tests.harness.tiered import metrics_url, sample_value, scrape, tier_status, tiered_settings, wait_for
from tests.harness.waiting import TimedOut, wait_until
from tierlog.errors import KafkaStorageError
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches, iter_records, verify_crc
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN_FILE

STORAGE_ERROR = KafkaStorageError.code
VALUE_SIZE = 500


class Rig:
    """tmpfs mounts and the brokers using them; brokers are killed before the mounts go."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.mounts: list[Path] = []
        self.brokers: list[BrokerProcess] = []

    def mount(self, size: str) -> Path:
        path = mount_tmpfs(self.tmp / f"tmpfs{len(self.mounts)}", size)
        self.mounts.append(path)
        return path

    def broker(self, log_dir: Path, settings: dict) -> BrokerProcess:
        b = BrokerProcess(log_dir, settings)
        self.brokers.append(b)
        return b.start()

    def close(self) -> None:
        for b in self.brokers:
            b.kill()
        for path in self.mounts:
            unmount(path)


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()


def restart(b: BrokerProcess) -> BrokerProcess:
    """Start a stopped broker again on its log dir (fresh ports, fresh output)."""
    b.overrides["listeners"] = "PLAINTEXT://127.0.0.1:0"
    b.port = None
    b.output = []
    return b.start()


def create_topic(b: BrokerProcess, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


class IdempotentProducer:
    """acks=all, idempotent, one retry (so a refused batch reports the broker's error, not a timeout).
    ``reports`` lists (record index, error code or 0, offset) in delivery order."""

    def __init__(self, b: BrokerProcess, topic: str):
        self.topic = topic
        self.values: list[bytes] = []
        self.reports: list[tuple[int, int, int]] = []
        self.producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "retries": 1, "linger.ms": 5, "batch.size": 64 << 10,
                                  "message.timeout.ms": 120000})

    def send(self, count: int) -> None:
        for _ in range(count):
            i = len(self.values)
            value = b"%08d" % i + os.urandom(VALUE_SIZE - 8)
            self.values.append(value)
            while True:
                try:
                    self.producer.produce(self.topic, value, on_delivery=lambda err, msg, i=i: self.reports.append(
                        (i, err.code() if err else 0, msg.offset())))
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        assert self.producer.flush(120) == 0
        assert len(self.reports) == len(self.values)

    def acknowledged(self) -> list[bytes]:
        """The acknowledged values, after checking that they are exactly the first records produced, at offsets
        0, 1, 2..., that every delivery after the first failure failed, with KAFKA_STORAGE_ERROR."""
        failed = [k for k, r in enumerate(self.reports) if r[1]]
        assert failed, "the disk never filled"
        assert all(r[1] == 0 for r in self.reports[:failed[0]])
        assert {r[1] for r in self.reports[failed[0]:]} == {STORAGE_ERROR}, "acknowledged after a failed write"
        acked = self.reports[:failed[0]]
        assert [i for i, _, _ in acked] == list(range(len(acked)))
        assert [offset for _, _, offset in acked] == list(range(len(acked)))
        return self.values[:len(acked)]


def long_poll_fetch(b: BrokerProcess, topic: str, answers: list) -> threading.Thread:
    """A consumer fetch waiting up to 60 s for more than the disk can hold: the broker must answer it at once
    with KAFKA_STORAGE_ERROR when the log dir goes offline. Appends (elapsed seconds, error code)."""
    client = RawClient(b.bootstrap, timeout=120)

    def run():
        t0 = time.monotonic()
        r = client.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 60000, "min_bytes": 256 << 20, "max_bytes": 256 << 20,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                        "partition_max_bytes": 256 << 20}]}]})
        answers.append((time.monotonic() - t0, r.responses[0].partitions[0].error_code))
        client.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def read_back(b: BrokerProcess, topic: str, count: int) -> tuple[list[tuple[int, bytes]], int]:
    """Every record of partition 0 from the earliest offset, and the high watermark."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"check-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []

    def read():
        if len(got) >= count:
            return True
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value()))
        return False

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        wait_until(read, 120, interval=0, what=f"{count} records")
    assert c.poll(1) is None  # nothing beyond
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.close()
    return got, high


def error_lines(b: BrokerProcess) -> list[str]:
    return [m.string for m in log_lines(b.output, "ERROR")]


def records_in(path: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a .log file, after checking it holds whole batches with valid CRCs."""
    data = path.read_bytes()
    end = 0
    out = []
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)
        end = pos + h.size
        out += [(r.offset, r.value) for r in iter_records(data[pos:end])]
    assert end == len(data), f"{path} ends in {len(data) - end} bytes that are not a whole batch"
    return out


def check_offline_dir_is_reported(b: BrokerProcess, log_dir: Path) -> None:
    errors = error_lines(b)
    assert len(errors) == 1, errors
    assert str(log_dir) in errors[0] and "No space left on device" in errors[0]
    metrics = scrape(b)
    assert sample_value(metrics, "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert sample_value(metrics, "kafka_log_logmanager_logdirectoryoffline", logDirectory=log_dir) == 1
    out = subprocess.run([sys.executable, "-m", "tierlog", "tier", "status", "--url", metrics_url(b)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert f"log dir {log_dir} OFFLINE" in out.stdout and "No space left on device" in out.stdout, out


def test_disk_full_single_partition(rig):
    mnt = rig.mount("16m")
    log_dir = mnt / "logs"
    b = rig.broker(log_dir, {"num.partitions": "1", "metrics.port": "0"})
    create_topic(b, "full")
    holder = hold_space(mnt, leave=2 << 20)
    fetches: list = []
    fetch = long_poll_fetch(b, "full", fetches)
    producer = IdempotentProducer(b, "full")
    producer.send(8000)  # 4 MB into 2 MB
    holder.unlink()  # the space comes back while the broker runs: the dir stays offline until a restart
    producer.send(500)
    acked = producer.acknowledged()
    fetch.join(90)
    assert fetches and fetches[0][1] == STORAGE_ERROR and fetches[0][0] < 60, fetches  # answered, not timed out
    client = RawClient(b.bootstrap)
    latest = client.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "full", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    assert latest.topics[0].partitions[0].error_code == STORAGE_ERROR
    client.close()
    check_offline_dir_is_reported(b, log_dir)
    assert b.stop() == 0
    assert any("log dirs left for recovery" in line for line in b.output)
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    # No partial write was left behind the last acknowledged batch, and nothing unacknowledged was kept.
    segments = sorted((log_dir / "full-0").glob("*.log"))
    assert [v for _, v in (r for seg in segments for r in records_in(seg))] == acked

    restart(b)
    got, high = read_back(b, "full", len(acked))
    assert high == len(acked)
    assert got == list(enumerate(acked))
    print(f"disk full, one partition: {len(producer.reports)} sent, {len(acked)} acknowledged, {len(got)} read back")
    more = IdempotentProducer(b, "full")  # the log dir is back online
    more.send(10)
    assert [r[1:] for r in more.reports] == [(0, len(acked) + k) for k in range(10)]
    assert b.stop() == 0


def test_disk_full_on_a_tiered_topic_uploads_no_torn_segment(rig, tmp_path):
    mnt = rig.mount("24m")
    log_dir = mnt / "logs"
    remote = tmp_path / "remote"  # the remote tier is not on the full disk
    b = rig.broker(log_dir, tiered_settings(tmp_path))
    create_topic(b, "tiered", **{"remote.storage.enable": "true", "segment.bytes": str(256 << 10)})
    producer = IdempotentProducer(b, "tiered")
    producer.send(2000)  # 1 MB: a few rolled segments, uploaded while the disk still has room
    wait_for(lambda: (p := tier_status(b, "tiered")["partitions"]) and (p[0]["remote_segments"] or 0) >= 2,
             "uploads before the disk fills")
    holder = hold_space(mnt, leave=2 << 20)
    producer.send(8000)
    holder.unlink()  # space again: no roll, no upload of the segment the failed write hit
    producer.send(1000)
    acked = producer.acknowledged()
    assert len(acked) > 2000
    check_offline_dir_is_reported(b, log_dir)
    status = tier_status(b, "tiered")
    assert "offline" in status["partitions"][0]["last_error"]
    assert [d["online"] for d in status["log_dirs"]] == [False]
    uploaded = sorted(remote.rglob("*.log"))
    assert uploaded
    for path in uploaded:  # whole batches with valid CRCs, each record an acknowledged one
        for offset, value in records_in(path):
            assert value == acked[offset]
    assert b.stop() == 0

    restart(b)
    # Caught up, and the upload the outage broke cleaned up (its object deleted), so the folder holds only
    # finished copies while it is read below.
    wait_for(lambda: (p := tier_status(b, "tiered")["partitions"]) and p[0]["ready"] and
             p[0]["copy_lag_segments"] == 0 and p[0]["remote_segments"] > len(uploaded) - 1 and
             p[0]["remote_segments_in_progress"] == 0 and p[0]["remote_segments_to_clean"] == 0,
             "copies to catch up and the failed upload to be cleaned up", timeout=120)
    in_remote = {}
    for path in sorted(remote.rglob("*.log")):
        in_remote.update(records_in(path))
    assert in_remote and all(acked[offset] == value for offset, value in in_remote.items())
    got, high = read_back(b, "tiered", len(acked))
    assert high == len(acked)
    assert got == list(enumerate(acked))
    print(f"disk full, tiered: {len(producer.reports)} sent, {len(acked)} acknowledged, {len(in_remote)} in the "
          f"remote tier, {len(got)} read back")
    assert b.stop() == 0


def test_a_clean_stop_on_a_full_disk_leaves_an_unclean_log_that_keeps_everything(rig):
    mnt = rig.mount("16m")
    log_dir = mnt / "logs"
    b = rig.broker(log_dir, {"num.partitions": "1", "metrics.port": "0"})
    create_topic(b, "stop")
    producer = IdempotentProducer(b, "stop")
    producer.send(3000)
    assert {r[1] for r in producer.reports} == {0}
    hold_space(mnt, leave=0)
    assert b.stop() == 0  # the stop completes: files closed, lock released
    errors = error_lines(b)
    assert len(errors) == 1 and str(log_dir) in errors[0] and "No space left on device" in errors[0], errors
    assert any("log dirs left for recovery" in line for line in b.output)
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()

    (mnt / "holder").unlink()
    restart(b)
    assert any(f"from {log_dir} in" in line and "(unclean shutdown)" in line for line in b.output), b.output
    assert not [line for line in b.output if "invalid data" in line]  # nothing was torn
    got, high = read_back(b, "stop", 3000)
    assert high == 3000
    assert got == list(enumerate(producer.values))
    print(f"clean stop on a full disk: {len(producer.values)} acknowledged, {len(got)} read back")
    assert b.stop() == 0
