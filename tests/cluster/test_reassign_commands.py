"""``tierlog reassign`` and ``tierlog leader-election`` against three tierlog brokers in ZooKeeper mode, run as
operators run them (a separate process per command): a plan generated, executed with a throttle and verified
until done (replicas moved, the data on the new replica, the throttles gone), a preferred election giving
leadership back after a broker restart, a reassignment held by a throttle far below the copy's size cancelled
mid-way, the errors that need a cluster to be found (the files' own are tests/cli/test_reassign_files.py's),
and Kafka 3.9's kafka-reassign-partitions reading tierlog's plan and
printing the same current assignment.

One cluster serves the module (its tests run in file order on one worker); each test leaves every broker
running.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.clilib import as_json, ok, one_error_line, tierlog
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tierlog.client.sync import Admin

#: small follower fetches, so a throttle holds a copy near its rate from the first fetch on
FETCH_MAX_BYTES = 65536
RECORD = "x" * 999  # 1000 bytes a line with its newline


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("reassign-cli"), zookeeper, brokers=3, timeout=180, settings={
        "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
        "replica.fetch.max.bytes": str(FETCH_MAX_BYTES), "auto.leader.rebalance.enable": "false"})
    yield c
    c.stop()


def b(cluster) -> list[str]:
    return ["-b", cluster.bootstrap, "--timeout", "30"]


def fill(cluster, topic: str, partitions: int, records: int) -> None:
    """``records`` records of 1000 bytes into each partition, in batches of at most 16 KiB."""
    lines = "".join(f"{i:06d}{RECORD[6:]}\n" for i in range(records))
    for p in range(partitions):
        ok("produce", topic, "-p", str(p), "-X", "batch.size=16384", *b(cluster), input=lines)


def throttles(cluster, topic: str) -> dict:
    """The throttle configs set dynamically: the topic's and each broker's."""
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        found = admin.describe_configs([("topic", topic)] + [("broker", str(i)) for i in cluster.running_ids()])
    return {f"{kind} {n}": {e.name: e.value for e in entries.values()
                            if "replication.throttled" in e.name and e.source.name.startswith("DYNAMIC")}
            for (kind, n), entries in found.items()}


def log_bytes(cluster, broker_id: int, topic: str, p: int) -> int:
    return sum(f.stat().st_size for f in (cluster.brokers[broker_id].log_dir / f"{topic}-{p}").glob("*.log"))


def write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def verify_until_done(cluster, plan: str, timeout: float = 120) -> str:
    """``reassign verify`` until it exits 0 (3 while moving); its output."""
    def done():
        r = tierlog("reassign", "verify", "--reassignment-json-file", plan, *b(cluster))
        assert r.returncode in (0, 3), r.stderr
        return r.stdout if r.returncode == 0 else None
    return cluster.wait_until(done, timeout, "reassign verify reporting every move complete")


def test_generate_execute_throttled_verify_then_a_preferred_election_after_a_restart(cluster, tmp_path):
    topic = "moving"
    create(cluster, topic, assignment=[[1, 2], [1, 2]])  # broker 1's replicas move away below
    fill(cluster, topic, 2, 300)

    topics = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": topic}]})
    saved = tmp_path / "proposed.json"
    out = ok("reassign", "generate", "--topics-to-move-json-file", topics, "--broker-list", "2,3", "--output",
             saved, *b(cluster)).stdout.splitlines()
    assert out[0] == "Current partition replica assignment"
    assert out[1] == ('{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1,2],'
                      '"log_dirs":["any","any"]},{"topic":"moving","partition":1,"replicas":[1,2],'
                      '"log_dirs":["any","any"]}]}')
    assert out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])
    targets = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
    assert sorted(targets) == [0, 1] and all(sorted(r) == [2, 3] for r in targets.values())
    # Kafka's placement: the two partitions start on different brokers
    assert {r[0] for r in targets.values()} == {2, 3}
    assert saved.read_text() == out[4] + "\n"
    plan = str(saved)

    rate = 1_000_000
    out = ok("reassign", "execute", "--reassignment-json-file", plan, "--throttle", str(rate), *b(cluster)).stdout
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert f"The inter-broker throttle limit was set to {rate} B/s on brokers 1,2,3" in out
    assert "Successfully started partition reassignments for moving-0,moving-1" in out
    # Kafka's throttle: the replicas copied from (leader side) and to (follower side), the rate on every broker
    assert throttles(cluster, topic) == {
        f"topic {topic}": {"leader.replication.throttled.replicas": "0:1,0:2,1:1,1:2",
                           "follower.replication.throttled.replicas": "0:3,1:3"},
        **{f"broker {i}": {"leader.replication.throttled.rate": str(rate),
                           "follower.replication.throttled.rate": str(rate)} for i in (1, 2, 3)}}

    done = verify_until_done(cluster, plan)
    assert "Reassignment of partition moving-0 is completed." in done
    assert "Reassignment of partition moving-1 is completed." in done
    assert "Clearing broker-level throttles on brokers 1,2,3" in done
    assert throttles(cluster, topic) == {f"topic {topic}": {}, **{f"broker {i}": {} for i in (1, 2, 3)}}
    [described] = as_json("topic", "describe", topic, *b(cluster))
    assert {p["partition"]: p["replicas"] for p in described["partitions"]} == targets
    assert as_json("reassign", "list", *b(cluster)) == []
    cluster.wait_until(lambda: not (cluster.brokers[1].log_dir / f"{topic}-0").exists(), 60,
                       "broker 1 deleting its moved replica")

    # The new replicas have the data: with broker 2 stopped, broker 3 serves every record alone.
    cluster.brokers[2].stop()
    try:
        for p in (0, 1):
            cluster.wait_until(lambda p=p: partition(cluster, topic, p).leader_id == 3, 60,
                               f"broker 3 leading {topic}-{p}")
            got = ok("consume", topic, "-p", str(p), "--from", "earliest", "-n", "300", "-f", "%o %v\\n",
                     *b(cluster)).stdout.splitlines()
            assert got == [f"{i} {i:06d}{RECORD[6:]}" for i in range(300)]
    finally:
        cluster.start([2])
    cluster.wait_formed()
    for p in (0, 1):
        wait_isr(cluster, topic, 2, p, timeout=60)

    # Broker 3 leads both; the preferred election gives broker 2 back the partition it is first replica of.
    back = next(p for p, r in targets.items() if r[0] == 2)
    stays = 1 - back
    assert [partition(cluster, topic, p).leader_id for p in (0, 1)] == [3, 3]
    election = write(tmp_path, "election.json", {"partitions": [{"topic": topic, "partition": p} for p in (0, 1)]})
    # an unclean election is for partitions without a leader: nothing changes (a preferred one would move `back`)
    out = ok("leader-election", "--election-type", "unclean", "--path-to-json-file", election,
             *b(cluster)).stdout.splitlines()
    assert out == [f"Valid replica already elected for partitions {topic}-0, {topic}-1"]
    assert [partition(cluster, topic, p).leader_id for p in (0, 1)] == [3, 3]
    out = ok("leader-election", "--election-type", "PREFERRED", "--path-to-json-file", election,
             *b(cluster)).stdout.splitlines()
    assert out == [f"Successfully completed leader election (PREFERRED) for partitions {topic}-{back}",
                   f"Valid replica already elected for partitions {topic}-{stays}"]
    assert partition(cluster, topic, back).leader_id == 2
    assert partition(cluster, topic, stays).leader_id == 3
    again = as_json("leader-election", "--election-type", "preferred", "--topic", topic, *b(cluster))
    assert again == {"election_type": "PREFERRED", "elected": [], "failed": [],
                     "not_needed": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]}


def test_a_reassignment_held_by_its_throttle_is_cancelled_midway(cluster, tmp_path):
    topic = "held"
    plan_to = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 3]}]}
    create(cluster, topic, assignment=[[1, 2]])
    fill(cluster, topic, 1, 600)
    size = log_bytes(cluster, 1, topic, 0)
    assert size > 8 * FETCH_MAX_BYTES

    # 1000 B/s against ~600 KB: after its first fetch the copy waits about a minute per fetch, so it is still
    # far from done whatever the machine's speed.
    plan = write(tmp_path, "plan.json", plan_to)
    ok("reassign", "execute", "--reassignment-json-file", plan, "--throttle", "1000", *b(cluster))
    cluster.wait_until(lambda: (cluster.brokers[3].log_dir / f"{topic}-0").exists(), 60,
                       "broker 3 creating its replica")
    assert as_json("reassign", "list", *b(cluster)) == [
        {"topic": topic, "partition": 0, "replicas": [1, 3, 2], "adding": [3], "removing": [2]}]
    table = ok("reassign", "list", *b(cluster)).stdout.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"]
    assert table[1].split() == [topic, "0", "1,3,2", "3", "2"]
    r = tierlog("reassign", "verify", "--reassignment-json-file", plan, *b(cluster))
    assert r.returncode == 3, r
    assert "Reassignment of partition held-0 is still in progress." in r.stdout
    assert "Clearing" not in r.stdout  # the throttles stay while it moves
    assert throttles(cluster, topic)[f"topic {topic}"] == {"leader.replication.throttled.replicas": "0:1,0:2",
                                                           "follower.replication.throttled.replicas": "0:3"}
    # a second plan while this one moves needs --additional
    one_error_line(tierlog("reassign", "execute", "--reassignment-json-file", plan, *b(cluster)),
                   "Cannot execute because there is an existing partition reassignment (held-0)", "--additional")
    assert log_bytes(cluster, 3, topic, 0) < size  # mid-way

    out = ok("reassign", "cancel", "--reassignment-json-file", plan, *b(cluster)).stdout.splitlines()
    assert out == ["Successfully cancelled partition reassignment for: held-0",
                   "Clearing broker-level throttles on brokers 1,2,3", "Clearing topic-level throttles on topics held"]
    [described] = as_json("topic", "describe", topic, *b(cluster))
    assert described["partitions"][0]["replicas"] == [1, 2]
    assert throttles(cluster, topic) == {f"topic {topic}": {}, **{f"broker {i}": {} for i in (1, 2, 3)}}
    cluster.wait_until(lambda: not (cluster.brokers[3].log_dir / f"{topic}-0").exists(), 60,
                       "broker 3 deleting the replica it was copying")
    assert ok("reassign", "cancel", "--reassignment-json-file", plan, "--preserve-throttles",
              *b(cluster)).stdout == "None of the specified partition reassignments are active.\n"
    assert ok("reassign", "list", *b(cluster)).stdout == "No partition reassignments found.\n"


def test_errors_are_one_line_and_non_zero(cluster, tmp_path):
    ok("topic", "create", "errs", "-p", "1", "-r", "2", *b(cluster))
    topics = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "no-such-topic"}]})
    one_error_line(tierlog("reassign", "generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2",
                           *b(cluster)), "no-such-topic", "UNKNOWN_TOPIC_OR_PARTITION")
    good_topics = write(tmp_path, "good.json", {"version": 1, "topics": [{"topic": "errs"}]})
    r = tierlog("reassign", "generate", "--topics-to-move-json-file", good_topics, "--broker-list", "1,9",
                *b(cluster))
    one_error_line(r, "Unknown broker id 9 in --broker-list", "the cluster's brokers are 1, 2, 3")
    assert r.returncode == 2
    one_error_line(tierlog("reassign", "generate", "--topics-to-move-json-file", good_topics, "--broker-list", "3",
                           *b(cluster)), "topic errs has 2 replicas per partition", "name at least 2 brokers")

    unknown = write(tmp_path, "unknown.json", {"version": 1, "partitions": [
        {"topic": "errs", "partition": 0, "replicas": [1, 9]}]})
    one_error_line(tierlog("reassign", "execute", "--reassignment-json-file", unknown, *b(cluster)),
                   "Unknown broker id 9 in the reassignment file")
    missing = write(tmp_path, "missing.json", {"version": 1, "partitions": [
        {"topic": "errs", "partition": 5, "replicas": [1, 2]}]})
    one_error_line(tierlog("reassign", "execute", "--reassignment-json-file", missing, *b(cluster)),
                   "Unable to find partition: errs-5", "UNKNOWN_TOPIC_OR_PARTITION")
    assert as_json("reassign", "list", *b(cluster)) == []  # nothing started

    r = tierlog("leader-election", "--election-type", "preferred", "--topic", "no-such-topic", "--partition", "0",
                *b(cluster))
    one_error_line(r, "1 partition(s) could not be elected (UNKNOWN_TOPIC_OR_PARTITION)")
    assert r.stdout.startswith("Error completing leader election (PREFERRED) for partition: no-such-topic-0: ")
    one_error_line(tierlog("leader-election", "--election-type", "preferred", "--topic", "no-such-topic",
                           *b(cluster)), "UNKNOWN_TOPIC_OR_PARTITION")


def test_kafka_reads_the_plan_and_prints_the_same_current_assignment(cluster, tmp_path, kafka_zk_tool):
    topic = "compared"
    ok("topic", "create", topic, "-p", "3", "-r", "2", *b(cluster))
    topics = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": topic}]})
    ours = ok("reassign", "generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,3",
              *b(cluster)).stdout.splitlines()
    theirs = kafka_zk_tool("ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap, "--generate",
                           "--topics-to-move-json-file", topics, "--broker-list", "1,2,3").stdout.splitlines()
    assert ours[:4] == theirs[:4]  # the current assignment, byte for byte, and the headings
    proposed = json.loads(theirs[4])  # Kafka's proposal is a plan for tierlog's verify
    assert sorted(proposed) == sorted(json.loads(ours[4])) == ["partitions", "version"]
    plan = write(tmp_path, "kafka-plan.json", theirs[4])
    r = tierlog("reassign", "verify", "--reassignment-json-file", plan, "--preserve-throttles", *b(cluster))
    assert r.returncode == 0 and r.stdout.startswith("Status of partition reassignment:\n"), r
    # and Kafka verifies tierlog's plan
    mine = write(tmp_path, "tierlog-plan.json", ours[1])
    out = kafka_zk_tool("ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap, "--verify",
                        "--reassignment-json-file", mine, "--preserve-throttles").stdout
    assert all(f"Reassignment of partition {topic}-{p} is completed." in out for p in range(3))
