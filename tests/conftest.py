"""Registers the live-process harness (tests/harness/plugin.py) for every suite: the shared fixtures
(``start_broker``, ``broker``, ``kafka_peer``, ``kafka_tool``, ``moto_s3``...), the stray-broker guard,
the rule that a run collecting nothing fails, and the pytest-xdist groups. Suite conftests add only
their own fixtures and never import another conftest."""

pytest_plugins = ["tests.harness.plugin"]
