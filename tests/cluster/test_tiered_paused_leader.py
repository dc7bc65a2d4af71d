"""A tiered leader paused (SIGSTOP, not killed) in the middle of an upload, long enough to lose its ZooKeeper
session and its leadership, then woken while that upload completes (KIP-405 with replication).

Broker 1 leads and tiers through the fault-injecting storage manager: its control file holds its next upload
inside the store ("hold"), the broker is paused there, a new leader takes over, keeps taking writes and
uploads past the held segment; then broker 1 wakes with the links to it held (the controller's news cannot
reach it, so it still believes it leads), sees its ZooKeeper session expired, and only then does the store let
its upload finish (issue 40: it used to publish it 64 ms later); the links heal and it learns it follows.
What a user relies on: every acknowledged record reads back exactly once and in order from the earliest offset
(confluent-kafka and kafka-python); the late upload of the ended leadership is abandoned by the old leader, never
published COPY_SEGMENT_FINISHED, and its objects are deleted by the new leader; the reconciler finds nothing
orphaned or missing; no segment id appears twice and the remote segments follow one another without a gap.
"""

from __future__ import annotations

import json

import pytest

from tests.harness.rawclient import unique
from tests.harness.tiered import (
    assert_read_back_once,
    assert_uploaded_once,
    call,
    remote_manifests,
    tier_status,
    tiered_settings,
)
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, create, partition, start_cluster, wait_isr
from tests.harness.writer import BackgroundWriter
from tests.interop.clients import CLIENTS
from tierlog.tiered.rsm.faults import write_control

FAULTY = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "6000", "min.insync.replicas": "2",
          "file.delete.delay.ms": "0", "local.retention.bytes": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-paused-leader")
    control = root / "faults-broker-1.json"
    write_control(control)
    settings = tiered_settings(root, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3",
                                        "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200"})
    c = start_cluster(root, zookeeper, brokers=3, settings=settings, proxies=True, per_broker={1: {
        "remote.log.storage.manager.class.name": FAULTY, "rsm.config.fault.delegate": "filesystem",
        "rsm.config.fault.control.file": str(control)}})
    c.root, c.control = root, control
    yield c
    c.stop()


def rows(cluster, broker_id: int, topic: str) -> list[dict]:
    return tier_status(cluster.brokers[broker_id], topic)["partitions"]


def leader_row(cluster, broker_id: int, topic: str) -> dict:
    return next((r for r in rows(cluster, broker_id, topic) if r["role"] == "leader"), {})


def read_all(cluster, topic: str, count: int, client: str) -> list:
    c = CLIENTS[client](cluster.bootstrap)
    try:
        return c.consume(topic, 0, "earliest", count, timeout=60)
    finally:
        c.close()


def new_leader(cluster, topic: str) -> int | None:
    leader = partition(cluster, topic, via=2).leader_id
    return leader if leader in (2, 3) else None


def held(cluster) -> dict | None:
    """The upload broker 1's store holds now (the fault wrapper's marker), or None."""
    try:
        return json.loads((cluster.control.parent / (cluster.control.name + ".held")).read_text())
    except (OSError, ValueError):
        return None


def test_a_leader_paused_mid_upload_abandons_its_late_upload_and_nothing_is_read_twice(cluster):
    topic = unique("paused-leader")
    create(cluster, topic, assignment=[[1, 2, 3]], configs=TIERED)
    wait_isr(cluster, topic, 3, timeout=60)
    writer = BackgroundWriter(cluster.bootstrap, topic, b"p-").start()
    try:
        cluster.wait_until(lambda: (leader_row(cluster, 1, topic).get("remote_segments") or 0) >= 3, 90,
                           "broker 1 uploading a few segments")
        write_control(cluster.control, copy="hold")
        hold = cluster.wait_until(lambda: held(cluster), 60, "broker 1's next upload held in the store")
        assert leader_row(cluster, 1, topic)["remote_segments_in_progress"] >= 1
        cluster.pause(1)
        try:
            new = cluster.wait_until(lambda: new_leader(cluster, topic), SESSION_TIMEOUT_MS / 1000 * 5,
                                     "a new leader while broker 1 is paused")
            before = len(writer.acked)
            cluster.wait_until(lambda: len(writer.acked) >= before + 1000, 120, "writes through the new leader")
            cluster.wait_until(lambda: (leader_row(cluster, new, topic).get("highest_offset_in_remote_storage")
                                        or -1) > hold["end_offset"], 120,
                               f"broker {new} uploading past the held segment (to {hold['end_offset']})")
            # The controller's news cannot reach broker 1 when it wakes: it still believes it leads.
            cluster.proxies[1].hold()
        finally:
            cluster.resume(1)
        try:
            # Issue 40: the store lets the upload finish once broker 1 knows its session expired, before it
            # hears it no longer leads. It must not publish it, nor upload again in its next session.
            cluster.wait_until(lambda: "ZooKeeper session lost" in cluster.output(1), 90,
                               "broker 1 seeing its session expired")
            assert held(cluster) is not None and leader_row(cluster, 1, topic)
            write_control(cluster.control)
            cluster.wait_until(lambda: held(cluster) is None, 30, "the held upload released")
            cluster.wait_until(lambda: "the ZooKeeper session it led in ended" in cluster.output(1), 30,
                               "broker 1 abandoning the upload of its ended session")
        finally:
            cluster.proxies[1].heal_all()
        cluster.wait_until(lambda: [r["role"] for r in rows(cluster, 1, topic)] == ["follower"], 90,
                           "broker 1 following once the controller's news reaches it")
        cluster.wait_formed()
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:3]
    acked = [v for _, _, v in writer.acked]
    assert_read_back_once(read_all(cluster, topic, len(acked), "confluent-kafka"), acked)

    # Settled: the late upload is gone from the store, nothing is left to clean, the reconciler is clean.
    leader = partition(cluster, topic).leader_id
    assert leader != 1

    seen = {}

    def settled():
        st = leader_row(cluster, leader, topic)
        report = call(cluster.brokers[leader], "/v1/tier/reconcile")
        mine = [o for o in report["orphans"] + report["missing"] if o["topic"] == topic]
        late = [m for m in remote_manifests(cluster.root, topic) if str(m.segment_id) == hold["segment_id"]]
        seen["last"] = (st, mine, report["not_ready"], late)
        return (not mine and not report["not_ready"] and not late and st.get("remote_segments_in_progress") == 0
                and st.get("remote_segments_to_clean") == 0)
    try:
        cluster.wait_until(settled, 120, "the late upload cleaned and the reconciler clean")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: {seen.get('last')}") from None
    assert "Abandoning the upload" in cluster.output(1)
    manifests = remote_manifests(cluster.root, topic)
    assert_uploaded_once(manifests)
    assert {m.broker_id for m in manifests} >= {1, leader}
    assert_read_back_once(read_all(cluster, topic, len(acked), "kafka-python"), acked)
    print(f"\nleader paused mid-upload: {len(acked)} acknowledged, all read back once by two clients; the late "
          f"upload {hold['segment_id']} ({hold['start_offset']}-{hold['end_offset']}) abandoned and deleted; "
          f"{len(manifests)} remote segments, no gap, none uploaded twice")
