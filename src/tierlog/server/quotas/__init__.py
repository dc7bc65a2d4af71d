"""Quotas: what a client or a replica may take from the broker.

- :mod:`.client_quota`: client quotas (Kafka's ClientQuotaManager and ClientRequestQuotaManager): produce and
  fetch byte rates and the request percentage per user and client id, and the throttle times they give;
- :mod:`.replication_quota`: replication throttles (Kafka's ReplicationQuotaManager), which keep a
  reassignment's copying from starving producers and consumers;
- :mod:`.builder`: ``build_quotas``, the client quotas as the composition root builds them.

The socket server (:mod:`tierlog.server.network`) and the Produce and Fetch handlers ask them; the limits on
connections and request memory at the socket are the network wing's own.
"""
