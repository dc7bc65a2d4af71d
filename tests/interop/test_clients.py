"""The interop scenarios (scenarios.py) with every client: kafka-python, aiokafka, confluent-kafka,
kcat and tierlog, against tierlog.

Each (client, feature) is one test id, e.g. ``test_produce_codec[confluent-kafka-zstd]``. The
client named in the id does the work under test; setup that it cannot do (records with given
timestamps for kcat, a multi-partition topic) is done by kafka-python (``neutral``). Record
counts are small so the whole suite stays within a few minutes on two cores.
"""

from __future__ import annotations

import pytest

from tests.interop import scenarios
from tests.interop.clients import CLIENTS, CODECS

NAMES = list(CLIENTS)

# kafka-python 3.0 loads its protocol schemas with importlib.resources' deprecated helpers.
pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


def each_client(*variants, name: str | None = None):
    """Parametrize over clients (and variants): ids are ``<client>`` or ``<client>-<variant>``."""
    if not variants:
        return pytest.mark.parametrize("client_name", NAMES)
    return pytest.mark.parametrize(f"client_name,{name}", [(c, v) for c in NAMES for v in variants])


@each_client()
def test_create_topics(client_name, client):
    scenarios.create_topics(client)


@each_client()
def test_create_partitions(client_name, client):
    scenarios.create_partitions(client)


@each_client()
def test_metadata(client_name, client, neutral, shared_broker):
    scenarios.metadata(client, neutral, shared_broker)


@each_client()
def test_configs(client_name, client):
    scenarios.configs(client)


@each_client()
def test_delete_records(client_name, client, neutral):
    scenarios.delete_records(client, neutral)


@each_client()
def test_delete_topic(client_name, client, neutral, shared_broker):
    scenarios.delete_topic(client, neutral, shared_broker)


@each_client(*CODECS, name="codec")
def test_produce_codec(client_name, codec, client, shared_broker):
    scenarios.produce_codec(codec, client, shared_broker)


@each_client("proxy", "broker-kill", name="fault")
def test_idempotent_retries(client_name, fault, make_client, interop_broker):
    scenarios.idempotent_retries(fault, make_client, interop_broker)


@each_client("earliest", "latest", "timestamp", name="start")
def test_consume_from(client_name, start, client, neutral):
    scenarios.consume_from(start, client, neutral)


@each_client()
def test_consumer_group(client_name, client, neutral):
    scenarios.consumer_group(client, neutral)


@each_client("clean", "kill", name="how")
def test_restart_resume(client_name, how, make_client, interop_broker):
    scenarios.restart_resume(how, make_client, interop_broker)
