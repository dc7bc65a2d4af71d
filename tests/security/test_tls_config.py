"""The TLS settings as the broker and tierlog's client check them: listeners and their protocols, the inter-broker
listener, per-listener overrides, the stores a context is built from (PEM, PKCS12, inline, encrypted keys, what
is refused and why), protocols and cipher suites; a broker whose TLS listener cannot be built does not start,
and says why in one line."""

from __future__ import annotations

import ssl

import pytest

from tests.harness.start_failures import assert_failed_start, run_broker
from tests.security.pki import KEY_PASSWORD, STORE_PASSWORD
from tierlog.config import BrokerConfig, validate_client_config
from tierlog.errors import InvalidConfigError
from tierlog.security import SslConfigError, client_context, server_context
from tierlog.security.ssl_factory import openssl_cipher_name

TWO = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}


def test_sasl_listeners_are_accepted_and_a_sasl_client_needs_credentials():
    for protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        assert BrokerConfig({"listeners": f"{protocol}://127.0.0.1:0"}).listeners[0].security_protocol == protocol
    with pytest.raises(InvalidConfigError, match="GSSAPI is not supported"):
        validate_client_config("producer", {"bootstrap.servers": "x:1", "security.protocol": "SASL_PLAINTEXT"})


def test_the_inter_broker_listener_follows_security_inter_broker_protocol():
    assert BrokerConfig(TWO).inter_broker_listener.name == "PLAINTEXT"
    assert BrokerConfig({**TWO, "security.inter.broker.protocol": "SSL"}).inter_broker_listener.name == "SSL"
    assert BrokerConfig({**TWO, "inter.broker.listener.name": "SSL"}).inter_broker_listener.security_protocol == "SSL"
    with pytest.raises(InvalidConfigError, match="Only one of inter.broker.listener.name"):
        BrokerConfig({**TWO, "inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"})
    with pytest.raises(InvalidConfigError, match="No advertised listener is named SSL"):
        BrokerConfig({"security.inter.broker.protocol": "SSL"})


def test_listener_overrides_are_checked_and_win_over_the_broker_wide_value():
    cfg = BrokerConfig({**TWO, "ssl.client.auth": "requested", "listener.name.ssl.ssl.client.auth": "required",
                        "listener.name.ssl.ssl.enabled.protocols": "TLSv1.3"})
    assert cfg.listener_ssl_settings("SSL")["ssl.client.auth"] == "required"
    assert cfg.listener_ssl_settings("SSL")["ssl.enabled.protocols"] == ["TLSv1.3"]
    assert cfg.listener_ssl_settings("PLAINTEXT")["ssl.client.auth"] == "requested"
    assert "listener.name.ssl.ssl.client.auth" not in cfg.unknown_keys
    with pytest.raises(InvalidConfigError, match="listener.name.ssl.ssl.client.auth"):
        BrokerConfig({**TWO, "listener.name.ssl.ssl.client.auth": "sometimes"})


def _pem(identity) -> dict:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(identity.pem)}


def test_keystores_in_every_form_kafka_reads(pki):
    forms = [
        _pem(pki.broker),
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.encrypted_pem),
         "ssl.key.password": KEY_PASSWORD},
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker.p12),
         "ssl.keystore.password": STORE_PASSWORD},
        # keytool has written PKCS12 by default since Java 9, whatever the type is called
        {"ssl.keystore.location": str(pki.broker.p12), "ssl.keystore.password": STORE_PASSWORD},
        {"ssl.keystore.type": "PEM", "ssl.keystore.key": pki.broker.key_text,
         "ssl.keystore.certificate.chain": pki.broker.chain_text},
    ]
    for settings in forms:
        assert isinstance(server_context(settings), ssl.SSLContext)


@pytest.mark.parametrize(("settings", "reason"), [
    ({}, "needs a keystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent.pem"}, "Cannot read ssl.keystore.location"),
    ("encrypted-no-password", "ssl.key.password"),
    ("p12-wrong-password", "wrong password"),
    ("p12-no-password", "ssl.keystore.password is required"),
    ("both", "not both"),
    ("jks", "keytool -importkeystore"),
    ("ciphers", "unknown or unavailable suites"),
])
def test_unusable_keystores_are_refused_with_the_setting_to_fix(pki, settings, reason):
    named = {
        "encrypted-no-password": {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.encrypted_pem)},
        "p12-wrong-password": {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker.p12),
                               "ssl.keystore.password": "nope"},
        "p12-no-password": {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker.p12)},
        "both": {**_pem(pki.broker), "ssl.keystore.key": pki.broker.key_text,
                 "ssl.keystore.certificate.chain": pki.broker.chain_text},
        "ciphers": {**_pem(pki.broker), "ssl.cipher.suites":
                    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_NOTHING_SHA256"},
    }
    if settings == "jks":
        jks = pki.folder / "real.jks"
        jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 64)  # a Java KeyStore's magic number
        settings = {"ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks), "ssl.keystore.password": "x"}
    settings = named.get(settings, settings) if isinstance(settings, str) else settings
    with pytest.raises(SslConfigError, match=reason):
        server_context(settings)


def test_protocols_and_cipher_suites(pki):
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA") == "ECDHE-RSA-AES128-SHA"
    assert openssl_cipher_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    ctx = server_context({**_pem(pki.broker), "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2  # no TLS 1.3 suite listed: no TLS 1.3, as in Java
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in {c["name"] for c in ctx.get_ciphers()}
    ctx = server_context({**_pem(pki.broker), "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert server_context({**_pem(pki.broker), "ssl.protocol": "TLSv1.2"}).maximum_version == ssl.TLSVersion.TLSv1_2
    ctx = server_context({**_pem(pki.broker), "ssl.enabled.protocols": "TLSv1.3"})
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(SslConfigError, match="leave no TLS version"):
        server_context({**_pem(pki.broker), "ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.2"})


def test_client_contexts(pki):
    ctx = client_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)})
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = client_context({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca_text(),
                          "ssl.endpoint.identification.algorithm": ""})
    assert not ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    client_context({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca_p12),
                    "ssl.truststore.password": STORE_PASSWORD, **_pem(pki.client)})
    with pytest.raises(SslConfigError, match="ssl.endpoint.identification.algorithm"):
        client_context({"ssl.endpoint.identification.algorithm": "ldaps"})
    checked = validate_client_config("consumer", {"bootstrap.servers": "x:1", "security.protocol": "ssl",
                                                  "ssl.truststore.type": "pem", "ssl.truststore.location": str(pki.ca)})
    assert checked["security.protocol"] == "SSL" and checked["ssl.truststore.type"] == "PEM"


def test_a_broker_whose_tls_listener_cannot_be_built_does_not_start(tmp_path, pki):
    result = run_broker(tmp_path, **{"log.dirs": str(tmp_path / "logs"),
                                     "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                     "ssl.keystore.type": "PEM",
                                     "ssl.keystore.location": str(pki.broker.encrypted_pem)})
    assert_failed_start(result, "listener SSL", "ssl.key.password")


def test_a_new_certificate_must_keep_the_identity_unless_allowed(pki):
    from cryptography import x509

    from tierlog.security.ssl_factory import identity_change

    def cert(identity):
        return x509.load_pem_x509_certificate(identity.cert.read_bytes())

    assert identity_change(cert(pki.broker), cert(pki.broker_next), False, False) is None
    assert "DistinguishedName does not match" in identity_change(cert(pki.broker), cert(pki.broker_renamed), False,
                                                                 False)
    assert identity_change(cert(pki.broker), cert(pki.broker_renamed), True, False) is None
    # a client certificate has no subject alternative names where the broker's had two
    assert "SubjectAltNames do not match" in identity_change(cert(pki.broker), cert(pki.client), True, False)
    assert identity_change(cert(pki.broker), cert(pki.client), True, True) is None
