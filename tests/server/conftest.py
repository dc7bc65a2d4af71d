"""Transition shim: the live-broker harness moved to tests/harness (``BrokerProcess`` in
tests/harness/broker.py, the ``start_broker`` / ``broker`` fixtures in tests/harness/plugin.py).

Kept only so branches written against the old path still import; it goes once they are merged.
New code imports ``tests.harness.broker``.
"""

from tests.harness import ROOT  # noqa: F401 - re-exported for the transition
from tests.harness.broker import BrokerProcess  # noqa: F401 - re-exported for the transition
