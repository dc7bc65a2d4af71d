"""Kafka API handlers, one module per API family.

Each module defines a class taking the services it uses (the replica manager, the controller, the group
coordinator), with ``register(registry)`` that registers its handlers and the version range each
implements. The broker (the composition root, :mod:`tierlog.server.broker`) builds and registers every
family; the ApiVersions answer is derived from the registry, so what is advertised is exactly what is
registered. A handler is ``async def handler(ctx: RequestContext) -> response | None`` (None: no
response, acks=0). Handlers translate the wire to service calls and back; they decide nothing about
storage.
"""
