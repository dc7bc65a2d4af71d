"""The Grafana dashboard in dashboards/ only asks for metrics the broker exports: a real tiered broker
produces, fetches (locally and from remote storage), tiers and fails a request, /metrics is parsed as
Prometheus parses it, and every metric named by every panel query and template variable must be there."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import ROOT
from tests.harness.rawclient import RawClient, create_topic
from tests.harness.tiered import metrics_url, sample_value, scrape, tier_status, tiered_settings, wait_for
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))

# PromQL words that are not metric names: aggregations, keywords, and the label-list clauses' words.
_KEYWORDS = frozenset({
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "and", "or", "unless", "atan2", "inf", "nan", "Inf", "NaN",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_VALUES = re.compile(r"\blabel_values\s*\(([^,(){}]*(?:\{[^}]*\})?)\s*(,\s*[a-zA-Z_]\w*\s*)?\)")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(...)`` query) selects.

    Strings, label matchers ``{...}``, ranges ``[...]``, ``by (...)``-style label lists and Grafana
    variables are removed first; what is left is function names (followed by ``(``), keywords, numbers
    and metric names. ``label_values(metric{...}, label)`` names its first argument; its one-argument
    form names a label only."""
    expr = _LABEL_VALUES.sub(lambda m: f" {m.group(1)} " if m.group(2) else " ", expr)
    expr = _STRING.sub('""', expr)
    expr = re.sub(r"\{[^{}]*\}", " ", expr)
    expr = re.sub(r"\[[^\[\]]*\]", " ", expr)
    expr = _LABEL_LISTS.sub(" ", expr)
    expr = re.sub(r"\$\{[^}]*\}|\$\w+", " ", expr)
    names = set()
    for m in _IDENTIFIER.finditer(expr):
        name, call = m.group(1), m.group(2)
        if not call and name not in _KEYWORDS:
            names.add(name)
    return names


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (topic) (rate(kafka_server_brokertopicmetrics_bytesin_total{instance=~"$instance"}[$__rate_interval]))',
     {"kafka_server_brokertopicmetrics_bytesin_total"}),
    ('histogram_quantile(0.99, sum by (le, request) (rate(x_bucket{request=~"Produce|Fetch", a="{b} c"}[5m])))',
     {"x_bucket"}),
    ("sum(rate(a_sum[1m])) by (request) / sum(rate(a_count[1m])) by (request) * 1e3", {"a_sum", "a_count"}),
    ("max_over_time(g[1h:5m] offset 5m) > bool 0 or on(instance) vector(0)", {"g"}),
    ('label_values(kafka_log_log_size{instance=~"$instance"}, topic)', {"kafka_log_log_size"}),
    ("label_values(instance)", set()),
    ("up{job='tierlog'} unless ignoring(le) group_left(topic) rlmm:ready", {"up", "rlmm:ready"}),
])
def test_metric_names_of_promql(expr, names):
    assert metric_names(expr) == names


def dashboard_queries(path) -> list[tuple[str, str]]:
    """(where, expression) of every panel target (rows' nested panels too) and query variable."""
    dashboard = json.loads(path.read_text())
    found = []

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))
    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("expr"):
                found.append((f"panel {p.get('title')!r}", t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            found.append((f"variable {v['name']}", q.get("query", "") if isinstance(q, dict) else q or ""))
    return found


def announced_names(url_text: str) -> set[str]:
    """Every series name the exposition announces (HELP/TYPE), with the suffixes Prometheus stores for its
    type: a counter family ``x`` is stored as ``x_total``, a histogram as ``x_bucket``/``x_sum``/``x_count``."""
    names = set()
    for f in text_string_to_metric_families(url_text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                    "summary": ("", "_sum", "_count"), "info": ("_info",)}.get(f.type, ("",))
        names.update(f.name + s for s in suffixes)
        names.update(s.name for s in f.samples)
    return names


def test_the_dashboard_is_valid_grafana_json():
    assert DASHBOARDS, "no dashboard in dashboards/"
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        for p in d["panels"]:
            if p["type"] != "row":
                assert p["datasource"]["uid"] == "${datasource}", p["title"]
                assert p["targets"], p["title"]


@pytest.fixture
def tiered(start_broker, tmp_path):
    return start_broker(tiered_settings(tmp_path))


def produce(client: RawClient, partition: int, value: bytes) -> int:
    resp = client.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "dash", "partition_data": [{"index": partition, "records": build_batch([(None, value)])}]}]})
    return resp.responses[0].partition_responses[0].error_code


def test_every_dashboard_metric_is_exported(tiered):
    b = tiered
    create_topic(b.bootstrap, "dash", configs={"remote.storage.enable": "true", "segment.bytes": "20000",
                                               "local.retention.bytes": "1", "file.delete.delay.ms": "0"})
    client = RawClient(b.bootstrap)
    try:
        for i in range(40):  # 40 KB: segments roll, are uploaded and leave the local log
            assert produce(client, 0, b"%04d" % i * 250) == 0
        assert produce(client, 5, b"x") == 3  # an error to count: the topic has no partition 5

        def moved_to_remote():
            parts = tier_status(b, "dash")["partitions"]
            # remote_segments is None while the partition's first copy run has not read the remote tier yet
            return parts and (parts[0]["remote_segments"] or 0) > 0 and parts[0]["local_log_start_offset"] > 0
        wait_for(moved_to_remote, "segments uploaded and deleted locally", timeout=120)

        def read_from_remote():  # offset 0 is only in remote storage now
            resp = client.request(ApiKey.FETCH, 12, {
                "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": "dash", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 1 << 20,
                                                            "current_leader_epoch": -1, "log_start_offset": -1}]}]})
            p = resp.responses[0].partitions[0]
            return p.error_code == 0 and p.records
        wait_for(read_from_remote, "a read of offset 0 from remote storage", timeout=60)
    finally:
        client.close()
    text = urllib.request.urlopen(metrics_url(b) + "/metrics", timeout=30).read().decode()
    exported = announced_names(text)
    samples = scrape(b)
    # The activity above made the series the main panels plot exist, with values.
    for name, labels in (("kafka_server_brokertopicmetrics_bytesin_total", {"topic": "dash"}),
                         ("kafka_server_brokertopicmetrics_bytesout_total", {"topic": "dash"}),
                         ("kafka_server_brokertopicmetrics_messagesin_total", {"topic": "dash"}),
                         ("kafka_server_brokertopicmetrics_remotecopybytes_total", {"topic": "dash"}),
                         ("kafka_server_brokertopicmetrics_remotefetchrequests_total", {"topic": "dash"}),
                         ("kafka_server_brokertopicmetrics_remotelogsizebytes", {"topic": "dash", "partition": "0"}),
                         ("kafka_log_log_size", {"topic": "dash", "partition": "0"}),
                         ("kafka_network_requestmetrics_errors_total",
                          {"request": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"}),
                         ("tierlog_remote_log_metadata_manager_ready", {})):
        assert sample_value(samples, name, **labels), (name, labels)
    assert any(s.name == "kafka_network_requestmetrics_totaltimems_bucket" and s.labels["request"] == "Produce"
               for s in samples)
    missing = []
    for path in DASHBOARDS:
        queries = dashboard_queries(path)
        assert len(queries) > 20
        for where, expr in queries:
            names = metric_names(expr)
            assert names, f"{path.name} {where}: no metric in {expr!r}"
            missing += [f"{path.name} {where}: {n}" for n in sorted(names - exported)]
    assert not missing, "metrics the dashboard uses that the broker does not export:\n" + "\n".join(missing)
