"""Kafka 4.4's Java clients against tierlog use the newest versions tierlog now serves (issue 39).

Offered Produce v13 and Fetch v18, Kafka 4.4's producer and consumer send them; its KIP-848 consumer
(``group.protocol=consumer``) commits and reads its offsets with OffsetCommit v10 and OffsetFetch v10, all
naming topics by id. Which version arrived is read from the broker's request counter
(``kafka_network_requestmetrics_requests_total{request,version}``, Kafka's RequestsPerSec tags), and the
records and offsets show they were served right: a second consumer of the group resumes where the first
committed.
"""

from __future__ import annotations

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.tiered import sample_value, scrape
from tierlog.protocol import ApiKey

REQUESTS = "kafka_network_requestmetrics_requests_total"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("java-versions") / "logs",
                      {"metrics.port": "0", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield b
    finally:
        b.stop()


def _count(samples, request: str, version: int) -> float:
    return sample_value(samples, REQUESTS, request=request, version=version) or 0


def _consume(kafka_tool, bootstrap: str, topic: str, group: str, n: int) -> list[str]:
    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                     "--from-beginning", "--max-messages", str(n), "--timeout-ms", "30000",
                     "--command-property", "group.protocol=consumer")
    return out.stdout.splitlines()


def test_java_clients_send_the_newest_versions(broker, kafka_tool):
    b, topic, group = broker.bootstrap, unique("java-versions"), unique("java-versions-group")
    create_topic(b, topic, partitions=2)
    before = scrape(broker)
    first, second = [f"first {i}" for i in range(6)], [f"second {i}" for i in range(4)]
    kafka_tool("ConsoleProducer", "--bootstrap-server", b, "--topic", topic, input="\n".join(first) + "\n")
    assert sorted(_consume(kafka_tool, b, topic, group, len(first))) == first  # commits when it closes
    kafka_tool("ConsoleProducer", "--bootstrap-server", b, "--topic", topic, input="\n".join(second) + "\n")
    # the group's committed offsets (OffsetFetch v10) start the second consumer after the first's records
    assert sorted(_consume(kafka_tool, b, topic, group, len(second))) == second
    after = scrape(broker)

    def sent(request: str, version: int) -> float:
        return _count(after, request, version) - _count(before, request, version)

    assert sent("Produce", 13) >= 2 and sent("Produce", 12) == 0
    assert sent("FetchConsumer", 18) >= 2 and sent("FetchConsumer", 17) == 0
    assert sent("OffsetCommit", 10) >= 2 and sent("OffsetCommit", 9) == 0
    assert sent("OffsetFetch", 10) >= 2 and sent("OffsetFetch", 9) == 0
    # what the commits by id stored reads back by name too (OffsetFetch v8)
    raw = RawClient(b)
    try:
        resp = raw.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0, 1]}]}], "require_stable": False})
    finally:
        raw.close()
    assert sum(p.committed_offset for p in resp.groups[0].topics[0].partitions) == len(first) + len(second)
