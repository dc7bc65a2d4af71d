"""Helpers of the TLS tests: a broker's listener addresses, raw TLS connections, the clients' settings."""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.waiting import TimedOut, wait_until_async
from tests.security.pki import Identity, Pki
from tierlog.client.consumer import Consumer
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition

_READY = re.compile(r"Broker \d+ ready in \d+ ms on (?P<listeners>.*)$")


def listener_addresses(broker: BrokerProcess) -> dict[str, str]:
    """Listener name -> host:port, from the broker's ready log line (every listener binds port 0)."""
    for line in broker.output:
        m = _READY.search(line.rstrip("\n"))
        if m:
            out = {}
            for item in m["listeners"].split(", "):
                name, _, address = item.partition("://")
                out[name] = address
            return out
    raise AssertionError("no ready line in the broker's output:\n" + "".join(broker.output[-40:]))


def client_context(pki: Pki, identity: Identity | None = None) -> ssl.SSLContext:
    """A Python TLS client trusting the test CA, with ``identity``'s certificate when given."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if identity is not None:
        ctx.load_cert_chain(str(identity.cert), str(identity.key))
    return ctx


def tls_raw(address: str, ctx: ssl.SSLContext, timeout: float = 20) -> RawClient:
    """A RawClient over TLS (the handshake done here)."""
    raw = RawClient(address, timeout)
    raw.sock = ctx.wrap_socket(raw.sock, server_hostname=address.rsplit(":", 1)[0])
    return raw


def tierlog_settings(pki: Pki, address: str, **extra: str) -> dict:
    """tierlog's client over TLS with a PEM truststore (Kafka's setting names)."""
    return {"bootstrap.servers": address, "security.protocol": "SSL", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca), **extra}


async def tierlog_roundtrip(settings: dict, topic: str, count: int = 20) -> list[bytes]:
    """``count`` records produced with tierlog's client under ``settings`` (a secured listener), then read
    back from partition 0 (at most 60 s)."""
    async with Producer({**settings, "linger.ms": 1}) as producer:
        for i in range(count):
            await asyncio.wait_for(producer.send_and_wait(topic, f"v{i}".encode()), 30)
    got: list[bytes] = []
    async with Consumer({**settings, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])

        async def read():
            if len(got) < count:
                for records in (await consumer.poll(1000)).values():
                    got.extend(r.value for r in records)
            return len(got) >= count

        with contextlib.suppress(TimedOut):  # the caller judges what arrived
            await wait_until_async(read, 60, interval=0, what=f"{count} records")
    return got
