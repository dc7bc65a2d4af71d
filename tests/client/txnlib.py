"""Scenarios of the transaction tests (tierlog's transactional producer and read_committed consumer,
against Apache Kafka 4.1), run by test_transactions.py (Kafka's default transaction version 2, KIP-890)
and test_transactions_v1.py (the cluster's transaction.version downgraded to 1: explicit
AddPartitionsToTxn and AddOffsetsToTxn, KIP-360 epoch bumps by InitProducerId). Every wait is a poll
loop with a deadline; no sleeps."""

from __future__ import annotations

import asyncio

import confluent_kafka
import pytest

from tests.harness.waiting import not_yet, wait_until, wait_until_async
from tierlog import errors
from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer
from tierlog.client.errors import CommitFailedError, IllegalStateError, TransactionAbortedError
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition

WAIT = 60  # seconds any one wait may take on a slow machine
# small internal topics: they are created on the first transaction and the first group
KAFKA_SETTINGS = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}


async def create(bootstrap: str, *topics: tuple[str, int]) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, n, 1) for name, n in topics])


def txn_producer(bootstrap: str, txn_id: str, **kw) -> Producer:
    return Producer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=5, **kw)


async def settled_ends(bootstrap: str, tps: list) -> dict:
    """The end offsets of ``tps`` once no transaction is open on them (the last stable offset equals the
    high watermark). A commit or abort returns once the coordinator has logged its decision; the markers
    reach the partitions after that (Kafka writes them asynchronously), so a read right after it must
    wait for them."""
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as stable, \
            Consumer(bootstrap_servers=bootstrap) as high:
        async def closed():
            lso, hw = await stable.end_offsets(tps), await high.end_offsets(tps)
            return [lso] if lso == hw else not_yet(f"last stable {lso}, high {hw}")

        return (await wait_until_async(closed, WAIT, what="every transaction closed"))[0]


async def read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
                   settled: bool = True) -> tuple[list, dict]:
    """Every record of ``topic`` a consumer with ``isolation`` returns, and its final positions (read
    until each position reaches the end offset the same isolation level reports). With ``settled``,
    read_committed first waits until no transaction is open (the markers of the last commit or abort
    are written); without it, it reads up to the last stable offset as it is."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    if settled and isolation == "read_committed":
        await settled_ends(bootstrap, tps)
    async with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        records = []

        async def at_ends():
            positions = [await c.position(tp) for tp in tps]
            if not any(positions[i] < ends[tp] for i, tp in enumerate(tps)):
                return True
            for got in (await c.poll(timeout_ms=500)).values():
                records.extend(got)
            return not_yet(f"positions {positions}, ends {ends}")

        await wait_until_async(at_ends, WAIT, interval=0, what="every position at its end offset")
        return records, {tp: await c.position(tp) for tp in tps}


def values(records) -> list[bytes]:
    return sorted(bytes(r.value) for r in records)


def commit_scenario(bootstrap: str, transaction_v2: bool) -> None:
    """Commit: read_committed gets exactly the committed records, positions end past the markers."""
    async def main():
        await create(bootstrap, ("txn-commit", 2))
        async with txn_producer(bootstrap, "tx-commit") as p:
            await p.init_transactions()
            assert p._txn.transaction_v2 is transaction_v2  # the cluster's finalized transaction.version
            epoch = p._producer_epoch
            for round_ in range(2):
                p.begin_transaction()
                futures = [await p.send("txn-commit", b"r%d-%d" % (round_, i), key=b"k%d" % i) for i in range(10)]
                await p.commit_transaction()
                assert all(f.done() and f.exception() is None for f in futures)
            # an open transaction: written, not visible to read_committed (it stops at the last stable offset)
            p.begin_transaction()
            for i in range(3):
                await p.send("txn-commit", b"open-%d" % i, partition=0)
            await p.flush()
            committed, _ = await read_all(bootstrap, "txn-commit", 2, "read_committed", settled=False)
            assert values(committed) == sorted(b"r%d-%d" % (r, i) for r in range(2) for i in range(10))
            uncommitted, _ = await read_all(bootstrap, "txn-commit", 2, "read_uncommitted")
            assert len(uncommitted) == 23
            await p.commit_transaction()
            # transaction version 2 ends every transaction with a new epoch (EndTxn v5); 1 keeps it
            assert p._producer_epoch == (epoch + 3 if transaction_v2 else epoch)
        committed, positions = await read_all(bootstrap, "txn-commit", 2, "read_committed")
        assert values(committed) == sorted([b"r%d-%d" % (r, i) for r in range(2) for i in range(10)]
                                           + [b"open-0", b"open-1", b"open-2"])
        # each partition's log: its records and one commit marker per transaction that wrote to it
        async with Consumer(bootstrap_servers=bootstrap) as c:
            high = await c.end_offsets(list(positions))
        assert positions == high
        assert sum(high.values()) == 23 + 5

    asyncio.run(main())


def abort_scenario(bootstrap: str) -> None:
    """Abort: read_committed sees none of it, read_uncommitted all; unsent records fail."""
    async def main():
        await create(bootstrap, ("txn-abort", 1))
        async with txn_producer(bootstrap, "tx-abort") as p:
            await p.init_transactions()
            p.begin_transaction()
            for i in range(5):
                await p.send("txn-abort", b"aborted-%d" % i)
            await p.flush()  # written to the log before the abort
            unsent = await p.send("txn-abort", b"never-sent")
            await p.abort_transaction()
            with pytest.raises(TransactionAbortedError):
                await unsent
            p.begin_transaction()
            for i in range(3):
                await p.send("txn-abort", b"kept-%d" % i)
            await p.commit_transaction()
        committed, positions = await read_all(bootstrap, "txn-abort", 1, "read_committed")
        assert values(committed) == [b"kept-0", b"kept-1", b"kept-2"]
        uncommitted, _ = await read_all(bootstrap, "txn-abort", 1, "read_uncommitted")
        assert values(uncommitted) == sorted([b"aborted-%d" % i for i in range(5)] + [b"kept-0", b"kept-1",
                                                                                       b"kept-2"])
        assert positions == {TopicPartition("txn-abort", 0): 5 + 1 + 3 + 1}  # past both markers

    asyncio.run(main())


def consume_transform_produce_scenario(bootstrap: str) -> None:
    """Offsets sent to an aborted transaction stay uncommitted; to a committed one, committed."""
    tp_in = TopicPartition("ctp-in", 0)

    async def poll_until(consumer: Consumer, n: int) -> list:
        got = []

        async def polled():
            if len(got) >= n:
                return True
            for records in (await consumer.poll(timeout_ms=500)).values():
                got.extend(records)
            return not_yet(len(got))

        await wait_until_async(polled, WAIT, interval=0, what=f"{n} records (how many arrived)")
        return got

    async def main():
        await create(bootstrap, ("ctp-in", 1), ("ctp-out", 1))
        async with Producer(bootstrap_servers=bootstrap) as plain:
            for i in range(6):
                await plain.send("ctp-in", b"in-%d" % i)
            await plain.flush()
        async with Consumer(bootstrap_servers=bootstrap, group_id="ctp-group", enable_auto_commit=False,
                            auto_offset_reset="earliest", isolation_level="read_committed") as consumer, \
                txn_producer(bootstrap, "tx-ctp") as producer:
            consumer.subscribe(["ctp-in"])
            await producer.init_transactions()
            records = await poll_until(consumer, 6)
            group = consumer.group_metadata()
            assert group.group_id == "ctp-group" and group.generation_id >= 1 and group.member_id
            # the first attempt aborts: neither the output nor the offsets become visible
            producer.begin_transaction()
            for r in records:
                await producer.send("ctp-out", bytes(r.value).replace(b"in", b"out"))
            await producer.send_offsets_to_transaction({tp_in: records[-1].offset + 1}, group)
            await producer.abort_transaction()
            assert await consumer.committed(tp_in) is None
            # the application rewinds to the committed offsets and processes again
            consumer.seek_to_beginning(tp_in)
            records = await poll_until(consumer, 6)
            producer.begin_transaction()
            for r in records:
                await producer.send("ctp-out", bytes(r.value).replace(b"in", b"out"))
            await producer.send_offsets_to_transaction({tp_in: records[-1].offset + 1}, consumer.group_metadata())
            await producer.commit_transaction()
            assert (await consumer.committed(tp_in)).offset == 6
            # KIP-447: offsets from a member of an old generation are refused; the transaction must abort
            stale = consumer.group_metadata()._replace(generation_id=group.generation_id + 10)
            producer.begin_transaction()
            await producer.send("ctp-out", b"stale")
            with pytest.raises(CommitFailedError):
                await producer.send_offsets_to_transaction({tp_in: 1}, stale)
            with pytest.raises(CommitFailedError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert (await consumer.committed(tp_in)).offset == 6
        out, _ = await read_all(bootstrap, "ctp-out", 1, "read_committed")
        assert values(out) == [b"out-%d" % i for i in range(6)]

    asyncio.run(main())


def fencing_scenario(bootstrap: str) -> None:
    """A second producer with the same transactional.id fences the first."""
    async def main():
        await create(bootstrap, ("txn-fence", 1))
        async with txn_producer(bootstrap, "tx-fence") as first, txn_producer(bootstrap, "tx-fence") as second:
            await first.init_transactions()
            first.begin_transaction()
            await first.send("txn-fence", b"from-first")
            await first.flush()
            # the coordinator aborts the first producer's open transaction and bumps the epoch
            await second.init_transactions()
            with pytest.raises(errors.ProducerFencedError, match="fenced"):
                await first.commit_transaction()
            # fatal: every later call says so too
            with pytest.raises(errors.ProducerFencedError):
                first.begin_transaction()
            with pytest.raises(errors.ProducerFencedError):
                await first.send("txn-fence", b"again")
            second.begin_transaction()
            await second.send("txn-fence", b"from-second")
            await second.commit_transaction()
        committed, _ = await read_all(bootstrap, "txn-fence", 1, "read_committed")
        assert values(committed) == [b"from-second"]

    asyncio.run(main())


def misuse_scenario(bootstrap: str) -> None:
    """Misuse raises IllegalStateError (Java's IllegalStateException)."""
    async def main():
        await create(bootstrap, ("txn-misuse", 1))
        async with Producer(bootstrap_servers=bootstrap) as plain:
            with pytest.raises(IllegalStateError, match="transactional.id"):
                await plain.init_transactions()
            with pytest.raises(IllegalStateError, match="transactional.id"):
                plain.begin_transaction()
        async with txn_producer(bootstrap, "tx-misuse") as p:
            with pytest.raises(IllegalStateError, match="init_transactions"):
                p.begin_transaction()
            with pytest.raises(IllegalStateError, match="init_transactions"):
                await p.send("txn-misuse", b"x")
            await p.init_transactions()
            with pytest.raises(IllegalStateError, match="already"):
                await p.init_transactions()
            with pytest.raises(IllegalStateError, match="send"):
                await p.send("txn-misuse", b"outside a transaction")
            with pytest.raises(IllegalStateError, match="no transaction in progress"):
                await p.commit_transaction()
            with pytest.raises(IllegalStateError, match="no transaction in progress"):
                await p.abort_transaction()
            p.begin_transaction()
            with pytest.raises(IllegalStateError, match="already in progress"):
                p.begin_transaction()
            # an empty transaction commits without the coordinator (nothing was added)
            await p.commit_transaction()
            p.begin_transaction()
            await p.abort_transaction()
        with pytest.raises(errors.InvalidConfigError, match="idempotence"):
            Producer(bootstrap_servers=bootstrap, transactional_id="t", acks="1")
        with pytest.raises(errors.InvalidConfigError, match="idempotence"):
            Producer(bootstrap_servers=bootstrap, transactional_id="t", enable_idempotence=False)

    asyncio.run(main())


def confluent_poll(consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition) -> list[bytes]:
    """Everything ``consumer`` (assigned ``tp`` from the beginning) returns until its position reaches the
    high watermark."""
    _low, high = consumer.get_watermark_offsets(tp, timeout=WAIT)
    values: list[bytes] = []

    def at_high():
        position = consumer.position([tp])[0].offset
        if position >= high:
            return True
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        return not_yet(f"position {position}, high watermark {high}")

    wait_until(at_high, WAIT, interval=0, what="the position at the high watermark")
    return values


def confluent_scenario(bootstrap: str) -> None:
    """confluent-kafka's transactions read by tierlog, and tierlog's read by confluent-kafka."""
    async def tierlog_side():
        await create(bootstrap, ("txn-from-confluent", 1), ("txn-from-tierlog", 1))
        # confluent-kafka writes: commit 5, abort 3, commit 2
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-confluent",
                                      "linger.ms": 5})
        p.init_transactions(WAIT)
        for tag, n, commit in ((b"c1", 5, True), (b"a", 3, False), (b"c2", 2, True)):
            p.begin_transaction()
            for i in range(n):
                p.produce("txn-from-confluent", b"%s-%d" % (tag, i))
            p.flush(WAIT)
            p.commit_transaction(WAIT) if commit else p.abort_transaction(WAIT)
        committed, _ = await read_all(bootstrap, "txn-from-confluent", 1, "read_committed")
        assert values(committed) == sorted([b"c1-%d" % i for i in range(5)] + [b"c2-0", b"c2-1"])
        uncommitted, _ = await read_all(bootstrap, "txn-from-confluent", 1, "read_uncommitted")
        assert len(uncommitted) == 10
        # tierlog writes the same way
        async with txn_producer(bootstrap, "tx-tierlog") as tp:
            await tp.init_transactions()
            for tag, n, commit in ((b"c1", 4, True), (b"a", 3, False), (b"c2", 2, True)):
                tp.begin_transaction()
                for i in range(n):
                    await tp.send("txn-from-tierlog", b"%s-%d" % (tag, i))
                await tp.flush()
                await (tp.commit_transaction() if commit else tp.abort_transaction())

    asyncio.run(tierlog_side())
    tp = confluent_kafka.TopicPartition("txn-from-tierlog", 0, confluent_kafka.OFFSET_BEGINNING)
    for isolation, expected in (("read_committed", sorted([b"c1-%d" % i for i in range(4)] + [b"c2-0", b"c2-1"])),
                                ("read_uncommitted", None)):
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"confluent-{isolation}",
                                      "isolation.level": isolation, "enable.auto.commit": False})
        try:
            c.assign([tp])
            got = sorted(confluent_poll(c, confluent_kafka.TopicPartition("txn-from-tierlog", 0)))
        finally:
            c.close()
        if expected is not None:
            assert got == expected
        else:
            assert len(got) == 9


def abortable_error_scenario(bootstrap: str) -> None:
    """A batch the broker refuses (MESSAGE_TOO_LARGE for the topic) makes the transaction abortable:
    commit raises it, abort works, the epoch moves on (KIP-360: InitProducerId with transaction
    version 1; EndTxn with 2) and the next transaction commits."""
    async def main():
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic("txn-abortable", 1, 1, {"max.message.bytes": "2000"})])
        async with txn_producer(bootstrap, "tx-abortable") as p:
            await p.init_transactions()
            epoch = p._producer_epoch
            p.begin_transaction()
            await p.send("txn-abortable", b"small-before")
            await p.flush()
            too_big = await p.send("txn-abortable", b"x" * 5000)
            with pytest.raises(errors.MessageTooLargeError):
                await p.commit_transaction()
            with pytest.raises(errors.MessageTooLargeError):
                await too_big
            with pytest.raises(errors.MessageTooLargeError):  # abortable: only abort is allowed
                await p.send("txn-abortable", b"refused")
            await p.abort_transaction()
            assert p._producer_epoch > epoch
            p.begin_transaction()
            await p.send("txn-abortable", b"small-after")
            await p.commit_transaction()
        committed, _ = await read_all(bootstrap, "txn-abortable", 1, "read_committed")
        assert values(committed) == [b"small-after"]

    asyncio.run(main())


def sync_facade_scenario(bootstrap: str) -> None:
    """The synchronous facade: the transactional methods become blocking calls."""
    from tierlog.client import sync

    asyncio.run(create(bootstrap, ("txn-sync", 1)))
    with sync.Producer(bootstrap_servers=bootstrap, transactional_id="tx-sync") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("txn-sync", b"aborted").get(timeout=WAIT)
        p.abort_transaction()
        p.begin_transaction()
        future = p.send("txn-sync", b"committed")
        p.commit_transaction()
        assert future.get(timeout=WAIT).offset >= 2  # after the aborted record and its marker
    committed, _ = asyncio.run(read_all(bootstrap, "txn-sync", 1, "read_committed"))
    assert values(committed) == [b"committed"]
