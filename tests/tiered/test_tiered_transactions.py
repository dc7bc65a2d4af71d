"""Transactions and the remote tier: a tiered topic with small segments holds committed and aborted transactions
(markers written with WriteTxnMarkers, as the transaction coordinator will); once the segments are uploaded
with their ``.txnindex`` and deleted locally, read_committed consumers reading from the earliest offset (so
from the remote tier) still never see an aborted record, and read_uncommitted ones see every record."""

from __future__ import annotations

import pytest

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.tiered import tier_status, tiered_settings, wait_for
from tests.harness.transactions import (
    CONSUMERS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNVERIFIED,
    init_producer_id,
    marker,
    produce,
    write_markers,
)

TOPIC = {"remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """One tiered broker and a topic whose transactions are all in the remote tier; the values by fate."""
    from tests.harness.broker import BrokerProcess
    root = tmp_path_factory.mktemp("tiered-txn")
    b = BrokerProcess(root / "logs", {**tiered_settings(root), **UNVERIFIED}).start()
    topic = unique("txn")
    create_topic(b.bootstrap, topic, configs=TOPIC)
    raw = RawClient(b.bootstrap)
    committed: list[bytes] = []
    everything: list[bytes] = []
    for i in range(24):
        pid, epoch = init_producer_id(raw)
        values = [b"t%02d-%d-" % (i, j) + b"x" * 200 for j in range(3)]
        assert produce(raw, topic, values, producer_id=pid, epoch=epoch, sequence=0,
                       transactional=True).error_code == 0
        plain = b"plain-%02d" % i  # after the transaction's data, before its marker
        assert produce(raw, topic, [plain]).error_code == 0
        commit = i % 3 != 1
        assert write_markers(raw, marker(pid, epoch, commit, topic)) == {(pid, topic, 0): 0}
        everything += values + [plain]
        committed += (values if commit else []) + [plain]
    assert produce(raw, topic, [b"end"]).error_code == 0
    raw.close()
    wait_for(lambda: (p := tier_status(b, topic)["partitions"][0])["copy_lag_segments"] == 0
             and p["local_log_start_offset"] > 60, "the transactions to be tiered and deleted locally", timeout=120)
    yield b, topic, committed + [b"end"], everything + [b"end"]
    b.stop()


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_read_committed_from_the_remote_tier_skips_aborted_transactions(tiered, consumer):
    b, topic, committed, everything = tiered
    read = CONSUMERS[consumer]
    assert [v for _, v in read(b.bootstrap, topic, READ_COMMITTED, until=b"end")] == committed
    assert [v for _, v in read(b.bootstrap, topic, READ_UNCOMMITTED, until=b"end")] == everything


def test_an_abort_whose_marker_is_still_only_local_hides_remote_records(tmp_path):
    """A transaction spanning several segments, aborted by a marker in the active segment: its data is uploaded
    (and deleted locally) but its .txnindex entry is still local, so the remote reader completes its search in
    the local indexes (as Kafka's RemoteLogManager does)."""
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path / "logs", {**tiered_settings(tmp_path), **UNVERIFIED}).start()
    try:
        topic = unique("local-marker")
        create_topic(b.bootstrap, topic, configs=TOPIC)
        raw = RawClient(b.bootstrap)
        pid, epoch = init_producer_id(raw)
        for i in range(8):
            assert produce(raw, topic, [b"gone-%d-%d-" % (i, j) + b"x" * 200 for j in range(3)], producer_id=pid,
                           epoch=epoch, sequence=3 * i, transactional=True).error_code == 0
        assert write_markers(raw, marker(pid, epoch, False, topic)) == {(pid, topic, 0): 0}
        assert produce(raw, topic, [b"end"]).error_code == 0
        raw.close()
        wait_for(lambda: (p := tier_status(b, topic)["partitions"][0])["copy_lag_segments"] == 0
                 and p["local_log_start_offset"] > 0, "the transaction's first segments to leave", timeout=120)
        folder = b.log_dir / f"{topic}-0"
        local = sorted(folder.glob("*.txnindex"))
        assert [p.stem for p in local] == [sorted(folder.glob("*.log"))[-1].stem]  # the entry is in the active one
        for consumer in sorted(CONSUMERS):
            got = CONSUMERS[consumer](b.bootstrap, topic, READ_COMMITTED, until=b"end")
            assert [v for _, v in got] == [b"end"], consumer
    finally:
        b.stop()
