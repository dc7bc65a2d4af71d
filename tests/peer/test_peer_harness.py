"""The reference-peer harness itself: cache location, the CI rule, the tool runner's exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness import ROOT, apache_kafka
from tests.harness.apache_kafka import KafkaPeerError, kafka_peer_module


def test_cache_refuses_a_folder_inside_the_repository(monkeypatch):
    monkeypatch.setenv("TIERLOG_KAFKA_CACHE", str(ROOT / "kafka-cache"))
    with pytest.raises(KafkaPeerError, match="inside the repository"):
        kafka_peer_module.cache_dir()


def test_generated_pom_asks_for_broker_tools_test_storage_and_log4j():
    pom = kafka_peer_module.pom_xml()
    for artifact in ("kafka_2.13", "kafka-tools", "kafka-storage", "log4j-slf4j-impl"):
        assert f"<artifactId>{artifact}</artifactId>" in pom
    assert "<classifier>test-fixtures</classifier>" in pom and kafka_peer_module.KAFKA_VERSION in pom


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_missing_java_fails_in_ci_and_skips_locally(monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="Apache Kafka peer unavailable"):
        apache_kafka.unavailable("missing java")


def test_tool_runner_keeps_exit_codes_and_output(kafka_tool, tmp_path):
    version = kafka_tool("TopicCommand", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, kafka_peer_module.KAFKA_VERSION)
    bad = kafka_tool("TopicCommand", "--no-such-option", check=False)
    assert bad.returncode == 1 and "no-such-option" in bad.stdout + bad.stderr
    # Scala tools (DumpLogSegments, ConfigCommand) print through scala.Console: still captured per call.
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    for _ in range(2):
        assert f"Dumping {empty}" in kafka_tool("DumpLogSegments", "--files", str(empty)).stdout


def test_command_line_runs_a_tool_in_its_own_jvm(kafka_jars):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "kafka_peer.py"), "tool", "GetOffsetShell",
                           "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == kafka_peer_module.KAFKA_VERSION


def test_zookeeper_mode_kafka_has_its_own_cache_and_pom(monkeypatch, tmp_path):
    monkeypatch.setenv("TIERLOG_KAFKA_ZK_CACHE", str(ROOT / "kafka-cache"))
    with pytest.raises(KafkaPeerError, match="inside the repository"):
        kafka_peer_module.zk_cache_dir()
    monkeypatch.delenv("TIERLOG_KAFKA_ZK_CACHE")
    assert kafka_peer_module.zk_cache_dir().name == f"kafka-{kafka_peer_module.ZK_KAFKA_VERSION}"
    assert kafka_peer_module.zk_cache_dir() != kafka_peer_module.cache_dir()
    pom = kafka_peer_module.zk_pom_xml()
    for artifact in ("kafka_2.13", "kafka-tools", "slf4j-reload4j", "reload4j"):
        assert f"<artifactId>{artifact}</artifactId>" in pom
    assert "<version>3.9.1</version>" in pom and kafka_peer_module.KAFKA_VERSION not in pom
    with pytest.raises(KafkaPeerError, match="no Kafka 3.8.0 here"):
        kafka_peer_module.java_command("TopicCommand", version="3.8.0")


def test_one_kraft_release_serves_kip1023_and_the_newest_kips(monkeypatch):
    """Kafka 4.4 is the KRaft reference (KIP-1023 shipped in 4.3 and is in 4.4), 4.1 only tests/apps'; any
    other KRaft version (4.3 among them) is refused rather than resolved into a folder of its own."""
    peer = kafka_peer_module
    assert peer.KRAFT_VERSIONS == (peer.KAFKA_VERSION, peer.APPS_KAFKA_VERSION) == ("4.4.0", "4.1.0")
    assert peer.KIP1023_KAFKA_VERSION == peer.LATEST_KAFKA_VERSION == peer.KAFKA_VERSION
    assert peer.cache_dir().name == "kafka-4.4.0"
    with pytest.raises(KafkaPeerError, match="no Kafka 4.3.1 here"):
        peer.cache_dir("4.3.1")
    assert "<classifier>test</classifier>" in peer.pom_xml(peer.APPS_KAFKA_VERSION)  # 4.1's LocalTieredStorage
    with pytest.raises(KafkaPeerError, match="ZooKeeper-mode"):
        peer.cache_dir(peer.ZK_KAFKA_VERSION)
    # Streams and Connect stay 4.1 (no connect-file 4.4.0 on Maven Central), in 4.1's folder.
    pom = peer.apps_pom_xml()
    assert f"<version>{peer.APPS_KAFKA_VERSION}</version>" in pom and peer.KAFKA_VERSION not in pom
    assert peer.apps_cache_dir().parent == peer.cache_dir(peer.APPS_KAFKA_VERSION)
    monkeypatch.setenv("TIERLOG_KAFKA_APPS_CACHE", str(ROOT / "kafka-cache"))
    with pytest.raises(KafkaPeerError, match="inside the repository"):
        peer.apps_cache_dir()


def test_zookeeper_mode_tools_run_in_their_own_jvm_and_the_command_line(kafka_zk_tool, kafka_zk_jars):
    assert any(j.name == "zookeeper-3.8.4.jar" for j in kafka_zk_jars)  # the broker's ZooKeeper client
    version = kafka_zk_tool("TopicCommand", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, "3.9.1")
    bad = kafka_zk_tool("TopicCommand", "--no-such-option", check=False)
    assert bad.returncode == 1 and "no-such-option" in bad.stdout + bad.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "kafka_peer.py"), "zk-tool", "LeaderElectionCommand",
                           "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "3.9.1", proc.stderr
