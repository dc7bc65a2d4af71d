"""Live brokers for the client tests, from tests/server: ``start_broker(**overrides)`` starts a
private ``tierlog broker`` process (stopped by PID at teardown) and ``broker`` is a ready one with
default settings; both return a :class:`BrokerProcess` (``bootstrap``, ``restart()``, ``stop()``)."""

from __future__ import annotations

from tests.server.conftest import BrokerProcess, broker, start_broker  # noqa: F401 - fixtures re-exported
