"""What every long fault script needs to end by itself and clean up: a watchdog that stops every process the
run started (by PID) and exits 2 when the run overruns its limit, and SIGINT/SIGTERM turned into one
KeyboardInterrupt that goes through the script's cleanup (a second Ctrl-C cannot cut the cleanup short and
leave brokers, ZooKeeper, namespaces or a tmpfs behind)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from tests.harness import zookeeper as zk
from tests.harness.broker import BrokerProcess


def start_watchdog(limit_s: float, cleanup: Callable[[], None] = lambda: None, last_line: str | None = None) -> None:
    """After ``limit_s``: kill the brokers and ZooKeepers started in this process, run ``cleanup``, print
    ``last_line`` (a verdict a reader of the output expects) and exit 2."""
    def fire() -> None:
        print(f"\nwatchdog: the run overran {limit_s:.0f} s; stopping every process it started", flush=True)
        BrokerProcess.kill_running()
        zk.kill_running()
        cleanup()
        if last_line is not None:
            print(last_line, flush=True)
        os._exit(2)
    timer = threading.Timer(limit_s, fire)
    timer.daemon = True
    timer.start()


def stop_on_signals() -> None:
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt
