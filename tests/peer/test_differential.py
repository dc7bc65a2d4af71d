"""Differential tests: one scenario, scripted once over the raw protocol, run against Apache Kafka
4.4 and against tierlog; what a client observes must be the same.

Where tierlog differs on purpose (docs/compatibility.md lists each difference with its reason),
the test pins both sides, so a change on either side shows up here. Everything else that differs
is a bug. Known bugs are listed in ``KNOWN_BUGS``: each scenario's test fails on any other
difference, and each known bug has its own strict xfail, which starts failing once the bug is
fixed (then delete its entry).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

from tests.harness.rawclient import RawClient, create_topic, unique, wait_for_leaders
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.peer.diff import differences, plain, run_both
from tierlog.protocol import ApiKey
from tierlog.records import build_batch, iter_batches, iter_records

T0 = 1_700_000_000_000
# Records stamped T0 are older than the default retention.ms: a retention check that happens to run
# on one peer during a scenario would delete them there only. Topics holding them keep data forever.
KEEP = {"retention.ms": "-1"}
# A producer whose last batch is older than producer.id.expiration.ms (a day) is forgotten by the expiration
# check that runs every 10 minutes on either peer, on its own clock: batches stamped T0 would lose their
# producer state there only, mid-scenario (CI saw tierlog append the duplicates so). The idempotence scenario
# stamps its batches from this recent time, the same for both peers.
RECENT = int(time.time()) * 1000


def _produce(raw, topic, partition, batch, version=9, acks=-1):
    resp = raw.request(ApiKey.PRODUCE, version, {
        "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    p = resp.responses[0].partition_responses[0]
    out = {"error_code": plain(p.error_code), "base_offset": p.base_offset,
           "log_append_time_ms": plain(p.log_append_time)}
    if version >= 5:
        out["log_start_offset"] = p.log_start_offset
    if version >= 8:
        out["record_errors"] = [e.batch_index for e in p.record_errors]
        out["has_error_message"] = bool(p.error_message)
    return out


def _list_offset(raw, topic, partition, timestamp, version=9, isolation=0, leader_epoch=-1):
    resp = raw.request(ApiKey.LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": isolation, "timeout_ms": 5000, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                            "current_leader_epoch": leader_epoch}]}]})
    p = resp.topics[0].partitions[0]
    out = {"error_code": plain(p.error_code), "offset": p.offset}
    if version >= 1:
        out["timestamp"] = plain(p.timestamp)
    if version >= 4:
        out["leader_epoch"] = p.leader_epoch
    return out


# ------------------------------------------------------------------------------------- known bugs

def _in(*prefixes):
    return lambda path: path.startswith(prefixes)


# bug id -> (what is missing in tierlog, exactly; which differing paths it explains)
KNOWN_BUGS: dict = {}


# Deliberate differences (docs/compatibility.md): path -> (Kafka's value, tierlog's value, reason).
# (remote.copy.lag.ms/bytes, KIP-1241, are Kafka 4.4's own now and compare like any other setting.)
_SEED_TOPIC_CONFIGS = ["remote.log.disable.policy"]
DELIBERATE = {
    "configs.topic.only tierlog reports": (
        [], _SEED_TOPIC_CONFIGS, "topic configs of the tiered-storage proposals tierlog implements beyond Kafka 4.4"),
    "configs.topic after alter.only tierlog reports": ([], _SEED_TOPIC_CONFIGS, "as above"),
    "configs.broker.entries.remote.log.storage.manager.class.name.value": (
        None, "filesystem", "docs/configuration.md: plugins are Python classes with short names; the embedded "
        "filesystem store is the default"),
    "configs.broker.entries.remote.log.metadata.manager.class.name.value": (
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", "topic",
        "docs/configuration.md: short plugin names; Kafka's class name is accepted as an alias"),
    "configs.broker.entries.remote.log.metadata.manager.class.name.synonyms[0][1]": (
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", "topic",
        "the same default, in its synonym"),
    **{f"configs.broker.entries.{name}.read_only": (
        False, True, "docs/compatibility.md: a SASL listener's mechanisms and JAAS users are read at start (static); "
        "Kafka may change them per broker while it runs")
       for name in ("sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.mechanism.inter.broker.protocol")},
    "configs.broker.entries.remote.log.storage.manager.class.name.synonyms": (
        [], [("remote.log.storage.manager.class.name", "filesystem", 5)], "the default tierlog has and Kafka has not"),
    **{f"configs.broker.entries.group.coordinator.rebalance.protocols.{part}": (
        "classic,consumer,streams", "classic,consumer", "docs/compatibility.md: streams groups (KIP-1071) are not "
        "built, so tierlog's default leaves 'streams' out")
       for part in ("value", "synonyms[0][1]")},
}


# Deliberate differences recognised by pattern: name -> (reason, which differing paths).
DELIBERATE_PATTERNS = {
    "describe-configs-synonym-chain": (
        "docs/configuration.md, Deliberate differences, '(DescribeConfigs of topics)': tierlog reports a topic "
        "setting's whole synonym chain; Kafka drops the broker synonyms before the first one that has a value "
        "(ConfigHelper.configSynonyms), so for retention.ms, segment.ms, segment.jitter.ms and flush.ms it lists "
        "no log.retention.hours / log.roll.hours / log.roll.jitter.hours / log.flush.scheduler.interval.ms",
        lambda p: p.startswith("configs.topic") and p.endswith(".synonyms")
        and p.split(".entries.")[1].rsplit(".", 1)[0] in ("retention.ms", "segment.ms", "segment.jitter.ms",
                                                          "flush.ms")),
}


def _explained(path: str) -> bool:
    return (path in DELIBERATE or any(match(path) for _, match in DELIBERATE_PATTERNS.values())
            or any(match(path) for _, match in KNOWN_BUGS.values()))


class Observations:
    """Each scenario runs once per module against both peers; tests read the differences."""

    def __init__(self, kafka_peer, tierlog_peer):
        self.peers = (kafka_peer, tierlog_peer)
        self.results: dict[str, tuple] = {}

    def get(self, name: str):
        if name not in self.results:
            kafka, tierlog = run_both(SCENARIOS[name], *self.peers)
            if name in NORMALIZE:
                kafka, tierlog = NORMALIZE[name](kafka, tierlog)
            self.results[name] = (kafka, tierlog)
        return self.results[name]

    def differences(self, name: str) -> list[str]:
        kafka, tierlog = self.get(name)
        return differences(kafka, tierlog, name)


@pytest.fixture(scope="module")
def observed(kafka_peer, tierlog_peer):
    return Observations(kafka_peer, tierlog_peer)


def assert_no_unexplained(observed, name):
    unexplained = [d for d in observed.differences(name) if not _explained(d.split(":")[0])]
    assert not unexplained, f"{name}: differs from Apache Kafka:\n  " + "\n  ".join(unexplained)


# ------------------------------------------------------------------------------ offsets and ListOffsets

def _offsets_scenario(bootstrap):
    topic = unique("diff-offsets")
    create_topic(bootstrap, topic, partitions=2, configs=KEEP)
    raw = RawClient(bootstrap)
    seen = {"produce": [], "list_offsets": {}}
    batches = [
        ("gzip", [T0, T0 + 30, T0 + 10]),
        ("none", [T0 + 20]),
        ("lz4", [T0 + 40 + i for i in range(5)]),
        ("zstd", [T0 + 100, T0 + 5]),
        ("snappy", [T0 + 100, T0 + 100, T0 + 60]),
    ]
    for codec, stamps in batches:
        batch = build_batch([(b"k", b"v%d" % ts, [], ts) for ts in stamps], compression=codec)
        seen["produce"].append(_produce(raw, topic, 0, batch))
    seen["produce"].append(_produce(raw, topic, 1, build_batch([(None, b"p1", [], T0 + 7)] * 2), acks=1))
    seen["produce"].append(_produce(raw, topic, 1, build_batch([(None, b"old", [], T0 + 3)]), version=3))
    for ts in (-2, -1, -3, -4, -5, T0 - 1, T0, T0 + 5, T0 + 10, T0 + 15, T0 + 45, T0 + 60, T0 + 100, T0 + 101):
        seen["list_offsets"][f"v9 p0 {ts}"] = _list_offset(raw, topic, 0, ts)
    for ts in (-2, -1, -3):
        seen["list_offsets"][f"v9 p1 {ts}"] = _list_offset(raw, topic, 1, ts)
    for version in (1, 2, 4, 5, 7, 8, 10):  # Kafka 4.1 answers ListOffsets up to v10
        for ts in (-2, -1, T0 + 10):
            seen["list_offsets"][f"v{version} p0 {ts}"] = _list_offset(raw, topic, 0, ts, version=version)
    seen["list_offsets"]["v7 -3"] = _list_offset(raw, topic, 0, -3, version=7)
    seen["list_offsets"]["v8 -4"] = _list_offset(raw, topic, 0, -4, version=8)
    seen["list_offsets"]["v9 read_committed -1"] = _list_offset(raw, topic, 0, -1, isolation=1)
    seen["list_offsets"]["v9 current epoch 0"] = _list_offset(raw, topic, 0, -1, leader_epoch=0)
    seen["list_offsets"]["v9 future epoch 7"] = _list_offset(raw, topic, 0, -1, leader_epoch=7)
    seen["list_offsets"]["v9 partition 9"] = _list_offset(raw, topic, 9, -1)
    seen["list_offsets"]["v9 unknown topic"] = _list_offset(raw, unique("nope"), 0, -1)
    # partition 0 twice (once in a second entry for the topic), partition 1 once
    resp = raw.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "timeout_ms": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": i, "timestamp": -1, "current_leader_epoch": -1}
                                       for i in (0, 1)]},
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1}]}]})
    seen["list_offsets"]["v9 duplicate partition"] = {
        "topics": len(resp.topics),
        "answers": sorted((  # Kafka orders its answers by hash
            {"partition": p.partition_index, "error_code": plain(p.error_code), "offset": p.offset}
            for t in resp.topics for p in t.partitions), key=lambda a: a["partition"])}
    raw.close()
    return seen


def test_assigned_offsets_and_list_offsets(observed):
    assert_no_unexplained(observed, "offsets")


# -------------------------------------------------------------------------------------- idempotence

def _idempotent_scenario(bootstrap):
    topic = unique("diff-idem")
    create_topic(bootstrap, topic, configs=KEEP)
    raw = RawClient(bootstrap)
    inits = []

    def initialized():  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first producer id block arrives
        inits.append(raw.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}))
        return plain(inits[-1].error_code) != 14

    with contextlib.suppress(TimedOut):  # the last answer is the one compared
        wait_until(initialized, 15, interval=0.1, what="InitProducerId past COORDINATOR_LOAD_IN_PROGRESS")
    init = inits[-1]
    pid, epoch = init.producer_id, init.producer_epoch
    seen = {"init": {"error_code": plain(init.error_code), "producer_epoch": epoch, "has_id": pid >= 0}}

    def send(seq, n, producer_epoch=None, producer_id=None, name=None):
        # Fixed timestamps: answers that echo them (a duplicate's log_append_time) compare exactly.
        batch = build_batch([(None, b"i%d" % (seq + i), [], RECENT + seq + i) for i in range(n)],
                            producer_id=pid if producer_id is None else producer_id,
                            producer_epoch=epoch if producer_epoch is None else producer_epoch, base_sequence=seq)
        seen[name or f"seq {seq}+{n}"] = _produce(raw, topic, 0, batch)

    send(0, 3)
    send(3, 2)
    send(0, 3, name="duplicate of seq 0")
    send(3, 2, name="duplicate of seq 3")
    send(9, 1, name="gap to seq 9")
    send(5, 1, producer_epoch=epoch + 1, name="next epoch, seq 5")
    send(0, 1, producer_epoch=epoch + 1, name="next epoch, seq 0")
    send(1, 1, producer_epoch=epoch, name="fenced epoch")
    send(7, 1, producer_id=999_999, producer_epoch=0, name="unknown producer id, seq 7")
    seen["end"] = _list_offset(raw, topic, 0, -1)
    raw.close()
    return seen


def test_idempotent_producer_offsets_and_errors(observed):
    assert_no_unexplained(observed, "idempotent")


# ------------------------------------------------------------------------------- errors for bad input

def _bad_requests_scenario(bootstrap):
    topic, small = unique("diff-errors"), unique("diff-small")
    create_topic(bootstrap, topic)
    create_topic(bootstrap, small, configs={"max.message.bytes": "1000", "message.timestamp.before.max.ms": "3600000"})
    raw = RawClient(bootstrap)
    ok = build_batch([(None, b"x")])
    corrupt = bytearray(ok)
    corrupt[-1] ^= 0xFF
    seen = {}
    seen["produce unknown topic"] = _produce(raw, unique("nope"), 0, ok)
    seen["produce partition 3 of 1"] = _produce(raw, topic, 3, ok)
    seen["produce acks=2"] = _produce(raw, topic, 0, ok, acks=2)
    seen["produce bad crc"] = _produce(raw, topic, 0, bytes(corrupt))
    seen["produce two batches in one partition"] = _produce(raw, topic, 0, ok + build_batch([(None, b"y")]))
    seen["produce batch over max.message.bytes"] = _produce(raw, small, 0, build_batch([(None, b"z" * 2000)]))
    seen["produce timestamp too old"] = _produce(raw, small, 0, build_batch([(None, b"t", [], T0)]))
    # An internal topic that exists on both peers (an unknown one answers UNKNOWN_TOPIC_OR_PARTITION first):
    # a coordinator lookup creates __consumer_offsets.
    raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [unique("diff-errors-group")]})
    wait_for_leaders(raw, "__consumer_offsets", 50, timeout=60)
    seen["produce to internal topic name"] = _produce(raw, "__consumer_offsets", 0, ok)
    min_isr = unique("diff-minisr")  # one replica, min.insync.replicas=2
    create_topic(bootstrap, min_isr, configs={"min.insync.replicas": "2"})
    seen["produce acks=all below min.insync.replicas"] = _produce(raw, min_isr, 0, ok)
    seen["produce acks=1 below min.insync.replicas"] = _produce(raw, min_isr, 0, ok, acks=1)

    def fetch(name, offset, version=12, partition=0, topic_id=None):
        t = {"topic_id": topic_id} if version >= 13 else {"topic": name}
        resp = raw.request(ApiKey.FETCH, version, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{**t, "partitions": [{"partition": partition, "fetch_offset": offset,
                                             "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                                             "log_start_offset": -1}]}]})
        p = resp.responses[0].partitions[0]
        return {"top_error": plain(resp.error_code), "error_code": plain(p.error_code),
                "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
                "log_start_offset": p.log_start_offset, "records": len(p.records or b"")}

    seen["fetch offset past the end"] = fetch(topic, 100)
    seen["fetch negative offset"] = fetch(topic, -5)
    seen["fetch unknown topic"] = fetch(unique("nope"), 0)
    seen["fetch partition 4 of 1"] = fetch(topic, 0, partition=4)
    seen["fetch unknown topic id"] = fetch(None, 0, version=13, topic_id=uuid.uuid4())

    def create(name, partitions=1, rf=1, configs=None, validate_only=False, version=7):
        resp = raw.request(ApiKey.CREATE_TOPICS, version, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": validate_only})
        t = resp.topics[0]
        return {"error_code": plain(t.error_code), "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor}

    seen["create existing"] = create(topic)
    seen["create bad name"] = create("bad name!")
    seen["create name '..'"] = create("..")
    seen["create name of 250 chars"] = create("x" * 250)
    seen["create 0 partitions"] = create(unique("zero"), partitions=0)
    seen["create replication factor 3"] = create(unique("rf"), rf=3)
    seen["create replication factor 0"] = create(unique("rf0"), rf=0)
    seen["create non-numeric config"] = create(unique("cfg"), configs={"segment.ms": "soon"})
    seen["create unknown config"] = create(unique("cfg"), configs={"no.such.config": "1"})
    seen["create bad cleanup.policy"] = create(unique("cfg"), configs={"cleanup.policy": "shred"})
    seen["create null config value"] = create(unique("cfg"), configs={"retention.ms": None})
    seen["create defaults (-1/-1)"] = create(unique("dflt"), partitions=-1, rf=-1)
    validated = unique("validate")
    seen["create validate only"] = create(validated, validate_only=True)
    md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": validated}], "allow_auto_topic_creation": False})
    seen["validate only created nothing"] = plain(md.topics[0].error_code)

    resp = raw.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": unique("nope"), "topic_id": None}],
                                                 "timeout_ms": 5000})
    seen["delete unknown topic"] = plain(resp.responses[0].error_code)

    def partitions(name, count):
        resp = raw.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": name, "count": count,
                                                                     "assignments": None}],
                                                         "timeout_ms": 5000, "validate_only": False})
        return plain(resp.results[0].error_code)

    seen["create partitions same count"] = partitions(topic, 1)
    seen["create partitions fewer"] = partitions(topic, 0)
    seen["create partitions unknown topic"] = partitions(unique("nope"), 3)

    def delete_records(name, offset):
        resp = raw.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": name, "partitions": [
            {"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000})
        p = resp.topics[0].partitions[0]
        return {"error_code": plain(p.error_code), "low_watermark": p.low_watermark}

    seen["delete records past the high watermark"] = delete_records(topic, 50)
    seen["delete records unknown topic"] = delete_records(unique("nope"), 0)

    md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True})
    seen["metadata invalid name"] = plain(md.topics[0].error_code)
    md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": unique("nope")}], "allow_auto_topic_creation": False})
    seen["metadata unknown topic"] = plain(md.topics[0].error_code)
    raw.close()
    return seen


def test_error_codes_for_bad_requests(observed):
    assert_no_unexplained(observed, "errors")


def _auto_create_scenario(bootstrap):
    raw = RawClient(bootstrap)
    topic = unique("diff-auto")
    first = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
    wait_for_leaders(raw, topic, 1)
    raw.close()
    return plain(first.topics[0].error_code)


def test_metadata_auto_create_answers_at_once(kafka_peer, tierlog_peer):
    """Deliberate (docs/compatibility.md): tierlog creates the topic before it answers; Kafka 4.4
    answers the first auto-creating Metadata with UNKNOWN_TOPIC_OR_PARTITION while its controller
    creates the topic."""
    kafka, tierlog = run_both(_auto_create_scenario, kafka_peer, tierlog_peer)
    assert (kafka, tierlog) == (3, 0)


def test_segment_bytes_floor(kafka_peer, tierlog_peer):
    """Deliberate (docs/compatibility.md): tierlog accepts segment.bytes down to 14, Kafka 4 from 1 MiB."""
    def scenario(bootstrap):
        raw = RawClient(bootstrap)
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": unique("diff-seg"), "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": [{"name": "segment.bytes", "value": "4096"}]}], "timeout_ms": 5000, "validate_only": True})
        raw.close()
        return plain(resp.topics[0].error_code)

    assert run_both(scenario, kafka_peer, tierlog_peer) == (40, 0)  # INVALID_CONFIG from Kafka


# --------------------------------------------------------------------------------- DescribeConfigs

# Broker settings whose value or source depends on how each peer was started, not on behaviour.
ENVIRONMENT_KEYS = {
    "listeners", "advertised.listeners", "log.dirs", "log.dir", "listener.security.protocol.map",
    "controller.listener.names", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "process.roles", "node.id", "broker.id", "inter.broker.listener.name", "metadata.log.dir",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "remote.log.storage.system.enable",
    # Kafka 4.4 formats new clusters with eligible leader replicas on, which writes a cluster-wide
    # dynamic default min.insync.replicas=1 at bootstrap (docs/compatibility.md).
    "min.insync.replicas",
}


def _describe(raw, resource_type, name, keys=None, version=4):
    resp = raw.request(ApiKey.DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False})
    r = resp.results[0]
    entries = {}
    for c in r.configs:
        e = {"value": c.value, "read_only": c.read_only, "source": plain(c.config_source),
             "sensitive": c.is_sensitive}
        if version >= 1:
            e["synonyms"] = [(s.name, s.value, plain(s.source)) for s in c.synonyms]
        if version >= 3:
            e["type"] = plain(c.config_type)
        entries[c.name] = e
    return plain(r.error_code), entries


def _configs_scenario(bootstrap):
    topic = unique("diff-configs")
    create_topic(bootstrap, topic, configs={"retention.ms": "3600000", "max.message.bytes": "64000",
                                            "cleanup.policy": "delete"})
    raw = RawClient(bootstrap)
    seen = {}
    seen["topic"] = _describe(raw, 2, topic)
    seen["topic v1 two keys"] = _describe(raw, 2, topic, keys=["retention.ms", "no.such.key"], version=1)
    seen["unknown topic"] = _describe(raw, 2, unique("nope"))[0]
    resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": topic, "configs": [
            {"name": "segment.ms", "config_operation": 0, "value": "1000000"},
            {"name": "retention.ms", "config_operation": 1, "value": None},
            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"}]}], "validate_only": False})
    seen["incremental alter"] = [(plain(r.error_code), r.error_message) for r in resp.responses]
    # Kafka applies the change through its metadata log: a describe right after the alter may still show
    # the old values (clients poll); wait until segment.ms shows the new one, on both peers.
    def altered():
        seen["topic after alter"] = _describe(raw, 2, topic)
        return seen["topic after alter"][1]["segment.ms"]["value"] == "1000000"

    with contextlib.suppress(TimedOut):  # what was described last is compared
        wait_until(altered, 15, interval=0.2, what="segment.ms described as altered")
    for label, configs in {
        "alter bad value": [{"name": "segment.ms", "config_operation": 0, "value": "-5"}],
        "alter unknown key": [{"name": "no.such.key", "config_operation": 0, "value": "1"}],
        "alter subtract from a non-list": [{"name": "segment.ms", "config_operation": 3, "value": "1"}],
        "alter append to a non-list": [{"name": "segment.ms", "config_operation": 2, "value": "1"}],
    }.items():
        resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": topic, "configs": configs}], "validate_only": False})
        seen[label] = plain(resp.responses[0].error_code)
    resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": unique("nope"), "configs": [
            {"name": "segment.ms", "config_operation": 0, "value": "1000000"}]}], "validate_only": False})
    seen["alter unknown topic"] = plain(resp.responses[0].error_code)
    seen["broker"] = _describe(raw, 4, "1")
    seen["broker defaults"] = _describe(raw, 4, "")
    seen["broker 99"] = _describe(raw, 4, "99")[0]
    raw.close()
    return seen


def _common_config_keys(kafka: dict, tierlog: dict) -> tuple[dict, dict]:
    """Keep the config entries both peers report, minus the environment-specific ones."""
    kafka, tierlog = dict(kafka), dict(tierlog)
    for label in ("topic", "topic v1 two keys", "topic after alter", "broker", "broker defaults"):
        (k_err, k_entries), (t_err, t_entries) = kafka[label], tierlog[label]
        keys = sorted((set(k_entries) & set(t_entries)) - ENVIRONMENT_KEYS)
        kafka[label] = {"error_code": k_err, "entries": {k: k_entries[k] for k in keys}}
        tierlog[label] = {"error_code": t_err, "entries": {k: t_entries[k] for k in keys}}
        if label.startswith("topic"):  # every topic config tierlog reports is one Kafka has
            kafka[label]["only tierlog reports"] = []
            tierlog[label]["only tierlog reports"] = sorted(set(t_entries) - set(k_entries))
    return kafka, tierlog


def test_describe_configs_values_and_sources(observed):
    assert_no_unexplained(observed, "configs")


# --------------------------------------------------------------------------------- group offsets

def _groups_scenario(bootstrap):
    topic, group = unique("diff-groups"), unique("diff-group")
    create_topic(bootstrap, topic, partitions=2)
    raw = RawClient(bootstrap)
    for p in range(2):
        _produce(raw, topic, p, build_batch([(None, b"g")] * 5))
    seen = {}
    answers = []

    def loaded():  # Kafka creates and loads __consumer_offsets on first use; clients retry meanwhile
        found = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        probe = raw.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                                     "require_stable": False})
        answers.append(found)
        return not {plain(found.coordinators[0].error_code), plain(probe.groups[0].error_code)} & {14, 15, 16}

    with contextlib.suppress(TimedOut):  # the last answer is the one compared
        wait_until(loaded, 60, interval=0.2, what="the group coordinator, loaded")
    found = answers[-1]
    seen["find coordinator"] = [(plain(c.error_code), c.node_id) for c in found.coordinators]

    def commit(offsets, generation=-1, member="", version=8, name=topic):
        resp = raw.request(ApiKey.OFFSET_COMMIT, version, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": -1, "topics": [{"name": name, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": m} for p, o, m in offsets]}]})
        return [(p.partition_index, plain(p.error_code)) for t in resp.topics for p in t.partitions]

    def fetch(version=8, name=topic, g=None):
        if version >= 8:
            resp = raw.request(ApiKey.OFFSET_FETCH, version, {"groups": [{
                "group_id": g or group, "topics": [{"name": name, "partition_indexes": [0, 1, 2]}]}],
                "require_stable": False})
            grp = resp.groups[0]
            return {"error": plain(grp.error_code), "partitions": [
                (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, plain(p.error_code))
                for t in grp.topics for p in t.partitions]}
        resp = raw.request(ApiKey.OFFSET_FETCH, version, {
            "group_id": g or group, "topics": [{"name": name, "partition_indexes": [0, 1, 2]}]})
        return {"partitions": [
            (p.partition_index, p.committed_offset, p.metadata, plain(p.error_code))
            for t in resp.topics for p in t.partitions]}

    seen["fetch before commits"] = fetch()
    seen["commit"] = commit([(0, 3, "meta-a"), (1, 5, None)])
    seen["fetch v8"] = fetch()
    seen["fetch v1"] = fetch(version=1)
    seen["commit again"] = commit([(0, 4, "")], version=2)
    seen["fetch after second commit"] = fetch()
    seen["commit past the end"] = commit([(1, 500, "far")])
    seen["fetch after commit past the end"] = fetch()
    seen["commit unknown topic"] = commit([(0, 1, "")], name=unique("nope"))
    seen["commit partition 7"] = commit([(7, 1, "")])
    seen["commit with a generation to a group without members"] = commit([(0, 1, "")], generation=3, member="m-1")
    seen["fetch unknown group"] = fetch(g=unique("nobody"))
    described = raw.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    seen["describe"] = [(plain(g.error_code), g.group_state, g.protocol_type, len(g.members))
                        for g in described.groups]
    listed = raw.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    seen["listed"] = [(g.group_state, g.protocol_type) for g in listed.groups if g.group_id == group]
    nobody = unique("nobody")
    deleted = raw.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group, nobody]})
    labels = {group: "the group", nobody: "a group that never existed"}
    seen["delete"] = {labels[r.group_id]: plain(r.error_code) for r in deleted.results}
    seen["fetch after delete"] = fetch()
    raw.close()
    return seen


def test_group_offsets_after_commits(observed):
    assert_no_unexplained(observed, "groups")


def _client_group_scenario(bootstrap):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic, group = unique("diff-client-group"), unique("diff-client")
    create_topic(bootstrap, topic, partitions=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(30):
        producer.send(topic, b"m%d" % i, partition=i % 3)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    got = []

    def consumed():
        if len(got) < 20:
            for tp, records in consumer.poll(timeout_ms=500, max_records=20 - len(got)).items():
                got.extend((tp.partition, r.offset) for r in records)
        return len(got) >= 20

    with contextlib.suppress(TimedOut):  # how many arrived is compared
        wait_until(consumed, 30, interval=0, what="20 records")
    consumer.commit()
    committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(3)}
    consumer.close()
    raw = RawClient(bootstrap)
    described = raw.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    raw.close()
    return {"consumed": len(got), "committed_total": sum(v or 0 for v in committed.values()),
            "state_after_close": [(g.group_state, g.protocol_type, g.protocol_data, len(g.members))
                                  for g in described.groups]}


def test_consumer_group_commits_through_a_client(observed):
    assert_no_unexplained(observed, "client-group")


# ------------------------------------------------------------------------------------------ fetch

def _fetch_scenario(bootstrap):
    topic = unique("diff-fetch")
    create_topic(bootstrap, topic)
    raw = RawClient(bootstrap)
    for n in (3, 1, 4):
        _produce(raw, topic, 0, build_batch([(b"k", b"f" * 50)] * n, compression="gzip"))
    seen = {}
    for label, offset, max_bytes in (("from 0", 0, 1 << 20), ("inside the first batch", 1, 1 << 20),
                                     ("at the end", 8, 1 << 20), ("one byte limit", 0, 1)):
        resp = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                        "partition_max_bytes": max_bytes,
                                                        "current_leader_epoch": -1, "log_start_offset": -1}]}]})
        p = resp.responses[0].partitions[0]
        seen[label] = {"error_code": plain(p.error_code), "high_watermark": p.high_watermark,
                       "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
                       "batches": [(h.base_offset, h.last_offset) for _, h in iter_batches(p.records or b"")],
                       "preferred_read_replica": p.preferred_read_replica}
    # a topic compression.type other than producer: the broker stores (and serves) the batch recompressed
    for codec in ("lz4", "uncompressed"):
        other = unique(f"diff-{codec}")
        create_topic(bootstrap, other, configs={"compression.type": codec, **KEEP})
        _produce(raw, other, 0, build_batch([(b"k%d" % i, b"r" * 80, [], T0 + i) for i in range(5)],
                                            compression="gzip", producer_id=-1))
        resp = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": other, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20,
                                                        "current_leader_epoch": -1, "log_start_offset": -1}]}]})
        data = resp.responses[0].partitions[0].records or b""
        seen[f"topic compression.type={codec}"] = [
            (h.base_offset, h.last_offset, h.compression.name_lower, h.base_timestamp, h.max_timestamp)
            for _, h in iter_batches(data)] + [[(r.key, r.value) for r in iter_records(data)]]
    raw.close()
    return seen


def test_fetch_answers(observed):
    assert_no_unexplained(observed, "fetch")


# ------------------------------------------------------------------------------------ log dirs

def _log_dirs_scenario(bootstrap):
    """DescribeLogDirs v1-v4 on a topic with one written and one empty partition. Each peer has one log dir
    (its path differs: only that it is absolute is compared); the file system's bytes only as positive, since
    the free space moves; sizes exactly, the stored batches being the same bytes."""
    topic, unknown = unique("diff-logdirs"), unique("nope")
    create_topic(bootstrap, topic, partitions=2, configs=KEEP)
    raw = RawClient(bootstrap)
    _produce(raw, topic, 0, build_batch([(b"k", b"d" * 40, [], T0 + i) for i in range(3)]))

    def shape(resp, only_topic=False):
        out = {"error_code": plain(getattr(resp, "error_code", None)), "results": []}
        for d in resp.results:
            topics = [t for t in d.topics if t.name == topic or not only_topic]
            out["results"].append({
                "error_code": plain(d.error_code), "absolute": d.log_dir.startswith("/"),
                "total_bytes": getattr(d, "total_bytes", None) and d.total_bytes > 0,
                "usable_bytes": getattr(d, "usable_bytes", None) and d.usable_bytes > 0,
                "topics": [{"name": "<topic>" if t.name == topic else t.name, "partitions": sorted(
                    (p.partition_index, p.partition_size, p.offset_lag, p.is_future_key) for p in t.partitions)}
                    for t in topics]})
        return out

    seen = {}
    for version in (1, 2, 3, 4):
        seen[f"v{version} named"] = shape(raw.request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [
            {"topic": topic, "partitions": [0, 1, 5]}, {"topic": unknown, "partitions": [0]}]}))
    seen["v4 no topics"] = shape(raw.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": []}))
    seen["v4 every topic"] = shape(raw.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}), only_topic=True)
    raw.close()
    return seen


def test_describe_log_dirs(observed):
    assert_no_unexplained(observed, "log-dirs")
    _, tierlog = observed.get("log-dirs")
    assert tierlog["v4 every topic"]["results"][0]["topics"][0]["partitions"][0][1] > 0  # not vacuous


def _describe_topic_partitions_scenario(bootstrap):
    """KIP-966's DescribeTopicPartitions (the Java admin's describeTopics): named topics, unknown and invalid
    names, pages cut by response_partition_limit with the next cursor, a cursor inside a topic, a cursor naming a
    topic not asked for, a negative cursor partition, and every topic from a cursor on."""
    base = unique("dtp")
    a, b = f"{base}-a", f"{base}-b"  # sorted a before b
    create_topic(bootstrap, a, partitions=3, configs=KEEP)
    create_topic(bootstrap, b, partitions=2, configs=KEEP)
    raw = RawClient(bootstrap)

    def ask(topics, limit=2000, cursor=None):
        resp = raw.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": t} for t in topics], "response_partition_limit": limit, "cursor": cursor})
        name = {a: "<a>", b: "<b>", "no-such-" + base: "<unknown>"}
        return {"topics": [{"error_code": plain(t.error_code), "name": name.get(t.name, t.name),
                            "has_id": t.topic_id is not None and t.topic_id.int != 0, "is_internal": t.is_internal,
                            "operations": t.topic_authorized_operations,
                            "partitions": [(p.partition_index, plain(p.error_code), len(p.replica_nodes),
                                            len(p.isr_nodes), p.eligible_leader_replicas, p.last_known_elr,
                                            list(p.offline_replicas)) for p in t.partitions]}
                           for t in resp.topics if not topics and t.name in (a, b) or topics],
                "next_cursor": None if resp.next_cursor is None else
                (name.get(resp.next_cursor.topic_name, resp.next_cursor.topic_name),
                 resp.next_cursor.partition_index)}

    seen = {
        "named": ask([b, a, "no-such-" + base, "bad/name"]),
        "limit 2": ask([a, b], limit=2),
        "limit 3": ask([a, b], limit=3),
        "limit 0": ask([a, b], limit=0),
        "cursor inside": ask([a, b], limit=2, cursor={"topic_name": a, "partition_index": 2}),
        "cursor past the end": ask([a, b], cursor={"topic_name": a, "partition_index": 7}),
        "cursor not asked": ask([a], cursor={"topic_name": b, "partition_index": 0}),
        "negative cursor": ask([a, b], cursor={"topic_name": a, "partition_index": -1}),
        "every topic from b": ask([], cursor={"topic_name": b, "partition_index": 1}),
    }
    raw.close()
    return seen


def test_describe_topic_partitions(observed):
    assert_no_unexplained(observed, "describe-topic-partitions")
    _, tierlog = observed.get("describe-topic-partitions")
    assert tierlog["limit 2"]["next_cursor"] == ("<a>", 2)  # not vacuous


# ---------------------------------------------------------------------------------- all scenarios

# ---------------------------------------------------------------- Kafka 4.4's newest versions (issue 39)

ZERO_ID = uuid.UUID(int=0)


def _newest_versions_scenario(bootstrap):
    """Produce v13 and OffsetCommit/OffsetFetch v10 name topics by id (KIP-516, KIP-848), Fetch v18 carries the
    follower's high watermark (KIP-1166), DescribeGroups v6 answers GROUP_ID_NOT_FOUND (KIP-1043): each with its
    error cases (an unknown id, the zero id, a partition the topic lacks, a group that does not exist). Topic ids
    differ between the peers: answers name them as "topic", "unknown id" or "zero id"."""
    topic, group, nobody = unique("diff-ids"), unique("diff-ids-group"), unique("diff-ids-nobody")
    create_topic(bootstrap, topic, partitions=2, configs=KEEP)
    raw = RawClient(bootstrap)
    md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    topic_id, unknown_id = md.topics[0].topic_id, uuid.uuid4()
    label = {topic_id: "topic", unknown_id: "unknown id", None: "zero id", ZERO_ID: "zero id"}
    seen = {}

    def produce(*topics):
        resp = raw.request(ApiKey.PRODUCE, 13, {"acks": -1, "timeout_ms": 5000, "transactional_id": None,
                                                "topic_data": [{"topic_id": t, "partition_data": [
                                                    {"index": p, "records": build_batch([(None, b"x%d" % p)])}]}
                                                    for t, p in topics]})
        return sorted(((label[t.topic_id], p.index, plain(p.error_code), p.base_offset, p.log_start_offset,
                        plain(p.log_append_time)) for t in resp.responses for p in t.partition_responses),
                      key=str)

    seen["produce"] = produce((topic_id, 0))
    seen["produce again, partition 1"] = produce((topic_id, 0), (topic_id, 1))
    seen["produce unknown topic id"] = produce((unknown_id, 0))
    seen["produce zero topic id"] = produce((ZERO_ID, 0))
    seen["produce partition 5 of 2"] = produce((topic_id, 5))
    seen["produce known and unknown ids"] = produce((topic_id, 1), (unknown_id, 0))

    def fetch(t, partition=0, high_watermark=None, replica_id=-1):
        part = {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
        if high_watermark is not None:  # a tagged field: left out, it is Long.MAX_VALUE
            part["high_watermark"] = high_watermark
        resp = raw.request(ApiKey.FETCH, 18, {
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1}, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": t, "partitions": [part]}], "forgotten_topics_data": [], "rack_id": ""})
        (answered,) = resp.responses
        p = answered.partitions[0]
        return {"top_error": plain(resp.error_code), "topic": label[answered.topic_id],
                "error_code": plain(p.error_code), "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
                "aborted_transactions": plain(p.aborted_transactions),
                "batches": [(h.base_offset, h.last_offset) for _, h in iter_batches(p.records or b"")]}

    seen["fetch v18"] = fetch(topic_id)
    seen["fetch v18 with a high watermark behind"] = fetch(topic_id, high_watermark=0)
    seen["fetch v18 with a high watermark ahead"] = fetch(topic_id, high_watermark=1000)
    seen["fetch v18 unknown topic id"] = fetch(unknown_id, high_watermark=0)
    seen["fetch v18 zero topic id"] = fetch(ZERO_ID)
    seen["fetch v18 partition 5 of 2"] = fetch(topic_id, partition=5)
    # a broker id that is no replica of the partition (a single node has no follower)
    seen["fetch v18 from replica 7"] = fetch(topic_id, high_watermark=0, replica_id=7)["error_code"]

    answers = []

    def loaded():  # Kafka creates __consumer_offsets on the first coordinator lookup and loads it; clients retry
        found = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        answers.append(raw.request(ApiKey.OFFSET_FETCH, 10, {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}], "require_stable": False}))
        return not {plain(found.coordinators[0].error_code), plain(answers[-1].groups[0].error_code)} & {14, 15, 16}

    with contextlib.suppress(TimedOut):
        wait_until(loaded, 60, interval=0.2, what="the group coordinator, loaded")

    def commit(*topics):
        resp = raw.request(ApiKey.OFFSET_COMMIT, 10, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"topic_id": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                      "committed_leader_epoch": -1, "committed_metadata": f"m{o}"}
                                                     for p, o in parts]} for t, parts in topics]})
        return sorted(((label[t.topic_id], p.partition_index, plain(p.error_code))
                       for t in resp.topics for p in t.partitions), key=str)

    def offsets(topics, g=None, version=10):
        if version >= 10:
            topics = None if topics is None else [{"topic_id": t, "partition_indexes": ps} for t, ps in topics]
            extra = {"member_id": None, "member_epoch": -1}
        else:  # by name
            topics = [{"name": topic, "partition_indexes": ps} for _, ps in topics]
            extra = {}
        resp = raw.request(ApiKey.OFFSET_FETCH, version, {"groups": [
            {"group_id": g or group, **extra, "topics": topics}], "require_stable": False})
        (answered,) = resp.groups
        return {"error_code": plain(answered.error_code), "partitions": sorted(
            ((label[t.topic_id] if version >= 10 else t.name == topic, p.partition_index, p.committed_offset,
              p.committed_leader_epoch, p.metadata, plain(p.error_code))
             for t in answered.topics for p in t.partitions), key=str)}

    seen["offset fetch v10 before commits"] = offsets([(topic_id, [0, 1])])
    seen["commit v10"] = commit((topic_id, [(0, 1), (1, 2)]))
    seen["commit v10 unknown topic id"] = commit((unknown_id, [(0, 1)]))
    seen["commit v10 zero topic id"] = commit((ZERO_ID, [(0, 1)]))
    seen["commit v10 partition 9 of 2"] = commit((topic_id, [(9, 1)]))
    seen["commit v10 known and unknown ids"] = commit((topic_id, [(0, 3)]), (unknown_id, [(1, 4)]))
    seen["offset fetch v10"] = offsets([(topic_id, [0, 1, 2])])
    seen["offset fetch v10 every topic"] = offsets(None)
    seen["offset fetch v10 unknown topic id"] = offsets([(unknown_id, [0])])
    seen["offset fetch v10 zero topic id"] = offsets([(ZERO_ID, [0, 1])])
    seen["offset fetch v10 unknown group"] = offsets([(topic_id, [0])], g=nobody)
    seen["offset fetch v9 by name, after commits by id"] = offsets([(None, [0, 1])], version=9)

    def describe(version, *groups):
        resp = raw.request(ApiKey.DESCRIBE_GROUPS, version, {"groups": list(groups),
                                                             "include_authorized_operations": False})
        names = {group: "the group", nobody: "a group that does not exist", "": "the empty group id",
                 modern: "a KIP-848 consumer group"}
        out = {}
        for g in resp.groups:  # Kafka answers in its own order (by coordinator partition)
            message = getattr(g, "error_message", None)  # v6+
            out[names[g.group_id]] = {
                "error_code": plain(g.error_code), "group_state": g.group_state, "protocol_type": g.protocol_type,
                "members": len(g.members),
                "error_message": message.replace(g.group_id, "<group>") if g.group_id and message else message}
        return out

    # a consumer group of KIP-848's protocol (one member joined, then left): not a classic group
    modern = unique("diff-ids-consumer-group")
    member = {"group_id": modern, "member_id": str(uuid.uuid4()), "rebalance_timeout": 30000,
              "subscribed_topic_names": [topic], "topic_partitions": []}
    joined = raw.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {**member, "member_epoch": 0})
    seen["describe v6"] = describe(6, group, nobody, "", modern)
    seen["describe v5"] = describe(5, nobody, modern)
    raw.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {**member, "member_epoch": -1})
    seen["consumer group joined"] = plain(joined.error_code)
    raw.close()
    return seen


def test_newest_api_versions_of_kafka_4_4(observed):
    """Issue 39: the versions Kafka 4.4 serves that tierlog did not, answered alike, error cases included."""
    assert_no_unexplained(observed, "newest-versions")
    kafka, tierlog = observed.get("newest-versions")
    # the scenario reached what it is about on the reference itself
    assert kafka["produce unknown topic id"][0][2] == 100 and kafka["commit v10"] == [("topic", 0, 0), ("topic", 1, 0)]
    assert kafka["describe v6"]["a group that does not exist"]["error_code"] == 69


SCENARIOS = {
    "offsets": _offsets_scenario,
    "idempotent": _idempotent_scenario,
    "errors": _bad_requests_scenario,
    "configs": _configs_scenario,
    "groups": _groups_scenario,
    "client-group": _client_group_scenario,
    "fetch": _fetch_scenario,
    "log-dirs": _log_dirs_scenario,
    "describe-topic-partitions": _describe_topic_partitions_scenario,
    "newest-versions": _newest_versions_scenario,
}
NORMALIZE = {"configs": _common_config_keys}


def test_deliberate_differences_are_as_documented(observed):
    found = {d for name in SCENARIOS for d in observed.differences(name)}
    for path, (kafka, tierlog, _reason) in DELIBERATE.items():
        assert f"{path}: kafka={kafka!r} tierlog={tierlog!r}" in found, path
    for name, (_reason, match) in DELIBERATE_PATTERNS.items():
        assert any(match(d.split(":")[0]) for d in found), f"{name} no longer differs: update the docs"


@pytest.mark.parametrize("bug", [pytest.param(bug, marks=pytest.mark.xfail(strict=True, reason=reason))
                                 for bug, (reason, _) in KNOWN_BUGS.items()])
def test_known_bug_is_fixed(observed, bug):
    """Strict xfail per known bug: passes (and so fails the run) once tierlog matches Kafka there."""
    _, match = KNOWN_BUGS[bug]
    found = [d for name in SCENARIOS for d in observed.differences(name) if match(d.split(":")[0])]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------------------- tiered (Kafka only)

@pytest.mark.slow
def test_kafka_tiered_peer_offloads_segments(kafka_peer_tiered, kafka_tool):
    """The tiered Kafka peer works: closed segments reach LocalTieredStorage and ListOffsets -4/-5
    move (the reference later tiered tests compare tierlog with)."""
    b, topic = kafka_peer_tiered.bootstrap, unique("tiered")
    create_topic(b, topic, configs={"remote.storage.enable": "true", "segment.bytes": "1048576",
                                    "local.retention.ms": "1000"})
    kafka_tool("ProducerPerformance", "--topic", topic, "--num-records", "3000", "--record-size", "1000",
               "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "linger.ms=20")
    raw = RawClient(b)

    def tiered():
        latest_tiered = _list_offset(raw, topic, 0, -5)
        earliest_local = _list_offset(raw, topic, 0, -4)
        if latest_tiered["offset"] > 0 and earliest_local["offset"] > 0:
            return latest_tiered, earliest_local
        return not_yet((latest_tiered, earliest_local))

    latest_tiered, earliest_local = wait_until(tiered, 60, interval=0.5,
                                               what="the latest tiered and the earliest local offsets past 0")
    assert _list_offset(raw, topic, 0, -2)["offset"] == 0
    assert earliest_local["offset"] <= latest_tiered["offset"] + 1
    raw.close()
    # Both rolled segments of this topic reach the remote store (the second may still be on its way).
    wait_until(lambda: len(remote := list(kafka_peer_tiered.remote_dir.rglob(f"{topic}-*/*.log"))) >= 2
               or not_yet(remote), 60, interval=0.5, what="both rolled segments in the remote store")


# ----------------------------------------------------- dynamic retention rules (tiered peers, both sides)

_DAY = 86_400_000


def _alter(raw, rtype: int, name: str, ops: list[tuple], validate_only: bool = False, incremental: bool = True):
    """One (Incremental)AlterConfigs of one resource; (error code, whether the message names the
    local retention setting). ops: (key, op, value); AlterConfigs takes the SET ones as the new set."""
    if incremental:
        configs = [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]
        resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": rtype, "resource_name": name, "configs": configs}], "validate_only": validate_only})
    else:
        configs = [{"name": k, "value": v} for k, op, v in ops if op == 0]
        resp = raw.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
            "resource_type": rtype, "resource_name": name, "configs": configs}], "validate_only": validate_only})
    r = resp.responses[0]
    return [plain(r.error_code), "local.retention" in (r.error_message or "")]


def _await_broker_values(raw, expected: dict) -> None:
    """Until node 1 describes these values: Kafka's broker applies a committed change asynchronously and
    validates the next request against what it has applied, so each step waits for the last one."""

    def applied():
        resp = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
            "resource_type": 4, "resource_name": "1", "configuration_keys": list(expected)}],
            "include_synonyms": False, "include_documentation": False})
        seen = {c.name: c.value for c in resp.results[0].configs}
        return seen == expected or not_yet(seen)

    wait_until(applied, 30, interval=0.1, what=f"node 1 to describe {expected}")


def _retention_rules_scenario(bootstrap) -> dict:
    """The local retention must not exceed the retention (Kafka's DynamicLogConfig for the broker
    defaults, LogConfig for a tiered topic), judged on the values in effect once the whole request is
    applied: both orders in one request, and across two requests."""
    seen: dict = {}
    raw = RawClient(bootstrap)
    try:
        local, total = "log.local.retention.ms", "log.retention.ms"
        ten, twenty, five, one = (str(d * _DAY) for d in (10, 20, 5, 1))
        # Broker (cluster-wide dynamic defaults): the static retention is 7 days, local -2.
        seen["broker: local 10 d alone"] = _alter(raw, 4, "", [(local, 0, ten)], validate_only=True)
        seen["broker: local 10 d + retention 20 d (validate)"] = _alter(
            raw, 4, "", [(local, 0, ten), (total, 0, twenty)], validate_only=True)
        seen["broker: retention 20 d + local 10 d (validate)"] = _alter(
            raw, 4, "", [(total, 0, twenty), (local, 0, ten)], validate_only=True)
        # Legacy AlterConfigs on this node (node 1 on both peers; on the cluster default Kafka 4.4 refuses
        # it for another reason: the set it replaces holds the min.insync.replicas that ELR requires).
        seen["broker: legacy retention 20 d + local 10 d (validate)"] = _alter(
            raw, 4, "1", [(total, 0, twenty), (local, 0, ten)], validate_only=True, incremental=False)
        seen["broker: legacy retention 20 d alone (validate)"] = _alter(
            raw, 4, "1", [(total, 0, twenty)], validate_only=True, incremental=False)
        seen["broker: local 10 d + retention 20 d"] = _alter(raw, 4, "", [(local, 0, ten), (total, 0, twenty)])
        _await_broker_values(raw, {local: ten, total: twenty})
        seen["broker: then retention 5 d alone"] = _alter(raw, 4, "", [(total, 0, five)])
        seen["broker: then local 1 d"] = _alter(raw, 4, "", [(local, 0, one)])
        _await_broker_values(raw, {local: one, total: twenty})
        seen["broker: then retention 5 d"] = _alter(raw, 4, "", [(total, 0, five)])
        seen["broker: reset"] = _alter(raw, 4, "", [(total, 1, None), (local, 1, None)])
        _await_broker_values(raw, {local: "-2"})
        # A tiered topic (the broker defaults are back to 7 days and -2).
        topic = unique("diff-retention")
        create_topic(bootstrap, topic, configs={"remote.storage.enable": "true"})
        minute, half = "60000", "30000"
        seen["topic: local 10 d alone"] = _alter(raw, 2, topic, [("local.retention.ms", 0, ten)], validate_only=True)
        seen["topic: retention 1 min + local 30 s"] = _alter(
            raw, 2, topic, [("retention.ms", 0, minute), ("local.retention.ms", 0, half)])
        seen["topic: then retention 20 s alone"] = _alter(raw, 2, topic, [("retention.ms", 0, "20000")])
        seen["topic: then local 10 s"] = _alter(raw, 2, topic, [("local.retention.ms", 0, "10000")])
        seen["topic: then retention 20 s"] = _alter(raw, 2, topic, [("retention.ms", 0, "20000")])
        seen["topic: legacy local 30 s + retention 1 min"] = _alter(
            raw, 2, topic, [("remote.storage.enable", 0, "true"), ("local.retention.ms", 0, half),
                            ("retention.ms", 0, minute)], incremental=False)
    finally:
        raw.close()
    return seen


@pytest.mark.slow
def test_dynamic_retention_rules_read_the_values_in_effect_after_the_request(kafka_peer_tiered, tierlog_tiered):
    kafka = _retention_rules_scenario(kafka_peer_tiered.bootstrap)
    tierlog = _retention_rules_scenario(tierlog_tiered.bootstrap)
    assert differences(kafka, tierlog, "retention rules") == []
    # What both answer (so the comparison cannot pass on two equally broken answers).
    assert tierlog["broker: local 10 d + retention 20 d"] == [0, False]
    assert tierlog["broker: retention 20 d + local 10 d (validate)"] == [0, False]
    assert tierlog["broker: legacy retention 20 d + local 10 d (validate)"] == [0, False]
    assert tierlog["broker: then retention 5 d alone"][0] != 0
    assert tierlog["broker: then retention 5 d"] == [0, False]
    assert tierlog["topic: retention 1 min + local 30 s"] == [0, False]
    assert tierlog["topic: then retention 20 s alone"] == [40, True]
    assert tierlog["topic: then retention 20 s"] == [0, False]


# ------------------------------------------ Kafka 4.3-4.4's tiered-storage KIPs (tiered peers, both sides)

def _describe_keys(raw, rtype: int, name: str, keys: list[str]) -> dict:
    """DescribeConfigs v4 of some keys: value, source, read-only and synonyms, as both peers report them."""
    r = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False}).results[0]
    return {"error": plain(r.error_code), "configs": {c.name: (c.value, plain(c.config_source), c.read_only, [
        (s.name, s.value, plain(s.source)) for s in c.synonyms]) for c in r.configs}}


def _alter_message(raw, rtype: int, name: str, ops: list[tuple]) -> list:
    """IncrementalAlterConfigs of one resource: (error code, message)."""
    resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": rtype, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False})
    return [plain(resp.responses[0].error_code), resp.responses[0].error_message]


def _tiered_kips_scenario(bootstrap) -> dict:
    """KIP-1241 (remote.copy.lag.*, Kafka 4.4), KIP-1235 (__remote_log_metadata's min.insync.replicas, 4.3)
    and KIP-1066 (cordoned.log.dirs, 4.3): names, defaults, sources, dynamic scope, the errors of bad values,
    and what a cordoned log dir does to DescribeLogDirs v5 and CreateTopics. Every change is undone."""
    seen: dict = {}
    raw = RawClient(bootstrap)
    lag = ["log.remote.copy.lag.ms", "log.remote.copy.lag.bytes"]

    def cordoned_dirs(want: bool):
        resp = raw.request(ApiKey.DESCRIBE_LOG_DIRS, 5, {"topics": []})
        flags = [d.is_cordoned for d in resp.results]
        return flags if flags == [want] else not_yet(flags)

    try:
        topic = unique("diff-kips")
        create_topic(bootstrap, topic, configs={"remote.storage.enable": "true", "local.retention.ms": "60000"})
        # KIP-1241: broker defaults, a topic's inherited values, the per-broker dynamic setting and its bound.
        seen["broker lag"] = _describe_keys(raw, 4, "1", lag)
        seen["topic lag"] = _describe_keys(raw, 2, topic, ["remote.copy.lag.ms", "remote.copy.lag.bytes"])
        seen["broker lag 5 s"] = _alter_message(raw, 4, "1", [("log.remote.copy.lag.ms", 0, "5000")])
        _await_broker_values(raw, {"log.remote.copy.lag.ms": "5000"})
        seen["topic lag after the broker's"] = _describe_keys(raw, 2, topic, ["remote.copy.lag.ms"])
        seen["topic lag past local retention"] = _alter_message(raw, 2, topic, [("remote.copy.lag.ms", 0, "120000")])
        seen["topic lag -1"] = _alter_message(raw, 2, topic, [("remote.copy.lag.ms", 0, "-1")])
        seen["topic lag -2"] = _alter_message(raw, 2, topic, [("remote.copy.lag.bytes", 0, "-2")])[0]
        # KIP-1235: the metadata topic is created with min.insync.replicas=2 (one replica here, as configured).
        def rlmm_topic():
            found = _describe_keys(raw, 2, "__remote_log_metadata", ["min.insync.replicas"])
            return found if found["error"] == 0 else not_yet(found)
        seen["__remote_log_metadata min.isr"] = wait_until(rlmm_topic, 60, interval=0.2,
                                                           what="__remote_log_metadata described")
        # KIP-1066: cordoned.log.dirs, per broker.
        seen["broker cordoned"] = _describe_keys(raw, 4, "1", ["cordoned.log.dirs"])
        log_dir = raw.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": []}).results[0].log_dir
        seen["cordon a dir not in log.dirs"] = _alter_message(raw, 4, "1", [("cordoned.log.dirs", 0, "/nope")])
        seen["cordon * and a dir"] = _alter_message(raw, 4, "1", [("cordoned.log.dirs", 0, f"*,{log_dir}")])
        seen["cordon as a cluster default"] = _alter_message(raw, 4, "", [("cordoned.log.dirs", 0, "*")])
        seen["cordon the log dir"] = _alter_message(raw, 4, "1", [("cordoned.log.dirs", 0, log_dir)])
        _await_broker_values(raw, {"cordoned.log.dirs": log_dir, "log.remote.copy.lag.ms": "5000"})
        seen["log dirs v5, cordoned"] = wait_until(lambda: cordoned_dirs(True), 30, interval=0.1,
                                                   what="DescribeLogDirs v5 to show the dir cordoned")
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": unique("diff-cordoned"), "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 10000, "validate_only": False})
        seen["create while cordoned"] = [plain(resp.topics[0].error_code), resp.topics[0].error_message]
    finally:
        seen["uncordon"] = _alter_message(raw, 4, "1", [("cordoned.log.dirs", 1, None),
                                                        ("log.remote.copy.lag.ms", 1, None)])
        _await_broker_values(raw, {"cordoned.log.dirs": "", "log.remote.copy.lag.ms": "0"})
        seen["log dirs v5, open again"] = wait_until(lambda: cordoned_dirs(False), 30, interval=0.1,
                                                     what="DescribeLogDirs v5 to show the dir open")
        raw.close()
    return seen


@pytest.mark.slow
def test_tiered_storage_kips_of_kafka_4_3_and_4_4(kafka_peer_tiered, tierlog_tiered):
    kafka = _tiered_kips_scenario(kafka_peer_tiered.bootstrap)
    tierlog = _tiered_kips_scenario(tierlog_tiered.bootstrap)
    # Deliberate (docs/compatibility.md): KIP-1235's default of 2 is capped at the metadata topic's replication
    # factor (1 on both peers here), so a single broker can still write it; Kafka 4.4 gives the topic 2.
    k_isr = kafka["__remote_log_metadata min.isr"]["configs"].pop("min.insync.replicas")
    t_isr = tierlog["__remote_log_metadata min.isr"]["configs"].pop("min.insync.replicas")
    assert (k_isr[0], t_isr[0]) == ("2", "1")
    assert differences(kafka, tierlog, "tiered KIPs") == []
    # What both answer (so the comparison cannot pass on two equally broken answers).
    assert tierlog["broker lag"]["configs"]["log.remote.copy.lag.bytes"][:3] == ("-1", 5, False)
    assert tierlog["topic lag after the broker's"]["configs"]["remote.copy.lag.ms"][:2] == ("5000", 2)
    assert tierlog["topic lag past local retention"][0] == 40
    assert tierlog["cordon a dir not in log.dirs"][0] == 42 and tierlog["cordon the log dir"] == [0, None]
    assert tierlog["create while cordoned"][0] == 38 and tierlog["log dirs v5, cordoned"] == [True]
