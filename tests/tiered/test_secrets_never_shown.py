"""The remote tier's credentials and the broker's other secrets never leave the broker in clear: not in its
log, not in `tierlog tier status`, not on the HTTP endpoint's pages, not in DescribeConfigs answers (Kafka's
null value and is_sensitive=true), not in the errors of a failing S3 store or of a refused configuration.

One tiering broker against a SeaweedFS S3 server whose credentials are distinctive strings (it takes the
session token too); the test tiers segments, asks everything that shows settings or errors, then stops the
S3 server so uploads fail and the failures are logged and reported, and finally searches every captured
byte for the secrets."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from tests.cli.clilib import tierlog
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import create_topic, unique
from tests.harness.s3_servers import s3_server
from tests.harness.tiered import metrics_url, tier_status, wait_for

ACCESS_KEY = "AKIATIERLOGLEAKCHK7Q"
SECRET_KEY = "tierlog-s3-secret-Vq8u2LmWz"
SESSION_TOKEN = "tierlog-session-token-Hb4nR"
ADMIN_TOKEN = "tierlog-admin-token-Zx91Kp"
SECRETS = (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, ADMIN_TOKEN)

TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
                 "file.delete.delay.ms": "0"}


def _settings(endpoint: str, **extra: str) -> dict[str, str]:
    store = {"url": "s3://tiered/secrets", "aws_endpoint": endpoint, "aws_region": "us-east-1",
             "aws_allow_http": "true", "aws_virtual_hosted_style_request": "false", "aws_access_key_id": ACCESS_KEY,
             "aws_secret_access_key": SECRET_KEY, "aws_token": SESSION_TOKEN,
             "retry.max.retries": "1", "retry.timeout.ms": "2000", "request.timeout.ms": "3000",
             "connect.timeout.ms": "1000"}
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "objectstore",
            **{f"rsm.config.{k}": v for k, v in store.items()},
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "100",
            "metrics.port": "0", "metrics.admin.enable": "true", "metrics.admin.token": ADMIN_TOKEN,
            "num.partitions": "1", **extra}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    with s3_server("seaweedfs", root / "seaweedfs", access_key=ACCESS_KEY, secret_key=SECRET_KEY) as server:
        broker = BrokerProcess(root / "logs", _settings(server.endpoint)).start()
        seen: list[str] = []  # every answer, page and command output the test got
        try:
            yield broker, server, root, seen
        finally:
            broker.stop()


def _get(url: str, seen: list[str], method: str = "GET", headers: dict | None = None) -> str:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        body = urllib.request.urlopen(req, timeout=60).read().decode()
    except urllib.error.HTTPError as e:
        body = f"{e.code} {e.read().decode()}"
    seen.append(body)
    return body


def _cli(seen: list[str], *args: str) -> str:
    result = tierlog(*args)
    seen.append(result.stdout + result.stderr)
    return result.stdout + result.stderr


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(count):
        producer.send(topic, f"{i:06d}".encode() * 100)
    producer.flush(60)
    producer.close()


def _remote_segments(broker: BrokerProcess, topic: str) -> int:
    parts = tier_status(broker, topic)["partitions"]
    return sum(p.get("remote_segments") or 0 for p in parts)


def _assert_clean(what: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{what} shows the secret {secret!r}"


def test_tiering_status_pages_and_describe_configs_show_no_secret(world):
    broker, _store, _root, seen = world
    topic = unique("secrets")
    create_topic(broker.bootstrap, topic, configs=TOPIC_CONFIGS)
    _produce(broker, topic, 200)
    wait_for(lambda: _remote_segments(broker, topic) > 0, "segments tiered to S3", 120)

    url = metrics_url(broker)
    for path in ("/metrics", "/health", "/ready", "/v1/tier/status", f"/v1/tier/status?topic={topic}",
                 "/v1/tier/reconcile", "/v1/cleaner/status", "/no/such/page"):
        _get(url + path, seen)
    # the admin route refusing a wrong token must not say what the right one is
    refused = _get(url + "/v1/tier/reconcile?delete=true", seen, "POST", {"Authorization": "Bearer wrong-token"})
    assert refused.startswith("401") or refused.startswith("403"), refused
    reconciled = _get(url + "/v1/tier/reconcile?delete=true", seen, "POST",
                      {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert "orphan" in reconciled, reconciled
    status = _cli(seen, "tier", "status", "--url", url)
    assert topic in status, status
    props = _root / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _settings(_store.endpoint).items()))
    described = _cli(seen, "config", "describe", "-c", str(props))
    shown = {line.split()[0]: line.split()[1] for line in described.splitlines() if line.startswith("rsm.config.")}
    assert shown["rsm.config.aws_secret_access_key"] == "[hidden]", described
    assert shown["rsm.config.url"] == "s3://tiered/secrets", described
    _cli(seen, "config", "describe", "-c", str(props), "--json")
    _cli(seen, "tier", "status", "--url", url, "--json")
    _cli(seen, "tier", "reconcile", "--url", url)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], include_synonyms=True,
                                        config_filter="all")
        topic_answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                              include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    seen.append(repr(answer) + repr(topic_answer))
    entries = answer["broker"]["1"]
    for key in ("rsm.config.aws_access_key_id", "rsm.config.aws_secret_access_key", "rsm.config.aws_token",
                "metrics.admin.token"):
        entry = entries[key]
        assert entry["value"] is None and entry["is_sensitive"] is True, entry
        assert all(s["value"] is None for s in entry.get("synonyms") or []), entry
    # settings that are no secrets are shown, so the checks are not vacuous
    assert entries["rsm.config.url"]["value"] == "s3://tiered/secrets", entries["rsm.config.url"]
    assert entries["remote.log.storage.manager.class.name"]["value"] == "objectstore"
    assert topic_answer["topic"][topic]["segment.bytes"]["value"] == "16384"

    for text in seen:
        _assert_clean("an answer", text)
    _assert_clean("the broker's log", "".join(broker.output))


def test_s3_failures_are_logged_and_reported_without_secrets(world):
    broker, store, _root, seen = world
    topic = unique("secrets-down")
    create_topic(broker.bootstrap, topic, configs=TOPIC_CONFIGS)
    store.stop()
    _produce(broker, topic, 200)

    def failing() -> bool:
        parts = tier_status(broker, topic)["partitions"]
        return any(p.get("last_error") for p in parts)
    wait_for(failing, "the S3 failure in the tier status", 120)
    errors = [p["last_error"] for p in tier_status(broker, topic)["partitions"] if p.get("last_error")]
    assert any("secrets" in e or "tiered" in e for e in errors), errors  # it names the store it failed on
    seen.append(json.dumps(errors))
    out = _cli(seen, "tier", "status", "--url", metrics_url(broker), "--topic", topic)
    assert topic in out, out
    wait_for(lambda: any("tiered" in line and ("WARN" in line or "ERROR" in line) for line in broker.output),
             "the S3 failure in the broker's log", 60)
    for text in seen:
        _assert_clean("an answer", text)
    _assert_clean("the broker's log", "".join(broker.output))


@pytest.mark.parametrize("bad", [{"rsm.config.aws_no_such_option": "1"},
                                 {"rsm.config.aws_skip_signature": "maybe"},
                                 {"rsm.config.url": "s3://"},
                                 {"rsm.config.upload.part.size": "12"},
                                 {"metrics.admin.token": ""}])
def test_a_refused_configuration_names_no_secret(world, tmp_path, bad):
    """A broker that cannot start because of a store setting says which one, without the credentials
    beside it; so does `tierlog config describe`."""
    _broker, store, _root, _seen = world
    settings = _settings(store.endpoint, **bad)
    args = [a for k, v in settings.items() for a in ("-o", f"{k}={v}")]
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    failed = BrokerProcess(tmp_path / "logs", settings)
    with pytest.raises(RuntimeError) as start:
        failed.start()
    _assert_clean("a refused start", str(start.value))
    assert "tierlog: error:" in str(start.value) or "failed to start" in str(start.value), str(start.value)
    described = tierlog("config", "describe", "-c", props)
    _assert_clean("config describe", described.stdout + described.stderr)
    described = tierlog("config", "describe", "--json", *args)
    _assert_clean("config describe --json", described.stdout + described.stderr)


class _RefusingS3(http.server.BaseHTTPRequestHandler):
    """Answers every request as S3 answers an unknown access key: 403 InvalidAccessKeyId, the body quoting the
    key id the request was signed with (on one line, as some S3-compatible stores write it)."""

    def _refuse(self) -> None:
        auth = self.headers.get("Authorization", "")
        key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        body = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS '
                'Access Key Id you provided does not exist in our records.</Message>'
                f'<AWSAccessKeyId>{key}</AWSAccessKeyId><RequestId>4442587FB7D0A2F9</RequestId></Error>').encode()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _refuse

    def log_message(self, *args) -> None:
        pass


def test_a_store_error_quoting_the_access_key_is_reported_without_it(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    broker = BrokerProcess(tmp_path / "logs", _settings(endpoint)).start()
    try:
        topic = unique("secrets-403")
        create_topic(broker.bootstrap, topic, configs=TOPIC_CONFIGS)
        _produce(broker, topic, 200)

        def errors() -> list[str]:
            return [p["last_error"] for p in tier_status(broker, topic)["partitions"] if p.get("last_error")]
        reported = wait_for(errors, "the refused upload in the tier status", 120)
        # the store's answer is passed on (what went wrong), the key id it quoted is not
        assert any("InvalidAccessKeyId" in e for e in reported), reported
        out = tierlog("tier", "status", "--url", metrics_url(broker), "--topic", topic)
        wait_for(lambda: any("InvalidAccessKeyId" in line for line in broker.output), "the refusal in the log", 60)
        for text in (json.dumps(reported), out.stdout + out.stderr):
            _assert_clean("an answer", text)
    finally:
        broker.stop()
        server.shutdown()
    _assert_clean("the broker's log", "".join(broker.output))
