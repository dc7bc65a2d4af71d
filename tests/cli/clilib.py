"""Running the ``tierlog`` command as users do: a separate process, with this tree's code first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.harness import tiered

ROOT = Path(__file__).resolve().parents[2]


def env(*first: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, first), str(ROOT / "src")])}


def tierlog(*args, input: bytes | str | None = None, timeout: float = 180, text: bool = True, paths=(),
            cwd=None) -> subprocess.CompletedProcess:
    if text and isinstance(input, bytes):
        input = input.decode()
    return subprocess.run([sys.executable, "-m", "tierlog", *map(str, args)], input=input, env=env(*paths),
                          capture_output=True, text=text, timeout=timeout, cwd=cwd)


def ok(*args, **kw) -> subprocess.CompletedProcess:
    """Run and insist on success (the failure shows stderr)."""
    result = tierlog(*args, **kw)
    assert result.returncode == 0, (args, result.stderr)
    return result


def as_json(*args, **kw):
    return json.loads(ok(*args, "--json", **kw).stdout)


def one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """A failure as the issue wants it: non-zero exit, exactly one line on stderr (tierlog: error: ...; ...),
    no traceback; returns the line."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("tierlog: error: ") and "; " in line, line
    for fragment in fragments:
        assert fragment in line, line
    return line


def wait_for(predicate, what: str, timeout: float = 120, every: float = 0.5):
    """The harness's poll (tests/harness/tiered.py), with the slower pace and longer deadline of commands."""
    return tiered.wait_for(predicate, what, timeout, every)
