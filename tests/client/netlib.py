"""Small helpers of the client's network-layer tests (tests/client/test_network.py, test_metadata_staleness.py)."""

from __future__ import annotations

import asyncio
import socket

from tierlog.client.network import KafkaClient
from tierlog.config.client import validate_client_config


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def dead_port() -> int:
    """A loopback port nobody listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def network_client(bootstrap: str, **settings) -> KafkaClient:
    """The client's network layer alone, with settings given as keyword arguments (dots as underscores)."""
    config = validate_client_config("admin", {"bootstrap.servers": bootstrap,
                                              **{k.replace("_", "."): v for k, v in settings.items()}})
    return KafkaClient(config, "admin")
