"""The history checker (tests/harness/jepsen/checker.py) on hand-made histories: each anomaly it knows is found
in a history made to hold just that one, and a clean history with several consumers passes. No cluster."""

from __future__ import annotations

from tests.harness.jepsen.checker import Report, check
from tests.harness.jepsen.workload import TXN_PREFIX, Ack, Commit, History, Txn


def v(producer: str, seq: int) -> bytes:
    return f"{producer}:{seq}".encode()


def clean_history() -> tuple[History, list[tuple[int, int, bytes]], dict[int, int]]:
    """Two producers, two partitions, every value acknowledged where the log holds it; two readers that saw
    prefixes of the log; commits that only go forward."""
    h = History()
    log: list[tuple[int, int, bytes]] = []
    nxt = {0: 0, 1: 0}
    at = 1.0
    for seq in range(6):
        for producer in ("a.0", "b.0"):
            p = seq % 2
            log.append((p, nxt[p], v(producer, seq)))
            h.ack(Ack(producer, seq, p, nxt[p], v(producer, seq), at))
            nxt[p] += 1
            at += 0.1
    h.reads["r1"] = sorted(log)
    h.reads["r2"] = [r for r in sorted(log) if r[1] < 3]
    h.commit(Commit("m0", {0: 2, 1: 1}, 3.0))
    h.commit(Commit("m1", {0: 4, 1: 6}, 4.0))
    return h, log, dict(nxt)


def checked(h: History, log, highs, committed=None) -> Report:
    return check(Report(1, [], h), log, highs, committed if committed is not None else {0: 4, 1: 6})


def kinds(report: Report) -> dict[str, int]:
    return {k: len(getattr(report, k)) for k in ("lost", "duplicated", "mismatched", "reordered",
                                                  "offset_regressions", "divergent", "txn_anomalies")
            if getattr(report, k)}


def test_a_clean_history_passes():
    h, log, highs = clean_history()
    report = checked(h, log, highs)
    assert report.ok, report.format()
    assert report.read == 12 and report.indeterminate_read == 0


def test_a_lost_acknowledged_write():
    h, log, highs = clean_history()
    i = log.index((0, 5, v("b.0", 4)))
    log[i] = (0, 5, v("c.0", 0))  # truncated by a leader change, the offset written again by another producer
    report = checked(h, log, highs)
    # r1 had read the lost value at that offset: it diverges from the final read too
    assert kinds(report) == {"lost": 1, "divergent": 1}
    assert report.lost[0].startswith("b.0:4 acknowledged at partition 0 offset 5 at ")
    assert report.lost[0].endswith("that offset now holds c.0:0 (not acknowledged) (high watermark 6)")
    assert report.divergent == ["partition 0 offset 5: r1 read b.0:4, the final read c.0:0"]
    del h.reads["r1"]
    assert kinds(checked(h, log, highs)) == {"lost": 1}


def test_a_duplicate_under_idempotence():
    h, log, highs = clean_history()
    log.append((0, highs[0], v("a.0", 4)))  # a retry the broker wrote twice
    highs[0] += 1
    report = checked(h, log, highs)
    assert kinds(report) == {"duplicated": 1, "reordered": 1}  # the second copy also comes after a.0:4's successors
    assert report.duplicated[0].startswith("a.0:4 read 2 times at 0/")


def test_a_producer_reordered_within_a_partition():
    h, log, highs = clean_history()
    # a.0's seq 0 and 2 (partition 0, offsets 0 and 2) swap places in the log, and the acks say so
    log = [(p, o, {(0, 0): v("a.0", 2), (0, 2): v("a.0", 0)}.get((p, o), val)) for p, o, val in log]
    h.acks = [Ack(a.producer, a.seq, a.partition, {0: 2, 2: 0}[a.offset] if (a.producer, a.partition) == ("a.0", 0)
                  and a.offset in (0, 2) else a.offset, a.value, a.at) for a in h.acks]
    h.reads = {}
    report = checked(h, log, highs)
    assert kinds(report) == {"reordered": 2}  # in the acknowledgements and in the log
    assert any("the log holds seq 2 at offset 0 before seq 0 at offset 2" in r for r in report.reordered)


def test_two_consumers_saw_different_values_at_one_offset():
    h, log, highs = clean_history()
    h.reads["r2"][1] = (0, 1, v("z.0", 0))  # r2 read a value at 0/1 that r1 and the final read do not hold
    report = checked(h, log, highs)
    assert kinds(report) == {"divergent": 1}
    assert report.divergent[0] == "partition 0 offset 1: r2 read z.0:0, the final read b.0:0"


def test_a_consumer_read_records_later_truncated():
    h, log, highs = clean_history()
    h.reads["r1"].append((1, highs[1], v("c.0", 0)))  # read past what the final log holds
    report = checked(h, log, highs)
    assert kinds(report) == {"divergent": 1}
    assert "which the final log does not reach (high watermark 6)" in report.divergent[0]


def test_a_consumer_read_a_producer_out_of_order():
    h, log, highs = clean_history()
    r = h.reads["r1"]
    i, j = r.index((0, 0, v("a.0", 0))), r.index((0, 2, v("a.0", 2)))
    # r1 read a.0's values of partition 0 in the wrong order at increasing offsets: it saw another log
    r[i], r[j] = (0, 0, v("a.0", 2)), (0, 2, v("a.0", 0))
    report = checked(h, log, highs)
    assert report.reordered == ["r1 read a.0 partition 0 seq 0 at offset 2 after seq 2 at offset 0"]
    assert len(report.divergent) == 2  # and both offsets disagree with the final read


def test_a_consumer_rewinding_is_not_a_reorder():
    h, log, highs = clean_history()
    h.reads["r2"] += [r for r in sorted(log) if r[1] < 2]  # read again from the start (an offset reset)
    assert checked(h, log, highs).ok


def test_committed_offsets_moving_backwards():
    h, log, highs = clean_history()
    h.commit(Commit("m0", {1: 5}, 5.0))  # confirmed below m1's 6 of partition 1
    report = checked(h, log, highs, {0: 4, 1: 6})
    assert kinds(report) == {"offset_regressions": 1}
    assert report.offset_regressions[0].startswith("partition 1: m0 had commit 5 confirmed at 5.0s")
    h.commits.pop()
    report = checked(h, log, highs, {0: 3, 1: 6})  # the committed offset read back went back
    assert report.offset_regressions == ["partition 0: committed offset read back is 3, but 4 was confirmed at "
                                         "4.0s (before the first fault)"]


def test_every_anomaly_at_once_is_counted():
    h, log, highs = clean_history()
    log.pop(5)
    log.append((0, highs[0], v("a.0", 4)))
    highs[0] += 1
    h.reads["r2"][1] = (0, 1, v("z.0", 0))
    h.commit(Commit("m0", {1: 5}, 5.0))
    report = checked(h, log, highs)
    assert set(kinds(report)) >= {"lost", "duplicated", "divergent", "offset_regressions"}
    assert not report.ok and "RESULT: FAILED" in report.format() and "divergent reads: " in report.format()


def with_transactions(outcomes: list[str]) -> tuple[History, list[tuple[int, int, bytes]], dict[int, int]]:
    """The clean history plus one transaction per outcome, each writing one value to each partition after the
    plain values; the log holds every value of the committed ones (an aborted one's records are in the log too,
    but a read_committed read skips them, so the final read does not hold them)."""
    h, log, highs = clean_history()
    for n, outcome in enumerate(outcomes):
        values = [(p, TXN_PREFIX + f"t.0/{n}/{p}".encode()) for p in (0, 1)]
        t = Txn(f"t.0/{n}", values, began=5.0 + n, committing=None if outcome == "aborted" else 5.5 + n,
                outcome=outcome, ended=5.9 + n)
        h.txn(t)
        for p, value in values:
            if outcome == "committed":
                log.append((p, highs[p], value))
            highs[p] += 1  # the record, or the aborted one, and its marker take offsets either way
            highs[p] += 1
    return h, log, highs


def test_transactions_committed_and_aborted_pass():
    h, log, highs = with_transactions(["committed", "aborted", "committed"])
    h.txn_first_read[TXN_PREFIX + b"t.0/0/0"] = (5.7, "r1")  # read once its commit had begun
    report = checked(h, log, highs)
    assert report.ok, report.format()
    assert "transactions: aborted 1, committed 2" in report.format()
    assert report.indeterminate_read == 0


def test_an_aborted_transaction_read_by_read_committed():
    h, log, highs = with_transactions(["aborted"])
    h.txn_first_read[TXN_PREFIX + b"t.0/0/1"] = (5.4, "r2")
    report = checked(h, log, highs)
    assert kinds(report) == {"txn_anomalies": 1}
    assert report.txn_anomalies[0].endswith("aborted, yet read by r2")


def test_a_committed_transaction_partly_visible():
    h, log, highs = with_transactions(["committed"])
    log.remove((1, 6, TXN_PREFIX + b"t.0/0/1"))
    report = checked(h, log, highs)
    assert kinds(report) == {"txn_anomalies": 1}
    assert report.txn_anomalies[0].endswith("committed, 1 of 2 values in the final read")


def test_a_transaction_of_unknown_outcome_is_all_or_nothing():
    h, log, highs = with_transactions(["unknown", "unknown"])
    assert checked(h, log, highs).ok  # none visible: it was aborted
    log.append((0, 6, TXN_PREFIX + b"t.0/0/0"))
    log.append((1, 6, TXN_PREFIX + b"t.0/0/1"))
    assert checked(h, log, highs).ok  # all visible: it was committed
    log.append((0, 8, TXN_PREFIX + b"t.0/1/0"))  # half of the second one
    report = checked(h, log, highs)
    assert kinds(report) == {"txn_anomalies": 1}
    assert "t.0/1 (unknown" in report.txn_anomalies[0] and report.txn_anomalies[0].endswith("1 of 2 values in "
                                                                                          "the final read")


def test_a_value_read_before_its_commit_began():
    h, log, highs = with_transactions(["committed"])
    h.txn_first_read[TXN_PREFIX + b"t.0/0/0"] = (5.2, "r1")  # the commit began at 5.5 s: above the LSO
    report = checked(h, log, highs)
    assert kinds(report) == {"txn_anomalies": 1}
    assert "r1 read T/t.0/0/0 at 5.2s, before its commit began at 5.5s" in report.txn_anomalies[0]
