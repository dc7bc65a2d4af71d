"""The metadata layer's KIP-899 / KIP-1102 rules against scripted endpoints on real sockets.

- a Metadata answer with top-level REBOOTSTRAP_REQUIRED (129) sends the client back to
  ``bootstrap.servers`` (strategy rebootstrap) or is an error of that update only (strategy none);
- ``metadata.recovery.rebootstrap.trigger.ms`` rebootstraps even while dead brokers stay
  "connectable" (a reconnect back-off of 0), which the KIP-899 rule alone never does (the seed's
  known limitation);
- a known broker in reconnect back-off is not usable, a connected one is, however busy.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.client import netlib
from tests.client.fakebroker import FakeBroker
from tests.harness.waiting import wait_until_async
from tierlog import errors
from tierlog.client.admin import Admin
from tierlog.client.cluster import Node
from tierlog.client.consumer import Consumer
from tierlog.client.errors import BrokersUnavailableError
from tierlog.client.producer import Producer

run = netlib.run
_dead_port = netlib.dead_port
_client = netlib.network_client


def test_rebootstrap_required_goes_back_to_bootstrap_servers():
    async def scenario():
        async with FakeBroker(node_id=-99) as seed, FakeBroker(node_id=7) as b:
            seed.advertise = [(7, "127.0.0.1", b.port)]
            b.metadata_error, b.error_answers = errors.RebootstrapRequiredError.code, 1
            client = _client(seed.address)
            client.start()
            try:
                await client.wait_for_update(10)
                assert set(client.cluster.brokers) == {7} and seed.metadata_requests == 1
                # the next update goes to broker 7, which answers 129 once: back to the seed
                await client.wait_for_update(10)
                await wait_until_async(lambda: seed.metadata_requests == 2 and not client.cluster.bootstrapped, 10,
                                       interval=0.02, what="a second Metadata request to the bootstrap server")
                assert client.rebootstraps == 1
                assert b.metadata_requests == 1
                assert set(client.cluster.brokers) == {7}
                # afterwards broker 7 serves normally again
                await client.wait_for_update(10)
                assert b.metadata_requests == 2 and client.rebootstraps == 1
            finally:
                await client.close()
    run(scenario())


def test_rebootstrap_required_with_strategy_none_is_an_error_not_a_rebootstrap():
    async def scenario():
        async with FakeBroker(node_id=-99) as seed, FakeBroker(node_id=7) as b:
            seed.advertise = [(7, "127.0.0.1", b.port)]
            b.metadata_error, b.error_answers = errors.RebootstrapRequiredError.code, 1_000_000
            client = _client(seed.address, metadata_recovery_strategy="none", retry_backoff_ms=50)
            client.start()
            try:
                await client.wait_for_update(10)
                with pytest.raises(errors.KafkaError) as info:
                    await client.wait_for_update(1.5)
                assert "REBOOTSTRAP_REQUIRED" in str(info.value)
                assert client.rebootstraps == 0
                assert seed.metadata_requests == 1  # never went back to bootstrap.servers
                assert b.metadata_requests >= 2  # kept asking the broker it knows
            finally:
                await client.close()
    run(scenario())


@pytest.mark.parametrize(("backoff_ms", "trigger_ms", "rebootstraps"), [
    (1000, 3600000, True),   # KIP-899: the only known broker is in reconnect back-off
    (0, 1000, True),         # KIP-1102: no metadata for trigger.ms, although the broker is "connectable"
    (0, 3600000, False),     # the seed's known limitation: a zero back-off keeps a dead broker usable
], ids=["backoff", "trigger-ms", "limitation"])
def test_rebootstrap_when_the_known_broker_dies(backoff_ms, trigger_ms, rebootstraps):
    async def scenario():
        dead = _dead_port()
        async with FakeBroker(node_id=-99) as seed:
            seed.advertise = [(7, "127.0.0.1", dead)]  # the cluster moved on; the seed names a dead host
            client = _client(seed.address, reconnect_backoff_ms=backoff_ms, reconnect_backoff_max_ms=backoff_ms,
                             metadata_recovery_rebootstrap_trigger_ms=trigger_ms, retry_backoff_ms=50)
            client.start()
            try:
                await client.wait_for_update(10)
                assert set(client.cluster.brokers) == {7}
                seed.advertise = []  # from now on the seed names itself (node -99)
                client.request_update()
                if rebootstraps:
                    await wait_until_async(lambda: -99 in client.cluster.brokers, 15,
                                           interval=0.02, what="metadata from a rebootstrap")
                    assert client.rebootstraps >= 1 and seed.metadata_requests >= 2
                else:
                    await asyncio.sleep(3)  # nothing to poll for: the point is that nothing happens
                    assert client.rebootstraps == 0 and seed.metadata_requests == 1
                    assert client.brokers_unreachable
                    assert client.least_loaded_node() == Node(7, "127.0.0.1", dead)  # still "usable"
            finally:
                await client.close()
    run(scenario())


def test_strategy_none_never_rebootstraps_and_reports_brokers_unavailable():
    async def scenario():
        dead = _dead_port()
        async with FakeBroker(node_id=-99) as seed:
            seed.advertise = [(7, "127.0.0.1", dead)]
            client = _client(seed.address, metadata_recovery_strategy="none", reconnect_backoff_ms=1000,
                             metadata_recovery_rebootstrap_trigger_ms=0, retry_backoff_ms=50)
            client.start()
            try:
                await client.wait_for_update(10)
                with pytest.raises(BrokersUnavailableError, match="metadata.recovery.strategy=none") as info:
                    await client.wait_for_update(2)
                assert f"7@127.0.0.1:{dead}" in str(info.value)  # names the brokers it tried
                assert client.rebootstraps == 0 and seed.metadata_requests == 1
            finally:
                await client.close()
    run(scenario())


def test_usable_nodes_follow_kip_899():
    """Connected (however many requests in flight) or connectable counts; back-off does not."""
    async def scenario():
        async with FakeBroker(node_id=1) as a:
            client = _client(a.address, reconnect_backoff_ms=5000)
            client.start()
            try:
                await client.wait_for_update(10)
                node = client.node(1)
                assert client.is_usable(node)  # never dialled yet: allowed to connect now
                await client.connection(node)
                assert client.least_loaded_node() == node
                await a.stop()
                await wait_until_async(lambda: not client.is_usable(node), 10,
                                       interval=0.02, what="the closed connection's node in back-off")
                assert client.least_loaded_node([node]) is None
            finally:
                await client.close()
    run(scenario())


@pytest.mark.parametrize("cls", [Producer, Consumer, Admin])
def test_strategy_is_checked_at_construction(cls):
    with pytest.raises(errors.InvalidConfigError, match="metadata.recovery.strategy"):
        cls({"bootstrap.servers": "127.0.0.1:9", "metadata.recovery.strategy": "retry"})
    with pytest.raises(errors.InvalidConfigError, match="metadata.recovery.rebootstrap.trigger.ms"):
        cls({"bootstrap.servers": "127.0.0.1:9", "metadata.recovery.rebootstrap.trigger.ms": -1})
    assert cls(bootstrap_servers="127.0.0.1:9").config["metadata.recovery.strategy"] == "rebootstrap"


def test_frames_are_cut_right_whatever_the_chunks():
    """Frames of every size (the 64 KiB scratch buffer's edge included), arriving in chunks that cut
    size prefixes and bodies anywhere, come out whole and in order."""
    import random
    import struct

    from tierlog.client.connection import _FrameProtocol

    class Sink:
        node_id, host, port = 1, "127.0.0.1", 0

        def __init__(self) -> None:
            self.frames: list[bytes] = []

        def _on_frame(self, frame) -> None:
            self.frames.append(bytes(frame))

        def close(self, reason=None) -> None:
            raise AssertionError(f"closed: {reason}")

    rnd = random.Random(7)
    sizes = [4, 5, 100, _FrameProtocol.SMALL - 5, _FrameProtocol.SMALL - 4, _FrameProtocol.SMALL - 3,
             _FrameProtocol.SMALL, 3 * _FrameProtocol.SMALL + 17, 4, 1_000_000, 7]
    frames = [rnd.randbytes(n) for n in sizes]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    for chunking in ("tiny", "random", "whole"):
        sink = Sink()
        proto = _FrameProtocol(sink)
        pos = 0
        while pos < len(stream):
            buf = proto.get_buffer(-1)
            n = {"tiny": 3, "random": rnd.randint(1, 200_000), "whole": len(buf)}[chunking]
            n = min(n, len(buf), len(stream) - pos)
            buf[:n] = stream[pos:pos + n]
            proto.buffer_updated(n)
            pos += n
        assert sink.frames == frames, chunking


def test_a_timeout_names_the_last_real_error_when_the_final_attempt_only_found_the_budget_spent():
    """Under load the sleep before the last retry can overrun the deadline; the attempt after it
    fails only because no time is left, and the caller must still learn what kept failing."""
    from tierlog.client.errors import KafkaConnectionError, KafkaTimeoutError
    from tierlog.client.network import deadline_after, retry_until

    deadline = deadline_after(150)
    calls = []

    async def operation():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise KafkaConnectionError("broker 7 is not in the cluster metadata")
        await asyncio.sleep(max(0.0, deadline - time.monotonic()) + 0.01)  # an overrun
        raise KafkaTimeoutError("the operation's timeout expired")

    config = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 10}
    with pytest.raises(KafkaTimeoutError, match="broker 7 is not in the cluster metadata"):
        asyncio.run(retry_until(operation, deadline, config, "describe"))
    assert len(calls) == 2
