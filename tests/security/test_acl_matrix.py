"""An ACL matrix on tierlog and on Apache Kafka 4.1, compared answer by answer.

Both peers run an authorizer with ``allow.everyone.if.no.acl.found=true`` (Kafka's KRaft controller needs
no ACL to start then). Without SASL every connection is ``User:ANONYMOUS``, so the ACLs tell clients apart
by host: the admin connects from 127.0.0.1, which gets ALL on the cluster and on every topic, group and
transactional id, and the client under test from 127.0.0.2 (loopback, bound as the source address), which
so has ACLs on every resource and none of them its own. Each request is sent from 127.0.0.2 without its
ACL (refused with Kafka's authorization error), then with it (served), and the two answers are compared
between the peers.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import create_topic
from tests.harness.waiting import TimedOut, wait_until
from tests.security.acllib import binding, client_from, grant, revoke
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5  # resource types
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
ADMIN_HOST, CLIENT_HOST = "127.0.0.1", "127.0.0.2"
# REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (Kafka loads the
# coordinator partitions in the background), CONCURRENT_TRANSACTIONS: clients retry them
RETRIABLE = {7, 14, 15, 16, 51}


class Peer:
    def __init__(self, name: str, bootstrap: str):
        self.name = name
        self.bootstrap = bootstrap
        self.admin = client_from(bootstrap, ADMIN_HOST)
        md = self.admin.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
        self.node_id = md.brokers[0].node_id
        self.topic = "acl-mx"
        grant(self.admin, *(binding(rt, name, ALL, ADMIN_HOST) for rt, name in (
            (CLUSTER, "kafka-cluster"), (TOPIC, "*"), (GROUP, "*"), (TXN, "*"))))
        create_topic(bootstrap, self.topic)
        self.topic_id = self.admin.request(ApiKey.METADATA, 12, {"topics": [{"name": self.topic}],
                                                                "allow_auto_topic_creation": False}).topics[0].topic_id
        for name in ("acl-del", "acl-cp"):
            create_topic(bootstrap, name)
        # The coordinators' topics are made for the admin: Kafka 4 creates __consumer_offsets and
        # __transaction_state with the asking client's principal, which the client under test lacks.
        for key_type, key in ((0, "acl-setup"), (1, "acl-setup")):
            assert _retrying(lambda key_type=key_type, key=key: self.admin.request(
                ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]}
            ).coordinators[0].error_code) == 0

    def close(self) -> None:
        self.admin.close()


@pytest.fixture(scope="module")
def kafka_acl_peer(kafka_jars, tmp_path_factory):
    kafka = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-acl"), "kafka-acl", settings=AUTHZ)
    peer = Peer("kafka", kafka.bootstrap)
    yield peer
    peer.close()
    kafka.stop()


@pytest.fixture(scope="module")
def tierlog_acl_peer(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog-acl") / "logs", {**apache_kafka.SHARED_SETTINGS, **AUTHZ})
    b.start()
    peer = Peer("tierlog", b.bootstrap)
    yield peer
    peer.close()
    b.stop()


# ------------------------------------------------------------------------------ the requests, as codes

def _retrying(fn):
    """Coordinator answers may be retriable while __consumer_offsets / __transaction_state come up."""
    codes = []

    def answered():
        codes.append(fn())
        return codes[-1] not in RETRIABLE

    with contextlib.suppress(TimedOut):  # the last answer is the caller's
        wait_until(answered, 60, interval=0.2, what="an answer other than a retriable error")
    return codes[-1]


def metadata(c, p):
    return c.request(ApiKey.METADATA, 12, {"topics": [{"name": p.topic}], "allow_auto_topic_creation": False}
                     ).topics[0].error_code


def produce(c, p):
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    resp = c.request(ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": p.topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


def fetch(c, p):
    resp = c.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                            {"topic": p.topic, "partitions": [
                                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                 "current_leader_epoch": -1, "log_start_offset": -1,
                                                 "last_fetched_epoch": -1}]}],
                                        "forgotten_topics_data": [], "rack_id": ""})
    return resp.error_code or resp.responses[0].partitions[0].error_code


def list_offsets(c, p):
    resp = c.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": p.topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return resp.topics[0].partitions[0].error_code


def create_topics(c, p):
    resp = c.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": f"acl-new-{p.step}", "num_partitions": 1,
                                                            "replication_factor": 1, "assignments": [],
                                                            "configs": []}],
                                               "timeout_ms": 10000, "validate_only": True})
    return resp.topics[0].error_code


def delete_topics(c, p):
    resp = c.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "acl-del", "topic_id": None}],
                                               "timeout_ms": 10000})
    return resp.responses[0].error_code


def create_partitions(c, p):
    resp = c.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": "acl-cp", "count": 2, "assignments": None}],
                                                   "timeout_ms": 10000, "validate_only": True})
    return resp.results[0].error_code


def describe_topic_configs(c, p):
    resp = c.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 2, "resource_name": p.topic,
                                                                 "configuration_keys": None}],
                                                  "include_synonyms": False, "include_documentation": False})
    return resp.results[0].error_code


def describe_broker_configs(c, p):
    resp = c.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 4,
                                                                 "resource_name": str(p.node_id),
                                                                 "configuration_keys": ["log.retention.ms"]}],
                                                  "include_synonyms": False, "include_documentation": False})
    return resp.results[0].error_code


def alter_topic_configs(c, p):
    resp = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": p.topic, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}], "validate_only": True})
    return resp.responses[0].error_code


def offset_commit(c, p):
    resp = c.request(ApiKey.OFFSET_COMMIT, 8, {"group_id": "acl-g1", "generation_id_or_member_epoch": -1,
                                               "member_id": "", "group_instance_id": None, "topics": [
                                                   {"name": p.topic, "partitions": [
                                                       {"partition_index": 0, "committed_offset": 0,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return resp.topics[0].partitions[0].error_code


def offset_fetch(c, p):
    resp = c.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "acl-g1", "topics": [
        {"name": p.topic, "partition_indexes": [0]}], "require_stable": False})
    return resp.error_code or resp.topics[0].partitions[0].error_code


def find_coordinator(c, p):
    resp = c.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["acl-g2"]})
    return resp.coordinators[0].error_code


def heartbeat(c, p):
    return c.request(ApiKey.HEARTBEAT, 4, {"group_id": "acl-g3", "generation_id": 1, "member_id": "m",
                                           "group_instance_id": None}).error_code


def delete_groups(c, p):
    return c.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["acl-g4"]}).results[0].error_code


def init_producer_id_txn(c, p):
    return c.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "acl-tx", "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1}).error_code


def init_producer_id_idempotent(c, p):
    return c.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1}).error_code


def describe_acls(c, p):
    return c.request(ApiKey.DESCRIBE_ACLS, 3, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}).error_code


def create_acls(c, p):
    return c.request(ApiKey.CREATE_ACLS, 3, {"creations": [binding(TOPIC, "acl-x", READ, "10.9.9.9")]}
                     ).results[0].error_code


def metadata_all_topics(c, p):
    """0 when an all-topics Metadata lists the topic, -1 when it hides it."""
    md = c.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    return 0 if p.topic in {t.name for t in md.topics} else -1


def metadata_auto_create(c, p):
    md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": "acl-auto"}], "allow_auto_topic_creation": True})
    code = md.topics[0].error_code
    return 0 if code == 5 else code  # Kafka creates in the background (LEADER_NOT_AVAILABLE), tierlog at once


def describe_groups(c, p):
    return c.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["acl-g5"], "include_authorized_operations": False}
                     ).groups[0].error_code


def delete_records(c, p):
    resp = c.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": p.topic, "partitions": [
        {"partition_index": 0, "offset": 0}]}], "timeout": 10000})
    return resp.topics[0].partitions[0].error_code


def describe_producers(c, p):
    resp = c.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": p.topic, "partition_indexes": [0]}]})
    return resp.topics[0].partitions[0].error_code


def end_txn(c, p):
    return c.request(ApiKey.END_TXN, 3, {"transactional_id": "acl-tx2", "producer_id": 4242, "producer_epoch": 0,
                                         "committed": False}).error_code


def add_offsets_to_txn(c, p):
    return c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "acl-tx3", "producer_id": 4242,
                                                    "producer_epoch": 0, "group_id": "acl-g6"}).error_code


def txn_offset_commit(c, p):
    resp = c.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": "acl-tx4", "group_id": "acl-g7", "producer_id": 4242, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
            {"name": p.topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return resp.topics[0].partitions[0].error_code


def offset_delete(c, p):
    resp = c.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "acl-g8", "topics": [
        {"name": p.topic, "partitions": [{"partition_index": 0}]}]})
    return resp.error_code or (resp.topics[0].partitions[0].error_code if resp.topics else -1)


def describe_log_dirs(c, p):
    return c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}).error_code


def describe_client_quotas(c, p):
    resp = c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    return resp.error_code


def alter_client_quotas(c, p):
    resp = c.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [
        {"entity": [{"entity_type": "client-id", "entity_name": "acl-quota"}],
         "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}], "validate_only": True})
    return resp.entries[0].error_code


def describe_user_scram(c, p):
    resp = c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "acl-scram"}]})
    return resp.error_code or resp.results[0].error_code


def alter_user_scram(c, p):
    resp = c.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {"name": "acl-scram", "mechanism": 1, "iterations": 8192, "salt": b"0123456789abcdef",
         "salted_password": bytes(32)}]})
    return resp.results[0].error_code


def update_features(c, p):
    """kafka-features upgrade --dry-run: validate only, to the level the feature has (ALTER on the cluster)."""
    resp = c.request(ApiKey.UPDATE_FEATURES, 1, {"timeout_ms": 10000, "validate_only": True, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})
    return resp.error_code


def describe_cluster_operations(c, p):
    """The cluster's authorized-operations bit field (or the request's error)."""
    resp = c.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True,
                                                  "endpoint_type": 1})
    return resp.error_code or resp.cluster_authorized_operations


def metadata_topic_operations(c, p):
    md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": p.topic}], "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": True})
    t = md.topics[0]
    return t.error_code or t.topic_authorized_operations


def describe_groups_operations(c, p):
    g = c.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["acl-g9"], "include_authorized_operations": True}
                  ).groups[0]
    return g.error_code or g.authorized_operations


def offsets_for_leader_epoch(c, p):
    resp = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": p.topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    return resp.topics[0].partitions[0].error_code


def follower_offsets_for_leader_epoch(c, p):
    resp = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": 7, "topics": [
        {"topic": p.topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    return resp.topics[0].partitions[0].error_code


def follower_fetch(c, p):
    resp = c.request(ApiKey.FETCH, 12, {"replica_id": 7, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                            {"topic": p.topic, "partitions": [
                                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                 "current_leader_epoch": -1, "log_start_offset": -1,
                                                 "last_fetched_epoch": -1}]}],
                                        "forgotten_topics_data": [], "rack_id": ""})
    return resp.error_code or resp.responses[0].partitions[0].error_code


# The versions naming topics by id (Produce v13, Fetch v13+, OffsetCommit/OffsetFetch v10): authorized by the
# topic's name; an unknown id is answered UNKNOWN_TOPIC_ID before the topic is authorized.

def produce_by_id(c, p):
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    resp = c.request(ApiKey.PRODUCE, 13, {"acks": 1, "timeout": 5000, "topic_data": [
        {"topic_id": p.topic_id, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


def fetch_v18(c, p):
    resp = c.request(ApiKey.FETCH, 18, {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0,
                                        "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                        "session_epoch": -1, "topics": [{"topic_id": p.topic_id, "partitions": [
                                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                             "current_leader_epoch": -1, "log_start_offset": -1,
                                             "last_fetched_epoch": -1, "high_watermark": 0}]}],
                                        "forgotten_topics_data": [], "rack_id": ""})
    return resp.error_code or resp.responses[0].partitions[0].error_code


def _commit_by_id(c, group, topic_id):
    resp = c.request(ApiKey.OFFSET_COMMIT, 10, {"group_id": group, "generation_id_or_member_epoch": -1,
                                                "member_id": "", "group_instance_id": None, "topics": [
                                                    {"topic_id": topic_id, "partitions": [
                                                        {"partition_index": 0, "committed_offset": 0,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return resp.topics[0].partitions[0].error_code


def offset_commit_by_id(c, p):
    return _commit_by_id(c, "acl-g10", p.topic_id)


def offset_commit_unknown_id(c, p):
    return _commit_by_id(c, "acl-g11", uuid.UUID(int=7))


def offset_fetch_by_id(c, p):
    resp = c.request(ApiKey.OFFSET_FETCH, 10, {"groups": [{"group_id": "acl-g10", "member_id": None,
                                                           "member_epoch": -1, "topics": [
                                                               {"topic_id": p.topic_id, "partition_indexes": [0]}]}],
                                               "require_stable": False})
    g = resp.groups[0]
    return g.error_code or g.topics[0].partitions[0].error_code


def describe_groups_v6(c, p):
    """A group that does not exist: GROUP_ID_NOT_FOUND from v6 (KIP-1043), once DESCRIBE is allowed."""
    return c.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["acl-g12"], "include_authorized_operations": False}
                     ).groups[0].error_code


#: (name, request, the ACLs it needs as (resource type, name, operation) in the order they are granted)
MATRIX = [
    ("Metadata", metadata, [(TOPIC, "acl-mx", DESCRIBE)]),
    ("Produce", produce, [(TOPIC, "acl-mx", WRITE)]),
    ("Fetch", fetch, [(TOPIC, "acl-mx", READ)]),
    ("ListOffsets", list_offsets, [(TOPIC, "acl-mx", DESCRIBE)]),
    ("CreateTopics", create_topics, [(CLUSTER, "kafka-cluster", CREATE)]),
    ("DeleteTopics", delete_topics, [(TOPIC, "acl-del", DELETE)]),
    ("CreatePartitions", create_partitions, [(TOPIC, "acl-cp", ALTER)]),
    ("DescribeConfigs topic", describe_topic_configs, [(TOPIC, "acl-mx", DESCRIBE_CONFIGS)]),
    ("DescribeConfigs broker", describe_broker_configs, [(CLUSTER, "kafka-cluster", DESCRIBE_CONFIGS)]),
    ("IncrementalAlterConfigs", alter_topic_configs, [(TOPIC, "acl-mx", 11)]),
    ("OffsetCommit", offset_commit, [(GROUP, "acl-g1", READ), (TOPIC, "acl-mx", READ)]),
    ("OffsetFetch", offset_fetch, [(GROUP, "acl-g1", DESCRIBE), (TOPIC, "acl-mx", DESCRIBE)]),
    ("FindCoordinator", find_coordinator, [(GROUP, "acl-g2", DESCRIBE)]),
    ("Heartbeat", heartbeat, [(GROUP, "acl-g3", READ)]),
    ("DeleteGroups", delete_groups, [(GROUP, "acl-g4", DELETE)]),
    ("InitProducerId transactional", init_producer_id_txn, [(TXN, "acl-tx", WRITE)]),
    ("InitProducerId idempotent", init_producer_id_idempotent, [(CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE)]),
    ("DescribeAcls", describe_acls, [(CLUSTER, "kafka-cluster", DESCRIBE)]),
    ("CreateAcls", create_acls, [(CLUSTER, "kafka-cluster", ALTER)]),
    ("Metadata all topics", metadata_all_topics, [(TOPIC, "acl-mx", READ)]),
    ("Metadata auto-creation", metadata_auto_create, [(TOPIC, "acl-auto", DESCRIBE), (TOPIC, "acl-auto", CREATE)]),
    ("DescribeGroups", describe_groups, [(GROUP, "acl-g5", DESCRIBE)]),
    ("DeleteRecords", delete_records, [(TOPIC, "acl-mx", DELETE)]),
    ("DescribeProducers", describe_producers, [(TOPIC, "acl-mx", READ)]),
    ("EndTxn", end_txn, [(TXN, "acl-tx2", WRITE)]),
    ("AddOffsetsToTxn", add_offsets_to_txn, [(TXN, "acl-tx3", WRITE), (GROUP, "acl-g6", READ)]),
    ("TxnOffsetCommit", txn_offset_commit, [(TXN, "acl-tx4", WRITE), (GROUP, "acl-g7", READ),
                                            (TOPIC, "acl-mx", READ)]),
    ("OffsetDelete", offset_delete, [(GROUP, "acl-g8", DELETE), (TOPIC, "acl-mx", READ)]),
    ("DescribeLogDirs", describe_log_dirs, [(CLUSTER, "kafka-cluster", DESCRIBE)]),
    ("DescribeClientQuotas", describe_client_quotas, [(CLUSTER, "kafka-cluster", DESCRIBE_CONFIGS)]),
    ("AlterClientQuotas", alter_client_quotas, [(CLUSTER, "kafka-cluster", ALTER_CONFIGS)]),
    ("DescribeUserScramCredentials", describe_user_scram, [(CLUSTER, "kafka-cluster", DESCRIBE)]),
    ("AlterUserScramCredentials", alter_user_scram, [(CLUSTER, "kafka-cluster", ALTER)]),
    ("UpdateFeatures", update_features, [(CLUSTER, "kafka-cluster", ALTER)]),
    ("OffsetForLeaderEpoch", offsets_for_leader_epoch, [(TOPIC, "acl-mx", DESCRIBE)]),
    # allowed, a fetch from a broker that hosts no replica of the partition is answered NOT_LEADER_OR_FOLLOWER
    ("Fetch follower", follower_fetch, [(CLUSTER, "kafka-cluster", 9)]),
    ("Produce v13", produce_by_id, [(TOPIC, "acl-mx", WRITE)]),
    ("Fetch v18", fetch_v18, [(TOPIC, "acl-mx", READ)]),
    ("OffsetCommit v10", offset_commit_by_id, [(GROUP, "acl-g10", READ), (TOPIC, "acl-mx", READ)]),
    ("OffsetCommit v10 unknown topic id", offset_commit_unknown_id, [(GROUP, "acl-g11", READ)]),
    ("OffsetFetch v10", offset_fetch_by_id, [(GROUP, "acl-g10", DESCRIBE), (TOPIC, "acl-mx", DESCRIBE)]),
    ("DescribeGroups v6", describe_groups_v6, [(GROUP, "acl-g12", DESCRIBE)]),
    ("OffsetForLeaderEpoch follower", follower_offsets_for_leader_epoch, [(CLUSTER, "kafka-cluster", 9)]),
    ("DescribeCluster operations", describe_cluster_operations, [(CLUSTER, "kafka-cluster", DESCRIBE),
                                                                 (CLUSTER, "kafka-cluster", ALTER_CONFIGS)]),
    ("Metadata topic operations", metadata_topic_operations, [(TOPIC, "acl-mx", READ), (TOPIC, "acl-mx", ALTER)]),
    ("DescribeGroups operations", describe_groups_operations, [(GROUP, "acl-g9", READ), (GROUP, "acl-g9", DELETE)]),
]


def run_matrix(p: Peer) -> dict[str, list[int]]:
    """For each request: its code without the ACLs, then after each ACL is granted (revoked afterwards)."""
    out = {}
    client = client_from(p.bootstrap, CLIENT_HOST)
    try:
        for step, (name, request, needs) in enumerate(MATRIX):
            p.step = step
            codes = [_retrying(lambda request=request: request(client, p))]
            granted = []
            for rt, resource, op in needs:
                b = binding(rt, resource, op, CLIENT_HOST)
                grant(p.admin, b)
                granted.append(b)
                codes.append(_retrying(lambda request=request: request(client, p)))
            revoke(p.admin, *granted)
            out[name] = codes
    finally:
        client.close()
    return out


EXPECTED = {  # what Kafka answers, by request: refused, then after each ACL
    "Metadata": [29, 0], "Produce": [29, 0], "Fetch": [29, 0], "ListOffsets": [29, 0], "CreateTopics": [29, 0],
    "DeleteTopics": [29, 0], "CreatePartitions": [29, 0], "DescribeConfigs topic": [29, 0],
    "DescribeConfigs broker": [31, 0], "IncrementalAlterConfigs": [29, 0], "OffsetCommit": [30, 29, 0],
    "OffsetFetch": [30, 29, 0], "FindCoordinator": [30, 0], "Heartbeat": [30, 25], "DeleteGroups": [30, 69],
    "InitProducerId transactional": [53, 0], "InitProducerId idempotent": [31, 0], "DescribeAcls": [31, 0],
    "CreateAcls": [31, 0], "Metadata all topics": [-1, 0], "Metadata auto-creation": [29, 29, 0],
    "DescribeGroups": [30, 0], "DeleteRecords": [29, 0], "OffsetDelete": [30, 69, 69], "UpdateFeatures": [31, 0],
    "Fetch follower": [29, 6], "Produce v13": [29, 0], "Fetch v18": [29, 0], "OffsetCommit v10": [30, 29, 0],
    "OffsetCommit v10 unknown topic id": [30, 100], "OffsetFetch v10": [30, 29, 0], "DescribeGroups v6": [30, 69],
    # authorized-operations bit fields (bit = operation code): DESCRIBE, then ALTER_CONFIGS + DESCRIBE_CONFIGS
    "DescribeCluster operations": [0, 1 << 8, 1 << 8 | 1 << 10 | 1 << 11],
    "Metadata topic operations": [29, 1 << 3 | 1 << 8, 1 << 3 | 1 << 7 | 1 << 8],
    "DescribeGroups operations": [30, 1 << 3 | 1 << 8, 1 << 3 | 1 << 6 | 1 << 8],
}


@pytest.fixture(scope="module")
def tierlog_matrix(tierlog_acl_peer):
    return run_matrix(tierlog_acl_peer)


@pytest.fixture(scope="module")
def kafka_matrix(kafka_acl_peer):
    return run_matrix(kafka_acl_peer)


def test_tierlog_refuses_without_acls_and_serves_with_them(tierlog_matrix):
    assert {k: tierlog_matrix[k] for k in EXPECTED} == EXPECTED


#: Answers known to differ, with why. Kafka 4.1 answers a Metadata that may auto-create a topic, from a client
#: with DESCRIBE and CREATE on that topic only, UNKNOWN_TOPIC_OR_PARTITION (the creation its broker forwards to
#: the controller fails); tierlog creates it, as Kafka's Metadata handler's checks allow. Not understood yet.
KNOWN_DIFFERENCES = {"Metadata auto-creation"}


def test_tierlog_answers_as_kafka(tierlog_matrix, kafka_matrix):
    mismatches = {k: (mine, kafka_matrix[k]) for k, mine in tierlog_matrix.items()
                  if mine != kafka_matrix[k] and k not in KNOWN_DIFFERENCES}
    assert not mismatches, f"tierlog vs Kafka 4.1: {mismatches}"
