"""The one session type: what a connection's Session carries, and the principal an Envelope carries for it."""

from __future__ import annotations

import dataclasses

import pytest

from tierlog.security import ANONYMOUS, KafkaPrincipal
from tierlog.security.session import ANONYMOUS_SESSION, Session, java_host_address, peer_text
from tierlog.server.apis.forwarding import decode_principal, encode_principal


def test_a_session_names_its_principal_as_acls_do():
    s = Session(principal=KafkaPrincipal("User", "CN=alice,O=acme"), client_host="10.0.0.1", listener="SSL",
                security_protocol="SSL", peer="10.0.0.1:51234")
    assert s.acl_principal == "User:CN=alice,O=acme"  # made once, as super.users and ACL bindings write it
    assert (s.client_host, s.listener, s.security_protocol, s.peer) == ("10.0.0.1", "SSL", "SSL", "10.0.0.1:51234")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.principal = ANONYMOUS  # a session never changes: a re-authentication keeps the principal
    with pytest.raises(TypeError):
        Session(ANONYMOUS, "10.0.0.1")  # keyword arguments only: no field is ever confused with another


def test_the_anonymous_session():
    assert ANONYMOUS_SESSION.principal is ANONYMOUS
    assert ANONYMOUS_SESSION.acl_principal == "User:ANONYMOUS"
    assert (ANONYMOUS_SESSION.client_host, ANONYMOUS_SESSION.security_protocol) == ("", "PLAINTEXT")
    assert Session() == ANONYMOUS_SESSION


def test_peer_text():
    assert peer_text(("127.0.0.1", 5000)) == "127.0.0.1:5000"
    assert peer_text(("::1", 5000, 0, 0)) == "::1:5000"
    assert peer_text("/tmp/sock") == "/tmp/sock"


@pytest.mark.parametrize("principal", [ANONYMOUS, KafkaPrincipal("User", "alice"),
                                       KafkaPrincipal("User", "CN=b\u00e9a,OU=eng:x"), KafkaPrincipal("Group", "")])
def test_envelope_principal_round_trip(principal):
    """Kafka's DefaultPrincipalData v0: version, type and name as compact strings, the token flag, no tags."""
    data = encode_principal(principal)
    assert decode_principal(data) == principal
    kind, name = principal.principal_type.encode(), principal.name.encode()
    assert data == (b"\x00\x00" + bytes([len(kind) + 1]) + kind + bytes([len(name) + 1]) + name + b"\x00\x00")


def test_an_unreadable_envelope_principal_is_anonymous():
    assert decode_principal(None) == ANONYMOUS
    assert decode_principal(b"") == ANONYMOUS
    assert decode_principal(b"\x00\x00\x05Us") == ANONYMOUS  # truncated


@pytest.mark.parametrize("ip, java", [
    ("127.0.0.1", "127.0.0.1"),
    ("::1", "0:0:0:0:0:0:0:1"),
    ("::", "0:0:0:0:0:0:0:0"),
    ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
    ("::ffff:10.1.2.3", "10.1.2.3"),  # IPv4-mapped: Java hands Kafka an Inet4Address
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
    ("not-an-address", "not-an-address"),
])
def test_java_host_address(ip, java):
    assert java_host_address(ip) == java
