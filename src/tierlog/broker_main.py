"""``tierlog broker``: run a broker until SIGINT or SIGTERM, then shut it down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from tierlog.server.broker import Broker

log = logging.getLogger(__name__)


def run(cfg: Any) -> int:
    """Start the broker described by ``cfg`` (a :class:`tierlog.config.BrokerConfig`); returns the exit status."""
    logging.getLogger().setLevel(logging.INFO)  # the broker reports start-up and recovery
    try:
        import uvloop  # noqa: F401 - optional speed-up (tierlog[fast])
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_serve(cfg))


async def _serve(cfg: Any) -> int:
    broker = Broker(cfg)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
        for listener in broker.listeners:
            print(f"tierlog broker ready on {listener}", flush=True)
        await stop.wait()
    finally:
        await broker.shutdown()
        print("tierlog broker stopped cleanly", flush=True)
    return 0
