"""A TLS listener's keystore changed without a restart, as Kafka does it: kafka-configs alters the broker's dynamic
``listener.name.<name>.ssl.keystore.*`` (IncrementalAlterConfigs); new connections get the new certificate,
open ones keep theirs. A keystore that cannot be used, or whose certificate has another subject (Kafka's
``ssl.allow.dn.changes``), is refused (INVALID_CONFIG) and the listener keeps the one it has; setting the same
path again reloads a file replaced in place."""

from __future__ import annotations

import shutil

import pytest
from cryptography import x509

from tests.harness.broker import running_broker
from tests.harness.rawclient import RawClient
from tests.security.tlslib import client_context, listener_addresses, tls_raw
from tierlog.protocol import ApiKey


@pytest.fixture(scope="module")
def reloading(pki, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-reload")
    live = folder / "live.pem"  # the file replaced in place by the last test
    shutil.copyfile(pki.broker.pem, live)
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem)}
    with running_broker(folder, settings) as broker:
        yield broker, listener_addresses(broker), live


def _served(address: str, pki) -> tuple[bytes, RawClient]:
    """The certificate (DER) a new TLS connection is served with, and the connection (open)."""
    raw = tls_raw(address, client_context(pki))
    return raw.sock.getpeercert(binary_form=True), raw


def _der(identity) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificate(identity.cert.read_bytes()).public_bytes(Encoding.DER)


def _serves(address: str, pki, identity) -> bool:
    der, raw = _served(address, pki)
    raw.close()
    return der == _der(identity)


def _alter(kafka_tool, addresses, setting: str, entity: list[str] | None = None, check: bool = True):
    return kafka_tool("ConfigCommand", "--bootstrap-server", addresses["PLAINTEXT"], "--entity-type", "brokers",
                      *(entity or ["--entity-name", "1"]), "--alter", "--add-config", setting, check=check,
                      timeout=120)


def test_a_new_keystore_serves_new_connections_and_open_ones_keep_theirs(reloading, pki, kafka_tool):
    _broker, addresses, _live = reloading
    der, before = _served(addresses["SSL"], pki)
    try:
        assert der == _der(pki.broker)
        _alter(kafka_tool, addresses, f"listener.name.ssl.ssl.keystore.location={pki.broker_next.pem}")
        assert _serves(addresses["SSL"], pki, pki.broker_next)
        assert before.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0  # the old connection still serves
    finally:
        before.close()
    described = kafka_tool("ConfigCommand", "--bootstrap-server", addresses["PLAINTEXT"], "--entity-type",
                           "brokers", "--entity-name", "1", "--describe", timeout=120).stdout
    assert f"listener.name.ssl.ssl.keystore.location={pki.broker_next.pem}" in described, described


def test_an_unusable_keystore_is_refused_and_the_listener_keeps_its_own(reloading, pki, kafka_tool):
    _broker, addresses, _live = reloading
    prefix = "listener.name.ssl.ssl.keystore.location="
    for path, reason in ((f"{pki.folder}/missing.pem", "missing.pem"), (pki.broker.encrypted_pem, "ssl.key.password"),
                         (pki.broker_renamed.pem, "DistinguishedName does not match")):
        refused = _alter(kafka_tool, addresses, f"{prefix}{path}", check=False)
        assert refused.returncode != 0 and reason in refused.stdout + refused.stderr, refused
    # each broker has its own key files: a cluster-wide default is refused, as Kafka refuses it
    default = _alter(kafka_tool, addresses, f"ssl.keystore.location={pki.broker.pem}", ["--entity-default"],
                     check=False)
    assert default.returncode != 0 and "broker id must be specified" in default.stdout + default.stderr, default
    assert _serves(addresses["SSL"], pki, pki.broker_next)


def test_setting_the_same_path_again_reloads_a_replaced_file(reloading, pki, kafka_tool):
    _broker, addresses, live = reloading
    _alter(kafka_tool, addresses, f"listener.name.ssl.ssl.keystore.location={live}")
    assert _serves(addresses["SSL"], pki, pki.broker)
    staged = live.with_suffix(".new")
    shutil.copyfile(pki.broker_next.pem, staged)
    staged.replace(live)  # as a certificate manager renews a file: written aside, renamed over
    _alter(kafka_tool, addresses, f"listener.name.ssl.ssl.keystore.location={live}")
    assert _serves(addresses["SSL"], pki, pki.broker_next)
