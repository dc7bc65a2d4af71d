"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a live broker.

kafka-python's KafkaAdminClient and confluent-kafka's AdminClient for what they expose, the raw
protocol client for versions, flags and error corners. Sources and synonyms follow Kafka's
DescribeConfigs: DYNAMIC_TOPIC_CONFIG (1), DYNAMIC_BROKER_CONFIG (2), DYNAMIC_DEFAULT_BROKER_CONFIG (3),
STATIC_BROKER_CONFIG (4), DEFAULT_CONFIG (5), DYNAMIC_BROKER_LOGGER_CONFIG (6).
"""

from __future__ import annotations

import pytest
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, LOGGER = 1, 2, 3, 4, 5, 6
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def configured(start_broker):
    """A broker with static settings that topic defaults derive from."""
    return start_broker(log_retention_hours="100", log_segment_bytes="2097152")


@pytest.fixture
def admin(configured):
    a = KafkaAdminClient(bootstrap_servers=configured.bootstrap, request_timeout_ms=10000)
    yield a
    a.close()


@pytest.fixture
def raw(configured):
    c = RawClient(configured.bootstrap)
    yield c
    c.close()


def _topic(raw, name, configs=None, partitions=1):
    r = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}], "timeout_ms": 1000})
    assert r.topics[0].error_code == 0, r.topics[0].error_message


def describe(raw, rtype, name, keys=None, synonyms=True, docs=False, version=4):
    r = raw.request(ApiKey.DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": docs})
    return r.results[0]


def entries(result) -> dict:
    return {c.name: c for c in result.configs}


def syn(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def alter(raw, resources, incremental=True, validate_only=False, version=None):
    """resources: [(type, name, {key: value}) or (type, name, [(key, op, value)])]; returns [(code, message)]."""
    out = []
    for rtype, name, configs in resources:
        if incremental:
            cfgs = [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]
        else:
            cfgs = [{"name": k, "value": v} for k, v in configs.items()]
        out.append({"resource_type": rtype, "resource_name": name, "configs": cfgs})
    key = ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS
    r = raw.request(key, version if version is not None else (1 if incremental else 2),
                    {"resources": out, "validate_only": validate_only})
    return [(x.error_code, x.error_message) for x in r.responses]


# ---------------------------------------------------------------------------------------------------
# DescribeConfigs
# ---------------------------------------------------------------------------------------------------


def test_describe_topic_sources_and_synonyms(raw):
    _topic(raw, "described", {"retention.ms": "5000", "cleanup.policy": "compact"})
    result = describe(raw, TOPIC, "described")
    assert result.error_code == 0
    e = entries(result)
    assert (e["retention.ms"].value, e["retention.ms"].config_source) == ("5000", DYNAMIC_TOPIC)
    assert syn(e["retention.ms"]) == [("retention.ms", "5000", DYNAMIC_TOPIC),
                                      ("log.retention.hours", "100", STATIC),
                                      ("log.retention.hours", "168", DEFAULT)]
    assert (e["segment.bytes"].value, e["segment.bytes"].config_source) == ("2097152", STATIC)
    assert syn(e["segment.bytes"]) == [("log.segment.bytes", "2097152", STATIC),
                                       ("log.segment.bytes", "1073741824", DEFAULT)]
    assert (e["max.message.bytes"].config_source, e["max.message.bytes"].read_only) == (DEFAULT, False)
    assert e["cleanup.policy"].value == "compact" and e["cleanup.policy"].config_type == 7  # LIST
    assert e["retention.ms"].config_type == 5 and e["retention.ms"].documentation is None  # LONG
    # a topic without overrides takes retention.ms from log.retention.hours in the file
    _topic(raw, "plain")
    plain = entries(describe(raw, TOPIC, "plain", synonyms=False))
    assert (plain["retention.ms"].value, plain["retention.ms"].config_source) == ("360000000", STATIC)
    assert plain["retention.ms"].synonyms == ()


def test_describe_filters_versions_and_documentation(raw):
    _topic(raw, "filtered")
    result = describe(raw, TOPIC, "filtered", keys=["retention.ms", "no.such.key"], docs=True)
    assert [c.name for c in result.configs] == ["retention.ms"]
    assert "segments are deleted" in result.configs[0].documentation
    assert len(describe(raw, TOPIC, "filtered", keys=[]).configs) > 20  # empty list: every key, as Kafka
    for version in (1, 2, 3):
        e = entries(describe(raw, TOPIC, "filtered", version=version))
        assert e["segment.bytes"].value == "2097152"


def test_describe_errors(raw):
    unknown = describe(raw, TOPIC, "missing")
    assert (unknown.error_code, unknown.error_message, unknown.configs) == (3, None, ())
    bad = describe(raw, TOPIC, "bad/name")
    assert bad.error_code == 17 and "ASCII alphanumerics" in bad.error_message
    other = describe(raw, BROKER, "2")
    assert (other.error_code, other.error_message) == (
        42, "Unexpected broker id, expected 1 or empty string, but received 2")
    assert describe(raw, BROKER, "one").error_message == "Broker id must be an integer, but it is: one"
    assert describe(raw, BROKER_LOGGER, "").error_message == "Broker id must not be empty"
    # a resource type Kafka does not know fails the whole request
    r = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": TOPIC, "resource_name": "missing", "configuration_keys": None},
        {"resource_type": 99, "resource_name": "x", "configuration_keys": None}]})
    assert [x.error_code for x in r.results] == [42, 42]


def test_describe_broker(configured, admin, raw):
    e = entries(describe(raw, BROKER, "1"))
    assert (e["log.segment.bytes"].value, e["log.segment.bytes"].config_source) == ("2097152", STATIC)
    assert e["log.segment.bytes"].read_only is False  # a dynamic broker setting
    assert e["log.dirs"].read_only is True
    assert syn(e["log.retention.hours"]) == [("log.retention.hours", "100", STATIC),
                                             ("log.retention.hours", "168", DEFAULT)]
    assert e["log.retention.ms"].value is None and e["log.retention.ms"].config_source == DEFAULT
    assert describe(raw, BROKER, "").configs == ()  # no cluster-wide dynamic defaults yet
    # kafka-python: the values set in the file
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], include_synonyms=True,
                                       config_filter="static")
    broker_configs = described["broker"]["1"]
    assert broker_configs["log.segment.bytes"]["value"] == "2097152"
    assert "log.dirs" in broker_configs and "log.flush.interval.ms" not in broker_configs


# ---------------------------------------------------------------------------------------------------
# AlterConfigs (legacy) and IncrementalAlterConfigs on topics
# ---------------------------------------------------------------------------------------------------


def test_legacy_alter_configs_replaces_every_override(raw):
    _topic(raw, "legacy", {"retention.ms": "5000", "segment.ms": "60000"})
    assert alter(raw, [(TOPIC, "legacy", {"max.message.bytes": "2048"})], incremental=False,
                 validate_only=True) == [(0, None)]
    assert entries(describe(raw, TOPIC, "legacy"))["retention.ms"].value == "5000"
    for version in (0, 1, 2):
        assert alter(raw, [(TOPIC, "legacy", {"max.message.bytes": str(2048 + version)})], incremental=False,
                     version=version) == [(0, None)]
    e = entries(describe(raw, TOPIC, "legacy"))
    assert (e["max.message.bytes"].value, e["max.message.bytes"].config_source) == ("2050", DYNAMIC_TOPIC)
    assert e["retention.ms"].config_source == STATIC and e["segment.ms"].config_source == DEFAULT


def test_incremental_alter_set_delete_append_subtract(raw):
    _topic(raw, "inc", {"retention.ms": "5000"})
    assert alter(raw, [(TOPIC, "inc", [("segment.ms", SET, "120000"), ("retention.ms", DELETE, None),
                                       ("cleanup.policy", APPEND, "compact")])]) == [(0, None)]
    e = entries(describe(raw, TOPIC, "inc"))
    assert e["segment.ms"].value == "120000" and e["retention.ms"].config_source == STATIC
    assert (e["cleanup.policy"].value, e["cleanup.policy"].config_source) == ("delete,compact", DYNAMIC_TOPIC)
    assert alter(raw, [(TOPIC, "inc", [("cleanup.policy", SUBTRACT, "delete")])]) == [(0, None)]
    assert entries(describe(raw, TOPIC, "inc"))["cleanup.policy"].value == "compact"
    assert alter(raw, [(TOPIC, "inc", [("segment.ms", SET, "1")])], validate_only=True) == [(0, None)]
    assert entries(describe(raw, TOPIC, "inc"))["segment.ms"].value == "120000"
    assert alter(raw, [(TOPIC, "inc", [("segment.ms", SET, "3")])], version=0) == [(0, None)]
    assert entries(describe(raw, TOPIC, "inc"))["segment.ms"].value == "3"


def test_alter_errors(raw):
    _topic(raw, "err")
    assert alter(raw, [(TOPIC, "err", [("retention.ms", APPEND, "5")])]) == [
        (40, "Can't APPEND to key retention.ms because its type is not LIST.")]
    assert alter(raw, [(TOPIC, "err", [("segment.bytes", SET, "-1")])])[0][0] == 40
    assert alter(raw, [(TOPIC, "err", [("no.such.config", SET, "1")])]) == [
        (40, "Unknown topic config name: no.such.config")]
    assert alter(raw, [(TOPIC, "err", [("retention.ms", SET, None)])]) == [
        (42, "Null value not supported for : retention.ms")]
    assert alter(raw, [(TOPIC, "err", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)])]) == [
        (42, "Error due to duplicate config keys")]
    assert alter(raw, [(TOPIC, "err", [("retention.ms", 7, "1")])]) == [(42, "Unknown operations type 7")]
    assert alter(raw, [(TOPIC, "missing", [("retention.ms", SET, "1")])]) == [
        (3, "The topic 'missing' does not exist.")]
    # Kafka validates the configs before it looks the topic up
    assert alter(raw, [(TOPIC, "missing", [("segment.bytes", SET, "-1")])])[0][0] == 40
    assert alter(raw, [(TOPIC, "", [("retention.ms", SET, "1")])]) == [(42, "Default topic resources are not allowed.")]
    assert alter(raw, [(TOPIC, "err", [("retention.ms", SET, "1")]), (TOPIC, "err", [("segment.ms", SET, "9")])]) \
        == [(42, "Each resource must appear at most once.")] * 2
    assert alter(raw, [(TOPIC, "err", {"retention.ms": "1"}), (TOPIC, "err", {})], incremental=False) \
        == [(42, "Each resource must appear at most once.")] * 2
    assert alter(raw, [(BROKER_LOGGER, "1", {"root": "INFO"})], incremental=False) == [
        (42, "Unknown resource type 8")]
    assert alter(raw, [(99, "x", [("a", SET, "b")])]) == [(42, "Unknown resource type 99")]
    assert entries(describe(raw, TOPIC, "err"))["retention.ms"].config_source == STATIC


# ---------------------------------------------------------------------------------------------------
# Dynamic broker configs
# ---------------------------------------------------------------------------------------------------


def test_dynamic_broker_configs_show_up_with_kafkas_sources(configured, raw):
    _topic(raw, "follows")
    assert alter(raw, [(BROKER, "", [("log.retention.ms", SET, "7200000")])]) == [(0, None)]
    defaults = entries(describe(raw, BROKER, ""))
    assert list(defaults) == ["log.retention.ms"]
    d = defaults["log.retention.ms"]
    assert (d.value, d.config_source, d.read_only) == ("7200000", DYNAMIC_DEFAULT, False)
    assert syn(d) == [("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]
    e = entries(describe(raw, BROKER, "1"))["log.retention.ms"]
    assert (e.value, e.config_source) == ("7200000", DYNAMIC_DEFAULT)

    assert alter(raw, [(BROKER, "1", [("log.retention.ms", SET, "3600000")])]) == [(0, None)]
    e = entries(describe(raw, BROKER, "1"))["log.retention.ms"]
    assert (e.value, e.config_source) == ("3600000", DYNAMIC_BROKER)
    assert syn(e) == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                      ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
                      ("log.retention.hours", "100", STATIC), ("log.retention.hours", "168", DEFAULT)]
    # topics without their own value follow the broker
    t = entries(describe(raw, TOPIC, "follows"))["retention.ms"]
    assert (t.value, t.config_source) == ("3600000", DYNAMIC_BROKER)
    assert syn(t)[:2] == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                          ("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]

    # legacy AlterConfigs replaces the node's dynamic configs: the cluster default shows through again
    assert alter(raw, [(BROKER, "1", {"log.segment.bytes": "4194304"})], incremental=False) == [(0, None)]
    e = entries(describe(raw, BROKER, "1"))
    assert e["log.retention.ms"].config_source == DYNAMIC_DEFAULT
    assert (e["log.segment.bytes"].value, e["log.segment.bytes"].config_source) == ("4194304", DYNAMIC_BROKER)
    assert entries(describe(raw, TOPIC, "follows"))["segment.bytes"].value == "4194304"

    # APPEND on a list setting starts from its default, as Kafka does
    assert alter(raw, [(BROKER, "", [("log.cleanup.policy", APPEND, "compact")])]) == [(0, None)]
    assert entries(describe(raw, BROKER, ""))["log.cleanup.policy"].value == "delete,compact"
    assert alter(raw, [(BROKER, "", [("log.cleanup.policy", DELETE, None)])]) == [(0, None)]


def test_dynamic_broker_configs_survive_a_restart(configured):
    raw = RawClient(configured.bootstrap)
    try:
        assert alter(raw, [(BROKER, "1", [("log.segment.bytes", SET, "3145728")])]) == [(0, None)]
    finally:
        raw.close()
    configured.restart()
    raw = RawClient(configured.bootstrap)
    try:
        e = entries(describe(raw, BROKER, "1"))["log.segment.bytes"]
        assert (e.value, e.config_source) == ("3145728", DYNAMIC_BROKER)
    finally:
        raw.close()


def test_broker_config_errors(raw):
    assert alter(raw, [(BROKER, "1", [("log.dirs", SET, "/tmp/x")])]) == [
        (42, "Cannot update these configs dynamically: [log.dirs]")]
    assert alter(raw, [(BROKER, "2", [("log.segment.bytes", SET, "3145728")])]) == [
        (42, "Unexpected broker id, expected 1, but received 2")]
    assert alter(raw, [(BROKER, "x", [("log.segment.bytes", SET, "3145728")])]) == [
        (42, "Node id must be an integer, but it is: x")]
    code, message = alter(raw, [(BROKER, "1", [("log.segment.bytes", SET, "12")])])[0]
    assert code == 42 and "log.segment.bytes" in message  # KAFKA-13609: INVALID_REQUEST for bad values
    assert alter(raw, [(BROKER, "1", [("log.segment.bytes", APPEND, "1")])]) == [
        (40, "Config value append is not allowed for config key: log.segment.bytes")]
    assert alter(raw, [(BROKER, "1", [("log.segment.bytes", SET, "3145728")])], validate_only=True) == [(0, None)]
    assert describe(raw, BROKER, "1").configs and \
        entries(describe(raw, BROKER, "1"))["log.segment.bytes"].config_source == STATIC


# ---------------------------------------------------------------------------------------------------
# BROKER_LOGGER
# ---------------------------------------------------------------------------------------------------


def test_broker_logger_levels(raw):
    name = "tierlog.server.apis.configs"
    loggers = entries(describe(raw, BROKER_LOGGER, "1"))
    assert "root" in loggers and name in loggers
    assert loggers[name].config_source == LOGGER and loggers[name].read_only is False
    assert alter(raw, [(BROKER_LOGGER, "1", [(name, SET, "DEBUG")])]) == [(0, None)]
    assert entries(describe(raw, BROKER_LOGGER, "1"))[name].value == "DEBUG"
    assert alter(raw, [(BROKER_LOGGER, "1", [(name, DELETE, None)])]) == [(0, None)]
    assert entries(describe(raw, BROKER_LOGGER, "1"))[name].value == loggers["root"].value  # inherited again
    assert alter(raw, [(BROKER_LOGGER, "1", [(name, SET, "LOUD")])]) == [
        (40, f"Cannot set the log level of {name} to LOUD as it is not a supported log level. "
             "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")]
    assert alter(raw, [(BROKER_LOGGER, "1", [("no.such.logger", SET, "INFO")])]) == [
        (40, "Logger no.such.logger does not exist!")]
    assert alter(raw, [(BROKER_LOGGER, "1", [("root", DELETE, None)])]) == [
        (42, "Removing the log level of the root logger is not allowed")]
    assert alter(raw, [(BROKER_LOGGER, "1", [("root", APPEND, "INFO")])]) == [
        (42, "APPEND operation is not allowed for the BROKER_LOGGER resource")]
    assert alter(raw, [(BROKER_LOGGER, "1", [("root", SET, "TRACE")])], validate_only=True) == [(0, None)]
    assert entries(describe(raw, BROKER_LOGGER, "1"))["root"].value != "TRACE"


# ---------------------------------------------------------------------------------------------------
# Real clients
# ---------------------------------------------------------------------------------------------------


def test_kafka_python_alter_and_read_back(admin):
    from kafka.errors import InvalidConfigurationError

    admin.create_topics([NewTopic("kp", 1, 1, topic_configs={"retention.ms": "5000"})])
    r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp",
                                            {"cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                                             "retention.ms": (AlterConfigOp.DELETE, None)})])
    assert r == {"topic": {"kp": "OK"}}
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")], include_synonyms=True)
    kp = described["topic"]["kp"]
    assert kp["cleanup.policy"]["value"] == "delete,compact"
    assert kp["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert "retention.ms" not in kp  # back to a broker value ("modified" shows overrides only)
    r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", {"segment.bytes": "-1"})],
                            raise_on_unknown=False)
    assert InvalidConfigurationError.__name__ in r["topic"]["kp"]
    # legacy AlterConfigs through kafka-python (which re-sends the other modified values itself)
    r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", {"segment.ms": "60000"})],
                            incremental=False)
    assert r == {"topic": {"kp": "OK"}}
    kp = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])["topic"]["kp"]
    assert set(kp) == {"segment.ms", "cleanup.policy"}


def test_confluent_describe_and_alter(configured):
    ck = pytest.importorskip("confluent_kafka")
    cka = pytest.importorskip("confluent_kafka.admin")

    a = cka.AdminClient({"bootstrap.servers": configured.bootstrap})
    assert a.create_topics([cka.NewTopic("cf", 1, 1, config={"retention.ms": "9000"})],
                           request_timeout=10)["cf"].result() is None
    res = cka.ConfigResource(cka.ResourceType.TOPIC, "cf")
    configs = a.describe_configs([res], request_timeout=10)[res].result()
    assert configs["retention.ms"].value == "9000"
    assert configs["retention.ms"].source == cka.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert "log.retention.hours" in configs["retention.ms"].synonyms
    assert configs["segment.bytes"].source == cka.ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["segment.bytes"].value == "2097152"

    change = cka.ConfigResource(cka.ResourceType.TOPIC, "cf", incremental_configs=[
        cka.ConfigEntry("cleanup.policy", "compact", incremental_operation=cka.AlterConfigOpType.APPEND),
        cka.ConfigEntry("retention.ms", None, incremental_operation=cka.AlterConfigOpType.DELETE)])
    assert a.incremental_alter_configs([change], request_timeout=10)[change].result() is None
    configs = a.describe_configs([res], request_timeout=10)[res].result()
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].source == cka.ConfigSource.STATIC_BROKER_CONFIG.value

    bad = cka.ConfigResource(cka.ResourceType.TOPIC, "cf", incremental_configs=[
        cka.ConfigEntry("retention.ms", "1", incremental_operation=cka.AlterConfigOpType.APPEND)])
    with pytest.raises(ck.KafkaException) as e:
        a.incremental_alter_configs([bad], request_timeout=10)[bad].result()
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG

    missing = cka.ConfigResource(cka.ResourceType.TOPIC, "absent")
    with pytest.raises(ck.KafkaException) as e:
        a.describe_configs([missing], request_timeout=10)[missing].result()
    assert e.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART

    broker_res = cka.ConfigResource(cka.ResourceType.BROKER, "1")
    configs = a.describe_configs([broker_res], request_timeout=10)[broker_res].result()
    assert configs["log.segment.bytes"].source == cka.ConfigSource.STATIC_BROKER_CONFIG.value
    dyn = cka.ConfigResource(cka.ResourceType.BROKER, "1", incremental_configs=[
        cka.ConfigEntry("log.segment.bytes", "3145728", incremental_operation=cka.AlterConfigOpType.SET)])
    assert a.incremental_alter_configs([dyn], request_timeout=10)[dyn].result() is None
    configs = a.describe_configs([broker_res], request_timeout=10)[broker_res].result()
    assert configs["log.segment.bytes"].value == "3145728"
    assert configs["log.segment.bytes"].source == cka.ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_dynamic_log_settings_reach_the_logs(configured, raw):
    """A dynamic log.segment.bytes changes how the logs of topics without their own value roll."""
    from kafka import KafkaProducer

    _topic(raw, "rolls")
    _topic(raw, "pinned", {"segment.bytes": "8388608"})
    assert alter(raw, [(BROKER, "", [("log.segment.bytes", SET, "1048576")])]) == [(0, None)]
    p = KafkaProducer(bootstrap_servers=configured.bootstrap, batch_size=65536, linger_ms=5)
    payload = b"x" * 1024
    for _ in range(1536):  # about 1.5 MiB in each topic: above the dynamic value, below the static one
        p.send("rolls", payload)
        p.send("pinned", payload)
    p.flush()
    p.close()
    rolled = sorted((configured.log_dir / "rolls-0").glob("*.log"))
    pinned = sorted((configured.log_dir / "pinned-0").glob("*.log"))
    assert len(rolled) >= 2 and len(pinned) == 1


# ---------------------------------------------------------------------------------------------------
# Rules between settings read the values in effect once the whole request is applied
# ---------------------------------------------------------------------------------------------------

HOUR, MINUTE = "3600000", "60000"


@pytest.fixture
def tiered_raw(start_broker, tmp_path):
    """A tiering broker whose static log.local.retention.ms (1 h) is below its retention (100 h)."""
    b = start_broker({"remote.log.storage.system.enable": "true", "rsm.config.dir": str(tmp_path / "remote"),
                      "remote.log.metadata.manager.class.name": "memory", "log.retention.hours": "100",
                      "log.local.retention.ms": HOUR})
    c = RawClient(b.bootstrap)
    yield c
    c.close()


def _value(raw, rtype, name, key):
    return entries(describe(raw, rtype, name, keys=[key]))[key].value


@pytest.mark.parametrize("incremental", [True, False], ids=["IncrementalAlterConfigs", "AlterConfigs"])
@pytest.mark.parametrize("resource", ["", "1"], ids=["cluster default", "this node"])
def test_broker_retention_below_the_static_local_retention_with_both_lowered(tiered_raw, incremental, resource):
    raw = tiered_raw

    def change(**values):
        keys = {k.replace("_", "."): v for k, v in values.items()}
        return [(BROKER, resource, [(k, SET, v) for k, v in keys.items()] if incremental else keys)]

    # Alone, log.retention.ms below the local retention in effect (the static 1 h) is refused ...
    refused = alter(raw, change(log_retention_ms=MINUTE), incremental=incremental)
    assert refused[0][0] == 42 and "log.local.retention.ms" in refused[0][1], refused
    # ... but with log.local.retention.ms lowered in the same request it holds, in either order of the
    # keys, validate_only first (which stores nothing).
    for keys in ({"log_retention_ms": MINUTE, "log_local_retention_ms": "30000"},
                 {"log_local_retention_ms": "30000", "log_retention_ms": MINUTE}):
        assert alter(raw, change(**keys), incremental=incremental, validate_only=True) == [(0, None)]
    assert _value(raw, BROKER, "1", "log.retention.ms") != MINUTE
    assert alter(raw, change(log_local_retention_ms="30000", log_retention_ms=MINUTE),
                 incremental=incremental) == [(0, None)]
    assert (_value(raw, BROKER, "1", "log.retention.ms"), _value(raw, BROKER, "1", "log.local.retention.ms")) \
        == (MINUTE, "30000")


def test_broker_retention_rules_across_two_requests_in_both_orders(tiered_raw):
    raw = tiered_raw
    # Retention first: refused, the local retention in effect is still the static 1 h.
    code, message = alter(raw, [(BROKER, "1", [("log.retention.ms", SET, MINUTE)])])[0]
    assert code == 42 and "log.local.retention.ms" in message
    # Local retention first (a cluster default), then retention (this node): both hold.
    assert alter(raw, [(BROKER, "", [("log.local.retention.ms", SET, "30000")])]) == [(0, None)]
    assert alter(raw, [(BROKER, "1", [("log.retention.ms", SET, MINUTE)])], validate_only=True) == [(0, None)]
    assert alter(raw, [(BROKER, "1", [("log.retention.ms", SET, MINUTE)])]) == [(0, None)]
    # Taking the lowered local retention away again would leave the static 1 h above the retention.
    code, message = alter(raw, [(BROKER, "", [("log.local.retention.ms", DELETE, None)])])[0]
    assert code == 42 and "log.local.retention.ms" in message
    code, _ = alter(raw, [(BROKER, "", {})], incremental=False, validate_only=True)[0]
    assert code == 42  # AlterConfigs replaces the cluster defaults: the same, validate_only too
    # Raising the retention first, then the local retention, holds in that order only.
    code, _ = alter(raw, [(BROKER, "", [("log.local.retention.ms", SET, HOUR)])])[0]
    assert code == 42
    assert alter(raw, [(BROKER, "1", [("log.retention.ms", DELETE, None)])]) == [(0, None)]
    assert alter(raw, [(BROKER, "", [("log.local.retention.ms", DELETE, None)])]) == [(0, None)]
    assert _value(raw, BROKER, "1", "log.local.retention.ms") == HOUR


@pytest.mark.parametrize("incremental", [True, False], ids=["IncrementalAlterConfigs", "AlterConfigs"])
def test_topic_retention_rules_read_the_values_in_effect_after_the_request(tiered_raw, incremental):
    raw = tiered_raw
    _topic(raw, "tiered", {"remote.storage.enable": "true"})

    def change(**values):
        keys = {"remote.storage.enable": "true", **{k.replace("_", "."): v for k, v in values.items()}}
        return [(TOPIC, "tiered", [(k, SET, v) for k, v in keys.items()] if incremental else keys)]

    # retention.ms below the local retention it inherits from the broker (1 h): refused alone ...
    code, message = alter(raw, change(retention_ms=MINUTE), incremental=incremental)[0]
    assert code == 40 and "local.retention.ms" in message
    # ... accepted with local.retention.ms lowered in the same request, in either order.
    for keys in ({"retention_ms": MINUTE, "local_retention_ms": "30000"},
                 {"local_retention_ms": "30000", "retention_ms": MINUTE}):
        assert alter(raw, change(**keys), incremental=incremental, validate_only=True) == [(0, None)]
    assert _value(raw, TOPIC, "tiered", "retention.ms") == "360000000"
    assert alter(raw, change(local_retention_ms="30000", retention_ms=MINUTE), incremental=incremental) == [(0, None)]
    assert (_value(raw, TOPIC, "tiered", "retention.ms"), _value(raw, TOPIC, "tiered", "local.retention.ms")) \
        == (MINUTE, "30000")
    # The inherited local retention counts as it is in effect: a broker default lowered dynamically
    # lets a later request lower retention.ms alone (two requests).
    _topic(raw, "inherits", {"remote.storage.enable": "true"})
    assert alter(raw, [(BROKER, "", [("log.local.retention.ms", SET, "30000")])]) == [(0, None)]
    assert alter(raw, [(TOPIC, "inherits", [("retention.ms", SET, MINUTE)])]) == [(0, None)]
    # ... and that broker default can no longer rise above the topic's retention.
    code, _ = alter(raw, [(BROKER, "", [("log.local.retention.ms", DELETE, None)])])[0]
    assert code == 42
