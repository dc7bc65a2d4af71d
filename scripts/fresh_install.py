#!/usr/bin/env python3
"""The README as a new user runs it: a new virtual environment, ``pip install .`` (not editable), the broker
from ``config/server.properties`` and the five-minute tour; with ``--extra spark`` a venv with only the
Spark extra that also runs docs/spark.md's quickstart on the tour's topic.

    python scripts/fresh_install.py                 # bare install: base dependencies only
    python scripts/fresh_install.py --extra spark   # .[spark] only, then the Spark quickstart
    python scripts/fresh_install.py --cluster       # bare install, then docs/operations.md's cluster section too

CI (.ci/run) runs both before the test suite: a module that imports a package the install does not bring
fails here, as it would for a user, even when the test environment happens to have it. The tour runs in a
network namespace of its own (``unshare -n``, tests/cli/readme_tour.py), so its fixed ports meet nothing
else. With ``--cluster`` the same venv then runs docs/operations.md's cluster section as written
(scripts/cluster_tour.py: ZooKeeper, three brokers, a tiered topic, a rolling restart, a fourth broker and a
reassignment onto it), also in a namespace of its own. Prints one JSON line (install seconds, venv size, each
step) and exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tour's driver and its checks, stdlib only (tests/cli/readme_tour.py)

from tests.cli import readme_tour  # noqa: E402


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _cluster_tour(venv: Path, env: dict, report: dict) -> bool:
    """docs/operations.md's cluster section, run by scripts/cluster_tour.py with the new venv's tierlog."""
    run = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "cluster_tour.py")], env=env,
                         capture_output=True, text=True, timeout=1200)
    lines = run.stdout.strip().splitlines()
    if not lines:
        report["error"] = f"the cluster tour failed ({run.returncode}): {run.stderr[-3000:]}"
        return False
    result = json.loads(lines[-1])
    report["cluster"] = {"seconds": result["seconds"],
                         "steps": [{k: s[k] for k in ("command", "exit", "seconds", "ready_seconds", "stop_seconds",
                                                      "settled_seconds", "error") if k in s}
                                   for s in result["steps"]]}
    if run.returncode != 0 or not result["ok"]:
        failed = [s for s in result["steps"] if s.get("error") or s.get("exit", 0) != 0]
        report["error"] = f"the cluster tour failed: {json.dumps(failed[-1:] or result['stops'])[-3000:]}"
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", choices=["spark"], help="install this extra (and run its quickstart)")
    parser.add_argument("--cluster", action="store_true",
                        help="then run docs/operations.md's cluster section (scripts/cluster_tour.py)")
    parser.add_argument("--keep", action="store_true", help="keep the venv and the tour's folder")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="tierlog-fresh-"))
    venv, work = base / "venv", base / "tour"
    target = f"{ROOT}[{args.extra}]" if args.extra else str(ROOT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON",
                                                             "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    report: dict = {"install": target.replace(str(ROOT), "."), "ok": False}
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", target], env=env, cwd=base,
                             capture_output=True, text=True)
        report["install_seconds"] = round(time.monotonic() - t0, 1)
        if pip.returncode != 0:
            report["error"] = "pip install failed: " + (pip.stderr or pip.stdout)[-3000:]
            return 1
        report["venv_mib"] = round(_tree_size(venv) / 2**20, 1)
        shutil.copytree(ROOT / "config", work / "config")
        # The driver is the repository's own (stdlib only); everything it runs comes from the new venv's PATH.
        command = ["unshare", "-n", str(venv / "bin" / "python"), str(ROOT / "tests" / "cli" / "readme_tour.py"),
                   str(work), *(["--spark"] if args.extra == "spark" else [])]
        tour = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=1800)
        lines = tour.stdout.strip().splitlines()
        if tour.returncode != 0 or not lines:
            report["error"] = f"the tour driver failed ({tour.returncode}): {tour.stderr[-3000:]}"
            return 1
        result = json.loads(lines[-1])
        report["steps"] = [{k: s.get(k) for k in ("command", "exit", "seconds")} for s in result["steps"]]
        wrong = readme_tour.problems(result, work, spark=args.extra == "spark")
        if wrong:
            report["error"] = "; ".join(wrong)
        else:
            report["ok"] = True
        if report["ok"] and args.cluster:
            report["ok"] = _cluster_tour(venv, env, report)
        return 0 if report["ok"] else 1
    finally:
        print(json.dumps(report))
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
