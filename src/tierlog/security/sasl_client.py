"""The client side of SASL: which mechanism and credentials a client configuration asks for, and the
exchange over SaslHandshake v1 and SaslAuthenticate on a connection (tierlog's client, and brokers to each
other on a SASL inter-broker listener).

Settings, with both names clients use: ``sasl.mechanism``; ``sasl.jaas.config`` as Java writes it
(PlainLoginModule / ScramLoginModule ``username`` and ``password``; OAuthBearerLoginModule
``unsecuredLoginStringClaim_sub`` and ``unsecuredLoginLifetimeSeconds``) or ``sasl.username`` /
``sasl.password`` / ``sasl.oauthbearer.config`` (``principal=... lifeSeconds=...``) as confluent-kafka does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tierlog.security.jaas import JaasConfigError, login_options
from tierlog.security.oauthbearer import client_initial_response, unsecured_token
from tierlog.security.scram import MECHANISMS as SCRAM_MECHANISMS
from tierlog.security.scram import ScramClient, ScramError

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kafka's API keys of the exchange (the protocol package is a layer above this one)
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SaslClientError(Exception):
    """Authentication failed or cannot be attempted; the message says why (never the password)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def _text(value) -> str | None:
    if value is None:
        return None
    return value.value if hasattr(value, "value") else str(value)


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str | None = None
    password: str | None = None
    token_principal: str | None = None
    token_lifetime_s: float = 3600.0
    token_scope: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"SaslCredentials({self.mechanism}, user={self.username or self.token_principal})"

    @classmethod
    def from_config(cls, config: Mapping, mechanism_key: str = "sasl.mechanism",
                    jaas: str | None = None) -> SaslCredentials:
        """From a client's settings; SaslClientError when they are incomplete."""
        mechanism = str(config.get(mechanism_key) or "GSSAPI").upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise SaslClientError(f"{mechanism_key}={mechanism} is not supported (one of "
                                  f"{', '.join(CLIENT_MECHANISMS)})")
        jaas = jaas if jaas is not None else _text(config.get("sasl.jaas.config"))
        options: dict[str, str] = {}
        if jaas:
            try:
                options = login_options(jaas)
            except JaasConfigError as e:
                raise SaslClientError(f"sasl.jaas.config: {e}") from None
        if mechanism == "OAUTHBEARER":
            oauth = {}
            for item in str(config.get("sasl.oauthbearer.config") or "").split():
                k, _, v = item.partition("=")
                oauth[k] = v
            principal = options.get("unsecuredLoginStringClaim_sub") or oauth.get("principal")
            if not principal:
                raise SaslClientError("OAUTHBEARER needs a principal: sasl.jaas.config with "
                                      "unsecuredLoginStringClaim_sub, or sasl.oauthbearer.config principal=...")
            life = options.get("unsecuredLoginLifetimeSeconds") or oauth.get("lifeSeconds") or 3600
            scope = tuple(s for s in (options.get("unsecuredLoginListClaim_scope") or oauth.get("scope") or "")
                          .replace(",", " ").split() if s)
            return cls(mechanism, token_principal=principal, token_lifetime_s=float(life), token_scope=scope)
        username = options.get("username") or _text(config.get("sasl.username"))
        password = options.get("password") or _text(config.get("sasl.password"))
        if not username or password is None:
            raise SaslClientError(f"{mechanism} needs a user and a password: sasl.jaas.config with username and "
                                  "password, or sasl.username and sasl.password")
        return cls(mechanism, username, password)


#: ``send(api_key, values, max_version)`` -> the kio response, on the connection being authenticated.
Send = Callable[[int, Mapping, int], Awaitable[object]]


async def authenticate(send: Send, creds: SaslCredentials) -> int:
    """SaslHandshake v1 then SaslAuthenticate until the mechanism completes; returns the session lifetime
    in ms the broker granted (0: none). SaslClientError on refusal."""
    handshake = await send(SASL_HANDSHAKE, {"mechanism": creds.mechanism}, 1)
    code = int(handshake.error_code.value)
    if code:
        raise SaslClientError(f"the broker refused mechanism {creds.mechanism} (error {code}); it offers "
                              f"{', '.join(handshake.mechanisms) or 'none'}", code)

    async def step(token: bytes):
        response = await send(SASL_AUTHENTICATE, {"auth_bytes": token}, 2)
        code = int(response.error_code.value)
        if code:
            raise SaslClientError(f"SASL authentication failed: {response.error_message}", code)
        return response

    if creds.mechanism == "PLAIN":
        response = await step(f"\0{creds.username}\0{creds.password}".encode())
    elif creds.mechanism in SCRAM_MECHANISMS:
        scram = ScramClient(creds.mechanism, creds.username, creds.password)
        first = await step(scram.first())
        try:
            response = await step(scram.final(bytes(first.auth_bytes)))
            scram.verify(bytes(response.auth_bytes))
        except ScramError as e:
            raise SaslClientError(f"SCRAM exchange failed: {e}") from None
    else:
        token = unsecured_token(creds.token_principal, creds.token_lifetime_s, creds.token_scope)
        response = await step(client_initial_response(token))
        if bytes(response.auth_bytes):  # an error challenge: acknowledge it, the broker then fails the exchange
            await step(b"\x01")
            raise SaslClientError("OAUTHBEARER token refused: " + bytes(response.auth_bytes).decode(errors="replace"))
    lifetime = getattr(response, "session_lifetime", None)
    return int(lifetime.total_seconds() * 1000) if lifetime else 0


__all__ = ["CLIENT_MECHANISMS", "SaslClientError", "SaslCredentials", "authenticate"]
