"""``tierlog tier status`` and ``/ready`` right after a restart, while the remote log metadata is rebuilt.

The rebuild is held open by the test (tests/tiered/holds.py: the metadata manager reads nothing while a
file exists, and the snapshots are removed so the whole history must be replayed) and released when the
test has seen the loading state; no outcome depends on how fast the machine replays the metadata.
Every status answer, during and after the catch-up, is either "loading" with no remote figures or the
right figures; never REMOTE-END -1 or a copy lag of segments already copied."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess
from tests.harness.tiered import metrics_url, tier_status, tiered_settings, wait_for
from tests.harness.waiting import not_yet, wait_until
from tests.tiered.holds import held_rlmm_settings

TOPIC = "history"
CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "8000", "local.retention.bytes": "1",
           "file.delete.delay.ms": "0"}


def ready(b: BrokerProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(metrics_url(b) + "/ready", timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def status_table(b: BrokerProcess) -> str:
    out = subprocess.run([sys.executable, "-m", "tierlog", "tier", "status", "--url", metrics_url(b)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_status_and_ready_while_the_metadata_loads_after_a_restart(tmp_path):
    hold = tmp_path / "hold-metadata"
    settings = tiered_settings(tmp_path, **held_rlmm_settings(hold))
    b = BrokerProcess(tmp_path / "logs", settings).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=CONFIGS)])
        admin.close()
        p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
        for i in range(400):
            p.send(TOPIC, b"%08d" % i * 125)
        p.flush()
        p.close()
        before = wait_for(lambda: (s := tier_status(b, TOPIC)["partitions"]) and s[0]["ready"]
                          and s[0]["log_end_offset"] == 400 and s[0]["copy_lag_segments"] == 0
                          and s[0]["remote_segments"] >= 10 and s[0]["local_segments"] <= 2 and s[0],
                          "the topic offloaded", timeout=120)
        assert ready(b)[0] == 200
        table = status_table(b)
        assert "ready" in table.splitlines()[0] and "next local retention check" in table.splitlines()[0]
        assert "KiB" in table  # sizes are human-readable; raw bytes stay in --json

        port = b.port
        assert b.stop() == 0
        shutil.rmtree(tmp_path / "logs" / "__remote_log_metadata-snapshots", ignore_errors=True)  # full replay
        hold.touch()
        b = BrokerProcess(tmp_path / "logs", {**settings, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}).start()

        # Held: alive, not ready, and the status says loading instead of numbers.
        assert urllib.request.urlopen(metrics_url(b) + "/health", timeout=30).status == 200
        code, body = ready(b)
        assert code == 503 and ("loading" in body or "initializing" in body), body
        wait_for(lambda: "tiered partition(s) still loading" in ready(b)[1], "the metadata manager to start")
        status = tier_status(b, TOPIC)
        part = status["partitions"][0]
        assert status["state"] == "loading" and part["state"] == "loading" and not part["ready"]
        for key in ("highest_offset_in_remote_storage", "remote_segments", "remote_bytes", "copy_lag_segments",
                    "copy_lag_bytes", "pending_local_deletion_segments"):
            assert part[key] is None, (key, part)
        assert part["log_end_offset"] == 400 and part["log_start_offset"] == 0
        table = status_table(b)
        assert table.splitlines()[0].startswith("broker 1: loading (remote log metadata of 1 of 1")
        row = next(line.split() for line in table.splitlines() if line.startswith(TOPIC))
        assert row[2] == "loading" and "-1" not in row

        # Released: every answer from now on is "loading" or the right numbers; /ready turns 200 only once the
        # status shows the loaded figures.
        hold.unlink()

        def loaded():
            code, _ = ready(b)
            part = tier_status(b, TOPIC)["partitions"][0]
            if part["state"] == "loading":
                assert code == 503
                assert part["highest_offset_in_remote_storage"] is None and part["copy_lag_segments"] is None
                return not_yet((code, part))
            assert part["highest_offset_in_remote_storage"] == before["highest_offset_in_remote_storage"]
            assert part["remote_segments"] == before["remote_segments"]
            assert part["copy_lag_segments"] == 0
            return code == 200 or not_yet((code, part))

        wait_until(loaded, 120, interval=0, what="the metadata loaded and /ready at 200 (/ready, status)")
        table = status_table(b)
        assert table.splitlines()[0].startswith("broker 1: ready")
        row = next(line.split() for line in table.splitlines() if line.startswith(TOPIC))
        assert row[2] == "ready" and row[7] == str(before["highest_offset_in_remote_storage"])  # after ROLE, LEADER
    finally:
        b.kill()


def test_pending_local_deletion_and_the_next_retention_check(start_broker, tmp_path):
    """Segments already copied and past local retention wait for the retention check: with a long check
    interval they stay, and status says how many, how big, and when the check runs."""
    b = start_broker(tiered_settings(tmp_path, **{"log.retention.check.interval.ms": "3600000"}))
    # The first check runs on the first housekeeping tick after start-up; the next one is an hour away.
    wait_for(lambda: (s := tier_status(b))["next_retention_check_ms"] - s["now_ms"] > 3_000_000, "the first check")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=CONFIGS)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    for i in range(100):
        p.send(TOPIC, b"%08d" % i * 125)
    p.flush()
    p.close()
    part = wait_for(lambda: (s := tier_status(b, TOPIC)["partitions"]) and s[0]["ready"]
                    and s[0]["copy_lag_segments"] == 0 and s[0]["remote_segments"] >= 5 and s[0],
                    "the segments copied", timeout=120)
    assert part["local_log_start_offset"] == 0
    assert part["pending_local_deletion_segments"] == part["remote_segments"]
    assert part["pending_local_deletion_bytes"] > 5 * 8000 * 0.9
    status = tier_status(b, TOPIC)
    assert 3_500_000 < status["next_retention_check_ms"] - status["now_ms"] <= 3_600_000
    table = status_table(b)
    assert f"{part['pending_local_deletion_segments']} local segment(s)" in table
    assert "deleted by the next retention check in 59 min" in table or "in 1 h" in table, table
