"""Transactions on the partition side, over sockets: transactional batches produced by hand, markers written
with WriteTxnMarkers as the transaction coordinator will, read by confluent-kafka and kafka-python consumers
in both isolation levels; the last stable offset; marker errors; a restart keeps the open transaction and the
aborted-transaction index.

Transactional produce (with a transactional id, which Kafka requires) is accepted without a coordinator
because these brokers run with ``transaction.partition.verification.enable=false`` (``UNVERIFIED``), as
Kafka's would have to."""

from __future__ import annotations

import contextlib

import pytest

from tests.harness.rawclient import RawClient, create_topic, raw_client, unique
from tests.harness.transactions import (
    CONSUMERS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNVERIFIED,
    consume_confluent,
    init_producer_id,
    list_offset,
    marker,
    produce,
    write_markers,
)
from tests.harness.waiting import TimedOut, wait_until
from tierlog.protocol import ApiKey

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, COORDINATOR_FENCED = 0, 3, 47, 48, 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from tests.harness.broker import running_broker
    with running_broker(tmp_path_factory.mktemp("txn"), {"num.partitions": "1", **UNVERIFIED}) as b:
        yield b


@pytest.fixture
def raw(shared):
    with raw_client(shared.bootstrap) as c:
        yield c


def txn(raw: RawClient, topic: str, values: list[bytes], pid: int, epoch: int, sequence: int):
    return produce(raw, topic, values, producer_id=pid, epoch=epoch, sequence=sequence, transactional=True)


def two_transactions(raw: RawClient, topic: str) -> dict:
    """plain, A (committed), B (aborted) interleaved, plain, the sentinel: the values by fate."""
    a, ea = init_producer_id(raw)
    b, eb = init_producer_id(raw)
    assert produce(raw, topic, [b"plain-0"]).error_code == NONE
    assert txn(raw, topic, [b"a-0", b"a-1"], a, ea, 0).error_code == 0
    assert txn(raw, topic, [b"b-0"], b, eb, 0).error_code == 0
    assert txn(raw, topic, [b"a-2"], a, ea, 2).error_code == 0
    assert txn(raw, topic, [b"b-1", b"b-2"], b, eb, 1).error_code == 0
    assert write_markers(raw, marker(a, ea, True, topic), marker(b, eb, False, topic)) == {
        (a, topic, 0): NONE, (b, topic, 0): NONE}
    assert produce(raw, topic, [b"plain-1"]).error_code == NONE
    assert produce(raw, topic, [b"end"]).error_code == NONE
    return {"committed": [b"plain-0", b"a-0", b"a-1", b"a-2", b"plain-1", b"end"],
            "all": [b"plain-0", b"a-0", b"a-1", b"b-0", b"a-2", b"b-1", b"b-2", b"plain-1", b"end"]}


def test_write_txn_markers_is_advertised_at_kafka_41s_version(raw):
    resp = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[ApiKey.WRITE_TXN_MARKERS] == (1, 1)


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_committed_records_are_read_and_aborted_ones_only_read_uncommitted(shared, raw, consumer):
    topic = unique("txn")
    create_topic(shared.bootstrap, topic)
    values = two_transactions(raw, topic)
    read = CONSUMERS[consumer]
    committed = read(shared.bootstrap, topic, READ_COMMITTED, until=b"end")
    uncommitted = read(shared.bootstrap, topic, READ_UNCOMMITTED, until=b"end")
    assert [v for _, v in committed] == values["committed"]
    assert [v for _, v in uncommitted] == values["all"]
    # Two markers took offsets 7 and 8: no application ever sees them.
    assert [o for o, _ in uncommitted] == [0, 1, 2, 3, 4, 5, 6, 9, 10]
    assert list_offset(raw, topic, 1) == list_offset(raw, topic, 0) == 11


def test_an_open_transaction_holds_back_read_committed_until_its_commit(shared, raw):
    topic = unique("lso")
    create_topic(shared.bootstrap, topic)
    pid, epoch = init_producer_id(raw)
    assert produce(raw, topic, [b"before"]).error_code == NONE
    assert txn(raw, topic, [b"t-0", b"t-1"], pid, epoch, 0).error_code == NONE
    assert produce(raw, topic, [b"after"]).error_code == NONE
    assert list_offset(raw, topic, 0) == 4 and list_offset(raw, topic, 1) == 1
    # A read_committed Fetch stops at the LSO and says so; read_uncommitted goes on to the high watermark.
    for isolation, records, lso in ((1, 1, 1), (0, 4, 1)):
        got = fetch(raw, topic, 0, isolation)
        assert (got.high_watermark, got.last_stable_offset) == (4, lso)
        assert count_records(got.records) == records
    assert [v for _, v in consume_confluent(shared.bootstrap, topic, READ_UNCOMMITTED, until=b"after")] == [
        b"before", b"t-0", b"t-1", b"after"]
    # Within the open transaction the records produced after it are held back too.
    assert produce(raw, topic, [b"end"]).error_code == NONE
    assert write_markers(raw, marker(pid, epoch, True, topic)) == {(pid, topic, 0): NONE}
    assert list_offset(raw, topic, 1) == 6
    assert [v for _, v in consume_confluent(shared.bootstrap, topic, READ_COMMITTED, until=b"end")] == [
        b"before", b"t-0", b"t-1", b"after", b"end"]


def fetch(raw: RawClient, topic: str, offset: int, isolation: int):
    r = raw.request(ApiKey.FETCH, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                       "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                                       "topics": [{"topic": topic, "partitions": [
                                           {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                            "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                       "forgotten_topics_data": [], "rack_id": ""})
    p = r.responses[0].partitions[0]
    assert p.error_code == NONE, p
    return p


def count_records(records) -> int:
    from tierlog.records import iter_records
    return sum(1 for _ in iter_records(records or b""))


def test_read_committed_fetch_lists_the_aborted_transactions(shared, raw):
    topic = unique("aborted")
    create_topic(shared.bootstrap, topic)
    pid, epoch = init_producer_id(raw)
    assert txn(raw, topic, [b"x"], pid, epoch, 0).error_code == 0
    assert write_markers(raw, marker(pid, epoch, False, topic)) == {(pid, topic, 0): NONE}
    committed = fetch(raw, topic, 0, 1)
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(pid, 0)]
    assert fetch(raw, topic, 0, 0).aborted_transactions is None


def test_marker_errors(shared, raw):
    topic = unique("errors")
    create_topic(shared.bootstrap, topic)
    pid, epoch = init_producer_id(raw)
    assert txn(raw, topic, [b"x"], pid, epoch, 0).error_code == 0
    # Transactional records without a transactional id: Kafka refuses the whole request, and writes nothing.
    refused = produce(raw, topic, [b"z"], producer_id=pid, epoch=epoch, sequence=1, transactional=True,
                      transactional_id=None)
    assert (refused.error_code, refused.base_offset) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    assert list_offset(raw, topic, 0) == 1
    # A plain batch of the producer while its transaction is open (Kafka's InvalidTxnStateException).
    assert produce(raw, topic, [b"y"], producer_id=pid, epoch=epoch, sequence=1).error_code == INVALID_TXN_STATE
    assert write_markers(raw, marker(pid, epoch, True, topic, coordinator_epoch=5)) == {(pid, topic, 0): NONE}
    assert write_markers(raw, marker(pid, epoch, False, topic, coordinator_epoch=4)) == {
        (pid, topic, 0): COORDINATOR_FENCED}
    # A bumped epoch (the coordinator fences the producer, KIP-360/KIP-890) makes the old one stale.
    assert write_markers(raw, marker(pid, epoch + 1, False, topic, coordinator_epoch=5)) == {(pid, topic, 0): NONE}
    assert write_markers(raw, marker(pid, epoch, False, topic, coordinator_epoch=5)) == {
        (pid, topic, 0): INVALID_PRODUCER_EPOCH}
    end = list_offset(raw, topic, 0)
    got = write_markers(raw, marker(pid, epoch + 1, True, "no-such-topic", coordinator_epoch=5),
                        marker(pid, epoch + 1, True, topic, (0, 7), coordinator_epoch=5))
    assert got == {(pid, "no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION, (pid, topic, 0): NONE,
                   (pid, topic, 7): UNKNOWN_TOPIC_OR_PARTITION}
    assert list_offset(raw, topic, 0) == end + 1  # refused markers wrote nothing


def test_a_restart_keeps_the_open_transaction_and_the_aborted_index(start_broker):
    b = start_broker(UNVERIFIED, num_partitions=1)
    topic = unique("restart")
    create_topic(b.bootstrap, topic)
    raw = RawClient(b.bootstrap)
    aborted, ea = init_producer_id(raw)
    opened, eo = init_producer_id(raw)
    assert txn(raw, topic, [b"gone"], aborted, ea, 0).error_code == 0
    assert write_markers(raw, marker(aborted, ea, False, topic)) == {(aborted, topic, 0): NONE}
    assert produce(raw, topic, [b"kept"]).error_code == NONE
    assert txn(raw, topic, [b"open"], opened, eo, 0).error_code == 0
    assert produce(raw, topic, [b"end"]).error_code == NONE
    raw.close()
    index = b.log_dir / f"{topic}-0" / f"{0:020d}.txnindex"
    before = index.read_bytes()
    assert len(before) == 34
    for clean in (True, False):
        b.restart(clean=clean)
        after = RawClient(b.bootstrap)
        assert wait_for(lambda c=after: list_offset(c, topic, 1), 3) == 3  # the open transaction still bounds the LSO
        assert list_offset(after, topic, 0) == 5
        assert index.read_bytes() == before
        after.close()
    raw = RawClient(b.bootstrap)
    assert write_markers(raw, marker(opened, eo, True, topic)) == {(opened, topic, 0): NONE}
    raw.close()
    assert [v for _, v in consume_confluent(b.bootstrap, topic, READ_COMMITTED, until=b"end")] == [
        b"kept", b"open", b"end"]


def wait_for(read, expected, timeout: float = 30):
    """``read()`` until it returns ``expected`` (a restarted broker first answers while it loads)."""
    reads = []

    def read_expected():
        try:
            reads.append(read())
        except AssertionError:
            reads.append(None)
        return reads[-1] == expected

    with contextlib.suppress(TimedOut):  # the caller compares the last read
        wait_until(read_expected, timeout, interval=0.1, what=f"{expected!r} read")
    return reads[-1]
