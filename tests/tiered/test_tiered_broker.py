"""Tiered storage switched on in a live broker: rules at the API, the start-up guard, copy and local
retention end to end, metrics and ``tierlog tier status``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import InvalidConfigurationError

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess
from tests.harness.tiered import metrics_url, sample_value, scrape, wait_for
from tierlog.tiered.rsm.faults import write_control

TIERED = {
    "remote.log.storage.system.enable": "true",
    "remote.log.metadata.manager.class.name": "memory",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "metrics.port": "0",
    "metrics.admin.enable": "true",  # reconcile --delete
    "metrics.admin.token": "tiered-broker-token",
}
SMALL = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


@pytest.fixture
def tiered_broker(start_broker, tmp_path):
    return start_broker({**TIERED, "rsm.config.dir": str(tmp_path / "remote")})


def tier_status(url: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "tierlog", "tier", "status", "--url", url, *extra],
                          capture_output=True, text=True, env=env, timeout=60)


def produce(bootstrap: str, topic: str, count: int, size: int = 1000) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=16384)
    for i in range(count):
        p.send(topic, (b"%08d" % i) * (size // 8))
    p.flush()
    p.close()


def test_tiering_rules_at_the_api(tiered_broker):
    admin = KafkaAdminClient(bootstrap_servers=tiered_broker.bootstrap)
    try:
        # Compacted topics are tiered (unlike Kafka): docs/tiered-storage.md, "Compacted topics".
        admin.create_topics([NewTopic("compacted", 1, 1, topic_configs={"remote.storage.enable": "true",
                                                                          "cleanup.policy": "compact"})])
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([NewTopic("bad-local", 1, 1, topic_configs={
                "remote.storage.enable": "true", "retention.bytes": "1000", "local.retention.bytes": "2000"})])
        admin.create_topics([NewTopic("plain", 1, 1)])
        # Turning tiering on for an existing topic is allowed; for the internal offsets topic it never
        # takes effect (Kafka silently keeps internal topics local).
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "plain", {"remote.storage.enable": "true"})])
    finally:
        admin.close()


def test_copy_local_retention_metrics_and_status(tiered_broker):
    b = tiered_broker
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 2, 1, topic_configs=SMALL)])
    admin.close()
    produce(b.bootstrap, "tiered", 400)
    url = metrics_url(b)

    def settled():
        s = json.load(urllib.request.urlopen(url + "/v1/tier/status?topic=tiered"))
        parts = s["partitions"]
        if len(parts) == 2 and all(p["ready"] and p["copy_lag_segments"] == 0 and p["remote_segments"] > 0
                                   and p["local_segments"] <= 2 for p in parts):
            return s
        return None
    status = wait_for(settled, what="copy lag 0 and local retention applied")
    for p in status["partitions"]:
        assert p["log_start_offset"] == 0
        assert p["local_log_start_offset"] > 0
        assert p["highest_offset_in_remote_storage"] >= p["local_log_start_offset"] - 1
        assert p["last_error"] is None
    # The local folders hold only the tail.
    for part in (0, 1):
        logs = [f for f in os.listdir(b.log_dir / f"tiered-{part}") if f.endswith(".log")]
        assert len(logs) <= 2
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    copied = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith('kafka_server_brokertopicmetrics_remotecopybytes_total{topic="tiered"}'))
    assert copied > 300_000
    assert sample_value(scrape(url), "kafka_server_brokertopicmetrics_remotecopylagsegments", topic="tiered",
                        partition=0) == 0

    out = tier_status(url, "--topic", "tiered")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("broker 1: ready; next local retention check")
    assert lines[1].split()[:6] == ["TOPIC", "PART", "STATE", "ROLE", "LEADER", "LOG-START"]
    assert [ln.split()[:5] for ln in lines[2:4]] == [["tiered", "0", "ready", "leader", "1"],
                                                     ["tiered", "1", "ready", "leader", "1"]]
    js = tier_status(url, "--json")
    assert json.loads(js.stdout)["remote_storage_enabled"] is True


def test_tier_status_without_a_reachable_broker_says_why():
    out = tier_status("http://127.0.0.1:9")
    assert out.returncode == 1
    assert "cannot reach the broker's status endpoint" in out.stderr


def test_broker_refuses_to_start_without_tiering_while_tiered_topics_exist(tiered_broker, tmp_path):
    b = tiered_broker
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 1, 1, topic_configs={"remote.storage.enable": "true"})])
    admin.close()
    assert b.stop() == 0
    off = BrokerProcess(b.log_dir, {**b.overrides, "remote.log.storage.system.enable": "false"})
    with pytest.raises(RuntimeError) as info:
        off.start(timeout=30)
    assert "delete every topic with remote.storage.enable=true before disabling it cluster-wide" in str(info.value)
    assert off.proc.returncode not in (None, 0)
    assert "Traceback" not in str(info.value)


def test_a_failing_remote_store_loses_nothing_and_copying_resumes(start_broker, tmp_path):
    control = tmp_path / "faults.json"
    write_control(control, copy="error", copy_partial=True)
    b = start_broker({**TIERED, "remote.log.storage.manager.class.name":
                      "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager",
                      "rsm.config.fault.delegate": "filesystem", "rsm.config.fault.control.file": str(control),
                      "rsm.config.dir": str(tmp_path / "remote")})
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 1, 1, topic_configs=SMALL)])
    admin.close()
    produce(b.bootstrap, "tiered", 200)
    url = metrics_url(b)

    def status():
        return json.load(urllib.request.urlopen(url + "/v1/tier/status?topic=tiered"))["partitions"][0]
    broken = wait_for(lambda: (s := status())["last_error"] and s, what="a copy error")
    assert "injected error" in broken["last_error"]
    # Several failed rounds, each leaving a partial upload behind.
    wait_for(lambda: _copy_errors(url) >= 3, what="several failed copies")
    write_control(control, copy="error")  # attempts now fail before writing anything
    # The failed attempts' partial uploads are cleaned up.
    s = wait_for(lambda: (s := status())["remote_segments_to_clean"] == 0
                 and not [f for _, _, fs in os.walk(tmp_path / "remote") for f in fs] and s,
                 what="the partial uploads to be deleted")
    # Nothing was uploaded, so nothing was deleted locally.
    assert s["highest_offset_in_remote_storage"] == -1
    assert s["local_log_start_offset"] == 0 and s["remote_segments"] == 0
    assert s["last_error"].startswith("copy: injected error")
    write_control(control)  # the store heals
    healed = wait_for(lambda: (s := status())["copy_lag_segments"] == 0 and s["remote_segments"] > 0
                      and s["local_segments"] <= 2 and s, what="copy to resume and local retention to follow")
    assert healed["highest_offset_in_remote_storage"] >= healed["local_log_start_offset"] - 1
    logs = [f for f in os.listdir(b.log_dir / "tiered-0") if f.endswith(".log")]
    assert len(logs) <= 2


def _copy_errors(url: str) -> float:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('kafka_server_brokertopicmetrics_remotecopyerrors_total{topic="tiered"}'))


def tier_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TIERLOG_ADMIN_TOKEN": TIERED["metrics.admin.token"]}
    return subprocess.run([sys.executable, "-m", "tierlog", "tier", *args, "--url", url],
                          capture_output=True, text=True, env=env, timeout=60)


def test_reconcile_finds_orphans_and_missing_objects(tiered_broker, tmp_path):
    b = tiered_broker
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 1, 1, topic_configs=SMALL)])
    admin.close()
    produce(b.bootstrap, "tiered", 200)
    url = metrics_url(b)
    wait_for(lambda: (json.load(urllib.request.urlopen(url + "/v1/tier/status"))["partitions"][0]
                      ["remote_segments"] or 0) >= 3, what="a few remote segments")  # None while loading
    clean = json.loads(tier_cli(url, "reconcile", "--json").stdout)
    assert clean["objects"] > 0 and clean["orphans"] == [] and clean["missing"] == []
    root = tmp_path / "remote"
    logs = sorted(p for p in root.rglob("*.log"))
    # An orphan: a segment's objects under an id no metadata knows (what a crash mid-upload leaves).
    stem = logs[0].name[:-len(".log")]
    orphan_stem = stem[:21] + "AAAAAAAAAAAAAAAAAAAAAA"
    for suffix in (".log", ".indexes"):
        (logs[0].parent / (orphan_stem + suffix)).write_bytes((logs[0].parent / (stem + suffix)).read_bytes())
    # A missing object: one finished segment's manifest disappears.
    victim = logs[1].with_suffix(".manifest")
    victim.unlink()
    report = tier_cli(url, "reconcile")
    assert report.returncode == 0, report.stderr
    assert "1 orphaned segment(s)" in report.stdout and "1 segment(s) whose objects are missing" in report.stdout
    assert victim.name in report.stdout and orphan_stem in report.stdout
    deleted = json.loads(tier_cli(url, "reconcile", "--delete", "--json").stdout)
    assert deleted["orphans_deleted"] == 1
    assert not list(root.rglob(orphan_stem + "*"))
    assert (logs[0].parent / (stem + ".log")).exists()  # referenced objects are untouched
    after = json.loads(tier_cli(url, "reconcile", "--json").stdout)
    assert after["orphans"] == [] and len(after["missing"]) == 1


@pytest.mark.parametrize("limit", [128, 5])
def test_custom_metadata_under_and_over_the_limit(start_broker, tmp_path, limit):
    """KIP-917 through a live broker: the storage plugin returns custom metadata (its key prefix and the
    stored size); within remote.log.metadata.custom.metadata.max.bytes it is kept, above it the upload is
    deleted again and copying stops for the partition, visible in tier status and metrics."""
    b = start_broker({**TIERED, "rsm.config.dir": str(tmp_path / "remote"), "rsm.config.custom.metadata.enable":
                      "true", "remote.log.metadata.custom.metadata.max.bytes": str(limit)})
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 1, 1, topic_configs=SMALL)])
    admin.close()
    produce(b.bootstrap, "tiered", 100)
    url = metrics_url(b)

    def status():
        return json.load(urllib.request.urlopen(url + "/v1/tier/status"))["partitions"][0]
    if limit == 128:
        s = wait_for(lambda: (s := status())["copy_lag_segments"] == 0 and s["remote_segments"] > 0 and s,
                     what="copies")
        assert s["last_error"] is None and s["copy_enabled"]
        return
    s = wait_for(lambda: (s := status())["last_error"] and s, what="the copy task to stop")
    assert "exceeds remote.log.metadata.custom.metadata.max.bytes=5" in s["last_error"]
    # The refused upload is removed by the next expiration run.
    s = wait_for(lambda: (s := status())["remote_segments_to_clean"] == 0
                 and not [f for _, _, fs in os.walk(tmp_path / "remote") for f in fs] and s,
                 what="the refused upload to be deleted")
    assert s["remote_segments"] == 0 and s["highest_offset_in_remote_storage"] == -1
    assert s["copy_lag_segments"] > 1  # stopped for good: nothing more is tried
    assert s["local_log_start_offset"] == 0  # nothing deleted locally
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    assert sample_value(scrape(url), "kafka_server_brokertopicmetrics_remotecopyerrors_total", topic="tiered") == 1
    assert 'remotecopybytes_total{topic="tiered"}' not in text  # no byte was counted as copied
    assert any("Stopping the copy task of" in line for line in b.output)
