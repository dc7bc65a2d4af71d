"""CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and DescribeCluster against a live broker.

Real clients (kafka-python's KafkaAdminClient, confluent-kafka's AdminClient) for what they expose;
the raw protocol client for the versions and corners they do not reach (topic ids, duplicates,
manual assignments, endpoint types). Error codes and messages are Kafka's.
"""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey


@pytest.fixture
def admin(broker):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield a
    a.close()


@pytest.fixture
def raw(broker):
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def _creatable(name, partitions=1, rf=1, configs=None, assignments=()):
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


def _create(raw, *topics, version=7, validate_only=False):
    r = raw.request(ApiKey.CREATE_TOPICS, version, {"topics": list(topics), "timeout_ms": 10000,
                                                    "validate_only": validate_only})
    return {t.name: t for t in r.topics}


def _produce(bootstrap, topic, n, partition=0):
    p = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(n):
        p.send(topic, f"v{i}".encode(), partition=partition)
    p.flush()
    p.close()


def _earliest(bootstrap, topic, partition=0):
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, partition)
    try:
        return c.beginning_offsets([tp])[tp]
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------------
# CreateTopics
# ---------------------------------------------------------------------------------------------------


def test_create_topic_with_configs_returns_them_and_the_topic_id(admin, raw):
    r = admin.create_topics([NewTopic("orders", 3, 1, topic_configs={"retention.ms": "60000",
                                                                     "cleanup.policy": "compact"})])
    result = r["topics"][0]
    assert result["error_code"] == 0 and result["num_partitions"] == 3 and result["replication_factor"] == 1
    configs = result["configs"]
    assert configs["retention.ms"]["value"] == "60000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert list(configs) == sorted(configs)  # Kafka sorts them by name
    described = admin.describe_topics(["orders"])[0]
    assert str(described["topic_id"]) == str(result["topic_id"]) and len(described["partitions"]) == 3
    # v4 has neither the topic id nor the configs; v5-v6 the configs but no id
    v4 = _create(raw, _creatable("v4topic"), version=4)["v4topic"]
    assert v4.error_code == 0
    v5 = _create(raw, _creatable("v5topic", 2), version=5)["v5topic"]
    assert v5.num_partitions == 2 and any(c.name == "retention.ms" for c in v5.configs)


def test_validate_only_creates_nothing(admin):
    r = admin.create_topics([NewTopic("dry", 2, 1, topic_configs={"retention.ms": "1000"})], validate_only=True)
    assert r["topics"][0]["error_code"] == 0 and r["topics"][0]["num_partitions"] == 2
    assert "dry" not in admin.list_topics()


CREATE_ERRORS = [  # (topic, code, message fragment)
    (_creatable("bad/name"), 17, "contains one or more characters other than ASCII alphanumerics"),
    (_creatable("zero", partitions=0), 37, "Number of partitions was set to an invalid non-positive value."),
    (_creatable("neg", partitions=-5), 37, "invalid non-positive value"),
    (_creatable("rf0", rf=0), 38, "Replication factor must be larger than 0, or -1 to use the default value."),
    (_creatable("rf2", rf=2), 38, "Unable to replicate the partition 2 time(s)"),
    (_creatable("unknowncfg", configs={"no.such.config": "1"}), 40, "Unknown topic config name: no.such.config"),
    (_creatable("badvalue", configs={"segment.bytes": "-1"}), 40, "segment.bytes"),
    (_creatable("nullcfg", configs={"retention.ms": None}), 40,
     "Null value not supported for topic configs: retention.ms"),
    (_creatable("__cluster_metadata"), 42, "Creation of internal topic __cluster_metadata is prohibited."),
    (_creatable("manual", partitions=2, rf=-1, assignments=[(0, [1])]), 42,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    (_creatable("manual", partitions=-1, rf=1, assignments=[(0, [1])]), 42,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    (_creatable("manual", -1, -1, assignments=[(0, [7])]), 39,
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    (_creatable("manual", -1, -1, assignments=[(0, [1, 1])]), 39,
     "The manual partition assignment includes the broker 1 more than once."),
    (_creatable("manual", -1, -1, assignments=[(0, [])]), 39,
     "The manual partition assignment includes an empty replica list."),
    (_creatable("manual", -1, -1, assignments=[(0, [1]), (0, [1])]), 39,
     "Found multiple manual partition assignments for partition 0"),
    (_creatable("manual", -1, -1, assignments=[(0, [1]), (2, [1])]), 39,
     "partitions should be a consecutive 0-based integer sequence"),
]


def test_create_topic_errors_carry_kafkas_codes_and_messages(raw):
    for topic, code, fragment in CREATE_ERRORS:  # one broker for every case
        result = _create(raw, topic)[topic["name"]]
        assert (result.error_code, fragment in (result.error_message or "")) == (code, True), \
            (topic, result.error_code, result.error_message)
        assert result.num_partitions == -1 and result.replication_factor == -1 and result.configs == ()
    md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert md.topics == ()


def test_existing_colliding_and_duplicate_names(raw):
    assert _create(raw, _creatable("a.b"))["a.b"].error_code == 0
    res = _create(raw, _creatable("a.b"), _creatable("a_b"), _creatable("twice"), _creatable("twice"))
    assert (res["a.b"].error_code, res["a.b"].error_message) == (36, "Topic 'a.b' already exists.")
    assert res["a_b"].error_code == 17 and "collides with existing topic: a.b" in res["a_b"].error_message
    assert (res["twice"].error_code, res["twice"].error_message) == (42, "Duplicate topic name.")


def test_manual_assignment_and_kafka_python_errors(broker, admin):
    from kafka.errors import InvalidPartitionsError, InvalidReplicationFactorError, TopicAlreadyExistsError
    r = admin.create_topics([NewTopic("placed", replica_assignments={0: [1], 1: [1]})])
    assert r["topics"][0]["error_code"] == 0 and r["topics"][0]["num_partitions"] == 2
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("placed", 1, 1)])
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic("none", 0, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic("many", 1, 3)])


def test_default_partitions_and_replication_factor(start_broker):
    b = start_broker(num_partitions=4)
    raw = RawClient(b.bootstrap)
    try:
        result = _create(raw, _creatable("defaults", -1, -1))["defaults"]
        assert result.error_code == 0 and result.num_partitions == 4 and result.replication_factor == 1
    finally:
        raw.close()


# ---------------------------------------------------------------------------------------------------
# DeleteTopics
# ---------------------------------------------------------------------------------------------------


def test_delete_topics_by_name(admin):
    from kafka.errors import UnknownTopicOrPartitionError
    admin.create_topics([NewTopic("gone", 2, 1)])
    r = admin.delete_topics(["gone"])
    assert r["topics"][0]["error_code"] == 0
    assert "gone" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["gone"])


def test_delete_topics_by_id_v6(raw):
    created = _create(raw, _creatable("byid"), _creatable("both"), _creatable("named"))
    topic_id = created["byid"].topic_id
    unknown_id = uuid.uuid4()
    r = raw.request(ApiKey.DELETE_TOPICS, 6, {"timeout_ms": 10000, "topics": [
        {"name": None, "topic_id": topic_id},
        {"name": None, "topic_id": unknown_id},
        {"name": "both", "topic_id": created["both"].topic_id},
        {"name": None, "topic_id": uuid.UUID(int=0)},
        {"name": "named", "topic_id": uuid.UUID(int=0)},
        {"name": "dup", "topic_id": uuid.UUID(int=0)},
        {"name": "dup", "topic_id": uuid.UUID(int=0)},
    ]})
    by = {(x.name, x.topic_id or uuid.UUID(int=0)): x for x in r.responses}  # kio reads the zero id as None
    assert by[("byid", topic_id)].error_code == 0  # answered with the name the id resolved to
    assert by[(None, unknown_id)].error_code == 100  # UNKNOWN_TOPIC_ID
    both = by[("both", created["both"].topic_id)]
    assert (both.error_code, both.error_message) == (42, "You may not specify both topic name and topic id.")
    assert by[(None, uuid.UUID(int=0))].error_message == "Neither topic name nor id were specified."
    assert by[("named", created["named"].topic_id)].error_code == 0
    assert (by[("dup", uuid.UUID(int=0))].error_code, by[("dup", uuid.UUID(int=0))].error_message) == \
        (42, "Duplicate topic name.")
    md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert sorted(t.name for t in md.topics) == ["both"]


def test_delete_topics_by_name_and_id_of_the_same_topic(raw):
    tid = _create(raw, _creatable("same"))["same"].topic_id
    r = raw.request(ApiKey.DELETE_TOPICS, 6, {"timeout_ms": 10000, "topics": [
        {"name": None, "topic_id": tid}, {"name": "same", "topic_id": uuid.UUID(int=0)}]})
    codes = sorted((x.error_code, x.error_message) for x in r.responses)
    assert codes == [(42, "The provided topic name maps to an ID that was already supplied.")]


def test_delete_topic_disabled(start_broker):
    b = start_broker(delete_topic_enable="false")
    raw = RawClient(b.bootstrap)
    try:
        _create(raw, _creatable("kept"))
        v1 = raw.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": ["kept"], "timeout_ms": 1000})
        assert [x.error_code for x in v1.responses] == [42]  # INVALID_REQUEST before v3
        v4 = raw.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": ["kept"], "timeout_ms": 1000})
        assert [x.error_code for x in v4.responses] == [73]  # TOPIC_DELETION_DISABLED
        md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert [t.name for t in md.topics] == ["kept"]
    finally:
        raw.close()


# ---------------------------------------------------------------------------------------------------
# CreatePartitions
# ---------------------------------------------------------------------------------------------------


def test_create_partitions(admin, raw):
    from kafka.errors import InvalidPartitionsError
    admin.create_topics([NewTopic("grow", 2, 1)])
    r = admin.create_partitions({"grow": NewPartitions(3)}, validate_only=True)
    assert len(admin.describe_topics(["grow"])[0]["partitions"]) == 2
    r = admin.create_partitions({"grow": NewPartitions(5)})
    assert r.results[0].error_code == 0
    assert len(admin.describe_topics(["grow"])[0]["partitions"]) == 5
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"grow": NewPartitions(5)})

    def one(topics):
        res = raw.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": topics, "timeout_ms": 1000,
                                                        "validate_only": False}).results
        return {x.name: (x.error_code, x.error_message) for x in res}

    assert one([{"name": "grow", "count": 5, "assignments": None}])["grow"] == (
        37, "Topic already has 5 partition(s).")
    assert one([{"name": "grow", "count": 2, "assignments": None}])["grow"] == (
        37, "The topic grow currently has 5 partition(s); 2 would not be an increase.")
    assert one([{"name": "nope", "count": 2, "assignments": None}])["nope"][0] == 3
    assert one([{"name": "grow", "count": 7, "assignments": [{"broker_ids": [1]}]}])["grow"] == (
        39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert one([{"name": "grow", "count": 6, "assignments": [{"broker_ids": [1, 1]}]}])["grow"][0] == 39
    assert one([{"name": "grow", "count": 6, "assignments": [{"broker_ids": [1]}]}])["grow"] == (0, None)
    assert one([{"name": "grow", "count": 7, "assignments": None}] * 2)["grow"] == (42, "Duplicate topic name.")
    assert len(admin.describe_topics(["grow"])[0]["partitions"]) == 6


# ---------------------------------------------------------------------------------------------------
# DeleteRecords
# ---------------------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_offset(broker, admin):
    admin.create_topics([NewTopic("trim", 2, 1)])
    _produce(broker.bootstrap, "trim", 10)
    r = admin.delete_records({TopicPartition("trim", 0): 4})
    assert r[TopicPartition("trim", 0)]["low_watermark"] == 4
    assert _earliest(broker.bootstrap, "trim") == 4
    r = admin.delete_records({TopicPartition("trim", 0): -1})  # -1: up to the high watermark
    assert r[TopicPartition("trim", 0)]["low_watermark"] == 10
    assert _earliest(broker.bootstrap, "trim") == 10
    # a smaller offset than the current start leaves it where it is
    r = admin.delete_records({TopicPartition("trim", 0): 2})
    assert r[TopicPartition("trim", 0)]["low_watermark"] == 10


def test_delete_records_errors_per_partition(broker, raw):
    _create(raw, _creatable("dr", 2), _creatable("compacted", configs={"cleanup.policy": "compact"}))
    _produce(broker.bootstrap, "dr", 3)
    r = raw.request(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 1000, "topics": [
        {"name": "dr", "partitions": [{"partition_index": 0, "offset": 2}, {"partition_index": 1, "offset": 5},
                                      {"partition_index": 9, "offset": 0}, {"partition_index": 0, "offset": -7}]},
        {"name": "compacted", "partitions": [{"partition_index": 0, "offset": 0}]},
        {"name": "missing", "partitions": [{"partition_index": 0, "offset": 0}]},
    ]})
    got = [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in r.topics for p in t.partitions]
    assert got == [("dr", 0, 0, 2), ("dr", 1, 1, -1), ("dr", 9, 3, -1), ("dr", 0, 1, -1),
                   ("compacted", 0, 44, -1), ("missing", 0, 3, -1)]
    # Kafka refuses deleting records of internal topics
    _create(raw, _creatable("__consumer_offsets"))
    r = raw.request(ApiKey.DELETE_RECORDS, 0, {"timeout_ms": 1000, "topics": [
        {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 0}]}]})
    assert r.topics[0].partitions[0].error_code == 17


# ---------------------------------------------------------------------------------------------------
# DescribeCluster
# ---------------------------------------------------------------------------------------------------


def test_describe_cluster(broker, admin, raw):
    d = admin.describe_cluster()
    assert d["controller_id"] == 1 and len(d["cluster_id"]) == 22
    assert d["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None,
                             "is_fenced": False}]
    for v in (0, 1, 2):
        r = raw.request(ApiKey.DESCRIBE_CLUSTER, v, {"include_cluster_authorized_operations": False})
        assert r.error_code == 0 and r.cluster_id == d["cluster_id"] and r.brokers[0].port == broker.port
        assert r.cluster_authorized_operations == -2147483648
    r = raw.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True})
    assert r.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    r = raw.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 2})
    assert (r.error_code, r.error_message) == (
        114, "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
    r = raw.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 9})
    assert (r.error_code, r.error_message) == (115, "Unsupported endpoint type 9")


# ---------------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)
# ---------------------------------------------------------------------------------------------------


def test_confluent_admin_client_round_trip(broker):
    ck = pytest.importorskip("confluent_kafka")
    cka = pytest.importorskip("confluent_kafka.admin")

    a = cka.AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = a.create_topics([cka.NewTopic("ck", 2, 1, config={"retention.ms": "120000"}),
                          cka.NewTopic("ck-bad", 1, 1, config={"retention.ms": "soon"})], request_timeout=10)
    assert fs["ck"].result() is None
    with pytest.raises(ck.KafkaException) as e:
        fs["ck-bad"].result()
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    fs = a.create_topics([cka.NewTopic("ck-dry", 1, 1)], validate_only=True, request_timeout=10)
    assert fs["ck-dry"].result() is None
    assert "ck-dry" not in a.list_topics(timeout=10).topics

    cluster = a.describe_cluster(request_timeout=10).result()
    assert cluster.controller.id == 1 and [n.port for n in cluster.nodes] == [broker.port]

    assert a.create_partitions([cka.NewPartitions("ck", 3)], request_timeout=10)["ck"].result() is None
    assert len(a.list_topics("ck", timeout=10).topics["ck"].partitions) == 3

    _produce(broker.bootstrap, "ck", 6, partition=1)
    fs = a.delete_records([ck.TopicPartition("ck", 1, 4)], request_timeout=10)
    assert next(iter(fs.values())).result().low_watermark == 4
    assert _earliest(broker.bootstrap, "ck", 1) == 4

    fs = a.delete_topics(["ck", "never"], request_timeout=10)
    assert fs["ck"].result() is None
    with pytest.raises(ck.KafkaException) as e:
        fs["never"].result()
    assert e.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
