"""A tiered compacted topic across three brokers (issue 23, part 3; docs/tiered-storage.md, "Compacted
topics"): the leader uploads cleaned segments; when it dies the new leader's copy task goes on from the
remote tier's end in its own leader-epoch lineage, uploading what its cleaner cleaned and replacing what it
re-cleaned; a consumer from the earliest reads the compacted view (every key's last record, nothing twice,
offsets ascending) from the remote tier, and the reconciler finds no orphan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.harness.rawclient import unique
from tests.harness.tiered import call, tiered_settings
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_isr
from tests.tiered.compactlib import (
    CLUSTER_SETTINGS,
    COMPACTED_TOPIC,
    alter,
    cleaned_and_tiered,
    fill,
    led_cleaned_and_trimmed,
    partition_status,
    produce,
    read_as_produced,
    read_earliest,
    wait_until,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("tiered-compacted")
    settings = tiered_settings(root, **CLUSTER_SETTINGS)
    c = start_cluster(root, zookeeper, brokers=3, settings=settings)
    yield c
    c.stop()


def test_the_copy_of_a_compacted_topic_moves_with_the_leadership(cluster):
    topic = unique("compacted")
    create(cluster, topic, assignment=[[1, 2, 3]], configs={**COMPACTED_TOPIC, "min.insync.replicas": "2"})
    wait_isr(cluster, topic, 3, timeout=90)
    client = SimpleNamespace(bootstrap=cluster.bootstrap)
    records = produce(client, topic, [(b"k%03d" % i, b"v1-%03d-" % i + b"x" * 80) for i in range(200)])
    last1 = records[-1][0]
    records += fill(client, topic, "a")
    wait_until(lambda: cleaned_and_tiered(cluster.brokers[1], topic, last1), "phase 1 cleaned and tiered by broker 1")

    cluster.brokers[1].kill()
    leader = cluster.wait_until(lambda: (p := partition(cluster, topic, via=2).leader_id) in (2, 3) and p, 60,
                                "a new leader")
    client = SimpleNamespace(bootstrap=cluster.brokers[2].bootstrap)
    records += produce(client, topic, [(b"k%03d" % i, b"v2-%03d-" % i + b"y" * 80) for i in range(100)]
                       + [(b"k%03d" % i, None) for i in range(100, 150)])
    last2 = records[-1][0]
    records += fill(client, topic, "b")
    alter(client, topic, **{"local.retention.bytes": "1"})
    b = cluster.brokers[leader]
    st = led_cleaned_and_trimmed(b, topic, last2, "phase 2 cleaned and tiered by the new leader")
    assert st["log_start_offset"] == 0 and partition_status(b, topic)["leader"] == leader
    got, expected = read_as_produced(client, topic, records)
    assert set(expected) <= set(got), "every key's last record is there"
    assert got == expected, f"{len(got) - len(expected)} superseded records left in the remote tier"
    report = call(b, "/v1/tier/reconcile")
    assert report["orphans"] == [] and report["missing"] == [], report

    cluster.start([1])
    wait_isr(cluster, topic, 3, timeout=120)
    assert read_earliest(SimpleNamespace(bootstrap=cluster.bootstrap), topic, expected[-1][0]) == expected
