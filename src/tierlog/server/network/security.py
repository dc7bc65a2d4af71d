"""The broker's security, built once by the composition root: the TLS and SASL sides of its listeners, the
authorizer, and how it connects to the other brokers of a cluster (the inter-broker listener's TLS context and
SASL credentials)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.cluster import Controller
from tierlog.config import BrokerConfig
from tierlog.errors import InvalidConfigError, StartupError
from tierlog.security.sasl_client import SaslCredentials
from tierlog.security.scram import ScramCredential
from tierlog.server.authorizer import Authorizer
from tierlog.server.network.listener_security import (
    TlsListener,
    dynamic_config_check,
    inter_broker_client_context,
    listener_security,
)
from tierlog.server.network.sasl_authenticator import SaslListener, inter_broker_credentials, sasl_listeners

log = logging.getLogger("tierlog.server.broker")  # said at start-up, as the broker's own lines


@dataclass(frozen=True)
class Security:
    tls: dict[str, TlsListener]  # the TLS side of every SSL and SASL_SSL listener by name
    sasl: dict[str, SaslListener]  # the SASL side of every SASL_PLAINTEXT and SASL_SSL listener by name
    authorizer: Authorizer | None  # None: authorizer.class.name is not set, nothing is checked
    inter_broker_ssl: ssl.SSLContext | None  # a cluster whose inter-broker listener speaks TLS
    inter_broker_sasl: SaslCredentials | None  # ... or authenticates with SASL


def build_security(cfg: BrokerConfig, controller: Controller,
                   scram_credential: Callable[[str, str], ScramCredential | None]) -> Security:
    """Keystores are read now, so a broken one fails the start with its reason (StartupError). The controller
    asks every TLS listener before it accepts a dynamic change of this broker's configuration."""
    config = lambda: controller.effective_config  # noqa: E731 - dynamic broker configs included
    try:
        tls = listener_security(cfg.listeners, config)
        controller.add_reconfigurable(dynamic_config_check(tls))
        sasl = sasl_listeners(cfg.listeners, config, scram_credential)
        inter_broker_ssl = inter_broker_client_context(cfg) if controller.clustered else None
        inter_broker_sasl = inter_broker_credentials(cfg) if controller.clustered else None
    except InvalidConfigError as e:
        raise StartupError(e.message) from None
    return Security(tls, sasl, _authorizer(cfg, controller), inter_broker_ssl, inter_broker_sasl)


def _authorizer(cfg: BrokerConfig, controller: Controller) -> Authorizer | None:
    """Kafka's ACL authorizer when authorizer.class.name names it; None: no authorization at all."""
    if not cfg["authorizer.class.name"]:
        return None
    log.info("Authorization on (%s), super users: %s", cfg["authorizer.class.name"], cfg["super.users"] or "none")
    return Authorizer(lambda: controller.image.acls, cfg["super.users"], cfg["allow.everyone.if.no.acl.found"])


__all__ = ["Security", "build_security"]
