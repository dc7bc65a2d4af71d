"""The columnar decoder's read_committed filtering (``columnar.AbortedFilter``) on crafted batches: the same
rows as the consumer's ``CompletedFetch`` given the same aborted transactions, transactional batches of
aborted producers skipped until their ABORT marker, control batches never returned, and a run without
transactions never asking for the aborted list. No Spark needed."""

from __future__ import annotations

from tierlog.client.fetcher import CompletedFetch
from tierlog.client.types import TopicPartition
from tierlog.records import CompressionType
from tierlog.records.control import end_txn_marker_batch
from tierlog.records.record import build_batch
from tierlog.spark import columnar
from tierlog.spark.read import arrow_schema

TP = TopicPartition("t", 0)
SCHEMA = arrow_schema(False)


class _Aborted:
    def __init__(self, pid: int, first: int) -> None:
        self.producer_id, self.first_offset = pid, first


def _marker(pid: int, commit: bool, offset: int) -> bytes:
    batch = bytearray(end_txn_marker_batch(pid, 0, 0, commit, 1000))
    batch[:8] = offset.to_bytes(8, "big")  # the base offset is outside the CRC
    return bytes(batch)


def _log() -> tuple[bytes, list[tuple[int, int]], list[int]]:
    """Producers 1 and 2 interleaved with plain records: 1's first transaction aborted, its second committed;
    2's committed, then aborted with its marker past the data. The log, the aborted (pid, first offset) and
    the offsets read_committed returns."""
    out = bytearray()
    offset = 0
    kept: list[int] = []

    def batch(n: int, pid: int = -1, txn: bool = False, codec=CompressionType.NONE, keep: bool = True) -> None:
        nonlocal offset
        out.extend(build_batch([(b"k%d" % (offset + i), b"v%d" % (offset + i)) for i in range(n)], base_offset=offset,
                               producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=0 if pid >= 0 else -1, is_transactional=txn, compression=codec))
        if keep:
            kept.extend(range(offset, offset + n))
        offset += n

    def marker(pid: int, commit: bool) -> None:
        nonlocal offset
        out.extend(_marker(pid, commit, offset))
        offset += 1

    aborted = []
    batch(3)                                         # 0-2 plain
    aborted.append((1, offset))
    batch(2, 1, True, keep=False)                    # 3-4 pid 1, aborted
    batch(2, 2, True)                                # 5-6 pid 2, committed
    batch(1)                                         # 7 plain
    batch(3, 1, True, CompressionType.ZSTD, keep=False)  # 8-10 pid 1, aborted, compressed
    marker(1, False)                                 # 11 abort 1
    marker(2, True)                                  # 12 commit 2
    batch(2, 1, True, CompressionType.GZIP)          # 13-14 pid 1, a new transaction: committed
    aborted.append((2, offset))
    batch(2, 2, True, keep=False)                    # 15-16 pid 2, aborted
    batch(1)                                         # 17 plain
    marker(1, True)                                  # 18 commit 1
    marker(2, False)                                 # 19 abort 2
    batch(2)                                         # 20-21 plain
    return bytes(out), aborted, kept


def _offsets(batches) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_aborted_batches_are_skipped_as_the_consumer_does():
    data, aborted, kept = _log()
    batches, next_offset = columnar.decode(data, "t", 0, 0, 100, False, SCHEMA, columnar.AbortedFilter(aborted))
    assert next_offset == 22
    assert _offsets(batches) == kept
    cf = CompletedFetch(TP, 0, data, [_Aborted(p, f) for p, f in aborted], True)
    consumer = []
    while not cf.done:
        consumer += [r.offset for r in cf.take(1000, None, None)]
    assert consumer == kept
    # read_uncommitted: every data record, no control record
    everything, _ = columnar.decode(data, "t", 0, 0, 100, False, SCHEMA)
    assert _offsets(everything) == [o for o in range(22) if o not in (11, 12, 18, 19)]


def test_one_filter_carries_its_state_across_chunks_and_ranges():
    data, aborted, kept = _log()
    from tierlog.records import iter_batches
    bounds = list(iter_batches(data))
    f = columnar.AbortedFilter(aborted)
    got = []
    for pos, h in bounds:  # one batch per chunk, as a reader cutting chunks anywhere
        chunk = data[pos:pos + h.size]
        batches, _ = columnar.decode(chunk, "t", 0, 0, 100, False, SCHEMA, f)
        got += _offsets(batches)
    assert got == kept
    # a range starting mid-log: the aborted list is the one for [8, 17)
    batches, _ = columnar.decode(data, "t", 0, 8, 17, False, SCHEMA, columnar.AbortedFilter(aborted))
    assert _offsets(batches) == [o for o in kept if 8 <= o < 17]


def test_the_aborted_list_is_collected_only_when_a_transaction_shows_up():
    calls = []

    def load():
        calls.append(1)
        return []

    plain = build_batch([(b"k", b"v")] * 5) + build_batch([(b"k", b"v")] * 2, base_offset=5, producer_id=9,
                                                           producer_epoch=0, base_sequence=0)  # idempotent only
    batches, _ = columnar.decode(plain, "t", 0, 0, 7, False, SCHEMA, columnar.AbortedFilter(load))
    assert _offsets(batches) == list(range(7)) and calls == []
    data, aborted, kept = _log()

    def load_aborted():
        calls.append(1)
        return aborted

    batches, _ = columnar.decode(data, "t", 0, 0, 100, False, SCHEMA, columnar.AbortedFilter(load_aborted))
    assert _offsets(batches) == kept and calls == [1]
