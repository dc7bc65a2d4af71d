"""Transition shim: these helpers moved to tests/harness/tiered.py (and ``BrokerProcess`` to
tests/harness/broker.py).

Kept only so branches written against the old path still import; it goes once they are merged.
New code imports ``tests.harness.tiered``.
"""

from tests.harness.broker import BrokerProcess  # noqa: F401 - re-exported for the transition
from tests.harness.tiered import call, metrics_url, tier_status, tiered_settings, wait_for  # noqa: F401
