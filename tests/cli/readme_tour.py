"""Runs the README's five-minute tour as written, inside a network namespace of its own so that the tour's
fixed addresses (127.0.0.1:9092 and :9464 of ``config/server.properties``) cannot meet another test's.

``python tests/cli/readme_tour.py WORKDIR [--spark]`` (started by tests/cli/test_readme_tour.py, and by
scripts/fresh_install.py in a new virtual environment, under ``unshare -n``) brings the namespace's loopback up,
starts the README's broker command in WORKDIR (a copy of ``config/``), runs each command of the tour's block
with bash and prints one JSON line: every command, its exit status, its output and how long it took. The tour
asks the reader to run ``tierlog tier status`` again until the closed segments are remote; the driver does the
same, asking the status endpoint (``--json``) when to stop. With ``--spark`` it then runs docs/spark.md's
quickstart (the python block after ``<!-- spark-quickstart -->``), which continues the tour on topic ``demo``,
with the ``python`` found on PATH.

Only the standard library is used here: the driver runs in a bare install's environment too.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATUS_DEADLINE_S = 240


def readme_commands() -> tuple[str, list[str]]:
    """The broker command of the README's set-up (after its ``pip install ... &&``) and the tour's commands."""
    text = (ROOT / "README.md").read_text()
    broker = re.search(r"^pip install -e \. && (tierlog broker .*)$", text, re.M)
    tour = re.search(r"<!-- tour -->\n```bash\n(.*?)```", text, re.S)
    assert broker and tour, "README lost its broker command or its <!-- tour --> block"
    return broker[1], [line for line in tour[1].splitlines() if line.strip()]


def spark_quickstart() -> str:
    """docs/spark.md's quickstart: the python block after its ``<!-- spark-quickstart -->`` marker."""
    text = (ROOT / "docs" / "spark.md").read_text()
    block = re.search(r"<!-- spark-quickstart -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/spark.md lost its <!-- spark-quickstart --> block"
    return block[1]


def _copied(workdir: Path, command: str) -> bool:
    """Whether the status command's partitions have every closed segment in the remote tier."""
    out = subprocess.run(f"{command} --json", shell=True, cwd=workdir, capture_output=True, text=True,
                         executable="/bin/bash")
    if out.returncode != 0:
        return False
    rows = json.loads(out.stdout)["partitions"]
    return bool(rows) and all((r.get("remote_segments") or 0) > 0 and r.get("copy_lag_segments") == 0
                              for r in rows)


def main(workdir: Path, spark: bool = False) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    broker_command, commands = readme_commands()
    if spark:
        (workdir / "spark_quickstart.py").write_text(spark_quickstart())
        commands = [*commands, "python spark_quickstart.py"]
    t0 = time.monotonic()
    broker = subprocess.Popen(broker_command, shell=True, cwd=workdir, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, executable="/bin/bash")
    output: list[str] = []
    ready = threading.Event()

    def drain():
        for line in broker.stdout:
            output.append(line)
            if "tierlog broker ready on" in line:
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    steps = []
    try:
        if not ready.wait(120):
            raise SystemExit("the README's broker never said it was ready:\n" + "".join(output[-40:]))
        steps.append({"command": broker_command, "seconds": round(time.monotonic() - t0, 2), "exit": None})
        for command in commands:
            start = time.monotonic()
            runs = 0
            while True:
                result = subprocess.run(command, shell=True, cwd=workdir, capture_output=True, text=True,
                                        executable="/bin/bash", timeout=600)
                runs += 1
                if not command.startswith("tierlog tier status") or result.returncode != 0 \
                        or _copied(workdir, command) or time.monotonic() - start > STATUS_DEADLINE_S:
                    break
                time.sleep(2)  # the reader's "run it again"
            steps.append({"command": command, "exit": result.returncode, "runs": runs,
                          "seconds": round(time.monotonic() - start, 2),
                          "stdout": result.stdout[-3000:], "stderr": result.stderr[-3000:]})
            if result.returncode != 0:
                break
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            broker.kill()
    print(json.dumps({"steps": steps, "broker_exit": broker.returncode, "broker_tail": output[-5:]}))


def problems(report: dict, workdir: Path, spark: bool = False) -> list[str]:
    """What is wrong with a tour's report (``main``'s JSON line) and its folder; empty when the tour worked as the
    README says: every command succeeded, the segments reached the remote folder, the consumed copy equals the
    produced file, the broker stopped cleanly and, when it ran, the Spark quickstart's tables count the lines and
    characters of demo.txt and their lengths (``spark``: it must have run)."""
    steps = report["steps"]
    out = [f"{s['command']!r} exited {s['exit']}: {(s.get('stderr') or s.get('stdout') or '')[-3000:]}"
           for s in steps[1:] if s["exit"] != 0]
    commands = [s["command"] for s in steps]
    if len(commands) < 9 or not commands[0].startswith("tierlog broker"):
        out.append(f"the tour's commands were not all run: {commands}")
    status = next((s for s in steps if s["command"].startswith("tierlog tier status")), None)
    if status is None or "demo" not in status["stdout"]:
        out.append(f"tierlog tier status did not list topic demo: {status}")
    if not any("read back byte for byte" in s.get("stdout", "") for s in steps):
        out.append("no step said it read back byte for byte")
    demo, copy = workdir / "demo.txt", workdir / "copy.txt"
    if not (demo.exists() and copy.exists() and demo.read_bytes() == copy.read_bytes()):
        out.append("the tour did not read back what it produced")
    if not [p for p in workdir.rglob("*.log") if "remote" in p.relative_to(workdir).parts]:
        out.append("no segment reached the remote folder")
    if report["broker_exit"] != 0 or not any("stopped cleanly" in line for line in report["broker_tail"]):
        out.append(f"the broker exited {report['broker_exit']}: {report['broker_tail']}")
    quickstart = steps[-1]
    if spark and quickstart["command"] != "python spark_quickstart.py":
        out.append(f"the Spark quickstart did not run last: {commands}")
    elif spark and demo.exists():
        lines = demo.read_bytes().splitlines()
        rows = [[cell.strip() for cell in row.strip("|").split("|")]
                for row in quickstart["stdout"].splitlines() if re.match(r"\|\s*\d", row)]
        lengths = Counter(map(len, lines))
        if not rows or rows[0] != [str(len(lines)), str(sum(map(len, lines)))] \
                or rows[1:] != [[str(n), str(lengths[n])] for n in sorted(lengths)]:
            out.append(f"the Spark quickstart's tables do not count demo.txt: {quickstart['stdout'][-2000:]}")
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]), spark="--spark" in sys.argv[2:])
