"""The transaction coordinator while the markers of an ending transaction are being written, on real logs: the
marker writer is held by an event the test releases, so the window Kafka's differential cannot hold open
(tests/peer/test_transactions_differential.py) is observed here. Kafka's rules (handleEndTransaction,
transaction version 1): in PrepareCommit a commit again is CONCURRENT_TRANSACTIONS and an abort
INVALID_TXN_STATE; AddPartitionsToTxn and InitProducerId wait (CONCURRENT_TRANSACTIONS); once the markers
are written, a commit again is NONE."""

from __future__ import annotations

import asyncio

from tierlog.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator, TransactionStateStore
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC, TxnState

from .support import LocalTopicLog

NONE, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS = 0, 48, 51


def test_requests_while_the_markers_are_in_flight(tmp_path):
    async def scenario():
        release = asyncio.Event()
        sent: list = []

        async def write_markers(producer_id, epoch, coordinator_epoch, commit, partitions):
            sent.append((commit, list(partitions)))
            await release.wait()
            return {tp: NONE for tp in partitions}

        pids = iter(range(1000, 2000))

        async def allocate():
            return next(pids)

        topic = LocalTopicLog(str(tmp_path / "logs"), topic=TXN_STATE_TOPIC)
        config = TransactionConfig(num_partitions=1, replication_factor=1, min_isr=1)
        coordinator = TransactionCoordinator(config, TransactionStateStore(topic, config),
                                             allocate_producer_id=allocate, write_markers=write_markers)
        await coordinator.start()
        try:
            code, pid, epoch = await coordinator.init_producer_id("app", 60000)
            assert code == NONE
            assert await coordinator.add_partitions("app", pid, epoch, [("t", 0)]) == NONE
            assert (await coordinator.end_transaction("app", pid, epoch, commit=True))[0] == NONE
            for _ in range(100):  # the marker task starts on the loop's next turns
                if sent:
                    break
                await asyncio.sleep(0)
            assert sent == [(True, [("t", 0)])]
            assert coordinator.describe("app")[1].state == TxnState.PREPARE_COMMIT
            assert (await coordinator.end_transaction("app", pid, epoch, commit=True))[0] == CONCURRENT_TRANSACTIONS
            assert (await coordinator.end_transaction("app", pid, epoch, commit=False))[0] == INVALID_TXN_STATE
            assert await coordinator.add_partitions("app", pid, epoch, [("t", 1)]) == CONCURRENT_TRANSACTIONS
            assert (await coordinator.init_producer_id("app", 60000))[0] == CONCURRENT_TRANSACTIONS
            release.set()
            for _ in range(1000):
                if coordinator.describe("app")[1].state == TxnState.COMPLETE_COMMIT:
                    break
                await asyncio.sleep(0.01)
            assert coordinator.describe("app")[1].state == TxnState.COMPLETE_COMMIT
            assert (await coordinator.end_transaction("app", pid, epoch, commit=True))[0] == NONE  # a retry
            assert (await coordinator.end_transaction("app", pid, epoch, commit=False))[0] == INVALID_TXN_STATE
        finally:
            await coordinator.shutdown()
            topic.close()

    asyncio.run(scenario())


PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING = 90, 49


def _coordinator(tmp_path, write_markers, pids):
    async def allocate():
        return next(pids)

    topic = LocalTopicLog(str(tmp_path / "logs"), topic=TXN_STATE_TOPIC)
    config = TransactionConfig(num_partitions=1, replication_factor=1, min_isr=1)
    coordinator = TransactionCoordinator(config, TransactionStateStore(topic, config), allocate_producer_id=allocate,
                                         write_markers=write_markers, transaction_version=lambda: 2)
    return topic, config, coordinator


def test_transaction_version_2_bumps_the_epoch_at_every_end_and_markers_carry_it(tmp_path):
    """KIP-890 part 2: the leader's add opens the transaction, EndTxn v5 bumps the epoch and answers it, the
    markers carry the bumped epoch; while they are in flight a leader's add for the next transaction waits for
    them, then answers CONCURRENT_TRANSACTIONS (the leader asks again); a retry with the epoch before the bump
    is answered with the current id and epoch, the bumped epoch is PRODUCER_FENCED while the markers are
    written and names the next transaction once complete (Kafka 4.1's rules); the
    state reloads from __transaction_state with its TV2 fields."""
    async def scenario():
        release = asyncio.Event()
        sent: list = []

        async def write_markers(producer_id, epoch, coordinator_epoch, commit, partitions):
            sent.append((producer_id, epoch, commit, list(partitions)))
            await release.wait()
            return {tp: NONE for tp in partitions}

        topic, config, coordinator = _coordinator(tmp_path, write_markers, iter(range(1000, 2000)))
        await coordinator.start()
        try:
            code, pid, epoch = await coordinator.init_producer_id("app", 60000)
            assert code == NONE
            assert await coordinator.add_partitions_for_leader("app", pid, epoch, [("t", 0)]) == NONE
            assert coordinator.describe("app")[1].client_transaction_version == 2
            assert await coordinator.end_transaction("app", pid, epoch, True, 2) == (NONE, pid, epoch + 1)
            await asyncio.sleep(0)  # the marker task starts
            assert sent == [(pid, epoch + 1, True, [("t", 0)])]
            # retries while the markers are in flight: the old epoch is the retry (CONCURRENT), the new one is
            # the next transaction's, which may not end before it began
            assert (await coordinator.end_transaction("app", pid, epoch, True, 2))[0] == CONCURRENT_TRANSACTIONS
            assert (await coordinator.end_transaction("app", pid, epoch, False, 2))[0] == INVALID_TXN_STATE
            assert (await coordinator.end_transaction("app", pid, epoch + 1, True, 2))[0] == PRODUCER_FENCED
            waiting = asyncio.create_task(coordinator.add_partitions_for_leader("app", pid, epoch + 1, [("t", 1)]))
            await asyncio.sleep(0)
            assert not waiting.done()  # it waits for the markers, not polling
            release.set()
            assert await waiting == CONCURRENT_TRANSACTIONS
            assert coordinator.describe("app")[1].state == TxnState.COMPLETE_COMMIT
            assert await coordinator.end_transaction("app", pid, epoch, True, 2) == (NONE, pid, epoch + 1)
            assert (await coordinator.end_transaction("app", pid, epoch, False, 2))[0] == INVALID_TXN_STATE
            # the current epoch names a next transaction no partition joined: its commit is INVALID_TXN_STATE
            assert (await coordinator.end_transaction("app", pid, epoch + 1, True, 2))[0] == INVALID_TXN_STATE
            # the next transaction, aborted
            assert await coordinator.add_partitions_for_leader("app", pid, epoch + 1, [("t", 1)]) == NONE
            assert await coordinator.end_transaction("app", pid, epoch + 1, False, 2) == (NONE, pid, epoch + 2)
            for _ in range(500):
                if coordinator.describe("app")[1].state == TxnState.COMPLETE_ABORT:
                    break
                await asyncio.sleep(0.01)
            assert sent[-1] == (pid, epoch + 2, False, [("t", 1)])
        finally:
            await coordinator.shutdown()
        # a new coordinator on the same log: the state and its TV2 fields come back
        topic.close()
        topic2, _, again = _coordinator(tmp_path, write_markers, iter(range(3000, 4000)))
        await again.start()
        try:
            meta = again.describe("app")[1]
            assert (meta.state, meta.producer_id, meta.producer_epoch, meta.client_transaction_version) == (
                TxnState.COMPLETE_ABORT, pid, epoch + 2, 2)
        finally:
            await again.shutdown()
            topic2.close()

    asyncio.run(scenario())


def test_an_exhausted_epoch_takes_the_next_producer_id_at_the_end(tmp_path):
    """Under TV2 an EndTxn at epoch 32766 (Short.MAX_VALUE - 1) allocates the next producer id: the PREPARE
    state keeps the old id with epoch 32767 (the markers carry them), EndTxn answers the new id with epoch 0,
    and the complete state has the new id, the old one as the previous producer id, recognizing a retry."""
    async def scenario():
        sent: list = []

        async def write_markers(producer_id, epoch, coordinator_epoch, commit, partitions):
            sent.append((producer_id, epoch))
            return {tp: NONE for tp in partitions}

        topic, _, coordinator = _coordinator(tmp_path, write_markers, iter(range(1000, 2000)))
        await coordinator.start()
        try:
            code, pid, epoch = await coordinator.init_producer_id("app", 60000)
            meta = coordinator.describe("app")[1]
            meta.producer_epoch = epoch = 32766  # as after 32766 transactions
            assert await coordinator.add_partitions_for_leader("app", pid, epoch, [("t", 0)]) == NONE
            assert await coordinator.end_transaction("app", pid, epoch, True, 2) == (NONE, 1001, 0)
            for _ in range(500):
                if meta.state == TxnState.COMPLETE_COMMIT:
                    break
                await asyncio.sleep(0.01)
            assert sent == [(pid, 32767)]
            assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (1001, 0, pid)
            assert await coordinator.end_transaction("app", pid, epoch, True, 2) == (NONE, 1001, 0)  # a retry
            assert (await coordinator.end_transaction("app", pid, 5, True, 2))[0] == INVALID_PRODUCER_ID_MAPPING
        finally:
            await coordinator.shutdown()
            topic.close()

    asyncio.run(scenario())
