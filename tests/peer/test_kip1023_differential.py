"""KIP-1023 (``follower.fetch.last.tiered.offset.enable``) held against Apache Kafka 4.4 (4.3 was its first
release): a tierlog cluster (three brokers in ZooKeeper mode) and a three-node KRaft cluster of Kafka 4.4
tiering through Kafka's LocalTieredStorage into one shared folder, broker 3 of each with the setting on, the
others off, go through the same scenario, driven alike.

Three tiered topics of one partition with 1 MB segments (Kafka's smallest) are written and tiered on two
brokers, then a third replica is added by reassignment (AlterPartitionReassignments) and joins the ISR:

- ``on``: [1, 2] with ``local.retention.bytes`` of 2 MB (the leader keeps a local tail of a few segments);
  broker 3 (setting on) is added, first in the new order. Kafka's follower, answered
  OFFSET_MOVED_TO_TIERED_STORAGE for its fetch at 0, asks the leader's earliest pending upload offset
  (ListOffsets -6) and builds its leader epochs and producer state from the remote segment just below it, so
  its local log starts at the leader's last tiered offset + 1, above the leader's local log start, and it copies
  only what is not tiered. Compared: that start, the share of the topic's bytes it holds (printed on each side),
  its leader-epoch checkpoint (the leader's lineage) and the producer snapshot at its start, then, once broker 3
  is elected leader (preferred), every record read back from the earliest through it (the remote tier below
  its local start).
- ``off``: [1, 3], the same retention; broker 2 (setting off) is added. KIP-405's path: its log starts at the
  leader's local log start, and it copies more than broker 3 did on ``on``.
- ``local``: [1, 2], no local retention (the leader holds its whole log locally, tiered or not); broker 3 is
  added. Kafka (4.3 and 4.4) decides on KIP-1023 only where the fetch at 0 is refused, so the leader answers it and
  broker 3 copies the whole log from 0.

Raw offsets and sizes differ between the systems (segments roll where batches fall), so each side's
observations are reduced to relations and those are compared (tests/harness/tiered_sides.py); the raw numbers
are printed. One module fixture starts both clusters at once.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import apache_kafka
from tests.harness.rawclient import unique
from tests.harness.threads import in_parallel, start_together
from tests.harness.tiered import tiered_settings
from tests.harness.tiered_sides import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    KafkaSide,
    Side,
    TierlogSide,
    assert_same,
    create,
    epoch_lineage,
    list_offsets,
    local_bases,
    local_bytes,
    local_end,
    on_both,
    read_all,
    to_controller,
    value,
    wait_until,
    write,
)
from tests.harness.tierlog_cluster import start_cluster
from tierlog.protocol import ApiKey

SEGMENT_BYTES = 1_048_576  # Kafka's smallest segment.bytes
TAIL_BYTES = 2 * SEGMENT_BYTES  # the local tail of the "on" and "off" topics
RECORDS = {"on": 5500, "off": 5500, "local": 3000}  # of 1000 bytes: 5.5, 5.5 and 3 segments
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)}
TOPICS = {  # name: (replicas at creation, replicas after the reassignment, topic configs)
    "on": ([1, 2], [3, 1, 2], {**TIERED, "local.retention.bytes": str(TAIL_BYTES)}),
    "off": ([1, 3], [1, 3, 2], {**TIERED, "local.retention.bytes": str(TAIL_BYTES)}),
    "local": ([1, 2], [1, 2, 3], TIERED),
}
KIP1023 = "follower.fetch.last.tiered.offset.enable"
#: Given to both clusters: the remote log manager's tasks and retention checks every half second, no
#: automatic leader moves (broker 3 is elected explicitly).
SHARED = {"remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
          "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false"}
PER_BROKER = {3: {KIP1023: "true"}}
START_S = 180


@pytest.fixture(scope="module")
def sides(kafka_kip1023_jars, tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("kip1023-differential")
    settings = tiered_settings(root / "tierlog", **{
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3", **SHARED})
    both = start_together(
        {"tierlog": lambda: start_cluster(root / "tierlog", zookeeper, 3, settings, timeout=START_S,
                                          per_broker=PER_BROKER),
         "kafka": lambda: apache_kafka.start_kafka_kraft_cluster(
             root / "kafka", 3, tiered=True, settings=SHARED, version=apache_kafka.KIP1023_KAFKA_VERSION,
             per_broker=PER_BROKER)},
        {"tierlog": lambda c: c.stop(), "kafka": lambda k: k.stop()})
    pair = {"tierlog": TierlogSide(both["tierlog"], root / "tierlog"), "kafka": KafkaSide(both["kafka"])}
    yield pair
    both["kafka"].stop()
    both["tierlog"].stop()


# ------------------------------------------------------------------------------------------------ helpers


def tiered_tail(side: Side, topic: str, end: int, kept_locally: bool) -> dict:
    """Wait until leader 1 holds ``end`` records and tiered every rolled segment: -5 + 1 is the base of its
    active segment; with ``kept_locally`` its local log still starts at 0, else local retention moved it up
    as far as Kafka's rule goes (a segment is deleted while the local log without it still reaches
    ``local.retention.bytes``), so the leader's local log start stands still from here. Returns the
    ListOffsets answers (-6 too, asked with v11) and the leader's local segment bases."""
    seen: dict = {}

    def check():
        ans = list_offsets(side, 1, topic)
        bases = local_bases(side, 1, topic)
        seen.update(answers=ans, local=bases)
        local_start, tiered = ans[EARLIEST_LOCAL][1], ans[LATEST_TIERED][1]
        if (all(e == 0 for e, _, _ in ans.values()) and ans[LATEST][1] == end and len(bases) >= 2
                and tiered >= 0 and tiered + 1 == bases[-1] and local_start == bases[0]
                and (local_start == 0) == kept_locally
                and (kept_locally or local_bytes(side, 1, topic) - first_bytes(side, 1, topic) < TAIL_BYTES)):
            ans.update(list_offsets(side, 1, topic, (EARLIEST_PENDING_UPLOAD,), version=11))
            return {"answers": ans, "local": bases}
        return None
    try:
        return wait_until(check, f"{side.name}: {topic} tiered on broker 1")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen {seen}") from None


def first_bytes(side: Side, broker_id: int, topic: str) -> int:
    """The size of the replica's first local segment (.log)."""
    first = local_bases(side, broker_id, topic)[0]
    return (side.replica_dir(broker_id, topic) / f"{first:020d}.log").stat().st_size


def reassign(side: Side, targets: dict[str, list[int]]) -> None:
    resp = to_controller(side, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
        {"name": t, "partitions": [{"partition_index": 0, "replicas": r}]} for t, r in targets.items()]})
    codes = [(int(resp.error_code), resp.error_message)] + [
        (int(p.error_code), p.error_message) for t in resp.responses for p in t.partitions]
    assert all(code == 0 for code, _ in codes), f"{side.name}: {codes}"


def reassigning(side: Side) -> set[str]:
    """The topics with a reassignment still in progress (ListPartitionReassignments)."""
    resp = to_controller(side, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": None})
    assert resp.error_code == 0, resp
    return {t.name for t in resp.topics}


def lineage_of_the_leader(side: Side, broker_id: int, topic: str, want: list[int]) -> bool:
    """Whether the replica's leader-epoch checkpoint comes to hold ``want`` (it may be flushed a moment later)."""
    try:
        wait_until(lambda: epoch_lineage(side, broker_id, topic) == want,
                   f"{side.name}: the epoch lineage on broker {broker_id}", 30)
        return True
    except AssertionError:
        return False


def share(part: int, whole: int) -> str:
    return f"{part} of {whole} bytes ({100 * part / whole:.1f}%)"


# -------------------------------------------------------------------------------------------------- tests


def test_an_empty_follower_starts_after_the_last_tiered_offset_as_on_kafka_4_3(sides):
    def scenario(side: Side) -> dict:
        names = {kind: unique(f"kip1023-{kind}") for kind in TOPICS}
        for kind, (replicas, _, configs) in TOPICS.items():
            create(side, names[kind], replicas, configs)
        in_parallel(lambda kind: write(side, names[kind], 0, RECORDS[kind]), list(TOPICS))
        before = {kind: tiered_tail(side, names[kind], RECORDS[kind], kept_locally=kind == "local")
                  for kind in TOPICS}
        lineages = {kind: epoch_lineage(side, 1, names[kind]) for kind in TOPICS}
        reassign(side, {names[kind]: target for kind, (_, target, _) in TOPICS.items()})
        for topic in names.values():
            wait_until(lambda t=topic: len(side.partition(t, via=1).isr_nodes) == 3,
                       f"{side.name}: the new replica of {topic} in the ISR")
        wait_until(lambda: not reassigning(side) & set(names.values()), f"{side.name}: reassignments done")
        for kind, new in (("on", 3), ("off", 2), ("local", 3)):
            wait_until(lambda t=names[kind], b=new, n=RECORDS[kind]: local_end(side, b, t) == n,
                       f"{side.name}: broker {new} holding all of {names[kind]}")

        seen, out, pending_relations = {}, {}, {}
        for kind, new in (("on", 3), ("off", 2), ("local", 3)):
            topic, ans = names[kind], before[kind]["answers"]
            tiered, leader_local = ans[LATEST_TIERED][1], ans[EARLIEST_LOCAL][1]
            first = local_bases(side, new, topic)[0]
            leader_bytes = local_bytes(side, 1, topic)
            untiered = sum((side.replica_dir(1, topic) / f"{b:020d}.log").stat().st_size
                           for b in local_bases(side, 1, topic) if b > tiered)
            whole = side.remote_bytes(topic) + untiered
            copied = local_bytes(side, new, topic)
            seen[kind] = {"first local": first, "-5": tiered, "leader -4": leader_local,
                          "copied": share(copied, whole), "leader local": share(leader_bytes, whole)}
            out[kind] = {"copied": copied, "first": first, "tiered": tiered, "leader local": leader_local,
                         "leader bytes": leader_bytes, "whole": whole}
            seen[kind]["-6"] = ans[EARLIEST_PENDING_UPLOAD]
            pending_error, pending, pending_epoch = ans[EARLIEST_PENDING_UPLOAD]
            pending_relations[kind] = {
                "ListOffsets -6 (v11) answered": pending_error == 0,
                "-6 is -5 + 1 (the earliest pending upload)": pending == tiered + 1,
                "-6's leader epoch is -5's": pending_epoch == ans[LATEST_TIERED][2],
                "-2 is 0": ans[EARLIEST][1] == 0,
            }

        on, off, local = out["on"], out["off"], out["local"]
        snapshot = side.replica_dir(3, names["on"]) / f"{on['first']:020d}.snapshot"
        relations = {
            "on": {
                "the new follower's local log starts above 0": on["first"] > 0,
                "at the leader's last tiered offset + 1": on["first"] == on["tiered"] + 1,
                "above the leader's local log start": on["first"] > on["leader local"],
                "it copied less than the leader holds locally": on["copied"] < on["leader bytes"],
                "it copied under a quarter of the topic": on["copied"] < on["whole"] / 4,
                "a producer snapshot at its local log start": snapshot.exists(),
                "its leader-epoch checkpoint has the leader's lineage":
                    lineage_of_the_leader(side, 3, names["on"], lineages["on"]),
            },
            "off": {
                "the new follower starts at the leader's local log start": off["first"] == off["leader local"],
                "below the leader's last tiered offset + 1": off["first"] < off["tiered"] + 1,
                "it copied more than the follower with the setting on": off["copied"] > on["copied"],
                "a producer snapshot at its local log start":
                    (side.replica_dir(2, names["off"]) / f"{off['first']:020d}.snapshot").exists(),
            },
            "local": {
                "the new follower copied the whole log from 0 (the leader answered its fetch at 0)":
                    local["first"] == 0 and local["copied"] >= local["whole"] * 0.9,
            },
            "leader 1 before the reassignment": pending_relations,
        }

        # Broker 3 leads "on" (preferred, first of its replicas) and serves every record from the earliest:
        # below its local log start from the remote tier.
        topic = names["on"]
        resp = to_controller(side, ApiKey.ELECT_LEADERS, 2, {
            "election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout_ms": 30000})
        codes = [int(p.error_code) for r in resp.replica_election_results for p in r.partition_result]
        assert resp.error_code == 0 and codes == [0], f"{side.name}: ElectLeaders {resp}"
        wait_until(lambda: side.partition(topic, via=3).leader_id == 3, f"{side.name}: broker 3 leading {topic}")
        values = read_all(side, topic, RECORDS["on"], bootstrap=side.address(3))
        relations["on"]["every record reads back in order through broker 3 leading"] = (
            values == [value(i) for i in range(RECORDS["on"])])
        print(f"\n{side.name}: " + "; ".join(
            f"{kind}: {', '.join(f'{k} {v}' for k, v in s.items())}" for kind, s in seen.items()))
        return relations

    started = time.monotonic()
    assert_same(on_both(scenario, sides))
    print(f"\nscenario on both sides in {time.monotonic() - started:.0f}s")
