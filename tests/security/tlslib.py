"""Helpers of the TLS tests: a broker's listener addresses, raw TLS connections, the clients' settings."""

from __future__ import annotations

import re
import ssl

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.security.pki import Identity, Pki

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
