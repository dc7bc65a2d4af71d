"""docs/spark.md's quickstart continues the README's tour as written: tests/cli/readme_tour.py runs the tour
(in a network namespace of its own, on the README's fixed addresses), then the ``<!-- spark-quickstart -->``
block in the tour's folder against the same broker. Its tables must count the lines and characters of the
tour's demo.txt and their lengths. One Spark JVM of its own (about 1.6 GB): it runs in the spark group."""

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


@pytest.mark.xdist_group("spark")
def test_the_spark_quickstart_reads_what_the_tour_produced(tmp_path):
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("the Spark quickstart", "pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None:
        unavailable("the Spark quickstart", "java (a JDK 17+) is not on PATH")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tierlog").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tierlog "$@"\n')
    (bin_dir / "tierlog").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(["unshare", "-n", sys.executable, str(ROOT / "tests/cli/readme_tour.py"), str(tmp_path),
                          "--spark"], env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-4000:]
    steps = json.loads(run.stdout.strip().splitlines()[-1])["steps"]
    quickstart = steps[-1]
    assert quickstart["command"] == "python quickstart.py", [(s["command"], s["exit"]) for s in steps]
    assert quickstart["exit"] == 0, quickstart["stderr"]

    lines = (tmp_path / "demo.txt").read_bytes().splitlines()
    rows = [[cell.strip() for cell in row.strip("|").split("|")]
            for row in quickstart["stdout"].splitlines() if re.match(r"\|\s*\d", row)]
    assert rows[0] == [str(len(lines)), str(sum(map(len, lines)))], quickstart["stdout"]
    lengths = Counter(map(len, lines))
    assert rows[1:] == [[str(n), str(lengths[n])] for n in sorted(lengths)], quickstart["stdout"]
