"""Suite-wide pytest hooks."""

import pytest


@pytest.fixture(autouse=True)
def _no_stray_brokers():
    """Kill the ``tierlog broker`` processes a test started itself and left running (a failed assertion
    before its ``stop()``); brokers of module or session fixtures were started before this runs."""
    from tests.server.conftest import BrokerProcess
    before = set(BrokerProcess.running)
    yield
    for b in set(BrokerProcess.running) - before:
        b.kill()
        BrokerProcess.running.discard(b)


def pytest_sessionfinish(session, exitstatus):
    from tests.server.conftest import BrokerProcess
    for b in list(BrokerProcess.running):  # whatever a fixture's teardown did not reach
        b.kill()
    # A run that collected nothing must fail loudly: exit code 5 would otherwise read as "no tests".
    if exitstatus == 5:
        session.exitstatus = 1
