"""Registers the live-process harness (tests/harness/plugin.py) for every suite: the shared fixtures
(``start_broker``, ``broker``, ``kafka_peer``, ``kafka_tool``, ``moto_s3``...), the stray-broker guard,
the rule that a run collecting nothing fails, and the pytest-xdist groups. Suite conftests add only
their own fixtures and never import another conftest."""

import os

# Brokers and clients the suite starts check every answer's field names against all versions of their
# message, a typo check a broker in service skips (tierlog/protocol/builder.py); set before tierlog loads.
os.environ.setdefault("TIERLOG_CHECK_FIELDS", "1")

pytest_plugins = ["tests.harness.plugin"]
