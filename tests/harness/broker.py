"""``tierlog broker`` as a real process on 127.0.0.1, for tests and benchmarks.

``BrokerProcess(log_dir, settings).start()`` runs ``python -m tierlog broker`` with this repository's
``src`` first on ``PYTHONPATH`` (so a worktree tests its own code), waits for its ``ready`` line and
keeps draining its output into ``output``. Settings are Kafka's keys (``log.dirs``, ``listeners`` and
``group.initial.rebalance.delay.ms=0`` are preset). ``stop()`` is a clean SIGTERM, ``kill()`` a SIGKILL,
``restart(clean)`` either one and a start on the same port and log dir. ``log_lines(output, level)`` parses
the log lines of the output (``LOG_LINE``: ``2026-11-26T01:02:03.456Z INFO tierlog.server.network: ...``).

``BrokerProcess.running`` holds every process started and not yet reaped; the harness plugin kills
those a test left behind, and all of them at the end of the session (in each pytest-xdist worker).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.harness import ROOT
from tests.harness.waiting import TimedOut, wait_until
from tierlog import task_dump

#: One log line of a tierlog process (tierlog.logs.FORMAT): ISO-8601 UTC time with ms, level, logger, message.
LOG_LINE = re.compile(r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) "
                      r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<logger>[\w.]+): (?P<message>.*)$")


def log_lines(output: list[str], level: str | None = None, logger: str | None = None) -> list[re.Match]:
    """The log lines among a process's ``output`` (tracebacks and printed lines left out), parsed with
    :data:`LOG_LINE`; only those of ``level`` and of loggers named ``logger`` or below it when given."""
    found = []
    for line in output:
        m = LOG_LINE.match(line.rstrip("\n"))
        if m is None or (level is not None and m["level"] != level):
            continue
        if logger is not None and not (m["logger"] == logger or m["logger"].startswith(logger + ".")):
            continue
        found.append(m)
    return found


class BrokerProcess:
    #: Every broker process started and not yet reaped, so a failing test cannot leave one running.
    running: set[BrokerProcess] = set()
    #: Brokers a test started for a module or session fixture that stops them itself (a shared cluster the
    #: test grew): the sweep after each test leaves them; the one at the session's end does not.
    shared: set[BrokerProcess] = set()

    def __init__(self, log_dir: Path, overrides: dict[str, str], *, nofile: int | None = None,
                 user: str | None = None):
        """``nofile``: the process's open file limit (RLIMIT_NOFILE, soft and hard), else inherited. ``user``:
        run the broker as this account (the test process must be root), see :func:`as_user`."""
        self.log_dir = log_dir
        self.nofile = nofile
        self.user = user
        self.overrides = {"log.dirs": str(log_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
                          "group.initial.rebalance.delay.ms": "0", **overrides}
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.output: list[str] = []
        #: where clients reach it, and what its argv runs under (``ip netns exec NS``: tests/harness/netns.py)
        self.host = "127.0.0.1"
        self.argv_prefix: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60) -> BrokerProcess:  # a loaded 2-core CI machine starts Python slowly
        args = [*self.argv_prefix, sys.executable, "-m", "tierlog", "broker"]
        for k, v in self.overrides.items():
            args += ["-o", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        if self.user is not None:
            args, env = as_user(self.user, args, env)
        BrokerProcess.running.add(self)
        nofile = self.nofile
        limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
        self.proc = subprocess.Popen(args, cwd=self.log_dir.parent, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, preexec_fn=limit)
        # not wait_until: it reads the broker's output line by line (blocking) until the ready line or its end
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
            # Where it hangs: every thread's Python stack (py-spy, when installed), and what it logged.
            dump = subprocess.run(["py-spy", "dump", "--pid", str(self.proc.pid)], capture_output=True, text=True,
                                  timeout=60) if shutil.which("py-spy") else None
            tasks = self.dump_tasks()
            self.kill()
            raise AssertionError(f"the broker did not stop within {timeout} s of SIGTERM\n"
                                 f"{dump.stdout if dump else '(py-spy not installed)'}\n"
                                 f"{''.join(self.output[-60:])}\n{tasks}") from None

    def dump_tasks(self, timeout: float = 10) -> str:
        """The broker's asyncio tasks and what each awaits (it writes them on SIGUSR1), or why there are none."""
        seen = len(self.output)
        self.proc.send_signal(signal.SIGUSR1)

        def dump():
            lines = self.output[seen:]
            if any(task_dump.END in line for line in lines):
                start = next(i for i, line in enumerate(lines) if line.startswith("asyncio tasks:"))
                return "".join(lines[start:])
            return None

        try:
            return wait_until(dump, timeout, what="the asyncio task dump")
        except TimedOut:
            return f"(no asyncio task dump within {timeout} s of SIGUSR1: the event loop is blocked)"

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

    @classmethod
    def kill_running(cls, keep: set[BrokerProcess] = frozenset()) -> None:
        """SIGKILL every registered broker not in ``keep`` and forget it."""
        for b in cls.running - keep:
            b.kill()
            cls.running.discard(b)
            cls.shared.discard(b)


def as_user(user: str, args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``args`` run as ``user`` (setpriv: its uid and gid, no supplementary groups) with no home (HOME set to
    a path that does not exist), as a service account runs. Where the interpreter or this tree sits under a
    folder the account cannot enter (pyenv under root's 0700 home), the process keeps CAP_DAC_READ_SEARCH:
    it may read and enter any folder, and still write none but its own (the log dir)."""
    pw = pwd.getpwnam(user)
    caps = []
    if not all(_world_searchable(Path(p)) for p in (sys.prefix, sys.base_prefix, ROOT)):
        caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    env = {k: v for k, v in env.items() if k not in ("HOME", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "USER")}
    env.update(HOME="/nonexistent", USER=user)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *caps, *args], env


def _world_searchable(path: Path) -> bool:
    """Whether every folder from / down to ``path`` may be entered by any user."""
    path = path.resolve()
    return all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))


@contextlib.contextmanager
def running_broker(folder: Path, overrides: dict[str, str]):
    """A broker on ``folder``/logs for a ``with`` block (a module's shared broker), stopped after it."""
    b = BrokerProcess(folder / "logs", overrides).start()
    try:
        yield b
    finally:
        b.stop()

