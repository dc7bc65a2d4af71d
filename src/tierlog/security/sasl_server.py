"""The server side of each SASL mechanism tierlog serves, sans-IO: tokens in, tokens out.

Each mechanism server's :meth:`evaluate` takes the client's next token and returns the server's answer;
:class:`SaslFailure` ends the exchange with the message the client gets (Kafka's, word for word) and a
reason for the broker's log (never a password). ``complete`` turns true on success, with ``username``
the authenticated name (the principal's) and, for OAUTHBEARER, the token's expiry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from tierlog.security.oauthbearer import (
    JwksValidator,
    TokenError,
    ValidatedToken,
    parse_client_initial_response,
    validate_unsecured,
)
from tierlog.security.scram import MECHANISMS as SCRAM_MECHANISMS
from tierlog.security.scram import ScramCredential, ScramError, ScramServer

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
INVALID_USER_OR_PASSWORD = "Authentication failed: Invalid username or password"


class SaslFailure(Exception):
    """The exchange failed: ``client_message`` goes to the client, ``reason`` to the log."""

    def __init__(self, client_message: str, reason: str):
        super().__init__(reason)
        self.client_message = client_message
        self.reason = reason


def invalid_credentials_message(mechanism: str, reauthenticating: bool) -> str:
    """Kafka's answer when a mechanism fails on a SaslException (SCRAM's unknown user, wrong proof)."""
    what = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


class PlainServer:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``, checked against the JAAS ``user_<name>`` options."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]):
        self._users = users
        self.username: str | None = None
        self.complete = False
        self.expires_at_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)),
                              "malformed PLAIN message")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8", "PLAIN message is not UTF-8") from None
        if not username:
            raise SaslFailure("Authentication failed: username not specified", "no user name")
        self.username = username
        if not password:
            raise SaslFailure("Authentication failed: password not specified", "no password")
        expected = self._users.get(username)
        if expected is None or not _same(expected, password):
            raise SaslFailure(INVALID_USER_OR_PASSWORD,
                              "unknown user" if expected is None else "wrong password")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different from "
                              "username", "authorization id differs from the user name")
        self.complete = True
        return b""


def _same(a: str, b: str) -> bool:
    import hmac
    return hmac.compare_digest(a.encode(), b.encode())


class ScramMechanismServer:
    """SCRAM-SHA-256/512 over :class:`ScramServer`, with Kafka's failure messages."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None],
                 reauthenticating: bool = False):
        self.mechanism = mechanism
        self._scram = ScramServer(mechanism, lookup)
        self._reauth = reauthenticating
        self.complete = False
        self.expires_at_ms: int | None = None

    @property
    def username(self) -> str | None:
        return self._scram.username

    def evaluate(self, token: bytes) -> bytes:
        try:
            out = self._scram.evaluate(token)
        except ScramError as e:
            raise SaslFailure(invalid_credentials_message(self.mechanism, self._reauth), str(e)) from None
        self.complete = self._scram.complete
        return out


class OAuthBearerServer:
    """RFC 7628: the client's bearer token validated (unsecured or against a JWKS); a refused token is
    answered with ``{"status":"invalid_token"}``, the client acknowledges with ^A, then the exchange fails
    with that text, as Kafka's OAuthBearerSaslServer does."""

    mechanism = "OAUTHBEARER"
    ERROR = '{"status":"invalid_token"}'

    def __init__(self, validate: Callable[[str], ValidatedToken]):
        self._validate = validate
        self.username: str | None = None
        self.complete = False
        self.expires_at_ms: int | None = None
        self._failed: str | None = None
        self.scope: tuple[str, ...] = ()

    def evaluate(self, token: bytes) -> bytes:
        if self._failed is not None:
            if token == b"\x01":
                raise SaslFailure(self.ERROR, self._failed)
            raise SaslFailure(self.ERROR, self._failed + "; the client did not acknowledge the error")
        try:
            bearer, _extensions = parse_client_initial_response(token)
            valid = self._validate(bearer)
        except TokenError as e:
            self._failed = str(e)
            return self.ERROR.encode()
        self.username, self.expires_at_ms, self.scope = valid.principal, valid.expires_at_ms, valid.scope
        self.complete = True
        return b""


def oauth_validator(settings: Mapping[str, object]) -> Callable[[str], ValidatedToken]:
    """The token check a listener's settings ask for: signed tokens against a JWKS when
    ``sasl.oauthbearer.jwks.endpoint.url`` is set, else unsecured tokens (Kafka's default handler)."""
    sub = str(settings.get("sasl.oauthbearer.sub.claim.name") or "sub")
    scope = str(settings.get("sasl.oauthbearer.scope.claim.name") or "scope")
    url = settings.get("sasl.oauthbearer.jwks.endpoint.url")
    if url:
        v = JwksValidator(str(url), audience=settings.get("sasl.oauthbearer.expected.audience") or (),
                          issuer=settings.get("sasl.oauthbearer.expected.issuer") or None, sub_claim=sub,
                          scope_claim=scope, skew_s=float(settings.get("sasl.oauthbearer.clock.skew.seconds", 30)))
        return v.validate
    return lambda token: validate_unsecured(token, sub_claim=sub, scope_claim=scope, now=time.time())


__all__ = ["INVALID_USER_OR_PASSWORD", "SCRAM_MECHANISMS", "SUPPORTED_MECHANISMS", "OAuthBearerServer", "PlainServer",
           "SaslFailure", "ScramMechanismServer", "invalid_credentials_message", "oauth_validator"]
