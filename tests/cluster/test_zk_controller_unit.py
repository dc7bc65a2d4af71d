"""Parts of the ZooKeeper-mode controller on their own, without ZooKeeper: the choice of a partition's leader
and ISR when brokers die or stop (``ZkController._choose_leader``, Kafka 3.9's rules, which
tests/peer/test_replication_differential.py compares with a Kafka cluster), and how its event thread reports
an event cut short by the end of the ZooKeeper session."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from types import SimpleNamespace

from kazoo.exceptions import SessionExpiredError

from tests.harness import logcapture
from tests.harness.waiting import wait_until
from tierlog.cluster.image import PartitionImage
from tierlog.cluster.zk_controller import NO_LEADER, ZkController
from tierlog.cluster.zookeeper import FencedControllerError


def choose(leader: int, isr: tuple[int, ...], live: set[int], avoid: frozenset[int] = frozenset(),
           unclean: bool = False, replicas: tuple[int, ...] = (2, 3, 1)) -> tuple[int, tuple[int, ...]]:
    """The rule as the controller applies it to a partition with these replicas, over these live brokers."""
    controller = SimpleNamespace(image=SimpleNamespace(brokers=dict.fromkeys(live)), _shutting_down=set(),
                                 _unclean_allowed=lambda topic: unclean,
                                 _replica_offline=lambda broker_id, topic, partition: False)
    pi = PartitionImage(0, leader, 1, replicas, isr)
    return ZkController._choose_leader(controller, "t", pi, set(avoid))


def test_a_followers_death_leaves_a_live_leader_leading():
    # Leader 3 is not the first replica (2 led before a failover): Kafka keeps 3 and drops 1 from the ISR.
    assert choose(3, (2, 3, 1), live={2, 3}) == (3, (2, 3))


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    assert choose(2, (2, 3, 1), live={1, 3}) == (3, (3, 1))
    assert choose(2, (2, 1), live={1, 3}) == (1, (1,))


def test_a_stopping_leader_hands_over_to_the_first_other_isr_member():
    assert choose(3, (2, 3, 1), live={1, 2, 3}, avoid=frozenset({3})) == (2, (2, 1))


def test_no_live_isr_member_means_no_leader_unless_unclean_election_is_on():
    assert choose(2, (2,), live={1, 3}) == (NO_LEADER, (2,))
    assert choose(2, (2,), live={1, 3}, unclean=True) == (3, (3,))


def test_an_event_cut_short_by_the_end_of_the_session_is_a_warning(caplog):
    """A SIGSTOP past the session (tests/peer/test_replication_differential.py) makes the pending events fail
    with SessionExpiredError; the session's state change handles it, so no ERROR and no traceback."""
    executor = concurrent.futures.ThreadPoolExecutor(1)
    controller = SimpleNamespace(_stopped=False, _executor=executor, node_id=1)

    def _brokers_changed():
        raise SessionExpiredError()
    with caplog.at_level(logging.INFO, logger="tierlog.cluster.zk_controller"):
        ZkController._submit(controller, _brokers_changed)
        executor.shutdown(wait=True)
    [record] = logcapture.records(caplog)
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "_brokers_changed skipped: the ZooKeeper session ended (SessionExpiredError)" in record.getMessage()


def test_a_fenced_controller_says_so_in_one_info_line_and_resigns(caplog):
    """Issue 40: a controller paused past its session woke up, was fenced correctly, and logged an ERROR
    traceback (its leader rebalance ran into the fence). An expected fencing is one INFO line, whichever
    path meets it, and the controller resigns."""
    executor = concurrent.futures.ThreadPoolExecutor(1)
    controller = SimpleNamespace(_stopped=False, _executor=executor, node_id=1, fence=object(), _session_lost=False,
                                 is_active=True, config={"leader.imbalance.check.interval.seconds": 0},
                                 _imbalanced=lambda: [("t", 0)], run_election=None)
    controller._resign = lambda: setattr(controller, "is_active", False)

    def _brokers_changed():
        raise FencedControllerError("controller epoch 3 is no longer current")

    async def call(*_args):
        raise FencedControllerError("controller epoch 3 is no longer current")
    controller.call = call
    with caplog.at_level(logging.INFO, logger="tierlog.cluster.zk_controller"):
        ZkController._submit(controller, _brokers_changed)
        executor.shutdown(wait=True)
        assert not controller.is_active
        controller.is_active = True
        controller._executor = concurrent.futures.ThreadPoolExecutor(1)
        controller._submit = lambda fn: fn()
        asyncio.run(ZkController._rebalance_loop(controller))
        controller._executor.shutdown(wait=True)
    assert not controller.is_active
    records = logcapture.records(caplog)
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in records), records
    assert [m for r in records if "fenced" in (m := r.getMessage()) or "no longer" in m] == [
        "Controller 1 was fenced (controller epoch 3 is no longer current); resigning",
        "Automatic preferred replica election skipped: broker 1 is no longer the controller "
        "(FencedControllerError: controller epoch 3 is no longer current)"]


def test_an_event_whose_states_had_moved_runs_again_a_bounded_number_of_times(caplog):
    """A partition state write whose answer a lost connection swallowed leaves the controller's znode versions
    behind: the next write is refused, the states are read again (StatesReloaded) and the event runs again, from
    the reloaded states, at most EVENT_ATTEMPTS times in all."""
    from tierlog.cluster.zk_controller import EVENT_ATTEMPTS, StatesReloaded

    def controller_with(fn_fails: int):
        executor = concurrent.futures.ThreadPoolExecutor(1)
        controller = SimpleNamespace(_stopped=False, _executor=executor, node_id=1, fence=object(),
                                     _session_lost=False, runs=0)
        controller._submit = lambda fn, *args, attempt=1: ZkController._submit(controller, fn, *args, attempt=attempt)

        def _brokers_changed():
            controller.runs += 1
            if controller.runs <= fn_fails:
                raise StatesReloaded("1 partition state(s) had moved: BadVersionError")
        controller._submit(_brokers_changed)
        return controller, executor

    def settle(controller, executor, runs: int):
        wait_until(lambda: controller.runs >= runs, 10, what="the event's runs")
        executor.submit(lambda: None).result()  # after any run queued by the last one
        executor.shutdown(wait=True)

    with caplog.at_level(logging.INFO, logger="tierlog.cluster.zk_controller"):
        controller, executor = controller_with(1)
        settle(controller, executor, 2)
    assert controller.runs == 2
    assert [r.levelno for r in logcapture.records(caplog)] == [logging.INFO]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tierlog.cluster.zk_controller"):
        controller, executor = controller_with(10)
        settle(controller, executor, EVENT_ATTEMPTS)
    assert controller.runs == EVENT_ATTEMPTS
    assert logcapture.records(caplog)[-1].levelno == logging.ERROR
