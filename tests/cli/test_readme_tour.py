"""The README's tour, run as written (tests/cli/readme_tour.py) in a network namespace of its own: every
command succeeds, the segments reach the remote tier, the consumed copy equals the produced file, and the
broker stops cleanly. Then docs/spark.md's quickstart continues the tour against the same broker: its tables
must count the lines and characters of the tour's demo.txt and their lengths (one Spark JVM of its own, about
1.6 GB). The timings are printed (pytest -s) for the record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.cli import readme_tour
from tests.cli.clilib import ROOT
from tests.harness.prerequisites import unavailable

#: Set by .ci/run once scripts/fresh_install.py --extra spark ran this tour and quickstart, with the same checks
#: (readme_tour.problems), in a new venv with a bare install: the suite need not run them a second time.
CHECKED_BY_CI = "TIERLOG_README_TOUR_CHECKED"

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


def test_the_readme_tour_and_the_spark_quickstart_run_as_written(tmp_path):
    if os.environ.get(CHECKED_BY_CI):
        pytest.skip(f"run with the same checks by .ci/run in a bare venv ({os.environ[CHECKED_BY_CI]})")
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
    assert readme_tour.problems(report, tmp_path, spark=True) == []
    print("tour timings:", json.dumps([{"command": s["command"], "seconds": s["seconds"],
                                         "runs": s.get("runs")} for s in steps]))
