"""Client configuration checks for producers, consumers and admin clients."""

import logging

import pytest

from tierlog.config import client_settings, validate_client_config
from tierlog.errors import InvalidConfigError

BOOT = {"bootstrap.servers": "localhost:9092"}


def refused(role, props, *fragments):
    with pytest.raises(InvalidConfigError) as exc:
        validate_client_config(role, {**BOOT, **props})
    for fragment in fragments:
        assert fragment in exc.value.message, exc.value.message
    return exc.value


def test_defaults_per_role():
    producer = validate_client_config("producer", BOOT)
    assert producer["linger.ms"] == 5 and producer["acks"] == "all" and producer["enable.idempotence"] is True
    assert producer["metadata.recovery.strategy"] == "rebootstrap"
    assert producer["connections.max.idle.ms"] == 540000
    assert "group.id" not in producer
    consumer = validate_client_config("consumer", {**BOOT, "group.id": "g"})
    assert consumer["max.poll.records"] == 500 and consumer["isolation.level"] == "read_uncommitted"
    assert consumer["default.api.timeout.ms"] == 60000 and "acks" not in consumer
    admin = validate_client_config("admin", {"bootstrap.servers": ["a:1", "b:2"]})
    assert admin["connections.max.idle.ms"] == 300000 and admin["bootstrap.servers"] == ["a:1", "b:2"]
    assert "linger.ms" not in admin and admin["retries"] == 2**31 - 1
    assert set(client_settings("admin")) == set(admin)


def test_values_are_parsed_and_checked():
    out = validate_client_config(
        "producer",
        {
            **BOOT,
            "linger.ms": "20",
            "batch.size": 32768,
            "metadata.recovery.strategy": "NONE",
            "compression.type": "zstd",
        },
    )
    assert out["linger.ms"] == 20 and out["batch.size"] == 32768 and out["compression.type"] == "zstd"
    assert out["metadata.recovery.strategy"] == "none"  # accepted in any case, normalised


@pytest.mark.parametrize(
    "role, props, fragments",
    [
        (
            "producer",
            {"metadata.recovery.strategy": "retry"},
            ["Invalid value retry for configuration metadata.recovery.strategy", "none, rebootstrap"],
        ),
        ("producer", {"acks": "2"}, ["configuration acks", "all, -1, 0, 1"]),
        ("producer", {"linger.ms": "-1"}, ["configuration linger.ms", "at least 0"]),
        ("producer", {"compression.type": "producer"}, ["configuration compression.type", "none, gzip"]),
        ("producer", {"compression.lz4.level": "18"}, ["compression.lz4.level", "between 1 and 17"]),
        ("consumer", {"isolation.level": "READ_COMMITTED"}, ["read_committed, read_uncommitted"]),
        ("consumer", {"auto.offset.reset": "smallest"}, ["configuration auto.offset.reset", "by_duration"]),
        ("consumer", {"auto.offset.reset": "by_duration:1 day"}, ["ISO-8601"]),
        ("consumer", {"max.poll.records": "0"}, ["configuration max.poll.records", "at least 1"]),
        ("consumer", {"group.instance.id": "bad id!"}, ["configuration group.instance.id"]),
        ("admin", {"request.timeout.ms": "soon"}, ["Not a number of type int"]),
        ("admin", {"bootstrap.servers": "localhost"}, ["bootstrap.servers", "host:port"]),
        ("admin", {"bootstrap.servers": ""}, ["bootstrap.servers", "At least one"]),
        ("producer", {"metadata.recovery.rebootstrap.trigger.ms": "-5"}, ["at least 0"]),
        # SASL: Kafka's default mechanism (GSSAPI) is not served; a mechanism without its credentials is refused
        ("consumer", {"security.protocol": "SASL_SSL"}, ["configuration sasl.mechanism", "GSSAPI is not supported"]),
        ("admin", {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN"},
         ["sasl.mechanism", "PLAIN needs a user and a password"]),
        ("producer", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.jaas.config": "ScramLoginModule required username=\"u\";"},
         ["needs a user and a password"]),
        ("producer", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "x y z"},
         ["sasl.jaas.config", "control flag"]),
        ("producer", {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/nope.p12"},
         ["Cannot read ssl.keystore.location=/nope.p12"]),
    ],
)
def test_invalid_values(role, props, fragments):
    refused(role, props, *fragments)


def test_bootstrap_servers_required():
    with pytest.raises(InvalidConfigError, match="bootstrap.servers"):
        validate_client_config("consumer", {})
    assert validate_client_config("admin", {"bootstrap.servers": "[::1]:9092, h.example:1"})[
        "bootstrap.servers"
    ] == ["[::1]:9092", "h.example:1"]


def test_auto_offset_reset_by_duration():
    out = validate_client_config("consumer", {**BOOT, "auto.offset.reset": "by_duration:P1DT2H"})
    assert out["auto.offset.reset"] == "by_duration:P1DT2H"


def test_other_roles_and_unknown_keys_are_logged_and_left_out(caplog):
    with caplog.at_level(logging.WARNING, logger="tierlog.config"):
        out = validate_client_config("consumer", {**BOOT, "acks": "all", "kafka.custom": "x"})
    assert "acks" not in out and "kafka.custom" not in out
    assert "'acks' is not a consumer setting" in caplog.text
    assert "Unknown configuration 'kafka.custom'" in caplog.text


def test_unknown_role():
    with pytest.raises(ValueError):
        validate_client_config("streams", BOOT)


# --- Kafka's post-processing rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "props, key",
    [
        ({"acks": "1"}, "acks"),
        ({"retries": "0"}, "retries"),
        ({"max.in.flight.requests.per.connection": "6"}, "max.in.flight.requests.per.connection"),
    ],
)
def test_idempotence_conflicts(props, key):
    # implicit idempotence is switched off ...
    assert validate_client_config("producer", {**BOOT, **props})["enable.idempotence"] is False
    # ... explicit idempotence makes the conflict an error
    refused("producer", {**props, "enable.idempotence": "true"}, f"configuration {key}", "idempotence")


def test_transactions_need_idempotence():
    out = validate_client_config("producer", {**BOOT, "transactional.id": "tx-1"})
    assert out["transactional.id"] == "tx-1" and out["enable.idempotence"] is True
    refused(
        "producer",
        {"transactional.id": "tx-1", "enable.idempotence": "false"},
        "configuration transactional.id",
        "enable.idempotence=true",
    )
    refused("producer", {"transactional.id": "tx-1", "acks": "1"}, "configuration transactional.id")
    refused("producer", {"transactional.id": ""}, "configuration transactional.id", "non-empty")


def test_delivery_timeout():
    refused(
        "producer",
        {"delivery.timeout.ms": "1000"},
        "Invalid value 1000 for configuration delivery.timeout.ms",
        "(30005)",
    )
    out = validate_client_config("producer", {**BOOT, "request.timeout.ms": "200000"})
    assert out["delivery.timeout.ms"] == 200005


def test_auto_commit_needs_a_group():
    assert validate_client_config("consumer", BOOT)["enable.auto.commit"] is False
    assert validate_client_config("consumer", {**BOOT, "group.id": "g"})["enable.auto.commit"] is True
    refused("consumer", {"enable.auto.commit": "true"}, "configuration enable.auto.commit", "group.id")


def test_heartbeat_below_session_timeout():
    refused(
        "consumer",
        {"group.id": "g", "heartbeat.interval.ms": "45000"},
        "configuration heartbeat.interval.ms",
        "session.timeout.ms (45000)",
    )
    validate_client_config("consumer", {**BOOT, "heartbeat.interval.ms": "45000"})  # no group: not checked


def test_reconnect_backoff_alone_disables_exponential_backoff():
    out = validate_client_config("admin", {**BOOT, "reconnect.backoff.ms": "200"})
    assert out["reconnect.backoff.max.ms"] == 200
