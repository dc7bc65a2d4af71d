"""Group APIs on the wire against a live broker, version by version.

The expected answers are Kafka's: ``TIERLOG_GROUPS_PEER=kafka`` runs the same module against Apache
Kafka (the reference peer of tests/harness/apache_kafka.py, needs Java and its jars) instead of
tierlog; the few checks of tierlog-only facts are skipped then.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79

SESSION = 6000
PEER = os.environ.get("TIERLOG_GROUPS_PEER", "tierlog")
tierlog_only = pytest.mark.skipif(PEER != "tierlog", reason="checks a tierlog-specific fact")


class _KafkaPeer:
    def __init__(self, work_dir):
        from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module

        self.server = kafka_peer_module.KafkaServer(work_dir, overrides=dict(SHARED_SETTINGS)).start()
        self.bootstrap = self.server.bootstrap
        self.port = int(self.bootstrap.rsplit(":", 1)[1])
        c = RawClient(self.bootstrap)
        try:  # Kafka creates __consumer_offsets asynchronously and loads it before answering
            for api, version, values in ((ApiKey.FIND_COORDINATOR, 3, {"key": "warm-up", "key_type": 0}),
                                         (ApiKey.OFFSET_FETCH, 7, {"group_id": "warm-up", "topics": None})):
                for _ in range(300):
                    if c.request(api, version, values).error_code == NONE:
                        break
                    time.sleep(0.1)
        finally:
            c.close()

    def kill(self):
        self.server.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the module (starting a process per test costs seconds); tests use distinct names."""
    if PEER == "kafka":
        b = _KafkaPeer(tmp_path_factory.mktemp("kafka"))
    else:
        b = BrokerProcess(tmp_path_factory.mktemp("groups") / "logs", {}).start()
    yield b
    b.kill()


@pytest.fixture
def client(shared_broker):
    c = RawClient(shared_broker.bootstrap)
    yield c
    c.close()


def create_topic(client, name, partitions=2):
    resp = client.request(ApiKey.CREATE_TOPICS, 5, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}], "timeout": 5000})
    assert resp.topics[0].error_code == 0, resp
    if PEER == "kafka":
        from tests.harness.rawclient import wait_for_leaders

        wait_for_leaders(client, name, partitions)


def join(client, group, member_id="", version=5, protocols=(("range", b"\x00\x00"),), instance=None, **extra):
    return client.request(ApiKey.JOIN_GROUP, version, {
        "group_id": group, "session_timeout": SESSION, "rebalance_timeout": 10000, "member_id": member_id,
        "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": n, "metadata": m} for n, m in protocols], **extra})


def join_member(client, group, version=5):
    """A one-member group through the KIP-394 dance; returns the JoinGroup answer."""
    first = join(client, group, version=version)
    if version >= 4:
        assert first.error_code == MEMBER_ID_REQUIRED
        first = join(client, group, first.member_id, version=version)
    assert first.error_code == NONE
    return first


@tierlog_only
def test_api_versions_advertise_group_apis(client):
    resp = client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[ApiKey.FIND_COORDINATOR] == (0, 6)
    assert ranges[ApiKey.JOIN_GROUP] == (0, 9)
    assert ranges[ApiKey.SYNC_GROUP] == (0, 5)
    assert ranges[ApiKey.HEARTBEAT] == (0, 4)
    assert ranges[ApiKey.LEAVE_GROUP] == (0, 5)
    assert ranges[ApiKey.OFFSET_COMMIT] == (2, 10)
    assert ranges[ApiKey.OFFSET_FETCH] == (1, 10)
    assert ranges[ApiKey.OFFSET_DELETE] == (0, 0)
    assert ranges[ApiKey.LIST_GROUPS] == (0, 5)
    assert ranges[ApiKey.DESCRIBE_GROUPS] == (0, 6)
    assert ranges[ApiKey.DELETE_GROUPS] == (0, 2)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_single_key(client, shared_broker, version):
    resp = client.request(ApiKey.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (NONE, 1, "127.0.0.1", shared_broker.port)
    if version >= 1:
        assert resp.error_message == "NONE"  # Kafka's Errors.NONE.message()
    if version >= 1:
        # The transaction coordinator of a single node is that node (__transaction_state made on first use).
        txn = client.request(ApiKey.FIND_COORDINATOR, version, {"key": "tx", "key_type": 1})
        assert (txn.error_code, txn.node_id, txn.host, txn.port) == (NONE, 1, "127.0.0.1", shared_broker.port)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched(client, shared_broker, version):
    resp = client.request(ApiKey.FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.node_id, c.port) for c in resp.coordinators] == \
        [("a", NONE, 1, shared_broker.port), ("b", NONE, 1, shared_broker.port)]
    share = client.request(ApiKey.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["s"]})
    assert share.coordinators[0].error_code == INVALID_REQUEST  # not "<group>:<topic id>:<partition>"
    if version >= 6:  # a share coordinator key: the leader of its __share_group_state partition, this node
        key = "g:AAAAAAAAAAAAAAAAAAAAAQ:0"
        share = client.request(ApiKey.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": [key]})
        assert [(c.key, c.error_code, c.node_id, c.port) for c in share.coordinators] == \
            [(key, NONE, 1, shared_broker.port)]


def test_find_coordinator_creates_the_offsets_topic(client):
    client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    resp = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "__consumer_offsets"}],
                                                "allow_auto_topic_creation": False})
    t = resp.topics[0]
    assert t.error_code == 0 and t.is_internal and len(t.partitions) == 50
    cfg = client.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "__consumer_offsets", "configuration_keys": None}]})
    values = {c.name: c.value for c in cfg.results[0].configs}
    assert values["cleanup.policy"] == "compact"
    assert values["segment.bytes"] == str(100 * 1024 * 1024)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_join_sync_heartbeat_leave_each_version(client, version):
    group = f"grp-v{version}"
    j = join_member(client, group, version=version)
    assert j.leader == j.member_id and j.generation_id == 1
    assert j.members[0].member_id == j.member_id and j.members[0].metadata == b"\x00\x00"
    assert j.protocol_name == "range"
    if version >= 7:
        assert j.protocol_type == "consumer"
    sync_version = min(version, 5) if version >= 3 else version
    sync = client.request(ApiKey.SYNC_GROUP, sync_version, {
        "group_id": group, "generation_id": 1, "member_id": j.member_id, "protocol_type": "consumer",
        "protocol_name": "range", "assignments": [{"member_id": j.member_id, "assignment": b"A"}]})
    assert (sync.error_code, sync.assignment) == (NONE, b"A")
    hb_version = min(version, 4)
    hb = client.request(ApiKey.HEARTBEAT, hb_version, {"group_id": group, "generation_id": 1,
                                                        "member_id": j.member_id})
    assert hb.error_code == NONE
    hb = client.request(ApiKey.HEARTBEAT, hb_version, {"group_id": group, "generation_id": 7,
                                                        "member_id": j.member_id})
    assert hb.error_code == ILLEGAL_GENERATION
    leave_version = min(version, 5)
    if leave_version >= 3:
        leave = client.request(ApiKey.LEAVE_GROUP, leave_version, {
            "group_id": group, "members": [{"member_id": j.member_id}, {"member_id": "ghost"}]})
        assert leave.error_code == NONE
        assert [m.error_code for m in leave.members] == [NONE, UNKNOWN_MEMBER_ID]
    else:
        leave = client.request(ApiKey.LEAVE_GROUP, leave_version, {"group_id": group, "member_id": j.member_id})
        assert leave.error_code == NONE
        leave = client.request(ApiKey.LEAVE_GROUP, leave_version, {"group_id": group, "member_id": j.member_id})
        assert leave.error_code == UNKNOWN_MEMBER_ID
    hb = client.request(ApiKey.HEARTBEAT, hb_version, {"group_id": group, "generation_id": 1,
                                                        "member_id": j.member_id})
    assert hb.error_code == UNKNOWN_MEMBER_ID


def test_sync_v5_requires_protocol_fields(client):
    j = join_member(client, "g5")
    sync = client.request(ApiKey.SYNC_GROUP, 5, {"group_id": "g5", "generation_id": 1, "member_id": j.member_id,
                                                 "protocol_type": None, "protocol_name": None, "assignments": []})
    assert sync.error_code == INCONSISTENT_GROUP_PROTOCOL


def test_join_waits_without_blocking_other_connections(shared_broker):
    """A parked JoinGroup on one connection; another member's join completes both."""
    a, b = RawClient(shared_broker.bootstrap), RawClient(shared_broker.bootstrap)
    try:
        ja = join_member(a, "two")
        a.request(ApiKey.SYNC_GROUP, 3, {"group_id": "two", "generation_id": 1, "member_id": ja.member_id,
                                         "assignments": [{"member_id": ja.member_id, "assignment": b""}]})
        first_b = join(b, "two")
        assert first_b.error_code == MEMBER_ID_REQUIRED
        results = {}
        t = threading.Thread(target=lambda: results.setdefault("b", join(b, "two", first_b.member_id)))
        t.start()
        # b's join is parked in PreparingRebalance; a learns of the rebalance from its heartbeat.
        for _ in range(50):
            hb = a.request(ApiKey.HEARTBEAT, 3, {"group_id": "two", "generation_id": 1, "member_id": ja.member_id})
            if hb.error_code == REBALANCE_IN_PROGRESS:
                break
        assert hb.error_code == REBALANCE_IN_PROGRESS
        rejoin = join(a, "two", ja.member_id)
        t.join(10)
        jb = results["b"]
        assert rejoin.generation_id == jb.generation_id == 2
        assert rejoin.leader == jb.leader == ja.member_id
        assert len(rejoin.members) == 2 and jb.members == ()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
def test_offset_commit_and_fetch(client, version):
    topic = f"oc{version}"
    create_topic(client, topic, 2)
    group = f"simple-{version}"
    resp = client.request(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 4, "committed_metadata": "m"},
            {"partition_index": 7, "committed_offset": 1, "committed_metadata": None}]},
            {"name": "missing", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_metadata": ""}]}]})
    errors = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    assert errors == {(topic, 0): NONE, (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                      ("missing", 0): UNKNOWN_TOPIC_OR_PARTITION}
    fetched = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    assert fetched.error_code == NONE
    (t,) = fetched.topics
    (p,) = t.partitions
    assert (t.name, p.partition_index, p.committed_offset, p.metadata) == (topic, 0, 10, "m")
    assert p.committed_leader_epoch == (4 if version >= 6 else -1)


def test_offset_commit_generation_errors(client):
    create_topic(client, "gen-errors", 1)
    part = [{"name": "gen-errors",
             "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]
    for version, code in ((8, ILLEGAL_GENERATION), (9, GROUP_ID_NOT_FOUND)):
        resp = client.request(ApiKey.OFFSET_COMMIT, version, {
            "group_id": "nobody", "generation_id_or_member_epoch": 5, "member_id": "m", "topics": part})
        assert resp.topics[0].partitions[0].error_code == code


def test_offset_fetch_versions(client):
    create_topic(client, "of", 2)
    client.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "fg", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "of", "partitions": [{"partition_index": 1, "committed_offset": 3,
                                                  "committed_metadata": ""}]}]})
    v1 = client.request(ApiKey.OFFSET_FETCH, 1, {"group_id": "fg", "topics": [
        {"name": "of", "partition_indexes": [0, 1]}]})
    assert [(p.partition_index, p.committed_offset) for p in v1.topics[0].partitions] == [(0, -1), (1, 3)]
    v8 = client.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": "fg", "topics": None},
        {"group_id": "unknown", "topics": [{"name": "of", "partition_indexes": [0]}]}]})
    assert [g.group_id for g in v8.groups] == ["fg", "unknown"]
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in v8.groups[0].topics] \
        == [("of", [(1, 3)])]
    assert v8.groups[1].topics[0].partitions[0].committed_offset == -1 and v8.groups[1].error_code == NONE
    v9 = client.request(ApiKey.OFFSET_FETCH, 9, {"groups": [{"group_id": "fg", "member_id": None,
                                                             "member_epoch": -1, "topics": None}],
                                                 "require_stable": True})
    assert v9.groups[0].topics[0].partitions[0].committed_offset == 3


def test_list_describe_delete(client):
    create_topic(client, "ld", 1)
    j = join_member(client, "busy")
    client.request(ApiKey.SYNC_GROUP, 3, {"group_id": "busy", "generation_id": 1, "member_id": j.member_id,
                                          "assignments": []})
    client.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "idle", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "ld", "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                  "committed_metadata": ""}]}]})
    v0 = client.request(ApiKey.LIST_GROUPS, 0, {})
    mine = ("busy", "idle")
    assert sorted((g.group_id, g.protocol_type) for g in v0.groups if g.group_id in mine) == \
        [("busy", "consumer"), ("idle", "")]
    v4 = client.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["stable"]})
    assert [(g.group_id, g.group_state) for g in v4.groups if g.group_id in mine] == [("busy", "Stable")]
    v5 = client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert v5.groups == ()
    d = client.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["busy", "nothing"],
                                                   "include_authorized_operations": True})
    busy, nothing = sorted(d.groups, key=lambda g: g.group_id)  # Kafka answers per coordinator partition
    assert (busy.group_state, busy.protocol_type, busy.protocol_data) == ("Stable", "consumer", "range")
    assert busy.members[0].member_id == j.member_id and busy.members[0].client_id == "rawclient"
    assert busy.members[0].client_host == "/127.0.0.1"  # the member's address, as Kafka writes it
    assert busy.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    assert (nothing.error_code, nothing.group_state) == (NONE, "Dead")
    dg = client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["busy", "idle", "nothing"]})
    assert {r.group_id: r.error_code for r in dg.results} == {
        "busy": NON_EMPTY_GROUP, "idle": NONE, "nothing": GROUP_ID_NOT_FOUND}
    fetched = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "idle", "topics": None})
    assert fetched.topics == ()


@tierlog_only
def test_offsets_and_groups_survive_restart(broker):
    c = RawClient(broker.bootstrap)
    create_topic(c, "persist", 1)
    j = join_member(c, "pg")
    c.request(ApiKey.SYNC_GROUP, 3, {"group_id": "pg", "generation_id": 1, "member_id": j.member_id,
                                     "assignments": [{"member_id": j.member_id, "assignment": b"xyz"}]})
    c.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "pg", "generation_id_or_member_epoch": 1, "member_id": j.member_id,
        "topics": [{"name": "persist", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                       "committed_metadata": "meta"}]}]})
    c.close()
    broker.restart(clean=False)  # SIGKILL: what was acknowledged is on disk
    c = RawClient(broker.bootstrap)
    try:
        fetched = c.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "pg", "topics": None})
        p = fetched.topics[0].partitions[0]
        assert (p.committed_offset, p.metadata) == (42, "meta")
        # The member survived the restart: it keeps heartbeating in its generation.
        hb = c.request(ApiKey.HEARTBEAT, 3, {"group_id": "pg", "generation_id": 1, "member_id": j.member_id})
        assert hb.error_code == NONE
        sync = c.request(ApiKey.SYNC_GROUP, 3, {"group_id": "pg", "generation_id": 1, "member_id": j.member_id,
                                                "assignments": []})
        assert sync.assignment == b"xyz"
    finally:
        c.close()


@tierlog_only
def test_offsets_topic_partitions_created_later_are_loaded(start_broker):
    # The coordinator loads the configured number of partitions at start; __consumer_offsets created
    # with more makes this node the leader of the others, and their groups are coordinated here too.
    from tierlog.coordinator import partition_for

    broker = start_broker({"offsets.topic.num.partitions": "1"})
    group = next(g for g in (f"late{i}" for i in range(100)) if partition_for(g, 4) == 3)
    c = RawClient(broker.bootstrap)
    try:
        create_topic(c, "__consumer_offsets", 4)
        create_topic(c, "late", 1)
        commit = c.request(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "late", "partitions": [{"partition_index": 0, "committed_offset": 7}]}]})
        assert commit.topics[0].partitions[0].error_code == NONE
        fetched = c.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
        assert fetched.topics[0].partitions[0].committed_offset == 7
        assert join_member(c, group).generation_id == 1
    finally:
        c.close()


def test_offset_delete(client):
    create_topic(client, "od", 1)
    client.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "odg", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "od", "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                  "committed_metadata": ""}]}]})
    resp = client.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "odg", "topics": [
        {"name": "od", "partitions": [{"partition_index": 0}, {"partition_index": 9}]},
        {"name": "gone", "partitions": [{"partition_index": 0}]}]})
    assert resp.error_code == NONE
    assert {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions} == {
        ("od", 0): NONE, ("od", 9): UNKNOWN_TOPIC_OR_PARTITION, ("gone", 0): UNKNOWN_TOPIC_OR_PARTITION}
    fetched = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "odg", "topics": None})
    assert fetched.topics == ()
    resp = client.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "nobody", "topics": [
        {"name": "od", "partitions": [{"partition_index": 0}]}]})
    assert resp.error_code == GROUP_ID_NOT_FOUND and resp.topics == ()


def test_deleting_a_topic_drops_its_committed_offsets(client):
    create_topic(client, "doomed", 1)
    create_topic(client, "kept", 1)
    client.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "dg", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                  "committed_metadata": ""}]} for name in ("doomed", "kept")]})
    resp = client.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["doomed"], "timeout": 5000})
    assert resp.responses[0].error_code == NONE
    for _ in range(100):  # tierlog drops them at once, Kafka when the deletion reaches its coordinator
        fetched = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "dg", "topics": None})
        if [t.name for t in fetched.topics] == ["kept"]:
            break
        time.sleep(0.1)
    assert [t.name for t in fetched.topics] == ["kept"]
