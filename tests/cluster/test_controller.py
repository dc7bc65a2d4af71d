"""The single-node controller: Kafka's validation rules and persistence across restarts."""

import logging
from dataclasses import replace

import pytest

from tests.harness import logcapture
from tierlog.cluster import BrokerImage, ConfigOp, Controller, FileMetadataStore, ensure_meta_properties
from tierlog.config import BrokerConfig
from tierlog.errors import (
    InvalidConfigError,
    InvalidReplicationFactorError,
    StartupError,
    UnknownTopicOrPartitionError,
    describe_error,
)


@pytest.fixture
def make_controller(tmp_path):
    def make(**overrides):
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path), **overrides})
        cid = ensure_meta_properties([str(tmp_path)], cfg["node.id"], None)
        return Controller(cfg, FileMetadataStore(str(tmp_path)), BrokerImage(cfg["node.id"], "127.0.0.1", 9092), cid)
    return make


def test_topics_ids_partitions_and_configs_survive_a_restart(make_controller):
    c = make_controller()
    seen = []
    c.add_listener(lambda delta, image: seen.append(delta))
    t = c.create_topic("orders", 3, configs={"retention.ms": "1000"})
    c.create_partitions("orders", 4)
    c.incremental_alter_topic_configs("orders", [ConfigOp("cleanup.policy", 2, "compact"),
                                                 ConfigOp("retention.ms", 1, None)])
    assert [type(d).__name__ for d in seen] == ["MetadataDelta"] * 3
    c2 = make_controller()
    t2 = c2.image.topics["orders"]
    assert t2.topic_id == t.topic_id and sorted(t2.partitions) == [0, 1, 2, 3]
    assert t2.configs == {"cleanup.policy": "delete,compact"}
    c2.elect_leaders()
    assert {p.leader_epoch for p in c2.image.topics["orders"].partitions.values()} == {1}


@pytest.mark.parametrize("name, code, fragment", [
    ("", 17, "empty string"),
    ("..", 17, "'..' is not allowed"),
    ("a" * 250, 17, "max allowed length 249"),
    ("bad/name", 17, "ASCII alphanumerics"),
])
def test_invalid_topic_names(make_controller, name, code, fragment):
    with pytest.raises(Exception) as e:
        make_controller().create_topic(name, 1)
    assert e.value.code == code and fragment in str(e.value)


def test_kafka_errors_for_bad_creations(make_controller):
    c = make_controller()
    c.create_topic("a.b", 1)
    cases = [
        (lambda: c.create_topic("a.b", 1), 36, "already exists"),
        (lambda: c.create_topic("a_b", 1), 17, "collides with existing topic: a.b"),
        (lambda: c.create_topic("x", 0), 37, "invalid non-positive"),
        (lambda: c.create_topic("x", 1, 0), 38, "larger than 0"),
        (lambda: c.create_topic("x", 1, 2), 38, "only 1 broker(s) are registered"),
        (lambda: c.create_topic("x", 1, configs={"segment.bytes": "-1"}), 40, "segment.bytes"),
        (lambda: c.create_topic("x", 1, configs={"no.such.key": "1"}), 40, "no.such.key"),
        (lambda: c.create_partitions("a.b", 1), 37, "already has 1 partition"),
        (lambda: c.create_partitions("nope", 3), 3, "nope"),
    ]
    for call, code, fragment in cases:
        with pytest.raises(Exception) as e:
            call()
        assert e.value.code == code and fragment in str(e.value), (code, e.value)
    assert sorted(c.image.topics) == ["a.b"]


def test_validate_only_changes_nothing(make_controller):
    c = make_controller()
    c.create_topic("t", 2, validate_only=True)
    assert "t" not in c.image.topics


def test_delete_topic_and_unknown_topic(make_controller):
    c = make_controller()
    c.create_topic("t", 1)
    c.delete_topic("t")
    assert "t" not in make_controller().image.topics
    with pytest.raises(UnknownTopicOrPartitionError):
        c.delete_topic("t")


def test_broker_configs_only_dynamic_keys(make_controller):
    c = make_controller()
    c.alter_broker_configs("", {"log.retention.ms": "60000"})
    assert c.image.broker_configs[""] == {"log.retention.ms": "60000"}
    with pytest.raises(InvalidConfigError):
        c.alter_broker_configs("", {"log.dirs": "/elsewhere"})


def test_log_dir_of_another_node_is_refused(tmp_path):
    ensure_meta_properties([str(tmp_path)], 1, None)
    with pytest.raises(StartupError, match="belongs to node 1, not node 2 .*; set node.id=1 or give log.dirs"):
        ensure_meta_properties([str(tmp_path)], 2, None)


def test_producer_ids_are_never_reused_across_restarts(make_controller):
    c = make_controller()
    first = [c.allocate_producer_id() for _ in range(3)]
    assert first == [0, 1, 2]
    c2 = make_controller()
    assert c2.allocate_producer_id() == 1000  # the unused rest of the first block is skipped


# ---------------------------------------------------------------- KIP-950 tiering lifecycle

TIERED = {"remote.log.storage.system.enable": "true", "rsm.config.dir": "/tmp/unused-remote"}


def _tiering(c, name):
    t = c.image.topics[name].tiering
    return (t.state.value, t.policy, t.epoch) if t is not None else None


def test_tiering_lifecycle_with_the_drafts_settings(make_controller):
    c = make_controller(**TIERED)
    seen = []
    c.add_listener(lambda delta, image: seen.append([t.name for t in delta.tiering_changed]))
    c.create_topic("plain", 1)
    assert _tiering(c, "plain") is None
    c.create_topic("t", 1, configs={"remote.storage.enable": "true"})
    assert _tiering(c, "t") == ("ENABLED", "retain", 0)
    # The seed's first command: remote.storage.enable=false alone means the default policy, retain.
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.storage.enable", 0, "false")])
    assert _tiering(c, "t") == ("DISABLING", "retain", 1)
    assert seen[-1] == ["t"]
    # Disabling again, re-enabling, or changing the policy while DISABLING: refused with a clear message.
    for ops in ([ConfigOp("remote.log.disable.policy", 0, "delete")],
                [ConfigOp("remote.storage.enable", 0, "true")]):
        with pytest.raises(InvalidConfigError) as e:
            c.incremental_alter_topic_configs("t", ops)
        assert e.value.code == 40 and "disablement of topic t is in progress" in str(e.value)
    c.incremental_alter_topic_configs("t", [ConfigOp("retention.ms", 0, "1000")])  # other settings are fine
    c.complete_disablement("t", 0)  # a stale epoch changes nothing
    assert _tiering(c, "t")[0] == "DISABLING"
    c.complete_disablement("t", 1)
    assert _tiering(c, "t") == ("DISABLED", "retain", 2)
    # Retained data can still be deleted later by switching to the delete policy.
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.log.disable.policy", 0, "delete")])
    assert _tiering(c, "t") == ("DISABLING", "delete", 3)
    c.complete_disablement("t", 3)
    # Re-enabling after DISABLED behaves like a first enablement; the state survives a restart.
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.storage.enable", 0, "true"),
                                            ConfigOp("remote.log.disable.policy", 1, None)])
    assert _tiering(c, "t") == ("ENABLED", "retain", 5)
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.storage.enable", 0, "false"),
                                            ConfigOp("remote.log.disable.policy", 0, "delete")])
    assert _tiering(make_controller(**TIERED), "t") == ("DISABLING", "delete", 6)


def test_unknown_disable_policy_is_invalid_config(make_controller):
    c = make_controller(**TIERED)
    c.create_topic("t", 1, configs={"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfigError) as e:
        c.incremental_alter_topic_configs("t", [ConfigOp("remote.storage.enable", 0, "false"),
                                                ConfigOp("remote.log.disable.policy", 0, "keep")])
    assert e.value.code == 40 and "remote.log.disable.policy" in str(e.value)
    assert _tiering(c, "t") == ("ENABLED", "retain", 0)


def test_kafka_39_settings_map_onto_the_same_states(make_controller):
    c = make_controller(**TIERED)
    # Any combination of Kafka 3.9's two flags is accepted at creation.
    for i, (copy_disable, delete_on_disable) in enumerate([(a, b) for a in ("true", "false")
                                                           for b in ("true", "false")]):
        c.create_topic(f"combo{i}", 1, configs={"remote.storage.enable": "true",
                                                 "remote.log.copy.disable": copy_disable,
                                                 "remote.log.delete.on.disable": delete_on_disable})
        assert _tiering(c, f"combo{i}")[0] == ("DISABLED" if copy_disable == "true" else "ENABLED")
    c.create_topic("t", 1, configs={"remote.storage.enable": "true"})
    # remote.log.copy.disable=true is Kafka's retain.
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.log.copy.disable", 0, "true")])
    assert _tiering(c, "t") == ("DISABLING", "retain", 1)
    c.complete_disablement("t", 1)
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.log.copy.disable", 0, "false")])
    assert _tiering(c, "t") == ("ENABLED", "retain", 3)
    # Kafka's rule: with copying off, local retention must be -2 or equal the total.
    with pytest.raises(InvalidConfigError):
        c.incremental_alter_topic_configs("t", [ConfigOp("remote.log.copy.disable", 0, "true"),
                                                ConfigOp("local.retention.ms", 0, "1000")])
    # remote.storage.enable=false with remote.log.delete.on.disable=true is Kafka's delete.
    c.incremental_alter_topic_configs("t", [ConfigOp("remote.storage.enable", 0, "false"),
                                            ConfigOp("remote.log.delete.on.disable", 0, "true")])
    assert _tiering(c, "t") == ("DISABLING", "delete", 4)


def test_internal_topics_on_one_node_get_the_factor_one_node_allows_with_one_warning(make_controller, caplog):
    c = make_controller()
    setting = "offsets.topic.replication.factor"
    with caplog.at_level(logging.WARNING, logger="tierlog.cluster.controller"):
        assert c.internal_topic_replication_factor("__consumer_offsets", setting, 3) == 1
        assert c.internal_topic_replication_factor("__consumer_offsets", setting, 3) == 1  # said once
        assert c.internal_topic_replication_factor("__remote_log_metadata", "rlmm.x", 1) == 1  # nothing to say
    assert logcapture.messages(caplog) == [
        "offsets.topic.replication.factor=3 but this is a single-node cluster; creating __consumer_offsets with "
        "replication factor 1"]
    c.create_topic("__consumer_offsets", 1, 1)
    caplog.clear()
    other = make_controller()  # a restart: the topic exists, nothing is created, nothing to warn about
    assert other.internal_topic_replication_factor("__consumer_offsets", setting, 3) == 1
    assert not logcapture.records(caplog)


def test_internal_topics_with_more_brokers_follow_kafkas_rule(make_controller):
    c = make_controller()
    me = c.image.brokers[c.node_id]
    c.image = replace(c.image, brokers={**c.image.brokers, 2: replace(me, node_id=2), 3: replace(me, node_id=3)})
    assert c.replica_hosts() == 3
    assert c.internal_topic_replication_factor("__consumer_offsets", "offsets.topic.replication.factor", 3) == 3
    c.image = replace(c.image, brokers={k: v for k, v in c.image.brokers.items() if k != 3})
    # Two brokers alive for a factor of 3: asked as configured, refused until enough brokers are alive.
    assert c.internal_topic_replication_factor("__consumer_offsets", "offsets.topic.replication.factor", 3) == 3
    with pytest.raises(InvalidReplicationFactorError, match="only 2 broker"):
        c.create_topic("__consumer_offsets", 1, 3)


def test_errors_by_name_and_code():
    assert describe_error(InvalidReplicationFactorError("Unable to replicate")) == \
        "INVALID_REPLICATION_FACTOR (38): Unable to replicate"
    assert describe_error(38) == "INVALID_REPLICATION_FACTOR (38)"
    assert describe_error(38, "why") == "INVALID_REPLICATION_FACTOR (38): why"
    assert describe_error(InvalidReplicationFactorError()) == "INVALID_REPLICATION_FACTOR (38)"
