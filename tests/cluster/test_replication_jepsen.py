"""A short Jepsen-style run against replication: three brokers, a topic with three replicas and
min.insync.replicas=2, idempotent producers (acks=all) and a committing consumer group, through five fault
cycles: a leader SIGKILLed, a leader paused past its ZooKeeper session (it must acknowledge nothing once
replaced), a leader cut from its followers while ZooKeeper restarts, the group's coordinator paused past its
session (it must confirm no commit it cannot keep), and the controller SIGKILLed. Then every
partition is read back: no acknowledged write lost, duplicated, misplaced or out of order, no committed offset
gone back, and writes acknowledged on every partition after each heal (so the run cannot pass by doing
nothing). tests/harness/jepsen has the machinery; scripts/jepsen_replication.py is the long run.

The run has a cluster and a ZooKeeper of its own (a ZooKeeper restart touches no other test) and no module
fixture, so under pytest-xdist it runs beside the other tests.
"""

from __future__ import annotations

import pytest

from tests.harness.jepsen.checker import BatchProducer, Cycle, Report, check
from tests.harness.jepsen.run import Settings, run
from tests.harness.jepsen.workload import Ack, Commit, History

SCHEDULE = [("kill-leader",), ("pause-leader",), ("partition-leader", "zk-restart"), ("pause-coordinator",),
            ("kill-controller",)]


def test_the_checker_finds_every_kind_of_violation():
    """A made-up history against a made-up log: the checker sees each violation, and a clean log passes."""
    h = History()
    for seq, (p, o) in enumerate([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]):
        h.ack(Ack("p0.0", seq, p, o, f"p0.0:{seq}".encode(), 1.0 + seq))
    h.ack(Ack("p1.0", 0, 0, -1, b"p1.0:0", 2.0))  # an implicit acknowledgement: no offset
    h.commit(Commit("m0", {0: 3}, 5.0))
    h.commit(Commit("m1", {0: 2}, 6.0))  # a confirmed commit below an earlier one
    cycles = [Cycle(1, ["kill-leader 2"], ["kill-leader"], 0.5, healed=2.5, settled=3.0)]
    clean = [(0, 0, b"p0.0:0"), (0, 1, b"p0.0:1"), (0, 2, b"p0.0:2"), (0, 3, b"p1.0:0"), (1, 0, b"p0.0:3"),
             (1, 1, b"p0.0:4")]
    report = check(Report(1, cycles, h), clean, {0: 4, 1: 2}, {0: 3, 1: -1001})
    assert report.offset_regressions and not (report.lost or report.duplicated or report.reordered
                                              or report.mismatched)
    assert report.offset_regressions[0].startswith("partition 0: m1 had commit 2 confirmed at 6.0s")
    assert "after m0 had 3 confirmed at 5.0s" in report.offset_regressions[0] and len(report.offsetless) == 1
    h.commits.pop()
    assert check(Report(1, cycles, h), clean, {0: 4, 1: 2}, {0: 3, 1: -1001}).ok

    broken = [(0, 0, b"p0.0:0"), (0, 1, b"p0.0:2"), (0, 2, b"p0.0:1"), (0, 3, b"p0.0:0"), (1, 0, b"p1.0:0")]
    report = check(Report(1, cycles, h), broken, {0: 4, 1: 1}, {0: 2})
    assert [line.split()[0] for line in report.lost] == ["p0.0:3", "p0.0:4"]
    assert "at 4.0s (after cycle 1 (kill-leader 2)); that offset now holds p1.0:0" in report.lost[0]
    assert [line.split()[0] for line in report.duplicated] == ["p0.0:0"]
    assert len(report.mismatched) == 2  # p0.0:1 and :2 swapped places (p1.0:0 has no offset to compare)...
    assert report.reordered  # ...and the log holds p0.0's values out of order
    assert report.offset_regressions == ["partition 0: committed offset read back is 2, but 3 was confirmed "
                                         "at 5.0s (after cycle 1 (kill-leader 2))"]
    assert not report.ok and report.violations == len(report.lost) + len(report.duplicated) + len(
        report.mismatched) + len(report.reordered) + len(report.offset_regressions)


def test_a_batch_the_client_sent_again_under_a_new_epoch_is_listed_apart_from_duplicates():
    """Seed 41: librdkafka bumped its epoch after an OUT_OF_ORDER_SEQUENCE_NUMBER on another partition and sent
    again, as epoch 2 sequence 0, a batch the broker had written as epoch 1: idempotence (per producer id and
    epoch) cannot recognise it. The same value twice under one epoch stays a duplicate."""
    h = History()
    for seq, o in ((0, 0), (1, 1), (2, 3)):
        h.ack(Ack("p0.0", seq, 0, o, f"p0.0:{seq}".encode(), 1.0 + seq))
    cycles = [Cycle(1, ["pause-leader 3"], ["pause-leader"], 0.5, healed=2.5, settled=3.0)]
    log = [(0, 0, b"p0.0:0"), (0, 1, b"p0.0:1"), (0, 2, b"p0.0:2"), (0, 3, b"p0.0:2"), (0, 4, b"p0.0:1")]
    h.reads["r0"] = list(log)

    def producers(epochs):
        return lambda wanted: {(0, o): BatchProducer(1, epochs[o], o) for o in wanted[0]}
    report = check(Report(1, cycles, h), log, {0: 5}, {}, producers({1: 1, 2: 1, 3: 1, 4: 2}))
    assert [line.split()[0] for line in report.resent] == ["p0.0:1"]
    assert [line.split()[0] for line in report.duplicated] == ["p0.0:2"]  # offsets 2 and 3, both epoch 1
    # the re-sent copy at offset 4 (seq 1 after seq 2) is left out of the order checks; the duplicate is not
    assert report.reordered and not any("offset 4" in line for line in report.reordered) and not report.ok
    report = check(Report(1, cycles, h), log, {0: 5}, {}, producers({1: 1, 2: 1, 3: 2, 4: 2}))
    assert len(report.resent) == 2 and report.ok


@pytest.mark.slow
def test_acknowledged_writes_and_committed_offsets_survive_leader_faults(tmp_path):
    settings = Settings(seed=20261126, schedule=SCHEDULE, minutes=2.5, partitions=3, producers=2, members=2,
                        txn_producers=1, readers=1, produce_interval=0.02, settle_timeout=60, progress_timeout=30)
    report = run(tmp_path, settings)
    print("\n" + report.format())
    assert [c.kinds for c in report.cycles] == [list(kinds) for kinds in SCHEDULE], "a fault was left out"
    for cycle in report.cycles:
        assert set(cycle.acks_after_heal) == set(range(settings.partitions)), \
            f"{cycle.label}: writes acknowledged after the heal per partition: {cycle.acks_after_heal}"
    assert not report.liveness, report.liveness
    assert not report.incomplete, report.incomplete
    assert not report.lost, report.lost[:10]
    assert not report.duplicated, report.duplicated[:10]
    assert not report.reordered, report.reordered[:10]
    assert not report.mismatched, report.mismatched[:10]
    assert not report.offset_regressions, report.offset_regressions[:10]
    assert report.history.commits, "the group never committed"
    assert not report.txn_anomalies, report.txn_anomalies[:10]
    outcomes = {t.outcome for t in report.history.txns}
    assert {"committed", "aborted"} <= outcomes, f"transactions: {outcomes}"
    assert not report.divergent, report.divergent[:10]
