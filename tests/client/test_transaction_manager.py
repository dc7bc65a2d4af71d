"""The transactional producer's coordinator logic against scripted brokers (tests/client/fakebroker.py):
retries of COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS, a new FindCoordinator after
NOT_COORDINATOR, fatal answers that leave the producer unusable. The end-to-end behaviour is tested
against Apache Kafka in test_transactions.py."""

from __future__ import annotations

import asyncio

import pytest

from tests.client.fakebroker import FakeBroker
from tierlog import errors
from tierlog.client.producer import Producer
from tierlog.client.types import ConsumerGroupMetadata, TopicPartition
from tierlog.protocol import ApiKey


def _coordinator(b: FakeBroker) -> dict:
    return {"error_code": 0, "node_id": b.node_id, "host": "127.0.0.1", "port": b.port}


async def _two_brokers(b1: FakeBroker, b2: FakeBroker, coordinators: list[dict]) -> None:
    b1.advertise = b2.advertise = [(1, "127.0.0.1", b1.port), (2, "127.0.0.1", b2.port)]
    b1.answers[ApiKey.FIND_COORDINATOR] = b2.answers[ApiKey.FIND_COORDINATOR] = coordinators  # one shared list


def _producer(b: FakeBroker) -> Producer:
    return Producer(bootstrap_servers=b.address, transactional_id="t", retry_backoff_ms=10, retry_backoff_max_ms=20,
                    max_block_ms=20000)


def test_init_transactions_retries_and_finds_the_coordinator_again_after_not_coordinator():
    async def main():
        async with FakeBroker(1) as b1, FakeBroker(2) as b2:
            await _two_brokers(b1, b2, [])
            b1.answers[ApiKey.FIND_COORDINATOR].extend([_coordinator(b1), _coordinator(b2)])
            b1.answers[ApiKey.INIT_PRODUCER_ID] = [{"error_code": errors.CoordinatorLoadInProgressError.code},
                                                   {"error_code": errors.NotCoordinatorError.code}]
            b2.answers[ApiKey.INIT_PRODUCER_ID] = [{"error_code": errors.ConcurrentTransactionsError.code},
                                                   {"error_code": 0, "producer_id": 42, "producer_epoch": 3}]
            async with _producer(b1) as p:
                await p.init_transactions()
                assert (p._producer_id, p._producer_epoch) == (42, 3)
            assert b1.requests.count(ApiKey.INIT_PRODUCER_ID) == 2
            assert b2.requests.count(ApiKey.INIT_PRODUCER_ID) == 2
            assert b1.requests.count(ApiKey.FIND_COORDINATOR) + b2.requests.count(ApiKey.FIND_COORDINATOR) == 2

    asyncio.run(main())


def test_a_fatal_init_producer_id_answer_makes_every_later_call_fail():
    async def main():
        async with FakeBroker(1) as b1, FakeBroker(2) as b2:
            await _two_brokers(b1, b2, [_coordinator(b1)])
            b1.answers[ApiKey.INIT_PRODUCER_ID] = [
                {"error_code": errors.TransactionalIdAuthorizationFailedError.code}]
            async with _producer(b1) as p:
                with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
                    await p.init_transactions()
                with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
                    p.begin_transaction()
                with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
                    await p.send("t", b"x")
                with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
                    await p.abort_transaction()

    asyncio.run(main())


def test_end_txn_retries_concurrent_transactions_and_a_fenced_answer_is_fatal():
    group = ConsumerGroupMetadata("g", 5, "member-1", None)

    async def main():
        async with FakeBroker(1) as b1, FakeBroker(2) as b2:
            # the transaction coordinator is broker 1, the group coordinator broker 2
            await _two_brokers(b1, b2, [_coordinator(b1), _coordinator(b2)])
            b1.answers[ApiKey.INIT_PRODUCER_ID] = [{"error_code": 0, "producer_id": 7, "producer_epoch": 0}]
            b2.answers[ApiKey.TXN_OFFSET_COMMIT] = [
                {"topics": [{"name": "in", "partitions": [{"partition_index": 0, "error_code": 0}]}]}] * 2
            b1.answers[ApiKey.END_TXN] = [{"error_code": errors.ConcurrentTransactionsError.code}, {"error_code": 0},
                                          {"error_code": errors.ProducerFencedError.code}]
            async with _producer(b1) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send_offsets_to_transaction({TopicPartition("in", 0): 10}, group)
                await p.commit_transaction()
                assert b1.requests.count(ApiKey.END_TXN) == 2
                assert b1.requests.count(ApiKey.ADD_OFFSETS_TO_TXN) == 1  # transaction version 1 here
                assert b2.requests.count(ApiKey.TXN_OFFSET_COMMIT) == 1
                p.begin_transaction()
                await p.send_offsets_to_transaction({TopicPartition("in", 0): 20}, group)
                with pytest.raises(errors.ProducerFencedError, match="newer producer"):
                    await p.commit_transaction()
                with pytest.raises(errors.ProducerFencedError):
                    p.begin_transaction()

    asyncio.run(main())
