"""Fixtures of the application suite: a tierlog broker per module (the fault tests SIGKILL and restart it on
its log dir, so later tests of the module find it running again), a three-broker tierlog ZooKeeper cluster per
module, Kafka Streams' and Connect's classpath (compiled once per source hash), and the sweep of the
application processes a failed test left behind.
Every test runs on ``crashable``, by its ``target`` parameter: tierlog's broker, tierlog's cluster, or the
reference, a one-node Kafka 4.1 KRaft cluster for the session
(``APPS_KAFKA_VERSION``, not the 4.4 peer) (whose node keeps its port and log dir across a
SIGKILL)."""

from __future__ import annotations

import pytest

from tests.apps.support import Target
from tests.harness.apache_kafka import APPS_KAFKA_VERSION, SHARED_SETTINGS, start_kafka_kraft_cluster
from tests.harness.apps import JavaApp, apps_classpath
from tests.harness.broker import BrokerProcess, log_lines
from tests.harness.tierlog_cluster import start_cluster

#: Every broker: Kafka's single-node settings, and timed-out transactions looked for every second (rather than
#: every 10 s), so a test whose held transaction must time out waits less.
SETTINGS = {**SHARED_SETTINGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}

#: The cluster: every topic, internal ones included (transaction state, offsets, the applications' own), on all
#: three brokers and written with two in sync, so one broker SIGKILLed loses nothing acknowledged and stops
#: nothing.
CLUSTER_SETTINGS = {**SETTINGS, "default.replication.factor": "3", "min.insync.replicas": "2",
                    "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                    "transaction.state.log.min.isr": "2", "transaction.state.log.num.partitions": "12",
                    "unclean.leader.election.enable": "false"}

#: Per target: Kafka Streams' settings (the replication of its changelog and repartition topics) and Connect's
#: (its config, offset and status topics).
APP_SETTINGS = {
    "single": ({"replication.factor": "1"}, {f"{t}.storage.replication.factor": "1"
                                             for t in ("config", "offset", "status")}),
    "cluster": ({"replication.factor": "3"}, {f"{t}.storage.replication.factor": "3"
                                              for t in ("config", "offset", "status")}),
}


@pytest.fixture(scope="session")
def app_classpath() -> str:
    return apps_classpath()


def _no_errors(output: list[str]) -> None:
    # Applications recovering from a crash are the broker's everyday work, not an error.
    errors = [m.group(0) for m in log_lines(output, "ERROR") + log_lines(output, "CRITICAL")]
    assert not errors, "\n".join(errors[:20])


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    folder = tmp_path_factory.mktemp("apps-tierlog")
    b = BrokerProcess(folder / "logs", dict(SETTINGS)).start()
    BrokerProcess.shared.add(b)  # tests reach it through request.getfixturevalue, after the stray sweep began
    yield b
    BrokerProcess.shared.discard(b)
    b.stop()
    (folder / "broker.log").write_text("".join(b.output))  # every start's output, SIGKILLs included
    _no_errors(b.output)


@pytest.fixture(scope="module")
def tierlog_cluster(tmp_path_factory, zookeeper):
    folder = tmp_path_factory.mktemp("apps-cluster")
    cluster = start_cluster(folder, zookeeper, brokers=3, settings=CLUSTER_SETTINGS, timeout=120)
    BrokerProcess.shared.update(cluster.brokers.values())
    yield cluster
    outputs = {i: list(b.output) for i, b in cluster.brokers.items()}
    cluster.stop()
    for i, output in outputs.items():
        (folder / f"broker-{i}.log").write_text("".join(output))
    for output in outputs.values():
        _no_errors(output)


@pytest.fixture(autouse=True)
def _no_stray_apps():
    yield
    JavaApp.kill_running()


@pytest.fixture(scope="session")
def kafka_restartable(kafka_jars, tmp_path_factory):
    # Kafka 4.1 (APPS_KAFKA_VERSION), the release of the applications: Streams 4.1 did not recover from a 4.4
    # broker's SIGKILL (test_wordcount_across_broker_kill[kafka]), and there is no Connect 4.4 file connector.
    cluster = start_kafka_kraft_cluster(tmp_path_factory.mktemp("apps-kafka"), brokers=1, settings=SETTINGS,
                                        version=APPS_KAFKA_VERSION)
    yield cluster
    cluster.stop()


def _kill_and_start(cluster) -> None:
    cluster.kill(1)
    cluster.start([1])


@pytest.fixture
def crashable(request, target) -> Target:
    """The brokers of a test, a ``Target`` (support.py): ``bootstrap``, ``create_topic``, the applications'
    settings, and ``sigkill_restart(...)``: SIGKILL a broker, start it on the same port and log dir, return once
    it is back (on the cluster: which broker, by its role in the application's transaction)."""
    if target == "tierlog":
        b = request.getfixturevalue("tierlog")
        return Target(b.bootstrap, *APP_SETTINGS["single"], restart=lambda **_: b.restart(clean=False))
    if target == "cluster":
        cluster = request.getfixturevalue("tierlog_cluster")
        return Target.of_cluster(cluster, *APP_SETTINGS["cluster"])
    cluster = request.getfixturevalue("kafka_restartable")
    return Target(cluster.bootstrap, *APP_SETTINGS["single"], restart=lambda **_: _kill_and_start(cluster))
