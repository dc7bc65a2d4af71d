"""The network wing: the broker's Kafka listeners, from the socket to a decoded request and back.

- :mod:`.socket_server`: the socket server (Kafka's ``SocketServer``);
- :mod:`.listener_security`: each listener's TLS context, principal mapping and re-loadable keystores;
- :mod:`.sasl_authenticator`: SASL on a listener (mechanisms, credentials, KIP-368 re-authentication).

The socket server logs as ``tierlog.server.network``.
"""
