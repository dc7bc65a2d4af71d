"""Kafka's ``kafka-configs --describe --entity-type users`` against tierlog, beside Apache Kafka 4.1: after
SCRAM credentials and user quotas are added with kafka-configs, the description lists both as Kafka's does
(the tool asks DescribeClientQuotas and DescribeUserScramCredentials and prints one line for each).
The same commands run against both brokers and their output must be the same."""

from __future__ import annotations

import pytest

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess

#: user -> the --add-config of each kafka-configs --alter run (Kafka refuses two credentials of one user in one
#: request, DUPLICATE_RESOURCE, so each mechanism is its own run)
USERS = {
    "alice": ("SCRAM-SHA-256=[iterations=4096,password=alice-pw]", "SCRAM-SHA-512=[iterations=8192,password=alice-pw]",
              "producer_byte_rate=1024,consumer_byte_rate=2048"),
    "bob": ("request_percentage=50",),
    "carol": ("SCRAM-SHA-512=[password=carol-pw]",),
}


@pytest.fixture(scope="module")
def peers(kafka_jars, tmp_path_factory):
    """Apache Kafka 4.1 and tierlog, each with the users of USERS added by kafka-configs."""
    kafka = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-users"), "kafka-users")
    tierlog = BrokerProcess(tmp_path_factory.mktemp("tierlog-users") / "logs", dict(apache_kafka.SHARED_SETTINGS))
    tierlog.start()
    try:
        yield {"kafka": kafka.bootstrap, "tierlog": tierlog.bootstrap}
    finally:
        tierlog.stop()
        kafka.stop()


def _same(lines: list[str]) -> list[str]:
    """Lines as compared with Kafka's: Kafka lists a user's SCRAM mechanisms in the iteration order of a hash
    map keyed by an enum (it changes from one JVM to the next), so the items of each line are sorted."""
    out = []
    for line in lines:
        head, sep, items = line.partition(" are ")
        out.append(head + sep + ", ".join(sorted(items.split(", "))) if sep else line)
    return sorted(out)


def _configs(kafka_tool, bootstrap: str, *args: str) -> list[str]:
    out = kafka_tool("ConfigCommand", "--bootstrap-server", bootstrap, *args, timeout=120)
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def described(peers, kafka_tool_runner):
    """For each broker: the users added, then what --describe prints for one user and for all."""
    run = kafka_tool_runner.run
    out = {}
    for name, bootstrap in peers.items():
        for user, configs in USERS.items():
            for config in configs:
                _configs(run, bootstrap, "--alter", "--add-config", config, "--entity-type", "users",
                         "--entity-name", user)
        out[name] = {user: _configs(run, bootstrap, "--describe", "--entity-type", "users", "--entity-name", user)
                     for user in USERS}
        out[name]["*"] = _configs(run, bootstrap, "--describe", "--entity-type", "users")
    return out


def test_one_user_with_scram_credentials_and_quotas(described):
    # Kafka's shape: one line for the quotas, one for the credentials (mechanism and iterations, never a
    # password or salt)
    assert sorted(described["tierlog"]["alice"]) == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, "
        "SCRAM-SHA-512=iterations=8192",
    ], described["tierlog"]["alice"]
    assert _same(described["tierlog"]["alice"]) == _same(described["kafka"]["alice"])


def test_users_with_quotas_only_or_credentials_only(described):
    assert described["tierlog"]["bob"] == ["Quota configs for user-principal 'bob' are request_percentage=50.0"]
    assert described["tierlog"]["carol"] == [
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=4096"]
    for user in ("bob", "carol"):
        assert _same(described["tierlog"][user]) == _same(described["kafka"][user]), user


def test_every_user(described):
    lines = described["tierlog"]["*"]
    for user in USERS:
        assert any(f"user-principal '{user}'" in line for line in lines), lines
    assert _same(lines) == _same(described["kafka"]["*"])


def test_two_mechanisms_of_one_user_in_one_request(peers, kafka_tool):
    """tierlog keeps Kafka's ZooKeeper-mode rule (only the same user and mechanism twice is a duplicate); Kafka
    4.1's KRaft controller refuses the user outright. docs/security.md says so; this keeps the note true."""
    both = "SCRAM-SHA-256=[password=dora-pw],SCRAM-SHA-512=[password=dora-pw]"
    args = ("--alter", "--add-config", both, "--entity-type", "users", "--entity-name", "dora")
    kafka = kafka_tool("ConfigCommand", "--bootstrap-server", peers["kafka"], *args, check=False, timeout=120)
    assert kafka.returncode != 0 and "cannot be altered twice in the same request" in kafka.stderr, kafka.stderr
    tierlog = kafka_tool("ConfigCommand", "--bootstrap-server", peers["tierlog"], *args, check=False, timeout=120)
    assert tierlog.returncode == 0, tierlog.stderr
    lines = _configs(kafka_tool, peers["tierlog"], "--describe", "--entity-type", "users", "--entity-name", "dora")
    assert lines == ["SCRAM credential configs for user-principal 'dora' are SCRAM-SHA-256=iterations=4096, "
                     "SCRAM-SHA-512=iterations=4096"], lines
