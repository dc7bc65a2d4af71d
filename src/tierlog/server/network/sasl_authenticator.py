"""SASL on a listener, as Kafka's SaslServerAuthenticator serves it.

A connection to a SASL_PLAINTEXT or SASL_SSL listener (after its TLS handshake, for SASL_SSL) must
authenticate before anything else: the socket server reads its first frames itself
(:meth:`SocketServer._authenticate`), each at most ``sasl.server.max.receive.size`` bytes, and only
ApiVersions and SaslHandshake are served. Then:

- SaslHandshake v0: the SASL tokens follow as raw frames (4-byte length, token), answered the same way.
- SaslHandshake v1: the tokens come in SaslAuthenticate requests (v0-2).

A mechanism that is not enabled answers UNSUPPORTED_SASL_MECHANISM; a failed exchange answers
SASL_AUTHENTICATION_FAILED with Kafka's message; either closes the connection once the answer is sent, and
is logged once with the address and the user (never a password). Any other request before authentication
closes the connection (during SaslHandshake v1's exchange, after an ILLEGAL_SASL_STATE answer).

Once authenticated, the connection's :class:`~tierlog.security.session.Session` has the principal
``User:<name>``. KIP-368: with ``connections.max.reauth.ms`` > 0 (or an OAUTHBEARER token that expires) the
session lifetime is told in SaslAuthenticate v1+; the client re-authenticates (SaslHandshake and
SaslAuthenticate again, on the same connection, as the same principal) before it ends, and a connection
whose session has ended is closed at its next request. As in Kafka, a connection whose session does not end
cannot re-authenticate, nor can one more than once a second: such a SaslHandshake is answered
ILLEGAL_SASL_STATE and the connection goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tierlog.config import BrokerConfig
from tierlog.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.security import KafkaPrincipal
from tierlog.security.jaas import JaasConfigError, login_options
from tierlog.security.principal import USER_TYPE
from tierlog.security.sasl_client import SaslClientError, SaslCredentials
from tierlog.security.sasl_server import (
    SUPPORTED_MECHANISMS,
    OAuthBearerServer,
    PlainServer,
    SaslFailure,
    ScramMechanismServer,
    oauth_validator,
)
from tierlog.security.scram import MECHANISMS as SCRAM_MECHANISMS
from tierlog.security.scram import ScramCredential
from tierlog.security.session import Session, peer_text

log = logging.getLogger(__name__)

#: KIP-368: a connection starts a re-authentication at most this often (Kafka's KafkaChannel, one second).
MIN_REAUTH_INTERVAL_S = 1.0

_OAUTH_SETTINGS = ("sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.audience",
                   "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.sub.claim.name",
                   "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.clock.skew.seconds")


def jaas_config(cfg: BrokerConfig, listener: str, mechanism: str) -> str | None:
    """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else the broker-wide ``sasl.jaas.config``
    (Kafka's lookup order)."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    for k, v in cfg.originals.items():
        if k.lower() == key:
            return _secret(v)
    return _secret(cfg.listener_setting(listener, "sasl.jaas.config"))


def _secret(value) -> str | None:
    if value is None:
        return None
    return value.value if hasattr(value, "value") else str(value)


def plain_users(cfg: BrokerConfig, listener: str) -> dict[str, str]:
    text = jaas_config(cfg, listener, "PLAIN")
    if not text:
        raise InvalidConfigError(f"Listener {listener}: PLAIN is enabled but no JAAS configuration is set "
                                 f"(listener.name.{listener.lower()}.plain.sasl.jaas.config or sasl.jaas.config)")
    try:
        options = login_options(text)
    except JaasConfigError as e:
        raise InvalidConfigError(f"Listener {listener}: sasl.jaas.config for PLAIN: {e}") from None
    return {k[5:]: v for k, v in options.items() if k.startswith("user_")}


def inter_broker_credentials(cfg: BrokerConfig) -> SaslCredentials | None:
    """What this broker authenticates with to the others when the inter-broker listener is SASL_PLAINTEXT or
    SASL_SSL: ``sasl.mechanism.inter.broker.protocol``, with the username and password of that listener's JAAS
    configuration for the mechanism (OAUTHBEARER: its unsecuredLoginStringClaim_sub), as Kafka's brokers do."""
    listener = cfg.inter_broker_listener
    if not listener.security_protocol.startswith("SASL_"):
        return None
    mechanism = str(cfg["sasl.mechanism.inter.broker.protocol"]).upper()
    try:
        return SaslCredentials.from_config({"sasl.mechanism": mechanism},
                                           jaas=jaas_config(cfg, listener.name, mechanism) or "")
    except SaslClientError as e:
        raise InvalidConfigError(f"Inter-broker listener {listener.name}: sasl.mechanism.inter.broker.protocol="
                                 f"{mechanism}: {e}") from None


class SaslListener:
    """The SASL side of one SASL_PLAINTEXT or SASL_SSL listener: its mechanisms and their users."""

    def __init__(self, name: str, protocol: str, config: Callable[[], BrokerConfig],
                 scram_credential: Callable[[str, str], ScramCredential | None]):
        self.name = name
        self.protocol = protocol
        self._config = config
        self.scram_credential = scram_credential
        self._load(config())

    def _load(self, cfg: BrokerConfig) -> None:
        self._seen = cfg
        mechanisms = [m.strip().upper() for m in cfg.listener_setting(self.name, "sasl.enabled.mechanisms")
                      if m.strip()]
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise InvalidConfigError(
                f"Listener {self.name}: sasl.enabled.mechanisms={','.join(mechanisms)}: "
                f"{', '.join(unsupported) or 'none'} cannot be served (tierlog serves "
                f"{', '.join(SUPPORTED_MECHANISMS)}; GSSAPI is Kafka's default and needs setting explicitly)")
        self.mechanisms = tuple(mechanisms)
        self.users = plain_users(cfg, self.name) if "PLAIN" in mechanisms else {}
        settings = {k: cfg.listener_setting(self.name, k) for k in _OAUTH_SETTINGS}
        self.validate_token = oauth_validator(settings) if "OAUTHBEARER" in mechanisms else None
        self.reauth_ms = int(cfg.listener_setting(self.name, "connections.max.reauth.ms"))
        self.max_receive = int(cfg.listener_setting(self.name, "sasl.server.max.receive.size"))

    def refresh(self) -> None:
        """Settings as the broker's effective configuration has them now (dynamic updates)."""
        cfg = self._config()
        if cfg is not self._seen:
            try:
                self._load(cfg)
            except InvalidConfigError as e:
                self._seen = cfg
                log.error("Listener %s keeps its SASL settings: %s", self.name, e.message)

    def mechanism_server(self, mechanism: str, reauthenticating: bool):
        if mechanism == "PLAIN":
            return PlainServer(self.users)
        if mechanism in SCRAM_MECHANISMS:
            return ScramMechanismServer(mechanism, self.scram_credential, reauthenticating)
        return OAuthBearerServer(self.validate_token)


# States of a connection's authentication
HANDSHAKE, RAW_TOKENS, AUTHENTICATE, COMPLETE, FAILED = "handshake", "raw", "authenticate", "complete", "failed"


class SaslConnection:
    """One connection's authentication (and re-authentications)."""

    def __init__(self, listener: SaslListener, peer, ip: str, tls: bool, warn):
        listener.refresh()
        self.listener = listener
        self.peer = peer_text(peer)
        self.ip, self.tls = ip, tls
        self.state = HANDSHAKE
        self._warn = warn
        self.server = None
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.expires_at: float | None = None  # time.monotonic() when the session ends
        self.reauthenticating = False
        self.reauth_started: float | None = None  # time.monotonic() of the last re-authentication's start
        self.failure: str | None = None

    @property
    def protocol(self) -> str:
        return self.listener.protocol

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at and not self.reauthenticating

    # ------------------------------------------------------------------ SaslHandshake

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code of the handshake's answer (0: go on)."""
        if self.state == COMPLETE:
            # KIP-368: a re-authentication starts with a handshake; only with SaslAuthenticate (v1 handshake),
            # only for a session that ends (connections.max.reauth.ms or an expiring token), and at most once a
            # second (Kafka's KafkaChannel rule). Else the handshake is refused and the connection goes on.
            now = time.monotonic()
            if version < 1 or self.expires_at is None or (
                    self.reauth_started is not None and now - self.reauth_started < MIN_REAUTH_INTERVAL_S):
                return IllegalSaslStateError.code
            self.reauth_started = now
            self.reauthenticating = True
        elif self.state != HANDSHAKE:
            self._fail(f"unexpected SaslHandshake in state {self.state}")
            return IllegalSaslStateError.code
        if mechanism not in self.listener.mechanisms or (self.reauthenticating and mechanism != self.mechanism):
            self._fail(f"mechanism {mechanism!r} is not enabled")
            return UnsupportedSaslMechanismError.code
        self.mechanism = mechanism
        self.server = self.listener.mechanism_server(mechanism, self.reauthenticating)
        self.state = RAW_TOKENS if version == 0 else AUTHENTICATE
        return 0

    # ------------------------------------------------------------------ tokens

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to a token; SaslFailure ends the exchange (logged here, once)."""
        try:
            out = self.server.evaluate(token)
        except SaslFailure as e:
            self._fail(e.reason, getattr(self.server, "username", None))
            raise
        except Exception as e:  # noqa: BLE001 - a mechanism's bug must fail the exchange, never the broker
            log.exception("SASL %s exchange with %s failed unexpectedly", self.mechanism, self.ip)
            self._fail(f"{type(e).__name__}")
            raise SaslFailure(f"Authentication failed: unexpected error in SASL mechanism {self.mechanism}",
                              "unexpected error") from None
        if self.server.complete:
            self._complete()
        return out

    def _complete(self) -> None:
        principal = KafkaPrincipal(USER_TYPE, self.server.username)
        if self.reauthenticating and principal != self.principal:
            reason = f"re-authentication as {principal} on a connection of {self.principal}"
            self._fail(reason, self.server.username)
            raise SaslFailure(f"Cannot change principals during re-authentication from {self.principal}: "
                              f"{principal}", reason)
        if self.reauthenticating:
            log.info("Connection from %s re-authenticated as %s with %s on listener %s", self.peer, principal,
                     self.mechanism, self.listener.name)
        self.principal = principal
        self.state = COMPLETE
        self.reauthenticating = False
        now_ms = time.time() * 1000
        lifetime = self.listener.reauth_ms or None
        token_expiry = getattr(self.server, "expires_at_ms", None)
        if token_expiry is not None:  # a token's session ends with the token, as in Kafka
            left = max(0, int(token_expiry - now_ms))
            lifetime = left if lifetime is None else min(lifetime, left)
        self.session_lifetime_ms = lifetime or 0
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else None
        log.debug("%s authenticated as %s with %s on listener %s", self.ip, principal, self.mechanism,
                  self.listener.name)

    def _fail(self, reason: str, user: str | None = None) -> None:
        self.state = FAILED
        self.failure = reason
        self._warn.warning(("sasl", self.listener.name, self.mechanism, reason),
                           "Failed %sauthentication with %s (user %s, mechanism %s, listener %s): %s",
                           "re-" if self.reauthenticating else "", self.peer, user if user is not None else "?",
                           self.mechanism or "-", self.listener.name, reason)

    def session(self) -> Session:
        """Who is on the connection once it authenticated (made once: a re-authentication keeps the principal)."""
        return Session(principal=self.principal, client_host=self.ip, listener=self.listener.name,
                       security_protocol=self.protocol, peer=self.peer)


class SaslApis:
    """SaslHandshake (v0-1) and SaslAuthenticate (v0-2): advertised by every listener, as in Kafka. The
    connection's SASL state comes with the request (``ctx.sasl``, None on PLAINTEXT and SSL listeners)."""

    def register(self, registry) -> None:
        registry.register(ApiKey.SASL_HANDSHAKE, 0, 1, self.sasl_handshake)
        registry.register(ApiKey.SASL_AUTHENTICATE, 0, 2, self.sasl_authenticate)

    async def sasl_handshake(self, ctx: RequestContext):
        sasl = ctx.sasl
        if sasl is None:  # a PLAINTEXT or SSL listener: there is nothing to authenticate
            return build_response(ctx, {"error_code": IllegalSaslStateError.code, "mechanisms": []})
        authenticated = sasl.state == COMPLETE
        code = sasl.handshake(ctx.request.mechanism, ctx.api_version)
        if authenticated and code == IllegalSaslStateError.code:  # a refused re-authentication lists no mechanism
            return build_response(ctx, {"error_code": code, "mechanisms": []})
        return build_response(ctx, {"error_code": code, "mechanisms": list(sasl.listener.mechanisms)})

    async def sasl_authenticate(self, ctx: RequestContext):
        sasl = ctx.sasl
        if sasl is None or sasl.state != AUTHENTICATE:
            # Kafka's KafkaApis answer: on a non-SASL listener, or after the exchange completed (the connection
            # goes on); in the middle of an exchange the connection is closed after the answer
            done = sasl is None or sasl.state == COMPLETE
            message = ("SaslAuthenticate request received after successful authentication" if done
                       else f"Unexpected SASL_AUTHENTICATE in state {sasl.state}")
            if not done:
                sasl._fail(f"SaslAuthenticate in state {sasl.state}")
            return build_response(ctx, {"error_code": IllegalSaslStateError.code, "error_message": message})
        try:
            out = sasl.evaluate(bytes(ctx.request.auth_bytes))
        except SaslFailure as e:
            return build_response(ctx, {"error_code": SaslAuthenticationFailedError.code,
                                        "error_message": e.client_message})
        # Complete: the socket server makes the connection's session (a re-authentication keeps it, as the
        # principal it proved is the one the session has).
        lifetime = sasl.session_lifetime_ms if sasl.state == COMPLETE else 0
        return build_response(ctx, {"auth_bytes": out, "session_lifetime": lifetime})


def sasl_listeners(listeners, config: Callable[[], BrokerConfig],
                   scram_credential: Callable[[str, str], ScramCredential | None]) -> dict[str, SaslListener]:
    out: dict[str, SaslListener] = {}
    for listener in listeners:
        if listener.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL") and listener.name not in out:
            out[listener.name] = SaslListener(listener.name, listener.security_protocol, config, scram_credential)
    return out


__all__ = ["AUTHENTICATE", "COMPLETE", "FAILED", "HANDSHAKE", "RAW_TOKENS", "SaslApis",
           "SaslConnection", "SaslListener", "jaas_config", "sasl_listeners"]

