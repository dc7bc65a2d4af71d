"""Kafka's defaults on one node, through live ``tierlog broker`` processes.

A single broker with tiering switched on and no replication-factor setting (Kafka's defaults of 3 for
``__remote_log_metadata`` and ``__consumer_offsets``) tiers a topic and reads it back from the earliest
offset; each internal topic is created with replication factor 1 and one warning naming its setting. A
metadata manager that cannot initialize says why once (a count for the retries), then the broker stops."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess, log_lines
from tests.harness.tiered import wait_for
from tests.harness.waiting import not_yet, wait_until

TIERED = {"remote.storage.enable": "true", "segment.bytes": "4000", "local.retention.bytes": "1",
          "file.delete.delay.ms": "0"}


def single_node(root: Path, **extra: str) -> dict:
    """Tiering on, the filesystem store, tasks and retention checked often; nothing about replication or
    the metadata topic (tests/harness/tiered.py sets its replication factor to 1 and 3 partitions)."""
    return {"remote.log.storage.system.enable": "true", "rsm.config.dir": str(root / "remote"),
            "remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "100", **extra}


def create(b: BrokerProcess, topic: str, configs: dict) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    finally:
        admin.close()


def remote_segments(root: Path, topic: str) -> list[Path]:
    return sorted((root / "remote").glob(f"**/{topic}-*/0/*.log"))


def local_segments(root: Path, topic: str) -> list[Path]:
    return sorted((root / "logs" / f"{topic}-0").glob("*.log"))


def test_a_default_single_node_broker_tiers_and_reads_back_from_earliest(tmp_path):
    b = BrokerProcess(tmp_path / "logs", single_node(tmp_path)).start()
    try:
        create(b, "orders", TIERED)
        p = CKProducer({"bootstrap.servers": b.bootstrap, "batch.size": 1000, "linger.ms": 2, "acks": "all"})
        for i in range(400):
            p.produce("orders", b"%06d" % i + b"m" * 100)
        assert p.flush(30) == 0
        # Segments reach the remote folder and leave the local log (all but the active one).
        wait_for(lambda: len(remote_segments(tmp_path, "orders")) >= 5 and len(local_segments(tmp_path, "orders")) <= 2,
                 "segments to be tiered and deleted locally", timeout=120)
        first_local = int(local_segments(tmp_path, "orders")[0].stem)
        assert first_local > 0, "the earliest records are only in the remote tier"
        # A consumer group (it creates __consumer_offsets) reads everything from the earliest offset.
        c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "readers", "auto.offset.reset": "earliest"})
        c.subscribe(["orders"])
        got: list[int] = []

        def read():
            if len(got) >= 400:
                return True
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(int(m.value()[:6]))
            return not_yet(len(got))

        try:
            wait_until(read, 90, interval=0, what="400 records (how many arrived)")
            c.commit(asynchronous=False)
        finally:
            c.close()
        assert got == list(range(400))
        assert b.stop() == 0
    finally:
        b.kill()
    warnings = [m["message"] for m in log_lines(b.output, "WARNING")]
    for setting, topic in (("rlmm.config.remote.log.metadata.topic.replication.factor", "__remote_log_metadata"),
                           ("offsets.topic.replication.factor", "__consumer_offsets")):
        said = [w for w in warnings if w.startswith(f"{setting}=3 but this is a single-node cluster")]
        assert said == [f"{setting}=3 but this is a single-node cluster; creating {topic} with replication "
                        f"factor 1"], warnings
    text = "".join(b.output)
    assert "INVALID_REPLICATION_FACTOR" not in text and "Traceback" not in text
    assert "stopped cleanly" in text


def test_a_metadata_manager_that_cannot_initialize_says_why_once(tmp_path):
    # A topic whose name collides with __remote_log_metadata ('.' and '_' collide in Kafka's metric
    # names): the metadata topic can never be created.
    b = BrokerProcess(tmp_path / "logs", {}).start()
    try:
        create(b, "__remote.log_metadata", {})
        port = b.port
        assert b.stop() == 0
    finally:
        b.kill()
    b = BrokerProcess(tmp_path / "logs", single_node(tmp_path, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms": "3000"})).start()
    try:
        assert b.proc.wait(60) == 1  # the broker stops: tiering cannot work (Kafka exits too)
    finally:
        b.kill()
    lines = [line.rstrip("\n") for line in b.output]
    why = "INVALID_TOPIC_EXCEPTION (17): Topic '__remote_log_metadata' collides with existing topic: " \
          "__remote.log_metadata"
    tries = [m["message"] for m in log_lines(lines, "WARNING", "tierlog.tiered.rlmm")
             if m["message"].startswith("Cannot initialize the topic-based remote log metadata manager yet")]
    # Tried every 100 ms for 3 s: said once, then at most one line counting the repeats.
    assert 1 <= len(tries) <= 2, tries
    assert why in tries[0] and "retrying every 100 ms for up to 3000 ms" in tries[0], tries
    assert all("repeated" in t for t in tries[1:]), tries
    creates = [m["message"] for m in log_lines(lines, logger="tierlog.server.apis.admin")
               if "__remote_log_metadata" in m["message"]]
    assert 1 <= len(creates) <= 2 and creates[0] == f"CreateTopics: __remote_log_metadata: {why}", creates
    stopped = [line for line in lines if line.startswith("tierlog broker stopped: ")]
    assert len(stopped) == 1 and why in stopped[0], lines
    assert "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms" in stopped[0]
    assert not any("Traceback" in line or "stopped cleanly" in line for line in lines)
