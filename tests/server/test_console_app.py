"""The console's HTTP app over real sockets, without a cluster (its address refuses connections): the page
and every asset it loads come from the console with their content types, actions follow the endpoint's
token rules (403 read-only, 401 without or with a wrong token, 405 for a GET), bad parameters are 400
before anything is asked of the cluster, and a cluster that cannot be reached is 503 naming its address.
The browser tests against a real cluster are tests/cluster/test_console.py."""

from __future__ import annotations

import asyncio
import http.client
import json
import re

import pytest

from tests.harness.ports import PortReservation
from tierlog.console.app import console_endpoint
from tierlog.console.views import ConsoleViews

TOKEN = "console-unit-token"


def request(port: int, method: str, path: str, headers: dict | None = None) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def nowhere():
    closed = PortReservation()  # bound, never listening
    yield f"127.0.0.1:{closed.port}"
    closed.close()


def serve_and(bootstrap: str, token: str | None, calls) -> list:
    """Start a console for ``bootstrap``, make each (method, path, headers) request, stop it."""
    async def go():
        views = ConsoleViews(bootstrap, timeout_s=1.0)
        endpoint = console_endpoint(views, token)
        port = await endpoint.start("127.0.0.1", 0)
        try:
            return [await asyncio.to_thread(request, port, *call) for call in calls]
        finally:
            await endpoint.stop()
            await views.close()
    return asyncio.run(go())


def test_the_page_and_its_assets_come_from_the_console(nowhere):
    (status, ctype, page), = serve_and(nowhere, None, [("GET", "/", None)])
    assert status == 200 and ctype.startswith("text/html")
    imports = json.loads(re.search(r'<script type="importmap">(.*?)</script>', page, re.S).group(1))["imports"]
    paths = [*imports.values(), *re.findall(r'(?:src|href)="(/static/[^"]+)"', page)]
    assert "/static/app.js" in paths and all(p.startswith("/static/") for p in paths), paths
    answers = serve_and(nowhere, None, [("GET", p, None) for p in paths])
    for path, (status, ctype, body) in zip(paths, answers, strict=True):
        assert status == 200, path
        assert ctype.startswith("text/css" if path.endswith(".css") else "text/javascript"), (path, ctype)
        assert not re.search(r"""(?:from|import)\s*\(?["']https?:""", body), path  # no module from another host


def test_actions_follow_the_token_rules(nowhere):
    create = "/api/topic/create?topic=t1&partitions=1"
    read_only, = serve_and(nowhere, None, [("POST", create, {"Authorization": f"Bearer {TOKEN}"})])
    assert read_only[0] == 403 and "read-only" in json.loads(read_only[2])["error"]
    missing, wrong, get = serve_and(nowhere, TOKEN, [("POST", create, None),
                                                     ("POST", create, {"Authorization": "Bearer nope"}),
                                                     ("GET", create, {"Authorization": f"Bearer {TOKEN}"})])
    assert missing[0] == 401 and wrong[0] == 401 and "admin token" in json.loads(wrong[2])["error"]
    assert get[0] == 405
    # with the token the action reaches the cluster, which is not there: 503 naming the address
    reached, = serve_and(nowhere, TOKEN, [("POST", create, {"Authorization": f"Bearer {TOKEN}"})])
    assert reached[0] == 503 and f"cannot reach the cluster at {nowhere}" in json.loads(reached[2])["error"]


@pytest.mark.parametrize(("path", "message"), [
    ("/api/topic", "parameter topic is required"),
    ("/api/topic?topic=a/b", "parameter topic: must be a topic name"),
    ("/api/partition?topic=a&partition=-1", "parameter partition: must be a whole number"),
    ("/api/topics?x=1", "unknown parameter 'x'"),
    ("/?poll=abc", "parameter poll"),
])
def test_bad_parameters_are_400_before_the_cluster_is_asked(nowhere, path, message):
    (status, _, body), = serve_and(nowhere, None, [("GET", path, None)])
    assert status == 400 and message in json.loads(body)["error"], body


def test_an_unreachable_cluster_is_503_naming_it(nowhere):
    (status, _, body), = serve_and(nowhere, None, [("GET", "/api/cluster", None)])
    assert status == 503 and f"cannot reach the cluster at {nowhere}" in json.loads(body)["error"]


# ------------------------------------------------------------------- long lists (consoleperf, issue 42)


@pytest.mark.parametrize(("path", "message"), [
    ("/api/topics?limit=0", "parameter limit: must be a whole number from 1 to 1000"),
    ("/api/groups?offset=-1", "parameter offset: must be a whole number"),
    ("/api/topics?sort=a-b", "parameter sort: must be a column name"),
    ("/api/groups?desc=maybe", "parameter desc: must be true or false"),
])
def test_bad_list_parameters_are_400(nowhere, path, message):
    (status, _, body), = serve_and(nowhere, None, [("GET", path, None)])
    assert status == 400 and message in json.loads(body)["error"], body


def test_one_picture_serves_every_tab_and_none_is_made_while_nobody_looks():
    """Many pages asking at once get one picture of the cluster; once nobody asks, the console stops
    asking the cluster."""
    from tests.harness.waiting import wait_until_async
    from tierlog.console.snapshot import Snapshot

    made = []

    async def make() -> dict:
        made.append(1)
        await asyncio.sleep(0.05)  # the cluster's answer takes a while
        return {"n": len(made)}

    async def go():
        snapshot = Snapshot(make, min_interval_s=0.1, idle_after_s=0.5)
        try:
            answers = await asyncio.gather(*(snapshot.get() for _ in range(20)))
            assert len(made) == 1 and all(a["n"] == 1 for a in answers)
            async def asked_again() -> bool:  # a page polling
                await snapshot.get()
                return len(made) >= 2
            await wait_until_async(asked_again, 30, what="a second picture while asked for")
            await wait_until_async(lambda: snapshot._task.done(), 30, what="the refresh stopping, nobody asking")
            stopped = len(made)
            assert (await snapshot.get())["n"] > stopped  # asked again: a fresh picture
        finally:
            await snapshot.close()
    asyncio.run(go())

# ------------------------------------------- the remaining actions: alter configs, reset offsets, disable tiering

ACTIONS = ["/api/topic/configs?topic=t1&set=retention.ms=1", "/api/group/reset-offsets?group=g&to=earliest",
           "/api/topic/disable-tiering?topic=t1&delete_remote=true"]


def test_the_new_actions_follow_the_token_rules(nowhere):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for status, _, body in serve_and(nowhere, None, [("POST", path, bearer) for path in ACTIONS]):
        assert status == 403 and "read-only" in json.loads(body)["error"]
    for status, _, body in serve_and(nowhere, TOKEN, [("POST", path, None) for path in ACTIONS]):
        assert status == 401 and "admin token" in json.loads(body)["error"]
    # the reset's preview is a GET (a dry run: it writes nothing), asked of the cluster without a token
    (status, _, body), = serve_and(nowhere, None, [("GET", ACTIONS[1], None)])
    assert status == 503 and f"cannot reach the cluster at {nowhere}" in json.loads(body)["error"]


@pytest.mark.parametrize(("path", "message"), [
    ("/api/group/reset-offsets?group=g&to=sideways", "parameter to: must be one of earliest, latest, offset"),
    ("/api/group/reset-offsets?group=g&to=offset", "parameter value is required with to=offset"),
    ("/api/group/reset-offsets?group=g&to=timestamp&value=-5", "parameter value: must be a whole number"),
    ("/api/group/reset-offsets?to=latest", "parameter group is required"),
    ("/api/topic/disable-tiering?topic=t1&delete_remote=maybe", "parameter delete_remote: must be true or false"),
    ("/api/topic/disable-tiering?topic=t1", "parameter delete_remote is required"),
    ("/api/topic/configs?topic=t1&set=retention.ms", "parameter set: 'retention.ms' is not KEY=VALUE"),
    ("/api/topic/configs?topic=t1", "INVALID_REQUEST: nothing to change"),
    ("/api/topic/configs?topic=t1&set=a=1&delete=a", "INVALID_REQUEST: a: set and deleted in one request"),
])
def test_bad_parameters_of_the_new_actions_are_400(nowhere, path, message):
    (status, _, body), = serve_and(nowhere, TOKEN, [("POST", path, {"Authorization": f"Bearer {TOKEN}"})])
    assert status == 400 and message in json.loads(body)["error"], body


def test_what_a_delete_disablement_has_left_is_summed_over_the_brokers(monkeypatch):
    """Each broker counts the partitions it leads, so the topic's figure shown (the console's and `tierlog
    tier status`'s merged answer) is the sum of every broker's; the first error found is kept."""
    from tierlog.tools import tier

    def status(node_id: int, segments: int, error: str | None) -> dict:
        return {"node_id": node_id, "topics": [{"topic": "t", "state": "DISABLING", "policy": "delete", "epoch": 2,
                                                "remote_segments_to_delete": segments,
                                                "remote_bytes_to_delete": segments * 100, "last_error": error}],
                "partitions": []}
    answers = {"http://b1": status(1, 3, None), "http://b2": status(2, 0, None), "http://b3": status(3, 2, "slow")}
    monkeypatch.setattr(tier, "fetch_status", lambda url, topic, timeout: answers[url])
    merged = tier.cluster_status([{"node_id": i, "url": f"http://b{i}"} for i in (1, 2, 3)], "t")
    [t] = merged["topics"]
    assert (t["remote_segments_to_delete"], t["remote_bytes_to_delete"], t["last_error"]) == (5, 500, "slow")
    assert answers["http://b1"]["topics"][0]["remote_segments_to_delete"] == 3  # the brokers' answers unchanged
# ------------------------------------------------------------- the message browser and the metrics charts

from tierlog.console import browse, metrics_history  # noqa: E402


def test_a_field_is_text_json_and_hex_and_long_ones_are_cut_with_their_size():
    plain = browse.field(b"hello")
    assert plain == {"size": 5, "truncated": False, "text": "hello", "json": None, "hex": "68656c6c6f"}
    doc = browse.field(b'{"a": [1, "\xc3\xa9"]}')
    assert doc["json"] == '{\n  "a": [\n    1,\n    "\xe9"\n  ]\n}' and doc["text"] == '{"a": [1, "\xe9"]}'
    assert browse.field(b"42")["json"] is None  # a bare number is shown as text, not as "JSON"
    assert browse.field(b"{not json")["json"] is None
    binary = browse.field(b"\x00\xff\xfe")
    assert binary["text"] is None and binary["json"] is None and binary["hex"] == "00fffe"
    assert browse.field(None) is None and browse.field(b"") == {"size": 0, "truncated": False, "text": "",
                                                                  "json": None, "hex": ""}
    big = browse.field(b'{"k": "' + b"x" * 10_000 + b'"}', shown=100)
    assert big["size"] == 10_009 and big["truncated"] and len(big["hex"]) == 200
    assert big["json"] is None and big["text"] == '{"k": "' + "x" * 93  # cut: no JSON claimed for a part
    # a cut inside a character leaves that character out instead of calling the text binary
    cut = browse.field("é".encode() * 60, shown=101)
    assert cut["truncated"] and cut["text"] == "é" * 50


@pytest.mark.parametrize(("query", "message"), [
    ("topic=t&partition=0&limit=501", "parameter limit: must be a whole number from 1 to 500"),
    ("topic=t&partition=0&limit=0", "parameter limit"),
    (f"topic=t&partition=0&max_bytes={browse.MAX_BYTES + 1}", "parameter max_bytes"),
    ("topic=t&partition=0&offset=-1", "parameter offset"),
    ("topic=t&partition=0&offset=1&timestamp=1", "give offset or timestamp, not both"),
    ("topic=t&partition=0&isolation_level=dirty", "parameter isolation_level: must be one of read_committed"),
    ("partition=0", "parameter topic is required"),
])
def test_the_browser_bounds_what_one_request_reads(nowhere, query, message):
    (status, _, body), = serve_and(nowhere, None, [("GET", f"/api/records?{query}", None)])
    assert status == 400 and message in json.loads(body)["error"], body


def test_a_page_of_records_from_an_unreachable_cluster_is_503(nowhere):
    (status, _, body), = serve_and(nowhere, None, [("GET", "/api/records?topic=t&partition=0", None)])
    assert status == 503 and f"cannot reach the cluster at {nowhere}" in json.loads(body)["error"], body


SCRAPE = """# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="a"} %(a)s
kafka_server_brokertopicmetrics_bytesin_total{topic="b"} 100.0
# TYPE kafka_network_requestmetrics_requests_total counter
kafka_network_requestmetrics_requests_total{request="Produce"} %(produce)s
kafka_network_requestmetrics_requests_total{request="Fetch"} 50.0
kafka_network_requestmetrics_requests_total{request="FetchConsumer"} 30.0
kafka_network_requestmetrics_requests_total{request="FetchFollower"} 20.0
# TYPE kafka_network_requestmetrics_errors_total counter
kafka_network_requestmetrics_errors_total{error="NOT_LEADER_OR_FOLLOWER",request="Fetch"} 4.0
kafka_network_requestmetrics_errors_total{error="NOT_LEADER_OR_FOLLOWER",request="FetchConsumer"} 4.0
kafka_network_requestmetrics_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION",request="Metadata"} 1.0
# TYPE kafka_network_requestmetrics_totaltimems histogram
kafka_network_requestmetrics_totaltimems_bucket{le="1.0",request="Produce"} %(le1)s
kafka_network_requestmetrics_totaltimems_bucket{le="10.0",request="Produce"} %(le10)s
kafka_network_requestmetrics_totaltimems_bucket{le="+Inf",request="Produce"} %(inf)s
kafka_network_requestmetrics_totaltimems_count{request="Produce"} %(inf)s
kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 0.0
"""


def test_charts_are_rates_and_percentiles_between_two_scrapes():
    one = metrics_history.parse(SCRAPE % {"a": 50.0, "produce": 10.0, "le1": 0, "le10": 0, "inf": 0})
    # topics summed; a fetch's second count (FetchConsumer) left out of the errors
    assert one["produce_bytes"] == 150 and one["fetch_requests"] == 30 and one["errors"] == 5
    two = metrics_history.parse(SCRAPE % {"a": 250.0, "produce": 30.0, "le1": 50, "le10": 98, "inf": 100})
    p = metrics_history.points({"t": 100.0, "figures": one}, {"t": 110.0, "figures": two})
    assert p["produce_bytes"] == 20.0 and p["produce_requests"] == 2.0 and p["errors"] == 0.0
    # 100 requests: 50 within 1 ms, 48 in (1, 10], 2 above: p50 is the bucket's upper edge, p99 the top one
    assert p["produce_p50"] == 1.0 and p["produce_p99"] == 10.0
    assert metrics_history.quantile(0.75, [(1.0, 0), (10.0, 0), (float("inf"), 0)],
                                    [(1.0, 50), (10.0, 100), (float("inf"), 100)]) == 5.5
    # a restarted broker's counters went down: no point for that interval, not a negative rate
    back = metrics_history.points({"t": 110.0, "figures": two}, {"t": 115.0, "figures": one})
    assert back["produce_bytes"] is None and back["produce_p99"] is None
    # no request in between: no percentile
    assert metrics_history.points({"t": 1.0, "figures": two}, {"t": 2.0, "figures": two})["produce_p50"] is None


def test_the_history_is_bounded_and_one_broker_down_does_not_stop_the_others():
    text = SCRAPE % {"a": 0.0, "produce": 0.0, "le1": 0, "le10": 0, "inf": 0}

    async def endpoints():
        return [{"node_id": 1, "url": "http://a"}, {"node_id": 2, "url": None, "error": "no metrics.port"}]
    # 15 minutes at a 90 s interval: 11 samples; at 0.1 s the cap, not 9,001
    assert metrics_history.MetricsHistory(endpoints, interval_s=0.1)._keep == metrics_history.MAX_SAMPLES
    history = metrics_history.MetricsHistory(endpoints, interval_s=metrics_history.HISTORY_S / 10)
    original = metrics_history.scrape
    metrics_history.scrape = lambda url, timeout: text

    async def scrape(times):
        for _ in range(times):
            await history.scrape_once()
    try:
        asyncio.run(scrape(15))
    finally:
        metrics_history.scrape = original
    assert len(history.samples[1]) == 11
    charts = history.charts([1, 2])
    assert len(charts["brokers"]["1"]["t"]) == 10 and charts["brokers"]["1"]["series"]["produce_bytes"][-1] == 0
    assert charts["brokers"]["2"]["error"] == "no metrics.port" and charts["brokers"]["2"]["t"] == []

# ---------------------------------------------- what the open console costs the brokers (docs/console.md, Benchmark)


def test_the_pause_between_pictures_grows_with_the_partitions():
    from tierlog.console.snapshot import Snapshot

    async def make() -> dict:
        return {}
    s = Snapshot(make, min_interval_s=2.0)
    assert s.pause_after(0.05, 60) == 2.0  # a small cluster: every 2 s
    assert s.pause_after(1.0, 60) == 5.0  # a slow answer: five times as long
    assert s.pause_after(0.4, 10_000) == 10.0  # 10,000 partitions: a second per 1,000
    assert s.pause_after(0.4, 100_000) == 20.0  # at most ten times the interval


def test_the_metrics_are_scraped_only_while_a_page_asks_and_the_pause_is_a_gap(monkeypatch):
    from tests.harness.waiting import wait_until_async

    scraped = []

    def scrape(url, timeout):
        scraped.append(url)
        return SCRAPE % {"a": 10.0 * len(scraped), "produce": 0.0, "le1": 0, "le10": 0, "inf": 0}
    monkeypatch.setattr(metrics_history, "scrape", scrape)

    async def endpoints():
        return [{"node_id": 1, "url": "http://a"}]

    async def go():
        history = metrics_history.MetricsHistory(endpoints, interval_s=0.05, idle_after_s=0.3)
        await history.scrape_once()
        history.start()  # a page asked
        await wait_until_async(lambda: len(scraped) >= 3, 30, what="scrapes while the page polls")
        await wait_until_async(lambda: history._task.done(), 30, what="scraping stopping, no page asking")
        stopped = len(scraped)
        await history.scrape_once()  # a page asks again, a second (20 intervals) after the last scrape:
        history.samples[1][-1]["t"] = history.samples[1][-2]["t"] + 1.0
        series = history.charts([1])["brokers"]["1"]["series"]["produce_bytes"]
        assert stopped >= 3 and series[-1] is None and any(p is not None for p in series[:-1]), series
        await history.stop()
    asyncio.run(go())
