"""Tiered storage across three brokers (KIP-405 with replication): followers delete locally what their leader
tiered; a follower that lost its replica rebuilds its leader epochs and producer state from the remote tier
(OFFSET_MOVED_TO_TIERED_STORAGE) instead of copying history the leader no longer holds, and can then lead and
serve every record; with KIP-1023 an empty follower starts after the last tiered offset; a leader killed while
copying is succeeded by one that resumes where the remote tier ends, with no segment uploaded twice and no gap.

One cluster serves the module (its tests run in file order on one worker), with the topic-based metadata
manager's ``__remote_log_metadata`` replicated three times. Broker 3 has ``follower.fetch.last.tiered.offset.enable``
on; brokers 1 and 2 do not. Each test leaves every broker running.
"""

from __future__ import annotations

import shutil

import pytest

from tests.cli.clilib import as_json, ok, one_error_line, tierlog
from tests.harness.broker import log_lines
from tests.harness.ports import PortReservation
from tests.harness.rawclient import unique
from tests.harness.tiered import (
    assert_read_back_once,
    assert_uploaded_once,
    call,
    metrics_url,
    remote_manifests,
    sample_value,
    scrape,
    tier_status,
    tiered_settings,
)
from tests.harness.tierlog_cluster import create, partition, replica_folder, start_cluster, wait_isr
from tests.harness.writer import BackgroundWriter
from tests.interop.clients import CLIENTS

SEGMENT_BYTES = 6_000
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2",
          "file.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-replication")
    settings = tiered_settings(root, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3",
                                        "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200"})
    # each broker's endpoint on a port its metrics.port names (held for the module, restarts included), so
    # `tierlog tier status` finds every broker's through the cluster
    ports = {i: PortReservation() for i in (1, 2, 3)}
    per_broker = {i: {"metrics.port": str(ports[i].port)} for i in ports}
    per_broker[3]["follower.fetch.last.tiered.offset.enable"] = "true"
    c = start_cluster(root, zookeeper, brokers=3, settings=settings, per_broker=per_broker)
    c.root = root
    yield c
    c.stop()
    for port in ports.values():
        port.close()


def write(cluster, topic: str, count: int, prefix: bytes) -> list[bytes]:
    """``count`` records of about 200 bytes with an idempotent acks=all producer; the values acknowledged."""
    writer = BackgroundWriter(cluster.bootstrap, topic, prefix)
    writer.start()
    cluster.wait_until(lambda: len(writer.acked) >= count, 120, f"{count} records acknowledged")
    writer.stop()
    assert not writer.errors, writer.errors[:3]
    return [v for _, _, v in writer.acked]


def leader_status(cluster, topic: str) -> dict:
    leader = partition(cluster, topic).leader_id
    rows = [p for p in tier_status(cluster.brokers[leader], topic)["partitions"] if p["role"] == "leader"]
    return rows[0] if rows else {}


def wait_tiered(cluster, topic: str, segments: int, cleaned: bool = False) -> dict:
    """Wait until the leader has uploaded at least ``segments`` segments and every rolled one; ``cleaned``:
    and the uploads abandoned by an ended leadership (DELETE_SEGMENT_STARTED) are deleted."""
    seen = {}

    def done():
        st = seen["last"] = leader_status(cluster, topic)
        settled = not cleaned or st.get("remote_segments_to_clean") == 0
        return st if (st.get("remote_segments") or 0) >= segments and st.get("copy_lag_segments") == 0 \
            and settled else None
    try:
        return cluster.wait_until(done, 90, f"{topic} tiered by its leader")
    except AssertionError as e:
        raise AssertionError(f"{e}; the leader's status: {seen.get('last')}") from None


def local_logs(cluster, broker_id: int, topic: str) -> list:
    return sorted(replica_folder(cluster, broker_id, topic).glob("*.log"))


def read_all(cluster, topic: str, count: int, client: str = "confluent-kafka") -> list:
    c = CLIENTS[client](cluster.bootstrap)
    try:
        return c.consume(topic, 0, "earliest", count)
    finally:
        c.close()


def restart_empty(cluster, broker_id: int, topic: str) -> None:
    """Stop the broker, throw its replica of ``topic`` away, start it again. Started while its killed
    process's ZooKeeper session lasts, it waits that out and says so once, not at every retry."""
    broker = cluster.brokers[broker_id]
    broker.kill()
    shutil.rmtree(replica_folder(cluster, broker_id, topic))
    seen = len(broker.output)
    cluster.start([broker_id])
    cluster.wait_formed()
    messages = [m["message"] for m in log_lines(broker.output[seen:], logger="tierlog")]
    waits = [m for m in messages if "still registered by a previous session" in m]
    registered = [m for m in messages if m.startswith(f"Registered broker {broker_id} in ZooKeeper")]
    assert len(registered) == 1 and len(waits) == (1 if "after waiting" in registered[0] else 0), waits


def test_followers_drop_what_the_leader_tiered_and_a_lost_replica_is_rebuilt_from_the_remote_tier(cluster):
    topic = unique("tiered-repl")
    create(cluster, topic, assignment=[[1, 2, 3]], configs={**TIERED, "local.retention.bytes": "1"})
    acked = write(cluster, topic, 6000, b"a-")
    st = wait_tiered(cluster, topic, 4)
    total_logs = st["remote_segments"] + st["local_segments"]
    # The followers learn the leader's uploads from __remote_log_metadata and delete their own copies.
    for follower in (2, 3):
        cluster.wait_until(lambda f=follower: len(local_logs(cluster, f, topic)) <= 3, 60,
                           f"broker {follower} deleting what the leader tiered")
    follower_rows = [p for p in tier_status(cluster.brokers[2], topic)["partitions"] if p["role"] == "follower"]
    assert follower_rows and follower_rows[0]["leader"] == 1
    assert follower_rows[0]["highest_offset_in_remote_storage"] >= st["highest_offset_in_remote_storage"] - 200
    # The same in the metrics: every replica names broker 1 as the one that copies, only broker 1 copies, and
    # each follower's tiering progress is the leader's uploads (up to one task interval behind).
    for b in (1, 2, 3):
        samples = scrape(cluster.brokers[b])
        assert sample_value(samples, "tierlog_remote_copier", topic=topic, partition=0) == 1
        assert sample_value(samples, "tierlog_remote_copying", topic=topic, partition=0) == (b == 1)
        tiered = sample_value(samples, "tierlog_remote_highest_tiered_offset", topic=topic, partition=0)
        assert tiered >= st["highest_offset_in_remote_storage"] - 200, (b, tiered)
        assert sample_value(samples, "tierlog_remote_local_log_start_offset", topic=topic, partition=0) > 0

    # Broker 2 loses its replica: its fetch from offset 0 is answered OFFSET_MOVED_TO_TIERED_STORAGE and it
    # builds its state from the remote segment below the leader's local log start.
    restart_empty(cluster, 2, topic)
    wait_isr(cluster, topic, 3, timeout=90)
    assert "Built the state of follower" in cluster.output(2)
    first = int(local_logs(cluster, 2, topic)[0].stem)
    ends = {m.end_offset + 1 for m in remote_manifests(cluster.root, topic)}
    assert first > 0 and first in ends, (first, sorted(ends)[-3:])
    assert (replica_folder(cluster, 2, topic) / f"{first:020d}.snapshot").exists()  # the producer state
    assert len(local_logs(cluster, 2, topic)) < total_logs

    # Broker 2 leads: brokers 3 and then 1 die, so it is the last of the ISR standing, and it serves every
    # record, the remote tier's through its own metadata manager.
    for victim in (3, 1):
        cluster.brokers[victim].kill()
        cluster.wait_until(lambda v=victim: v not in partition(cluster, topic, via=2).isr_nodes, 60,
                           f"broker {victim} out of the ISR")
    assert partition(cluster, topic, via=2).leader_id == 2
    got = read_all(cluster, topic, len(acked))
    assert_read_back_once(got, acked)
    cluster.start([1, 3])
    cluster.wait_formed()
    wait_isr(cluster, topic, 3, timeout=90)
    more = write(cluster, topic, 200, b"b-")  # idempotent writes go on after the rebuild
    assert_read_back_once(read_all(cluster, topic, len(acked) + len(more), "kafka-python"), acked + more)


def test_an_empty_follower_starts_after_the_last_tiered_offset(cluster):
    """KIP-1023: broker 3 (the setting on) copies only what is not tiered; broker 2 (off) copies the leader's
    whole local log, which local retention keeps larger."""
    topic = unique("last-tiered")
    create(cluster, topic, assignment=[[1, 2, 3]], configs={**TIERED, "local.retention.bytes": "40000"})
    acked = write(cluster, topic, 6000, b"c-")
    st = wait_tiered(cluster, topic, 4)
    leader_local = st["local_bytes"]
    for broker_id in (3, 2):
        restart_empty(cluster, broker_id, topic)
    wait_isr(cluster, topic, 3, timeout=90)
    copied = {b: sum(f.stat().st_size for f in local_logs(cluster, b, topic)) for b in (2, 3)}
    tiered_end = leader_status(cluster, topic)["highest_offset_in_remote_storage"]
    first = int(local_logs(cluster, 3, topic)[0].stem)
    print(f"\nKIP-1023: topic {st['remote_bytes'] + leader_local} bytes, leader local {leader_local}; "
          f"broker 3 (on) fetched {copied[3]}, broker 2 (off) {copied[2]}")
    assert first > int(local_logs(cluster, 2, topic)[0].stem) and first <= tiered_end + 1
    assert copied[3] < copied[2] / 2
    assert "Built the state of follower" in cluster.output(3)
    assert_read_back_once(read_all(cluster, topic, len(acked)), acked)


def test_a_leader_killed_while_copying_is_succeeded_without_a_duplicate_segment_or_a_gap(cluster):
    topic = unique("handover")
    create(cluster, topic, assignment=[[1, 2, 3]], configs={**TIERED, "local.retention.bytes": "1"})
    writer = BackgroundWriter(cluster.bootstrap, topic, b"d-").start()
    try:
        wait_tiered_some = lambda: (leader_status(cluster, topic).get("remote_segments") or 0) >= 2  # noqa: E731
        cluster.wait_until(wait_tiered_some, 90, "broker 1 copying")
        cluster.brokers[1].kill()  # while it copies: the producer keeps writing through the new leader
        cluster.wait_until(lambda: partition(cluster, topic, via=2).leader_id in (2, 3), 60, "a new leader")
        before = len(writer.acked)
        cluster.wait_until(lambda: len(writer.acked) >= before + 1000, 120, "writes through the new leader")
        cluster.start([1])
        cluster.wait_formed()
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:3]
    acked = [v for _, _, v in writer.acked]
    wait_tiered(cluster, topic, 4, cleaned=True)
    # Every object in the bucket belongs to a segment the metadata knows, and the live segments follow one
    # another: nothing uploaded twice, nothing skipped.
    leader = partition(cluster, topic).leader_id
    report = call(cluster.brokers[leader], "/v1/tier/reconcile")
    mine = [o for o in report["orphans"] + report["missing"] if o["topic"] == topic]
    assert mine == [] and not report["not_ready"], report
    manifests = remote_manifests(cluster.root, topic)
    assert_uploaded_once(manifests)
    assert_read_back_once(read_all(cluster, topic, len(acked)), acked)
    print(f"\nleader killed while copying: {len(acked)} acknowledged, all read back once; "
          f"{len(manifests)} remote segments, no gap, none uploaded twice, by brokers "
          f"{sorted({m.broker_id for m in manifests})}")


def test_every_broker_subscribes_to_the_metadata_of_what_it_hosts(cluster):
    """__remote_log_metadata is replicated like any topic, and each broker's manager is ready."""
    md = cluster.metadata(1, ["__remote_log_metadata"]).topics[0]
    assert md.error_code == 0 and all(len(p.replica_nodes) == 3 for p in md.partitions)
    roles = set()
    replicas = set()
    for i in cluster.brokers:
        rows = tier_status(cluster.brokers[i])["partitions"]
        assert rows and all(r["state"] == "ready" for r in rows), rows
        roles |= {r["role"] for r in rows}
        replicas |= {(i, r["topic"], r["partition"]) for r in rows}
    assert roles == {"leader", "follower"}
    # `tierlog tier status` shows the same replicas, every broker's, in one table: the brokers found through
    # the cluster's metadata, their endpoints through their own metrics.port
    merged = as_json("tier", "status", "-b", cluster.bootstrap)
    assert [(x["node_id"], x["url"], x["error"]) for x in merged["brokers"]] == [
        (i, metrics_url(cluster.brokers[i]), None) for i in (1, 2, 3)]
    assert {(r["broker"], r["topic"], r["partition"]) for r in merged["partitions"]} == replicas
    table = ok("tier", "status", "-b", cluster.bootstrap).stdout.splitlines()
    assert [line.split(":")[0] for line in table[:3]] == ["broker 1", "broker 2", "broker 3"]
    assert table[3].split()[:5] == ["TOPIC", "PART", "BROKER", "STATE", "ROLE"]
    one_error_line(tierlog("tier", "status", "-b", cluster.bootstrap, "--topic", "nosuch"),
                   "UNKNOWN_TOPIC_OR_PARTITION", "tierlog topic list")
