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
            assert await coordinator.end_transaction("app", pid, epoch, commit=True) == NONE
            for _ in range(100):  # the marker task starts on the loop's next turns
                if sent:
                    break
                await asyncio.sleep(0)
            assert sent == [(True, [("t", 0)])]
            assert coordinator.describe("app")[1].state == TxnState.PREPARE_COMMIT
            assert await coordinator.end_transaction("app", pid, epoch, commit=True) == CONCURRENT_TRANSACTIONS
            assert await coordinator.end_transaction("app", pid, epoch, commit=False) == INVALID_TXN_STATE
            assert await coordinator.add_partitions("app", pid, epoch, [("t", 1)]) == CONCURRENT_TRANSACTIONS
            assert (await coordinator.init_producer_id("app", 60000))[0] == CONCURRENT_TRANSACTIONS
            release.set()
            for _ in range(1000):
                if coordinator.describe("app")[1].state == TxnState.COMPLETE_COMMIT:
                    break
                await asyncio.sleep(0.01)
            assert coordinator.describe("app")[1].state == TxnState.COMPLETE_COMMIT
            assert await coordinator.end_transaction("app", pid, epoch, commit=True) == NONE  # a retry
            assert await coordinator.end_transaction("app", pid, epoch, commit=False) == INVALID_TXN_STATE
        finally:
            await coordinator.shutdown()
            topic.close()

    asyncio.run(scenario())
