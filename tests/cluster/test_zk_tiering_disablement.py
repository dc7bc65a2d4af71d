"""KIP-950 across a cluster: a DISABLING topic is driven to every broker hosting it, waits for a broker that
is down, survives the controller's death (the new controller resumes from ZooKeeper), and ends DISABLED
once each hosting broker deleted its remote data (delete policy), reported once. A partition's remote data is
its leader's to delete: when the leader dies mid-disablement, the broker elected in its place deletes it while
the topic stays DISABLING for the dead broker.

Every broker tiers through the fault-injecting storage manager (filesystem underneath), each with a control
file of its own (``cluster.controls[i]``), all empty but where a test holds a store call."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tests.harness.tiered import tier_status, tiered_settings
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, partition, start_cluster
from tests.interop.clients import CLIENTS
from tierlog.tiered.rsm.faults import write_control

SMALL = {"remote.storage.enable": "true", "segment.bytes": "10000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}
TOPIC = "kip950-cluster"
FAULTY = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-cluster")
    controls = {i: root / f"faults-broker-{i}.json" for i in (1, 2, 3)}
    for control in controls.values():
        write_control(control)
    # __remote_log_metadata on every broker: a partition's new leader must reach the partition's metadata
    # while its old leader is dead (with one replica, that broker may have held it).
    settings = tiered_settings(root, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3"})
    c = start_cluster(root, zookeeper, brokers=3, settings=settings, per_broker={i: {
        "remote.log.storage.manager.class.name": FAULTY, "rsm.config.fault.delegate": "filesystem",
        "rsm.config.fault.control.file": str(control)} for i, control in controls.items()})
    c.root, c.controls = root, controls
    yield c
    c.stop()


def remote_files(cluster, topic: str = TOPIC, partition: int | None = None) -> list:
    """The files of ``topic`` (of one partition) in the store: under ``<topic>-<topic id>/<partition>/``."""
    return sorted(p for p in (cluster.root / "remote").rglob("*") if p.is_file()
                  and p.parent.parent.name.startswith(f"{topic}-")
                  and (partition is None or p.parent.name == str(partition)))


def offloaded(cluster, broker_id: int, partition: int, topic: str = TOPIC) -> bool:
    parts = [p for p in tier_status(cluster.brokers[broker_id], topic)["partitions"]
             if p["partition"] == partition and p["role"] == "leader"]
    # Uploaded, and the local copies deleted by local retention (its own task, which may lag on a loaded
    # machine): only then does a delete disablement move the log start past 0.
    return (bool(parts) and parts[0]["remote_segments"] >= 2 and parts[0]["copy_lag_segments"] == 0
            and parts[0]["local_log_start_offset"] > 0)


def trimmed_as_follower(cluster, broker_id: int, partition: int, topic: str) -> bool:
    """Broker ``broker_id`` follows ``partition`` and has deleted locally what the leader tiered (its follower
    task moved its local log start past 0; it may lag the leader's uploads on a loaded machine)."""
    parts = [p for p in tier_status(cluster.brokers[broker_id], topic)["partitions"]
             if p["partition"] == partition and p["role"] == "follower"]
    return bool(parts) and parts[0]["local_log_start_offset"] > 0


def state(cluster, broker_id: int, topic: str = TOPIC) -> tuple[str, str]:
    t = tier_status(cluster.brokers[broker_id], topic)["topics"][0]
    return t["state"], t["policy"]


def held(cluster, broker_id: int) -> dict | None:
    """The store call broker ``broker_id``'s fault wrapper holds now (its marker file), or None."""
    marker = cluster.controls[broker_id].parent / (cluster.controls[broker_id].name + ".held")
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def test_disablement_waits_for_a_dead_broker_and_survives_controller_failover(cluster):
    boot = cluster.brokers[1].bootstrap
    admin = KafkaAdminClient(bootstrap_servers=boot)
    admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [1], 1: [2], 2: [3]}, topic_configs=SMALL)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=2, batch_size=2048)
    for i in range(900):
        producer.send(TOPIC, b"%06d" % i + b"x" * 200, partition=i % 3)
    producer.flush()
    producer.close()
    for p in range(3):
        cluster.wait_until(lambda p=p: offloaded(cluster, p + 1, p), 60, f"partition {p} offloaded by broker {p + 1}")
    assert remote_files(cluster)

    cluster.brokers[3].kill()  # broker 3 hosts partition 2
    cluster.wait_until(lambda: sorted(b.node_id for b in cluster.metadata(1).brokers) == [1, 2],
                       SESSION_TIMEOUT_MS / 1000 * 3, "broker 3 gone")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={
        "remote.log.disable.policy": "delete", "remote.storage.enable": "false"})])
    admin.close()
    # Brokers 1 and 2 act on it; the topic stays DISABLING while broker 3 cannot answer.
    cluster.wait_until(lambda: state(cluster, 1) == ("DISABLING", "delete"), 30, "DISABLING")
    cluster.wait_until(lambda: not tier_status(cluster.brokers[1], TOPIC)["partitions"]
                       and not tier_status(cluster.brokers[2], TOPIC)["partitions"], 60,
                       "brokers 1 and 2 stopped tiering")
    assert state(cluster, 2) == ("DISABLING", "delete")

    controller = cluster.controller_id()
    cluster.brokers[controller].kill()
    survivor = 2 if controller == 1 else 1
    cluster.wait_until(lambda: cluster.metadata(survivor).controller_id == survivor, SESSION_TIMEOUT_MS / 1000 * 3,
                       f"broker {survivor} the controller")
    assert state(cluster, survivor) == ("DISABLING", "delete")  # reloaded from ZooKeeper, still in progress
    cluster.start([3, controller])
    cluster.wait_formed()
    cluster.wait_until(lambda: all(state(cluster, i) == ("DISABLED", "delete") for i in (1, 2, 3)), 90,
                       "DISABLED on every broker")
    assert remote_files(cluster) == []
    outputs = "".join(cluster.output(i) for i in (1, 2, 3))
    assert outputs.count(f"Tiered storage of topic {TOPIC} is DISABLED") == 1  # completed once, by one controller


def produce(cluster, topic: str, count: int, prefix: bytes) -> dict:
    """``count`` records over partitions 0-2, acks=all; (partition, offset) -> the value acknowledged there."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=2, batch_size=2048, acks="all")
    records = [prefix + b"%06d" % i + b"y" * 200 for i in range(count)]
    sent = [(producer.send(topic, v, partition=i % 3), v) for i, v in enumerate(records)]
    producer.flush()
    values = {}
    for future, value in sent:
        md = future.get(timeout=30)
        values[(md.partition, md.offset)] = value
    producer.close()
    return values


def assert_reads(cluster, topic: str, values: dict, remote_kept: bool = False) -> None:
    """Each partition reads from its earliest offset to its end: every record there once, in order, as
    acknowledged. The earliest offset is 0 where the remote data is kept (``remote_kept``), else the local
    log start (the remote part is gone)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    try:
        for p in range(3):
            tp = TopicPartition(topic, p)
            start, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
            assert end == max(o for q, o in values if q == p) + 1, (p, start, end)
            assert start == 0 if remote_kept else 0 < start < end, (p, start, end)
            reader = CLIENTS["confluent-kafka"](cluster.bootstrap)
            try:
                got = reader.consume(topic, p, "earliest", end - start, timeout=30)
            finally:
                reader.close()
            assert [m.offset for m in got] == list(range(start, end))
            assert all(m.value == values[(p, m.offset)] for m in got)
    finally:
        consumer.close()


def test_a_leader_dead_mid_delete_disablement_is_stood_in_for_by_its_successor(cluster):
    """The leader of partition 0 starts deleting its remote data, its store holds the first delete, and it is
    killed there: it never acknowledges. The broker elected in its place deletes partition 0's remote data
    (the controller keeps asking every hosting broker) while the topic stays DISABLING; the dead broker comes
    back, acknowledges, and the topic is DISABLED once. Consumers read what stays local throughout."""
    topic = "kip950-successor"
    # Broker 1 is the first the controller asks (by id): a dead broker must not keep it from asking the
    # others. When it is the controller too, a new controller resumes the disablement from ZooKeeper.
    victim, a, b = 1, 2, 3
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([NewTopic(topic, replica_assignments={0: [victim, a, b], 1: [a, b, victim], 2: [b, victim, a]},
                                  topic_configs=SMALL)])
    values = produce(cluster, topic, 900, b"")
    leaders = {0: victim, 1: a, 2: b}
    for p, leader in leaders.items():
        cluster.wait_until(lambda p=p, leader=leader: offloaded(cluster, leader, p, topic), 60,
                           f"partition {p} offloaded by broker {leader}")
    # Either follower may succeed the victim: each must already have deleted its local copies of what the
    # victim tiered, or the successor's log would still start at 0 once the remote part is gone.
    for follower in (a, b):
        cluster.wait_until(lambda f=follower: trimmed_as_follower(cluster, f, 0, topic), 60,
                           f"broker {follower}'s copy of partition 0 trimmed to what stays local")
    assert remote_files(cluster, topic, 0)

    write_control(cluster.controls[victim], delete="hold")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
        "remote.log.disable.policy": "delete", "remote.storage.enable": "false"})])
    admin.close()  # its IO thread would go on asking the brokers this test kills
    cluster.wait_until(lambda: held(cluster, victim), 60, f"broker {victim} deleting partition 0's remote data")
    cluster.brokers[victim].kill()  # mid-deletion, before it acknowledged
    write_control(cluster.controls[victim])

    # Partition 0's new leader deletes its remote data; the topic stays DISABLING for the dead broker.
    successor = cluster.wait_until(lambda: {a: a, b: b}.get(partition(cluster, topic, 0, via=a).leader_id),
                                   SESSION_TIMEOUT_MS / 1000 * 3, "a new leader of partition 0")
    try:
        cluster.wait_until(lambda: not remote_files(cluster, topic), 90,
                           f"partition 0's remote data deleted by broker {successor} (1 and 2 by their leaders)")
    except AssertionError:
        for i in (1, 2, 3):
            print(f"--- broker {i}")
            print("".join(line for line in cluster.brokers[i].output if "successor" in line or "isable" in line))
        print(remote_files(cluster, topic))
        raise
    assert state(cluster, a, topic) == ("DISABLING", "delete")
    assert state(cluster, b, topic) == ("DISABLING", "delete")
    assert not remote_files(cluster, topic, 0)
    by_successor = [line for line in cluster.brokers[successor].output
                    if "Deleted " in line and f":{topic}-0" in line and "Deleted 0 " not in line]
    assert by_successor, f"broker {successor} did not delete partition 0's remote data"
    assert_reads(cluster, topic, values)

    cluster.start([victim])
    cluster.wait_formed()
    cluster.wait_until(lambda: all(state(cluster, i, topic) == ("DISABLED", "delete") for i in (1, 2, 3)), 90,
                       "DISABLED on every broker")
    assert remote_files(cluster, topic) == []
    outputs = "".join(cluster.output(i) for i in (1, 2, 3))
    assert outputs.count(f"Tiered storage of topic {topic} is DISABLED") == 1
    assert_reads(cluster, topic, values)


def test_a_leader_dead_during_a_retain_disablement_is_succeeded_by_one_that_serves_and_does_not_copy(cluster):
    """Retain: the broker elected in place of partition 0's dead leader keeps its remote data readable and
    uploads nothing more, while the topic stays DISABLING for the dead broker; DISABLED once it returns."""
    topic = "kip950-retain-successor"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([NewTopic(topic, replica_assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]},
                                  topic_configs=SMALL)])
    values = produce(cluster, topic, 900, b"r")
    for p in range(3):
        cluster.wait_until(lambda p=p: offloaded(cluster, p + 1, p, topic), 60, f"partition {p} offloaded")
    cluster.brokers[1].kill()  # partition 0's leader, dead before the disablement starts
    cluster.wait_until(lambda: {2: 2, 3: 3}.get(partition(cluster, topic, 0, via=2).leader_id),
                       SESSION_TIMEOUT_MS / 1000 * 3, "a new leader of partition 0")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
        "remote.log.disable.policy": "retain", "remote.storage.enable": "false"})])
    admin.close()
    cluster.wait_until(lambda: state(cluster, 2, topic) == ("DISABLING", "retain"), 30, "DISABLING")
    kept = remote_files(cluster, topic, 0)
    values.update(produce(cluster, topic, 900, b"s"))  # rolls new segments, none uploaded
    successor = partition(cluster, topic, 0, via=2).leader_id
    seen = {}

    def successor_row():  # once its metadata is loaded (the metadata partitions broker 1 led move too)
        row = seen["row"] = next(r for r in tier_status(cluster.brokers[successor], topic)["partitions"]
                                 if r["partition"] == 0)
        return row if row["state"] == "ready" else None
    try:
        row = cluster.wait_until(successor_row, 60, f"broker {successor}'s status of partition 0")
    except AssertionError as e:
        raise AssertionError(f"{e}; last row: {seen.get('row')}") from None
    assert row["role"] == "leader" and not row["copy_enabled"] and row["remote_segments"] >= 2, row
    assert remote_files(cluster, topic, 0) == kept
    assert state(cluster, 2, topic) == state(cluster, 3, topic) == ("DISABLING", "retain")
    assert_reads(cluster, topic, values, remote_kept=True)

    cluster.start([1])
    cluster.wait_formed()
    cluster.wait_until(lambda: all(state(cluster, i, topic) == ("DISABLED", "retain") for i in (1, 2, 3)), 90,
                       "DISABLED on every broker")
    assert remote_files(cluster, topic, 0) == kept
    assert_reads(cluster, topic, values, remote_kept=True)
