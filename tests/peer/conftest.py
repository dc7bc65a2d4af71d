"""Apache Kafka as a reference peer: the fixtures (``kafka_peer``, ``kafka_peer_tiered``,
``tierlog_peer``, ``peer``, ``kafka_tool``, ``kafka_jars``) live in tests/harness/plugin.py and the
plumbing in tests/harness/apache_kafka.py, for every suite.

Transition shim: the names below are re-exported only so branches written against this module still
import; they go once those branches are merged. New code imports ``tests.harness.apache_kafka``.
"""

from tests.harness import ROOT  # noqa: F401 - re-exported for the transition
from tests.harness.apache_kafka import SHARED_SETTINGS, KafkaPeerError, kafka_peer_module, run_tool  # noqa: F401
