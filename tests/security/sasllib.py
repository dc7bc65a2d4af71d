"""Helpers of the SASL tests: JAAS strings as Kafka's clients write them, signed JWTs and their JWKS
(made at test time with the cryptography library), and raw SASL exchanges."""

from __future__ import annotations

import base64
import json
import struct
import time
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from tests.harness.rawclient import RawClient
from tests.harness.waiting import TimedOut, wait_until
from tierlog.protocol import ApiKey

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


def plain_server_jaas(users: dict[str, str] = USERS) -> str:
    return jaas(PLAIN_MODULE, username="admin", password=users["admin"],
                **{f"user_{u}": p for u, p in users.items()})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64(n: int) -> str:
    return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class Issuer:
    """An RSA and an EC signing key, the JWKS file publishing them, and tokens signed with them."""

    def __init__(self, folder: Path, issuer: str = "https://issuer.test", audience: str = "tierlog"):
        self.issuer, self.audience = issuer, audience
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # not in the JWKS
        rn = self.rsa.public_key().public_numbers()
        en = self.ec.public_key().public_numbers()
        keys = [{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": _int_b64(rn.n), "e": _int_b64(rn.e)},
                {"kty": "EC", "kid": "ec-1", "use": "sig", "alg": "ES256", "crv": "P-256",
                 "x": _b64(en.x.to_bytes(32, "big")), "y": _b64(en.y.to_bytes(32, "big"))}]
        self.jwks = folder / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": keys}))

    def token(self, sub: str, *, alg: str = "RS256", lifetime_s: float = 3600, key=None, kid: str | None = None,
              **claims) -> str:
        now = time.time()
        payload = {"sub": sub, "iss": self.issuer, "aud": self.audience, "iat": int(now), "exp": int(now + lifetime_s),
                   **claims}
        header = {"alg": alg, "typ": "JWT", "kid": kid or ("rsa-1" if alg == "RS256" else "ec-1")}
        signed = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}".encode()
        if alg == "RS256":
            sig = (key or self.rsa).sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature((key or self.ec).sign(signed, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signed.decode()}.{_b64(sig)}"

    def rsa_pem(self) -> bytes:
        return self.rsa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def handshake(raw: RawClient, mechanism: str, version: int = 1):
    return raw.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(raw: RawClient, token: bytes, version: int = 2):
    return raw.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def plain_login(raw: RawClient, user: str, password: str, version: int = 2):
    """SaslHandshake v1 PLAIN then SaslAuthenticate; the SaslAuthenticate response."""
    assert handshake(raw, "PLAIN").error_code == 0
    return authenticate(raw, f"\0{user}\0{password}".encode(), version)


def closed_by_broker(raw: RawClient, timeout: float = 30) -> bool:
    """True when the broker closes the connection (EOF) within ``timeout``."""
    raw.sock.settimeout(timeout)
    try:
        return raw.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def send_size(raw: RawClient, size: int, body: bytes = b"") -> None:
    raw.sock.sendall(struct.pack(">i", size) + body)


def eventually(check, timeout: float = 30.0) -> bool:
    """``check()`` turns true within ``timeout`` (a broker's log lines reach its output through a pipe); the
    callers assert it with a message of their own."""
    try:
        wait_until(check, timeout, what="the check")
    except TimedOut:
        return False
    return True
