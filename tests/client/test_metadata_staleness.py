"""When the client asks for new metadata because what it knows may be stale, as Kafka's NetworkClient does.

- a broker closed mid-request (SIGKILL of a real broker while a Fetch waits there) asks for an update;
- a connection that cannot be set up to a broker the metadata names asks for one too: the broker may be
  dead and its partitions led elsewhere (the producer used to retry a dead leader until its batches
  expired, because only a few error codes refreshed the metadata);
- the refreshes back off: answers that move no leader are asked for again only after ``retry.backoff.ms``
  doubling up to ``retry.backoff.max.ms`` (KIP-580), so a client waiting for an election does not
  flood the cluster.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.client.fakebroker import FakeBroker
from tests.client.netlib import dead_port as _dead_port
from tests.client.netlib import network_client, run
from tests.harness.rawclient import create_topic, unique
from tests.harness.waiting import wait_until_async
from tierlog.client.errors import KafkaConnectionError
from tierlog.client.network import KafkaClient, deadline_after
from tierlog.protocol import ApiKey


def _client(bootstrap: str, **settings) -> KafkaClient:
    return network_client(bootstrap, metadata_max_age_ms=600000, **settings)


def test_a_broker_closed_mid_request_makes_the_metadata_stale(broker):
    topic = unique("stale-fetch")
    create_topic(broker.bootstrap, topic)

    async def scenario():
        client = _client(broker.bootstrap)
        client.start()
        try:
            await client.wait_for_topic(topic, deadline_after(10000))
            leader = client.cluster.leader_for(topic, 0)
            conn = await client.connection(leader)
            # an empty partition: the broker holds the Fetch for its max wait
            fetch = asyncio.ensure_future(client.send(leader, ApiKey.FETCH, {
                "replica_id": -1, "max_wait_ms": 30000, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": "", "topics": [{"topic": topic, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}, max_version=12))
            await wait_until_async(lambda: conn.in_flight == 1, 10,
                                   interval=0.02, what="the Fetch waiting at the broker")
            asked = client.metadata_updates
            broker.kill()
            with pytest.raises(KafkaConnectionError):
                await fetch
            await wait_until_async(lambda: client.metadata_updates > asked, 10,
                                   interval=0.02, what="a metadata update after the disconnect")
        finally:
            await client.close()

    run(scenario())


def test_a_failed_connection_to_a_known_broker_asks_for_new_metadata():
    async def scenario():
        async with FakeBroker(node_id=1) as live:
            # the metadata names broker 2, which is gone (its port refuses connections)
            live.advertise = [(1, "127.0.0.1", live.port), (2, "127.0.0.1", _dead_port())]
            client = _client(live.address, reconnect_backoff_ms=10, reconnect_backoff_max_ms=10)
            client.start()
            try:
                await wait_until_async(lambda: 2 in client.cluster.brokers, 10,
                                       interval=0.02, what="the brokers learned")
                asked = live.metadata_requests
                with pytest.raises(KafkaConnectionError):
                    await client.send(client.node(2), ApiKey.METADATA, {"topics": []})
                await wait_until_async(lambda: live.metadata_requests > asked, 10,
                                       interval=0.02, what="a metadata update after the failed dial")
            finally:
                await client.close()

    run(scenario())


def test_refreshes_that_move_no_leader_back_off_exponentially():
    base_ms, cap_ms = 50, 400

    async def scenario():
        async with FakeBroker(node_id=1) as live:
            client = _client(live.address, retry_backoff_ms=base_ms, retry_backoff_max_ms=cap_ms)
            client.start()
            try:
                await wait_until_async(lambda: 1 in client.cluster.brokers, 10,
                                       interval=0.02, what="the broker learned")
                first = live.metadata_requests
                for n in range(6):  # as a producer re-dialling a dead leader asks again and again
                    client.request_update()
                    await wait_until_async(lambda n=n: live.metadata_requests > first + n, 10,
                                           interval=0.02, what=f"update {n + 1}")
                times = [t for k, t in zip(live.requests, live.arrivals) if k == ApiKey.METADATA][first - 1:]
            finally:
                await client.close()
        gaps_ms = [(b - a) * 1000 for a, b in zip(times, times[1:])]
        # the answer to the first refresh is the first one that moved nothing; each later one waits longer
        wanted = [0, base_ms, 2 * base_ms, 4 * base_ms, cap_ms, cap_ms]
        for gap, ms in zip(gaps_ms, wanted):
            assert gap >= 0.8 * ms - 5, (gaps_ms, wanted)  # 20 % jitter, a few ms of clock granularity

    run(scenario())
