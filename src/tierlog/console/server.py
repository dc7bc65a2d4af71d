"""Run the console until SIGINT or SIGTERM: bind, say where, serve, close the cluster client."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Mapping
from typing import Any

from tierlog.console.app import console_endpoint
from tierlog.console.views import ConsoleViews


async def serve(bootstrap: str, host: str, port: int, *, admin_token: str | None = None, timeout_s: float = 10.0,
                client_config: Mapping[str, Any] | None = None,
                on_bound: Callable[[str], None] = print, metrics_interval_s: float = 5.0) -> None:
    """Serve the console of the cluster at ``bootstrap`` on ``host``:``port`` (0: any free port), calling
    ``on_bound`` with its URL once it accepts connections; returns after SIGINT or SIGTERM."""
    views = ConsoleViews(bootstrap, timeout_s, client_config)
    views.metrics_interval_s = metrics_interval_s
    endpoint = console_endpoint(views, admin_token)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        bound = await endpoint.start(host, port)
        shown = f"[{host}]" if ":" in host else host
        on_bound(f"Console on http://{shown}:{bound}/ for the cluster at {bootstrap}"
                 f" (actions {'on: they need the admin token' if admin_token else 'off: read-only'})")
        await stop.wait()
    finally:
        await endpoint.stop()
        with contextlib.suppress(Exception):  # closing a client of an unreachable cluster must not hide the exit
            await views.close()
