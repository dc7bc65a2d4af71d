"""Who is on a connection (Kafka's ``RequestContext`` principal, listener and client address): one
:class:`Session` per connection, made by the broker's socket server once the connection is accepted (PLAINTEXT:
``User:ANONYMOUS``), its TLS handshake done (the client certificate's mapped principal) or its SASL
authentication complete (``User:<name>``).

Every reader takes it from the request's ``ctx.session`` (the authorizer, client quotas, a JoinGroup's member
host, the Envelope a forwarded request travels in, the listener a client is answered for). Everything a request
path reads is computed when the session is made, never per request: ``acl_principal`` is the principal as ACLs,
``super.users`` and the Envelope write it (``User:alice``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from tierlog.security.principal import ANONYMOUS, KafkaPrincipal


def java_host_address(ip: str) -> str:
    """``ip`` as Java's ``InetAddress.getHostAddress`` writes it, the text Kafka compares ACL hosts with: an IPv6
    address in eight hexadecimal groups without compression (``0:0:0:0:0:0:0:1``, not ``::1``) and its scope
    after ``%``; an IPv4-mapped one as its IPv4 address (Java hands those to Kafka as Inet4Address)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv4Address):
        return str(addr)
    if addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    packed = addr.packed
    groups = ":".join(f"{(packed[i] << 8) | packed[i + 1]:x}" for i in range(0, 16, 2))
    return f"{groups}%{addr.scope_id}" if addr.scope_id else groups


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    principal: KafkaPrincipal = ANONYMOUS
    client_host: str = ""  # the client's address, kept as Java writes it (::1 is "0:0:0:0:0:0:0:1"): ACLs match it
    listener: str = ""  # the listener's name ("" for a request forwarded without one)
    security_protocol: str = "PLAINTEXT"
    peer: str = ""  # address and port ("10.0.0.1:51234"), for logs
    acl_principal: str = field(init=False)  # str(principal), made once per session

    def __post_init__(self) -> None:
        object.__setattr__(self, "acl_principal", str(self.principal))
        object.__setattr__(self, "client_host", java_host_address(self.client_host))

    def __repr__(self) -> str:
        return f"Session({self.acl_principal}, {self.client_host}, {self.listener or '-'})"


#: The session of a request that carries none (a request made inside the broker).
ANONYMOUS_SESSION = Session()


def peer_text(addr) -> str:
    """An accepted socket's address as the session's ``peer``: "host:port" of an (host, port, ...) tuple."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)



__all__ = ["ANONYMOUS_SESSION", "Session", "java_host_address", "peer_text"]

