"""The broker: start-up and shutdown (``broker``), the replica manager and partitions, the Kafka API
handlers (``apis``), and its wings: ``network`` (listeners, TLS, SASL), ``replication``, ``transactions``,
``quotas`` and ``http`` (docs/architecture.md, "The server's wings")."""
