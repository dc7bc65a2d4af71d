"""tierlog's own client in the interop scenarios against Apache Kafka (the reference peer).

The scenarios are those of test_clients.py (scenarios.py), run unchanged with the ``tierlog``
adapter; only the broker differs: Kafka 4.4 from scripts/kafka_peer.py (the harness's session
``kafka_peer``, or a private one where a scenario restarts or proxies its broker). A scenario
passing here and against tierlog shows the client speaks Kafka, not just tierlog. Results go into
the compatibility matrix as the column "tierlog → Apache Kafka". Without Java/Maven these tests
skip locally and fail in CI.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module
from tests.interop import scenarios
from tests.interop.clients import CODECS, KafkaPythonClient, TierlogClient

COLUMN = "tierlog → Apache Kafka"
pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


@pytest.fixture(autouse=True)
def _matrix_column(request):
    """Record (client, feature) for scripts/compat_matrix.py, as tests/interop/conftest.py does."""
    callspec = getattr(request.node, "callspec", None)
    variant = [str(v) for v in callspec.params.values()] if callspec else []
    feature = request.node.originalname.removeprefix("test_") + (f"[{','.join(variant)}]" if variant else "")
    request.node.user_properties.append(("client", COLUMN))
    request.node.user_properties.append(("feature", feature))


class KafkaBroker:
    """A private Kafka with what the scenarios ask of a broker: ``port``, ``bootstrap``, ``log_dir``
    and ``restart(clean)`` on the same port (SIGTERM or SIGKILL by PID, then start again)."""

    def __init__(self, work_dir, settings: dict | None = None):
        self.server = kafka_peer_module.KafkaServer(work_dir, overrides={**SHARED_SETTINGS, **(settings or {})})

    port = property(lambda self: self.server.port)
    bootstrap = property(lambda self: self.server.bootstrap)
    log_dir = property(lambda self: self.server.log_dir)

    def start(self) -> KafkaBroker:
        self.server.start()
        return self

    def restart(self, clean: bool = True) -> KafkaBroker:
        ports = iter([self.server.port, self.server.controller_port])
        if clean:
            self.server.stop()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.server.proc.pid, signal.SIGKILL)
            self.server.proc.wait()
        original = kafka_peer_module.free_port
        kafka_peer_module.free_port = lambda: next(ports)  # the same listener and controller ports again
        try:
            self.server.start()
        finally:
            kafka_peer_module.free_port = original
        return self

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def interop_broker(kafka_jars, tmp_path):
    started: list[KafkaBroker] = []

    def _start(settings: dict | None = None) -> KafkaBroker:
        b = KafkaBroker(tmp_path / f"kafka{len(started)}", settings)
        started.append(b)
        return b.start()

    yield _start
    for b in started:
        b.stop()


@pytest.fixture
def make_client():
    made = []

    def _make(bootstrap: str, name: str | None = None):
        c = (KafkaPythonClient if name == "kafka-python" else TierlogClient)(bootstrap)
        made.append(c)
        return c

    yield _make
    for c in reversed(made):
        with contextlib.suppress(Exception):
            c.close()


@pytest.fixture
def client(make_client, kafka_peer):
    return make_client(kafka_peer.bootstrap)


@pytest.fixture
def neutral(make_client, kafka_peer):
    return make_client(kafka_peer.bootstrap, "kafka-python")


def test_metadata(client, neutral, kafka_peer):
    scenarios.metadata(client, neutral, kafka_peer)


def test_create_topics(client):
    scenarios.create_topics(client)


def test_create_partitions(client):
    scenarios.create_partitions(client)


def test_configs(client):
    scenarios.configs(client)


def test_delete_records(client, neutral):
    scenarios.delete_records(client, neutral)


def test_delete_topic(client, neutral, kafka_peer):
    scenarios.delete_topic(client, neutral, kafka_peer)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_codec(codec, client, kafka_peer):
    scenarios.produce_codec(codec, client, kafka_peer)


@pytest.mark.parametrize("fault", ["proxy", "broker-kill"])
def test_idempotent_retries(fault, make_client, interop_broker):
    scenarios.idempotent_retries(fault, make_client, interop_broker)


@pytest.mark.parametrize("start", ["earliest", "latest", "timestamp"])
def test_consume_from(start, client, neutral):
    scenarios.consume_from(start, client, neutral)


def test_consumer_group(client, neutral):
    scenarios.consumer_group(client, neutral)


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_restart_resume(how, make_client, interop_broker):
    scenarios.restart_resume(how, make_client, interop_broker)
