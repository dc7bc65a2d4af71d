"""``tierlog console`` in a real headless browser (Debian's Chromium driven by Playwright) against a real
three-broker tiered cluster: each page shows the figures the ``tierlog`` commands print for the same cluster,
pages follow the cluster without a reload (a topic created, a segment copied, a broker killed and started
again), actions work with the admin token and are refused without it, and a cluster that cannot be reached
is a message on the page, not a blank one.

One cluster, one console process and one browser serve the module; its tests run in file order on one worker.
With ``TIERLOG_CONSOLE_SCREENSHOTS=docs/console`` each page's screenshot is written there (docs/console.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.clilib import as_json, env, ok
from tests.harness.ports import PortReservation
from tests.harness.rawclient import unique
from tests.harness.tiered import tiered_settings
from tests.harness.tierlog_cluster import start_cluster
from tests.harness.waiting import wait_until
from tests.harness.writer import BackgroundWriter

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright_api = pytest.importorskip("playwright.sync_api", reason="the console tests drive Chromium with Playwright")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install "
                                                                       "chromium)")

TOKEN = "console-test-token"
SHOTS = os.environ.get("TIERLOG_CONSOLE_SCREENSHOTS")
#: The browser's flags: no network of its own (updates, sync, QUIC), a fresh profile per run.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# local retention keeps about two segments: the timeline shows history that is remote only
TIERED = {"remote.storage.enable": "true", "segment.bytes": "6000", "local.retention.bytes": "12000",
          "min.insync.replicas": "2", "file.delete.delay.ms": "0"}
POLL_MS = 500  # the pages ask every half second here (?poll=), so a change shows within the waits below


class Console:
    """A ``tierlog console`` process: started, its URL read from its first line, stopped by its PID."""

    def __init__(self, bootstrap: str, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tierlog", "console", "-b", bootstrap, "--port", "0",
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env())
        line = self.proc.stdout.readline()
        assert line.startswith("Console on http://"), line + self.proc.stdout.read()
        self.url = line.split(" ")[2]

    def post(self, path: str, token: str | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + path.lstrip("/"), method="POST",
                                                               headers=headers), timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = tmp_path_factory.mktemp("console")
    settings = tiered_settings(root, **{"rlmm.config.remote.log.metadata.topic.replication.factor": "3",
                                        "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
                                        "group.initial.rebalance.delay.ms": "0"})
    # each broker's endpoint on a port its metrics.port names, so the console finds it through the cluster
    ports = {i: PortReservation() for i in (1, 2, 3)}
    c = start_cluster(root, zookeeper, brokers=3, settings=settings,
                      per_broker={i: {"metrics.port": str(ports[i].port)} for i in ports})
    yield c
    c.stop()
    for port in ports.values():
        port.close()


@pytest.fixture(scope="module")
def console(cluster):
    c = Console(cluster.bootstrap, "--token", TOKEN)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                        headless=True, viewport={"width": 1280, "height": 860})
        yield context
        context.close()


@pytest.fixture
def page(browser, console):
    p = browser.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    outside: list[str] = []
    p.on("request", lambda r: None if r.url.startswith(console.url) or r.url.startswith("data:")
         else outside.append(r.url))
    yield p
    p.close()
    assert not errors, errors  # a script error is a broken page even when the figures show
    assert not outside, outside  # every asset comes from the console itself


def until(page, check, timeout: float, what: str):
    """wait_until, and the page's text in the failure (what the browser showed instead)."""
    try:
        return wait_until(check, timeout, what=what, ignore=(playwright_api.Error,))
    except AssertionError as e:
        raise AssertionError(f"{e}\nthe page shows:\n{page.inner_text('body')[:3000]}") from None


def open_page(page, console, route: str) -> None:
    page.goto(f"{console.url}?poll={POLL_MS}#/{route}")


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def cell(page, row: str, key: str) -> str | None:
    """The raw figure (``data-v``) of ``key`` in the row matched by ``row``; None while it is not there."""
    found = page.locator(f"{row} [data-k='{key}']")
    return found.first.get_attribute("data-v") if found.count() else None


def figure(page, key: str) -> str | None:
    found = page.locator(f"#figures [data-k='{key}']")
    return found.first.get_attribute("data-v") if found.count() else None


def number(value) -> str:
    return "" if value is None else str(value)


def write(cluster, topic: str, count: int) -> None:
    # about 200 bytes a record, in batches of about 2 KB: a 6 KB segment rolls every few batches
    writer = BackgroundWriter(cluster.bootstrap, topic, b"console-" + b"x" * 190, settings={"batch.size": 2000})
    writer.start()
    try:
        wait_until(lambda: len(writer.acked) >= count, 120, what=f"{count} records acknowledged")
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:3]


def leader_row(cluster, topic: str) -> dict | None:
    rows = as_json("tier", "status", "-b", cluster.bootstrap, "--topic", topic)["partitions"]
    return next((r for r in rows if r["role"] == "leader" and r["partition"] == 0), None)


# ------------------------------------------------------------------------------------------------ tests


def test_cluster_page_shows_what_cluster_info_shows(cluster, console, page):
    open_page(page, console, "cluster")
    info = as_json("cluster", "info", "-b", cluster.bootstrap)

    def same():
        shown = {int(cell(page, f"tr[data-broker='{b['id']}']", "id") or -1):
                 (cell(page, f"tr[data-broker='{b['id']}']", "leaders"),
                  cell(page, f"tr[data-broker='{b['id']}']", "partitions")) for b in info["brokers"]}
        want = {b["id"]: (str(b["leaders"]), str(b["partitions"])) for b in info["brokers"]}
        return shown == want and page.locator("[data-k='controller_id']").inner_text() == str(info["controller_id"])
    until(page, same, 30, "the brokers' table as `tierlog cluster info` shows it")
    assert page.locator("#brokers tbody tr").count() == 3
    assert page.locator("[data-k='cluster_id']").inner_text() == info["cluster_id"]
    shot(page, "cluster")


def test_topic_and_its_timeline_show_tier_status_and_follow_a_copy(cluster, console, page):
    topic = unique("console-tiered")
    ok("topic", "create", topic, "-b", cluster.bootstrap, "-p", "1", "-r", "3",
       *[a for k, v in TIERED.items() for a in ("--config", f"{k}={v}")])
    write(cluster, topic, 100)
    seen = {}

    def tiered():
        r = seen["row"] = leader_row(cluster, topic)
        return r and (r["remote_segments"] or 0) >= 2 and r["copy_lag_segments"] == 0
    try:
        wait_until(tiered, 90, what=f"{topic} tiered")
    except AssertionError as e:
        raise AssertionError(f"{e}; the leader's row: {seen.get('row')}") from None

    open_page(page, console, f"topics/{topic}/0")
    keys = ("remote_segments", "remote_bytes", "local_segments", "local_bytes", "copy_lag_segments")

    def matches():  # the page and `tierlog tier status` asked until both settle on the same figures
        row = leader_row(cluster, topic)
        return row if all(figure(page, k) == number(row[k]) for k in keys) else None
    row = until(page, matches, 30, "the timeline's figures as `tierlog tier status` shows them")
    assert page.locator("#timeline").count() == 1
    assert figure(page, "high_watermark") == str(row["log_end_offset"])
    shot(page, "partition")
    before = row["remote_segments"]

    # more records, more segments copied: the open page follows without a reload
    write(cluster, topic, 40)
    until(page, lambda: int(figure(page, "remote_segments") or 0) > before, 90,
          "the timeline showing the newly copied segments")
    row = until(page, matches, 30, "the timeline's figures after the copy")

    open_page(page, console, "topics")
    tiered = as_json("tier", "status", "-b", cluster.bootstrap, "--topic", topic)["partitions"]
    remote = sum(r["remote_bytes"] for r in tiered if r["role"] == "leader")
    until(page, lambda: cell(page, f"tr[data-topic='{topic}']", "remote_bytes") == str(remote), 30,
          "the topic list's remote size as `tierlog tier status` shows it")
    assert cell(page, f"tr[data-topic='{topic}']", "replication_factor") == "3"
    shot(page, "topics")
    open_page(page, console, f"topics/{topic}")
    until(page, lambda: cell(page, "tr[data-partition='0']", "remote_bytes") == str(remote), 30,
          "the topic page's partition row")
    shot(page, "topic")


def test_topic_list_shows_a_topic_created_meanwhile(cluster, console, page):
    open_page(page, console, "topics")
    page.locator("#topics").wait_for()
    topic = unique("console-live")
    ok("topic", "create", topic, "-b", cluster.bootstrap, "-p", "4", "-r", "2")
    until(page, lambda: cell(page, f"tr[data-topic='{topic}']", "partitions") == "4", 30,
          "the new topic in the open list")


def test_actions_need_the_token(cluster, console, page):
    open_page(page, console, "topics")
    topic = unique("console-action")

    def create() -> str:
        page.fill("#create-topic input[name=topic]", topic)
        page.fill("#create-topic input[name=partitions]", "2")
        page.click("#create-topic button[type=submit]")
        page.click("#confirm-yes")
        page.locator("#outcome").wait_for()
        return page.locator("#outcome").inner_text()

    assert "refused: missing or wrong admin token" in create()
    assert topic not in {t["topic"] for t in as_json("topic", "list", "-b", cluster.bootstrap)}
    page.fill("#token", TOKEN)
    assert f"created topic {topic} (2 partition(s)" in create()
    assert topic in {t["topic"] for t in as_json("topic", "list", "-b", cluster.bootstrap)}
    shot(page, "create-topic")

    open_page(page, console, f"topics/{topic}")  # the token stays for the browser tab's session
    page.click("#delete-topic")
    assert f"Delete topic {topic}" in page.locator("#confirm").inner_text()
    page.click("#confirm-yes")
    page.locator("#outcome").wait_for()
    assert page.locator("#outcome").inner_text() == f"deleted topic {topic}"
    wait_until(lambda: topic not in {t["topic"] for t in as_json("topic", "list", "-b", cluster.bootstrap)}, 30,
               what="the topic gone")
    # the API itself refuses a wrong token (401), whatever the page does
    status, body = console.post(f"/api/topic/delete?topic={topic}", token="wrong")
    assert status == 401 and "admin token" in body["error"]


def test_groups_page_shows_group_describe(cluster, console, page):
    topic, group = unique("console-group"), unique("console-g")
    ok("topic", "create", topic, "-b", cluster.bootstrap, "-p", "1", "-r", "3")
    write(cluster, topic, 30)
    ok("consume", topic, "-b", cluster.bootstrap, "-g", group, "--from", "earliest", "-n", "10")
    write(cluster, topic, 5)
    described = as_json("group", "describe", group, "-b", cluster.bootstrap)
    open_page(page, console, f"groups/{group}")
    want = described["partitions"][0]
    until(page, lambda: cell(page, f"tr[data-tp='{topic}-0']", "lag") == str(want["lag"]), 30,
          "the group's lag as `tierlog group describe` shows it")
    assert cell(page, f"tr[data-tp='{topic}-0']", "current_offset") == str(want["current_offset"])
    until(page, lambda: page.locator("#lag-chart").count(), 30, "the lag line, drawn from the second answer on")
    shot(page, "group")


def test_cluster_page_follows_a_broker_killed_and_started_again(cluster, console, page):
    open_page(page, console, "cluster")
    row = "tr[data-broker='3']"
    until(page, lambda: page.locator(f"{row} [data-k='state']").count() and
          page.locator(f"{row} [data-k='state']").inner_text() == "alive", 30, "broker 3 alive")
    cluster.brokers[3].kill()
    until(page, lambda: page.locator(f"{row} [data-k='state']").inner_text() == "not alive", 60,
          "broker 3 shown not alive")
    shot(page, "cluster-broker-down")
    cluster.start([3])
    cluster.wait_formed()
    until(page, lambda: page.locator(f"{row} [data-k='state']").inner_text() == "alive", 60,
          "broker 3 shown alive again")


def test_an_unreachable_cluster_is_a_message_and_a_read_only_console_refuses_actions(browser):
    closed = PortReservation()  # bound, never listening: nothing answers there
    console = Console(f"127.0.0.1:{closed.port}", "--timeout", "2")
    p = browser.new_page()
    try:
        p.goto(f"{console.url}#/topics")
        alert = p.locator("[role=alert]")
        alert.wait_for(timeout=30_000)
        assert f"cannot reach the cluster at 127.0.0.1:{closed.port}" in alert.inner_text()
        shot(p, "unreachable")
        status, body = console.post("/api/topic/create?topic=x", token=TOKEN)
        assert status == 403 and "read-only" in body["error"]
    finally:
        p.close()
        console.stop()
        closed.close()


# ------------------------------------------------------------------- long lists (consoleperf, issue 42)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def test_each_broker_sums_its_tier_rows_per_topic(cluster, console):
    """``/v1/tier/status?summary=topics``, the console's one row per topic: on every broker, the sums of the
    partition rows it leads that ``tierlog tier status`` prints."""
    from tests.harness.waiting import not_yet
    merged = as_json("tier", "status", "-b", cluster.bootstrap)
    urls = {b["node_id"]: b["url"] for b in merged["brokers"]}
    assert len(urls) == 3 and all(urls.values()), merged["brokers"]
    tiered = {r["topic"] for r in merged["partitions"]}
    assert tiered, "an earlier test made a tiered topic"

    def agree():  # asked until a copy in flight does not fall between the two answers
        rows = as_json("tier", "status", "-b", cluster.bootstrap)["partitions"]
        seen = {}
        for node, url in urls.items():
            totals = {t["topic"]: t for t in get_json(f"{url}/v1/tier/status?summary=topics")["topic_totals"]}
            for topic in tiered:
                led = [r for r in rows if r["topic"] == topic and r["broker"] == node and r["role"] == "leader"]
                want = {"leader_partitions": len(led), **{k: sum(r[k] for r in led) for k in
                        ("local_bytes", "remote_bytes", "copy_lag_bytes")}} if led else None
                got = totals.get(topic)
                seen[(node, topic)] = (want, got and {k: got[k] for k in (want or {})})
        return all(w == g for w, g in seen.values()) or not_yet(seen)
    wait_until(agree, 30, what="each broker's per-topic sums equal to its partition rows")


def test_long_lists_are_paged_filtered_and_sorted(cluster, console, page):
    prefix = unique("console-list")
    a, b, c = (f"{prefix}-{x}" for x in "abc")
    ok("topic", "create", a, b, "-b", cluster.bootstrap, "-p", "1", "-r", "1")
    ok("topic", "create", c, "-b", cluster.bootstrap, "-p", "2", "-r", "1")
    ok("group", "reset-offsets", f"{prefix}-g", "-t", a, "--to-earliest", "--execute", "-b", cluster.bootstrap)
    listed = {t["topic"]: t for t in as_json("topic", "list", "-b", cluster.bootstrap)}

    # the API answers a page of the rows a filter matches, with the counts (once the picture has them)
    query = f"{console.url}api/topics?filter={prefix}&limit=2&sort=partitions&desc=true"
    first = wait_until(lambda: (r := get_json(query))["matched"] == 3 and r, 30, what="the new topics listed")
    assert [t["topic"] for t in first["topics"]] == [c, b] and first["total"] == len(listed)
    rest = get_json(query + "&offset=2")
    assert [t["topic"] for t in rest["topics"]] == [a]
    assert {t["topic"]: t["partitions"] for t in first["topics"] + rest["topics"]} == \
        {n: listed[n]["partitions"] for n in (a, b, c)}

    # the page: the filter box, then a click on a column sorts by it, a second click the other way
    open_page(page, console, "topics")
    page.fill("#list-filter", prefix)

    def shown() -> list[str]:  # the rows in one read: the list re-renders under a row-by-row look
        return page.eval_on_selector_all("#topics tbody tr", "rows => rows.map((r) => r.dataset.topic)")
    until(page, lambda: shown() == [a, b, c], 30, "the filtered list, by name")
    assert page.locator("#list-count").get_attribute("data-matched") == "3"
    page.click("th[data-sort='partitions']")
    page.click("th[data-sort='partitions']")
    until(page, lambda: shown() == [c, b, a], 30, "most partitions first")
    assert [cell(page, f"tr[data-topic='{n}']", "partitions") for n in shown()] == ["2", "1", "1"]
    shot(page, "topics-filtered")

    # the groups list has the same controls
    open_page(page, console, "groups")
    page.fill("#list-filter", prefix)
    until(page, lambda: page.eval_on_selector_all("#groups tbody tr", "rows => rows.map((r) => r.dataset.group)")
          == [f"{prefix}-g"], 30, "the group whose name holds the prefix")


# ------------------------------------------- the remaining actions: alter configs, reset offsets, disable tiering
# What the actions did is checked with the tools functions the `tierlog` commands run (topic describe, group
# describe, tier status), called in-process: a command's interpreter start costs seconds on a busy machine.


def tools(cluster, call):
    """``call(admin)`` with a tierlog admin client of the cluster (what a `tierlog` command runs), on a thread
    of its own (the browser's driver holds this one's event loop)."""
    from tierlog.tools import clients

    async def go():
        async with clients.admin(cluster.bootstrap, 30) as admin:
            return await call(admin)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def overrides(cluster, topic: str) -> dict:
    """`tierlog topic describe`'s topic overrides."""
    from tierlog.tools import topics
    [described] = tools(cluster, lambda admin: topics.describe(admin, [topic]))
    return {c["name"]: c["value"] for c in described["configs"] if c["source"] == "DYNAMIC_TOPIC_CONFIG"}


def tier_status(cluster, topic: str) -> dict:
    """`tierlog tier status --topic`'s answer."""
    from tierlog.tools import tier

    async def status(admin):
        return await asyncio.to_thread(tier.cluster_status, await tier.cluster_endpoints(admin), topic)
    return tools(cluster, status)


def create_topics(cluster, names: list[str], replicas: int, configs: dict | None = None) -> None:
    from tierlog.tools import topics
    tools(cluster, lambda admin: topics.create(admin, names, 1, replicas, configs or {}))


def described_group(cluster, group: str) -> dict:
    from tierlog.tools import groups
    return tools(cluster, lambda admin: groups.describe(admin, group))


def confirm(page, section: str, question: str) -> str:
    """Confirm the question ``section`` asks and wait for the outcome it then shows; its text."""
    assert question in page.locator(f"{section} .confirm").inner_text()
    page.click(f"{section} .confirm-yes")
    outcome = page.locator(f"{section} .action-outcome")
    outcome.wait_for()
    return outcome.inner_text()


def test_alter_configs_sets_and_removes_with_the_token_and_shows_kafkas_error(cluster, console, page):
    topic = unique("console-configs")
    create_topics(cluster, [topic], 2)
    open_page(page, console, f"topics/{topic}")
    form = "#alter-configs"

    def set_config(key: str, value: str) -> str:
        page.fill(f"{form} input[name=key]", key)
        page.fill(f"{form} input[name=value]", value)
        page.click(f"{form} button[type=submit]")
        return confirm(page, form, f"Set {key} of topic {topic} to \"{value}\"?")

    assert "refused: missing or wrong admin token" in set_config("retention.ms", "3600000")
    assert "retention.ms" not in overrides(cluster, topic)
    page.fill("#token", TOKEN)
    assert f"set retention.ms=3600000 on topic {topic}" in set_config("retention.ms", "3600000")
    assert overrides(cluster, topic)["retention.ms"] == "3600000"
    until(page, lambda: cell(page, f"{form} tr[data-config='retention.ms']", "value") == "3600000", 30,
          "the new override in the settings table")
    # a value the broker refuses: IncrementalAlterConfigs' error code and message, the override unchanged
    refused = set_config("retention.ms", "soon")
    assert refused.startswith("refused: INVALID_CONFIG: ") and "retention.ms" in refused, refused
    assert overrides(cluster, topic)["retention.ms"] == "3600000"
    shot(page, "alter-configs")
    page.click(f"{form} tr[data-config='retention.ms'] button.remove")
    assert f"removed retention.ms from topic {topic}" in confirm(page, form, "Remove the override retention.ms")
    assert "retention.ms" not in overrides(cluster, topic)


def test_reset_offsets_previews_refuses_an_active_group_and_needs_the_token(cluster, console, page):
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic, group = unique("console-reset"), unique("console-rg")
    create_topics(cluster, [topic], 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, b"early-%d" % i, partition=0)
    assert producer.flush(30) == 0
    after_ms = int(time.time() * 1000) + 1  # every record from here on is later than this
    wait_until(lambda: time.time() * 1000 > after_ms, 5, what="a millisecond later")
    for i in range(5):
        producer.produce(topic, b"late-%d" % i, partition=0)
    assert producer.flush(30) == 0
    member = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    form = "#reset-offsets"
    try:
        member.subscribe([topic])
        wait_until(lambda: member.poll(0.5) is not None, 60, what="the member assigned and reading")
        member.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)
        open_page(page, console, f"groups/{group}")
        until(page, lambda: cell(page, f"tr[data-tp='{topic}-0']", "current_offset") == "15", 30,
              "the group's committed offset")
        page.select_option(f"{form} select[name=to]", "timestamp")
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(after_ms // 1000)) + f".{after_ms % 1000:03d}Z"
        page.fill(f"{form} input[name=value]", when)
        page.click(f"{form} button[type=submit]")
        alert = page.locator("#reset-error")
        alert.wait_for()
        assert alert.inner_text().startswith("NON_EMPTY_GROUP: "), alert.inner_text()
    finally:
        member.close()  # leaves the group: it is Empty at once
    wait_until(lambda: described_group(cluster, group)["state"] == "Empty", 30, what="the group empty")
    page.click(f"{form} button[type=submit]")
    until(page, lambda: cell(page, f"#reset-preview tr[data-tp='{topic}-0']", "new_offset") == "10", 30,
          "the preview: the first record at or after the time")
    assert cell(page, f"#reset-preview tr[data-tp='{topic}-0']", "current_offset") == "15"
    page.click("#reset-execute")
    assert "refused: missing or wrong admin token" in confirm(page, form, f"Reset the offsets of group {group}")
    assert described_group(cluster, group)["partitions"][0]["current_offset"] == 15
    page.fill("#token", TOKEN)
    page.click("#reset-execute")
    assert confirm(page, form, "on 1 partition(s)") == f"reset group {group}: {topic}-0 to 10"
    until(page, lambda: cell(page, f"#lag tr[data-tp='{topic}-0']", "current_offset") == "10", 30,
          "the group's table following the reset")
    shot(page, "reset-offsets")
    [row] = described_group(cluster, group)["partitions"]
    assert (row["current_offset"], row["lag"]) == (10, 5)
    # the API alone: one topic's partitions to an offset; without the token nothing is written
    path = f"/api/group/reset-offsets?group={group}&to=offset&value=3&topic={topic}"
    assert console.post(path)[0] == 401
    status, body = console.post(path, token=TOKEN)
    assert status == 200 and [p["new_offset"] for p in body["partitions"]] == [3], body
    assert described_group(cluster, group)["partitions"][0]["current_offset"] == 3


def test_disable_tiering_deletes_or_retains_with_the_token(cluster, console, page):
    topic, kept = unique("console-untier"), unique("console-kept")
    create_topics(cluster, [topic, kept], 3, TIERED)
    write(cluster, topic, 40)

    def copied():
        rows = tier_status(cluster, topic)["partitions"]
        return any(r["role"] == "leader" and (r["remote_segments"] or 0) >= 1 for r in rows)
    wait_until(copied, 90, what=f"a segment of {topic} copied")
    open_page(page, console, f"topics/{topic}")
    panel = "#tiering-panel"
    until(page, lambda: page.locator(f"{panel} [data-k='tiering_state']").inner_text() == "ENABLED", 30,
          "the tiering state")
    page.click("#disable-delete")
    assert "refused: missing or wrong admin token" in confirm(page, panel, "DELETE its remote data")
    assert tier_status(cluster, topic)["topics"][0]["state"] == "ENABLED"
    page.fill("#token", TOKEN)
    page.click("#disable-delete")
    assert "is being disabled (policy delete)" in confirm(page, panel, "DELETE its remote data")
    # while the remote data is deleted: retain on the other topic, through the API (refused without the token)
    path = f"/api/topic/disable-tiering?topic={kept}&delete_remote=false"
    assert console.post(path)[0] == 401
    status, body = console.post(path, token=TOKEN)
    assert status == 200 and body["policy"] == "retain", body
    until(page, lambda: page.locator(f"{panel} [data-k='tiering_state']").inner_text() == "DISABLED", 60,
          "the disablement done")
    shot(page, "disable-tiering")
    status = tier_status(cluster, topic)
    [state] = status["topics"]
    assert (state["state"], state["policy"], state["remote_segments_to_delete"]) == ("DISABLED", "delete", 0)
    assert not any(r["remote_segments"] for r in status["partitions"]), status["partitions"]
    assert overrides(cluster, topic)["remote.storage.enable"] == "false"
    open_page(page, console, f"topics/{topic}/0")  # the partition's page shows the topic's state too
    until(page, lambda: page.locator("#tiering [data-k='tiering_state']").inner_text() == "DISABLED", 30,
          "the partition page's KIP-950 state")
    wait_until(lambda: tier_status(cluster, kept)["topics"][0]["state"] == "DISABLED", 60, what=f"{kept} disabled")
    assert tier_status(cluster, kept)["topics"][0]["policy"] == "retain"
    status, body = console.post(path, token=TOKEN)  # asked again: refused, saying so
    assert status == 400 and "disabled already" in body["error"], body
    # the retained data deleted afterwards (the page's "Delete the retained remote data")
    status, body = console.post(path.replace("delete_remote=false", "delete_remote=true"), token=TOKEN)
    assert status == 200 and body["policy"] == "delete", body

    def kept_state() -> tuple[str, str]:
        [t] = tier_status(cluster, kept)["topics"]
        return t["state"], t["policy"]
    wait_until(lambda: kept_state() == ("DISABLED", "delete"), 60, what=f"{kept}'s retained data deleted")
    # a topic that is not tiered has nothing to disable: refused rather than a change that does nothing
    plain = unique("console-plain")
    create_topics(cluster, [plain], 1)
    status, body = console.post(f"/api/topic/disable-tiering?topic={plain}&delete_remote=true", token=TOKEN)
    assert status == 400 and body["error"].startswith("INVALID_CONFIG: ") and "is not tiered" in body["error"], body
# -------------------------------------------- the message browser, the metrics charts, a KIP-848 group

import concurrent.futures  # noqa: E402

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tierlog.client.consumer import Consumer  # noqa: E402
from tierlog.client.producer import Producer  # noqa: E402
from tierlog.client.types import TopicPartition  # noqa: E402


def run_async(make):
    """``asyncio.run(make())`` on a thread of its own: Playwright's sync API holds this thread's loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


SHOWN = 4096  # the console shows a field's first 4096 bytes (console/browse.py SHOWN_BYTES)


def special(i: int, base_ms: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes]], int]:
    """Record i of the browser's test: JSON, binary, plain text or a value too long to show whole."""
    kind = i % 4
    if kind == 0:
        return (f"k-{i}".encode(), json.dumps({"n": i, "name": "récord"}).encode(),
                [("trace", f"t-{i}".encode()), ("bin", b"\x00\xff")], base_ms + i * 1000)
    if kind == 1:
        return None, bytes(range(200, 216)), [], base_ms + i * 1000
    if kind == 2:
        return f"k-{i}".encode(), f"plain text {i}".encode(), [("trace", f"t-{i}".encode())], base_ms + i * 1000
    return b"\xff\x00" + bytes([i]), b"B" * 5000 + str(i).encode(), [], base_ms + i * 1000


def consumer_read(bootstrap: str, topic: str, offset: int, count: int) -> list:
    """What tierlog's consumer reads at ``offset`` (read_committed, as the browser's default)."""
    async def go():
        tp = TopicPartition(topic, 0)
        async with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                             "enable.auto.commit": False}) as c:
            c.assign([tp])
            c.seek(tp, offset)
            out = []
            deadline = time.monotonic() + 60
            while len(out) < count and time.monotonic() < deadline:
                out += (await c.poll(timeout_ms=1000)).get(tp, [])
            return out[:count]
    return run_async(go)


def offset_for_time(bootstrap: str, topic: str, ms: int) -> int:
    async def go():
        async with Consumer({"bootstrap.servers": bootstrap}) as c:
            return (await c.offsets_for_times({TopicPartition(topic, 0): ms}))[TopicPartition(topic, 0)].offset
    return run_async(go)


ROWS_JS = """() => [...document.querySelectorAll('#records tbody tr')].map((tr) => {
  const f = (k) => { const td = tr.querySelector(`[data-k='${k}']`); const pre = td.querySelector('pre');
    return {as: td.dataset.as, text: pre ? pre.textContent : null,
            trunc: td.querySelector('.trunc') ? td.querySelector('.trunc').textContent : null}; };
  return {offset: Number(tr.dataset.offset), ts: Number(tr.querySelector("[data-k='timestamp']").dataset.v),
          key: f('key'), value: f('value'),
          headers: [...tr.querySelectorAll('.header')].map((x) => ({key: x.dataset.header,
            as: x.querySelector('span').dataset.as, text: x.querySelector('span').textContent}))};
})"""


def create_topic(cluster, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 3, config=configs or {})])[topic]
    future.result(30)
    wait_until(lambda: topic in admin.list_topics(topic, timeout=10).topics
               and not admin.list_topics(topic, timeout=10).topics[topic].error, 30, what=f"{topic} known")


def api(console, path: str) -> dict:
    """The console's JSON answer (the same figures as the tierlog commands, without a process per ask)."""
    with urllib.request.urlopen(console.url + path.lstrip("/"), timeout=30) as r:
        return json.load(r)


def leader_tier(console, topic: str) -> dict | None:
    rows = api(console, f"/api/partition?topic={topic}&partition=0")["replicas"]
    return next((r for r in rows if r["role"] == "leader"), None)


def spaced_hex(data: bytes) -> str:
    return " ".join(f"{b:02x}" for b in data[:SHOWN])


def test_message_browser_shows_what_a_consumer_reads_remote_records_too(cluster, console, page):
    topic = unique("console-browse")
    create_topic(cluster, topic, 1, TIERED)
    base = int(time.time() * 1000) - 3_600_000
    sent = [special(i, base) for i in range(20)]

    async def produce():  # then 100 records of 300 bytes: the first 20 go to the remote tier, then off the disks
        async with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                             "batch.size": 2000}) as p:
            futures = [await p.send(topic, value=v, key=k, partition=0, timestamp_ms=ts, headers=h)
                       for k, v, h, ts in sent]
            futures += [await p.send(topic, value=b"f" * 300, partition=0) for _ in range(100)]
            return [(await f).offset for f in futures]
    assert run_async(produce) == list(range(120))
    seen = {}

    def remote_only():
        r = seen["row"] = leader_tier(console, topic)
        return r and r["local_log_start_offset"] > 20 and (r["highest_offset_in_remote_storage"] or -1) >= 20
    try:
        wait_until(remote_only, 90, what="the first 20 records in the remote tier only")
    except AssertionError as e:
        raise AssertionError(f"{e}; the leader's row: {seen.get('row')}") from None
    want = consumer_read(cluster.bootstrap, topic, 0, 20)
    assert [(r.key, r.value, list(r.headers)) for r in want] == [(k, v, h) for k, v, h, _ in sent]

    open_page(page, console, f"topics/{topic}/0/records")
    page.fill("#browse input[name=at]", "0")
    page.fill("#browse input[name=limit]", "20")
    page.click("#read")
    until(page, lambda: page.locator("#records tbody tr").count() == 20
          and page.locator("#page-info").get_attribute("data-start") == "0", 60, "the first 20 records")

    for which in ("key", "value", "headers"):
        page.select_option(f"#format-{which}", "hex")
    rows = page.evaluate(ROWS_JS)
    assert [r["offset"] for r in rows] == [r.offset for r in want]
    assert [r["ts"] for r in rows] == [r.timestamp for r in want] == [ts for *_, ts in sent]
    for row, r in zip(rows, want, strict=True):
        assert row["value"] == {"as": "hex", "text": spaced_hex(r.value),
                                "trunc": f"{len(r.value)} bytes, the first {SHOWN} shown" if len(r.value) > SHOWN
                                else None}, row["offset"]
        assert row["key"]["text"] == ("null" if r.key is None else spaced_hex(r.key))
        assert [(x["key"], x["text"]) for x in row["headers"]] == [(k, spaced_hex(v)) for k, v in r.headers]
    shot(page, "browser-hex")

    for which in ("key", "value", "headers"):
        page.select_option(f"#format-{which}", "auto")
    rows = page.evaluate(ROWS_JS)
    for row, r in zip(rows, want, strict=True):
        kind = r.offset % 4
        value = row["value"]
        if kind == 0:
            assert value["as"] == "json"
            assert value["text"] == json.dumps(json.loads(r.value), indent=2, ensure_ascii=False)
            assert [(x["key"], x["as"], x["text"]) for x in row["headers"]] == [
                ("trace", "text", f"t-{r.offset}"), ("bin", "hex", "00 ff")]
        elif kind == 1:
            assert value["as"] == "hex" and row["key"]["text"] == "null"
        elif kind == 2:
            assert value == {"as": "text", "text": r.value.decode(), "trunc": None}
            assert row["key"] == {"as": "text", "text": r.key.decode(), "trunc": None}
        else:
            assert value["as"] == "text" and value["text"] == r.value[:SHOWN].decode()
            assert value["trunc"] == f"{len(r.value)} bytes, the first {SHOWN} shown"
            assert row["key"]["as"] == "hex"
    page.select_option("#format-value", "text")  # JSON asked as text: the bytes as they are
    assert page.evaluate(ROWS_JS)[0]["value"]["text"] == want[0].value.decode()
    page.select_option("#format-value", "auto")
    shot(page, "browser")

    # the next page starts where this one ended, the previous one goes back
    page.click("#next")
    until(page, lambda: page.locator("#page-info").get_attribute("data-start") == "20", 30, "the next page")
    assert page.evaluate(ROWS_JS)[0]["offset"] == 20
    page.click("#previous")
    until(page, lambda: page.locator("#page-info").get_attribute("data-start") == "0", 30, "the previous page")

    # by time: the first record at or after it, as ListOffsets by timestamp finds it
    at = base + 10 * 1000 + 500
    expected = offset_for_time(cluster.bootstrap, topic, at)
    assert expected == 11
    page.select_option("#browse select[name=from]", "time")
    page.fill("#browse input[name=at]", str(at))
    page.click("#read")
    until(page, lambda: page.locator("#page-info").get_attribute("data-start") == str(expected), 30,
          "the page starting at the record found by time")
    assert page.evaluate(ROWS_JS)[0]["offset"] == expected
    assert f"is offset {expected}" in page.locator("#found").inner_text()
    assert leader_tier(console, topic)["local_log_start_offset"] > 20  # the pages' records: remote only


def scrape_totals(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {"produce_bytes": 0.0, "produce_requests": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kafka_server_brokertopicmetrics_bytesin_total":
                out["produce_bytes"] += s.value
            elif s.name == "kafka_network_requestmetrics_requests_total" and s.labels.get("request") == "Produce":
                out["produce_requests"] += s.value
    return out


@pytest.fixture(scope="module")
def metrics_console(cluster):
    c = Console(cluster.bootstrap, "--metrics-interval", "1")
    yield c
    c.stop()


def test_metrics_page_charts_match_the_brokers_metrics(cluster, metrics_console, browser):
    import confluent_kafka

    p = browser.new_page()
    page_errors: list[str] = []
    p.on("pageerror", lambda e: page_errors.append(str(e)))
    topic = unique("console-metrics")
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    try:
        producer.produce(topic, b"first")  # the topic made by the cluster's auto-creation, its leader known
        assert producer.flush(30) == 0
        leader = str(producer.list_topics(topic, timeout=30).topics[topic].partitions[0].leader)
        url = next(b["endpoint"] for b in api(metrics_console, "/api/cluster")["brokers"] if str(b["id"]) == leader)
        p.goto(f"{metrics_console.url}#/metrics")
        p.locator("#broker").wait_for(timeout=30_000)
        p.select_option("#broker", leader)
        until(p, lambda: p.locator(".chart canvas").count() >= 5, 30, "the five charts drawn")
        for i in range(200):
            producer.produce(topic, b"m" * 200)
            if i % 20 == 0:
                producer.flush(30)  # a few requests, so each scrape interval sees some
        assert producer.flush(30) == 0
        legend = p.locator("#chart-bytes [data-k='produce_bytes']")
        until(p, lambda: float(legend.get_attribute("data-v") or 0) > 0, 30, "the produce rate above 0")
        until(p, lambda: (p.locator("#chart-latency [data-k='produce_p99']").get_attribute("data-v") or "") != "",
              30, "a produce p99 point")
        shot(p, "metrics")

        # the last scrape's totals are a /metrics scrape: between one taken before and one taken after it
        row = f"#totals tr[data-broker='{leader}']"
        before, asked = scrape_totals(url), time.time()
        until(p, lambda: float(cell(p, row, "latest_t") or 0) > asked, 30, "a scrape after ours")
        shown = {k: float(cell(p, row, k)) for k in ("produce_bytes", "produce_requests")}
        after = scrape_totals(url)
        for k, v in shown.items():
            assert before[k] <= v <= after[k], (k, before[k], v, after[k])
        assert before["produce_bytes"] > 200 * 200
        assert not page_errors, page_errors
    finally:
        p.close()


def test_consumer_protocol_group_shows_type_members_assignment_and_lag(cluster, console, page):
    import threading

    import confluent_kafka

    topic, group = unique("console-848"), unique("console-848g")
    create_topic(cluster, topic, 2)

    def produce(n: int) -> None:
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(n):
            p.produce(topic, f"r{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
    produce(20)
    stop, paused, failures = threading.Event(), threading.Event(), []

    def consume():  # reads 12 records, commits them, then holds its partitions without reading (lag grows)
        c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                      "enable.auto.commit": False})
        c.subscribe([topic])
        read = 0
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    read += 1
                elif m is not None and m.error().fatal():
                    failures.append(str(m.error()))
                if read >= 12 and not paused.is_set():
                    c.commit(asynchronous=False)
                    c.pause(c.assignment())
                    paused.set()
        finally:
            c.close()
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        assert paused.wait(60), failures
        produce(10)
        tps = {f"{topic}-0", f"{topic}-1"}

        def settled(d):
            return (d["group_type"] == "consumer" and d["state"] == "Stable" and len(d["members"]) == 1
                    and set(d["members"][0]["partitions"]) == tps
                    and sum(p["log_end_offset"] for p in d["partitions"]) == 30
                    and all(p["current_offset"] is not None for p in d["partitions"]))
        wait_until(lambda: settled(api(console, f"/api/group?group={group}")), 60,
                   what="the KIP-848 group stable, its lag known", ignore=(urllib.error.HTTPError,))
        d = as_json("group", "describe", group, "-b", cluster.bootstrap)
        assert settled(d), d
        assert sum(p["lag"] for p in d["partitions"]) == 18

        open_page(page, console, "groups")
        row = f"tr[data-group='{group}']"
        until(page, lambda: page.locator(f"{row} [data-k='group_type']").inner_text() == d["group_type"]
              and page.locator(f"{row} [data-k='state']").inner_text() == d["state"], 30,
              "the group listed with its type")
        open_page(page, console, f"groups/{group}")
        member = d["members"][0]
        until(page, lambda: all(cell(page, f"tr[data-tp='{p['topic']}-{p['partition']}']", "lag") == str(p["lag"])
                                for p in d["partitions"]), 30, "the lag per partition as group describe shows it")
        assert page.locator("[data-k='group_type']").inner_text() == "consumer"
        assert page.locator("[data-k='state']").inner_text() == d["state"]
        assert page.locator("[data-k='assignor']").inner_text() == d["assignor"]
        assert page.locator("#members tbody tr").count() == 1
        shown = page.locator(f"#members tr[data-member='{member['consumer_id']}'] [data-k='partitions']").inner_text()
        assert set(shown.split(", ")) == set(member["partitions"])
        for p in d["partitions"]:
            tr = f"tr[data-tp='{p['topic']}-{p['partition']}']"
            assert cell(page, tr, "current_offset") == str(p["current_offset"])
            assert cell(page, tr, "log_end_offset") == str(p["log_end_offset"])
        shot(page, "group-consumer-protocol")
    finally:
        stop.set()
        reader.join(30)
    assert not failures, failures
