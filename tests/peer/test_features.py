"""KIP-584 features and Kafka 4.4's protocol against Apache Kafka 4.4.0 (one single-node KRaft broker for the
module) and one tierlog broker: ``kafka-features describe|upgrade|downgrade|disable`` of Kafka 4.4 answered
alike (the levels persist across a tierlog restart), ``kafka-metadata-quorum`` answered as Kafka's
ZooKeeper-mode brokers answer it, ApiVersions v5's cluster and node check (KIP-1242) and tierlog's client
going back to its bootstrap servers on REBOOTSTRAP_REQUIRED, and every API's version range compared with
what Kafka 4.4 advertises, the differences pinned to the table in docs/compatibility.md."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.harness import apache_kafka, rawclient
from tests.harness.broker import BrokerProcess
from tests.harness.waiting import wait_until_async
from tierlog.client.admin import Admin
from tierlog.errors import InvalidRequestError, RebootstrapRequiredError
from tierlog.protocol import ApiKey

LATEST = apache_kafka.kafka_peer_module.LATEST_KAFKA_VERSION
FEATURES = "org.apache.kafka.tools.FeatureCommand"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
COMPATIBILITY = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
# What Kafka 3.9.1's ZooKeeper-mode broker answers kafka-metadata-quorum (measured: DescribeQuorum is a KRaft
# API, left out of a ZooKeeper-mode broker's ApiVersions; docs/compatibility.md)
ZK_MODE_QUORUM_ERROR = "UnsupportedVersionException: The node does not support DESCRIBE_QUORUM"


@pytest.fixture(scope="module")
def tools():
    apache_kafka.resolve_jars(LATEST)
    runner = apache_kafka.kafka_peer_module.ToolRunner(version=LATEST)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def kafka(tools, tmp_path_factory):
    k = apache_kafka.kafka_peer_module.KafkaServer(tmp_path_factory.mktemp("kafka44-features"), version=LATEST)
    k.start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog-features") / "logs", {}).start()
    BrokerProcess.shared.add(b)
    try:
        yield b
    finally:
        BrokerProcess.shared.discard(b)
        b.stop()


def _feature(tools, bootstrap: str, *args: str) -> tuple[int, str]:
    r = tools.run(FEATURES, "--bootstrap-server", bootstrap, *args, check=False)
    return r.returncode, (r.stdout + r.stderr).strip()


def _levels(text: str) -> dict[str, tuple[str, str, str]]:
    """feature -> (supported min, supported max, finalized level) from ``kafka-features describe``."""
    return {m[1]: (m[2], m[3], m[4]) for m in re.finditer(
        r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+FinalizedVersionLevel: (\S+)",
        text)}


def _epoch(text: str) -> int:
    return int(re.search(r"Epoch: (\d+)", text)[1])


# transaction.version's steps, each run against both brokers and answered alike
STEPS = [
    ("downgrade", "--feature", "transaction.version=1"),
    ("upgrade", "--feature", "transaction.version=9"),
    ("upgrade", "--feature", "nope.version=1"),
    ("downgrade", "--feature", "transaction.version=2"),
    ("downgrade", "--feature", "transaction.version=0", "--dry-run"),
    ("disable", "--feature", "transaction.version"),
    ("upgrade", "--feature", "transaction.version=2"),
]


def test_kafka_features_answers_as_kafka_44_and_persists_across_restart(kafka, tierlog, tools):
    rc, text = _feature(tools, kafka.bootstrap, "describe")
    assert rc == 0, text
    kafka_tv = _levels(text)["transaction.version"]
    rc, text = _feature(tools, tierlog.bootstrap, "describe")
    assert rc == 0, text
    ours = _levels(text)
    assert ours["transaction.version"] == kafka_tv == ("0", "2", "2")
    # levels whose behaviour tierlog lacks are not claimed: group.version 1 needs KIP-848's heartbeat
    expect_group = "1" if "ConsumerGroupHeartbeat" in _api_names(tierlog.bootstrap) else "0"
    assert ours["group.version"][:2] == ("0", expect_group)
    epoch = _epoch(text)
    for step in STEPS:
        k_rc, k_text = _feature(tools, kafka.bootstrap, *step)
        t_rc, t_text = _feature(tools, tierlog.bootstrap, *step)
        k_text = re.sub(r"controller \d+", "controller N", k_text)
        t_text = re.sub(r"controller \d+", "controller N", t_text)
        assert (t_rc, t_text) == (k_rc, k_text), step
    # four changes (2 -> 1 -> 0 -> 2), each raising the epoch; refused and dry runs change nothing
    rc, text = _feature(tools, tierlog.bootstrap, "downgrade", "--feature", "transaction.version=1")
    assert rc == 0, text
    rc, text = _feature(tools, tierlog.bootstrap, "describe")
    assert _levels(text)["transaction.version"][2] == "1" and _epoch(text) == epoch + 4
    tierlog.stop()
    tierlog.start()
    rc, text = _feature(tools, tierlog.bootstrap, "describe")
    assert _levels(text)["transaction.version"][2] == "1" and _epoch(text) == epoch + 4, text
    # the transaction coordinator follows the finalized level: tierlog's client reads it from ApiVersions
    with rawclient.raw_client(tierlog.bootstrap) as raw:
        r = raw.request(ApiKey.API_VERSIONS, 5, {"client_software_name": "t", "client_software_version": "1"})
    served = _api_names(tierlog.bootstrap)
    expected = {"transaction.version": 1, **({"share.version": 2} if "ShareGroupHeartbeat" in served else {}),
                **({"group.version": 1} if "ConsumerGroupHeartbeat" in served else {})}
    assert {f.name: f.max_version_level for f in r.finalized_features} == expected


def test_metadata_quorum_answers_as_a_zookeeper_mode_kafka_broker(tierlog, tools):
    r = tools.run(QUORUM, "--bootstrap-server", tierlog.bootstrap, "describe", "--status", check=False)
    assert r.returncode == 1 and ZK_MODE_QUORUM_ERROR in r.stderr + r.stdout


def _api_names(bootstrap: str) -> set[str]:
    with rawclient.raw_client(bootstrap) as raw:
        r = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return {_camel(ApiKey(k.api_key).name) for k in r.api_keys if k.api_key in ApiKey._value2member_map_}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.lower().split("_"))


def _ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    with rawclient.raw_client(bootstrap) as raw:
        r = raw.request(ApiKey.API_VERSIONS, 5, {"client_software_name": "t", "client_software_version": "1"})
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}


def _documented_differences() -> dict[int, tuple[str, str]]:
    """api key -> (Kafka 4.4's range, tierlog's range) from docs/compatibility.md's table."""
    text = COMPATIBILITY.read_text()
    section = text[text.index("### API versions against Kafka 4.4"):]
    section = section[:section.index("\n\n", section.index("| API |"))]
    rows = {}
    for m in re.finditer(r"^\| \w+ \((\d+)\) \| ([^|]+) \| ([^|]+) \|", section, re.M):
        rows[int(m[1])] = (m[2].strip(), m[3].strip())
    return rows


def _text(r: tuple[int, int] | None) -> str:
    return "-" if r is None else f"{r[0]}-{r[1]}"


def test_every_api_version_kafka_44_serves_is_served_or_its_difference_documented(kafka, tierlog):
    theirs, ours = _ranges(kafka.bootstrap), _ranges(tierlog.bootstrap)
    differ = {k: (_text(theirs.get(k)), _text(ours.get(k))) for k in sorted(set(theirs) | set(ours))
              if (theirs.get(k) or (0, -1))[1] != (ours.get(k) or (0, -1))[1]}
    assert differ == _documented_differences()
    assert ours[ApiKey.API_VERSIONS] == theirs[ApiKey.API_VERSIONS] == (0, 5)


def test_api_versions_v5_naming_another_cluster_or_node_is_answered_rebootstrap_required(kafka, tierlog):
    for peer in (kafka, tierlog):
        with rawclient.raw_client(peer.bootstrap) as raw:
            cluster_id = rawclient.metadata(peer.bootstrap).cluster_id
            node_id = rawclient.metadata(peer.bootstrap).brokers[0].node_id
            base = {"client_software_name": "t", "client_software_version": "1"}
            codes = [raw.request(ApiKey.API_VERSIONS, 5, {**base, **target}).error_code.value for target in (
                {"cluster_id": cluster_id, "node_id": node_id}, {},  # the right node; nothing named
                {"cluster_id": "another-cluster", "node_id": node_id},
                {"cluster_id": cluster_id, "node_id": node_id + 1},
                {"cluster_id": cluster_id}, {"node_id": node_id})]  # one without the other: malformed
        assert codes == [0, 0, RebootstrapRequiredError.code, RebootstrapRequiredError.code,
                         InvalidRequestError.code, InvalidRequestError.code], peer


def test_tierlog_client_rebootstraps_when_a_known_address_answers_for_another_cluster(tierlog):
    async def scenario():
        admin = Admin({"bootstrap.servers": tierlog.bootstrap, "reconnect.backoff.ms": 50,
                       "reconnect.backoff.max.ms": 100})
        try:
            assert await admin.list_topics() is not None
            net = admin._client
            assert net.cluster.cluster_id and not net.cluster.bootstrapped
            # the address the client learned now answers for another cluster (a host reused): drop the
            # connections and make the client believe the node belonged to cluster "old"
            net.cluster.cluster_id = "old-cluster"
            before = net.rebootstraps
            for node in list(net.cluster.brokers.values()):
                conn = net._connected(node)
                if conn is not None:
                    conn.close()
            net.request_update()
            await wait_until_async(lambda: net.rebootstraps > before, 30, what="the client to rebootstrap")
            # from the bootstrap address (no node id named) it learns the real cluster again and works on
            assert await admin.list_topics() is not None
            await wait_until_async(lambda: net.cluster.cluster_id not in (None, "old-cluster"), 30, what=
                                   "the cluster id learned again")
        finally:
            await admin.close()
    asyncio.run(asyncio.wait_for(scenario(), 60))
