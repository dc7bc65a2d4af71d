"""Kafka 4.4's KafkaShareConsumer (tests/harness/java/ShareConsumerPeer.java, mode consume-acked) reads every record
of a topic while the tierlog broker is restarted mid-stream, by SIGTERM and by SIGKILL: no record is lost, a record
the broker confirmed as accepted is never delivered again, and the records acquired but not yet acknowledged at the
restart (their commitSync fails) are delivered again after it. Acquisitions are not persisted (by Kafka 4.4
neither), so those come back with delivery count 1; a count never goes down otherwise.

The same run against Kafka 4.4.0 (a KRaft node of its own, restarted on its ports) takes a second JVM, more than
CI's budget allows: ``TIERLOG_SHARE_RESTART_KAFKA=1 python -m pytest tests/server/test_share_restart.py``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import threading

import pytest

from tests.harness import ROOT
from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module
from tests.harness.broker import BrokerProcess
from tests.harness.java_programs import java_program_command
from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.waiting import wait_until
from tierlog.client.producer import Producer
from tierlog.protocol import ApiKey

SOURCE = ROOT / "tests" / "harness" / "java" / "ShareConsumerPeer.java"
RECORDS = 40
OVERRIDES = {"num.partitions": "1", "offsets.topic.num.partitions": "1",
             "share.coordinator.state.topic.num.partitions": "1", "group.share.record.lock.duration.ms": "3000"}


@pytest.fixture(scope="module")
def restartable(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("share-restart") / "logs", dict(OVERRIDES)).start()
    BrokerProcess.shared.add(b)  # the tests restart it: the stray-broker guard leaves it alone
    try:
        yield b
    finally:
        BrokerProcess.shared.discard(b)
        b.stop()


def read_across_restart(broker, restart) -> list[str]:
    """RECORDS records produced, a share group set to start at the earliest offset, the Java consumer run; once it
    confirmed a quarter of them ``restart()`` runs. Its output lines."""
    topic, group = unique("share-rs"), unique("g")
    create_topic(broker.bootstrap, topic)

    async def produce():
        async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
            for i in range(RECORDS):  # a batch each: Kafka 4.4 hands a whole batch to one poll
                await producer.send_and_wait(topic, f"rec-{i}".encode())

    asyncio.run(produce())
    with raw_client(broker.bootstrap) as raw:
        assert raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 32, "resource_name": group, "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}]}
                           ).responses[0].error_code == 0
    cmd = java_program_command(SOURCE, "ShareConsumerPeer", kafka_peer_module.LATEST_KAFKA_VERSION)
    proc = subprocess.Popen([*cmd, broker.bootstrap, topic, group, "consume-acked", str(RECORDS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: sum(line.startswith("ACKED") for line in lines) >= RECORDS // 4 or proc.poll() is not None,
                   60, what="a quarter of the records confirmed")
        acked_before = sum(line.startswith("ACKED") for line in lines)
        restart()
        proc.wait(120)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert acked_before < RECORDS, "the consumer finished before the restart: nothing was tested"
    assert lines and lines[-1].strip() == "DONE", "".join(lines[-20:]) + stderr[-3000:]
    return [line.strip() for line in lines]


def check(lines: list[str]) -> None:
    delivered: dict[int, list[int]] = {}  # offset -> delivery counts, in order
    acked: set[int] = set()
    for line in lines:
        kind, *rest = line.split()
        if kind == "RECORD":
            offset, count = int(rest[1]), int(rest[2])
            assert offset not in acked, f"offset {offset} delivered again after it was confirmed:\n" + "\n".join(lines)
            delivered.setdefault(offset, []).append(count)
        elif kind == "ACKED":
            acked.add(int(rest[0]))
    assert acked == set(range(RECORDS)), sorted(set(range(RECORDS)) - acked)
    # a record delivered again comes with a higher delivery count
    assert all(counts == sorted(counts) for counts in delivered.values()), delivered


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_kafka_share_consumer_reads_every_record_across_a_restart(restartable, clean):
    check(read_across_restart(restartable, lambda: restartable.restart(clean=clean)))


@pytest.mark.skipif(not os.environ.get("TIERLOG_SHARE_RESTART_KAFKA"), reason="a second Kafka JVM: on demand only")
def test_the_same_restarts_on_kafka_44():
    """Kafka 4.4.0 passes the same checks (measured: SIGKILL gives the same 5 failed acknowledgements and the same
    redeliveries at delivery count 1 as tierlog; after SIGTERM Kafka still answered the acknowledgement in flight)."""
    kp = kafka_peer_module
    port, controller = kp.free_port(), kp.free_port()
    node = kp.KafkaKRaftNode(tempfile.mkdtemp(), 1, port, {1: controller}, kp.random_cluster_id(), overrides={
        **SHARED_SETTINGS, **OVERRIDES, "group.share.min.record.lock.duration.ms": "1000"})
    try:
        node.start()
    except kp.KafkaPeerError as e:
        pytest.skip(f"Kafka cannot run here: {e}")

    class Peer:
        bootstrap = node.bootstrap

    def restart(clean: bool) -> None:
        node.stop() if clean else node.kill()
        node.start()

    try:
        for clean in (True, False):
            check(read_across_restart(Peer, lambda clean=clean: restart(clean)))
    finally:
        node.stop()
