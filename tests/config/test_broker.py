"""BrokerConfig: loading, range checks, precedence, cross-setting rules, prefixes, masking."""

import logging

import pytest

from tierlog.config import BrokerConfig, Listener
from tierlog.config.definitions import KAFKA_TBRLMM_CLASS
from tierlog.errors import InvalidConfigError

TIERED = {"remote.log.storage.system.enable": "true", "rsm.config.dir": "/tmp/remote"}


def refused(props, *fragments):
    with pytest.raises(InvalidConfigError) as exc:
        BrokerConfig(props)
    for fragment in fragments:
        assert fragment in exc.value.message, exc.value.message
    assert exc.value.code == 40
    return exc.value


def test_defaults_without_file():
    cfg = BrokerConfig.load()
    assert cfg["node.id"] == 1
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg.get("log.retention.hours") == 168
    assert cfg.log_dirs == ["/tmp/tierlog-logs"]
    assert cfg.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    assert cfg["remote.log.storage.system.enable"] is False
    assert cfg.get("no.such.key") is None
    with pytest.raises(KeyError):
        cfg["no.such.key"]


def test_file_then_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs=/a,/b\nauto.create.topics.enable=FALSE\n")
    cfg = BrokerConfig.load(str(path), {"num.partitions": "5"})
    assert cfg["num.partitions"] == 5
    assert cfg["log.dirs"] == ["/a", "/b"]
    assert cfg["auto.create.topics.enable"] is False
    assert cfg.configured("num.partitions") and not cfg.configured("log.retention.hours")
    assert cfg.originals["num.partitions"] == "5"


def test_malformed_file_is_an_invalid_config(tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text("a=1\nb=\\u12\n")
    with pytest.raises(InvalidConfigError, match=r"bad.properties:2: Malformed"):
        BrokerConfig.load(path)


def test_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        BrokerConfig.load(tmp_path / "missing.properties")


@pytest.mark.parametrize(
    "key, value, fragments",
    [
        (
            "log.segment.bytes",
            "-5",
            ["Invalid value -5 for configuration log.segment.bytes: Value must be at least 14"],
        ),
        (
            "num.partitions",
            "0",
            ["Invalid value 0 for configuration num.partitions: Value must be at least 1"],
        ),
        ("num.partitions", "lots", ["configuration num.partitions", "Not a number of type int", "[1,...]"]),
        (
            "log.cleaner.min.cleanable.ratio",
            "1.5",
            [
                "Invalid value 1.5 for configuration log.cleaner.min.cleanable.ratio",
                "between 0 and 1 (inclusive)",
            ],
        ),
        ("compression.zstd.level", "23", ["configuration compression.zstd.level", "between -131072 and 22"]),
        ("compression.gzip.level", "0", ["configuration compression.gzip.level", "-1", "between 1 and 9"]),
        (
            "log.message.timestamp.type",
            "WallClock",
            [
                "Invalid value WallClock for configuration log.message.timestamp.type",
                "String must be one of: CreateTime, LogAppendTime",
            ],
        ),
        ("compression.type", "brotli", ["configuration compression.type", "uncompressed, zstd, lz4"]),
        (
            "log.cleanup.policy",
            "delete,forever",
            [
                "Invalid value delete,forever for configuration log.cleanup.policy",
                "compact, delete",
                "forever",
            ],
        ),
        (
            "auto.create.topics.enable",
            "yes",
            [
                "Invalid value yes for configuration auto.create.topics.enable",
                "Expected value to be either true or false",
            ],
        ),
        (
            "socket.request.max.bytes",
            "4294967296",
            ["configuration socket.request.max.bytes", "Not a number of type int"],
        ),
        ("listeners", "localhost:9092", ["configuration listeners", "NAME://host:port"]),
        ("process.roles", "controller", ["configuration process.roles", "contains broker"]),
        ("node.id", "-1", ["configuration node.id", "at least 0"]),
        (
            "remote.log.storage.manager.class.name",
            "not a class!",
            ["configuration remote.log.storage.manager.class.name", "filesystem, objectstore"],
        ),
        ("log.local.retention.ms", "-3", ["configuration log.local.retention.ms", "at least -2"]),
        ("log.dirs", "/a,/a", ["configuration log.dirs", "distinct"]),
        (
            "rlmm.config.remote.log.metadata.topic.num.partitions",
            "0",
            ["configuration rlmm.config.remote.log.metadata.topic.num.partitions", "at least 1"],
        ),
        (
            "rlmm.config.remote.log.metadata.topic.retention.ms",
            "0",
            [
                "configuration rlmm.config.remote.log.metadata.topic.retention.ms",
                "-1 (unlimited) or greater than 0",
            ],
        ),
    ],
)
def test_range_violations_name_key_value_and_range(key, value, fragments):
    refused({key: value}, *fragments)


# --- precedence ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "props, expected",
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 300_000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "5", "log.retention.hours": "1"}, 1234),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-5"}, -1),  # any negative value means unlimited
    ],
)
def test_retention_precedence(props, expected):
    cfg = BrokerConfig(props)
    assert cfg["log.retention.ms"] == expected
    assert cfg.topic_config()["retention.ms"] == expected


def test_roll_jitter_and_flush_precedence():
    cfg = BrokerConfig({"log.roll.hours": "2", "log.roll.jitter.hours": "1"})
    assert cfg["log.roll.ms"] == 7_200_000 and cfg["log.roll.jitter.ms"] == 3_600_000
    cfg = BrokerConfig({"log.roll.ms": "500", "log.roll.hours": "2", "log.roll.jitter.ms": "7"})
    assert cfg["log.roll.ms"] == 500 and cfg["log.roll.jitter.ms"] == 7
    assert cfg.topic_config()["segment.ms"] == 500
    assert BrokerConfig()["log.flush.interval.ms"] == 2**63 - 1
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "2000"})["log.flush.interval.ms"] == 2000
    assert (
        BrokerConfig({"log.flush.interval.ms": "10", "log.flush.scheduler.interval.ms": "2000"})[
            "log.flush.interval.ms"
        ]
        == 10
    )


def test_log_dirs_precedence():
    assert BrokerConfig({"log.dir": "/x"})["log.dirs"] == ["/x"]
    assert BrokerConfig({"log.dir": "/x", "log.dirs": "/y, /z"}).log_dirs == ["/y", "/z"]
    refused({"log.dirs": ""}, "At least one log directory")


@pytest.mark.parametrize(
    "props, fragments",
    [
        ({"log.roll.ms": "0"}, ["Invalid value 0 for configuration log.roll.ms", "at least 1"]),
        ({"log.roll.jitter.ms": "-1"}, ["configuration log.roll.jitter.ms", "at least 0"]),
        (
            {"log.retention.hours": "0"},
            ["Invalid value 0 for configuration log.retention.hours", "-1 (unlimited)"],
        ),
        ({"log.retention.ms": "0", "log.retention.hours": "5"}, ["configuration log.retention.ms"]),
        (
            {"log.flush.interval.ms": "-4"},
            ["Invalid value -4 for configuration log.flush.interval.ms", "at least 0"],
        ),
        (
            {"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
            ["configuration log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms (5)"],
        ),
        ({"broker.id": "7", "node.id": "1"}, ["configuration broker.id", "node.id (1)"]),
    ],
)
def test_effective_value_checks(props, fragments):
    refused(props, *fragments)


def test_broker_id_alone_names_the_node():
    """A ZooKeeper-mode file names the broker with broker.id only (Kafka 3.9's examples)."""
    assert BrokerConfig({"broker.id": "7"})["node.id"] == 7


# --- listeners ---------------------------------------------------------------------------------------


def test_listeners_parsing():
    cfg = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,INTERNAL://[::1]:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://broker.example.com:9092,INTERNAL://[::1]:9093",
            "inter.broker.listener.name": "internal",
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        }
    )
    assert [str(lst) for lst in cfg.listeners] == ["PLAINTEXT://:9092", "INTERNAL://[::1]:9093"]
    assert cfg.advertised_listeners[0].host == "broker.example.com"
    assert cfg.inter_broker_listener.name == "INTERNAL"
    assert cfg.remote_log_metadata_listener.name == "PLAINTEXT"
    # unset: PLAINTEXT if present, else the first listener
    cfg = BrokerConfig(
        {"listeners": "CLIENT://127.0.0.1:9000", "listener.security.protocol.map": "CLIENT:PLAINTEXT"}
    )
    assert cfg.inter_broker_listener.name == "CLIENT" == cfg.remote_log_metadata_listener.name


@pytest.mark.parametrize(
    "props, fragments",
    [
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, ["configuration listeners", "0.0.0.0"]),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            ["configuration advertised.listeners", "0.0.0.0"],
        ),
        ({"advertised.listeners": "OTHER://h:1"}, ["configuration advertised.listeners"]),
        ({"listeners": "CLIENT://h:1"}, ["configuration listeners", "CLIENT is not in listener.security"]),
        ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, ["configuration listeners", "different name"]),
        ({"listeners": "PLAINTEXT://h:70000"}, ["configuration listeners", "70000"]),
        ({"inter.broker.listener.name": "SSL"}, ["configuration inter.broker.listener.name", "PLAINTEXT"]),
        (
            {"remote.log.metadata.manager.listener.name": "NOPE"},
            ["configuration remote.log.metadata.manager.listener.name"],
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:CARRIER_PIGEON"},
            ["configuration listener.security.protocol.map", "CARRIER_PIGEON"],
        ),
    ],
)
def test_listener_rules(props, fragments):
    refused(props, *fragments)


def test_advertised_listeners_allow_binding_everywhere():
    cfg = BrokerConfig(
        {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://host.example.com:9092"}
    )
    assert cfg.listeners[0].host == "0.0.0.0"


# --- unknown and prefixed keys ---------------------------------------------------------------------------


def test_unknown_keys_are_warned_and_kept(caplog):
    with caplog.at_level(logging.WARNING, logger="tierlog.config"):
        cfg = BrokerConfig({"num.io.threads": "8", "rsm.config.custom": "x", "rlmm.config.foo": "y"})
    assert cfg["num.io.threads"] == "8"
    assert cfg.unknown_keys == {"num.io.threads"}
    assert "num.io.threads" in caplog.text
    assert "rsm.config.custom" not in caplog.text and "rlmm.config.foo" not in caplog.text


def test_with_prefix_and_plugin_configs():
    cfg = BrokerConfig(
        {
            **TIERED,
            "rsm.config.aws_region": "eu-west-1",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.common.client.request.timeout.ms": "5000",
        }
    )
    assert cfg.with_prefix("rsm.config.") == {"dir": "/tmp/remote", "aws_region": "eu-west-1"}
    assert cfg.rsm_config() == cfg.with_prefix("rsm.config.")
    assert cfg.rlmm_config() == {
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.common.client.request.timeout.ms": "5000",
    }
    assert cfg["rlmm.config.remote.log.metadata.topic.replication.factor"] == 1
    assert cfg["rlmm.config.remote.log.metadata.topic.num.partitions"] == 50
    assert cfg["rsm.config.dir"] == "/tmp/remote"


def test_custom_plugin_prefix():
    cfg = BrokerConfig(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.impl.prefix": "store.",
            "store.dir": "/r",
        }
    )
    assert cfg.rsm_config() == {"dir": "/r"}
    assert cfg["rsm.config.dir"] == "/r" == cfg["store.dir"]
    assert not cfg.unknown_keys


def test_filesystem_storage_needs_a_folder():
    refused(
        {"remote.log.storage.system.enable": "true"},
        "Invalid value null for configuration rsm.config.dir",
        "Required",
    )
    refused({"rsm.config.dir": ""}, "configuration rsm.config.dir", "non-empty")


def test_objectstore_needs_a_url():
    base = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "objectstore",
    }
    refused(base, "configuration rsm.config.url", "Required")
    refused(
        {**base, "rsm.config.url": "ftp://host/x"},
        "Invalid value ftp://host/x for configuration rsm.config.url",
    )
    cfg = BrokerConfig({**base, "rsm.config.url": "s3://bucket/prefix"})
    assert cfg["rsm.config.url"] == "s3://bucket/prefix"
    # the filesystem folder is not required then, and other plugins' keys are not checked
    assert cfg["rsm.config.dir"] is None


def test_metadata_manager_names():
    assert (
        BrokerConfig({"remote.log.metadata.manager.class.name": KAFKA_TBRLMM_CLASS})[
            "remote.log.metadata.manager.class.name"
        ]
        == "topic"
    )
    cfg = BrokerConfig(
        {
            "remote.log.metadata.manager.class.name": "my_pkg.rlmm:MyManager",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "whatever",
        }
    )
    assert cfg["remote.log.metadata.manager.class.name"] == "my_pkg.rlmm:MyManager"
    assert cfg["rlmm.config.remote.log.metadata.topic.num.partitions"] == "whatever"  # not ours to check


def test_broker_local_retention_checked_when_tiering_is_on():
    refused(
        {**TIERED, "log.retention.ms": "1000", "log.local.retention.ms": "2000"},
        "Invalid value 2000 for configuration log.local.retention.ms",
        "log.retention.ms (1000)",
    )
    refused(
        {**TIERED, "log.retention.bytes": "100", "log.local.retention.bytes": "-1"},
        "configuration log.local.retention.bytes",
        "-1",
    )
    # not checked while tiered storage is off
    BrokerConfig({"log.retention.ms": "1000", "log.local.retention.ms": "2000"})
    BrokerConfig({**TIERED, "log.local.retention.ms": "1000"})


def test_repr_and_describe_mask_secrets():
    cfg = BrokerConfig({**TIERED, "rsm.config.aws_secret_access_key": "AKIA-secret", "num.io.threads": "8"})
    assert "AKIA-secret" not in repr(cfg)
    assert "[hidden]" in repr(cfg) and "/tmp/remote" in repr(cfg)
    entries = {e.name: e for e in cfg.describe_broker()}
    secret = entries["rsm.config.aws_secret_access_key"]
    assert secret.value is None and secret.sensitive and secret.type == "unknown"
    assert entries["num.io.threads"].value is None  # Kafka treats keys without a type as sensitive
    assert entries["rsm.config.dir"].value == "/tmp/remote"
