"""Idempotent producers: sequence checks, duplicates, epochs, snapshots, last stable offset."""

import struct

import crc32c
import pytest

from tests.storage.storagelib import batch, crash
from tierlog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from tierlog.records import build_batch


def pbatch(seq, n=2, pid=1000, epoch=0, **kw):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def test_retried_batch_is_answered_with_its_original_offsets(make_log):
    lg = make_log()
    first = lg.append_as_leader(pbatch(0))
    lg.append_as_leader(pbatch(2))
    again = lg.append_as_leader(pbatch(0))
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert lg.log_end_offset == 4


def test_sequence_gaps_and_old_epochs_are_refused(make_log):
    lg = make_log()
    lg.append_as_leader(pbatch(0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(5))
    lg.append_as_leader(pbatch(0, epoch=1))  # a bumped epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(pbatch(2, epoch=0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(7, epoch=2))
    assert lg.log_end_offset == 4


def test_producer_state_survives_clean_and_unclean_restarts(make_log):
    lg = make_log(segment_bytes=len(pbatch(0)) * 2)
    for seq in range(0, 10, 2):
        lg.append_as_leader(pbatch(seq))
    lg.close()
    lg2 = make_log("t-0")
    assert lg2.append_as_leader(pbatch(8)).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg2.append_as_leader(pbatch(11))
    lg2.append_as_leader(pbatch(10))
    crash(lg2)
    # Unclean: state comes from the last roll snapshot plus a replay of the batches after it.
    lg3 = make_log("t-0", clean_shutdown=False)
    assert lg3.append_as_leader(pbatch(10)).duplicate
    assert lg3.append_as_leader(pbatch(12)).first_offset == 12


def test_snapshot_file_is_kafka_producer_snapshot_v1(make_log):
    lg = make_log()
    lg.append_as_leader(pbatch(0, n=3, pid=77, epoch=4, ts=5555))
    lg.close()
    with open(lg.dir + "/00000000000000000003.snapshot", "rb") as f:
        data = f.read()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (77, 4, 2, 2, 2, 5555, -1, -1)


def test_ongoing_transaction_holds_back_the_last_stable_offset(make_log):
    lg = make_log()
    lg.append_as_leader(batch(2))
    lg.append_as_leader(pbatch(0, is_transactional=True))
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.high_watermark == 4 and lg.last_stable_offset == 2
    assert lg.read(0, 10_000, isolation="committed").size == len(batch(2))
    # A commit marker (control batch, written by the coordinator path) ends the transaction.
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [], 1)], producer_id=1000,
                         producer_epoch=0, is_transactional=True, is_control=True, base_offset=4)
    lg.append_as_follower(marker)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 5
