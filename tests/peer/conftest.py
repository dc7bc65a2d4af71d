"""Apache Kafka as a reference peer for tierlog (see scripts/kafka_peer.py).

Fixtures:

- ``kafka_peer``: one single-node KRaft Apache Kafka for the whole session on 127.0.0.1, started
  from the jars Maven copies into the cache folder outside the repository, stopped by PID.
- ``kafka_peer_tiered``: the same with tiered storage through Kafka's LocalTieredStorage (started
  only when a test asks for it).
- ``tierlog_peer``: one ``tierlog broker`` process for the session (``BrokerProcess`` from
  tests/server), with the same static settings as ``kafka_peer`` so configs and their sources
  compare; ``start_broker`` (re-exported) gives private brokers.
- ``tierlog_tiered``: a tiering ``tierlog broker`` for the session, the counterpart of
  ``kafka_peer_tiered`` (the same task and retention-check intervals).
- ``peer``: parametrized over both, for tests that must pass against Kafka and tierlog alike.
- ``kafka_tool(cls, *args)``: runs one of Kafka's command-line classes in one long-lived tool JVM
  (``ToolRunner``; ``run_tool`` starts a JVM per call instead).

When Java or Maven is missing (or Maven cannot reach Maven Central) these tests are skipped with
the reason locally, and fail in CI (``CI`` set to true), so a CI run never passes without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prerequisites import load_script, unavailable
from tests.server.conftest import BrokerProcess, start_broker  # noqa: F401 - fixture re-exported

ROOT = Path(__file__).resolve().parents[2]


kafka_peer_module = load_script("kafka_peer.py", "tierlog_kafka_peer")
run_tool = kafka_peer_module.run_tool
KafkaPeerError = kafka_peer_module.KafkaPeerError

# Static settings both peers start with (what Kafka's own single-node test clusters set).
SHARED_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def _unavailable(reason: str):
    unavailable("Apache Kafka peer", reason)


@pytest.fixture(scope="session")
def kafka_jars() -> list[Path]:
    missing = kafka_peer_module.missing_prerequisites()
    if missing:
        _unavailable("missing " + ", ".join(missing))
    try:
        return kafka_peer_module.resolve()
    except KafkaPeerError as e:
        _unavailable(str(e))


def _start_kafka(tmp_path_factory, name: str, tiered: bool):
    kafka = kafka_peer_module.KafkaServer(tmp_path_factory.mktemp(name), tiered=tiered,
                                          overrides={k: v for k, v in SHARED_SETTINGS.items()})
    kafka.start()
    print(f"\nApache Kafka {kafka_peer_module.KAFKA_VERSION} ({name}) ready on {kafka.bootstrap} "
          f"in {kafka.start_seconds:.1f}s (format + JVM start)")
    return kafka


@pytest.fixture(scope="session")
def kafka_peer(kafka_jars, tmp_path_factory):
    kafka = _start_kafka(tmp_path_factory, "kafka", tiered=False)
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def kafka_peer_tiered(kafka_jars, tmp_path_factory):
    kafka = _start_kafka(tmp_path_factory, "kafka-tiered", tiered=True)
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def tierlog_peer(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog") / "logs", dict(SHARED_SETTINGS))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def tierlog_tiered(tmp_path_factory):
    root = tmp_path_factory.mktemp("tierlog-tiered")
    b = BrokerProcess(root / "logs", {
        "remote.log.storage.system.enable": "true", "rsm.config.dir": str(root / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
        "num.partitions": "1"}).start()
    yield b
    b.stop()


@pytest.fixture(params=["kafka", "tierlog"])
def peer(request):
    """Each peer in turn: a test passing against Kafka proves it checks the right thing."""
    return request.getfixturevalue(f"{request.param}_peer")


@pytest.fixture(scope="session")
def _tool_runner(kafka_jars):
    runner = kafka_peer_module.ToolRunner()
    yield runner
    runner.close()


@pytest.fixture
def kafka_tool(_tool_runner):
    """``kafka_tool(cls, *args, input=None, check=True)``: a Kafka tool run in the shared tool JVM."""
    return _tool_runner.run
