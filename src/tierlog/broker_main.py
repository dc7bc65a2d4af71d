"""``tierlog broker``: run a broker until SIGINT or SIGTERM, then shut it down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any

from tierlog import logs
from tierlog.errors import InvalidConfigError, KafkaError
from tierlog.server.broker import Broker

log = logging.getLogger(__name__)

EXIT_INVALID_CONFIG = 2  # the command line's status for a setting that cannot work (tierlog.cli.EXIT_INVALID)


def run(cfg: Any) -> int:
    """Start the broker described by ``cfg`` (a :class:`tierlog.config.BrokerConfig`); returns the exit status."""
    # The broker reports start-up and recovery; repeating warnings are counted per interval.
    logs.configure(logging.INFO, repeat_interval_s=cfg["internal.log.repeat.interval.ms"] / 1000)
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
    except Exception as e:  # noqa: BLE001 - said once, with its reason; the exit status tells the rest
        return await _failed_start(broker, e)
    try:
        for listener in broker.listeners:
            # One write with its newline: scripts parse this line, and a log line from another thread
            # (stderr, often the same pipe) must not land between the text and its end.
            sys.stdout.write(f"tierlog broker ready on {listener}\n")
            sys.stdout.flush()
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


async def _failed_start(broker: Broker, e: Exception) -> int:
    """A start that failed: release what was built, then say why (never "stopped cleanly"). A setting
    that cannot work exits with the command line's invalid-configuration status, anything else with 1."""
    if isinstance(e, KafkaError):
        reason = e.message
        log.error("The broker could not start: %s", reason)
    elif isinstance(e, OSError):  # a log dir that cannot be used, a port taken: the operator's to fix
        reason = str(e)
        log.error("The broker could not start: %s", reason)
    else:  # a bug: the traceback helps
        reason = f"{type(e).__name__}: {e}"
        log.error("The broker could not start: %s", reason, exc_info=e)
    try:
        await broker.shutdown()
    except Exception:  # noqa: BLE001 - half built: what cannot be released is only logged
        log.exception("Releasing the half-started broker failed")
    print(f"tierlog broker failed to start: {reason}", flush=True)
    return EXIT_INVALID_CONFIG if isinstance(e, InvalidConfigError) else 1
