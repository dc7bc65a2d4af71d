"""The broker: start-up and shutdown (``broker``), the replica manager and partitions, the Kafka API
handlers (``apis``), and its wings: ``network`` (listeners, TLS, SASL), ``replication``, ``transactions``,
``quotas`` and ``http`` (docs/architecture.md, "The server's wings"). ``cluster_mode`` holds what differs
between a single node and a ZooKeeper-mode cluster, ``remote_storage`` tiered storage as the broker builds it."""
