"""Dynamic password configs on a ZooKeeper cluster (Kafka's password.encoder.secret): a keystore password set
through IncrementalAlterConfigs is stored encrypted in /config/brokers/<id>, never described, applied by the
broker (its TLS listener serves the new keystore) and again after a restart; one that Kafka 3.9's kafka-configs
--zookeeper encoded while the brokers were down is read too. At the cluster-wide default such a config is refused.
A broker whose secret is not the one the value was encoded with leaves it out and logs why.

One cluster of two brokers serves the module (broker 1 controls; both have the same password.encoder.secret);
broker 2's SSL listener starts with ``pki.broker``'s PKCS12 keystore."""

from __future__ import annotations

import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import Encoding, pkcs12
from kazoo.client import KazooClient

from tests.harness.broker import log_lines
from tests.harness.rawclient import RawClient
from tests.harness.tierlog_cluster import start_cluster, wait_until
from tests.security.passwordlib import BROKER, LOCATION_KEY, PASSWORD_KEY
from tests.security.passwordlib import alter_broker_configs as _alter
from tests.security.pki import STORE_PASSWORD
from tests.security.tlslib import client_context, tls_raw
from tierlog.errors import InvalidRequestError
from tierlog.protocol import ApiKey

SECRET = "cluster-encoder-secret"


@pytest.fixture(scope="module")
def cluster(pki, zookeeper, tmp_path_factory):
    root = tmp_path_factory.mktemp("password-encoder")
    settings = {"password.encoder.secret": SECRET,
                "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker.p12),
                "ssl.keystore.password": STORE_PASSWORD,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
                "ssl.allow.dn.changes": "true"}
    c = start_cluster(root, zookeeper, 2, settings, controller=1, extra_listeners=",SSL://127.0.0.1:0")
    c.root = root
    try:
        yield c
    finally:
        c.stop()


def _keystore(pki, folder, identity, password: str, name: str):
    """``identity``'s key and certificate in a PKCS12 file of its own password."""
    key = serialization.load_pem_private_key(identity.key.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(identity.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    path = folder / name
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, [ca], serialization.BestAvailableEncryption(password.encode())))
    return path


def _ssl_address(broker) -> str:
    """The SSL listener of the broker's latest start (a restart binds a new port)."""
    for line in reversed(broker.output):
        if " ready in " in line and "SSL://" in line:
            return line.rsplit("SSL://", 1)[1].split(",")[0].strip()
    raise AssertionError("no ready line")


def _serves(broker, pki, identity) -> bool:
    raw = tls_raw(_ssl_address(broker), client_context(pki))
    try:
        der = raw.sock.getpeercert(binary_form=True)
    finally:
        raw.close()
    return der == x509.load_pem_x509_certificate(identity.cert.read_bytes()).public_bytes(Encoding.DER)


def _described(broker, resource: str) -> dict:
    raw = RawClient(broker.bootstrap)
    try:
        r = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": BROKER, "resource_name": resource, "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False})
    finally:
        raw.close()
    assert r.results[0].error_code == 0, r.results[0]
    return {c.name: c for c in r.results[0].configs}


def _stored(cluster, broker_id: int) -> dict:
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        return json.loads(zk.get(f"/config/brokers/{broker_id}")[0])["config"]
    finally:
        zk.stop()


def test_a_keystore_password_is_stored_encrypted_applied_and_never_described(cluster, pki):
    b2 = cluster.brokers[2]
    assert _serves(b2, pki, pki.broker)
    keystore = _keystore(pki, cluster.root, pki.broker_next, "next-store-secret", "next.p12")
    # sent to broker 2, forwarded to the controller (broker 1), which encodes it
    assert _alter(b2, "2", {LOCATION_KEY: str(keystore), PASSWORD_KEY: "next-store-secret"}) == (0, None)
    stored = _stored(cluster, 2)
    assert stored[LOCATION_KEY] == str(keystore)
    text = stored[PASSWORD_KEY]
    assert "next-store-secret" not in text
    fields = dict(item.split(":", 1) for item in text.split(","))
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding" and "encryptedPassword" in fields
    wait_until(lambda: _serves(b2, pki, pki.broker_next), 60, "broker 2 serving the new keystore")
    entry = _described(b2, "2")  # never described: sensitive, null, in its synonyms too
    assert entry[PASSWORD_KEY].value is None and entry[PASSWORD_KEY].is_sensitive
    assert entry[PASSWORD_KEY].synonyms and all(s.value is None for s in entry[PASSWORD_KEY].synonyms)
    assert entry[LOCATION_KEY].value == str(keystore)
    for i in (1, 2):
        assert not [m for m in log_lines(cluster.brokers[i].output, "ERROR") if "could not be decoded" in m["message"]]


def test_the_password_survives_a_restart(cluster, pki):
    b2 = cluster.brokers[2]
    assert _serves(b2, pki, pki.broker_next)
    b2.stop()
    cluster.start([2])
    cluster.wait_formed()
    # the static keystore is pki.broker's: serving broker_next means the stored password was decoded
    wait_until(lambda: _serves(b2, pki, pki.broker_next), 60, "broker 2 serving the dynamic keystore again")


def test_a_password_kafka_configs_encoded_in_zookeeper_is_read(cluster, pki, kafka_zk_tool_runner):
    """Kafka's way while the brokers are down: kafka-configs --zookeeper --entity-type brokers with the secret in
    --add-config (used to encode, not stored). The keystore holds another certificate (pki.broker_renamed; the
    cluster allows ssl.allow.dn.changes), so serving it proves Kafka's value was decoded and used. Both brokers
    stop: tierlog's controller does not watch /config/changes for broker configs (it would push its own copy)."""
    b2 = cluster.brokers[2]
    keystore = _keystore(pki, cluster.root, pki.broker_renamed, "kafka-store-secret", "kafka.p12")
    b2.stop()
    cluster.brokers[1].stop()
    kafka_zk_tool_runner.run(
        "ConfigCommand", "--zookeeper", cluster.zookeeper_connect, "--entity-type", "brokers", "--entity-name", "2",
        "--alter", "--add-config",
        f"{LOCATION_KEY}={keystore},{PASSWORD_KEY}=kafka-store-secret,password.encoder.secret={SECRET}")
    stored = _stored(cluster, 2)
    assert stored[LOCATION_KEY] == str(keystore) and "kafka-store-secret" not in stored[PASSWORD_KEY]
    assert "password.encoder.secret" not in stored
    cluster.start([1, 2])
    cluster.wait_formed()
    wait_until(lambda: _serves(b2, pki, pki.broker_renamed), 60, "broker 2 serving Kafka's keystore")
    assert not [m for m in log_lines(b2.output, "ERROR") if "could not be decoded" in m["message"]]


def test_a_password_config_at_the_cluster_default_is_refused(cluster):
    """Every dynamic password config is an ssl.* one, per broker in Kafka: refused at the default first."""
    for incremental in (True, False):
        code, message = _alter(cluster.brokers[1], "", {PASSWORD_KEY: "x"}, incremental)
        assert code == InvalidRequestError.code, (code, message)
        assert "Cannot update these configs at default cluster level, broker id must be specified" in message
    assert PASSWORD_KEY not in _stored_default(cluster)


def _stored_default(cluster) -> dict:
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        if not zk.exists("/config/brokers/<default>"):
            return {}
        return json.loads(zk.get("/config/brokers/<default>")[0])["config"]
    finally:
        zk.stop()


def test_a_broker_with_another_secret_ignores_its_password_and_says_why(cluster, pki):
    """Its stored keystore password cannot be decoded: left out with an error naming the key (Kafka ignores it
    too); the listener keeps the static keystore and the broker serves on."""
    b2 = cluster.brokers[2]
    b2.stop()
    b2.overrides["password.encoder.secret"] = "not-the-cluster-secret"
    cluster.start([2])
    cluster.wait_formed()

    def ignored():
        return [m["message"] for m in log_lines(b2.output, "ERROR")
                if f"Dynamic password config {PASSWORD_KEY} could not be decoded" in m["message"]]
    wait_until(ignored, 60, "broker 2 reporting the password it cannot decode")
    assert "not-the-cluster-secret" not in "".join(b2.output) and "kafka-store-secret" not in "".join(b2.output)
    assert _serves(b2, pki, pki.broker)  # the static keystore: the dynamic one cannot be opened without it
    assert b2.proc.poll() is None
