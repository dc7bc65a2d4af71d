"""OAUTHBEARER (RFC 7628) as Kafka serves it: the client's initial response, and JWT validation.

- Unsecured tokens (``alg: none``), Kafka's default OAuthBearerUnsecuredValidatorCallbackHandler: used when
  no ``sasl.oauthbearer.jwks.endpoint.url`` is set. The token needs its principal claim (``sub``) and an
  ``exp`` in the future. For development only, as in Kafka.
- Signed tokens, Kafka's OAuthBearerValidatorCallbackHandler: RS256/RS384/RS512, ES256/ES384/ES512 checked
  against the keys of a JWKS document (``file://`` or ``http(s)://``, re-read when a token names an unknown
  ``kid``), then ``exp``/``nbf``/``iat`` with ``sasl.oauthbearer.clock.skew.seconds``, ``aud`` against
  ``sasl.oauthbearer.expected.audience`` and ``iss`` against ``sasl.oauthbearer.expected.issuer``.

A refused token answers the client ``{"status":"invalid_token"}`` as RFC 7628's error, as Kafka does.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.request
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

log = logging.getLogger(__name__)

_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}


class TokenError(Exception):
    """The token is refused; the message says why (logged, never sent: the client gets invalid_token)."""


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal: str
    expires_at_ms: int
    scope: tuple[str, ...]


def b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def parse_client_initial_response(token: bytes) -> tuple[str, dict[str, str]]:
    """(bearer token, SASL extensions) from ``n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]*^A``."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenError("the client's message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.startswith(("n,", "y,")):
        raise TokenError("malformed OAUTHBEARER client message")
    kv = {}
    for item in rest.split("\x01"):
        if item:
            key, eq, value = item.partition("=")
            if not eq:
                raise TokenError("malformed OAUTHBEARER key/value")
            kv[key] = value
    auth = kv.pop("auth", "")
    scheme, _, bearer = auth.partition(" ")
    if scheme.lower() != "bearer" or not bearer:
        raise TokenError("no bearer token in the OAUTHBEARER client message")
    return bearer.strip(), kv


def _split(token: str) -> tuple[dict, dict, bytes, bytes]:
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("a JWT has three parts")
    try:
        header, payload = json.loads(b64url(parts[0])), json.loads(b64url(parts[1]))
        signature = b64url(parts[2]) if parts[2] else b""
    except ValueError:
        raise TokenError("the JWT's parts do not decode") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise TokenError("the JWT's header and payload must be JSON objects")
    return header, payload, f"{parts[0]}.{parts[1]}".encode(), signature


def _scope(payload: dict, claim: str) -> tuple[str, ...]:
    value = payload.get(claim)
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return ()


def _number(payload: dict, claim: str, required: bool) -> float | None:
    value = payload.get(claim)
    if value is None:
        if required:
            raise TokenError(f"the token has no {claim} claim")
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TokenError(f"the token's {claim} claim is not a number")
    return float(value)


def _check_times(payload: dict, skew_s: float, now: float) -> float:
    exp = _number(payload, "exp", True)
    if exp + skew_s <= now:
        raise TokenError(f"the token expired at {exp:.0f} (now {now:.0f})")
    nbf = _number(payload, "nbf", False)
    if nbf is not None and nbf - skew_s > now:
        raise TokenError("the token is not valid yet (nbf)")
    iat = _number(payload, "iat", False)
    if iat is not None and iat - skew_s > now:
        raise TokenError("the token was issued in the future (iat)")
    return exp


def _principal(payload: dict, claim: str) -> str:
    sub = payload.get(claim)
    if not isinstance(sub, str) or not sub.strip():
        raise TokenError(f"the token has no {claim} claim")
    return sub


def validate_unsecured(token: str, *, sub_claim: str = "sub", scope_claim: str = "scope",
                       skew_s: float = 0.0, now: float | None = None) -> ValidatedToken:
    header, payload, _, _ = _split(token)
    if header.get("alg") != "none":
        raise TokenError(f"unsecured validation takes alg none tokens, not {header.get('alg')!r}")
    exp = _check_times(payload, skew_s, time.time() if now is None else now)
    return ValidatedToken(_principal(payload, sub_claim), int(exp * 1000), _scope(payload, scope_claim))


def _b64int(value: str) -> int:
    return int.from_bytes(b64url(value), "big")


def _public_key(jwk: dict):
    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(_b64int(jwk["e"]), _b64int(jwk["n"])).public_key()
    if kty == "EC":
        curve = _CURVES.get(jwk.get("crv"))
        if curve is None:
            raise TokenError(f"unsupported EC curve {jwk.get('crv')!r}")
        return ec.EllipticCurvePublicNumbers(_b64int(jwk["x"]), _b64int(jwk["y"]), curve()).public_key()
    raise TokenError(f"unsupported key type {kty!r}")


class JwksValidator:
    """Signed tokens against the keys of a JWKS document (Kafka's OAuthBearerValidatorCallbackHandler)."""

    def __init__(self, url: str, *, audience=(), issuer: str | None = None, sub_claim: str = "sub",
                 scope_claim: str = "scope", skew_s: float = 30.0):
        self.url = url
        self.audience = tuple(audience or ())
        self.issuer = issuer
        self.sub_claim, self.scope_claim, self.skew_s = sub_claim, scope_claim, skew_s
        self._keys: dict[str | None, dict] = {}
        self._loaded = 0.0

    def _load(self) -> None:
        # Blocking read of a local file or a loopback/intranet endpoint; small, and only when a kid is unknown.
        with urllib.request.urlopen(self.url, timeout=10) as f:  # noqa: S310 - file:// and http(s) by design
            doc = json.load(f)
        self._keys = {k.get("kid"): k for k in doc.get("keys", []) if isinstance(k, dict)}
        self._loaded = time.monotonic()

    def _key_for(self, kid) -> dict:
        if kid not in self._keys and time.monotonic() - self._loaded > 1.0:
            try:
                self._load()
            except (OSError, ValueError) as e:
                raise TokenError(f"cannot read the JWKS at {self.url}: {e}") from None
        key = self._keys.get(kid)
        if key is None and kid is None and len(self._keys) == 1:
            key = next(iter(self._keys.values()))
        if key is None:
            raise TokenError(f"no key {kid!r} in the JWKS")
        return key

    def validate(self, token: str, now: float | None = None) -> ValidatedToken:
        header, payload, signed, signature = _split(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg[:2] not in ("RS", "ES") or alg[2:] not in _HASHES:
            raise TokenError(f"algorithm {alg!r} is not accepted")
        jwk = self._key_for(header.get("kid"))
        try:
            key = _public_key(jwk)
        except (KeyError, ValueError) as e:
            raise TokenError(f"the JWKS key is unusable: {e}") from None
        digest = _HASHES[alg[2:]]()
        try:
            if alg.startswith("RS"):
                if not isinstance(key, rsa.RSAPublicKey):
                    raise TokenError("an RS token needs an RSA key")
                key.verify(signature, signed, padding.PKCS1v15(), digest)
            else:
                if not isinstance(key, ec.EllipticCurvePublicKey):
                    raise TokenError("an ES token needs an EC key")
                half = len(signature) // 2
                if half == 0 or len(signature) % 2:
                    raise TokenError("malformed ES signature")
                der = encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                           int.from_bytes(signature[half:], "big"))
                key.verify(der, signed, ec.ECDSA(digest))
        except InvalidSignature:
            raise TokenError("the token's signature does not verify") from None
        exp = _check_times(payload, self.skew_s, time.time() if now is None else now)
        if self.audience:
            aud = payload.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not set(auds) & set(self.audience):
                raise TokenError("the token's audience is not expected")
        if self.issuer and payload.get("iss") != self.issuer:
            raise TokenError("the token's issuer is not expected")
        return ValidatedToken(_principal(payload, self.sub_claim), int(exp * 1000), _scope(payload,
                                                                                          self.scope_claim))


def unsecured_token(principal: str, lifetime_s: float = 3600, scope: tuple[str, ...] = (),
                    claim: str = "sub", extra: dict | None = None) -> str:
    """An alg none JWT, as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes for development."""
    now = time.time()
    payload = {claim: principal, "iat": now, "exp": now + lifetime_s, **(extra or {})}
    if scope:
        payload["scope"] = list(scope)

    def enc(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{enc({'alg': 'none'})}.{enc(payload)}."


def client_initial_response(token: str, extensions: dict[str, str] | None = None) -> bytes:
    ext = "".join(f"{k}={v}\x01" for k, v in (extensions or {}).items())
    return f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()


__all__ = ["JwksValidator", "TokenError", "ValidatedToken", "client_initial_response",
           "parse_client_initial_response", "unsecured_token", "validate_unsecured"]
