"""A short Jepsen-style run against replication: three brokers, a topic with three replicas and
min.insync.replicas=2, idempotent producers (acks=all) and a committing consumer group, through four fault
cycles: a leader SIGKILLed, a leader paused past its ZooKeeper session (it must acknowledge nothing once
replaced), a leader cut from its followers while ZooKeeper restarts, and the controller SIGKILLed. Then every
partition is read back: no acknowledged write lost, duplicated, misplaced or out of order, no committed offset
gone back, and writes acknowledged on every partition after each heal (so the run cannot pass by doing
nothing). tests/harness/jepsen has the machinery; scripts/jepsen_replication.py is the long run.

The run has a cluster and a ZooKeeper of its own (a ZooKeeper restart touches no other test) and no module
fixture, so under pytest-xdist it runs beside the other tests.
"""

from __future__ import annotations

import pytest

from tests.harness.jepsen.run import Settings, run

pytestmark = pytest.mark.slow

SCHEDULE = [("kill-leader",), ("pause-leader",), ("partition-leader", "zk-restart"), ("kill-controller",)]


def test_acknowledged_writes_and_committed_offsets_survive_leader_faults(tmp_path):
    settings = Settings(seed=20261126, schedule=SCHEDULE, minutes=2.5, partitions=3, producers=2, members=2,
                        produce_interval=0.02, settle_timeout=60, progress_timeout=30)
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
