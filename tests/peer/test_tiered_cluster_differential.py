"""Tiered storage across three brokers held against Apache Kafka 4.4: a tierlog cluster (three brokers in
ZooKeeper mode) and a three-node KRaft cluster of Kafka 4.4 (broker and controller in each node, three voters)
tiering through Kafka's LocalTieredStorage into one shared folder, go through the same scenario, driven alike.

The scenario, on an RF=3 tiered topic with 1 MB segments (Kafka's smallest) and ``local.retention.bytes=1``
(each replica keeps only its active segment once the leader tiered the rest), replicas ``[1, 2, 3]``:

(a) Follower catch-up from the remote tier (KIP-405). Records are written and tiered; follower 3 loses its
    replica (SIGKILL, its partition folder deleted, started again). Its fetch from offset 0 lies below the
    leader's local log start, so it is answered OFFSET_MOVED_TO_TIERED_STORAGE and builds its state from the
    remote segment below that start. Compared: it rejoins the ISR; its local log starts at the leader's
    local log start, which is the end + 1 of a remote segment; it holds the producer snapshot at that offset
    and the leader's leader-epoch lineage; it keeps fewer segments than the topic has; every record reads
    back.
(b) ListOffsets EARLIEST_LOCAL (-4) and LATEST_TIERED (-5) asked of the leader, before and after the leader
    is killed (and, after, once the new leader tiered records of its own epoch): -5 is the highest offset in
    the remote tier, -4 is the leader's first local offset and -5 + 1, each answer's leader epoch is the one
    of the batch holding its offset, -2 is 0 and -1 the log end.

The two systems legitimately differ in raw numbers (segment boundaries follow batch sizes, KRaft and
ZooKeeper count leader epochs differently), so each side's observations are reduced to relations (booleans
and small counts) and those are compared; the raw answers are printed. One module fixture starts both
clusters at once (tierlog's on a thread); the tests run in file order and leave every broker running.
"""

from __future__ import annotations

import shutil

import pytest

from tests.harness import apache_kafka, tiered_sides
from tests.harness.rawclient import unique
from tests.harness.threads import start_together
from tests.harness.tiered import tiered_settings
from tests.harness.tiered_sides import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    KafkaSide,
    Side,
    TierlogSide,
    assert_same,
    batch_epoch,
    epoch_lineage,
    list_offsets,
    local_bases,
    local_end,
    on_both,
    read_all,
    value,
    wait_until,
    write,
)
from tests.harness.tierlog_cluster import start_cluster

SEGMENT_BYTES = 1_048_576  # Kafka 4.4's smallest segment.bytes
RECORDS = 7000  # of 1000 bytes: about 7 segments
MORE = 3000  # written after the leader change, so the new leader tiers under its own epoch
TOPIC = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1",
         "min.insync.replicas": "2"}
#: Given to both clusters: the remote log manager's tasks and retention checks every half second (what the
#: single-node Kafka peer uses), a lagging follower out of the ISR within 10 s.
SHARED = {"remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
          "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false"}
RESTART_S = 180


@pytest.fixture(scope="module")
def sides(kafka_jars, tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-cluster-differential")
    settings = tiered_settings(root / "tierlog", **{
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3", **SHARED})
    both = start_together(
        {"tierlog": lambda: start_cluster(root / "tierlog", zookeeper, 3, settings, timeout=RESTART_S),
         "kafka": lambda: apache_kafka.start_kafka_kraft_cluster(root / "kafka", 3, tiered=True, settings=SHARED)},
        {"tierlog": lambda c: c.stop(), "kafka": lambda k: k.stop()})
    pair = {"tierlog": TierlogSide(both["tierlog"], root / "tierlog"), "kafka": KafkaSide(both["kafka"])}
    yield pair
    both["kafka"].stop()
    both["tierlog"].stop()


# ------------------------------------------------------------------------------------------------ helpers


def create(side: Side, topic: str) -> None:
    """Replicas [1, 2, 3] (broker 1 leads on both sides)."""
    tiered_sides.create(side, topic, [1, 2, 3], TOPIC)


def settled(side: Side, leader: int, topic: str, end: int, segments: int) -> dict:
    """Wait until the leader tiered every rolled segment (at least ``segments``) and deleted it locally, so
    it keeps its active segment alone: -5 + 1 == -4 == its first local offset, -1 == ``end``, -5 is the
    remote tier's highest offset; returns the answers and the remote segments."""
    seen: dict = {}

    def check():
        ans = list_offsets(side, leader, topic)
        remote = side.remote_segments(topic)
        bases = local_bases(side, leader, topic)
        seen.update(answers=ans, remote=remote[-3:], local=bases)
        if (all(e == 0 for e, _, _ in ans.values()) and len(remote) >= segments and ans[LATEST][1] == end
                and ans[LATEST_TIERED][1] == remote[-1][1] and ans[EARLIEST_LOCAL][1] == ans[LATEST_TIERED][1] + 1
                and bases == [ans[EARLIEST_LOCAL][1]]):
            return {"answers": ans, "remote": remote}
        return None
    try:
        return wait_until(check, f"{side.name}: {topic} tiered and deleted locally on broker {leader}")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen {seen}") from None


def offsets_relations(side: Side, leader: int, topic: str, state: dict) -> dict:
    """What -2, -1, -4 and -5 of the leader say, as relations that hold on both systems."""
    ans, remote = state["answers"], state["remote"]
    tiered_off, tiered_epoch = ans[LATEST_TIERED][1:]
    local_off, local_epoch = ans[EARLIEST_LOCAL][1:]
    return {
        "earliest is 0": ans[EARLIEST][1] == 0,
        "-5 is the remote tier's highest offset": tiered_off == max(last for _, last in remote),
        "-5's epoch is its batch's": tiered_epoch == batch_epoch(side, leader, topic, tiered_off),
        "-4 is -5 + 1": local_off == tiered_off + 1,
        "-4 is the leader's first local offset": local_bases(side, leader, topic)[0] == local_off,
        "-4 is a remote segment's end + 1": local_off in {last + 1 for _, last in remote},
        "the newest records stay local (-4 < -1)": local_off < ans[LATEST][1],
        "-4's epoch is its batch's": local_epoch == batch_epoch(side, leader, topic, local_off),
        "remote segments contiguous from 0": remote[0][0] == 0 and all(
            b[0] == a[1] + 1 for a, b in zip(remote, remote[1:])),
    }


# -------------------------------------------------------------------------------------------------- tests


TOPICS: dict[str, str] = {}


def test_a_lost_follower_catches_up_from_the_remote_tier_as_on_kafka(sides):
    def scenario(side: Side) -> dict:
        topic = TOPICS[side.name] = unique("tiered-catchup")
        create(side, topic)
        write(side, topic, 0, RECORDS)
        before = settled(side, 1, topic, RECORDS, 4)
        leader_local = before["answers"][EARLIEST_LOCAL][1]
        leader_lineage = epoch_lineage(side, 1, topic)
        # Follower 3 loses its replica.
        side.kill(3)
        shutil.rmtree(side.replica_dir(3, topic), ignore_errors=True)
        side.start(3)
        # A restart quicker than the failure detection may leave the ISR whole throughout: what shows the
        # catch-up is broker 3's own log reaching the log end, then the ISR.
        wait_until(lambda: local_end(side, 3, topic) == RECORDS, f"{side.name}: broker 3 caught up", RESTART_S)
        wait_until(lambda: sorted(side.partition(topic, via=1).isr_nodes) == [1, 2, 3],
                   f"{side.name}: broker 3 back in the ISR", RESTART_S)
        bases = local_bases(side, 3, topic)
        first = bases[0]
        remote = side.remote_segments(topic)
        values = read_all(side, topic, RECORDS)
        seen = {"leader local start": leader_local, "follower first local": first, "follower segments": bases,
                "remote": remote, "lineage": (leader_lineage, epoch_lineage(side, 3, topic))}
        print(f"\n{side.name}: {seen}")
        return {
            "back in the ISR": True,
            "follower starts above 0": first > 0,
            "follower starts at the leader's local log start": first == leader_local,
            "follower starts at a remote segment's end + 1": first in {last + 1 for _, last in remote},
            "follower keeps fewer segments than the topic has": len(bases) < len(remote) + 1,
            "producer snapshot at its start": (side.replica_dir(3, topic) / f"{first:020d}.snapshot").exists(),
            "follower has the leader's epoch lineage": epoch_lineage(side, 3, topic) == leader_lineage,
            "every record reads back in order": values == [value(i) for i in range(RECORDS)],
        }
    assert_same(on_both(scenario, sides))


def test_list_offsets_earliest_local_and_latest_tiered_before_and_after_a_leader_change_as_on_kafka(sides):
    if set(TOPICS) != {"tierlog", "kafka"}:
        pytest.skip("needs the previous test's topics")

    def scenario(side: Side) -> dict:
        topic = TOPICS[side.name]
        out = {}
        state = settled(side, 1, topic, RECORDS, 4)
        out["before"] = offsets_relations(side, 1, topic, state)
        old_epoch = side.partition(topic, via=1).leader_epoch
        side.kill(1)
        new = wait_until(lambda: side.partition(topic, via=2).leader_id in (2, 3) and side.partition(topic, via=2),
                         f"{side.name}: a new leader", RESTART_S)
        leader, new_epoch = new.leader_id, new.leader_epoch
        # The new leader answers about what the old one tiered.
        state = settled(side, leader, topic, RECORDS, 4)
        out["after the change"] = offsets_relations(side, leader, topic, state)
        out["after the change"]["-5's epoch is below the new leader's"] = state["answers"][LATEST_TIERED][2] < new_epoch
        # The new leader tiers records of its own epoch.
        write(side, topic, RECORDS, MORE)
        state = settled(side, leader, topic, RECORDS + MORE, len(state["remote"]) + 2)
        out["after new writes"] = offsets_relations(side, leader, topic, state)
        out["after new writes"]["-5's epoch is the new leader's"] = state["answers"][LATEST_TIERED][2] == new_epoch
        out["new epoch above old"] = new_epoch > old_epoch
        side.start(1)
        wait_until(lambda: sorted(side.partition(topic, via=leader).isr_nodes) == [1, 2, 3],
                   f"{side.name}: broker 1 back in the ISR", RESTART_S)
        values = read_all(side, topic, RECORDS + MORE)
        out["every record reads back in order"] = values == [value(i) for i in range(RECORDS + MORE)]
        print(f"\n{side.name}: leader 1 (epoch {old_epoch}) -> {leader} (epoch {new_epoch}); "
              f"last answers {state['answers']}, remote {state['remote']}")
        return out
    assert_same(on_both(scenario, sides))
