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
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broker.wait_stop_requested())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
    finally:
        await broker.shutdown()
        unclean = broker.log_manager.unclean_at_shutdown if broker.log_manager is not None else []
        if broker.fatal_error:
            print(f"tierlog broker stopped: {broker.fatal_error}", flush=True)
        elif unclean:  # a failed disk: its logs are recovered at the next start
            print(f"tierlog broker stopped; log dirs left for recovery: {', '.join(unclean)}", flush=True)
        else:
            print("tierlog broker stopped cleanly", flush=True)
    return 1 if broker.fatal_error else 0
