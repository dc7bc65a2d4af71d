"""Transactions on the partition: markers, the last stable offset, the aborted-transaction index (.txnindex)."""

import os
import struct

import pytest

from tests.storage.storagelib import batch, crash
from tierlog.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from tierlog.records import decode_batch
from tierlog.records.control import ABORT, COMMIT, parse_end_txn_marker
from tierlog.storage.producer_state import SENTINEL

ENTRY = struct.Struct(">hqqqq")


def txn(pid, seq, n=2, epoch=0):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def txnindex(lg, base=0):
    return os.path.join(lg.dir, f"{base:020d}.txnindex")


def entries(lg, base=0):
    with open(txnindex(lg, base), "rb") as f:
        data = f.read()
    assert len(data) % 34 == 0
    return [ENTRY.unpack_from(data, i) for i in range(0, len(data), 34)]


def committed(lg):
    lg.update_high_watermark(lg.log_end_offset)
    return lg.last_stable_offset


def test_markers_are_control_batches_in_kafkas_format(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0))
    info = lg.append_txn_marker(7, 0, coordinator_epoch=3, commit=True, leader_epoch=5)
    assert info.first_offset == info.last_offset == 2
    seg, pos, h = list(lg.batches(2))[0]
    assert h.is_control and h.is_transactional and h.producer_id == 7 and h.base_sequence == -1
    assert h.partition_leader_epoch == 5 and h.records_count == 1
    _, records = decode_batch(seg_bytes(seg, pos, h.size))
    assert records[0].key == struct.pack(">hh", 0, COMMIT) and records[0].value == struct.pack(">hi", 0, 3)
    assert parse_end_txn_marker(records[0]) == (COMMIT, 3)
    lg.append_as_leader(txn(7, 2))
    lg.append_txn_marker(7, 0, coordinator_epoch=3, commit=False)
    _, pos, h = list(lg.batches(5))[0]
    assert parse_end_txn_marker(decode_batch(seg_bytes(seg, pos, h.size))[1][0]) == (ABORT, 3)


def seg_bytes(seg, pos, size):
    return os.pread(seg.fd, size, pos)


def test_open_transaction_holds_back_the_lso_until_its_marker_is_replicated(make_log):
    lg = make_log()
    lg.append_as_leader(batch(2))
    lg.append_as_leader(txn(7, 0))
    assert committed(lg) == 2
    lg.append_as_leader(batch(1))
    assert committed(lg) == 2
    lg.append_txn_marker(7, 0, 0, commit=True)  # offset 5
    assert lg.high_watermark == 5 and lg.last_stable_offset == 2  # the marker is not replicated yet
    lg.update_high_watermark(6)
    assert lg.last_stable_offset == 6
    assert not os.path.exists(txnindex(lg))  # a commit writes no index entry; the file is created lazily


def test_abort_writes_a_34_byte_entry_with_the_lso_of_the_oldest_other_open_transaction(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0))  # 0-1
    lg.append_as_leader(txn(8, 0))  # 2-3
    lg.append_txn_marker(7, 0, 0, commit=False)  # 4: producer 8 still open from 2
    lg.append_as_leader(txn(9, 0))  # 5-6
    lg.append_txn_marker(9, 0, 0, commit=False)  # 7: producer 8 still open from 2
    lg.append_txn_marker(8, 0, 0, commit=False)  # 8: nothing else open
    assert entries(lg) == [(0, 7, 0, 4, 2), (0, 9, 5, 7, 2), (0, 8, 2, 8, 9)]
    assert os.path.getsize(txnindex(lg)) == 3 * 34
    assert committed(lg) == 9
    # A marker without an open transaction changes neither the index nor the LSO.
    lg.append_txn_marker(8, 0, 0, commit=False)
    assert len(entries(lg)) == 3 and committed(lg) == 10


def test_read_committed_returns_the_aborted_transactions_of_the_range(make_log):
    lg = make_log(segment_bytes=400)
    lg.append_as_leader(txn(7, 0))
    lg.append_txn_marker(7, 0, 0, commit=False)
    lg.append_as_leader(txn(8, 0))
    lg.append_txn_marker(8, 0, 0, commit=True)
    lg.append_as_leader(txn(9, 0))
    lg.append_txn_marker(9, 0, 0, commit=False)
    committed(lg)
    assert len(lg.segments) > 1  # the entries live in the segments holding their markers
    got = lg.read(0, 1 << 20, isolation="committed")
    assert got.aborted_transactions == [(7, 0)]  # the read stops at the first segment's end
    everything = []
    offset = 0
    while offset < lg.log_end_offset:
        got = lg.read(offset, 1 << 20, isolation="committed")
        everything += got.aborted_transactions
        offset = list(lg.batches(offset))[-1][2].last_offset + 1 if got.size == 0 else _next(lg, got)
    assert everything == [(7, 0), (9, 6)]
    assert lg.read(0, 1 << 20).aborted_transactions is None  # read_uncommitted gets none
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == ([(7, 0), (9, 6)], True)


def _next(lg, got):
    from tierlog.records import iter_batches
    data = got.read()
    return [h for _, h in iter_batches(data)][-1].last_offset + 1


def test_stale_producer_and_coordinator_epochs_are_refused_and_write_nothing(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0, epoch=2))
    lg.append_txn_marker(7, 2, coordinator_epoch=4, commit=True)
    lg.append_as_leader(txn(7, 2, epoch=2))
    end = lg.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        lg.append_txn_marker(7, 1, coordinator_epoch=4, commit=False)
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_txn_marker(7, 2, coordinator_epoch=3, commit=False)
    assert lg.log_end_offset == end
    lg.append_txn_marker(7, 3, coordinator_epoch=5, commit=False)  # a newer producer epoch (KIP-890 bump)
    assert entries(lg) == [(0, 7, 3, 5, 6)]


def test_a_plain_batch_during_an_open_transaction_is_invalid_txn_state(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0))
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(batch(1, producer_id=7, producer_epoch=0, base_sequence=2))


def test_clean_restart_keeps_the_open_transaction_and_the_index(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0))
    lg.append_txn_marker(7, 0, coordinator_epoch=2, commit=False)
    lg.append_as_leader(batch(1))
    lg.append_as_leader(txn(8, 0))  # open at 4
    assert committed(lg) == 4
    before = entries(lg)
    lg.close()
    lg = make_log()
    assert lg.log_end_offset == 6 and lg.last_stable_offset == 4
    assert entries(lg) == before
    assert lg.producer_state.producers[7].coordinator_epoch == 2
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_txn_marker(7, 0, coordinator_epoch=1, commit=True)
    lg.append_txn_marker(8, 0, 0, commit=False)
    assert committed(lg) == 7 and entries(lg)[-1] == (0, 8, 4, 6, 7)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "stale", "torn after a clean shutdown"])
def test_recovery_rebuilds_the_index_of_an_unflushed_tail(make_log, damage):
    lg = make_log(segment_bytes=300)
    for pid in range(7, 12):
        lg.append_as_leader(txn(pid, 0))
        lg.append_txn_marker(pid, 0, 0, commit=pid % 2 == 0)
    lg.append_as_leader(txn(20, 0))  # still open
    assert len(lg.segments) > 2
    expected = {seg.base_offset: entries(lg, seg.base_offset) for seg in lg.segments
                if os.path.exists(txnindex(lg, seg.base_offset))}
    assert sum(len(e) for e in expected.values()) == 3
    lso = committed(lg)
    clean = damage.endswith("clean shutdown")
    if clean:
        lg.close()
    else:
        lg.flush()
        crash(lg)
    for base in expected:
        path = txnindex(lg, base)
        if clean:
            os.truncate(path, os.path.getsize(path) - 1)  # the sanity check sends the segment to recovery
        elif damage == "deleted":
            os.remove(path)
        elif damage == "truncated":
            os.truncate(path, 20)
        else:
            with open(path, "ab") as f:
                f.write(ENTRY.pack(0, 99, 1, 2, 3))
    lg = make_log(clean_shutdown=clean, recovery_point=0, segment_bytes=300)
    got = {seg.base_offset: entries(lg, seg.base_offset) for seg in lg.segments
           if os.path.exists(txnindex(lg, seg.base_offset)) and os.path.getsize(txnindex(lg, seg.base_offset))}
    assert got == expected
    assert lg.last_stable_offset == lso


def test_truncation_and_deletion_take_the_index_along(make_log):
    lg = make_log(segment_bytes=300)
    for pid in range(7, 11):
        lg.append_as_leader(txn(pid, 0))
        lg.append_txn_marker(pid, 0, 0, commit=False)
    bases = [seg.base_offset for seg in lg.segments if os.path.exists(txnindex(lg, seg.base_offset))]
    last = lg.segments[-1].base_offset
    lg.update_high_watermark(lg.log_end_offset)
    lg.truncate_to(lg.log_end_offset - 1)  # drops the last abort marker and its entry
    assert all(e[3] < lg.log_end_offset for e in entries(lg, last)) if os.path.exists(txnindex(lg, last)) else True
    assert lg.collect_aborted_transactions(0, lg.log_end_offset)[0] == [(7, 0), (8, 3), (9, 6)]
    assert lg.last_stable_offset == 9  # producer 10's transaction is open again
    lg.update_high_watermark(lg.log_end_offset)
    lg.maybe_increment_log_start_offset(lg.high_watermark)
    lg.delete_expired_files(force=True)
    gone = [b for b in bases if b < lg.segments[0].base_offset]
    assert gone and not any(os.path.exists(txnindex(lg, b)) for b in gone)
    assert not [n for n in os.listdir(lg.dir) if n.endswith(".deleted")]


def test_the_lso_never_falls_below_the_log_start_offset(make_log):
    lg = make_log()
    lg.append_as_leader(txn(7, 0))
    lg.append_as_leader(batch(3))
    assert committed(lg) == 0
    lg.maybe_increment_log_start_offset(3)  # DeleteRecords past the open transaction's start
    assert lg.last_stable_offset == 3
    assert lg.read(3, 1 << 20, isolation="committed").size == 0


# ---------------------------------------------------------------- KIP-890 part 1: the verification guard


def test_a_verified_batch_is_appended_with_its_guard_and_needs_none_afterwards(make_log):
    lg = make_log()
    guard = lg.maybe_start_transaction_verification(7, 0, 0)
    assert guard is not SENTINEL
    # A second request of the same producer waiting on the same verification shares the guard.
    assert lg.maybe_start_transaction_verification(7, 0, 0) is guard
    lg.append_as_leader(txn(7, 0), verification_guard=guard)
    assert 7 not in lg.producer_state.verification_states  # cleared by the transaction's first batch
    # The transaction is open: no verification, the next batch goes in with the sentinel.
    assert lg.maybe_start_transaction_verification(7, 2, 0) is SENTINEL
    lg.append_as_leader(txn(7, 2), verification_guard=SENTINEL)
    assert lg.log_end_offset == 4


def test_a_verification_that_raced_with_an_abort_marker_cannot_open_a_transaction(make_log):
    """The ABA case Kafka's VerificationGuard closes: verification starts, the transaction is aborted (its
    marker clears the guard), a new verification starts for the producer's next transaction; the first
    answer comes back and must not let its batch in, the second's still may."""
    lg = make_log()
    lg.append_as_leader(txn(7, 0))  # a transaction open here (appended unverified)
    stale = lg.maybe_start_transaction_verification(7, 2, 1)  # a newer epoch's first batch, not yet verified
    lg.append_txn_marker(7, 1, coordinator_epoch=0, commit=False)
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(txn(7, 0, epoch=1), verification_guard=stale)
    fresh = lg.maybe_start_transaction_verification(7, 0, 1)
    assert fresh is not stale
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(txn(7, 0, epoch=1), verification_guard=stale)
    lg.append_as_leader(txn(7, 0, epoch=1), verification_guard=fresh)
    assert lg.producer_state.has_ongoing_transaction(7, 1)


def test_a_batch_of_a_closed_transaction_is_refused_without_a_guard(make_log):
    """A request that found the transaction open (sentinel guard) and waited on other partitions' verification
    meanwhile: its marker arrived, so the batch would open a transaction nobody verified."""
    lg = make_log()
    lg.append_as_leader(txn(7, 0))
    assert lg.maybe_start_transaction_verification(7, 2, 0) is SENTINEL
    lg.append_txn_marker(7, 0, coordinator_epoch=0, commit=True)
    end = lg.log_end_offset
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(txn(7, 2), verification_guard=SENTINEL)
    assert lg.log_end_offset == end
    # Verification off (no guard passed): appended, as Kafka with transaction.partition.verification.enable=false.
    lg.append_as_leader(txn(7, 2))
    assert lg.log_end_offset == end + 2


def test_an_unused_verification_expires_with_the_producer_ids(make_log):
    lg = make_log()
    lg.maybe_start_transaction_verification(9, 0, 0)
    started = lg.producer_state.verification_states[9].timestamp_ms
    lg.producer_state.remove_expired(started + 999, 1000)
    assert 9 in lg.producer_state.verification_states
    lg.producer_state.remove_expired(started + 1000, 1000)
    assert 9 not in lg.producer_state.verification_states
