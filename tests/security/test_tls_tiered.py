"""Tiered storage on a broker whose metadata manager listener is SSL with client certificates required: the
topic-based metadata manager's own clients connect with that listener's TLS settings, so segments are
uploaded and their metadata published over mutual TLS."""

from __future__ import annotations

from tests.harness.broker import running_broker
from tests.harness.rawclient import create_topic, produce
from tests.harness.tiered import tier_status, tiered_settings, wait_for


def test_tiering_with_the_metadata_manager_on_a_mutual_tls_listener(pki, tmp_path):
    settings = tiered_settings(tmp_path, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "remote.log.metadata.manager.listener.name": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required"})
    with running_broker(tmp_path, settings) as b:
        wait_for(lambda: any("Initialized topic-based RLMM resources" in line for line in b.output),
                 "the metadata manager over TLS", timeout=120)
        create_topic(b.bootstrap, "tiered", configs={"remote.storage.enable": "true", "segment.bytes": "4000",
                                                     "local.retention.bytes": "1"})
        for i in range(40):
            batch = [b"%06d" % (i * 10 + j) + b"m" * 100 for j in range(10)]
            assert produce(b.bootstrap, "tiered", 0, batch).error_code == 0
        try:
            wait_for(lambda: (s := tier_status(b, "tiered")["partitions"]) and s[0]["ready"]
                     and (s[0]["remote_segments"] or 0) > 2, "segments uploaded", timeout=120)
        except AssertionError:
            raise AssertionError(f"{tier_status(b, 'tiered')}\n{''.join(b.output[-60:])}") from None
