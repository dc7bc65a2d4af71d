"""ACLs in a ZooKeeper-mode cluster: created through one broker, kept under Kafka's znodes with change
notifications, applied by every broker."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from tests.harness.rawclient import raw_client
from tests.harness.tierlog_cluster import create, start_cluster, wait_until
from tierlog.protocol import ApiKey

AUTHZ = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}
TOPIC, LITERAL, PREFIXED, ALLOW, READ = 2, 3, 4, 3, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("acl-zk"), zookeeper, brokers=2, settings=AUTHZ, controller=1)
    yield c
    c.stop()


def _describe(bootstrap: str, name: str):
    with raw_client(bootstrap) as raw:
        resp = raw.request(ApiKey.DESCRIBE_ACLS, 3, {
            "resource_type_filter": TOPIC, "resource_name_filter": name, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert resp.error_code == 0, resp
    return [(r.resource_name, r.pattern_type, a.principal, a.host) for r in resp.resources for a in r.acls]


def _metadata_code(bootstrap: str, name: str) -> int:
    with raw_client(bootstrap) as raw:
        md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    return md.topics[0].error_code


def test_an_acl_created_on_one_broker_applies_on_the_other(cluster, zookeeper):
    create(cluster, "zk-acl", assignment=[[1, 2]])
    follower = 2  # broker 1 is the controller: broker 2 forwards the change to it
    assert _metadata_code(cluster.brokers[1].bootstrap, "zk-acl") == 0
    with raw_client(cluster.brokers[follower].bootstrap) as raw:
        resp = raw.request(ApiKey.CREATE_ACLS, 3, {"creations": [
            {"resource_type": TOPIC, "resource_name": "zk-acl", "resource_pattern_type": LITERAL,
             "principal": "User:ANONYMOUS", "host": "10.9.9.9", "operation": READ, "permission_type": ALLOW},
            {"resource_type": TOPIC, "resource_name": "zk-pre-", "resource_pattern_type": PREFIXED,
             "principal": "User:carol", "host": "*", "operation": READ, "permission_type": ALLOW}]})
    assert [r.error_code for r in resp.results] == [0, 0], resp
    expected = [("zk-acl", LITERAL, "User:ANONYMOUS", "10.9.9.9")]
    for i in (1, 2):
        wait_until(lambda i=i: _describe(cluster.brokers[i].bootstrap, "zk-acl") == expected,
                   what=f"the ACL on broker {i}")
        # The topic has an ACL now and none for 127.0.0.1: DESCRIBE (implied by READ) is refused everywhere.
        wait_until(lambda i=i: _metadata_code(cluster.brokers[i].bootstrap, "zk-acl") == 29,
                   what=f"broker {i} refusing the topic")

    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        data, _ = zk.get("/kafka-acl/Topic/zk-acl")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:ANONYMOUS", "permissionType": "Allow", "operation": "Read", "host": "10.9.9.9"}]}
        data, _ = zk.get("/kafka-acl-extended/prefixed/Topic/zk-pre-")
        assert json.loads(data)["acls"][0]["principal"] == "User:carol"
        literal_changes = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
        assert b"Topic:zk-acl" in literal_changes
        extended = [json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                    for c in zk.get_children("/kafka-acl-extended-changes")]
        assert {"version": 1, "resourceType": "Topic", "name": "zk-pre-", "patternType": "PREFIXED"} in extended
    finally:
        zk.stop()
        zk.close()

    # Removed through the controller this time: gone everywhere, the topic open again.
    with raw_client(cluster.brokers[1].bootstrap) as raw:
        resp = raw.request(ApiKey.DELETE_ACLS, 3, {"filters": [
            {"resource_type_filter": TOPIC, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
    assert len(resp.filter_results[0].matching_acls) == 2
    for i in (1, 2):
        wait_until(lambda i=i: _metadata_code(cluster.brokers[i].bootstrap, "zk-acl") == 0,
                   what=f"broker {i} serving the topic again")


def test_acls_written_straight_to_zookeeper_apply(cluster):
    """As Kafka's ``kafka-acls --authorizer-properties zookeeper.connect=...`` writes them: the resource znode,
    then a change notification; the controller reads them and every broker applies them."""
    create(cluster, "zk-direct", assignment=[[1, 2]])
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        zk.create("/kafka-acl/Topic/zk-direct", json.dumps({"version": 1, "acls": [
            {"principal": "User:dave", "permissionType": "Allow", "operation": "Write", "host": "*"}]}).encode(),
            makepath=True)
        zk.create("/kafka-acl-changes/acl_changes_", b"Topic:zk-direct", sequence=True, makepath=True)
    finally:
        zk.stop()
        zk.close()
    for i in (1, 2):
        wait_until(lambda i=i: _describe(cluster.brokers[i].bootstrap, "zk-direct") == [
            ("zk-direct", LITERAL, "User:dave", "*")], what=f"the ACL on broker {i}")
        wait_until(lambda i=i: _metadata_code(cluster.brokers[i].bootstrap, "zk-direct") == 29,
                   what=f"broker {i} refusing the topic")


def test_kafka_39_acl_command_on_zookeeper_reads_and_writes_the_same_znodes(cluster, kafka_zk_tool):
    """Kafka 3.9's kafka-acls with --authorizer-properties works on ZooKeeper directly: it lists an ACL tierlog
    wrote, and one it adds reaches tierlog's brokers."""
    props = f"zookeeper.connect={cluster.zookeeper_connect}"
    with raw_client(cluster.brokers[2].bootstrap) as raw:
        resp = raw.request(ApiKey.CREATE_ACLS, 3, {"creations": [
            {"resource_type": TOPIC, "resource_name": "zk-tool-", "resource_pattern_type": PREFIXED,
             "principal": "User:frank", "host": "10.0.0.7", "operation": READ, "permission_type": ALLOW}]})
    assert resp.results[0].error_code == 0, resp
    out = kafka_zk_tool("AclCommand", "--authorizer-properties", props, "--list", "--topic", "zk-tool-",
                        "--resource-pattern-type", "prefixed").stdout
    assert "(principal=User:frank, host=10.0.0.7, operation=READ, permissionType=ALLOW)" in out, out

    create(cluster, "zk-kafka-tool", assignment=[[1, 2]])
    kafka_zk_tool("AclCommand", "--authorizer-properties", props, "--add", "--allow-principal", "User:erin",
                  "--operation", "Write", "--topic", "zk-kafka-tool")
    for i in (1, 2):
        wait_until(lambda i=i: _describe(cluster.brokers[i].bootstrap, "zk-kafka-tool") == [
            ("zk-kafka-tool", LITERAL, "User:erin", "*")], what=f"Kafka's ACL on broker {i}")
        wait_until(lambda i=i: _metadata_code(cluster.brokers[i].bootstrap, "zk-kafka-tool") == 29,
                   what=f"broker {i} refusing the topic")


def _client_from(bootstrap: str, source: str):
    from tests.security.acllib import client_from
    return client_from(bootstrap, source)


def _create_topic_code(raw, name: str) -> int:
    resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 1,
                                                              "replication_factor": 1, "assignments": [],
                                                              "configs": []}],
                                                 "timeout_ms": 10000, "validate_only": True})
    return resp.topics[0].error_code


def test_forwarded_requests_are_authorized_as_their_client_and_envelopes_need_cluster_action(cluster):
    from tests.security.acllib import binding, grant, revoke
    admin = _client_from(cluster.brokers[1].bootstrap, "127.0.0.1")
    cluster_all = binding(4, "kafka-cluster", 2, "127.0.0.1")  # ALL on the cluster for the brokers and admin
    nobody = {**binding(TOPIC, "zk-fw-", READ, "*"), "resource_pattern_type": PREFIXED, "principal": "User:nobody"}
    grant(admin, cluster_all, nobody)
    try:
        for i in (1, 2):
            wait_until(lambda i=i: len(_describe(cluster.brokers[i].bootstrap, "zk-fw-")) == 1, what=f"broker {i}")
        # CreateTopics through broker 2 is forwarded to the controller (broker 1) in an Envelope carrying the
        # client's principal and address: 127.0.0.1 may create (CREATE on the cluster), 127.0.0.2 may not.
        here, there = (_client_from(cluster.brokers[2].bootstrap, h) for h in ("127.0.0.1", "127.0.0.2"))
        try:
            assert _create_topic_code(here, "zk-fw-a") == 0
            assert _create_topic_code(there, "zk-fw-a") == 29
        finally:
            here.close()
            there.close()
        # an Envelope sent by a client without CLUSTER_ACTION is refused
        outsider = _client_from(cluster.brokers[1].bootstrap, "127.0.0.2")
        try:
            resp = outsider.request(ApiKey.ENVELOPE, 0, {"request_data": b"\x00", "request_principal": b"",
                                                         "client_host_address": b"\x7f\x00\x00\x01"})
            assert resp.error_code == 31
        finally:
            outsider.close()
    finally:
        revoke(admin, cluster_all, nobody)
        admin.close()
