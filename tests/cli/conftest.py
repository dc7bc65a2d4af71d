"""One tiering broker per test module of the command line (tiered to a local folder, tasks and retention
checks every 100 ms, the status endpoint on a free port); the harness's scheduler keeps a module's
tests on one worker."""

from __future__ import annotations

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import tiered_settings


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    b = BrokerProcess(root / "logs", tiered_settings(root)).start()
    yield b
    b.stop()
