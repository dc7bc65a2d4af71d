"""KIP-950: per-topic tiered storage disablement on a live tierlog broker, driven by Kafka's own
kafka-configs (ConfigCommand from the reference peer) with the seed's exact commands, by kafka-python's
and confluent-kafka's admin clients, and Kafka's DisableRemoteLogOnTopicTest scenario."""

from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.tiered import tier_status, tiered_settings, wait_for
from tests.harness.waiting import TimedOut, wait_until
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches
from tierlog.tiered.rsm.faults import write_control

FAULTY = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"
SMALL = {"remote.storage.enable": "true", "segment.bytes": "10000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def settings(root) -> dict:
    return tiered_settings(root, **{
        "remote.log.storage.manager.class.name": FAULTY, "rsm.config.fault.delegate": "filesystem",
        "rsm.config.fault.control.file": str(root / "faults.json"), "group.initial.rebalance.delay.ms": "0"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("kip950")
    write_control(root / "faults.json")
    b = BrokerProcess(root / "logs", settings(root)).start()
    b.root = root
    yield b
    b.kill()


def status(b, topic: str) -> dict:
    return tier_status(b, topic)


def tiering(b, topic: str) -> tuple[str, str]:
    t = status(b, topic)["topics"][0]
    return t["state"], t["policy"]


def create_and_offload(b, topic: str, count: int = 300, **configs) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={**SMALL, **configs})])
    admin.close()
    produce(b, topic, count)
    return wait_for(lambda: (p := status(b, topic)["partitions"]) and p[0]["copy_lag_segments"] == 0
                    and p[0]["remote_segments"] >= 2 and p[0]["local_segments"] <= 2 and p[0], f"{topic} offloaded")


def produce(b, topic: str, count: int) -> None:
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=2, batch_size=2048)
    for i in range(count):
        p.send(topic, b"%06d" % i + b"x" * 200)
    p.flush()
    p.close()


def remote_objects(b, topic: str) -> list:
    return sorted((b.root / "remote").rglob(f"{topic}-*/*/*"))


def fetch_first(b, topic: str, offset: int):
    client = RawClient(b.bootstrap)
    try:
        r = client.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}]})
        part = r.responses[0].partitions[0]
        batches = [h for _, h in iter_batches(part.records)] if part.records else []
        return part.error_code, batches
    finally:
        client.close()


def consume_all(b, topic: str, expected: int) -> list[int]:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"read-{topic}-{time.monotonic()}",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([CKTopicPartition(topic, 0, 0)])
    offsets = []

    def read():
        if len(offsets) < expected:
            for m in c.consume(500, timeout=1):
                assert m.error() is None, m.error()
                offsets.append(m.offset())
        return len(offsets) >= expected

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        wait_until(read, 30, interval=0, what=f"{expected} records")
    c.close()
    return offsets


# ----------------------------------------------------------------------- the seed's kafka-configs.sh


def test_seed_commands_with_kafkas_config_command(broker, kafka_tool):
    b = broker
    # "Defaults to remote.log.disable.policy=retain"
    create_and_offload(b, "seed-default")
    kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", "seed-default", "--add-config", "remote.storage.enable=false")
    assert wait_for(lambda: tiering(b, "seed-default") == ("DISABLED", "retain"), "retain disablement")
    kept = remote_objects(b, "seed-default")
    assert kept, "retain keeps the remote data"
    assert consume_all(b, "seed-default", 300) == list(range(300)), "and it stays readable"
    produce(b, "seed-default", 200)  # nothing more is uploaded
    time.sleep(1)
    assert [p.name for p in remote_objects(b, "seed-default")] == [p.name for p in kept]

    # "Disable with remote.log.disable.policy=retain"
    create_and_offload(b, "seed-retain")
    kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", "seed-retain", "--add-config",
               "remote.log.disable.policy=retain, remote.storage.enable=false")
    assert wait_for(lambda: tiering(b, "seed-retain") == ("DISABLED", "retain"), "retain disablement")
    assert remote_objects(b, "seed-retain")

    # "Disable with remote.log.disable.policy=delete"
    part = create_and_offload(b, "seed-delete")
    kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", "seed-delete", "--add-config",
               "remote.log.disable.policy=delete, remote.storage.enable=false")
    assert wait_for(lambda: tiering(b, "seed-delete") == ("DISABLED", "delete"), "delete disablement")
    assert remote_objects(b, "seed-delete") == []
    code, _ = fetch_first(b, "seed-delete", 0)
    assert code == 1  # OFFSET_OUT_OF_RANGE below the new log start
    code, batches = fetch_first(b, "seed-delete", part["local_log_start_offset"])
    assert code == 0 and batches[0].base_offset <= part["local_log_start_offset"]
    described = kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--describe", "--entity-type",
                           "topics", "--entity-name", "seed-delete").stdout
    assert "remote.storage.enable=false" in described and "remote.log.disable.policy=delete" in described


def test_unknown_policy_and_disabling_during_disabling_are_refused(broker, kafka_tool):
    b = broker
    create_and_offload(b, "refusals")
    bad = kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                     "--entity-name", "refusals", "--add-config",
                     "remote.log.disable.policy=keep,remote.storage.enable=false", check=False)
    assert bad.returncode != 0 and "remote.log.disable.policy" in bad.stdout + bad.stderr
    write_control(b.root / "faults.json", delete="error")  # the deletion cannot finish: stays DISABLING
    try:
        kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                   "--entity-name", "refusals", "--add-config",
                   "remote.log.disable.policy=delete,remote.storage.enable=false")
        assert wait_for(lambda: tiering(b, "refusals") == ("DISABLING", "delete"), "DISABLING")
        again = kafka_tool("ConfigCommand", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                           "--entity-name", "refusals", "--add-config", "remote.storage.enable=true", check=False)
        assert again.returncode != 0
        assert "disablement of topic refusals is in progress" in again.stdout + again.stderr
        t = wait_for(lambda: (t := status(b, "refusals")["topics"][0])["last_error"] and t, "a retried error")
        assert "injected error" in t["last_error"]
    finally:
        write_control(b.root / "faults.json")
    assert wait_for(lambda: tiering(b, "refusals") == ("DISABLED", "delete"), "the retried disablement")
    assert remote_objects(b, "refusals") == []


# ---------------------------------------------------------------- the same through client admins


def test_kafka_python_and_confluent_admins(broker):
    b = broker
    create_and_offload(b, "via-kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "via-kafka-python",
                                         {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})])
    admin.close()
    assert wait_for(lambda: tiering(b, "via-kafka-python") == ("DISABLED", "delete"), "delete via kafka-python")
    assert remote_objects(b, "via-kafka-python") == []

    create_and_offload(b, "via-confluent")
    ck = CKAdmin({"bootstrap.servers": b.bootstrap})
    res = ConfigResource("topic", "via-confluent", incremental_configs=[
        ConfigEntry("remote.storage.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    for fut in ck.incremental_alter_configs([res]).values():
        fut.result(30)
    assert wait_for(lambda: tiering(b, "via-confluent") == ("DISABLED", "retain"), "retain via confluent")
    res = ConfigResource("topic", "via-confluent", incremental_configs=[
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    for fut in ck.incremental_alter_configs([res]).values():
        fut.result(30)
    assert wait_for(lambda: tiering(b, "via-confluent") == ("ENABLED", "retain"), "re-enabled")
    before = len(remote_objects(b, "via-confluent"))
    produce(b, "via-confluent", 300)
    wait_for(lambda: len(remote_objects(b, "via-confluent")) > before, "uploads to resume")


# ------------------------------------------------------------ Kafka's DisableRemoteLogOnTopicTest


def test_disable_remote_log_on_topic_scenario(broker):
    """Offload, disable copy, read remote, re-enable, delete records, disable with delete, local data
    still readable (Kafka's integration test, with Kafka 3.9's two settings)."""
    b = broker
    topic = "disable-remote-log"
    ck = CKAdmin({"bootstrap.servers": b.bootstrap})

    def alter(**configs):
        res = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        for fut in ck.incremental_alter_configs([res]).values():
            fut.result(30)

    create_and_offload(b, topic, 300)
    alter(remote_log_copy_disable="true", local_retention_bytes="-2")
    assert wait_for(lambda: tiering(b, topic) == ("DISABLED", "retain"), "copy disabled")
    assert consume_all(b, topic, 300) == list(range(300))  # remote data still consumable from 0
    alter(remote_log_copy_disable="false", local_retention_bytes="1")
    assert wait_for(lambda: tiering(b, topic)[0] == "ENABLED", "copy re-enabled")
    produce(b, topic, 300)
    wait_for(lambda: (p := status(b, topic)["partitions"][0])["copy_lag_segments"] == 0
             and p["highest_offset_in_remote_storage"] > 300, "new data offloaded")
    alter(remote_log_copy_disable="true", local_retention_bytes="-2")
    assert wait_for(lambda: tiering(b, topic) == ("DISABLED", "retain"), "copy disabled again")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.delete_records({KTopicPartition(topic, 0): 50})
    admin.close()
    wait_for(lambda: status(b, topic)["partitions"][0]["log_start_offset"] == 50, "log start moved")
    alter(remote_storage_enable="false", remote_log_delete_on_disable="true")
    assert wait_for(lambda: tiering(b, topic) == ("DISABLED", "delete"), "disabled with delete")
    assert remote_objects(b, topic) == []
    local_start = fetch_first(b, topic, 0)
    assert local_start[0] == 1
    offsets = consume_all(b, topic, 1)
    assert offsets and offsets[0] > 50  # what is left is the local data, readable


# ----------------------------------------------------------- readers during a disablement


def test_readers_during_retain_and_delete(broker):
    b = broker
    create_and_offload(b, "readers-retain", 400)
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "readers-retain", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False, "fetch.max.bytes": 4000, "max.partition.fetch.bytes": 4000,
                    "message.max.bytes": 2000})
    c.assign([CKTopicPartition("readers-retain", 0, 0)])
    got = []
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    def read():
        if len(got) >= 400:
            return True
        for m in c.consume(20, timeout=1):
            assert m.error() is None, m.error()  # no error while retain disables tiering under the reader
            got.append(m.offset())
        if len(got) >= 40 and tiering(b, "readers-retain")[0] == "ENABLED":
            admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "readers-retain",
                                                 {**SMALL, "remote.storage.enable": "false"})])
        return False

    with contextlib.suppress(TimedOut):  # asserted below
        wait_until(read, 60, interval=0, what="400 records")
    c.close()
    assert got == list(range(400))

    part = create_and_offload(b, "readers-delete", 400)
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": "readers-delete", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False, "fetch.max.bytes": 4000, "max.partition.fetch.bytes": 4000,
                    "message.max.bytes": 2000})
    c.assign([CKTopicPartition("readers-delete", 0, 0)])
    got = []
    while len(got) < 20:
        got += [m.offset() for m in c.consume(20, timeout=1) if m.error() is None]
    admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "readers-delete",
                                         {**SMALL, "remote.storage.enable": "false",
                                          "remote.log.disable.policy": "delete"})])
    admin.close()
    wait_for(lambda: tiering(b, "readers-delete") == ("DISABLED", "delete"), "delete disablement")
    # librdkafka reads ahead of the application (queued.min.messages): records it fetched from the remote tier
    # before the deletion would be handed over still. The reader goes on from where the application is, which
    # is now below the log start.
    c.seek(CKTopicPartition("readers-delete", 0, got[-1] + 1))

    def read():
        if got and got[-1] >= 399:
            return True
        got.extend(m.offset() for m in c.consume(50, timeout=1) if m.error() is None)
        return False

    with contextlib.suppress(TimedOut):  # asserted below
        wait_until(read, 30, interval=0, what="offset 399")
    c.close()
    # The remote prefix is gone: auto.offset.reset=earliest jumps to the new log start (the local start).
    jump = next(i for i in range(1, len(got)) if got[i] != got[i - 1] + 1)
    assert got[jump] >= part["local_log_start_offset"] and got[-1] == 399
    assert got[:jump] == list(range(jump))
