"""Fixtures of the client tests (live brokers come from the harness, tests/harness: ``start_broker``,
``broker``).

- ``pair``: two broker "hosts" on fixed loopback ports sharing one data folder, the first one serving
  (:class:`tests.client.rebootstraplib.SwapPair`); both are killed at teardown.
"""

from __future__ import annotations

import pytest

from tests.client.rebootstraplib import SwapPair


@pytest.fixture
def pair(tmp_path):
    p = SwapPair(tmp_path / "data")
    p.start(0)
    yield p
    p.close()
