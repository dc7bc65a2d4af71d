"""tierlog's own client in the interop scenarios against Apache Kafka (the reference peer).

The scenarios are those of test_clients.py, run unchanged with the ``tierlog`` adapter; only the
broker differs: Kafka 4.1 from scripts/kafka_peer.py (the session's ``kafka_peer``, or a private
one where a scenario restarts or proxies its broker). A scenario passing here and against tierlog
shows the client speaks Kafka, not just tierlog. Results go into the compatibility matrix as the
column "tierlog → Apache Kafka". Without Java/Maven these tests skip locally and fail in CI.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.interop import test_clients as scenarios
from tests.interop.clients import CODECS, KafkaPythonClient, TierlogClient
from tests.peer.conftest import SHARED_SETTINGS, kafka_jars, kafka_peer, kafka_peer_module  # noqa: F401

COLUMN = "tierlog → Apache Kafka"
CLIENT = TierlogClient.name

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
def interop_broker(kafka_jars, tmp_path):  # noqa: F811 - the imported fixture
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
def client(make_client, kafka_peer):  # noqa: F811
    return make_client(kafka_peer.bootstrap)


@pytest.fixture
def neutral(make_client, kafka_peer):  # noqa: F811
    return make_client(kafka_peer.bootstrap, "kafka-python")


def test_metadata(client, neutral, kafka_peer):  # noqa: F811
    scenarios.test_metadata(CLIENT, client, neutral, kafka_peer)


def test_create_topics(client):
    scenarios.test_create_topics(CLIENT, client)


def test_create_partitions(client):
    scenarios.test_create_partitions(CLIENT, client)


def test_configs(client):
    scenarios.test_configs(CLIENT, client)


def test_delete_records(client, neutral):
    scenarios.test_delete_records(CLIENT, client, neutral)


def test_delete_topic(client, neutral, kafka_peer):  # noqa: F811
    scenarios.test_delete_topic(CLIENT, client, neutral, kafka_peer)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_codec(codec, client, kafka_peer):  # noqa: F811
    scenarios.test_produce_codec(CLIENT, codec, client, kafka_peer)


@pytest.mark.parametrize("fault", ["proxy", "broker-kill"])
def test_idempotent_retries(fault, make_client, interop_broker):
    scenarios.test_idempotent_retries(CLIENT, fault, make_client, interop_broker)


@pytest.mark.parametrize("start", ["earliest", "latest", "timestamp"])
def test_consume_from(start, client, neutral):
    scenarios.test_consume_from(CLIENT, start, client, neutral)


def test_consumer_group(client, neutral):
    scenarios.test_consumer_group(CLIENT, client, neutral)


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_restart_resume(how, make_client, interop_broker):
    scenarios.test_restart_resume(CLIENT, how, make_client, interop_broker)
