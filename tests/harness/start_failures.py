"""Starting a broker that must refuse to start, and checking how it said why."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.harness import ROOT
from tests.harness.broker import LOG_LINE

PREFIX = "tierlog: error: broker failed to start: "


def run_broker(cwd, *args: str, timeout: float = 120, **overrides: str) -> subprocess.CompletedProcess:
    """``tierlog broker`` with ``-o`` overrides (listeners on a free port unless given), to its exit."""
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", **overrides}
    argv = [sys.executable, "-m", "tierlog", "broker", *args]
    for k, v in settings.items():
        argv += ["-o", f"{k}={v}"]
    return subprocess.run(argv, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                          capture_output=True, text=True, timeout=timeout)


def said(result: subprocess.CompletedProcess) -> list[str]:
    """What the command line said on stderr besides the log lines."""
    return [line for line in result.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]


def assert_failed_start(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 1, nothing on stdout (neither ready nor stopped), exactly one line of the command line on
    stderr, no traceback; returns that line."""
    assert result.returncode == 1, result
    assert result.stdout == "", result
    assert "Traceback" not in result.stderr and "stopped cleanly" not in result.stderr, result.stderr
    lines = said(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(PREFIX), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
