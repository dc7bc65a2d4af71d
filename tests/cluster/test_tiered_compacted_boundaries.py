"""A tiered compacted topic whose new leader rolled its segments at other offsets than the old leader that
uploaded them (issue 23; docs/tiered-storage.md, "Compacted topics", "When the boundaries differ"): the new
leader rebuilds the remote runs that cross its boundaries from its cleaned local log, so a consumer from the
earliest reads the compacted view once the local segments are gone.

How the boundaries are made to differ, deterministically: every record is its own batch, and broker 2 fetches
one batch per fetch (``replica.fetch.max.bytes=1``), so it rolls exactly where the leader rolls as long as it
follows live. It is killed after the first 10 records; broker 1 then takes the rest with the cleaner held off
(``min.compaction.lag.ms``) until all is written: ten keys written twice right after broker 2's last offset,
then a mix of three unique keys and one ``d`` key, then unique keys. Broker 1 cleans once (only the first ten
of those twice-written records go, so only the segment holding them shrinks) and uploads. Broker 2 restarts
and appends broker 1's *cleaned* batches one by one after its 10: its first segment fills up with later
offsets than broker 1's did, and every boundary after it is shifted; the test checks that some uploaded segment
reaches across one of broker 2's boundaries before going on. Broker 1 is then killed, broker 2 (first in the
assignment) leads, the ``d`` keys are written again, and its cleaner removes a quarter of every segment broker
1 uploaded (never enough for the cleaner to merge two, which would line the boundaries up again). Without the
rebuild those segments are never replaced, local retention deletes the local copies, and a consumer from the
earliest reads the superseded ``d`` records. Broker 2's store (the fault-injecting plugin) makes its first
rebuild fail with half its objects written: abandoned, deleted and done again like any failed upload, it
leaves no object behind."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from tests.harness.rawclient import unique
from tests.harness.tiered import call, remote_manifests, tiered_settings
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tests.tiered.compactlib import (
    CLUSTER_SETTINGS,
    COMPACTED_TOPIC,
    Record,
    alter,
    cleaned_and_tiered,
    led_cleaned_and_trimmed,
    read_as_produced,
    read_earliest,
    wait_until,
)
from tierlog.kafka_uuid import uuid_to_str
from tierlog.tiered.rsm.faults import write_control

VALUE = b"x" * 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-compacted-boundaries")
    settings = tiered_settings(root, **CLUSTER_SETTINGS)
    faults = {"replica.fetch.max.bytes": "1",
              "remote.log.storage.manager.class.name": "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager",
              "rsm.config.fault.delegate": "filesystem", "rsm.config.fault.control.file": str(root / "faults-2.json")}
    c = start_cluster(root, zookeeper, brokers=3, settings=settings, per_broker={2: faults})
    c.root, c.faults = root, root / "faults-2.json"
    yield c
    c.stop()
    for i, b in c.brokers.items():  # the brokers' logs, for reading after a failure
        (root / f"broker-{i}.out").write_text("".join(b.output))


def produce_each(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[Record]:
    """Produce in order, each record alone in its batch (one request each): the batches, and so where a
    replica that appends them one by one rolls, do not depend on timing."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    acked: list[Record] = []

    def done(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.key(), msg.value()))
    for key, value in records:
        p.produce(topic, value, key, on_delivery=done)
        assert p.flush(60) == 0
    assert len(acked) == len(records)
    return sorted(acked)


def fail_first_rebuild(control, broker, highest: int, bases: list[int]) -> str:
    """With broker 2's store holding every upload: let each held one go until a rebuild is held (offsets the
    old leader had uploaded, across one of broker 2's segment boundaries ``bases``: never a local segment's
    own upload), make that one fail, then heal the store. Returns the failed upload's segment id as it appears
    in object names."""
    held = Path(f"{control}.held")
    released: list[str] = []
    while True:
        detail = wait_until(lambda: held.exists() and json.loads(held.read_text()), "an upload held by the store")
        start, end = detail["start_offset"], detail["end_offset"]
        if end <= highest and any(start < base <= end for base in bases):
            break
        # Only this one goes on: the store keeps holding, so the next upload is held too, with no window
        released.append(detail["segment_id"])
        write_control(control, copy="hold", copy_partial=True, copy_release=released)
        wait_until(lambda d=detail: not held.exists() or json.loads(held.read_text()) != d, "the upload let go")
    wait_until(lambda: any(f"Rebuilding remote offsets {start}-{end} " in line for line in broker.output),
               "the broker's line about the rebuild")
    write_control(control, copy="error", copy_partial=True)
    wait_until(lambda: not held.exists(), "the rebuild failed")
    write_control(control)
    return uuid_to_str(uuid.UUID(detail["segment_id"]))


def local_bases(broker, topic: str) -> list[int]:
    """Base offsets of the broker's local segments of partition 0 (its ``.log`` files)."""
    folder = broker.log_dir / f"{topic}-0"
    return sorted(int(p.name[:-4]) for p in folder.iterdir() if p.name.endswith(".log"))


def keys(prefix: str, tag: str, first: int, last: int) -> list[tuple[bytes, bytes]]:
    return [(b"%s%03d" % (prefix.encode(), i), tag.encode() + b"-%03d-" % i + VALUE) for i in range(first, last)]


def mixed(n: int) -> list[tuple[bytes, bytes]]:
    """Three unique keys, then key ``d<i>``, ``n`` times: once the ``d`` keys are written again, every segment
    keeps three quarters of its bytes, so the cleaner never merges two of them (their sum is over a segment)."""
    out = []
    for i in range(n):
        out += [(b"u%03d-%d" % (i, j), VALUE) for j in range(3)] + keys("d", "v1", i, i + 1)
    return out


def test_a_new_leader_rebuilds_remote_runs_that_cross_its_segment_boundaries(cluster):
    topic = unique("boundaries")
    create(cluster, topic, assignment=[[1, 2, 3]], configs={
        **COMPACTED_TOPIC, "min.insync.replicas": "2", "min.compaction.lag.ms": "3600000"})
    wait_isr(cluster, topic, 3, timeout=90)
    b1, b2 = cluster.brokers[1], cluster.brokers[2]
    records = produce_each(b1.bootstrap, topic, keys("c", "v1", 0, 10))
    b2.kill()
    wait_until(lambda: 2 not in partition(cluster, topic, via=1).isr_nodes, "broker 2 out of the ISR")

    # Broker 1 (with 3): keys e written twice (the first ten right after broker 2's last offset go), then the
    # mixed keys; cleaned once, which shrinks only the segments holding the first e records.
    records += produce_each(b1.bootstrap, topic, keys("e", "v1", 0, 10) + keys("e", "v2", 0, 10) + mixed(20)
                            + keys("fill-a", "f", 0, 20))
    last1 = records[-21][0]
    alter(b1, topic, **{"min.compaction.lag.ms": "0"})
    highest1 = wait_until(lambda: cleaned_and_tiered(b1, topic, last1),
                          "broker 1 cleaned and uploaded past the mixed keys")["highest_offset_in_remote_storage"]

    cluster.start([2])
    wait_isr(cluster, topic, 3, timeout=120)
    uploaded = remote_manifests(cluster.root, topic)
    bases = local_bases(b2, topic)
    crossing = [(m.start_offset, m.end_offset, base) for m in uploaded for base in bases
                if m.start_offset < base <= m.end_offset]
    assert crossing, (f"precondition: broker 2's segments {bases} line up with the uploads "
                      f"{[(m.start_offset, m.end_offset) for m in uploaded]}")

    # Broker 2's store holds every upload; the first rebuild it holds fails (its segment file half written,
    # as a crash mid-upload leaves it): abandoned and deleted like any failed upload, then done again.
    write_control(cluster.faults, copy="hold", copy_partial=True)
    b1.kill()
    leader = cluster.wait_until(lambda: (p := partition(cluster, topic, via=2).leader_id) != 1 and p, 60,
                                "a new leader")
    assert leader == 2, leader
    client = SimpleNamespace(bootstrap=b2.bootstrap)
    records += produce_each(b2.bootstrap, topic, keys("d", "v3", 0, 20) + keys("fill-b", "f", 0, 40))
    last2 = records[-41][0]
    failed = fail_first_rebuild(cluster.faults, b2, highest1, bases)
    alter(client, topic, **{"local.retention.bytes": "1"})
    led_cleaned_and_trimmed(b2, topic, last2, "cleaned, tiered and deleted locally by broker 2", timeout=240)

    got, expected = read_as_produced(client, topic, records)
    stale = [(o, k, v[:6]) for o, k, v in got if (o, k, v) not in expected]
    assert not stale, f"{len(stale)} superseded records left in the remote tier: {stale[:5]}"
    assert got == expected

    report = call(b2, "/v1/tier/reconcile")
    assert report["orphans"] == [] and report["missing"] == [], report
    assert not [p for p in (cluster.root / "remote").rglob("*") if failed in p.name], "the failed rebuild's objects"
    ranges = [(m.start_offset, m.end_offset) for m in remote_manifests(cluster.root, topic)]
    assert ranges[0][0] == 0, ranges
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        assert start == end + 1, f"remote ranges not contiguous and disjoint: {ranges}"

    cluster.start([1])
    wait_isr(cluster, topic, 3, timeout=120)
    assert read_earliest(SimpleNamespace(bootstrap=cluster.bootstrap), topic, expected[-1][0]) == expected
