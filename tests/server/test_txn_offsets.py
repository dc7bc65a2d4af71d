"""Transactional offset commits (TxnOffsetCommit, KIP-98 and KIP-447) over sockets, driven by hand as the
transaction coordinator will drive them: offsets stay pending until the producer's COMMIT marker reaches the
group's ``__consumer_offsets`` partition, an ABORT drops them, OffsetFetch never returns them and answers
UNSTABLE_OFFSET_COMMIT with ``require_stable``; a restart replays the pending offsets and the markers from the
log; the member checks of v3+. One ``__consumer_offsets`` partition, so every group lives in partition 0."""

from __future__ import annotations

import pytest

from tests.harness.rawclient import RawClient, create_topic, raw_client, unique
from tests.harness.transactions import UNVERIFIED, init_producer_id
from tests.harness.txn_offsets import end_offsets_txn, offset_commit, offset_fetch, txn_offset_commit
from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey

NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 0, 3, 22, 25
INVALID_PRODUCER_EPOCH, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 47, 79, 82, 88
SETTINGS = {"num.partitions": "1", "offsets.topic.num.partitions": "1", **UNVERIFIED}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from tests.harness.broker import running_broker
    with running_broker(tmp_path_factory.mktemp("txnoffsets"), SETTINGS) as b:
        yield b


@pytest.fixture
def raw(shared):
    with raw_client(shared.bootstrap) as c:
        yield c


def setup(raw: RawClient, shared) -> tuple[str, str, int, int]:
    topic, group = unique("txo"), unique("txo-group")
    create_topic(shared.bootstrap, topic)
    pid, epoch = init_producer_id(raw)
    return topic, group, pid, epoch


def test_api_versions_advertise_txn_offset_commit(raw):
    resp = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[ApiKey.TXN_OFFSET_COMMIT] == (0, 5)


@pytest.mark.parametrize("version", [0, 2, 3, 4])  # v5 (TV2) adds the partition to a real transaction: below
def test_pending_offsets_are_visible_only_after_the_commit_marker(raw, shared, version):
    topic, group, pid, epoch = setup(raw, shared)
    assert txn_offset_commit(raw, group, pid, epoch, {(topic, 0): 7}, version=version) == {(topic, 0): NONE}
    assert offset_fetch(raw, group, topic) == {0: (-1, NONE)}
    assert offset_fetch(raw, group, topic, require_stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}
    assert end_offsets_txn(raw, pid, epoch, commit=True) == NONE
    assert offset_fetch(raw, group, topic) == {0: (7, NONE)}
    assert offset_fetch(raw, group, topic, require_stable=True) == {0: (7, NONE)}


def test_v5_adds_the_group_partition_to_the_transaction_and_end_txn_v5_commits_it(raw, shared):
    """Transaction version 2: TxnOffsetCommit v5 with no AddOffsetsToTxn; the broker adds the group's
    __consumer_offsets partition to the transaction (whatever transaction.partition.verification.enable says),
    EndTxn v5 answers the bumped epoch and its markers make the offsets visible."""
    topic, group = unique("txo5"), unique("txo5-group")
    create_topic(shared.bootstrap, topic)
    r = raw.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": "hand-made", "transaction_timeout": 60000,
                                                  "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 0, r
    pid, epoch = r.producer_id, r.producer_epoch
    assert txn_offset_commit(raw, group, pid, epoch, {(topic, 0): 11}, version=5) == {(topic, 0): NONE}
    assert offset_fetch(raw, group, topic) == {0: (-1, NONE)}
    d = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["hand-made"]}).transaction_states[0]
    assert (d.transaction_state, [(t.topic, list(t.partitions)) for t in d.topics]) == (
        "Ongoing", [("__consumer_offsets", [0])])
    end = raw.request(ApiKey.END_TXN, 5, {"transactional_id": "hand-made", "producer_id": pid,
                                          "producer_epoch": epoch, "committed": True})
    assert (end.error_code, end.producer_id, end.producer_epoch) == (0, pid, epoch + 1)
    # the markers follow EndTxn's answer
    wait_until(lambda: (o := offset_fetch(raw, group, topic)) == {0: (11, NONE)} or not_yet(o), 60,
               what="the committed offset 11 (the offsets fetched)")


def test_an_abort_drops_the_pending_offsets(raw, shared):
    topic, group, pid, epoch = setup(raw, shared)
    assert offset_commit(raw, group, {(topic, 0): 3}) == {(topic, 0): NONE}
    assert txn_offset_commit(raw, group, pid, epoch, {(topic, 0): 9}) == {(topic, 0): NONE}
    assert offset_fetch(raw, group, topic, require_stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}
    assert offset_fetch(raw, group, topic) == {0: (3, NONE)}
    assert end_offsets_txn(raw, pid, epoch, commit=False) == NONE
    assert offset_fetch(raw, group, topic, require_stable=True) == {0: (3, NONE)}


def test_a_plain_commit_written_after_the_transactional_one_wins(raw, shared):
    # Kafka keeps the most recent record of the partition when the transaction commits later.
    topic, group, pid, epoch = setup(raw, shared)
    assert txn_offset_commit(raw, group, pid, epoch, {(topic, 0): 9}) == {(topic, 0): NONE}
    assert offset_commit(raw, group, {(topic, 0): 12}) == {(topic, 0): NONE}
    assert end_offsets_txn(raw, pid, epoch, commit=True) == NONE
    assert offset_fetch(raw, group, topic) == {0: (12, NONE)}


def test_an_older_producer_epoch_and_an_unknown_topic_are_refused(raw, shared):
    topic, group, pid, _ = setup(raw, shared)
    assert txn_offset_commit(raw, group, pid, 3, {(topic, 0): 1}) == {(topic, 0): NONE}
    assert end_offsets_txn(raw, pid, 3, commit=True) == NONE
    assert txn_offset_commit(raw, group, pid, 2, {(topic, 0): 2}) == {(topic, 0): INVALID_PRODUCER_EPOCH}
    missing = unique("missing")
    assert txn_offset_commit(raw, group, pid, 3, {(missing, 0): 1, (topic, 5): 1, (topic, 0): 4}) == {
        (missing, 0): UNKNOWN_TOPIC_OR_PARTITION, (topic, 5): UNKNOWN_TOPIC_OR_PARTITION, (topic, 0): NONE}
    assert end_offsets_txn(raw, pid, 3, commit=True) == NONE
    assert offset_fetch(raw, group, topic) == {0: (4, NONE)}


def _join(raw: RawClient, group: str, instance: str | None = None):
    def request(member_id: str):
        return raw.request(ApiKey.JOIN_GROUP, 5, {
            "group_id": group, "session_timeout": 30000, "rebalance_timeout": 10000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00"}]})
    first = request("")
    if first.error_code == MEMBER_ID_REQUIRED:
        first = request(first.member_id)
    assert first.error_code == NONE, first
    return first


def test_member_checks_of_v3(raw, shared):
    topic, group, pid, epoch = setup(raw, shared)
    assert txn_offset_commit(raw, unique("nogroup"), pid, epoch, {(topic, 0): 1}, generation=1) == {
        (topic, 0): ILLEGAL_GENERATION}
    joined = _join(raw, group)
    member, generation = joined.member_id, joined.generation_id

    def commit(**kw):
        return txn_offset_commit(raw, group, pid, epoch, {(topic, 0): 5}, **kw)[(topic, 0)]
    assert commit(generation=generation + 1, member_id=member) == ILLEGAL_GENERATION
    assert commit(generation=generation, member_id="someone-else") == UNKNOWN_MEMBER_ID
    # Without a member (v0-v2, or v3 from a producer without group management) the commit is taken.
    assert commit() == NONE
    assert commit(generation=generation, member_id=member) == NONE
    static_group = unique("txo-static")
    static = _join(raw, static_group, instance="instance-1")
    assert txn_offset_commit(raw, static_group, pid, epoch, {(topic, 0): 5}, generation=static.generation_id,
                             member_id="not-the-member", instance="instance-1") == {(topic, 0): FENCED_INSTANCE_ID}
    assert end_offsets_txn(raw, pid, epoch, commit=True) == NONE
    assert offset_fetch(raw, group, topic) == {0: (5, NONE)}


def test_a_restart_replays_pending_offsets_and_markers(start_broker):
    b = start_broker(SETTINGS)
    topic, group = unique("txo-restart"), unique("txo-restart-group")
    create_topic(b.bootstrap, topic, partitions=3)
    raw = RawClient(b.bootstrap)
    committed, ec = init_producer_id(raw)
    aborted, ea = init_producer_id(raw)
    pending, ep = init_producer_id(raw)
    assert txn_offset_commit(raw, group, committed, ec, {(topic, 0): 10}) == {(topic, 0): NONE}
    assert txn_offset_commit(raw, group, aborted, ea, {(topic, 1): 20}) == {(topic, 1): NONE}
    assert txn_offset_commit(raw, group, pending, ep, {(topic, 2): 30}) == {(topic, 2): NONE}
    assert end_offsets_txn(raw, committed, ec, commit=True) == NONE
    assert end_offsets_txn(raw, aborted, ea, commit=False) == NONE
    raw.close()
    expected_stable = {0: (10, NONE), 1: (-1, NONE), 2: (-1, UNSTABLE_OFFSET_COMMIT)}
    for clean in (True, False):
        b.restart(clean=clean)
        raw = RawClient(b.bootstrap)
        assert offset_fetch(raw, group, topic, (0, 1, 2), require_stable=True) == expected_stable
        assert offset_fetch(raw, group, topic, (0, 1, 2)) == {0: (10, NONE), 1: (-1, NONE), 2: (-1, NONE)}
        raw.close()
    raw = RawClient(b.bootstrap)
    assert end_offsets_txn(raw, pending, ep, commit=True) == NONE
    assert offset_fetch(raw, group, topic, (0, 1, 2), require_stable=True) == {
        0: (10, NONE), 1: (-1, NONE), 2: (30, NONE)}
    raw.close()
    b.restart(clean=False)
    raw = RawClient(b.bootstrap)
    assert offset_fetch(raw, group, topic, (0, 1, 2), require_stable=True) == {
        0: (10, NONE), 1: (-1, NONE), 2: (30, NONE)}
    raw.close()
