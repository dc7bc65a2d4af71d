"""SASL listeners of one broker, shared by the module: SASL_PLAINTEXT and SASL_SSL with PLAIN (JAAS users),
SCRAM-SHA-256/512 (credentials made with AlterUserScramCredentials) and OAUTHBEARER (unsecured tokens; signed
tokens against a JWKS file on the JWT listener). Real clients (confluent-kafka, kafka-python, aiokafka, kcat,
Kafka's Java tools, tierlog's client) authenticate with their usual settings; wrong passwords, bad tokens and
hostile frames are refused, logged once, and the broker keeps serving."""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.index import load_request_schema

from tests.harness.broker import log_lines, running_broker
from tests.harness.rawclient import RawClient, create_topic, unique
from tests.security.sasllib import (
    OAUTH_MODULE,
    PLAIN_MODULE,
    SCRAM_MODULE,
    Issuer,
    authenticate,
    closed_by_broker,
    eventually,
    handshake,
    jaas,
    plain_login,
    plain_server_jaas,
    send_size,
)
from tests.security.tlslib import listener_addresses, tierlog_roundtrip
from tierlog.client.producer import Producer
from tierlog.errors import SaslAuthenticationFailedError
from tierlog.protocol import ApiKey, build, encode_request

SCRAM_USERS = {"bob": ("SCRAM-SHA-256", "bob-secret"), "carol": ("SCRAM-SHA-512", "carol-secret")}


@pytest.fixture(scope="module")
def sasl(pki, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sasl-broker")
    issuer = Issuer(folder)
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                     "JWT://127.0.0.1:0,PREAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "JWT:SASL_PLAINTEXT,PREAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_server_jaas(),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_server_jaas(),
        # only test_requests_before_authentication_close_the_connection uses it: its refusal's first line is
        # that test's, whatever a client did on the other listeners earlier in the module
        "listener.name.preauth.plain.sasl.jaas.config": plain_server_jaas(),
        "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.jwt.sasl.oauthbearer.jwks.endpoint.url": issuer.jwks.as_uri(),
        "listener.name.jwt.sasl.oauthbearer.expected.audience": issuer.audience,
        "listener.name.jwt.sasl.oauthbearer.expected.issuer": issuer.issuer,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        # each refusal kind is logged once for the whole module, its repeats counted
        "internal.log.repeat.interval.ms": "3600000",
        "num.partitions": "1",
    }
    with running_broker(folder, settings) as broker:
        addresses = listener_addresses(broker)
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")),
                                                                          8192), pw.encode())
                   for user, (m, pw) in SCRAM_USERS.items()]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(timeout=30)
        yield broker, addresses, issuer


def _topic(addresses) -> str:
    name = unique("sasl")
    create_topic(addresses["PLAINTEXT"], name)
    return name


def _serving(broker, addresses) -> None:
    assert broker.proc.poll() is None, "".join(broker.output[-40:])
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        assert raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False}).brokers
    finally:
        raw.close()


def _ck_roundtrip(conf: dict, topic: str, count: int = 5) -> list[bytes]:
    errors = []
    producer = confluent_kafka.Producer({**conf, "error_cb": errors.append})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(60) == 0, errors
    consumer = confluent_kafka.Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(120):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == count:
                break
    finally:
        consumer.close()
    return got


def _ssl(pki) -> dict:
    return {"ssl.ca.location": str(pki.ca)}


# ---------------------------------------------------------------------------------------------- clients


def test_api_versions_advertises_the_sasl_and_scram_apis(sasl):
    _broker, addresses, _ = sasl
    raw = RawClient(addresses["SASL_PLAINTEXT"])  # ApiVersions is served before authentication
    try:
        keys = {k.api_key: (k.min_version, k.max_version) for k in raw.request(ApiKey.API_VERSIONS, 3, {}).api_keys}
    finally:
        raw.close()
    assert keys[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert keys[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    assert keys[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS] == (0, 0)
    assert keys[ApiKey.ALTER_USER_SCRAM_CREDENTIALS] == (0, 0)


def test_confluent_kafka_plain_over_sasl_plaintext(sasl):
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    conf = {"bootstrap.servers": addresses["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    assert _ck_roundtrip(conf, topic) == [f"m{i}".encode() for i in range(5)]


def test_confluent_kafka_scram_sha_512_over_sasl_ssl(sasl, pki):
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    conf = {"bootstrap.servers": addresses["SASL_SSL"], "security.protocol": "SASL_SSL", **_ssl(pki),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret"}
    assert _ck_roundtrip(conf, topic) == [f"m{i}".encode() for i in range(5)]


def test_confluent_kafka_unsecured_oauthbearer(sasl):
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    conf = {"bootstrap.servers": addresses["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=dev-user"}
    assert _ck_roundtrip(conf, topic) == [f"m{i}".encode() for i in range(5)]


def test_confluent_kafka_signed_jwt_validated_against_a_jwks_file(sasl):
    """RS256 and ES256 tokens signed by the issuer whose keys the JWT listener reads from its JWKS file, with
    the expected audience and issuer."""
    _broker, addresses, issuer = sasl
    for alg in ("RS256", "ES256"):
        topic = _topic(addresses)
        token = issuer.token("service-a", alg=alg)
        conf = {"bootstrap.servers": addresses["JWT"], "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _cfg, token=token: (token, time.time() + 3600, "service-a", {})}
        assert _ck_roundtrip(conf, topic, 3) == [b"m0", b"m1", b"m2"]


def _refused_token(addresses, token: str) -> list[str]:
    errors = []
    producer = confluent_kafka.Producer({"bootstrap.servers": addresses["JWT"], "security.protocol": "SASL_PLAINTEXT",
                                         "sasl.mechanism": "OAUTHBEARER", "error_cb": errors.append,
                                         "oauth_cb": lambda _cfg: (token, time.time() + 3600, "x", {})})
    producer.produce("never", b"x")
    for _ in range(60):
        producer.poll(0.5)
        if any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors):
            break
    producer.purge()
    return [e.str() for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION]


def test_expired_and_badly_signed_tokens_are_refused_and_logged(sasl):
    broker, addresses, issuer = sasl
    seen = len(broker.output)
    cases = {"expired": issuer.token("late", lifetime_s=-600),
             "signature": issuer.token("forger", key=issuer.stranger),
             "audience": issuer.token("elsewhere", aud="another-service"),
             "unsecured": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5fQ."}
    for token in cases.values():
        failures = _refused_token(addresses, token)
        assert failures and all("invalid_token" in f for f in failures), failures
    def lines():
        return [m["message"] for m in log_lines(broker.output[seen:], "WARNING")
                if "mechanism OAUTHBEARER" in m["message"]]
    assert eventually(lambda: len(lines()) >= 4), lines()
    found = lines()
    assert any("expired" in line for line in found), found
    assert any("signature does not verify" in line for line in found), found
    assert any("audience" in line for line in found), found
    assert any("algorithm 'none'" in line for line in found), found
    for token in cases.values():
        assert token not in "".join(broker.output)
    _serving(broker, addresses)


def test_kafka_python_scram_sha_256(sasl):
    from kafka import KafkaConsumer, KafkaProducer
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    common = {"bootstrap_servers": addresses["SASL_PLAINTEXT"], "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret"}
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, **common, auto_offset_reset="earliest", consumer_timeout_ms=30000)
    got = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_aiokafka_plain_over_sasl_ssl(sasl, pki):
    import ssl

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    _broker, addresses, _ = sasl
    topic = _topic(addresses)

    async def run():
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        common = {"bootstrap_servers": addresses["SASL_SSL"], "security_protocol": "SASL_SSL", "ssl_context": ctx,
                  "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **common, auto_offset_reset="earliest")
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), 30)).value for _ in range(5)]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


def test_kcat_scram_sha_256_and_plain_over_sasl_ssl(sasl, pki):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    scram = ["-b", addresses["SASL_PLAINTEXT"], "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=bob", "-X", "sasl.password=bob-secret"]
    subprocess.run(["kcat", *scram, "-P", "-t", topic], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    plain_ssl = ["-b", addresses["SASL_SSL"], "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca}",
                 "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    out = subprocess.run(["kcat", *plain_ssl, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "3"],
                         capture_output=True, check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_tierlog_client_over_sasl_ssl(sasl, pki, mechanism):
    _broker, addresses, _ = sasl
    topic = _topic(addresses)
    login = {"PLAIN": jaas(PLAIN_MODULE, username="alice", password="alice-secret"),
             "SCRAM-SHA-256": jaas(SCRAM_MODULE, username="bob", password="bob-secret"),
             "SCRAM-SHA-512": jaas(SCRAM_MODULE, username="carol", password="carol-secret"),
             "OAUTHBEARER": jaas(OAUTH_MODULE, unsecuredLoginStringClaim_sub="dev-user")}[mechanism]
    settings = {"bootstrap.servers": addresses["SASL_SSL"], "security.protocol": "SASL_SSL",
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
                "sasl.mechanism": mechanism, "sasl.jaas.config": login}
    assert asyncio.run(tierlog_roundtrip(settings, topic, 10)) == [f"v{i}".encode() for i in range(10)]


def test_tierlog_client_confluent_names_and_a_wrong_password(sasl):
    broker, addresses, _ = sasl
    topic = _topic(addresses)
    settings = {"bootstrap.servers": addresses["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret"}
    assert asyncio.run(tierlog_roundtrip(settings, topic, 3)) == [b"v0", b"v1", b"v2"]

    async def wrong():
        async with Producer({**settings, "sasl.password": "nope-not-it", "delivery.timeout.ms": 10000,
                             "request.timeout.ms": 5000}) as producer:
            await producer.send_and_wait(topic, b"x")
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        asyncio.run(wrong())
    assert "nope-not-it" not in "".join(broker.output)


def _scram_iterations(addresses, user: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
    try:
        described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    except confluent_kafka.KafkaException:
        return {}
    return {info.mechanism.name: info.iterations for info in described.scram_credential_infos}


def test_kafka_configs_alters_scram_credentials_then_java_producer_uses_them(sasl, pki, kafka_tool):
    """kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users (AlterUserScramCredentials),
    then Kafka's console producer and consumer log in with the credential. (kafka-configs --describe of users
    also asks DescribeClientQuotas, served by the client quotas work; the credentials are described here with
    DescribeUserScramCredentials through confluent-kafka.)"""
    _broker, addresses, _ = sasl
    kafka_tool("ConfigCommand", "--bootstrap-server", addresses["PLAINTEXT"], "--alter", "--add-config",
               "SCRAM-SHA-256=[iterations=4096,password=dave-secret],SCRAM-SHA-512=[password=dave-secret]",
               "--entity-type", "users", "--entity-name", "dave", timeout=120)
    assert _scram_iterations(addresses, "dave") == {"SCRAM_SHA_256": 4096, "SCRAM_SHA_512": 4096}
    topic = _topic(addresses)
    props = ["security.protocol=SASL_SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
             "sasl.mechanism=SCRAM-SHA-512",
             f"sasl.jaas.config={jaas(SCRAM_MODULE, username='dave', password='dave-secret')}"]
    kafka_tool("ConsoleProducer", "--bootstrap-server", addresses["SASL_SSL"], "--topic", topic,
               *[a for p in props for a in ("--producer-property", p)], input="j1\nj2\nj3\n", timeout=120)
    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", addresses["SASL_SSL"], "--topic", topic,
                     "--from-beginning", "--max-messages", "3", "--timeout-ms", "60000",
                     *[a for p in props for a in ("--command-property", p)], timeout=120)
    assert out.stdout.split() == ["j1", "j2", "j3"], out.stderr
    kafka_tool("ConfigCommand", "--bootstrap-server", addresses["PLAINTEXT"], "--alter", "--delete-config",
               "SCRAM-SHA-512", "--entity-type", "users", "--entity-name", "dave", timeout=120)
    assert _scram_iterations(addresses, "dave") == {"SCRAM_SHA_256": 4096}


def test_scram_admin_errors_are_kafkas(sasl):
    _broker, addresses, _ = sasl
    admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
    few = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(confluent_kafka.KafkaException, match="Too few iterations"):
        admin.alter_user_scram_credentials([few])["erin"].result(timeout=30)
    with pytest.raises(confluent_kafka.KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody-here"])["nobody-here"].result(timeout=30)


# ---------------------------------------------------------------------------------------------- refusals


def test_wrong_password_is_answered_with_kafkas_message_logged_once_and_closed(sasl):
    broker, addresses, _ = sasl
    seen = len(broker.output)
    for _ in range(3):
        raw = RawClient(addresses["SASL_PLAINTEXT"])
        try:
            response = plain_login(raw, "alice", "hunter2-wrong")
            assert response.error_code == SaslAuthenticationFailedError.code
            assert response.error_message == "Authentication failed: Invalid username or password"
            assert closed_by_broker(raw)
        finally:
            raw.close()
    def lines():
        return [m["message"] for m in log_lines(broker.output[seen:], "WARNING") if "wrong password" in m["message"]]
    assert eventually(lambda: lines()), broker.output[seen:]
    _serving(broker, addresses)  # later than the failures: their lines are all in by now
    found = lines()
    assert len(found) == 1, found  # three failures, one line (the repeats are counted)
    assert "user alice" in found[0] and "127.0.0.1:" in found[0] and "listener SASL_PLAINTEXT" in found[0]
    assert "hunter2-wrong" not in "".join(broker.output)
    _serving(broker, addresses)


def test_scram_unknown_user_gets_kafkas_message(sasl):
    _broker, addresses, _ = sasl
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert handshake(raw, "SCRAM-SHA-256").error_code == 0
        response = authenticate(raw, b"n,,n=nobody,r=abcdefgh")
        assert response.error_code == SaslAuthenticationFailedError.code
        assert response.error_message == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-256")
        assert closed_by_broker(raw)
    finally:
        raw.close()


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(sasl):
    broker, addresses, _ = sasl
    raw = RawClient(addresses["JWT"])
    try:
        response = handshake(raw, "PLAIN")
        assert response.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert list(response.mechanisms) == ["OAUTHBEARER"]
        assert closed_by_broker(raw)
    finally:
        raw.close()
    _serving(broker, addresses)


def test_handshake_v0_then_raw_tokens(sasl):
    _broker, addresses, _ = sasl
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        response = handshake(raw, "PLAIN", version=0)
        assert response.error_code == 0 and "PLAIN" in response.mechanisms
        token = b"\0alice\0alice-secret"
        send_size(raw, len(token), token)
        assert raw.read_frame() == b""  # the raw answer: a 4-byte length of 0
        md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
        assert md.brokers
    finally:
        raw.close()


def test_requests_before_authentication_close_the_connection(sasl):
    broker, addresses, _ = sasl
    seen = len(broker.output)
    raw = RawClient(addresses["PREAUTH"])
    try:
        with pytest.raises(ConnectionError):
            raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
    finally:
        raw.close()
    raw = RawClient(addresses["PREAUTH"])  # after SaslHandshake v1, only SaslAuthenticate
    try:
        assert handshake(raw, "PLAIN").error_code == 0
        raw.send_frame(encode_request(build(load_request_schema(ApiKey.API_VERSIONS, 3), {}), 7, "raw"))
        frame = raw.read_frame()  # the correlation id, then ILLEGAL_SASL_STATE
        assert struct.unpack_from(">ih", frame) == (7, 34)
        assert closed_by_broker(raw)
    finally:
        raw.close()
    def lines():
        return [m["message"] for m in log_lines(broker.output[seen:], "WARNING")
                if "before SASL authentication" in m["message"]]
    assert eventually(lambda: any("METADATA" in line for line in lines())), lines()
    _serving(broker, addresses)


def test_no_re_authentication_on_a_session_that_does_not_end(sasl):
    """Without connections.max.reauth.ms (and a token that expires) Kafka does not re-authenticate: a second
    SaslHandshake is answered ILLEGAL_SASL_STATE with no mechanism listed, and the connection goes on as
    the principal it authenticated as."""
    _broker, addresses, _ = sasl
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        refused = handshake(raw, "PLAIN")
        assert (refused.error_code, refused.mechanisms) == (34, ())
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
    finally:
        raw.close()


def test_sasl_handshake_on_a_plaintext_listener_is_illegal(sasl):
    _broker, addresses, _ = sasl
    raw = RawClient(addresses["PLAINTEXT"])
    try:
        assert handshake(raw, "PLAIN").error_code == 34
        response = authenticate(raw, b"\0alice\0alice-secret")
        assert response.error_code == 34
        assert response.error_message == "SaslAuthenticate request received after successful authentication"
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0  # the connection goes on
    finally:
        raw.close()


def test_oversized_and_truncated_frames_never_hurt_the_broker(sasl):
    broker, addresses, _ = sasl
    seen = len(broker.output)
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        send_size(raw, 0x7FFFFFFF)  # a hostile client announcing a 2 GiB frame
        assert closed_by_broker(raw)
    finally:
        raw.close()
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert handshake(raw, "PLAIN", version=0).error_code == 0
        send_size(raw, 600_000)  # a raw token above sasl.server.max.receive.size (524288)
        assert closed_by_broker(raw)
    finally:
        raw.close()
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        send_size(raw, 100, b"\x00\x11")  # 2 bytes of a 100-byte frame, then the client goes away
    finally:
        raw.close()
    raw = RawClient(addresses["SASL_PLAINTEXT"])
    try:
        assert handshake(raw, "SCRAM-SHA-256").error_code == 0
        response = authenticate(raw, b"\xff\xfe garbage")
        assert response.error_code == SaslAuthenticationFailedError.code
    finally:
        raw.close()
    _serving(broker, addresses)

    def warnings():
        return [m["message"] for m in log_lines(broker.output[seen:], "WARNING")]
    assert eventually(lambda: any("truncated SASL frame" in w for w in warnings())), warnings()
    assert len([w for w in warnings() if "before authentication (sasl.server.max.receive.size is 524288)" in w]) \
        == 1, warnings()
    assert len([w for w in warnings() if "truncated SASL frame" in w]) == 1, warnings()
    assert not log_lines(broker.output, "ERROR")
    assert "Traceback" not in "".join(broker.output)
