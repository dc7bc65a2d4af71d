"""The ACL APIs on a single tierlog node through real clients: Kafka's ``kafka-acls`` (AclCommand of 4.1) and
confluent-kafka's admin client; ACLs kept across a restart; SECURITY_DISABLED without an authorizer; a
refused admin request through confluent-kafka."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import raw_client
from tests.harness.tiered import wait_for
from tierlog.protocol import ApiKey

AUTHZ = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("acl-admin") / "logs", AUTHZ)
    b.start()
    yield b
    b.stop()


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 30000})


def _acls(admin: AdminClient, flt: AclBindingFilter = EVERYTHING) -> set[tuple]:
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in admin.describe_acls(flt).result(timeout=30)}


def test_confluent_kafka_creates_describes_and_deletes_acls(acl_broker):
    admin = _admin(acl_broker.bootstrap)
    alice = AclBinding(ResourceType.TOPIC, "ck-orders", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    bob = AclBinding(ResourceType.GROUP, "ck-", ResourcePatternType.PREFIXED, "User:bob", "10.1.2.3",
                     AclOperation.DESCRIBE, AclPermissionType.DENY)
    for f in admin.create_acls([alice, bob]).values():
        assert f.result(timeout=30) is None
    assert {("ck-orders", AclOperation.READ), ("ck-", AclOperation.DESCRIBE)} <= {
        (r[1], r[5]) for r in _acls(admin)}
    # MATCH finds the prefixed pattern that applies to a name
    match = AclBindingFilter(ResourceType.GROUP, "ck-group", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert _acls(admin, match) == {(ResourceType.GROUP, "ck-", ResourcePatternType.PREFIXED, "User:bob", "10.1.2.3",
                                    AclOperation.DESCRIBE, AclPermissionType.DENY)}
    # an invalid binding is refused with Kafka's message
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException, match="The only valid name for the CLUSTER resource is kafka-cluster"):
        next(iter(admin.create_acls([bad]).values())).result(timeout=30)
    only_alice = AclBindingFilter(ResourceType.TOPIC, "ck-orders", ResourcePatternType.LITERAL, "User:alice", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    deleted = next(iter(admin.delete_acls([only_alice]).values())).result(timeout=30)
    assert [(d.name, d.principal) for d in deleted] == [("ck-orders", "User:alice")]
    assert "ck-orders" not in {r[1] for r in _acls(admin)}
    next(iter(admin.delete_acls([EVERYTHING]).values())).result(timeout=30)
    assert _acls(admin) == set()


def test_kafka_acls_command_adds_lists_and_removes(acl_broker, kafka_tool):
    b = acl_broker.bootstrap
    kafka_tool("AclCommand", "--bootstrap-server", b, "--add", "--allow-principal", "User:carol",
               "--operation", "Read", "--operation", "Write", "--topic", "cli-payments")
    kafka_tool("AclCommand", "--bootstrap-server", b, "--add", "--deny-principal", "User:mallory",
               "--deny-host", "10.0.0.66", "--operation", "All", "--topic", "cli-", "--resource-pattern-type",
               "prefixed")
    out = kafka_tool("AclCommand", "--bootstrap-server", b, "--list", "--topic", "cli-payments").stdout
    assert "resourceType=TOPIC, name=cli-payments, patternType=LITERAL" in out
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in out
    assert "(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)" in out
    out = kafka_tool("AclCommand", "--bootstrap-server", b, "--list", "--resource-pattern-type", "match",
                     "--topic", "cli-payments").stdout
    assert "(principal=User:mallory, host=10.0.0.66, operation=ALL, permissionType=DENY)" in out
    kafka_tool("AclCommand", "--bootstrap-server", b, "--remove", "--force", "--allow-principal", "User:carol",
               "--operation", "Write", "--topic", "cli-payments")
    out = kafka_tool("AclCommand", "--bootstrap-server", b, "--list", "--topic", "cli-payments").stdout
    assert "operation=READ" in out and "operation=WRITE" not in out
    kafka_tool("AclCommand", "--bootstrap-server", b, "--remove", "--force", "--topic", "cli-payments")
    kafka_tool("AclCommand", "--bootstrap-server", b, "--remove", "--force", "--topic", "cli-",
               "--resource-pattern-type", "prefixed")
    out = kafka_tool("AclCommand", "--bootstrap-server", b, "--list").stdout
    assert "cli-payments" not in out and "cli-" not in out


def test_acls_survive_a_restart_and_refuse_an_admin_request(tmp_path):
    b = BrokerProcess(tmp_path / "logs", AUTHZ)
    b.start()
    try:
        admin = _admin(b.bootstrap)
        # Only 10.9.9.9 may create topics once the cluster and every topic have an ACL: this client (127.0.0.1)
        # not (without ACLs, allow.everyone.if.no.acl.found would let it).
        only_there = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                "User:ANONYMOUS", "10.9.9.9", AclOperation.CREATE, AclPermissionType.ALLOW)
        topics_there = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL,
                                  "User:ANONYMOUS", "10.9.9.9", AclOperation.CREATE, AclPermissionType.ALLOW)
        describe_here = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                   "User:ANONYMOUS", "127.0.0.1", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for f in admin.create_acls([only_there, topics_there, describe_here]).values():
            f.result(timeout=30)
        b.stop()
        b.start()
        admin = _admin(b.bootstrap)
        assert (ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "10.9.9.9",
                AclOperation.CREATE, AclPermissionType.ALLOW) in _acls(admin)
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic("refused-topic", 1, 1)])["refused-topic"].result(timeout=30)
        assert e.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
        # the ACL APIs themselves need ALTER on the cluster, which now has ACLs: refused too
        with pytest.raises(KafkaException) as e:
            next(iter(admin.delete_acls([EVERYTHING]).values())).result(timeout=30)
        assert e.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
    finally:
        b.stop()


def test_no_authorizer_answers_security_disabled(tmp_path):
    b = BrokerProcess(tmp_path / "logs", {})
    b.start()
    try:
        admin = _admin(b.bootstrap)
        with raw_client(b.bootstrap) as raw:  # librdkafka's describe_acls drops the top-level error: read it raw
            resp = raw.request(ApiKey.DESCRIBE_ACLS, 3, {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert (resp.error_code, resp.error_message) == (54, "No Authorizer is configured on the broker")
        binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                             AclPermissionType.ALLOW)
        with pytest.raises(KafkaException) as e:
            next(iter(admin.create_acls([binding]).values())).result(timeout=30)
        assert e.value.args[0].name() == "SECURITY_DISABLED"
        assert "No Authorizer is configured." in e.value.args[0].str()
    finally:
        b.stop()


def test_confluent_kafka_clients_are_refused_by_a_deny(acl_broker):
    """Real clients against DENY ACLs: a producer gets TOPIC_AUTHORIZATION_FAILED for the denied topic only,
    a consumer GROUP_AUTHORIZATION_FAILED for the denied group (every other resource has no ACL and stays
    open: allow.everyone.if.no.acl.found)."""
    from confluent_kafka import Consumer, Producer
    admin = _admin(acl_broker.bootstrap)
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("deny-w", "open-w")]).values():
        f.result(timeout=30)
    deny_write = AclBinding(ResourceType.TOPIC, "deny-w", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                            AclOperation.WRITE, AclPermissionType.DENY)
    deny_group = AclBinding(ResourceType.GROUP, "deny-g", ResourcePatternType.LITERAL, "User:*", "127.0.0.1",
                            AclOperation.READ, AclPermissionType.DENY)
    for f in admin.create_acls([deny_write, deny_group]).values():
        f.result(timeout=30)
    try:
        results = {}
        producer = Producer({"bootstrap.servers": acl_broker.bootstrap, "message.timeout.ms": 20000})
        for topic in ("deny-w", "open-w"):
            producer.produce(topic, b"v", on_delivery=lambda err, msg: results.__setitem__(msg.topic(), err))
        assert producer.flush(60) == 0
        assert results["open-w"] is None
        assert results["deny-w"].name() == "TOPIC_AUTHORIZATION_FAILED"

        consumer = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": "deny-g",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["open-w"])
            deadline = 60
            error = None
            while deadline > 0 and error is None:
                msg = consumer.poll(1)
                deadline -= 1
                if msg is not None and msg.error() is not None:
                    error = msg.error()
            assert error is not None and error.name() == "GROUP_AUTHORIZATION_FAILED"
        finally:
            consumer.close()
    finally:
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.DENY)
        next(iter(admin.delete_acls([flt]).values())).result(timeout=30)


def _free_ipv6_loopback_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


class _KafkaWithIpv6Listener(apache_kafka.kafka_peer_module.KafkaServer):
    """Kafka 4.1 with a second PLAINTEXT listener, V6, on [::1]."""

    def __init__(self, work_dir, v6_port: int, overrides: dict):
        super().__init__(work_dir, overrides=overrides)
        self.v6_port = v6_port

    def properties(self) -> dict[str, str]:
        props = super().properties()
        props["listeners"] += f",V6://[::1]:{self.v6_port}"
        props["advertised.listeners"] += f",V6://[::1]:{self.v6_port}"
        props["listener.security.protocol.map"] += ",V6:PLAINTEXT"
        return props


@pytest.fixture
def ipv6_acl_peer(request, tmp_path):
    """A broker of each system with an authorizer and a second listener on [::1]: (bootstrap, v6 port)."""
    v6 = _free_ipv6_loopback_port()
    if request.param == "tierlog":
        b = BrokerProcess(tmp_path / "logs", {
            **AUTHZ, "listeners": f"PLAINTEXT://127.0.0.1:0,V6://[::1]:{v6}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,V6:PLAINTEXT"}).start()
    else:
        request.getfixturevalue("kafka_jars")
        b = _KafkaWithIpv6Listener(tmp_path / "kafka", v6, {
            **apache_kafka.SHARED_SETTINGS, "allow.everyone.if.no.acl.found": "true",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}).start()
    yield b.bootstrap, v6
    b.stop()


@pytest.mark.parametrize("ipv6_acl_peer", ["tierlog", "kafka"], indirect=True)
def test_an_ipv6_client_is_matched_by_its_address_as_java_writes_it(ipv6_acl_peer):
    """Kafka compares an ACL's host with ``InetAddress.getHostAddress()`` of the client, which writes IPv6
    uncompressed: an ACL for ``0:0:0:0:0:0:0:1`` admits a client on ::1, one written ``::1`` does not. Run
    against Kafka 4.1 too, which answers the same."""
    bootstrap, v6 = ipv6_acl_peer
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("v6-acl", 1, 1)])["v6-acl"].result(timeout=30)

    def grant(host: str) -> None:
        acl = AclBinding(ResourceType.TOPIC, "v6-acl", ResourcePatternType.LITERAL, "User:ANONYMOUS", host,
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        assert admin.create_acls([acl])[acl].result(timeout=30) is None
        # Kafka's brokers learn an ACL from the metadata log a moment after CreateAcls is answered; they
        # answer DescribeAcls from the same authorizer, so once it lists the ACL, it is enforced
        wait_for(lambda: any(a[4] == host for a in _acls(admin)), f"the ACL for {host} in effect")

    def describe_from_ipv6() -> int:
        with raw_client(f"::1:{v6}") as c:
            md = c.request(ApiKey.METADATA, 12, {"topics": [{"name": "v6-acl"}],
                                                 "allow_auto_topic_creation": False})
        return md.topics[0].error_code

    assert describe_from_ipv6() == 0  # no ACL on the topic: allow.everyone.if.no.acl.found
    grant("127.0.0.1")
    assert describe_from_ipv6() == 29  # TOPIC_AUTHORIZATION_FAILED: the topic has ACLs, none for ::1
    grant("::1")
    assert describe_from_ipv6() == 29  # not the text Java compares
    grant("0:0:0:0:0:0:0:1")
    assert describe_from_ipv6() == 0
