"""KIP-368 re-authentication: a broker with connections.max.reauth.ms=2000 tells clients the session lifetime in
SaslAuthenticate v1+, clients that keep producing re-authenticate on their connections before it ends
(confluent-kafka, tierlog's client), and a connection that does not is closed at its
next request once its session is over. ACLs judge a connection's requests by the principal it authenticated
as, before and after re-authenticating (the broker has an authorizer that allows everything no ACL names)."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.harness.broker import log_lines, running_broker
from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.waiting import wait_until
from tests.security.acllib import binding, grant, revoke
from tests.security.sasllib import (
    authenticate,
    closed_by_broker,
    eventually,
    handshake,
    plain_login,
    plain_server_jaas,
)
from tests.security.tlslib import listener_addresses
from tierlog.client.producer import Producer
from tierlog.protocol import ApiKey

LIFETIME_MS = 2000
DEADLINE_S = 120  # generous: a loaded machine; the loops end as soon as what they wait for is seen


@pytest.fixture(scope="module")
def reauth(tmp_path_factory):
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.jaas.config": plain_server_jaas(),
        "connections.max.reauth.ms": str(LIFETIME_MS),
        "num.partitions": "1",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    with running_broker(tmp_path_factory.mktemp("reauth-broker"), settings) as broker:
        addresses = listener_addresses(broker)
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        up = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")
        admin.alter_user_scram_credentials([up])["bob"].result(timeout=30)
        yield broker, addresses


def _reauths(broker, since: int, user: str) -> int:
    return len([m for m in log_lines(broker.output[since:], "INFO")
                if f"re-authenticated as User:{user} " in m["message"]])


def _expired(broker, since: int) -> list[str]:
    return [m["message"] for m in log_lines(broker.output[since:], "INFO") if "SASL session expired" in m["message"]]


def test_session_lifetime_is_told_and_an_expired_session_is_closed(reauth):
    broker, addresses = reauth
    seen = len(broker.output)
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        response = plain_login(raw, "alice", "alice-secret", version=1)
        assert response.error_code == 0
        assert response.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < DEADLINE_S:  # requests until the broker hangs up
            try:
                assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
            except ConnectionError:
                closed = True
        assert closed
    finally:
        raw.close()
    assert eventually(lambda: len(_expired(broker, seen)) == 1), "".join(broker.output[seen:])


def test_a_raw_client_re_authenticates_on_its_connection(reauth):
    broker, addresses = reauth
    seen = len(broker.output)
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        assert plain_login(raw, "alice", "alice-secret").error_code == 0  # again, on the same connection
        # A third start within the second after that one is refused (Kafka's minimum interval); the
        # connection goes on. Asked again until the second has passed (each refusal leaves the clock alone).
        refused = handshake(raw, "PLAIN")
        assert (refused.error_code, refused.mechanisms) == (34, ())
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
        wait_until(lambda: handshake(raw, "PLAIN").error_code != 34, 30, interval=0.1,
                   what="re-authentication accepted again")
        # another principal on the same connection is refused, as Kafka does, and the connection closed
        response = authenticate(raw, b"\0admin\0admin-secret", 2)
        assert response.error_code == 58 and "Cannot change principals" in response.error_message
        assert closed_by_broker(raw)
    finally:
        raw.close()
    assert eventually(lambda: _reauths(broker, seen, "alice") == 1), "".join(broker.output[seen:])


def test_confluent_kafka_keeps_producing_across_re_authentications(reauth):
    broker, addresses = reauth
    topic = unique("reauth")
    create_topic(addresses["PLAINTEXT"], topic)
    seen = len(broker.output)
    errors, delivered = [], []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": addresses["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
        "linger.ms": 5, "error_cb": errors.append})
    started, i = time.monotonic(), 0
    while _reauths(broker, seen, "alice") < 3 and time.monotonic() - started < DEADLINE_S:
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.05)
        i += 1
    assert producer.flush(60) == 0
    assert _reauths(broker, seen, "alice") >= 3, "".join(broker.output[seen:])[-3000:]
    assert delivered and all(e is None for e in delivered)
    assert not _expired(broker, seen)
    assert not [e for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION], errors


def test_tierlog_client_keeps_producing_across_re_authentications(reauth):
    broker, addresses = reauth
    topic = unique("reauth")
    create_topic(addresses["PLAINTEXT"], topic)
    seen = len(broker.output)

    async def run() -> int:
        settings = {"bootstrap.servers": addresses["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret",
                    "linger.ms": 1}
        async with Producer(settings) as producer:
            started, sent = time.monotonic(), 0
            while _reauths(broker, seen, "bob") < 3 and time.monotonic() - started < DEADLINE_S:
                await asyncio.wait_for(producer.send_and_wait(topic, b"x"), 30)
                sent += 1
                await asyncio.sleep(0.05)
            return sent

    assert asyncio.run(run()) > 0
    assert _reauths(broker, seen, "bob") >= 3
    assert not _expired(broker, seen)


TOPIC, DESCRIBE, TOPIC_AUTHORIZATION_FAILED = 2, 8, 29


def _describe_code(raw: RawClient, topic: str) -> int:
    md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return md.topics[0].error_code


def test_acls_judge_the_authenticated_principal_also_after_re_authentication(reauth):
    """One principal on a connection, from its authentication on: what the authorizer sees does not change
    when the connection re-authenticates (as Kafka requires, as the same principal)."""
    broker, addresses = reauth
    topic = unique("reauth-acl")
    create_topic(addresses["PLAINTEXT"], topic)
    admin = RawClient(addresses["PLAINTEXT"])
    only_alice = {**binding(TOPIC, topic, DESCRIBE, "*"), "principal": "User:alice"}
    grant(admin, only_alice)  # the topic has an ACL now: only alice may describe it
    alice, other = RawClient(addresses["SASL_PLAINTEXT"]), RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert _describe_code(admin, topic) == TOPIC_AUTHORIZATION_FAILED  # PLAINTEXT: User:ANONYMOUS
        assert plain_login(alice, "alice", "alice-secret").error_code == 0
        assert _describe_code(alice, topic) == 0
        assert plain_login(alice, "alice", "alice-secret").error_code == 0  # re-authenticated
        assert _describe_code(alice, topic) == 0
        assert plain_login(other, "admin", "admin-secret").error_code == 0  # not a super user here
        assert _describe_code(other, topic) == TOPIC_AUTHORIZATION_FAILED
    finally:
        alice.close()
        other.close()
        revoke(admin, only_alice)  # the module's other tests need no ACL at all
        admin.close()
