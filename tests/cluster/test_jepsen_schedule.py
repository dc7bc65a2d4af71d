"""The side-by-side fault run's bookkeeping (tests/harness/jepsen/run.py): one schedule per seed for every system,
the kinds a system lacks left out, and the per-kind figures read off a history. No cluster (milliseconds)."""

from __future__ import annotations

from tests.harness.jepsen.checker import Cycle, Report
from tests.harness.jepsen.nemesis import KINDS
from tests.harness.jepsen.run import ISR_NOT_FULL, draw_schedule, figures, schedule_for
from tests.harness.jepsen.workload import Ack, History


def test_one_seed_one_schedule_for_every_system():
    first, again = draw_schedule(7, 60, KINDS, 0.3), draw_schedule(7, 60, KINDS, 0.3)
    assert first == again and first != draw_schedule(8, 60, KINDS, 0.3)
    assert any(len(c) == 2 for c in first), "a mixed cycle in 60"
    assert {k for c in first for k in c} == set(KINDS)
    assert schedule_for("kafka39", first) == first == schedule_for("tierlog", first)


def test_kraft_leaves_out_what_has_no_counterpart():
    schedule = [("zk-restart",), ("kill-leader", "zk-restart"), ("disk-full",), ("pause-leader", "kill-controller"),
                ("zk-cut",), ("partition-leader",)]
    assert schedule_for("kafka44", schedule) == [("kill-leader",), ("pause-leader", "kill-controller"),
                                                 ("partition-leader",)]


def test_figures_per_kind_of_cycle():
    h = History()
    for p, at in ((0, 1.0), (1, 1.0), (0, 2.0), (1, 6.0), (0, 9.0), (1, 9.5), (0, 14.0), (1, 14.0)):
        h.ack(Ack("p0", int(at * 10) + p, p, 0, f"p0:{at}:{p}".encode(), at))
    one = Cycle(1, ["kill-leader 1"], ["kill-leader"], 1.5, healed=4.0, settled=7.0)  # p0 waits 2.0 -> 7.0 (the settle)
    two = Cycle(2, ["kill-controller 2", "kill-leader 3"], ["kill-leader", "kill-controller"], 8.0, healed=10.0,
                settled=13.0, notes=[ISR_NOT_FULL])  # p0 waits 9.0 -> 13.0 (the settle)
    unsettled = Cycle(3, ["zk-cut 1"], ["zk-cut"], 13.5, healed=14.0)
    got = figures(Report(1, [one, two, unsettled], h), partitions=2)
    assert got == {"kill-leader": {"unavailable": [5.0], "isr_full": [3.0], "isr_not_full": []},
                   "kill-controller+kill-leader": {"unavailable": [4.0], "isr_full": [], "isr_not_full": [2]}}
