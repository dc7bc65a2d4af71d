"""tierlog's client sends the newest versions both sides speak (issue 39, item 4): Produce v13, Fetch v18,
OffsetFetch v10 and (a KIP-848 member's) OffsetCommit v10 naming topics by id (KIP-516), OffsetFetch's KIP-848
member, DescribeGroups v6.

Against a tierlog broker the versions are read from its request counter
(``kafka_network_requestmetrics_requests_total{request,version}``) and from the client's own DEBUG lines,
which must agree; against Kafka 4.4 from the client's lines and Kafka's ApiVersions. Kafka 3.9's fallback is
in test_zk_peer.py (its cluster is that module's fixture).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import unique
from tests.harness.tiered import sample_value, scrape
from tests.peer.client_versions import recreate_while_running, round_trip, sent_versions

REQUESTS = "kafka_network_requestmetrics_requests_total"
NEWEST = {"PRODUCE": 13, "FETCH": 18, "OFFSET_FETCH": 10, "DESCRIBE_GROUPS": 6}
#: every version each of these APIs went out at: the consumers' OffsetFetch by topic id (v10), the admin's by
#: name (v9: the group may hold offsets of topics it has no metadata of); OffsetCommit v8 from the classic members,
#: v10 (by id) from the KIP-848 one, as Kafka's consumers
SENT = {"PRODUCE": {13}, "FETCH": {18}, "OFFSET_FETCH": {9, 10}, "DESCRIBE_GROUPS": {6}, "OFFSET_COMMIT": {8, 10}}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("client-versions") / "logs",
                      {"metrics.port": "0", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield b
    finally:
        b.stop()


def _served(before, after, request: str) -> dict[int, float]:
    """{version: requests} the broker counted for ``request`` between two scrapes."""
    out = {}
    for v in range(0, 19):
        n = (sample_value(after, REQUESTS, request=request, version=v) or 0) - (
            sample_value(before, REQUESTS, request=request, version=v) or 0)
        if n:
            out[v] = n
    return out


def test_round_trip_on_tierlog_uses_the_newest_versions(broker, caplog):
    caplog.set_level(logging.DEBUG, logger="tierlog.client")
    before = scrape(broker)
    versions = asyncio.run(round_trip(broker.bootstrap, unique("versions"), unique("versions-group")))
    after = scrape(broker)
    assert versions == NEWEST
    assert {api: v for api, v in sent_versions(caplog).items() if api in SENT} == SENT
    # what the broker counted agrees with what the client says it sent
    assert set(_served(before, after, "Produce")) == {13}
    assert set(_served(before, after, "FetchConsumer")) == {18}
    assert set(_served(before, after, "OffsetFetch")) == {9, 10}
    assert set(_served(before, after, "DescribeGroups")) == {6}
    assert set(_served(before, after, "OffsetCommit")) == {8, 10}


def test_round_trip_on_kafka_uses_the_newest_versions(kafka_peer, caplog):
    caplog.set_level(logging.DEBUG, logger="tierlog.client")
    versions = asyncio.run(round_trip(kafka_peer.bootstrap, unique("versions"), unique("versions-group")))
    # Kafka 4.4 serves every one of them: the client picks the newest, by topic id
    assert versions == NEWEST
    assert {api: v for api, v in sent_versions(caplog).items() if api in SENT} == SENT


@pytest.mark.parametrize("side", ["tierlog", "kafka"])
def test_topic_recreated_under_its_name_while_a_producer_and_a_consumer_run(side, request, caplog):
    """No record the producer was told is written goes missing, and the consumer reads only the new topic's
    records once it is back (from its start: its old position is beyond the new topic's end)."""
    target = request.getfixturevalue("broker" if side == "tierlog" else "kafka_peer")
    caplog.set_level(logging.DEBUG, logger="tierlog.client")
    after, offsets = asyncio.run(recreate_while_running(target.bootstrap, unique("recreated")))
    assert offsets == list(range(20))
    assert after == [f"new {i}" for i in range(20)]
    sent = sent_versions(caplog)
    assert sent["PRODUCE"] == {13} and sent["FETCH"] == {18}
