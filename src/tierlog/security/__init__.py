"""Security of connections, as Kafka configures it: TLS contexts from Kafka's ``ssl.*`` settings
(:mod:`tierlog.security.ssl_factory`, used by the broker's listeners and by tierlog's client) and the
principal a connection authenticates as (:mod:`tierlog.security.principal`: ``KafkaPrincipal``, Kafka's
``ssl.principal.mapping.rules``), and the broker's one session type for a connection
(:mod:`tierlog.security.session`).

The package is sans-configuration-table: it reads plain mappings of setting name to value, so the
client (layer 2) and the broker (layer 5) share it. SASL, sans-IO, is in ``jaas``, ``scram``, ``oauthbearer``,
``sasl_server`` (the broker's mechanisms) and ``sasl_client`` (a client's settings and exchange).
"""

from tierlog.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from tierlog.security.ssl_factory import SSL_SETTINGS, SslConfigError, client_context, server_context

__all__ = ["ANONYMOUS", "SSL_SETTINGS", "KafkaPrincipal", "SslConfigError", "SslPrincipalMapper", "client_context",
           "server_context"]
