"""kill -9 at random moments while records are produced and segments copied, and while a delete
disablement runs: after every restart no acknowledged record is lost, no offset is served by two
remote segments, and once copies settle the reconciler finds no orphaned object."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import call, tiered_settings, wait_for
from tests.harness.waiting import TimedOut, wait_until
from tierlog.tiered.rsm.faults import write_control

FAULTY = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"
TOPIC = {"remote.storage.enable": "true", "segment.bytes": "8000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def settings(root) -> dict:
    return tiered_settings(
        root, **{"remote.log.storage.manager.class.name": FAULTY, "rsm.config.fault.delegate": "filesystem",
                 "rsm.config.fault.control.file": str(root / "faults.json"),
                 "rlmm.config.remote.log.metadata.snapshot.interval.ms": "300",
                 "remote.log.manager.task.interval.ms": "50"})


def read_all(b: BrokerProcess, topic: str, end: int, start: int = 0) -> dict[int, bytes]:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"check-{time.monotonic()}",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([CKTopicPartition(topic, 0, start)])
    got: dict[int, bytes] = {}

    def read():
        if len(got) < end - start:
            for m in c.consume(1000, timeout=1):
                assert m.error() is None, m.error()
                assert m.offset() not in got, f"offset {m.offset()} delivered twice"
                got[m.offset()] = m.value()
        return len(got) >= end - start

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        wait_until(read, 60, interval=0, what=f"offsets {start} to {end}")
    c.close()
    return got


def settle_and_reconcile(b: BrokerProcess, topic: str) -> dict:
    wait_for(lambda: (p := call(b, f"/v1/tier/status?topic={topic}")["partitions"]) and p[0]["ready"]
             and p[0]["copy_lag_segments"] == 0 and p[0]["remote_segments_in_progress"] == 0, "copies to settle")
    return call(b, "/v1/tier/reconcile")


#: Kill rounds of test_kill_9_during_produce_and_copy: 8 in the suite (about a minute); a long run sets more, e.g.
#: ``TIERLOG_CRASH_ROUNDS=60 python -m pytest tests/tiered/test_crashes.py -k produce_and_copy`` (docs/operations.md).
ROUNDS = int(os.environ.get("TIERLOG_CRASH_ROUNDS", "8"))


def test_kill_9_during_produce_and_copy(tmp_path):
    rnd = random.Random(20261123)
    write_control(tmp_path / "faults.json", latency_ms=15)  # a slower store widens the upload windows
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("crash", 1, 1, topic_configs=TOPIC)])
    admin.close()
    port = b.port
    acked: dict[int, bytes] = {}
    checked = 0
    for round_ in range(ROUNDS):
        stop, first_ack = threading.Event(), threading.Event()

        def produce(bootstrap=b.bootstrap, round_=round_, stop=stop, first_ack=first_ack):
            p = CKProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                            "batch.size": 4000, "message.timeout.ms": 3000, "log_level": 0})

            def done(err, msg):
                if err is None:
                    acked[msg.offset()] = msg.value()
                    first_ack.set()
            i = 0
            while not stop.is_set():
                p.produce("crash", b"r%02d-%06d-" % (round_, i) + b"z" * 150, on_delivery=done)
                i += 1
                p.poll(0.001 if i % 50 else 0.01)
            p.flush(5)
        t = threading.Thread(target=produce)
        t.start()
        # The kill lands a random while after this round's first acknowledgement (not after a fixed
        # delay, which on a slow machine could end every round before anything was acknowledged).
        assert first_ack.wait(120), f"round {round_}: nothing acknowledged in 120 s"
        time.sleep(rnd.uniform(0.1, 1.2))
        b.kill()
        stop.set()
        t.join()
        b = BrokerProcess(tmp_path / "logs", {**settings(tmp_path), "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        b.start()
        # Each round checks what was acknowledged since the last check (remote and local alike); the
        # end checks everything once more.
        end = max(acked) + 1 if acked else 0
        got = read_all(b, "crash", end, checked)
        lost = [o for o, v in acked.items() if o >= checked and got.get(o) != v]
        assert not lost, f"round {round_}: acknowledged records lost or changed at offsets {lost[:10]}"
        checked = end
    got = read_all(b, "crash", max(acked) + 1)
    assert not [o for o, v in acked.items() if got.get(o) != v]
    print(f"kill -9 during produce and copy: {ROUNDS} kills, {len(acked)} acknowledged, "
          f"{sum(got.get(o) == v for o, v in acked.items())} read back")
    report = settle_and_reconcile(b, "crash")
    assert report["orphans"] == [] and report["missing"] == [], report
    # No offset is covered by two remote segments: the start offsets of the stored segments are unique.
    starts = sorted(int(p.name[:20]) for p in (tmp_path / "remote").rglob("crash-*/0/*.log"))
    assert len(starts) == len(set(starts))
    b.stop()


@pytest.mark.parametrize("kill_after", [0.2, 0.6, 1.2])
def test_kill_9_during_a_delete_disablement(tmp_path, kill_after):
    write_control(tmp_path / "faults.json")
    b = BrokerProcess(tmp_path / "logs", settings(tmp_path)).start()
    port = b.port
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("doomed", 1, 1, topic_configs=TOPIC)])
    p = CKProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 2000})
    for i in range(3000):
        p.produce("doomed", b"%06d" % i + b"q" * 150)
    p.flush(30)
    wait_for(lambda: (s := call(b, "/v1/tier/status?topic=doomed")["partitions"]) and s[0]["ready"]
             and s[0]["copy_lag_segments"] == 0 and s[0]["remote_segments"] > 20, "offload")
    write_control(tmp_path / "faults.json", latency_ms=40)  # deletes take a while: kill mid-way
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "doomed", {
        **TOPIC, "remote.storage.enable": "false", "remote.log.disable.policy": "delete"})])
    admin.close()
    time.sleep(kill_after)
    b.kill()
    write_control(tmp_path / "faults.json")
    b = BrokerProcess(tmp_path / "logs", {**settings(tmp_path), "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    b.start()
    topic = wait_for(lambda: (t := call(b, "/v1/tier/status?topic=doomed")["topics"][0])["state"] == "DISABLED" and t,
                     "the disablement to resume and complete")
    assert topic["policy"] == "delete"
    assert not list((tmp_path / "remote").rglob("doomed-*/0/*"))
    report = call(b, "/v1/tier/reconcile")
    assert report["orphans"] == [] and report["missing"] == []
    b.stop()
