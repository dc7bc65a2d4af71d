"""A remote store shared with other clusters stays safe, and the older key layout keeps reading.

Two single-node clusters (two brokers, two data dirs, so two cluster ids) tier a topic of the same name
to one folder. ``tierlog tier reconcile --delete`` on each must leave the other's objects alone (they
are foreign: another cluster's folder, or a topic id this cluster never had), and both topics read back
whole from the earliest offset, remote segments included. Then a broker that tiered with the older
layout (no cluster folder) restarts with the default layout: its old segments still read, new ones go
under the cluster folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess
from tests.harness.tiered import metrics_url, tier_status, tiered_settings, wait_for

TOKEN = "shared-store-token"
TOPIC = "shared"
CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
           "file.delete.delay.ms": "0"}


def produce(b: BrokerProcess, tag: bytes, start: int, count: int) -> None:
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    for i in range(start, start + count):
        p.send(TOPIC, tag + b"-%08d-" % i + b"x" * 900)
    p.flush()
    p.close()


def create(b: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=CONFIGS)])
    admin.close()


def wait_offloaded(b: BrokerProcess, end: int) -> dict:
    """Every record up to ``end`` is written, the rolled segments are copied and deleted locally: reads from
    the earliest offset must come from the remote store."""
    return wait_for(lambda: (p := tier_status(b, TOPIC)["partitions"]) and p[0]["ready"]
                    and p[0]["log_end_offset"] == end and p[0]["copy_lag_segments"] == 0
                    and p[0]["remote_segments"] >= 3 and p[0]["local_log_start_offset"] > 0 and p[0],
                    f"{TOPIC} offloaded on {b.bootstrap}", timeout=120)


def consume_all(b: BrokerProcess, count: int) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=30_000)
    c.assign([TopicPartition(TOPIC, 0)])
    c.seek_to_beginning()
    got = []
    for record in c:
        got.append(record.value)
        if len(got) == count:
            break
    c.close()
    return got


def reconcile_delete(b: BrokerProcess) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TIERLOG_ADMIN_TOKEN": TOKEN}
    out = subprocess.run([sys.executable, "-m", "tierlog", "tier", "reconcile", "--delete", "--json", "--url",
                          metrics_url(b)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cluster_id(b: BrokerProcess) -> str:
    props = (b.log_dir / "meta.properties").read_text()
    return next(line.split("=", 1)[1] for line in props.splitlines() if line.startswith("cluster.id="))


@pytest.mark.parametrize("layout", ["cluster", "older"])
def test_two_clusters_sharing_one_remote_folder_keep_their_data(start_broker, tmp_path, layout):
    """``cluster``: the default layout, each cluster in its own folder; ``older``: both write the layout
    without a cluster folder (rsm.config.key.cluster.id.enable=false), so only the topic ids tell the
    clusters' objects apart, as before the cluster folder existed."""
    extra = {"metrics.admin.enable": "true", "metrics.admin.token": TOKEN}
    if layout == "older":
        extra["rsm.config.key.cluster.id.enable"] = "false"
    a = start_broker(tiered_settings(tmp_path, **extra))  # both tier to tmp_path / "remote"
    b = start_broker(tiered_settings(tmp_path, **extra))
    assert cluster_id(a) != cluster_id(b)
    count = 300
    for broker, tag in ((a, b"a"), (b, b"b")):
        create(broker)
        produce(broker, tag, 0, count)
    for broker in (a, b):
        wait_offloaded(broker, count)
    remote = tmp_path / "remote"
    if layout == "cluster":
        assert sorted(p.name for p in remote.iterdir()) == sorted([cluster_id(a), cluster_id(b)])
    else:
        assert len(list(remote.glob(f"{TOPIC}-*"))) == 2  # one topic folder per cluster, same name
    # A leftover of cluster a's own (an upload a crash cut short): reconcile on a deletes it.
    mine = next(p for p in sorted(remote.rglob("*.log")) if p.parent.parent.name == topic_dir(a))
    orphan = mine.parent / (mine.name[:21] + "AAAAAAAAAAAAAAAAAAAAAA.log")
    orphan.write_bytes(mine.read_bytes())

    objects_before = sorted(str(p) for p in remote.rglob("*") if p.is_file() and p != orphan)
    report_a = reconcile_delete(a)
    report_b = reconcile_delete(b)
    assert report_a["orphans_deleted"] == 1 and not orphan.exists()
    assert report_b["orphans_deleted"] == 0 and report_b["orphans"] == []
    for report, other in ((report_a, b), (report_b, a)):
        assert report["missing"] == []
        foreign = report["foreign"]
        assert [f["topic"] for f in foreign] == [TOPIC] and foreign[0]["objects"] >= 9
        if layout == "cluster":
            assert foreign[0]["cluster_id"] == cluster_id(other)
        else:
            assert foreign[0]["cluster_id"] is None and foreign[0]["reason"] == "a topic id this cluster never had"
    assert sorted(str(p) for p in remote.rglob("*") if p.is_file()) == objects_before

    for broker, tag in ((a, b"a"), (b, b"b")):
        got = consume_all(broker, count)
        assert [v.rsplit(b"-", 1)[0] for v in got] == [tag + b"-%08d" % i for i in range(count)]


def topic_dir(b: BrokerProcess) -> str:
    """``<topic>-<topicId>``, the topic's key folder, from the broker's cluster metadata."""
    image = json.loads((b.log_dir / "tierlog-metadata.json").read_text())
    return next(f"{TOPIC}-{t['topicId']}" for t in image["topics"] if t["name"] == TOPIC)


def test_segments_of_the_older_layout_still_read_after_the_switch(tmp_path):
    """A broker tiered with the older layout; restarted with the default (the cluster folder), it reads its
    old segments (its metadata has no custom metadata to tell the layout: the filesystem store's default),
    writes new ones under the cluster folder, and reconcile sees no orphan and nothing missing."""
    b = BrokerProcess(tmp_path / "logs", tiered_settings(tmp_path, **{"rsm.config.key.cluster.id.enable": "false"}))
    b.start()
    try:
        create(b)
        produce(b, b"old", 0, 200)
        wait_offloaded(b, 200)
        remote = tmp_path / "remote"
        old = sorted(remote.glob(f"{TOPIC}-*/0/*.log"))
        assert len(old) >= 3
        port = b.port
        assert b.stop() == 0
        b = BrokerProcess(tmp_path / "logs", tiered_settings(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}"))
        b.start()
        produce(b, b"new", 200, 200)
        wait_for(lambda: len(list(remote.glob(f"{cluster_id(b)}/{TOPIC}-*/0/*.log"))) >= 3, "new-layout segments")
        wait_offloaded(b, 400)
        assert all(p.exists() for p in old)
        got = consume_all(b, 400)
        expected = [(b"old" if i < 200 else b"new") + b"-%08d" % i for i in range(400)]
        assert [v.rsplit(b"-", 1)[0] for v in got] == expected
        status = tier_status(b, TOPIC)["partitions"][0]
        assert status["log_start_offset"] == 0 and status["highest_offset_in_remote_storage"] >= 300
        report = json.loads(subprocess.run(
            [sys.executable, "-m", "tierlog", "tier", "reconcile", "--json", "--url", metrics_url(b)],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120).stdout)
        assert report["orphans"] == [] and report["missing"] == [] and report["foreign"] == []
    finally:
        b.kill()
