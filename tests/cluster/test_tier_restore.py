"""`tierlog tier restore`: a tiered topic outlives its cluster. A ZooKeeper-mode cluster tiers a topic whose
records carry keys, headers and timestamps over two leader epochs; the cluster is stopped and its log dirs
and ZooKeeper data (its chroot) are thrown away; a new cluster, under a new chroot and so a new cluster id,
pointed at the same remote folder, gets the topic back with `tierlog tier restore`: the original topic id,
every tiered record at its original offset, timestamp, key, value and headers (read with kafka-python from
earliest), and a new record right after the last restored one. Once the new cluster tiers the topic further
(into its own key folder), the store holds one chain across both folders, and a second restore changes
nothing. The same with the store in an S3 bucket (a SeaweedFS server) instead of a folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.harness import waiting
from tests.harness.tiered import tier_status, tiered_settings
from tests.harness.tierlog_cluster import start_cluster, wait_until
from tests.harness.waiting import not_yet

TOPIC = "restored-orders"
PARTITIONS = 2
SMALL = {"remote.storage.enable": "true", "segment.bytes": "8000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}
RECORDS = 400  # per half: 2 x 400 records of ~200 bytes over 2 partitions, about 10 segments each


def produce(bootstrap: str, start: int, count: int, base_ts: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, batch_size=2048, acks="all")
    for i in range(start, start + count):
        producer.send(TOPIC, key=b"k%05d" % i, value=b"v%05d-" % i + b"x" * 180, partition=i % PARTITIONS,
                      timestamp_ms=base_ts + i, headers=[("n", b"%d" % i), ("parity", b"%d" % (i % 2))])
    producer.flush(60)
    producer.close()


def read_all(bootstrap: str, ends: dict[int, int], timeout: float = 90) -> dict[int, list[tuple]]:
    """Every record of each partition below ``ends[p]``, from earliest, as (offset, timestamp, key, value,
    headers)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=1000)
    tps = [TopicPartition(TOPIC, p) for p in ends]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, list[tuple]] = {p: [] for p in ends}

    def read():
        if not any((got[p][-1][0] + 1 if got[p] else -1) < ends[p] for p in ends):
            return True
        for tp, msgs in consumer.poll(500).items():
            for m in msgs:
                if m.offset < ends[tp.partition]:
                    got[tp.partition].append((m.offset, m.timestamp, m.key, m.value, list(m.headers)))
        last = {p: r[-1][0] if r else None for p, r in got.items()}
        return not_yet(f"records read by then: { {p: len(r) for p, r in got.items()} }, last offsets: {last}")

    try:
        waiting.wait_until(read, timeout, interval=0, what=f"every partition read to its end {ends}")
    finally:
        consumer.close()
    return got


def remote_end(cluster, leader: int, partition: int) -> int:
    """The highest offset the partition's leader has copied to the remote tier (-1: none yet)."""
    parts = [p for p in tier_status(cluster.brokers[leader], TOPIC)["partitions"] if p["partition"] == partition]
    return parts[0]["highest_offset_in_remote_storage"] if parts and parts[0]["highest_offset_in_remote_storage"] \
        is not None else -1


def leaders(cluster) -> dict[int, int]:
    md = cluster.metadata(cluster.running_ids()[0], [TOPIC])
    return {int(p.partition_index): int(p.leader_id) for t in md.topics for p in t.partitions}


def restore_cli(config_file, bootstrap: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tierlog", "tier", "restore", "--broker-config", str(config_file),
                           "-b", bootstrap, "--topic", TOPIC, "--json", "--timeout", "60", *extra],
                          capture_output=True, text=True, timeout=180)


def store_settings(backend: str, tmp_path, request) -> dict:
    """Broker settings tiering to a folder, or to a bucket prefix of the module's SeaweedFS server."""
    settings = tiered_settings(tmp_path)
    if backend == "seaweedfs":
        del settings["rsm.config.dir"]
        settings["remote.log.storage.manager.class.name"] = "objectstore"
        s3 = request.getfixturevalue("seaweedfs_s3").objectstore_configs(f"s3://tiered/{uuid.uuid4().hex}")
        settings.update({f"rsm.config.{k}": v for k, v in s3.items()})
    return settings


@pytest.mark.parametrize("backend", ["filesystem", "seaweedfs"])
def test_a_tiered_topic_is_restored_into_a_new_cluster(tmp_path, zookeeper, backend, request):
    settings = store_settings(backend, tmp_path, request)
    old = start_cluster(tmp_path / "old", zookeeper, brokers=2, settings=settings)
    try:
        admin = KafkaAdminClient(bootstrap_servers=old.bootstrap)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2, topic_configs=SMALL)])
        topic_id = next(t.topic_id for t in old.metadata(1, [TOPIC]).topics)
        admin.close()
        base_ts = int(time.time() * 1000) - 3_600_000  # an hour ago: well inside the default retention
        produce(old.bootstrap, 0, RECORDS, base_ts)
        # A second leader epoch in the data: each partition's leader restarts, its follower takes over.
        for broker_id in sorted(set(leaders(old).values())):
            old.brokers[broker_id].stop()
            old.start([broker_id])
        old.wait_formed()
        produce(old.bootstrap, RECORDS, RECORDS, base_ts)
        per_partition = 2 * RECORDS // PARTITIONS
        # Most of each partition tiered (the active segment never is); uploads may go on until the cluster
        # stops, so what the store holds then (the restore plan) is the reference, at least this much.
        try:
            copied = {p: old.wait_until(lambda p=p: (e := remote_end(old, leaders(old)[p], p)) >= per_partition * 3 // 4
                                        and e, 90, f"partition {p} tiered") for p in range(PARTITIONS)}
        except AssertionError as e:  # say where the uploads stand
            raise AssertionError(f"{e}; tier status: { {i: tier_status(old.brokers[i], TOPIC) for i in old.brokers} }"
                                 ) from None
        before = read_all(old.bootstrap, {p: per_partition for p in range(PARTITIONS)})
        assert all(len(before[p]) == per_partition for p in before)
    finally:
        old.stop()  # SIGKILL: nothing more is uploaded
    shutil.rmtree(tmp_path / "old")  # every log dir; the old chroot is never used again

    new = start_cluster(tmp_path / "new", zookeeper, brokers=2, settings=settings)
    try:
        config = tmp_path / "restore.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        dry = restore_cli(config, new.bootstrap, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        plan = json.loads(dry.stdout)[0]
        assert plan["topic"] == TOPIC and plan["partitions"] == PARTITIONS and "status" not in plan
        tiered_end = {p["partition"]: p["log_end_offset"] for p in plan["restored_partitions"]}
        assert sorted(tiered_end) == list(range(PARTITIONS))
        assert all(copied[p] < tiered_end[p] <= per_partition for p in tiered_end), (copied, tiered_end)
        assert all(p["log_start_offset"] == 0 for p in plan["restored_partitions"])
        assert all(len(p["leader_epochs"]) >= 2 for p in plan["restored_partitions"])
        assert TOPIC not in [t.name for t in new.metadata(1).topics]  # a dry run changes nothing

        # Topic settings are not in the store: the operator gives them again.
        done = restore_cli(config, new.bootstrap, *[a for k, v in SMALL.items() for a in ("--config", f"{k}={v}")])
        assert done.returncode == 0, done.stderr + done.stdout
        result = json.loads(done.stdout)[0]
        assert result["status"] == "restored" and result["positioned"] is True, result
        md = new.metadata(1, [TOPIC]).topics[0]
        assert md.topic_id == topic_id

        # Every tiered record, as it was; the untiered tail (above the remote end) is gone with the old disks.
        after = read_all(new.bootstrap, tiered_end)
        for p in range(PARTITIONS):
            assert after[p] == before[p][:tiered_end[p]], f"partition {p} differs"

        producer = KafkaProducer(bootstrap_servers=new.bootstrap, acks="all")
        meta = producer.send(TOPIC, key=b"new", value=b"after the restore", partition=0).get(timeout=60)
        producer.close()
        assert meta.offset == tiered_end[0]
        consumer = KafkaConsumer(bootstrap_servers=new.bootstrap, enable_auto_commit=False)
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        fresh = wait_until(lambda: [m for ms in consumer.poll(500).values() for m in ms], 30, "the new record")
        consumer.close()
        assert (fresh[0].offset, fresh[0].key, fresh[0].value) == (meta.offset, b"new", b"after the restore")

        # The new cluster tiers the restored topic further, into its own key folder: the store now holds the
        # topic id in two folders, one chain across both; restoring again leaves the topic as it is.
        produce(new.bootstrap, 2 * RECORDS, RECORDS, base_ts)
        new.wait_until(lambda: remote_end(new, leaders(new)[1], 1) >= tiered_end[1] + RECORDS // 4, 90,
                       "partition 1 tiered by the new cluster")
        spanning = json.loads(restore_cli(config, new.bootstrap, "--dry-run").stdout)[0]
        assert len(spanning["source_cluster_ids"]) == 2 and spanning["topic_id"] == plan["topic_id"]
        assert spanning["restored_partitions"][1]["log_start_offset"] == 0
        assert spanning["restored_partitions"][1]["log_end_offset"] > tiered_end[1] + RECORDS // 4
        again = restore_cli(config, new.bootstrap)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)[0]["status"] == "exists"

        # A restart keeps the restored logs where they are: the restore point applies to new logs only.
        new.brokers[leaders(new)[0]].restart()
        new.wait_formed()
        assert read_all(new.bootstrap, {0: tiered_end[0] + 1})[0] == before[0][:tiered_end[0]] + [
            (meta.offset, fresh[0].timestamp, b"new", b"after the restore", [])]
        for i in new.brokers:
            assert " ERROR " not in new.output(i), new.output(i)
    finally:
        new.stop()
