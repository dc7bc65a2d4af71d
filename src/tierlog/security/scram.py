"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and both sides of the exchange.

A credential is stored as Kafka stores it (ZooKeeper's /config/users/<user>, the metadata log's
UserScramCredentialRecord): salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key") and the iteration count, never the password. Text form, as in
ZooKeeper: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

#: mechanism -> (hash name, Kafka's mechanism type id in the SCRAM APIs, minimum iterations)
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1, 4096), "SCRAM-SHA-512": ("sha512", 2, 4096)}
MECHANISM_BY_TYPE = {t: name for name, (_, t, _) in MECHANISMS.items()}
MAX_ITERATIONS = 16384  # Kafka's upper bound for AlterUserScramCredentials


class ScramError(Exception):
    """The exchange failed; the message is safe to log (no secret in it)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b = base64.b64encode
        return (f"salt={b(self.salt).decode()},stored_key={b(self.stored_key).decode()},"
                f"server_key={b(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        d = base64.b64decode
        return cls(d(fields["salt"]), d(fields["stored_key"]), d(fields["server_key"]), int(fields["iterations"]))


def _hash(mechanism: str) -> str:
    return MECHANISMS[mechanism][0]


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash(mechanism), password, salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    h = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(salt, hashlib.new(h, client_key).digest(), hmac.digest(salted, b"Server Key", h),
                           iterations)


def new_credential(mechanism: str, password: str, iterations: int = 4096, salt: bytes | None = None
                   ) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password.encode(), salt, iterations),
                                  salt, iterations)


def _attrs(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError("malformed SCRAM message")
        out[key] = value
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name in SCRAM message")
    return name.replace("=2C", ",").replace("=3D", "=")


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One server-side exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup):
        """``lookup(user, mechanism)`` gives the user's ScramCredential or None."""
        self.mechanism = mechanism
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False
        self._state = 0

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._state == 0:
            return self._first(message)
        if self._state == 1:
            return self._final(message)
        raise ScramError("unexpected SCRAM message after the exchange completed")

    def _first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise ScramError("malformed SCRAM client-first message")  # channel binding (p=) is not offered
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attrs = _attrs(parts[2])
        if "n" not in attrs or "r" not in attrs:
            raise ScramError("SCRAM client-first message without user name or nonce")
        self.username = _unescape_name(attrs["n"])
        authzid = _unescape_name(parts[1][2:]) if parts[1] else ""
        if authzid and authzid != self.username:
            raise ScramError("authorization id differs from the user name")
        self.credential = self._lookup(self.username, self.mechanism)
        if self.credential is None:
            raise ScramError("unknown user")
        # alphanumeric, as Kafka makes it: older librdkafka clients mishandle "=" and "/" in the nonce
        self._nonce = attrs["r"] + os.urandom(16).hex()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self.credential.salt).decode()},"
                              f"i={self.credential.iterations}")
        self._state = 1
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        without_proof, sep, proof = message.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message without proof")
        attrs = _attrs(without_proof)
        # Kafka checks that the nonce ends with the server's: librdkafka 1.x repeats the client's part in front.
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("SCRAM nonce mismatch")
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise ScramError("SCRAM channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        h = _hash(self.mechanism)
        cred = self.credential
        signature = hmac.digest(cred.stored_key, auth_message, h)
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise ScramError("malformed SCRAM proof") from None
        if len(client_proof) != len(signature):
            raise ScramError("invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), cred.stored_key):
            raise ScramError("invalid client credentials")
        self._state = 2
        self.complete = True
        return f"v={base64.b64encode(hmac.digest(cred.server_key, auth_message, h)).decode()}".encode()


class ScramClient:
    """The client side (tierlog's client, brokers to each other)."""

    def __init__(self, mechanism: str, username: str, password: str):
        self.mechanism = mechanism
        self._password = password.encode()
        self._nonce = os.urandom(16).hex()
        self._bare = f"n={_escape_name(username)},r={self._nonce}"

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attrs(text)
        if not attrs.get("r", "").startswith(self._nonce):
            raise ScramError("server nonce does not extend the client's")
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        h = _hash(self.mechanism)
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", h)
        stored = hashlib.new(h, client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored, auth_message, h), strict=True))
        self._server_signature = hmac.digest(hmac.digest(salted, b"Server Key", h), auth_message, h)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attrs(server_final.decode())
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        if base64.b64decode(attrs.get("v", "")) != self._server_signature:
            raise ScramError("the server's signature does not verify")


__all__ = ["MECHANISMS", "MECHANISM_BY_TYPE", "ScramClient", "ScramCredential", "ScramError", "ScramServer",
           "new_credential"]
