"""The console with many partitions: how long the topic list takes to show, and what the open console costs
the broker in CPU.

One tierlog broker (a process, tiered storage on, ``metrics.port`` set) gets ``--topics`` topics of
``--partitions`` partitions each (every other topic tiered); ``tierlog console`` is started against it and
Debian's Chromium (Playwright) opens its topic list. Measured, medians over ``--runs`` loads:

- ``render_s``: from the navigation to every topic row in the table (the page's own clock:
  ``performance.now()`` when the last row appears), the API call included;
- ``api_s``: ``GET /api/topics`` alone;
- ``broker_cpu_idle_pct`` / ``broker_cpu_console_pct``: the broker's CPU (utime+stime from /proc, % of one
  core) over ``--window`` seconds with no console page open, then with the topic list open and polling
  every 2 s; ``console_cost_pct`` is the difference, the issue's "under 2 % of broker CPU" figure.

    python bench/console.py [--topics 100] [--partitions 100] [--runs 3] [--window 20]

One JSON line on stdout; the broker, the console and the browser are stopped by their PIDs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_pct(pid: int, seconds: float) -> float:
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # a measuring window, not a wait for an event
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - start)


def tierlog(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "tierlog", *args], env=env, **kw)


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"exited before {needle!r}")
        if needle in line:
            return line
    raise RuntimeError(f"no {needle!r} within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-console-"))
    log = open(work / "broker.log", "w")  # noqa: SIM115 - open for the broker's life
    port, metrics = free_port(), free_port()
    broker = tierlog("broker", "-o", f"log.dirs={work / 'logs'}", "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     "-o", f"metrics.port={metrics}", "-o", "remote.log.storage.system.enable=true",
                     "-o", f"rsm.config.dir={work / 'remote'}",
                     "-o", "rlmm.config.remote.log.metadata.topic.replication.factor=1",
                     stdout=log, stderr=subprocess.STDOUT, text=True)
    console = None
    try:
        deadline = time.monotonic() + 120
        while "Metrics on" not in (work / "broker.log").read_text():  # its log in a file: a pipe could fill
            assert broker.poll() is None and time.monotonic() < deadline, (work / "broker.log").read_text()[-2000:]
            time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        made = time.monotonic()
        for i in range(args.topics):
            extra = ["--config", "remote.storage.enable=true"] if i % 2 == 0 else []
            r = subprocess.run([sys.executable, "-m", "tierlog", "topic", "create", f"bench-{i:04d}", "-b", bootstrap,
                                "-p", str(args.partitions), "--timeout", "120", *extra],
                               env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        create_s = time.monotonic() - made
        idle = cpu_pct(broker.pid, args.window)
        console = tierlog("console", "-b", bootstrap, "--port", "0", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
        url = wait_for_line(console, "Console on", 60).split(" ")[2]
        api = []
        for _ in range(args.runs):
            start = time.monotonic()
            body = json.load(urllib.request.urlopen(url + "api/topics", timeout=120))
            api.append(time.monotonic() - start)
            assert len(body["topics"]) == args.topics
        renders = []
        with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
            ctx = pw.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium",
                                                        args=CHROMIUM_ARGS, headless=True)
            page = ctx.new_page()
            for _ in range(args.runs):
                page.goto("about:blank")
                page.goto(url + "#/topics")
                page.wait_for_function(f"document.querySelectorAll('#topics tbody tr').length === {args.topics}",
                                       timeout=120_000)
                renders.append(page.evaluate("performance.now()") / 1000)
            busy = cpu_pct(broker.pid, args.window)  # the list open, polling
            ctx.close()
        print(json.dumps({"topics": args.topics, "partitions": args.topics * args.partitions,
                          "create_s": round(create_s, 1), "api_s": round(statistics.median(api), 3),
                          "render_s": round(statistics.median(renders), 3), "renders_s": [round(r, 3) for r in renders],
                          "broker_cpu_idle_pct": round(idle, 2), "broker_cpu_console_pct": round(busy, 2),
                          "console_cost_pct": round(busy - idle, 2), "window_s": args.window}))
    finally:
        for proc in (console, broker):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()


if __name__ == "__main__":
    main()
