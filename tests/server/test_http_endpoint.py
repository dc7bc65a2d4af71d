"""The broker's HTTP endpoint over real sockets: read-only by default, state changes only by POST with the
admin setting and the bearer token, short one-line errors for bad requests, and the orchestrators' probes.

Each broker tiers to a local folder so that reconcile has something to find: one orphaned segment (a copy
of a real segment under an id no metadata knows, what a crash mid-upload leaves)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import urllib.parse

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess
from tests.harness.tiered import metrics_url, tier_status, tiered_settings, wait_for

TOKEN = "s3cret-token-for-tests"
SMALL = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def request(b: BrokerProcess, method: str, path: str, headers: dict | None = None,
            body: bytes | None = None) -> tuple[int, dict, str]:
    """(status, headers, body text) of one request to the broker's endpoint."""
    url = urllib.parse.urlsplit(metrics_url(b))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def error_of(status: int, body: str) -> str:
    """The one-line message of an error answer, checked to be short JSON without Python's internals."""
    assert status >= 400
    message = json.loads(body)["error"]
    assert "\n" not in message.strip() and len(message) < 300, message
    assert not any(w in body for w in ("Traceback", "Error(", "<class", "object at", "File \"")), body
    return message


def tier_cli(b: BrokerProcess, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "TIERLOG_ADMIN_TOKEN"}
    full_env.update({"PYTHONPATH": str(ROOT / "src"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "tierlog", "tier", *args, "--url", metrics_url(b)],
                          capture_output=True, text=True, env=full_env, timeout=120)


def tier_with_orphan(b: BrokerProcess, root) -> tuple:
    """A tiered topic with a few remote segments plus one orphaned segment; (orphan paths, a real .log)."""
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("tiered", 1, 1, topic_configs=SMALL)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    for i in range(150):
        p.send("tiered", (b"%08d" % i) * 125)
    p.flush()
    p.close()
    wait_for(lambda: (s := tier_status(b, "tiered")["partitions"]) and (s[0]["remote_segments"] or 0) >= 3,
             "a few remote segments")
    real = sorted((root / "remote").rglob("*.log"))[0]
    stem = real.name[:-len(".log")]
    orphan = stem[:21] + "AAAAAAAAAAAAAAAAAAAAAA"
    paths = []
    for suffix in (".log", ".indexes"):
        path = real.parent / (orphan + suffix)
        path.write_bytes((real.parent / (stem + suffix)).read_bytes())
        paths.append(path)
    return paths, real


@pytest.fixture
def read_only_broker(start_broker, tmp_path):
    return start_broker(tiered_settings(tmp_path))


@pytest.fixture
def admin_broker(start_broker, tmp_path):
    return start_broker(tiered_settings(tmp_path, **{"metrics.admin.enable": "true", "metrics.admin.token": TOKEN}))


def test_read_only_by_default_and_get_never_changes_anything(read_only_broker, tmp_path):
    b = read_only_broker
    orphans, _ = tier_with_orphan(b, tmp_path)
    assert any("Metrics on http://127.0.0.1:" in line for line in b.output)  # loopback unless configured

    status, _, body = request(b, "GET", "/v1/tier/reconcile")
    assert status == 200
    report = json.loads(body)
    assert len(report["orphans"]) == 1 and report["orphans_deleted"] == 0
    # A GET asking for a change is refused, whatever the admin settings ...
    status, headers, body = request(b, "GET", "/v1/tier/reconcile?delete=true")
    assert status == 405 and "POST" in headers["allow"]
    assert "GET never changes anything" in error_of(status, body)
    # ... and POST is refused while admin operations are off, token or not.
    for auth in ({}, {"Authorization": f"Bearer {TOKEN}"}):
        status, _, body = request(b, "POST", "/v1/tier/reconcile?delete=true", auth)
        assert status == 403 and "metrics.admin.enable" in error_of(status, body)
    out = tier_cli(b, "reconcile", "--delete", "--token", TOKEN)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "403" in out.stderr and "metrics.admin.enable" in out.stderr
    assert "Traceback" not in out.stderr
    assert all(p.exists() for p in orphans)  # nothing was deleted by any of it
    # Read-only routes take no POST, other methods nothing.
    for method, path in (("POST", "/metrics"), ("POST", "/v1/tier/status"), ("PUT", "/v1/tier/reconcile"),
                         ("DELETE", "/health")):
        status, headers, body = request(b, method, path)
        assert status == 405 and headers["allow"], (method, path)
        error_of(status, body)


def test_bad_requests_get_a_short_400_and_unknown_paths_404(read_only_broker):
    b = read_only_broker
    cases = {
        "/v1/tier/status?bogus=1": "unknown parameter 'bogus'",
        "/v1/tier/status?topic=a/b": "parameter topic",
        "/v1/tier/status?topic=" + "x" * 300: "parameter topic",
        "/v1/tier/status?topic=a&topic=b": "more than once",
        "/v1/tier/status?topic": "malformed query string",
        "/v1/tier/reconcile?delete=maybe": "parameter delete: must be true or false",
        "/metrics?x=1": "unknown parameter 'x'",
        "/metrics?name[]=a%20b": "parameter name[]: must be a metric name",
    }
    for path, expected in cases.items():
        status, _, body = request(b, "GET", path)
        assert status == 400, (path, body)
        assert expected in error_of(status, body), (path, body)
    status, _, body = request(b, "GET", "/v1/tier/nothing")
    assert status == 404 and "no such path" in error_of(status, body)
    # a topic the cluster does not have, as a Kafka request names it (tierlog tier status --url --topic)
    status, _, body = request(b, "GET", "/v1/tier/status?topic=nosuch")
    assert status == 404 and "Topic nosuch not found (UNKNOWN_TOPIC_OR_PARTITION)" in error_of(status, body)
    status, _, body = request(b, "POST", "/v1/tier/reconcile", body=b"x" * 5000)
    assert status == 413
    error_of(status, body)
    # A request head beyond the bound is refused, not buffered.
    url = urllib.parse.urlsplit(metrics_url(b))
    with socket.create_connection((url.hostname, url.port), timeout=30) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    # The endpoint still works after all of it.
    assert request(b, "GET", "/v1/tier/status")[0] == 200


def test_admin_reconcile_needs_post_the_setting_and_the_right_token(admin_broker, tmp_path):
    b = admin_broker
    orphans, real = tier_with_orphan(b, tmp_path)
    assert not any("password" in line.lower() or TOKEN in line for line in b.output)  # the token is never logged
    # No token, another scheme, a wrong token: 401, nothing deleted.
    for auth in ({}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer wrong"},
                 {"Authorization": f"Bearer {TOKEN}x"}):
        status, headers, body = request(b, "POST", "/v1/tier/reconcile?delete=true", auth)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer"), auth
        assert "admin token" in error_of(status, body)
    # GET stays read-only on an admin broker too.
    status, _, body = request(b, "GET", "/v1/tier/reconcile?delete=true", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 405
    assert all(p.exists() for p in orphans)
    # The CLI with a wrong token: one line, exit 1.
    out = tier_cli(b, "reconcile", "--delete", env={"TIERLOG_ADMIN_TOKEN": "wrong"})
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "401" in out.stderr, out.stderr
    assert all(p.exists() for p in orphans)
    # The token from the -c file of the CLI (a wrong one here: refused, one line).
    props = tmp_path / "client.properties"
    props.write_text(f"log.dirs={tmp_path / 'unused'}\nmetrics.admin.token=not-{TOKEN}\n")
    out = tier_cli(b, "reconcile", "--delete", "-c", str(props))
    assert out.returncode == 1 and "401" in out.stderr and f"not-{TOKEN}" not in out.stderr
    # POST without delete reports only; with the right token the orphan goes, referenced objects stay.
    status, _, body = request(b, "POST", "/v1/tier/reconcile", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and json.loads(body)["orphans_deleted"] == 0 and all(p.exists() for p in orphans)
    out = tier_cli(b, "reconcile", "--delete", "--json", env={"TIERLOG_ADMIN_TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["orphans_deleted"] == 1
    assert not any(p.exists() for p in orphans) and real.exists()
    status, _, body = request(b, "GET", "/v1/tier/reconcile")
    assert json.loads(body)["orphans"] == []


def test_health_and_ready(read_only_broker):
    b = read_only_broker
    status, _, body = request(b, "GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "alive"}
    # Ready once the metadata manager is up (it initializes after the broker serves, KIP-1197).
    wait_for(lambda: request(b, "GET", "/ready")[0] == 200, "/ready 200")
    assert json.loads(request(b, "GET", "/ready")[2]) == {"status": "ready"}
    status, headers, body = request(b, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert "kafka_server_replicamanager_partitioncount " in body
    assert "kafka_network_requestmetrics_requests_total{" in body
    # name[] (as Prometheus' client libraries take it): only those samples; a described collector runs when asked
    status, _, only = request(b, "GET", "/metrics?name[]=kafka_network_requestmetrics_requests_total"
                                        "&name[]=kafka_server_replicamanager_leadercount")
    names = {line.split("{")[0].split(" ")[0] for line in only.splitlines() if line and not line.startswith("#")}
    assert status == 200 and names == {"kafka_network_requestmetrics_requests_total",
                                       "kafka_server_replicamanager_leadercount"}, names


def test_admin_enable_without_a_token_is_refused_at_start(tmp_path):
    b = BrokerProcess(tmp_path / "logs", {"metrics.port": "0", "metrics.admin.enable": "true"})
    with pytest.raises(RuntimeError) as info:
        b.start()
    assert "metrics.admin.token" in str(info.value) and "Traceback" not in str(info.value)


def test_the_admin_token_is_hidden_in_describe_output():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "tierlog", "config", "describe", "-o", "log.dirs=/nonexistent",
                          "-o", "metrics.admin.enable=true", "-o", f"metrics.admin.token={TOKEN}"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert TOKEN not in out.stdout and "metrics.admin.token" in out.stdout and "[hidden]" in out.stdout
