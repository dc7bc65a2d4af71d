"""Fixtures of the application suite: a tierlog broker per module (the fault tests SIGKILL and restart it on
its log dir, so later tests of the module find it running again), Kafka Streams' and Connect's classpath
(compiled once per source hash), and the sweep of the application processes a failed test left behind.
Apache Kafka 4.1 is the plugin's session ``kafka_peer``."""

from __future__ import annotations

import pytest

from tests.harness.apache_kafka import SHARED_SETTINGS
from tests.harness.apps import JavaApp, apps_classpath
from tests.harness.broker import BrokerProcess


@pytest.fixture(scope="session")
def app_classpath() -> str:
    return apps_classpath()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("apps-tierlog") / "logs", dict(SHARED_SETTINGS)).start()
    BrokerProcess.shared.add(b)  # tests reach it through request.getfixturevalue, after the stray sweep began
    yield b
    BrokerProcess.shared.discard(b)
    b.stop()


@pytest.fixture(autouse=True)
def _no_stray_apps():
    yield
    JavaApp.kill_running()
