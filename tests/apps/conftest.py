"""Fixtures of the application suite: a tierlog broker per module (the fault tests SIGKILL and restart it on
its log dir, so later tests of the module find it running again), Kafka Streams' and Connect's classpath
(compiled once per source hash), and the sweep of the application processes a failed test left behind.
Every test runs on ``crashable``, by its ``target`` parameter: tierlog's broker, or the reference, a one-node
Kafka 4.1 KRaft cluster for the session (whose node keeps its port and log dir across a SIGKILL)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.harness.apache_kafka import SHARED_SETTINGS, start_kafka_kraft_cluster
from tests.harness.apps import JavaApp, apps_classpath
from tests.harness.broker import BrokerProcess, log_lines

#: Both brokers: Kafka's single-node settings, and timed-out transactions looked for every second (rather than
#: every 10 s), so a test whose held transaction must time out waits less.
SETTINGS = {**SHARED_SETTINGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="session")
def app_classpath() -> str:
    return apps_classpath()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    folder = tmp_path_factory.mktemp("apps-tierlog")
    b = BrokerProcess(folder / "logs", dict(SETTINGS)).start()
    BrokerProcess.shared.add(b)  # tests reach it through request.getfixturevalue, after the stray sweep began
    yield b
    BrokerProcess.shared.discard(b)
    b.stop()
    (folder / "broker.log").write_text("".join(b.output))  # every start's output, SIGKILLs included
    # Applications recovering from a crash are the broker's everyday work, not an error.
    errors = [m.group(0) for m in log_lines(b.output, "ERROR") + log_lines(b.output, "CRITICAL")]
    assert not errors, "\n".join(errors[:20])


@pytest.fixture(autouse=True)
def _no_stray_apps():
    yield
    JavaApp.kill_running()


@pytest.fixture(scope="session")
def kafka_restartable(kafka_jars, tmp_path_factory):
    cluster = start_kafka_kraft_cluster(tmp_path_factory.mktemp("apps-kafka"), brokers=1, settings=SETTINGS)
    yield cluster
    cluster.stop()


def _kill_and_start(cluster) -> None:
    cluster.kill(1)
    cluster.start([1])


@pytest.fixture
def crashable(request, target):
    """The broker of a fault test: ``bootstrap``, and ``sigkill_restart()`` (SIGKILL, start on the same port and
    log dir, return once it answers)."""
    if target == "tierlog":
        b = request.getfixturevalue("tierlog")
        return SimpleNamespace(bootstrap=b.bootstrap, sigkill_restart=lambda: b.restart(clean=False))
    cluster = request.getfixturevalue("kafka_restartable")
    return SimpleNamespace(bootstrap=cluster.bootstrap, sigkill_restart=lambda: _kill_and_start(cluster))
