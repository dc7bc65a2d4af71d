"""Fixtures for the client interoperability suite.

- ``shared_broker``: one broker for the whole session, for scenarios that only need fresh topics;
  started again if a test left it dead.
- ``interop_broker(settings)``: a private broker per test (restarts, fault injection), through the
  harness's ``start_broker`` (tests/harness).
- ``client``: the adapter of the test's ``client_name`` parameter, connected to the shared broker;
  ``make_client(bootstrap)`` makes more (closed at teardown).
- ``neutral``: kafka-python connected to the shared broker, used only to set a scenario up or to
  check a result that the client under test cannot show.

Every test records ``client`` and ``feature`` as junit properties; scripts/compat_matrix.py turns
them into the matrix in docs/compatibility.md. A feature the client cannot exercise (``lacks``) is
skipped with a reason starting with ``n/a:``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.harness.broker import BrokerProcess
from tests.interop.clients import CLIENTS, KafkaPythonClient

# Settings a single-broker test cluster needs (Kafka's own integration tests set the same).
INTEROP_BROKER_SETTINGS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def _shared_broker_holder(tmp_path_factory):
    holder: list[BrokerProcess] = []
    yield holder
    for b in holder:
        b.stop()


@pytest.fixture
def shared_broker(_shared_broker_holder, tmp_path_factory, request) -> BrokerProcess:
    holder = _shared_broker_holder
    if not holder or holder[-1].proc.poll() is not None:
        b = BrokerProcess(tmp_path_factory.mktemp("interop-broker") / "logs", dict(INTEROP_BROKER_SETTINGS))
        holder.append(b.start())
    b = holder[-1]
    mark = len(b.output)
    yield b
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- broker output during the test ----")
        print("".join(b.output[mark:])[-6000:])


@pytest.fixture
def interop_broker(start_broker, request):
    """A private broker with the interop settings: ``interop_broker(extra_settings)``."""
    started: list[BrokerProcess] = []

    def _start(settings: dict | None = None) -> BrokerProcess:
        b = start_broker({**INTEROP_BROKER_SETTINGS, **(settings or {})})
        started.append(b)
        return b

    yield _start
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for b in started:
            print(f"---- output of the broker on port {b.port} ----")
            print("".join(b.output)[-6000:])


@pytest.fixture
def make_client(request):
    made = []

    def _make(bootstrap: str, name: str | None = None):
        cls = CLIENTS[name or request.node.callspec.params["client_name"]]
        c = cls(bootstrap)
        made.append(c)
        return c

    yield _make
    for c in reversed(made):
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - teardown of a client must not hide the test's result
            print(f"closing {c.name} failed: {e!r}")


@pytest.fixture
def client(make_client, shared_broker):
    return make_client(shared_broker.bootstrap)


@pytest.fixture
def neutral(make_client, shared_broker) -> KafkaPythonClient:
    return make_client(shared_broker.bootstrap, "kafka-python")


@pytest.fixture(autouse=True)
def _client_feature(request):
    """Record (client, feature) for the matrix; skip features the client has no way to exercise."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "client_name" not in callspec.params:
        return
    name = callspec.params["client_name"]
    feature = request.node.originalname.removeprefix("test_")
    variant = [str(v) for k, v in callspec.params.items() if k != "client_name"]
    request.node.user_properties.append(("client", name))
    request.node.user_properties.append(("feature", feature + (f"[{','.join(variant)}]" if variant else "")))
    reason = CLIENTS[name].lacks.get(feature)
    if reason:
        pytest.skip(f"n/a: {reason}")
    if name == "kcat" and shutil.which("kcat") is None:
        message = "kcat is not installed (Debian package kcat; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
