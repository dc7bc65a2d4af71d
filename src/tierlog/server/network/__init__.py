"""The network wing: the broker's Kafka listeners, from the socket to a decoded request and back.

- :mod:`.socket_server`: the socket server (Kafka's ``SocketServer``): accepting, framing, the per-connection
  request loop, the request quota's throttling at the socket, and the SASL exchange before the first request;
- :mod:`.channel`: a connection's reads and writes under that loop (grouped answers, the idle timeout, TLS
  reads into a buffer, file regions sent with sendfile or in groups through TLS);
- :mod:`.connection_quotas`: connection limits at accept (Kafka's ``ConnectionQuotas``) and descriptors kept
  free for storage;
- :mod:`.memory_pool`: request memory (Kafka's ``MemoryPool``, ``queued.max.request.bytes``) and giving freed
  memory back to the system;
- :mod:`.listeners`: the listening sockets and the line that says why one cannot bind;
- :mod:`.listener_security`: each listener's TLS context, principal mapping and re-loadable keystores;
- :mod:`.sasl_authenticator`: SASL on a listener (mechanisms, credentials, KIP-368 re-authentication);
- :mod:`.security`: ``build_security``, the broker's security as one frozen value (TLS, SASL, the authorizer,
  the inter-broker TLS context and SASL credentials).

The socket server and its helpers log as ``tierlog.server.network``. This wing hands requests to the API
handlers through the protocol's :class:`~tierlog.protocol.HandlerRegistry`: it never imports the handlers
(``tierlog.server.apis``) nor the replica manager (tests/test_layers.py checks).
"""
