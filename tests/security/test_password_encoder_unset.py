"""A ZooKeeper cluster without password.encoder.secret refuses dynamic password configs, as Kafka's ZooKeeper mode
does: INVALID_CONFIG saying why, through IncrementalAlterConfigs and AlterConfigs alike; nothing reaches
ZooKeeper and other dynamic configs still work. (One broker is enough: it controls.)"""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from tests.harness.tierlog_cluster import start_cluster
from tests.security.passwordlib import PASSWORD_KEY
from tests.security.passwordlib import alter_broker_configs as _alter
from tests.security.pki import STORE_PASSWORD
from tierlog.errors import InvalidRequestError


@pytest.fixture(scope="module")
def cluster(pki, zookeeper, tmp_path_factory):
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker.p12),
                "ssl.keystore.password": STORE_PASSWORD}
    c = start_cluster(tmp_path_factory.mktemp("no-encoder"), zookeeper, 1, settings,
                      extra_listeners=",SSL://127.0.0.1:0")
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.parametrize("key", [PASSWORD_KEY, "ssl.key.password", "listener.name.ssl.ssl.truststore.password"])
@pytest.mark.parametrize("incremental", [True, False])
def test_a_password_config_is_refused_without_the_secret(cluster, key, incremental):
    code, message = _alter(cluster.brokers[1], "1", {key: "pw", "log.cleaner.threads": "2"}, incremental)
    assert code == InvalidRequestError.code, (code, message)
    assert "Password encoder secret not configured" in message and key in message
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=30)
    try:
        stored = json.loads(zk.get("/config/brokers/1")[0])["config"] if zk.exists("/config/brokers/1") else {}
    finally:
        zk.stop()
    assert key not in stored and "log.cleaner.threads" not in stored


def test_other_dynamic_configs_still_work(cluster):
    assert _alter(cluster.brokers[1], "1", {"log.cleaner.threads": "2"}) == (0, None)
