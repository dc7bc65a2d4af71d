"""The table itself: consistency, Kafka 4.x defaults, type parsing and formatting."""

import pytest

from tierlog.config import BrokerConfig
from tierlog.config.definitions import (
    ALL_CONFIGS,
    BROKER_CONFIGS,
    CLIENT_CONFIGS,
    CLIENT_ROLES,
    DELIBERATE_DIFFERENCES,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigDef,
)
from tierlog.config.values import HIDDEN, Password, format_value, parse_typed, parse_value
from tierlog.errors import InvalidConfigError


@pytest.mark.parametrize("defn", ALL_CONFIGS, ids=lambda d: f"{d.scope}:{d.name}")
def test_every_default_is_valid_and_round_trips(defn):
    assert defn.doc and "\n" not in defn.doc and defn.doc.endswith((".", ")"))
    for role in sorted(defn.roles) or [None]:
        default = defn.default_for(role)
        if default is None or defn.required:  # a required setting's default is only a placeholder
            continue
        assert parse_value(defn, default) == default
        assert parse_value(defn, format_value(default)) == default


def test_topic_synonyms_name_broker_keys_and_agree_on_defaults():
    defaults = BrokerConfig().topic_config()
    for name, tdef in TOPIC_CONFIGS.items():
        for syn in tdef.synonyms:
            assert syn.name in BROKER_CONFIGS, (name, syn.name)
            assert BROKER_CONFIGS[syn.name].type in (
                "int",
                "long",
                "short",
                "double",
                "string",
                "list",
                "boolean",
            )
        if not tdef.internal:
            assert defaults[name] == tdef.default, name


def test_client_roles():
    for defn in CLIENT_CONFIGS.values():
        assert defn.roles and defn.roles <= set(CLIENT_ROLES)
        assert set(defn.role_defaults) <= defn.roles
    for defn in list(BROKER_CONFIGS.values()) + list(TOPIC_CONFIGS.values()):
        assert not defn.roles


def test_differences_name_existing_settings():
    names = set(BROKER_CONFIGS) | set(TOPIC_CONFIGS) | set(CLIENT_CONFIGS)
    for diff in DELIBERATE_DIFFERENCES:
        assert diff.kafka and diff.tierlog and diff.reason
        for setting in diff.settings:
            assert setting.startswith("(") or setting in names, setting


@pytest.mark.parametrize(
    "table, name, default",
    [
        # Kafka 4.0 (KIP-1030 and friends)
        (CLIENT_CONFIGS, "linger.ms", 5),
        (CLIENT_CONFIGS, "metadata.recovery.strategy", "rebootstrap"),
        (CLIENT_CONFIGS, "metadata.recovery.rebootstrap.trigger.ms", 300000),
        (BROKER_CONFIGS, "num.recovery.threads.per.data.dir", 2),
        (BROKER_CONFIGS, "log.message.timestamp.after.max.ms", 3600000),
        (TOPIC_CONFIGS, "message.timestamp.after.max.ms", 3600000),
        (BROKER_CONFIGS, "remote.log.manager.thread.pool.size", 2),
        (BROKER_CONFIGS, "remote.log.manager.copier.thread.pool.size", 10),
        (BROKER_CONFIGS, "remote.log.manager.expiration.thread.pool.size", 10),
        # long-standing values
        (BROKER_CONFIGS, "socket.request.max.bytes", 104857600),
        (BROKER_CONFIGS, "message.max.bytes", 1048588),
        (BROKER_CONFIGS, "log.retention.hours", 168),
        (BROKER_CONFIGS, "log.local.retention.ms", -2),
        (BROKER_CONFIGS, "remote.log.metadata.custom.metadata.max.bytes", 128),
        (BROKER_CONFIGS, "remote.fetch.max.wait.ms", 500),
        (BROKER_CONFIGS, "remote.log.manager.task.interval.ms", 30000),
        (BROKER_CONFIGS, "rlmm.config.remote.log.metadata.topic.num.partitions", 50),
        (BROKER_CONFIGS, "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms", 120000),
        (BROKER_CONFIGS, "listeners", "PLAINTEXT://127.0.0.1:9092"),
        (BROKER_CONFIGS, "remote.log.storage.manager.class.name", "filesystem"),
        (BROKER_CONFIGS, "remote.log.metadata.manager.class.name", "topic"),
        (TOPIC_CONFIGS, "segment.bytes", 1073741824),
        (TOPIC_CONFIGS, "retention.ms", 604800000),
        (TOPIC_CONFIGS, "local.retention.bytes", -2),
        (TOPIC_CONFIGS, "remote.log.disable.policy", "retain"),
        (TOPIC_CONFIGS, "flush.ms", LONG_MAX),
        (CLIENT_CONFIGS, "acks", "all"),
        (CLIENT_CONFIGS, "enable.idempotence", True),
        (CLIENT_CONFIGS, "session.timeout.ms", 45000),
        (CLIENT_CONFIGS, "auto.offset.reset", "latest"),
    ],
)
def test_kafka_defaults(table, name, default):
    assert table[name].default == default


def test_synonym_chains_follow_kafka_precedence():
    assert [s.name for s in TOPIC_CONFIGS["retention.ms"].synonyms] == [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ]
    assert [s.factor for s in TOPIC_CONFIGS["retention.ms"].synonyms] == [1, 60_000, 3_600_000]
    assert [s.name for s in TOPIC_CONFIGS["segment.ms"].synonyms] == ["log.roll.ms", "log.roll.hours"]
    assert TOPIC_CONFIGS["segment.bytes"].broker_key == "log.segment.bytes"
    assert TOPIC_CONFIGS["max.message.bytes"].broker_key == "message.max.bytes"
    assert TOPIC_CONFIGS["remote.storage.enable"].broker_key is None


def _def(type_, validator=None):
    return ConfigDef(name="x.y", type=type_, default=None, doc="d.", scope="broker", validator=validator)


@pytest.mark.parametrize(
    "type_, text, expected",
    [
        ("boolean", "true", True),
        ("boolean", " TRUE ", True),
        ("boolean", "False", False),
        ("boolean", True, True),
        ("int", " 42 ", 42),
        ("int", "-2147483648", -(2**31)),
        ("int", "+7", 7),
        ("short", "32767", 32767),
        ("long", "9223372036854775807", LONG_MAX),
        ("long", 5, 5),
        ("double", "0.5", 0.5),
        ("double", "1e3", 1000.0),
        ("double", 2, 2.0),
        ("string", "  padded  ", "padded"),
        ("class", " pkg.mod.Cls ", "pkg.mod.Cls"),
        ("list", "a, b ,c", ["a", "b", "c"]),
        ("list", "  ", []),
        ("list", "", []),
        ("list", "a,,b", ["a", "", "b"]),
        ("list", ("x", "y"), ["x", "y"]),
    ],
)
def test_type_parsing(type_, text, expected):
    assert parse_typed(_def(type_), text) == expected


@pytest.mark.parametrize(
    "type_, text, fragment",
    [
        ("boolean", "yes", "Expected value to be either true or false"),
        ("boolean", "1", "Expected value to be either true or false"),
        ("int", "abc", "Not a number of type int"),
        ("int", "1.5", "Not a number of type int"),
        ("int", "2147483648", "Not a number of type int"),
        ("int", "", "Not a number of type int"),
        ("int", True, "Not a number of type int"),
        ("short", "40000", "Not a number of type short"),
        ("long", "9223372036854775808", "Not a number of type long"),
        ("double", "half", "Not a number of type double"),
        ("string", 5, "Expected value to be a string"),
    ],
)
def test_type_errors_name_key_and_value(type_, text, fragment):
    with pytest.raises(InvalidConfigError) as exc:
        parse_typed(_def(type_), text)
    message = exc.value.message
    shown = (text or '""') if isinstance(text, str) else format_value(text)
    assert message.startswith(f"Invalid value {shown} for configuration x.y: ")
    assert fragment in message
    assert exc.value.code == 40
    assert exc.value.config_name == "x.y"


def test_parse_error_mentions_allowed_range():
    with pytest.raises(InvalidConfigError, match=r"Not a number of type int \(allowed: \[1,\.\.\.\]\)"):
        parse_value(BROKER_CONFIGS["num.partitions"], "many")


def test_password_values_are_hidden():
    pw = parse_typed(_def("password"), " s3cret ")
    assert isinstance(pw, Password) and pw.value == "s3cret"
    assert repr(pw) == str(pw) == HIDDEN == format_value(pw)
    assert pw == Password("s3cret")


def test_class_values_from_types():
    assert parse_typed(_def("class"), Password) == "tierlog.config.values.Password"


def test_format_value_kafka_style():
    assert format_value(True) == "true"
    assert format_value(["compact", "delete"]) == "compact,delete"
    assert format_value(None) is None
    assert format_value(0.5) == "0.5"
    assert format_value(LONG_MAX) == "9223372036854775807"
