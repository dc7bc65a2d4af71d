"""Live brokers for server tests: ``tierlog broker`` run as a real process on 127.0.0.1.

``start_broker(**overrides)`` starts one (settings as Kafka keys with dots replaced by
underscores, or a dict) and returns a :class:`BrokerProcess`; every broker is stopped by PID at
the end of the test. ``broker`` is a ready broker with default settings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess:
    #: Every broker process started and not yet reaped, so a failing test cannot leave one running
    #: (tests/conftest.py kills those a test started and left behind).
    running: set = set()
    def __init__(self, log_dir: Path, overrides: dict[str, str]):
        self.log_dir = log_dir
        self.overrides = {"log.dirs": str(log_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
                          "group.initial.rebalance.delay.ms": "0", **overrides}
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        args = [sys.executable, "-m", "tierlog", "broker"]
        for k, v in self.overrides.items():
            args += ["-o", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        BrokerProcess.running.add(self)
        self.proc = subprocess.Popen(args, cwd=self.log_dir.parent, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("tierlog broker ready on "):
                self.port = int(line.rsplit(":", 1)[1])
                break
            if time.monotonic() > deadline:
                break
        if self.port is None:
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output))
        # Keep draining output so the broker never blocks on a full pipe.
        import threading
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self, timeout: float = 30) -> int:
        """Clean shutdown (SIGTERM); returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """Unclean stop (SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, clean: bool = True) -> BrokerProcess:
        """Stop (cleanly or by SIGKILL) and start again on the same port and log dir."""
        port = self.port
        self.stop() if clean else self.kill()
        self.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        self.port = None
        return self.start()


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def _start(settings: dict | None = None, **overrides) -> BrokerProcess:
        merged = {**(settings or {}), **{k.replace("_", "."): str(v) for k, v in overrides.items()}}
        b = BrokerProcess(tmp_path / f"logs{len(started)}", merged)
        started.append(b)
        return b.start()

    yield _start
    for b in started:
        b.kill()


@pytest.fixture
def broker(start_broker) -> BrokerProcess:
    return start_broker()
