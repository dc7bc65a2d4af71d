"""What a listener's security protocol adds to its connections (Kafka's channel builders).

- PLAINTEXT: nothing; the connection's principal is ``User:ANONYMOUS``. The socket server's plaintext path
  does not go through this module at all.
- SSL: a :class:`TlsListener` holds the listener's server context, built from its ``ssl.*`` settings
  (``listener.name.<name>.ssl.*`` over the broker-wide ones). The TLS handshake runs when a connection is
  accepted; the principal comes from the client certificate's subject through
  ``ssl.principal.mapping.rules``.
- SASL_PLAINTEXT, SASL_SSL: the connection authenticates with SASL first
  (:mod:`tierlog.server.network.sasl_authenticator`); SASL_SSL runs its TLS handshake (a :class:`TlsListener`) before.

Certificate reload, as Kafka's dynamic ``ssl.keystore.*`` updates: the context is looked at again whenever
the broker's effective configuration changes (a dynamic broker config was altered, e.g. with
kafka-configs --alter --entity-type brokers --entity-name <id> --add-config
listener.name.ssl.ssl.keystore.location=...); when the listener's settings differ, or a keystore or
truststore file they name was replaced, a new context is built and the next connections get it. Connections
already open keep theirs. A new context that cannot be built is logged and the previous one kept (the
alteration itself was already checked by building it: the controller asks every TLS listener of the broker
first, see :func:`dynamic_config_check`). As in Kafka, the new certificate must keep the subject and the
subject alternative names of the one in use unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from tierlog.config import BrokerConfig
from tierlog.errors import InvalidConfigError
from tierlog.security import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from tierlog.security.principal import NoMatchingRule, ssl_principal
from tierlog.security.ssl_factory import (
    client_context,
    file_stamps,
    identity_change,
    server_context_with_certificate,
)

log = logging.getLogger(__name__)


def endpoint_for_client(broker, ctx) -> tuple[str, int]:
    """(host, port) of ``broker`` as the client of request ``ctx`` reaches it: its endpoint on the listener the
    request came in on (Kafka answers Metadata, FindCoordinator and DescribeCluster per listener, so a TLS
    client is sent to TLS ports), else (a request made in process) its first advertised listener."""
    listener = ctx.listener
    if listener is None:
        return broker.host, broker.port
    return broker.endpoint(listener)


class TlsListener:
    """The TLS side of one SSL listener: its current server context and certificate, its principal mapper."""

    def __init__(self, name: str, config: Callable[[], BrokerConfig]):
        self.name = name
        self._config = config
        cfg = config()
        self._seen = cfg
        self._settings = cfg.listener_ssl_settings(name)
        self._stamps = file_stamps(self._settings)
        self.context, self.certificate = server_context_with_certificate(self._settings, where=f"listener {name}")
        self.mapper = SslPrincipalMapper(cfg.listener_setting(name, "ssl.principal.mapping.rules"))
        self.reloads = 0

    def _candidate(self, cfg: BrokerConfig):
        """(context, certificate, settings, stamps) ``cfg`` gives this listener, None when nothing changed;
        InvalidConfigError when they cannot be used, or change the certificate's identity where Kafka's
        ssl.allow.dn.changes / ssl.allow.san.changes do not allow it."""
        settings = cfg.listener_ssl_settings(self.name)
        stamps = file_stamps(settings)
        if settings == self._settings and stamps == self._stamps:
            return None
        context, certificate = server_context_with_certificate(settings, where=f"listener {self.name}")
        why = identity_change(self.certificate, certificate, settings["ssl.allow.dn.changes"],
                              settings["ssl.allow.san.changes"])
        if why is not None:
            raise InvalidConfigError(f"listener {self.name}: {why}")
        return context, certificate, settings, stamps

    def check(self, cfg: BrokerConfig) -> None:
        """Refuse (InvalidConfigError) a dynamic change this listener could not take."""
        self._candidate(cfg)

    def current_context(self) -> ssl.SSLContext:
        """The context for a new connection: rebuilt once the listener's settings or files changed."""
        cfg = self._config()
        if cfg is self._seen:
            return self.context
        self._seen = cfg
        try:
            candidate = self._candidate(cfg)
        except InvalidConfigError as e:
            log.error("Listener %s keeps its TLS certificate: the new ssl settings cannot be used: %s", self.name,
                      e.message)
            return self.context
        if candidate is None:
            return self.context
        self.context, self.certificate, self._settings, self._stamps = candidate
        self.reloads += 1
        log.info("Listener %s: TLS keystore reloaded (%s); new connections use it", self.name,
                 self.certificate.subject.rfc4514_string())
        return self.context

    def principal(self, ssl_object: ssl.SSLObject | None) -> KafkaPrincipal:
        """The principal of a connection that completed its handshake; NoMatchingRule refuses it."""
        if ssl_object is None:
            return ANONYMOUS
        return ssl_principal(ssl_object.getpeercert(binary_form=True), self.mapper)


def dynamic_config_check(listeners: dict[str, TlsListener]) -> Callable[[BrokerConfig], None]:
    """What the controller calls before accepting a dynamic change of this broker's configuration: every TLS
    listener must be able to take it (a new keystore is read and its identity compared, as Kafka validates a
    dynamic keystore update), else INVALID_CONFIG and nothing changes."""
    def check(effective: BrokerConfig) -> None:
        for tls in listeners.values():
            tls.check(effective)
    return check


def listener_security(listeners, config: Callable[[], BrokerConfig]) -> dict[str, TlsListener]:
    """The TLS side of every SSL and SASL_SSL listener by name (PLAINTEXT listeners have none); SslConfigError (an
    InvalidConfigError naming the listener) when one cannot be built."""
    out: dict[str, TlsListener] = {}
    for listener in listeners:
        if listener.security_protocol in ("SSL", "SASL_SSL") and listener.name not in out:
            out[listener.name] = TlsListener(listener.name, config)
    return out


def inter_broker_client_context(cfg: BrokerConfig) -> ssl.SSLContext | None:
    """The context this broker connects to other brokers with: None for a PLAINTEXT or SASL_PLAINTEXT
    inter-broker listener; for SSL and SASL_SSL, the listener's ssl settings used as a client's (its keystore is
    this broker's certificate, its truststore verifies the others', ssl.endpoint.identification.algorithm
    checks their host names)."""
    listener = cfg.inter_broker_listener
    if listener.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    return client_context(cfg.listener_ssl_settings(listener.name), where=f"inter-broker listener {listener.name}")


__all__ = ["NoMatchingRule", "TlsListener", "dynamic_config_check",
           "endpoint_for_client", "inter_broker_client_context", "listener_security"]
