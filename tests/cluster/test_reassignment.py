"""Partition reassignment (KIP-455) across four tierlog brokers, driven by Apache Kafka 3.9's
kafka-reassign-partitions (--generate, --execute with --throttle, --verify, --list, --cancel) and by raw
AlterPartitionReassignments and ListPartitionReassignments requests: Kafka's errors, a reassignment held in
progress (the new replica's link to its leader cut) listed and cancelled, a replica moved to the fourth
broker under an acks=all idempotent producer without losing an acknowledged record, a throttled copy kept
near its rate, and a reassignment that a new controller finishes after the old one is killed.

One cluster serves the module (its tests run in file order on one worker); the brokers talk through the
harness's link proxies. Each test leaves every broker running and every link healed.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.harness import rawclient
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, start_cluster
from tests.harness.writer import BackgroundWriter
from tests.interop.clients import CLIENTS
from tierlog.protocol import ApiKey

NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_REPLICA_ASSIGNMENT = 39
UNKNOWN_TOPIC_OR_PARTITION = 3
REASSIGNMENT_IN_PROGRESS = 60
FETCH_MAX_BYTES = 65536  # small follower fetches, so a throttle holds the copy to its rate from the start


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("reassignment"), zookeeper, brokers=4, proxies=True, controller=1,
                      timeout=180, settings={"replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
                                             "replica.fetch.max.bytes": str(FETCH_MAX_BYTES)})
    yield c
    c.stop()


# ------------------------------------------------------------------------------------------ helpers


def partition(cluster, name: str, p: int = 0, via: int | None = None):
    t = cluster.metadata(via or cluster.running_ids()[0], [name]).topics[0]
    assert t.error_code == 0, t
    return next(x for x in t.partitions if x.partition_index == p)


def wait_replicas(cluster, name: str, replicas: list[int], isr: int | None = None, timeout: float = 60):
    """Every running broker's Metadata shows ``replicas`` (and an ISR of ``isr`` replicas) for ``name``-0."""
    def check():
        states = [partition(cluster, name, via=i) for i in cluster.running_ids()]
        ok = all(list(s.replica_nodes) == replicas and (isr is None or len(s.isr_nodes) == isr) for s in states)
        return states[0] if ok else None
    return cluster.wait_until(check, timeout, f"replicas {replicas} of {name}-0 everywhere")


def log_dir(cluster, broker_id: int, name: str, p: int = 0):
    return cluster.brokers[broker_id].log_dir / f"{name}-{p}"


def log_bytes(cluster, broker_id: int, name: str, p: int = 0) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(log_dir(cluster, broker_id, name, p).glob("*.log")))


def wait_same_logs(cluster, name: str, brokers: list[int], timeout: float = 60) -> bytes:
    def same():
        logs = [log_bytes(cluster, i, name) for i in brokers]
        return logs[0] if logs[0] and all(x == logs[0] for x in logs) else None
    return cluster.wait_until(same, timeout, f"brokers {brokers} holding the same log of {name}-0")


def wait_log_gone(cluster, broker_id: int, name: str, timeout: float = 60) -> None:
    cluster.wait_until(lambda: not log_dir(cluster, broker_id, name).exists(), timeout,
                       f"the log of {name}-0 deleted on broker {broker_id}")


def plan(name: str, replicas: list[int]) -> dict:
    return {"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": replicas,
                                          "log_dirs": ["any"] * len(replicas)}]}


def reassign_tool(kafka_zk_tool, cluster, tmp_path, action: str, doc: dict | None, *extra: str, check=True):
    """kafka-reassign-partitions ``action`` with ``doc`` as its reassignment JSON file."""
    args = ["--bootstrap-server", cluster.bootstrap, action]
    if doc is not None:
        path = tmp_path / f"plan-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(doc))
        args += ["--reassignment-json-file", str(path)]
    return kafka_zk_tool("ReassignPartitionsCommand", *args, *extra, check=check)


def verify_until_done(kafka_zk_tool, cluster, tmp_path, doc: dict, timeout: float = 120) -> str:
    """--verify until it reports the reassignment completed (it then clears the throttles); its output."""
    def done():
        out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--verify", doc).stdout
        return out if "is completed." in out else None
    return cluster.wait_until(done, timeout, "kafka-reassign-partitions --verify reporting completion")


def alter(via: str, topic: str, p: int, replicas: list[int] | None):
    raw = RawClient(via)
    try:
        resp = raw.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "replicas": replicas}]}]})
    finally:
        raw.close()
    assert resp.error_code == 0, resp
    got = resp.responses[0].partitions[0]
    return got.error_code, got.error_message


def listed(via: str, topics: list[tuple[str, list[int]]] | None = None) -> dict:
    raw = RawClient(via)
    try:
        resp = raw.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": None if topics is None
                           else [{"name": t, "partition_indexes": ps} for t, ps in topics]})
    finally:
        raw.close()
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def not_controller(cluster) -> str:
    controller = cluster.controller_id()
    return cluster.brokers[next(i for i in cluster.running_ids() if i != controller)].bootstrap


def dynamic_configs(kafka_zk_tool, cluster, entity_type: str, name: str) -> str:
    return kafka_zk_tool("ConfigCommand", "--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type",
                         entity_type, "--entity-name", name).stdout


# ------------------------------------------------------------------------------------------ tests


def test_errors_as_kafka_answers_them(cluster):
    name = unique("errors")
    create(cluster, name, assignment=[[1, 2, 3]])
    via = not_controller(cluster)  # forwarded to the controller in an Envelope
    assert alter(via, name, 0, None) == (NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
    code, message = alter(via, name, 0, [1, 2, 9])
    assert code == INVALID_REPLICA_ASSIGNMENT and "not alive" in message
    code, message = alter(via, name, 0, [1, 2, 2])
    assert code == INVALID_REPLICA_ASSIGNMENT and "Duplicate replica ids" in message
    assert alter(via, name, 0, [])[0] == INVALID_REPLICA_ASSIGNMENT
    assert alter(via, name, 5, [1, 2, 3]) == (UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    assert alter(via, unique("missing"), 0, [1, 2, 3])[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert listed(via) == {}
    # The same replicas in another order: done at once, nothing to copy (the preferred leader changes).
    assert alter(via, name, 0, [3, 1, 2]) == (0, None)
    wait_replicas(cluster, name, [3, 1, 2], isr=3)
    assert listed(via, [(name, [0])]) == {}


def test_a_reassignment_held_in_progress_is_listed_and_cancelled(cluster, kafka_zk_tool, tmp_path):
    name = unique("cancel")
    create(cluster, name, assignment=[[2, 1, 3]], configs={"min.insync.replicas": "2"})
    assert cluster.controller_id() == 1  # the leader, 2, is not the controller: broker 4 still reaches that
    assert rawclient.produce(cluster.brokers[2].bootstrap, name, 0, [b"before-%d" % i for i in range(50)],
                             acks=-1).error_code == 0
    cluster.proxies[2].cut(source=4)  # broker 4 cannot fetch from the leader: it never catches up
    try:
        out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--execute", plan(name, [2, 1, 4])).stdout
        assert f"Successfully started partition reassignment for {name}-0" in out
        # Kafka's replica set while moving: the target, then the original replicas it drops.
        state = wait_replicas(cluster, name, [2, 1, 4, 3])
        assert 4 not in state.isr_nodes
        for via in (cluster.brokers[1].bootstrap, not_controller(cluster)):
            assert listed(via)[(name, 0)] == ([2, 1, 4, 3], [4], [3])
            assert listed(via, [(name, [0, 7]), ("no-such-topic", [0])]) == {(name, 0): ([2, 1, 4, 3], [4], [3])}
        out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--list", None).stdout
        assert f"{name}-0: replicas: 2,1,4,3. adding: 4. removing: 3." in out
        cluster.wait_until(lambda: log_dir(cluster, 4, name).exists(), 30, "broker 4 creating its replica")
        # A second reassignment needs --additional; adding partitions to a moving topic waits for it to end.
        refused = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--execute", plan(name, [2, 1, 4]), check=False)
        assert "Cannot execute because there is an existing partition assignment" in refused.stdout
        raw = RawClient(rawclient.controller_address(cluster.bootstrap))
        try:
            more = raw.request(ApiKey.CREATE_PARTITIONS, 3, {
                "topics": [{"name": name, "count": 2, "assignments": None}], "timeout_ms": 10000,
                "validate_only": False})
        finally:
            raw.close()
        assert more.results[0].error_code == REASSIGNMENT_IN_PROGRESS
        out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--cancel", plan(name, [2, 1, 4])).stdout
        assert f"Successfully cancelled partition reassignment for: {name}-0" in out
        wait_replicas(cluster, name, [2, 1, 3], isr=3)
        wait_log_gone(cluster, 4, name)
        assert listed(cluster.brokers[3].bootstrap) == {}
    finally:
        cluster.proxies[2].heal(source=4)
    assert log_dir(cluster, 3, name).exists()
    assert rawclient.produce(cluster.brokers[2].bootstrap, name, 0, [b"after"], acks=-1).error_code == 0


def test_a_replica_moves_to_the_fourth_broker_under_load_without_losing_a_record(cluster, kafka_zk_tool, tmp_path):
    name = unique("move")
    create(cluster, name, assignment=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
    writer = BackgroundWriter(cluster.bootstrap, name, b"m").start()
    acked, errors = writer.acked, writer.errors
    try:
        cluster.wait_until(lambda: len(acked) > 500, 60, "the producer under way")
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": name}]}))
        out = kafka_zk_tool("ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap, "--generate",
                            "--topics-to-move-json-file", str(topics), "--broker-list", "2,3,4").stdout
        proposed = json.loads(out.split("Proposed partition reassignment configuration")[1].strip())
        target = proposed["partitions"][0]["replicas"]
        assert sorted(target) == [2, 3, 4]  # broker 1's replica moves to broker 4
        out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--execute", proposed).stdout
        assert f"Successfully started partition reassignment for {name}-0" in out
        verify_until_done(kafka_zk_tool, cluster, tmp_path, proposed)
        before = len(acked)
        cluster.wait_until(lambda: len(acked) > before + 300, 60, "the producer going on after the move")
    finally:
        writer.stop()
    assert not errors, errors[:5]
    state = wait_replicas(cluster, name, target, isr=3)
    assert state.leader_id in target
    wait_log_gone(cluster, 1, name)
    data = wait_same_logs(cluster, name, [2, 3, 4])  # broker 4's copy is the leader's log, byte for byte
    assert data.count(acked[-1][2]) == 1
    client = CLIENTS["confluent-kafka"](cluster.bootstrap)
    try:
        got = client.consume(name, 0, "earliest", len(acked), timeout=60)
        # every acknowledged record, once, in order
        assert [(m.offset, m.value) for m in got] == sorted((o, v) for _, o, v in acked)
    finally:
        client.close()
    print(f"\nreplica of {name}-0 moved from broker 1 to 4 under load: {len(acked)} records acknowledged, all read "
          "back once")


def test_a_throttled_copy_keeps_to_its_rate_and_verify_removes_the_throttle(cluster, kafka_zk_tool, tmp_path):
    name = unique("throttle")
    create(cluster, name, assignment=[[1, 2]])
    chunk = [bytes([65 + i % 26]) * 1000 for i in range(100)]  # 100 records of 1000 bytes: ~100 KB a batch
    for _ in range(12):
        assert rawclient.produce(cluster.brokers[1].bootstrap, name, 0, chunk, acks=-1).error_code == 0
    size = len(log_bytes(cluster, 1, name))
    rate = 100_000
    doc = plan(name, [1, 3])
    started = time.monotonic()
    out = reassign_tool(kafka_zk_tool, cluster, tmp_path, "--execute", doc, "--throttle", str(rate)).stdout
    assert f"The inter-broker throttle limit was set to {rate} B/s" in out
    configs = dynamic_configs(kafka_zk_tool, cluster, "topics", name)
    assert "leader.replication.throttled.replicas=0:1,0:2" in configs
    assert "follower.replication.throttled.replicas=0:3" in configs
    assert f"leader.replication.throttled.rate={rate}" in dynamic_configs(kafka_zk_tool, cluster, "brokers", "3")
    # Halfway through the time the rate allows, broker 3 is still copying (and never far ahead of the rate).
    cluster.wait_until(lambda: log_dir(cluster, 3, name).exists(), 30, "broker 3 creating its replica")
    midway = size / rate / 2
    cluster.wait_until(lambda: time.monotonic() - started >= midway or None, midway + 5, "half the copy time")
    copied = len(log_bytes(cluster, 3, name))
    elapsed = time.monotonic() - started
    assert copied < size, f"all {size} bytes copied after {elapsed:.1f} s at a throttle of {rate} B/s"
    assert copied <= 2.5 * rate * elapsed + 200_000, (copied, elapsed)  # plus a fetch or two of burst
    out = verify_until_done(kafka_zk_tool, cluster, tmp_path, doc, timeout=size / rate * 4 + 60)
    took = time.monotonic() - started
    assert took >= 0.4 * size / rate, f"{size} bytes copied in {took:.1f} s at a throttle of {rate} B/s"
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in out
    assert "replication.throttled" not in dynamic_configs(kafka_zk_tool, cluster, "topics", name)
    assert "replication.throttled" not in dynamic_configs(kafka_zk_tool, cluster, "brokers", "3")
    wait_replicas(cluster, name, [1, 3], isr=2)
    wait_same_logs(cluster, name, [1, 3])
    wait_log_gone(cluster, 2, name)
    # Without the throttle the same copy back to broker 2 is not held to the rate.
    back = plan(name, [1, 2])
    started = time.monotonic()
    reassign_tool(kafka_zk_tool, cluster, tmp_path, "--execute", back)
    verify_until_done(kafka_zk_tool, cluster, tmp_path, back)
    unthrottled = time.monotonic() - started
    print(f"\n{size} bytes copied in {took:.1f} s at a throttle of {rate} B/s ({size / took:.0f} B/s), "
          f"in {unthrottled:.1f} s without it")


def test_a_new_controller_finishes_a_reassignment_in_progress(cluster, tmp_path):
    controller = cluster.controller_id()
    name = unique("failover")
    others = [i for i in (1, 2, 3) if i != controller]
    create(cluster, name, assignment=[[others[0], others[1], controller]], configs={"min.insync.replicas": "2"})
    leader = partition(cluster, name).leader_id
    assert leader == others[0]
    assert rawclient.produce(cluster.brokers[leader].bootstrap, name, 0, [b"r%d" % i for i in range(100)],
                             acks=-1).error_code == 0
    target = [others[0], others[1], 4]
    cluster.proxies[leader].cut(source=4)  # held in progress until the link heals
    try:
        assert alter(cluster.brokers[controller].bootstrap, name, 0, target) == (0, None)
        wait_replicas(cluster, name, [*target, controller])
        cluster.brokers[controller].kill()  # the controller, and the replica being removed
        survivor = cluster.brokers[others[0]].bootstrap
        new = cluster.wait_until(lambda: (c := rawclient.metadata(survivor, []).controller_id) not in (-1, controller)
                                 and c, 60, "a new controller")
        # The new controller read the reassignment from ZooKeeper.
        assert listed(cluster.brokers[new].bootstrap)[(name, 0)] == ([*target, controller], [4], [controller])
    finally:
        cluster.proxies[leader].heal(source=4)
    wait_replicas(cluster, name, target, isr=3, timeout=90)
    assert listed(cluster.brokers[new].bootstrap) == {}
    wait_same_logs(cluster, name, target)
    assert f"Resuming 1 partition reassignment(s): {name}-0" in cluster.output(new)
    cluster.start([controller])  # it comes back without the replica: its log goes
    cluster.wait_formed()
    wait_log_gone(cluster, controller, name)
    assert re.search(r"Deleting log " + re.escape(name), cluster.output(controller))
