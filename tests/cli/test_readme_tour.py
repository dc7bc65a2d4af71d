"""The README's tour, run as written (tests/cli/readme_tour.py) in a network namespace of its own: every
command succeeds, the segments reach the remote tier, the consumed copy equals the produced file, and the
broker stops cleanly. Then docs/spark.md's quickstart continues the tour against the same broker: its tables
must count the lines and characters of the tour's demo.txt and their lengths (one Spark JVM of its own, about
1.6 GB). The timings are printed (pytest -s) for the record."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from tests.cli.clilib import ROOT
from tests.harness.prerequisites import unavailable

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


def test_the_readme_tour_and_the_spark_quickstart_run_as_written(tmp_path):
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("the Spark quickstart", "pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None:
        unavailable("the Spark quickstart", "java (a JDK 17+) is not on PATH")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    bin_dir = tmp_path / "bin"  # `tierlog` is this tree's code, whatever the environment installed
    bin_dir.mkdir()
    (bin_dir / "tierlog").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tierlog "$@"\n')
    (bin_dir / "tierlog").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)  # the quickstart's `python` is this interpreter
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(["unshare", "-n", sys.executable, str(ROOT / "tests/cli/readme_tour.py"), str(tmp_path),
                          "--spark"], env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    steps = report["steps"]
    for step in steps[1:]:
        assert step["exit"] == 0, step
    commands = [s["command"] for s in steps]
    assert len(commands) >= 9 and commands[0].startswith("tierlog broker"), commands
    status = next(s for s in steps if s["command"].startswith("tierlog tier status"))
    assert "demo" in status["stdout"], status
    assert any("read back byte for byte" in s.get("stdout", "") for s in steps), steps
    assert (tmp_path / "demo.txt").read_bytes() == (tmp_path / "copy.txt").read_bytes()
    remote = [p for p in tmp_path.rglob("*.log") if "remote" in p.relative_to(tmp_path).parts]
    assert remote, "no segment reached the remote folder"
    assert report["broker_exit"] == 0 and any("stopped cleanly" in line for line in report["broker_tail"])

    quickstart = steps[-1]
    assert quickstart["command"] == "python spark_quickstart.py", commands
    lines = (tmp_path / "demo.txt").read_bytes().splitlines()
    rows = [[cell.strip() for cell in row.strip("|").split("|")]
            for row in quickstart["stdout"].splitlines() if re.match(r"\|\s*\d", row)]
    assert rows[0] == [str(len(lines)), str(sum(map(len, lines)))], quickstart["stdout"]
    lengths = Counter(map(len, lines))
    assert rows[1:] == [[str(n), str(lengths[n])] for n in sorted(lengths)], quickstart["stdout"]
    print("tour timings:", json.dumps([{"command": s["command"], "seconds": s["seconds"],
                                         "runs": s.get("runs")} for s in steps]))
