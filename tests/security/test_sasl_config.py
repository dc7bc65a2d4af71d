"""SASL settings: Kafka's JAAS syntax, what a SASL listener needs to start, the SCRAM and OAUTHBEARER pieces
against RFC test vectors and hand-made tokens."""

from __future__ import annotations

import base64
import time

import pytest

from tests.harness.start_failures import assert_failed_start, run_broker
from tests.security.sasllib import Issuer, plain_server_jaas
from tierlog.security.jaas import JaasConfigError, login_options, parse_jaas_config
from tierlog.security.oauthbearer import JwksValidator, TokenError, unsecured_token, validate_unsecured
from tierlog.security.scram import ScramClient, ScramError, ScramServer, new_credential


def test_jaas_syntax_as_kafka_writes_it():
    entries = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice=alice-secret;')
    assert entries[0].login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entries[0].flag == "required"
    assert entries[0].options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                                  "user_alice": "alice-secret"}
    assert login_options('M required a="semi;colon and \\"quote\\"" b = c ;') == {"a": 'semi;colon and "quote"',
                                                                               "b": "c"}
    for bad in ("", "M", "M required", "M required a=;", "M sometimes a=b;", 'M required a="open;'):
        with pytest.raises(JaasConfigError):
            parse_jaas_config(bad)


def test_scram_sha_256_matches_rfc_7677():
    """RFC 7677's example exchange (user, password, salt, iterations and both nonces fixed)."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = new_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", lambda user, mech: cred if user == "user" else None)
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").decode()
    assert server_first.startswith("r=rOprNGfwEbeRWgbNEkqO") and ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" in server_first
    # The RFC's client proof is for its server nonce; recompute with ours through the client side.
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    client._nonce, client._bare = "rOprNGfwEbeRWgbNEkqO", "n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(server_first.encode())
    client.verify(server.evaluate(final))
    assert server.complete and server.username == "user"
    # the stored key of the RFC's credential, as Kafka and the RFC derive it
    assert base64.b64encode(cred.stored_key).decode() == "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
    assert base64.b64encode(cred.server_key).decode() == "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="


def test_scram_refuses_a_wrong_proof_and_an_unknown_user():
    cred = new_credential("SCRAM-SHA-512", "right", 4096)
    server = ScramServer("SCRAM-SHA-512", lambda user, mech: cred if user == "u" else None)
    client = ScramClient("SCRAM-SHA-512", "u", "wrong")
    with pytest.raises(ScramError, match="invalid client credentials"):
        server.evaluate(client.final(server.evaluate(client.first())))
    with pytest.raises(ScramError, match="unknown user"):
        ScramServer("SCRAM-SHA-512", lambda user, mech: None).evaluate(b"n,,n=x,r=abc")


def test_unsecured_tokens_need_sub_and_a_future_exp():
    assert validate_unsecured(unsecured_token("alice")).principal == "alice"
    with pytest.raises(TokenError, match="expired"):
        validate_unsecured(unsecured_token("alice", lifetime_s=-10))
    with pytest.raises(TokenError, match="no sub claim"):
        validate_unsecured(unsecured_token("", claim="other"))


def test_jwks_validation(tmp_path):
    issuer = Issuer(tmp_path)
    v = JwksValidator(issuer.jwks.as_uri(), audience=["tierlog"], issuer=issuer.issuer, skew_s=0)
    assert v.validate(issuer.token("svc", alg="RS256")).principal == "svc"
    assert v.validate(issuer.token("svc", alg="ES256")).principal == "svc"
    for token, reason in ((issuer.token("svc", key=issuer.stranger), "signature"),
                          (issuer.token("svc", lifetime_s=-5), "expired"),
                          (issuer.token("svc", aud="other"), "audience"),
                          (issuer.token("svc", iss="https://evil.test"), "issuer"),
                          (issuer.token("svc", kid="unknown-kid"), "no key"),
                          (unsecured_token("svc"), "algorithm"),
                          ("not.a.jwt", "decode")):
        with pytest.raises(TokenError, match=reason):
            v.validate(token, now=time.time())


@pytest.mark.parametrize("settings, fragments", [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, ["Listener SASL_PLAINTEXT", "GSSAPI"]),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
     ["Listener SASL_PLAINTEXT", "PLAIN is enabled but no JAAS configuration"]),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
      "sasl.jaas.config": "PlainLoginModule required user_a"}, ["Listener SASL_PLAINTEXT", "key=value"]),
])
def test_a_broker_whose_sasl_listener_cannot_be_served_does_not_start(tmp_path, settings, fragments):
    result = run_broker(tmp_path, **{"log.dirs": str(tmp_path / "logs"), **settings})
    assert_failed_start(result, *fragments)


def test_plain_users_come_from_the_listener_and_mechanism_jaas_first():
    from tierlog.config import BrokerConfig
    from tierlog.server.network.sasl_authenticator import plain_users
    cfg = BrokerConfig({"listeners": "A://127.0.0.1:0,B://127.0.0.1:0",
                        "listener.security.protocol.map": "A:SASL_PLAINTEXT,B:SASL_PLAINTEXT",
                        "sasl.jaas.config": plain_server_jaas({"admin": "x", "bob": "b"}),
                        "listener.name.a.plain.sasl.jaas.config": plain_server_jaas({"admin": "y", "amy": "a"})})
    assert plain_users(cfg, "A") == {"admin": "y", "amy": "a"}
    assert plain_users(cfg, "B") == {"admin": "x", "bob": "b"}
    assert not cfg.unknown_keys


def test_scram_credentials_outlive_a_restart_of_a_single_node(tmp_path):
    """On a single node the credentials are kept with the broker's metadata (like topic configs)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from tests.harness.broker import running_broker
    from tests.harness.rawclient import RawClient
    from tests.security.sasllib import authenticate, handshake
    from tests.security.tlslib import listener_addresses

    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    with running_broker(tmp_path, settings) as broker:
        admin = AdminClient({"bootstrap.servers": listener_addresses(broker)["PLAINTEXT"]})
        up = UserScramCredentialUpsertion("kim", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"kim-pw")
        admin.alter_user_scram_credentials([up])["kim"].result(timeout=30)
    with running_broker(tmp_path, settings) as broker:
        raw = RawClient(listener_addresses(broker)["SASL_PLAINTEXT"])
        try:
            client = ScramClient("SCRAM-SHA-512", "kim", "kim-pw")
            assert handshake(raw, "SCRAM-SHA-512").error_code == 0
            first = authenticate(raw, client.first())
            assert first.error_code == 0
            final = authenticate(raw, client.final(bytes(first.auth_bytes)))
            assert final.error_code == 0
            client.verify(bytes(final.auth_bytes))
        finally:
            raw.close()
