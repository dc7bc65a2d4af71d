"""One tiering broker per test module of the command line (tiered to a local folder, tasks and retention
checks every 100 ms), its status endpoint on a port of its own that its metrics.port names, so ``tier status``
finds it through the cluster's metadata as in production; the harness's scheduler keeps a module's tests on
one worker."""

from __future__ import annotations

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.ports import PortReservation
from tests.harness.tiered import tiered_settings


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    metrics = PortReservation()  # held while the broker runs: no other test's bind(0) is handed it
    b = BrokerProcess(root / "logs", tiered_settings(root, **{"metrics.port": str(metrics.port)})).start()
    yield b
    b.stop()
    metrics.close()
