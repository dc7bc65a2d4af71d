#!/usr/bin/env python3
"""Runs docs/operations.md's cluster section as written, the way a reader does, in a network namespace of its
own so that the section's fixed addresses (ZooKeeper on 127.0.0.1:2181, brokers on 9092-9095, metrics on
9464-9467) meet nothing else.

    python scripts/cluster_tour.py [--keep]     # `tierlog` from PATH (a venv with `pip install .`)

In a new folder holding a copy of ``config/`` it brings the namespace's loopback up and, in the section's order:
starts ``tierlog zookeeper start`` and the three brokers of "Start the brokers" (each a terminal of the reader:
a process of its own, ready when it prints its ready line); runs every command of the ``<!-- cluster-tour -->``
block with bash (``tierlog tier status`` again until every leader's closed segments are remote, as the text asks);
restarts each broker in turn with SIGTERM, waiting until ``tierlog cluster info`` shows no offline and no
under-replicated partition ("Rolling restart"); runs the preferred leader election; adds the fourth broker of
"Adding a broker" and runs the reassignment of "Reassigning partitions" onto it; reads the topic back again;
and stops every broker and ZooKeeper with SIGTERM, each of which must stop cleanly. Needs Java and ZooKeeper's
jars (``tierlog zookeeper start``) and ``unshare -n`` (root). Prints one JSON line: every step, its exit status,
how long it took and the tail of its output; exits 1 on the first failure.

Only the standard library is used: the driver runs in a bare install's environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "operations.md"
READY_S = 180          # a broker's start (its RLMM waits for the three brokers within two minutes)
STATUS_DEADLINE_S = 240
SETTLE_DEADLINE_S = 180
SETTLED = "0 offline (without a leader), 0 under-replicated"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _commands(block: str) -> list[str]:
    """A block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def section_commands() -> dict[str, list[str]]:
    text = DOC.read_text()
    cluster = text[text.index("## Running a cluster"):]
    cluster = cluster[:cluster.index("\n## ", 10)]

    def sub(title: str) -> str:
        part = cluster[cluster.index(f"### {title}"):]
        return part[:part.index("\n### ", 5)] if "\n### " in part[5:] else part

    start = _commands(_bash_blocks(sub("Start the brokers"))[0])
    tour = re.search(r"<!-- cluster-tour -->\n```bash\n(.*?)```", cluster, re.S)
    assert tour, "docs/operations.md lost its <!-- cluster-tour --> block"
    adding = _commands(_bash_blocks(sub("Adding a broker"))[0])
    reassign = _commands(_bash_blocks(sub("Reassigning partitions"))[0])
    election = [c for b in _bash_blocks(sub("Preferred leader election")) for c in _commands(b)
                if "--election-type preferred" in c]
    assert start[0] == "tierlog zookeeper start" and len(start) == 4, start
    assert adding[-1].startswith("tierlog broker "), adding
    assert election, "no preferred leader election command"
    return {"start": start, "tour": _commands(tour[1]), "adding": adding, "reassign": reassign,
            "election": election[:1]}


class Terminal:
    """A long-running command of the reader's (ZooKeeper, a broker): its own process, its output kept."""

    def __init__(self, command: str, workdir: Path, ready: str):
        self.command, self.output, self.ready = command, [], threading.Event()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(command, shell=True, cwd=workdir, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, executable="/bin/bash",
                                     start_new_session=True)

        def drain():
            for line in self.proc.stdout:
                self.output.append(line)
                if ready in line:
                    self.ready.set()

        threading.Thread(target=drain, daemon=True).start()

    def wait_ready(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.command!r} never said it was ready (exit {self.proc.poll()}):\n"
                                   + "".join(self.output[-30:]))
        return round(time.monotonic() - self.started, 2)

    def stop(self, timeout: float = 90) -> dict:
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the reader's Ctrl-C
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.2)  # the drain thread reads the last lines
        return {"command": self.command, "stop_exit": self.proc.returncode,
                "stop_seconds": round(time.monotonic() - t0, 2), "tail": [ln.rstrip() for ln in self.output[-2:]]}


def run(command: str, workdir: Path, timeout: float = 600) -> dict:
    t0 = time.monotonic()
    out = subprocess.run(command, shell=True, cwd=workdir, capture_output=True, text=True,
                         executable="/bin/bash", timeout=timeout)
    return {"command": command, "exit": out.returncode, "seconds": round(time.monotonic() - t0, 2),
            "stdout": out.stdout[-1500:], "stderr": out.stderr[-1500:]}


def _copied(workdir: Path, command: str) -> bool:
    """Whether every leader row of the status command has remote segments and nothing left to copy."""
    out = subprocess.run(f"{command} --json", shell=True, cwd=workdir, capture_output=True, text=True,
                         executable="/bin/bash")
    if out.returncode != 0:
        return False
    rows = [r for r in json.loads(out.stdout)["partitions"] if r.get("role") == "leader"]
    return bool(rows) and all((r.get("remote_segments") or 0) > 0 and r.get("copy_lag_segments") == 0
                              for r in rows)


def _settle(workdir: Path, bootstrap: str) -> float:
    t0 = time.monotonic()
    while True:
        info = run(f"tierlog cluster info -b {bootstrap}", workdir, timeout=60)
        if info["exit"] == 0 and SETTLED in info["stdout"]:
            return round(time.monotonic() - t0, 2)
        if time.monotonic() - t0 > SETTLE_DEADLINE_S:
            raise RuntimeError(f"the cluster did not settle: {info}")
        time.sleep(1)


def inside(workdir: Path) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    docs = section_commands()
    steps: list[dict] = []
    terminals: dict[str, Terminal] = {}
    ok = False
    t_all = time.monotonic()
    try:
        zk = terminals["zookeeper"] = Terminal(docs["start"][0], workdir, "ZooKeeper ready on")
        steps.append({"command": zk.command, "ready_seconds": zk.wait_ready(120)})
        for command in docs["start"][1:]:  # three terminals, started together
            terminals[command] = Terminal(command, workdir, "tierlog broker ready on")
        for command in docs["start"][1:]:
            steps.append({"command": command, "ready_seconds": terminals[command].wait_ready(READY_S)})

        def tour_step(command: str) -> None:
            start, runs = time.monotonic(), 0
            while True:
                step = run(command, workdir)
                runs += 1
                if not command.startswith("tierlog tier status") or step["exit"] != 0 \
                        or _copied(workdir, command) or time.monotonic() - start > STATUS_DEADLINE_S:
                    break
                time.sleep(2)  # the reader's "run it again"
            step["runs"], step["seconds"] = runs, round(time.monotonic() - start, 2)
            steps.append(step)
            if step["exit"] != 0:
                raise RuntimeError(f"{command!r} failed")

        for command in docs["tour"]:
            tour_step(command)

        # Rolling restart: one broker at a time, the next once nothing is offline or under-replicated.
        for command in docs["start"][1:]:
            stopped = terminals[command].stop()
            if stopped["stop_exit"] != 0:
                raise RuntimeError(f"a broker did not stop cleanly: {stopped}")
            other = "127.0.0.1:9094" if "broker-1" in command else "127.0.0.1:9092"
            terminals[command] = Terminal(command, workdir, "tierlog broker ready on")
            ready = terminals[command].wait_ready(READY_S)
            steps.append({"command": f"restart: {command}", "stop_seconds": stopped["stop_seconds"],
                          "ready_seconds": ready, "settled_seconds": _settle(workdir, other)})
        for command in docs["election"]:
            tour_step(command)

        # Adding a broker, and the reassignment onto it.
        for command in docs["adding"][:-1]:
            tour_step(command)
        new = terminals[docs["adding"][-1]] = Terminal(docs["adding"][-1], workdir, "tierlog broker ready on")
        steps.append({"command": new.command, "ready_seconds": new.wait_ready(READY_S)})
        for command in docs["reassign"]:
            tour_step(command)
        for command in docs["tour"][-2:]:  # read it back once more, from the new replicas
            tour_step(command)
        ok = True
    except Exception as exc:  # noqa: BLE001 - reported in the JSON line
        steps.append({"error": str(exc)[-4000:]})
    finally:
        stops = [t.stop() for name, t in reversed(terminals.items()) if name != "zookeeper"]
        if "zookeeper" in terminals:
            stops.append(terminals["zookeeper"].stop())
    clean = all(s["stop_exit"] == 0 for s in stops)
    print(json.dumps({"ok": ok and clean, "seconds": round(time.monotonic() - t_all, 1), "steps": steps,
                      "stops": stops}))
    return 0 if ok and clean else 1


def main() -> int:
    if sys.argv[1:2] == ["--inside"]:
        return inside(Path(sys.argv[2]))
    keep = "--keep" in sys.argv[1:]
    if shutil.which("tierlog") is None:
        raise SystemExit("tierlog is not on PATH: run this in the environment tierlog is installed in")
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-cluster-tour-"))
    shutil.copytree(ROOT / "config", workdir / "config")
    try:
        return subprocess.run(["unshare", "-n", sys.executable, __file__, "--inside", str(workdir)],
                              env=os.environ).returncode
    finally:
        if keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
