"""Topic configurations: broker defaults, override validation, tiered-storage rules, describe output."""

import pytest

from tierlog.config import BrokerConfig, ConfigSource
from tierlog.errors import InvalidConfigError
from tierlog.storage import LogConfig

STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG
TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
TIERED = {"remote.log.storage.system.enable": "true", "rsm.config.dir": "/tmp/remote"}


def tiered(**extra):
    return BrokerConfig({**TIERED, **extra})


def refused(cfg, overrides, *fragments):
    with pytest.raises(InvalidConfigError) as exc:
        cfg.validate_topic_overrides(overrides)
    for fragment in fragments:
        assert fragment in exc.value.message, exc.value.message
    assert exc.value.code == 40
    return exc.value


def test_defaults_come_from_broker_keys():
    cfg = BrokerConfig(
        {
            "log.segment.bytes": "1024",
            "log.retention.minutes": "10",
            "message.max.bytes": "2000",
            "log.cleanup.policy": "compact,delete",
            "log.roll.hours": "1",
        }
    )
    tc = cfg.topic_config()
    assert tc["segment.bytes"] == 1024
    assert tc["retention.ms"] == 600_000
    assert tc["max.message.bytes"] == 2000
    assert tc["cleanup.policy"] == ["compact", "delete"] and tc.compact and tc.delete
    assert tc["segment.ms"] == 3_600_000
    assert tc.overrides == frozenset()


def test_overrides_are_typed_and_win():
    cfg = BrokerConfig({"log.segment.bytes": "1024"})
    tc = cfg.topic_config({"segment.bytes": "2048", "preallocate": "TRUE", "cleanup.policy": "compact"})
    assert tc["segment.bytes"] == 2048 and tc["preallocate"] is True and tc["cleanup.policy"] == ["compact"]
    assert tc.overrides == {"segment.bytes", "preallocate", "cleanup.policy"}
    assert cfg.validate_topic_overrides({"retention.ms": "-1", "min.insync.replicas": 2}) == {
        "retention.ms": -1,
        "min.insync.replicas": 2,
    }


def test_null_override_means_no_override():
    tc = BrokerConfig().topic_config({"retention.ms": None, "segment.bytes": "2048"})
    assert tc["retention.ms"] == 604800000 and tc.overrides == {"segment.bytes"}


def test_effective_local_retention_and_segment_size():
    tc = BrokerConfig().topic_config({"retention.ms": "5000", "retention.bytes": "100"})
    assert (
        tc["local.retention.ms"] == -2 and tc.local_retention_ms == 5000 and tc.local_retention_bytes == 100
    )
    tc = BrokerConfig().topic_config({"local.retention.ms": "10"})
    assert tc.local_retention_ms == 10
    assert BrokerConfig().topic_config({"internal.segment.bytes": "100"}).segment_bytes == 100
    assert BrokerConfig().topic_config().segment_bytes == 1073741824
    # ... and the log rolls at that size
    assert LogConfig.from_topic_config(BrokerConfig().topic_config({"internal.segment.bytes": "100"})).segment_bytes \
        == 100


def test_small_segments_allowed_for_tests():
    assert BrokerConfig().topic_config({"segment.bytes": "14"})["segment.bytes"] == 14
    refused(
        BrokerConfig(),
        {"segment.bytes": "13"},
        "Invalid value 13 for configuration segment.bytes: Value must be at least 14",
    )


def test_unknown_topic_key_is_refused():
    err = refused(BrokerConfig(), {"retention.days": "3"}, "Unknown topic config name: retention.days")
    assert err.config_name == "retention.days"
    with pytest.raises(InvalidConfigError):
        BrokerConfig().topic_config({"log.retention.ms": "1"})  # broker key, not a topic key


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (
            {"retention.ms": "-2"},
            ["Invalid value -2 for configuration retention.ms: Value must be at least -1"],
        ),
        ({"cleanup.policy": "delete,archive"}, ["configuration cleanup.policy", "compact, delete"]),
        ({"message.timestamp.type": "createtime"}, ["CreateTime, LogAppendTime"]),
        ({"min.cleanable.dirty.ratio": "2"}, ["between 0 and 1"]),
        (
            {"remote.log.disable.policy": "keep"},
            ["configuration remote.log.disable.policy", "retain, delete"],
        ),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            ["configuration min.compaction.lag.ms", "max.compaction.lag.ms (5)"],
        ),
        ({"leader.replication.throttled.replicas": "0:1,x"}, ["partitionId:brokerId"]),
        ({"remote.storage.enable": "maybe"}, ["Expected value to be either true or false"]),
    ],
)
def test_value_rules(overrides, fragments):
    refused(BrokerConfig(), overrides, *fragments)


def test_throttled_replicas_accept_kafka_forms():
    cfg = BrokerConfig()
    assert cfg.validate_topic_overrides({"leader.replication.throttled.replicas": "*"})
    assert cfg.validate_topic_overrides({"follower.replication.throttled.replicas": "0:1,1:2"})


# --- tiered storage rules (kip-spec §1.9, §5) ---------------------------------------------------------


def test_remote_storage_needs_the_broker_switch():
    refused(
        BrokerConfig(),
        {"remote.storage.enable": "true"},
        "configuration remote.storage.enable",
        "remote.log.storage.system.enable=false",
    )
    with pytest.raises(InvalidConfigError, match="before disabling it cluster-wide"):
        BrokerConfig().topic_config({"remote.storage.enable": "true"})  # a stored topic at start-up
    assert tiered().validate_topic_overrides({"remote.storage.enable": "true"}) == {
        "remote.storage.enable": True
    }


def test_remote_storage_accepts_compaction():
    # Unlike Kafka (INVALID_CONFIG), compacted topics are tiered: docs/tiered-storage.md, "Compacted topics".
    assert tiered().validate_topic_overrides({"remote.storage.enable": "true", "cleanup.policy": "compact"}) == {
        "remote.storage.enable": True, "cleanup.policy": ["compact"]}
    assert tiered(**{"log.cleanup.policy": "compact,delete"}).validate_topic_overrides(
        {"remote.storage.enable": "true"}) == {"remote.storage.enable": True}
    assert tiered().validate_topic_overrides({"remote.storage.enable": "true", "cleanup.policy": ""})
    assert tiered().topic_config({"remote.storage.enable": "true", "cleanup.policy": "compact"}).remote_log_enabled("t")


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (
            {"retention.ms": "1000", "local.retention.ms": "2000"},
            ["Invalid value 2000 for configuration local.retention.ms", "retention.ms (1000)"],
        ),
        ({"retention.bytes": "100", "local.retention.bytes": "101"}, ["local.retention.bytes", "(100)"]),
        (
            {"retention.ms": "1000", "local.retention.ms": "-1"},
            ["Invalid value -1 for configuration local.retention.ms", "-1 (forever)"],
        ),
        ({"retention.bytes": "100", "local.retention.bytes": "-1"}, ["configuration local.retention.bytes"]),
        ({"local.retention.ms": "999999999999"}, ["local.retention.ms", "604800000"]),  # inherited total
        (
            {"remote.log.copy.disable": "true", "local.retention.ms": "1000"},
            ["configuration local.retention.ms", "remote.log.copy.disable=true", "-2 or equal retention.ms"],
        ),
        (
            {"remote.log.copy.disable": "true", "retention.bytes": "100", "local.retention.bytes": "50"},
            ["local.retention.bytes", "-2 or equal retention.bytes"],
        ),
        (
            {"local.retention.ms": "1000", "remote.copy.lag.ms": "2000"},
            ["Invalid value 2000 for configuration remote.copy.lag.ms",
             "Value must not exceed local.retention.ms (effective value: 1000)"],
        ),
    ],
)
def test_local_retention_rules(overrides, fragments):
    refused(tiered(), {"remote.storage.enable": "true", **overrides}, *fragments)


def test_valid_local_retention_combinations():
    cfg = tiered()
    for overrides in (
        {"retention.ms": "-1", "local.retention.ms": "-1"},  # both forever
        {"retention.ms": "-1", "local.retention.ms": "1000"},
        {"retention.ms": "1000", "local.retention.ms": "1000"},
        {"retention.bytes": "100", "local.retention.bytes": "100", "local.retention.ms": "-2"},
        {"remote.log.copy.disable": "true", "retention.ms": "500", "local.retention.ms": "500"},
        {"remote.log.copy.disable": "true"},
        {"local.retention.ms": "1000", "remote.copy.lag.ms": "-1"},
    ):
        cfg.validate_topic_overrides({"remote.storage.enable": "true", **overrides})
    # the rules only apply to tiered topics
    cfg.validate_topic_overrides({"retention.ms": "1000", "local.retention.ms": "2000"})


def test_broker_default_local_retention_is_checked_against_topic_retention():
    cfg = tiered(**{"log.local.retention.ms": "86400000"})
    refused(
        cfg,
        {"remote.storage.enable": "true", "retention.ms": "3600000"},
        "Invalid value 86400000 for configuration local.retention.ms",
    )


def test_disable_policy_seed_and_kafka_names():
    cfg = tiered()
    # seed KIP-950: turning remote storage off is accepted; the default policy retains remote data
    tc = cfg.topic_config({"remote.storage.enable": "false"})
    assert tc.remote_log_disable_policy == "retain"
    assert cfg.topic_config({"remote.log.delete.on.disable": "true"}).remote_log_disable_policy == "delete"
    assert cfg.topic_config({"remote.log.disable.policy": "delete"}).remote_log_disable_policy == "delete"
    refused(
        cfg,
        {"remote.log.disable.policy": "retain", "remote.log.delete.on.disable": "true"},
        "configuration remote.log.delete.on.disable",
        "remote.log.disable.policy=retain",
    )


def test_remote_log_enabled():
    cfg = tiered()
    assert cfg.topic_config({"remote.storage.enable": "true"}).remote_log_enabled("orders")
    assert not cfg.topic_config({"remote.storage.enable": "true"}).remote_log_enabled("__consumer_offsets")
    assert not cfg.topic_config().remote_log_enabled("orders")


def test_topic_config_feeds_storage_log_config():
    from tierlog.storage import LogConfig

    tc = BrokerConfig({"log.segment.bytes": "4096"}).topic_config({"retention.ms": "1000"})
    log_config = LogConfig.from_topic_config(tc)
    assert log_config.segment_bytes == 4096 and log_config.retention_ms == 1000


# --- describe ---------------------------------------------------------------------------------------


def entries(cfg, overrides=None):
    return {e.name: e for e in cfg.describe_topic(overrides)}


def chain(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_describe_topic_default():
    e = entries(BrokerConfig())["retention.ms"]
    assert (e.value, e.source) == ("604800000", DEFAULT)
    assert chain(e) == [("log.retention.hours", "168", DEFAULT)]
    e = entries(BrokerConfig())["remote.storage.enable"]
    assert (e.value, e.source, e.synonyms) == ("false", DEFAULT, ())
    assert not e.read_only and e.type == "boolean" and e.type_id == 1


def test_describe_topic_from_broker_file():
    cfg = BrokerConfig({"log.retention.hours": "2", "log.segment.bytes": "4096"})
    e = entries(cfg)["retention.ms"]
    assert (e.value, e.source) == ("7200000", STATIC)
    assert chain(e) == [("log.retention.hours", "2", STATIC), ("log.retention.hours", "168", DEFAULT)]
    e = entries(cfg)["segment.bytes"]
    assert (e.value, e.source) == ("4096", STATIC)
    assert chain(e) == [("log.segment.bytes", "4096", STATIC), ("log.segment.bytes", "1073741824", DEFAULT)]


def test_describe_topic_override_chain():
    cfg = BrokerConfig({"log.retention.ms": "5000", "log.retention.hours": "2"})
    e = entries(cfg, {"retention.ms": "1000"})["retention.ms"]
    assert (e.value, e.source) == ("1000", TOPIC)
    assert chain(e) == [
        ("retention.ms", "1000", TOPIC),
        ("log.retention.ms", "5000", STATIC),
        ("log.retention.hours", "2", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    ]
    e = entries(cfg, {"cleanup.policy": "compact, delete"})["cleanup.policy"]
    assert e.value == "compact,delete" and e.source == TOPIC


def test_describe_topic_hides_internal_settings_unless_set():
    assert "internal.segment.bytes" not in entries(BrokerConfig())
    assert entries(BrokerConfig(), {"internal.segment.bytes": "100"})["internal.segment.bytes"].value == "100"


def test_describe_broker_follows_kafka_synonym_rules():
    cfg = BrokerConfig({"log.retention.ms": "1680000000", "log.retention.hours": "168"})
    described = {e.name: e for e in cfg.describe_broker()}
    ms, hours = described["log.retention.ms"], described["log.retention.hours"]
    # as in Kafka's DynamicBrokerReconfigurationTest
    assert [(s.name, s.source) for s in ms.synonyms] == [
        ("log.retention.ms", STATIC),
        ("log.retention.hours", STATIC),
        ("log.retention.hours", DEFAULT),
    ]
    assert [(s.name, s.source) for s in hours.synonyms] == [
        ("log.retention.hours", STATIC),
        ("log.retention.hours", DEFAULT),
    ]
    assert [(s.name, s.source) for s in described["log.roll.hours"].synonyms] == [("log.roll.hours", DEFAULT)]
    assert ms.value == "1680000000" and ms.source == STATIC and not ms.read_only
    assert hours.read_only
    minutes = described["log.retention.minutes"]
    assert minutes.value is None and minutes.source == DEFAULT and minutes.synonyms == ()
    assert described["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert "log.initial.task.delay.ms" not in described  # internal, not set


def test_module_level_validate_topic_overrides():
    from tierlog.config import validate_topic_overrides

    assert validate_topic_overrides({"segment.ms": "1000"}) == {"segment.ms": 1000}
    with pytest.raises(InvalidConfigError, match="remote.log.storage.system.enable=false"):
        validate_topic_overrides({"remote.storage.enable": "true"})
    assert validate_topic_overrides({"remote.storage.enable": "true"}, tiered()) == {
        "remote.storage.enable": True
    }
