"""Kafka API handlers, one module per API family.

Each module defines a class taking the broker, with ``register(registry)`` that registers its
handlers and the version range each implements; the ApiVersions answer is derived from the
registry, so what is advertised is exactly what is registered here. A handler is
``async def handler(ctx: RequestContext) -> response | None`` (None: no response, acks=0).
"""

from __future__ import annotations

import importlib

FAMILIES = (
    ("tierlog.server.apis.metadata", "MetadataApis"),
    ("tierlog.server.apis.produce", "ProduceApis"),
    ("tierlog.server.apis.fetch", "FetchApis"),
    ("tierlog.server.apis.offsets", "OffsetApis"),
    ("tierlog.server.apis.admin", "AdminApis"),
    ("tierlog.server.apis.configs", "ConfigApis"),
    ("tierlog.server.apis.groups", "GroupApis"),
)


def register_all(broker) -> None:
    for module, cls in FAMILIES:
        family = getattr(importlib.import_module(module), cls)(broker)
        family.register(broker.registry)
