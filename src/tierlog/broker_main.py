"""``tierlog broker``: run a broker until SIGINT or SIGTERM, then shut it down cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from tierlog import logs, task_dump
from tierlog.errors import InvalidConfigError, KafkaError, StartupError
from tierlog.server.broker import Broker

log = logging.getLogger(__name__)

#: The environment variable that picks the broker's event loop (see :func:`event_loop_runner`).
EVENT_LOOP_ENV = "TIERLOG_EVENT_LOOP"
EXIT_INVALID_CONFIG = 2  # the command line's status for a setting that cannot work (tierlog.cli.EXIT_INVALID)


#: The broker's ``sys.setswitchinterval`` (Python's default is 5 ms).
GIL_SWITCH_INTERVAL_S = 0.001


def run(cfg: Any, debug: bool = False) -> int:
    """Start the broker described by ``cfg`` (a :class:`tierlog.config.BrokerConfig`); returns the exit status.
    ``debug``: a start that fails logs its traceback too (else one line says why)."""
    # The broker reports start-up and recovery; repeating warnings are counted per interval.
    logs.configure(logging.INFO, repeat_interval_s=cfg["internal.log.repeat.interval.ms"] / 1000)
    # The event loop gives up the GIL in every system call and must win it back from a worker thread running
    # Python (a big request's parse or answer): each time costs up to the switch interval, several times per
    # request. 1 ms instead of 5 cut a probe's worst round trip during a 16 MB OffsetFetch from 20 to 12 ms.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    return event_loop_runner()(_serve(cfg, debug))


def event_loop_runner() -> Callable:
    """The loop the broker runs on: uvloop (a dependency where it exists) unless ``TIERLOG_EVENT_LOOP=asyncio``
    asks for asyncio's own loop (to compare the two, or to rule the loop out when chasing a fault); asyncio's
    where uvloop is not installed."""
    choice = os.environ.get(EVENT_LOOP_ENV, "uvloop").strip().lower()
    if choice not in ("uvloop", "asyncio"):
        raise InvalidConfigError(f"{EVENT_LOOP_ENV} must be uvloop or asyncio, not {choice!r}")
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.info("uvloop is not installed: the broker runs on asyncio's event loop")
        else:
            return uvloop.run
    return asyncio.run


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop 0.23.0`` or ``asyncio``: what the broker logs at its start."""
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        import uvloop
        return f"uvloop {uvloop.__version__}"
    return "asyncio"


async def _serve(cfg: Any, debug: bool) -> int:
    broker = Broker(cfg)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, task_dump.dump_tasks)  # where each task waits (a hang's cause)
    try:
        await broker.start()
    except Exception as e:  # noqa: BLE001 - said once, with its reason; the exit status tells the rest
        return await _failed_start(broker, e, debug)
    log.info("Event loop: %s", loop_name(loop))
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


async def _failed_start(broker: Broker, e: Exception, debug: bool) -> int:
    """A start that failed: release what was built, then say why in one line on stderr (never "stopped
    cleanly"). A setting that cannot work exits with the command line's invalid-configuration status,
    anything else with 1. The traceback is logged only with ``--debug`` (or for a bug)."""
    try:
        await broker.shutdown()
    except Exception as released:  # noqa: BLE001 - half built: what cannot be released is only logged
        log.warning("Releasing the half-started broker failed: %s", released, exc_info=released if debug else None)
    sys.stderr.write(f"tierlog: error: broker failed to start: {start_failure(e, debug)}\n")
    sys.stderr.flush()
    if debug:
        log.error("The broker failed to start", exc_info=e)
    return EXIT_INVALID_CONFIG if isinstance(e, InvalidConfigError) else 1


def start_failure(e: BaseException, debug: bool = False) -> str:
    """The reason of a failed start as the one line says it: the operator's to fix (a port taken, a log dir
    locked or unusable, a setting) in its own words, anything else as a bug to report."""
    if isinstance(e, StartupError):
        return str(e)
    if isinstance(e, KafkaError):
        return e.message
    if isinstance(e, OSError):  # a file the broker needs, not foreseen by the checks above
        where = f" ({e.filename})" if e.filename else ""
        return f"{(e.strerror or str(e)).lower()}{where}; check that path and its permissions"
    hint = "" if debug else "; run with --debug for the traceback"
    return f"unexpected {type(e).__name__}: {e} (a bug in tierlog, please report it{hint})"
