"""Kafka 4.4's KafkaShareConsumer (tests/harness/java/ShareConsumerPeer.java, mode consume-acked) reads every record
of a topic while the tierlog broker is restarted mid-stream, by SIGTERM and by SIGKILL: no record is lost, a record
the broker confirmed as accepted is never delivered again, and the records acquired but not yet acknowledged at the
restart (their commitSync fails) are delivered again after it. Acquisitions are not persisted (by Kafka 4.4
neither), so those come back with delivery count 1; a count never goes down otherwise."""

from __future__ import annotations

import asyncio
import subprocess
import threading

import pytest

from tests.harness import ROOT
from tests.harness.apache_kafka import kafka_peer_module
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
            for i in range(RECORDS):
                await producer.send(topic, f"rec-{i}".encode())
            await producer.flush()

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
