"""The transaction coordinator as ``__transaction_state`` leadership moves between brokers: two coordinators
(two brokers) over the same logs (a replicated partition, as its new leader has it), each coordinating only
the partitions it leads; a state write in flight when its partition is unloaded answers NOT_COORDINATOR; the
new leader resumes the markers of a transaction it loads in PREPARE_COMMIT while the old one's stop; the
timeout timer sees only led partitions."""

from __future__ import annotations

import asyncio

import pytest

from tierlog.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator, TransactionStateStore
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC, TxnState, partition_for
from tierlog.errors import (
    NO_ERROR,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
)

from .support import Clock, LocalTopicLog

PARTITIONS = 4
NOT_COORDINATOR = NotCoordinatorError.code


class Broker:
    """One coordinator: what it leads, the epochs it marks with, the markers it was asked for (held until
    ``markers_released``) and state writes that can be held (``writes_held``) or refused (``write_error``)."""

    def __init__(self, logs: LocalTopicLog, clock: Clock, led: set[int], epoch: int) -> None:
        config = TransactionConfig(num_partitions=PARTITIONS, replication_factor=1, min_isr=1, abort_interval_ms=10**9,
                                   remove_interval_ms=10**9)
        self.led = led
        self.epoch = epoch
        self.marker_calls: list[tuple[int, int, int, bool, list]] = []
        self.markers_released = asyncio.Event()
        self.writes_held = asyncio.Event()
        self.writes_held.set()
        self.write_error = NO_ERROR
        self.next_pid = 1000 * epoch
        self.coordinator = TransactionCoordinator(
            config, TransactionStateStore(logs, config), allocate_producer_id=self.allocate,
            write_markers=self.write_markers, replicated=self.replicated,
            coordinator_epoch=lambda _p: self.epoch, wall_clock=clock)
        self.coordinator.leads = lambda p: p in self.led

    async def allocate(self) -> int:
        self.next_pid += 1
        return self.next_pid

    async def write_markers(self, pid, epoch, coordinator_epoch, commit, partitions):
        self.marker_calls.append((pid, epoch, coordinator_epoch, commit, list(partitions)))
        await self.markers_released.wait()
        return {tp: NO_ERROR for tp in partitions}

    async def replicated(self, partition: int, timeout_s: float) -> int:
        await self.writes_held.wait()
        return self.write_error


@pytest.fixture
def logs(tmp_path):
    shared = LocalTopicLog(str(tmp_path), brokers=3, topic=TXN_STATE_TOPIC)
    yield shared
    shared.close()


def txn_id_in(partition: int) -> str:
    return next(f"app-{i}" for i in range(10000) if partition_for(f"app-{i}", PARTITIONS) == partition)


async def open_transaction(b: Broker, tid: str) -> tuple[int, int]:
    code, pid, epoch = await b.coordinator.init_producer_id(tid, 60000)
    assert code == NO_ERROR
    assert await b.coordinator.add_partitions(tid, pid, epoch, [("orders", 0), ("orders", 1)]) == NO_ERROR
    return pid, epoch


def test_each_coordinator_answers_only_for_the_partitions_it_leads(logs):
    async def run():
        clock = Clock()
        a, b = Broker(logs, clock, {0, 1}, 1), Broker(logs, clock, {2, 3}, 1)
        await a.coordinator.start()
        await b.coordinator.start()
        try:
            for tid in (txn_id_in(0), txn_id_in(3)):
                mine, other = (a, b) if partition_for(tid, PARTITIONS) in a.led else (b, a)
                assert (await other.coordinator.init_producer_id(tid, 60000))[0] == NOT_COORDINATOR
                assert (await mine.coordinator.init_producer_id(tid, 60000))[0] == NO_ERROR
            # Loaded on first use (the topic was created by the first InitProducerId), never another's.
            assert 0 in a.coordinator.loaded_partitions() and set(a.coordinator.loaded_partitions()) <= a.led
            assert 3 in b.coordinator.loaded_partitions() and set(b.coordinator.loaded_partitions()) <= b.led
        finally:
            await a.coordinator.shutdown()
            await b.coordinator.shutdown()
    asyncio.run(run())


@pytest.mark.parametrize("how", ["unloaded while waiting", "leadership lost"])
def test_a_state_write_in_flight_fails_with_not_coordinator(logs, how):
    async def run():
        a = Broker(logs, Clock(), {0, 1, 2, 3}, 1)
        await a.coordinator.start()
        try:
            tid = txn_id_in(1)
            pid, epoch = await open_transaction(a, tid)
            a.writes_held.clear()
            end = asyncio.create_task(a.coordinator.end_transaction(tid, pid, epoch, commit=True))
            await asyncio.sleep(0)  # the PREPARE_COMMIT is appended and waits for replication
            assert not end.done()
            a.led.discard(1)
            a.coordinator.unload(1)
            if how == "leadership lost":
                a.write_error = NotLeaderOrFollowerError.code
            a.writes_held.set()
            assert (await end)[0] == NOT_COORDINATOR
            assert a.marker_calls == []  # no markers for a prepare that was not acknowledged here
            assert (await a.coordinator.init_producer_id(tid, 60000))[0] == NOT_COORDINATOR
        finally:
            await a.coordinator.shutdown()
    asyncio.run(run())


def test_the_new_leader_resumes_the_markers_of_a_prepared_commit(logs):
    async def run():
        clock = Clock()
        old, new = Broker(logs, clock, {0, 1, 2, 3}, 5), Broker(logs, clock, set(), 6)
        await old.coordinator.start()
        await new.coordinator.start()
        try:
            tid = txn_id_in(2)
            pid, epoch = await open_transaction(old, tid)
            assert (await old.coordinator.end_transaction(tid, pid, epoch, commit=True))[0] == NO_ERROR
            await asyncio.sleep(0)
            assert old.marker_calls == [(pid, epoch, 5, True, [("orders", 0), ("orders", 1)])]
            # Leadership of partition 2 moves: the old coordinator unloads it, the new one loads it.
            old.led.discard(2)
            old.coordinator.unload(2)
            new.led.add(2)
            new.coordinator.on_election([2])
            assert new.coordinator.describe(tid)[1].state == TxnState.PREPARE_COMMIT
            await asyncio.sleep(0)
            assert new.marker_calls == [(pid, epoch, 6, True, [("orders", 0), ("orders", 1)])]
            old.markers_released.set()  # the old round ends and writes nothing
            new.markers_released.set()
            for _ in range(100):
                if new.coordinator.describe(tid)[1].state == TxnState.COMPLETE_COMMIT:
                    break
                await asyncio.sleep(0.01)
            meta = new.coordinator.describe(tid)[1]
            assert meta.state == TxnState.COMPLETE_COMMIT and meta.pending is None
            # One COMPLETE_COMMIT in the log, written by the new coordinator: a third load sees it.
            third = Broker(logs, clock, {2}, 7)
            await third.coordinator.start()
            assert third.coordinator.describe(tid)[1].state == TxnState.COMPLETE_COMMIT
            assert third.marker_calls == []
            await third.coordinator.shutdown()
        finally:
            await old.coordinator.shutdown()
            await new.coordinator.shutdown()
    asyncio.run(run())


def test_only_the_leader_aborts_a_timed_out_transaction(logs):
    async def run():
        clock = Clock()
        old, new = Broker(logs, clock, {0, 1, 2, 3}, 1), Broker(logs, clock, set(), 2)
        new.markers_released.set()
        await old.coordinator.start()
        await new.coordinator.start()
        try:
            tid = txn_id_in(3)
            pid, epoch = await open_transaction(old, tid)
            old.led.discard(3)
            old.coordinator.unload(3)
            clock.now += 120_000
            assert await old.coordinator.abort_timed_out_transactions() == 0
            new.led.add(3)
            new.coordinator.on_election([3])
            assert await new.coordinator.abort_timed_out_transactions() == 1
            await asyncio.sleep(0.05)
            meta = new.coordinator.describe(tid)[1]
            assert meta.producer_epoch == epoch + 1  # fenced
            assert new.marker_calls and new.marker_calls[0][3] is False and old.marker_calls == []
        finally:
            await old.coordinator.shutdown()
            await new.coordinator.shutdown()
    asyncio.run(run())


def test_a_coordinator_leading_again_reloads_what_the_leader_in_between_wrote(logs):
    """Issue 40: an abort during a coordinator failover got a fatal INVALID_TXN_STATE. The leadership went to
    another broker and came back at a newer epoch without this one hearing of the change in between: its
    state from before (no transaction open) answered the abort. It is loaded again at the new epoch, as
    Kafka's onElection does, and the abort of the transaction the other coordinator opened succeeds."""
    async def run():
        clock = Clock()
        a, b = Broker(logs, clock, {0, 1, 2, 3}, 1), Broker(logs, clock, set(), 2)
        await a.coordinator.start()
        await b.coordinator.start()
        try:
            tid = txn_id_in(2)
            code, pid, epoch = await a.coordinator.init_producer_id(tid, 60000)
            assert code == NO_ERROR
            a.led.discard(2)  # b leads at epoch 2; a misses the change
            b.led.add(2)
            assert await b.coordinator.add_partitions(tid, pid, epoch, [("orders", 0)]) == NO_ERROR
            b.led.discard(2)
            b.coordinator.unload(2)
            a.led.add(2)  # back to a at epoch 3
            a.epoch = 3
            assert (await a.coordinator.end_transaction(tid, pid, epoch, commit=False))[0] == NO_ERROR
            assert a.coordinator.loaded_epochs[2] == 3
        finally:
            a.markers_released.set()
            await a.coordinator.shutdown()
            await b.coordinator.shutdown()
    asyncio.run(run())
