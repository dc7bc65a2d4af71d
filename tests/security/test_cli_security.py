"""The ``tierlog`` command against secured listeners, with Kafka's way of passing client settings:
``--command-config FILE`` (a .properties file as Kafka's tools take it) and ``-X key=value`` (kcat's).
One broker for the module: PLAINTEXT (for setting up), SSL with a PEM certificate, SASL_PLAINTEXT and
SASL_SSL with SCRAM-SHA-512 credentials made through AlterUserScramCredentials."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.cli.clilib import as_json, ok, one_error_line, tierlog
from tests.harness.broker import running_broker
from tests.harness.rawclient import unique
from tests.security.sasllib import SCRAM_MODULE, jaas
from tests.security.tlslib import listener_addresses

USER, PASSWORD = "erin", "erin-cli-secret"


@pytest.fixture(scope="module")
def secured(pki, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-secured")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                     "MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "MTLS:SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "num.partitions": "1",
    }
    with running_broker(folder, settings) as broker:
        addresses = listener_addresses(broker)
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        up = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          PASSWORD.encode())
        admin.alter_user_scram_credentials([up])[USER].result(timeout=60)
        yield broker, addresses, folder


def _write(folder, name: str, props: dict[str, str]) -> str:
    path = folder / name
    # Java properties: a backslash or a colon in a value would need escaping; these values have none
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def _roundtrip(address: str, client: list[str]) -> None:
    """topic create, produce, consume and topic list over ``address`` with the client arguments ``client``."""
    topic = unique("cli-sec")
    created = as_json("topic", "create", topic, "-p", "1", "-b", address, "--timeout", "30", *client)
    assert created[0]["created"] is True
    produced = as_json("produce", topic, "-b", address, "--timeout", "30", *client, input="a\nb\nc\n")
    assert produced["records"] == 3
    out = ok("consume", topic, "--from", "earliest", "-n", "3", "-b", address, "--timeout", "60", *client)
    assert out.stdout.split() == ["a", "b", "c"]
    listed = [t["topic"] for t in as_json("topic", "list", "-b", address, "--timeout", "30", *client)]
    assert topic in listed


def test_ssl_with_a_pem_ca_in_a_command_config(secured, pki):
    _broker, addresses, folder = secured
    path = _write(folder, "ssl.properties", {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                             "ssl.truststore.location": str(pki.ca)})
    _roundtrip(addresses["SSL"], ["--command-config", path])


def test_ssl_with_x_settings_only(secured, pki):
    _broker, addresses, _ = secured
    _roundtrip(addresses["SSL"], ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}"])


def test_mutual_tls_with_kcats_certificate_and_key_names(secured, pki):
    """-X ssl.certificate.location / ssl.key.location (kcat's names) present the client certificate a listener
    with ssl.client.auth=required asks for; without them the handshake is refused, in one line."""
    _broker, addresses, _ = secured
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}"]
    _roundtrip(addresses["MTLS"], [*tls, "-X", f"ssl.certificate.location={pki.client.cert}",
                                   "-X", f"ssl.key.location={pki.client.key}"])
    refused = tierlog("topic", "list", "-b", addresses["MTLS"], "--timeout", "10", *tls)
    one_error_line(refused, "closed the TLS connection", "ssl.client.auth=required", "ssl.certificate.location")
    one_error_line(tierlog("topic", "list", "-b", addresses["MTLS"], *tls,
                           "-X", f"ssl.certificate.location={pki.client.cert}"), "ssl.key.location", "give both")


def test_scram_sha_512_over_sasl_ssl_with_a_jaas_config(secured, pki):
    _broker, addresses, folder = secured
    path = _write(folder, "sasl-ssl.properties", {
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas(SCRAM_MODULE, username=USER, password=PASSWORD)})
    _roundtrip(addresses["SASL_SSL"], ["--command-config", path])


def test_scram_sha_512_over_sasl_plaintext_file_and_x_override(secured):
    """The file names the mechanism and user; -X adds the password (a secret kept out of the file)."""
    _broker, addresses, folder = secured
    path = _write(folder, "sasl.properties", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                              "sasl.username": USER, "sasl.password": "overridden"})
    _roundtrip(addresses["SASL_PLAINTEXT"], ["--command-config", path, "-X", f"sasl.password={PASSWORD}"])
    # group commands and cluster info talk to the broker through the same settings
    info = as_json("cluster", "info", "-b", addresses["SASL_PLAINTEXT"], "--command-config", path,
                   "-X", f"sasl.password={PASSWORD}")
    assert info["brokers"]


def test_a_wrong_password_is_one_line(secured):
    broker, addresses, _ = secured
    result = tierlog("topic", "list", "-b", addresses["SASL_PLAINTEXT"], "--timeout", "20",
                     "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
                     "-X", f"sasl.username={USER}", "-X", "sasl.password=not-erins-password")
    line = one_error_line(result, "SASL_AUTHENTICATION_FAILED", "sasl.password")
    assert "not-erins-password" not in result.stderr + result.stdout, line
    assert "not-erins-password" not in "".join(broker.output)


def test_an_untrusted_certificate_is_one_line(secured, pki):
    _broker, addresses, _ = secured
    result = tierlog("topic", "list", "-b", addresses["SSL"], "--timeout", "20",
                     "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.other_ca}")
    one_error_line(result, "TLS handshake failed", "not signed by a trusted CA", "ssl.truststore.location")


def test_a_plaintext_client_on_a_tls_listener_is_one_line(secured):
    _broker, addresses, _ = secured
    result = tierlog("topic", "list", "-b", addresses["SSL"], "--timeout", "5")
    one_error_line(result, "cannot reach the broker")


def test_unknown_keys_and_bad_values_are_one_line(secured, tmp_path):
    _broker, addresses, _ = secured
    address = addresses["PLAINTEXT"]
    one_error_line(tierlog("topic", "list", "-b", address, "-X", "security.protocl=SSL"),
                   "unknown client setting 'security.protocl' (-X)", "did you mean security.protocol?")
    path = tmp_path / "bad.properties"
    path.write_text("sasl.mechanizm=PLAIN\n")
    one_error_line(tierlog("produce", "t", "-b", address, "--command-config", path, input="x\n"),
                   "unknown client setting 'sasl.mechanizm'", str(path))
    one_error_line(tierlog("consume", "t", "-b", address, "-X", "security.protocol=TLS"),
                   "security.protocol", "(-X)")
    # a producer's own setting is checked too, before anything is sent
    one_error_line(tierlog("produce", "t", "-b", address, "-X", "acks=7", input="x\n"),
                   "Invalid value 7 for configuration acks", "(-X)")
    one_error_line(tierlog("topic", "list", "-b", address, "-X", "security.protocol=SSL",
                           "-X", f"ssl.truststore.location={tmp_path / 'missing.pem'}"), "ssl.truststore")
    one_error_line(tierlog("group", "list", "-b", address, "--command-config", tmp_path / "absent.properties"),
                   "cannot read --command-config")
    one_error_line(tierlog("topic", "list", "-b", address, "-X", "security.protocol=SASL_PLAINTEXT",
                           "-X", "sasl.mechanism=SCRAM-SHA-512"), "sasl")
