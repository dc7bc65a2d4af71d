"""The console with many partitions and groups: how long the topic and group lists take to show, and what
the open console costs the broker in CPU.

One tierlog broker (a process, tiered storage on, ``metrics.port`` set) gets ``--topics`` topics of
``--partitions`` partitions each (every other topic tiered; one CreateTopics) and ``--groups`` consumer
groups (each an offset commit of the first topic's partition 0); ``tierlog console`` is started against
it and Debian's Chromium (Playwright) opens its topic list. Measured, medians over ``--runs`` loads:

- ``render_s``: from the navigation to the topic list's first page shown (its rows, and the count of
  every topic; the page's own clock: ``performance.now()``), the API call included; ``groups_render_s``
  the same for the group list;
- ``api_s``: ``GET /api/topics?limit=50`` alone (the page's call), ``api_all_s`` every row;
- ``api_picture_ms``: how long the console's background picture of the cluster took (median of the
  answers seen);
- what the open console costs the broker (:func:`console_cost`): the broker's CPU-seconds per picture
  (``picture_broker_cpu_ms``) and per metrics scrape (``scrape_broker_cpu_ms``), each measured over
  ``--pictures`` calls back to back less the broker's own rate in windows as long just before and after,
  medians of ``--runs`` bursts; times how often the console makes them: ``console_cost_lists_pct`` (a
  list page open: a picture per ``picture_ms`` + ``picture_pause_s``), ``console_cost_metrics_pct`` (the
  metrics page open: a scrape per ``metrics_interval_s``), ``console_cost_both_pct``: the issue's "under
  2 % of broker CPU", in % of one core;
- the cross-check: the broker's CPU (% of one core) over ``--window`` seconds with the topic list open
  (``windows_open_pct``) and with no console at all (``windows_closed_pct``, before, between and after),
  alternated ``--windows`` times; ``windows_cost_pct`` each open window less its two neighbours' mean. On
  a shared machine the broker's own background work varies by more than the console's share between
  windows: this cross-check can bound the cost, the CPU per request measures it;
- ``load_avg``: the machine's 1-minute load average before and after (the machine is shared).

``--console-src DIR`` runs the console from another source tree (the ``src`` of a checkout of an older
commit) against the same broker and cluster, for a before/after comparison (``before`` in the output);
``--profile DIR`` records the broker with py-spy while each console's list is open (``DIR/NAME.svg``).

    python bench/console.py [--topics 100] [--partitions 100] [--groups 1000] [--runs 3] [--window 20]
        [--windows 3] [--pictures 10]

One JSON line on stdout; the broker, the consoles, py-spy and the browser are stopped by their PIDs.
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
import urllib.error
import urllib.request
from collections.abc import Callable
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


def burst(pid: int, op, n: int) -> tuple[float, float]:
    """The broker's CPU-seconds per call of ``op`` (a coroutine function) over ``n`` calls back to back, less
    its own background work (its rate in windows as long as the calls, just before and just after), and
    the calls' wall time each. CPU-seconds (utime+stime) are what the broker's process ran: a busy machine
    stretches the wall time of a window, not the CPU a request takes (much)."""
    import asyncio

    async def go() -> tuple[float, float]:
        start = time.monotonic()
        await op()  # how long one takes: the idle windows are as long as the n calls
        window = n * (time.monotonic() - start)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(window)  # a measuring window, not a wait for an event
        c1, t1 = cpu_seconds(pid), time.monotonic()
        for _ in range(n):
            await op()
        c2, t2 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(window)
        c3, t3 = cpu_seconds(pid), time.monotonic()
        idle = ((c1 - c0) + (c3 - c2)) / ((t1 - t0) + (t3 - t2))
        return ((c2 - c1) - idle * (t2 - t1)) / n, (t2 - t1) / n
    return asyncio.get_event_loop().run_until_complete(go())


def console_cost(bootstrap: str, broker_pid: int, args: argparse.Namespace) -> dict:
    """What the open console costs the broker, as CPU per request times how often the console asks.

    The topic, group and cluster lists' polls read the console's shared picture (console/snapshot.py) and
    reach no broker: the broker's work is the pictures, one per ``picture_ms + pause_s`` (the pause the
    console takes after a picture that long, of this many partitions: ``Snapshot.pause_after``). The
    metrics page adds a scrape (``MetricsHistory.scrape_once``: the brokers' endpoints and every /metrics)
    each ``metrics_interval_s``. Medians over ``--runs`` bursts of ``--pictures`` calls (:func:`burst`)."""
    import asyncio

    sys.path.insert(0, str(ROOT / "src"))
    from tierlog.console.metrics_history import MetricsHistory
    from tierlog.console.views import ConsoleViews
    from tierlog.tools import tier

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    views = ConsoleViews(bootstrap, 120.0)
    try:
        first = loop.run_until_complete(views.picture())  # connections made, the broker's first answers
        partitions = first["cluster"]["partitions"]

        async def endpoints() -> list[dict]:
            return await tier.cluster_endpoints(await views.admin())
        history = MetricsHistory(endpoints, views.metrics_interval_s)
        pictures = [burst(broker_pid, views.picture, args.pictures) for _ in range(args.runs)]
        scrapes = [burst(broker_pid, history.scrape_once, args.pictures) for _ in range(args.runs)]
    finally:
        loop.run_until_complete(views.close())
        loop.close()
    cpu = statistics.median(c for c, _ in pictures)
    took = statistics.median(w for _, w in pictures)
    pause = (views.snapshot.pause_after(took, partitions) if hasattr(views.snapshot, "pause_after")
             else min(20.0, max(2.0, 5 * took)))  # a console from before the pause grew with the partitions
    scrape_cpu = statistics.median(c for c, _ in scrapes)
    lists = 100 * cpu / (took + pause)
    metrics = 100 * scrape_cpu / views.metrics_interval_s
    return {"picture_broker_cpu_ms": round(1000 * cpu, 1),
            "picture_broker_cpu_runs_ms": [round(1000 * c, 1) for c, _ in pictures],
            "picture_ms": round(1000 * took), "picture_pause_s": round(pause, 2),
            "scrape_broker_cpu_ms": round(1000 * scrape_cpu, 1),
            "scrape_broker_cpu_runs_ms": [round(1000 * c, 1) for c, _ in scrapes],
            "metrics_interval_s": views.metrics_interval_s,
            # the lists open: pictures; the metrics page open: its scrapes (and pictures while a list is open too)
            "console_cost_lists_pct": round(lists, 2), "console_cost_metrics_pct": round(metrics, 2),
            "console_cost_both_pct": round(lists + metrics, 2)}


def tierlog(*args: str, src: Path = ROOT / "src", **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.Popen([sys.executable, "-m", "tierlog", *args], env=env, **kw)


def populate(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    """The topics in one CreateTopics (every other one tiered), then each group's committed offset."""
    import asyncio

    sys.path.insert(0, str(ROOT / "src"))
    from tierlog.client.admin import NewTopic
    from tierlog.client.types import TopicPartition
    from tierlog.tools import clients

    async def go() -> None:
        async with clients.admin(bootstrap, 300.0) as admin:
            await admin.create_topics([NewTopic(f"bench-{i:04d}", partitions, 1,
                                                {"remote.storage.enable": "true"} if i % 2 == 0 else {})
                                       for i in range(topics)])
            first = TopicPartition("bench-0000", 0)
            for start in range(0, groups, 50):  # 50 at a time: the coordinator's queue stays short
                await asyncio.gather(*(admin.alter_consumer_group_offsets(f"bench-group-{g:04d}", {first: 0})
                                       for g in range(start, min(groups, start + 50))))
    asyncio.run(go())


def get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: {e.code} {e.read()[:500]!r}") from None


def measure_console(url: str, args: argparse.Namespace, broker_pid: int, profile: Path | None, name: str,
                    restart: Callable[[], str], stop_console: Callable[[], None]) -> dict:
    """The list renders, the API calls, and the broker's CPU in windows with the topic list open and
    without a console, alternated ``--windows`` times, for one console (``restart`` starts it again and
    gives its address, ``stop_console`` stops it)."""
    from playwright.sync_api import sync_playwright

    api, api_all, pictures = [], [], []
    for _ in range(args.runs):
        start = time.monotonic()
        # the page's own call: one page of rows (a console from before pages answers every row)
        body = get_json(url + ("api/topics?limit=50" if name == "after" else "api/topics"))
        api.append(time.monotonic() - start)
        pictures.append(body.get("took_ms"))
        start = time.monotonic()
        body = get_json(url + "api/topics")
        api_all.append(time.monotonic() - start)
        assert len(body["topics"]) == args.topics, len(body["topics"])
    shown = min(args.topics, 50)
    topics_done = (f"document.querySelectorAll('#topics tbody tr').length >= {shown} && "
                   f"(!document.querySelector('#list-count') || "
                   f"document.querySelector('#list-count').dataset.total === '{args.topics}')")
    groups_done = (f"document.querySelectorAll('#groups tbody tr').length >= {min(args.groups, 50)} && "
                   f"(!document.querySelector('#list-count') || "
                   f"document.querySelector('#list-count').dataset.total === '{args.groups}')")
    renders, group_renders = [], []
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as browser_profile:
        ctx = pw.chromium.launch_persistent_context(browser_profile, executable_path="/usr/bin/chromium",
                                                    args=CHROMIUM_ARGS, headless=True)
        page = ctx.new_page()
        for _ in range(args.runs):
            for route, done, out in (("#/topics", topics_done, renders), ("#/groups", groups_done, group_renders)):
                page.goto("about:blank")
                page.goto(url + route)
                page.wait_for_function(done, timeout=300_000)
                out.append(page.evaluate("performance.now()") / 1000)
        # The cross-check: the broker's CPU over windows with the topic list open and with no console,
        # alternated (the broker's own background work drifts: each open window against its neighbours)
        opened, closed = [], [cpu_pct(broker_pid, args.window)]
        for i in range(args.windows):
            if i > 0:
                url = restart()
            page.goto("about:blank")
            page.goto(url + "#/topics")
            page.wait_for_function(topics_done, timeout=300_000)
            spy = None
            if profile is not None and i == 0:
                profile.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(broker_pid), "--duration",
                                        str(int(args.window)), "--rate", "50", "--nonblocking",
                                        "-o", str(profile / f"{name}.svg")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            opened.append(cpu_pct(broker_pid, args.window))  # the list open, polling
            if spy is not None:
                spy.wait(args.window + 60)
            page.goto("about:blank")
            stop_console()  # no console at all in the next window
            closed.append(cpu_pct(broker_pid, args.window))
        ctx.close()
    # each open window less the mean of the closed windows either side of it
    diffs = [o - (closed[i] + closed[i + 1]) / 2 for i, o in enumerate(opened)]
    return {"api_s": round(statistics.median(api), 3), "api_all_s": round(statistics.median(api_all), 3),
            "api_picture_ms": statistics.median(p for p in pictures if p is not None) if any(pictures) else None,
            "render_s": round(statistics.median(renders), 3), "renders_s": [round(r, 3) for r in renders],
            "groups_render_s": round(statistics.median(group_renders), 3),
            "groups_renders_s": [round(r, 3) for r in group_renders],
            "windows_open_pct": [round(o, 2) for o in opened], "windows_closed_pct": [round(c, 2) for c in closed],
            "windows_cost_pct": [round(d, 2) for d in diffs],
            "windows_cost_median_pct": round(statistics.median(diffs), 2)}


def start_console(bootstrap: str, src: Path) -> tuple[subprocess.Popen, str]:
    # a generous client timeout: on a busy shared machine the Metadata of 10,000 partitions takes seconds
    console = tierlog("console", "-b", bootstrap, "--port", "0", "--timeout", "120", src=src, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
    return console, wait_for_line(console, "Console on", 60).split(" ")[2]


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


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
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0, help="seconds of each cross-check window")
    ap.add_argument("--windows", type=int, default=3, help="cross-check windows with the list open")
    ap.add_argument("--pictures", type=int, default=10, help="pictures (and scrapes) in each burst")
    ap.add_argument("--console-src", type=Path, help="also measure the console of this source tree (before)")
    ap.add_argument("--profile", type=Path, help="record the broker with py-spy into this folder")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-console-"))
    log = open(work / "broker.log", "w")  # noqa: SIM115 - open for the broker's life
    port, metrics = free_port(), free_port()
    load_before = os.getloadavg()[0]
    broker = tierlog("broker", "-o", f"log.dirs={work / 'logs'}", "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     "-o", f"metrics.port={metrics}", "-o", "remote.log.storage.system.enable=true",
                     "-o", f"rsm.config.dir={work / 'remote'}",
                     "-o", "rlmm.config.remote.log.metadata.topic.replication.factor=1",
                     "-o", "group.initial.rebalance.delay.ms=0",
                     stdout=log, stderr=subprocess.STDOUT, text=True)
    console = None
    try:
        deadline = time.monotonic() + 120
        while "Metrics on" not in (work / "broker.log").read_text():  # its log in a file: a pipe could fill
            assert broker.poll() is None and time.monotonic() < deadline, (work / "broker.log").read_text()[-2000:]
            time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        made = time.monotonic()
        populate(bootstrap, args.topics, args.partitions, args.groups)
        create_s = time.monotonic() - made
        cpu_pct(broker.pid, args.window)  # settling: the new partitions' first tiering work, not counted
        out = {"topics": args.topics, "partitions": args.topics * args.partitions, "groups": args.groups,
               "create_s": round(create_s, 1)}
        out.update(console_cost(bootstrap, broker.pid, args))
        variants = [("after", ROOT / "src")] + ([("before", args.console_src)] if args.console_src else [])
        for name, src in variants:
            def restart(src: Path = src) -> str:
                nonlocal console
                stop(console)
                console, url = start_console(bootstrap, src)
                return url

            def stop_console() -> None:
                nonlocal console
                stop(console)
                console = None
            figures = measure_console(restart(), args, broker.pid, args.profile, name, restart, stop_console)
            stop_console()
            if name == "after":
                out.update(figures)
            else:
                out["before"] = figures
        out.update({"window_s": args.window, "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
        print(json.dumps(out))
    finally:
        stop(console)
        stop(broker)


if __name__ == "__main__":
    main()
