"""The transaction coordinator on a three-broker ZooKeeper-mode cluster, with confluent-kafka transactional
producers and read_committed consumers: transactions over partitions led by different brokers (markers sent
over the inter-broker listener), consume-transform-produce with the group coordinator on another broker
than the transaction coordinator, and the coordinator's broker SIGKILLed mid-transaction, after EndTxn was
answered but before its markers were written (held by a paused partition leader), and before a fencing
producer arrives. Each failover checks what read_committed reads against what the producers were told."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.cluster.txn_cluster import (
    SETTINGS,
    TXN_PARTITIONS,
    commit_and_abort,
    committed_offset,
    describe_state,
    find_coordinator,
    offsets_coordinator_other_than,
    producer,
    raw_request,
    read_committed,
    send,
    transactional_id_in,
    txn_state_partitions,
)
from tests.harness import waiting
from tests.harness.broker import BrokerProcess
from tests.harness.java_transactions import java_consume, java_produce
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, partition, replica_folder, start_cluster, wait_until
from tests.harness.transactions import READ_COMMITTED
from tests.harness.waiting import not_yet
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

NOT_COORDINATOR = 16


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    """Shared by the tests that kill nothing."""
    c = start_cluster(tmp_path_factory.mktemp("txn-cluster"), zookeeper, brokers=3, settings=SETTINGS)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def failover(tmp_path_factory, zookeeper):
    """For the tests that kill a coordinator (each restarts it after). Broker 1 is the controller and broker
    3 has a long ZooKeeper session so that pausing it (SIGSTOP) keeps its leaderships; __transaction_state
    has two replicas, so a partition on brokers 1 and 2 keeps its coordinator writes going while 3 is paused,
    and one in-sync replica suffices once its leader was killed."""
    c = start_cluster(tmp_path_factory.mktemp("txn-failover"), zookeeper, brokers=3, controller=1,
                      settings={**SETTINGS, "transaction.state.log.replication.factor": "2",
                                "transaction.state.log.min.isr": "1"},
                      per_broker={3: {"zookeeper.session.timeout.ms": "60000"}})
    yield c
    c.stop()


# ------------------------------------------------------------------------------ helpers


def spread_topic(cluster, name: str) -> None:
    """Three partitions led by brokers 1, 2 and 3."""
    create(cluster, name, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])


def restart(cluster, broker_id: int) -> None:
    """Start a killed broker of a module's cluster again (kept past the test's sweep), wait for it, and give
    the __transaction_state partitions back to their preferred leaders (the next test picks one led by a
    broker other than the controller)."""
    cluster.start([broker_id], timeout=120)
    BrokerProcess.shared.add(cluster.brokers[broker_id])
    cluster.wait_formed(120)
    controller = cluster.controller_id()

    def preferred_leaders():
        raw_request(cluster, controller, ApiKey.ELECT_LEADERS, 2, {
            "election_type": 0, "topic_partitions": [{"topic": TXN_STATE_TOPIC,
                                                      "partitions": list(range(TXN_PARTITIONS))}],
            "timeout_ms": 30000})
        return all(leader == replicas[0] for leader, replicas in txn_state_partitions(cluster).values())
    wait_until(preferred_leaders, 120, f"the preferred leaders of {TXN_STATE_TOPIC}")


# ------------------------------------------------------------------------------ one cluster, nothing killed


def test_transactions_over_partitions_of_every_broker_commit_and_abort(cluster):
    topic, tid = unique("span"), unique("tid")
    spread_topic(cluster, topic)
    leaders = {i: partition(cluster, topic, i).leader_id for i in range(3)}
    assert sorted(leaders.values()) == [1, 2, 3]
    p = producer(cluster.bootstrap, tid)
    coordinator = find_coordinator(cluster, tid)
    # The coordinator writes some markers itself and sends the others to two other brokers.
    assert [b for b in leaders.values() if b != coordinator]
    commit_and_abort(cluster, p, topic, tid, [True, False, True, False, True], 3, b"t")
    assert wait_until(lambda: describe_state(cluster, coordinator, tid) == "CompleteCommit", 60,
                      "the last transaction complete")


def test_transaction_version_2_java_producer_with_its_partition_on_another_broker(cluster):
    """Kafka 4.1's Java producer runs transaction version 2 (tierlog finalizes it): its partition's leader is not
    the coordinator, so the leader adds the partition with AddPartitionsToTxn v5 over the inter-broker listener;
    every EndTxn v5 bumps the epoch (five transactions: epoch 5); read_committed reads exactly the committed
    records."""
    tid = unique("java-tv2")
    coordinator = find_coordinator(cluster, tid)
    leader = next(b for b in (1, 2, 3) if b != coordinator)
    topic = unique("java-tv2")
    create(cluster, topic, assignment=[[leader] + [b for b in (1, 2, 3) if b != leader]])
    assert partition(cluster, topic, 0).leader_id == leader
    committed, aborted = java_produce(cluster.bootstrap, topic, tid, "c3,a2,c2,a3,c1")
    assert wait_until(lambda: describe_state(cluster, coordinator, tid) == "CompleteCommit", 60,
                      "the last transaction complete")
    d = raw_request(cluster, coordinator, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                    {"transactional_ids": [tid]}).transaction_states[0]
    assert d.producer_epoch == 5
    got = java_consume(cluster.bootstrap, topic, READ_COMMITTED, committed[-1])
    assert [v for _, v in got] == committed


def test_transaction_version_2_tierlog_client_over_partitions_of_every_broker(cluster):
    """tierlog's client runs transaction version 2 against the cluster: partitions led by the three brokers join
    through their leaders (in process on the coordinator's broker, AddPartitionsToTxn v5 on the others), offsets
    through TxnOffsetCommit v5 to the group's coordinator; commits and aborts end with bumped epochs, and
    read_committed sees exactly the committed records."""
    from tierlog.client.producer import Producer as TierlogProducer

    topic, tid = unique("tv2-span"), unique("tid")
    spread_topic(cluster, topic)
    end = b"end-" + tid.encode()
    expected: dict[int, list[bytes]] = {i: [] for i in range(3)}

    async def run() -> None:
        async with TierlogProducer(bootstrap_servers=cluster.bootstrap, transactional_id=tid, linger_ms=5) as p:
            await p.init_transactions()
            assert p._txn.transaction_v2
            epoch = p._producer_epoch
            for n, commit in enumerate([True, False, True, False, True]):
                p.begin_transaction()
                values = {i: [b"v%d-p%d-%d" % (n, i, j) for j in range(3)] for i in range(3)}
                for i, vs in values.items():
                    for v in vs:
                        await p.send(topic, v, partition=i)
                await p.flush()  # written before the end: every transaction reaches the coordinator
                if commit:
                    await p.commit_transaction()
                    for i in range(3):
                        expected[i] += values[i]
                else:
                    await p.abort_transaction()
            p.begin_transaction()
            for i in range(3):
                await p.send(topic, end, partition=i)
            await p.commit_transaction()
            assert p._producer_epoch == epoch + 6  # one bump per EndTxn

    asyncio.run(run())
    assert read_committed(cluster, topic, 3, end) == {i: expected[i] + [end] for i in range(3)}


def test_consume_transform_produce_with_the_group_on_another_broker(cluster):
    source, sink, tid = unique("ctp-in"), unique("ctp-out"), unique("tid")
    create(cluster, source)
    create(cluster, sink)
    seed = Producer({"bootstrap.servers": cluster.bootstrap})
    for j in range(6):
        seed.produce(source, b"in-%d" % j, partition=0)
    assert seed.flush(60) == 0
    p = producer(cluster.bootstrap, tid)
    coordinator = find_coordinator(cluster, tid)
    group = offsets_coordinator_other_than(cluster, coordinator)
    assert find_coordinator(cluster, group, key_type=0) != coordinator
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": READ_COMMITTED})
    try:
        consumer.subscribe([source])  # a member of the group: TxnOffsetCommit carries its generation (KIP-447)
        records = []

        def read():
            if len(records) >= 6:
                return True
            records.extend(m for m in consumer.consume(10, timeout=0.5) if m.error() is None)
            return not_yet(len(records))

        waiting.wait_until(read, 60, interval=0, what="6 records (how many arrived)")
        assert len(records) == 6

        def transform(upto: int, commit: bool) -> None:
            p.begin_transaction()
            send(p, sink, {0: [m.value().upper() for m in records[:upto]]})
            p.send_offsets_to_transaction([TopicPartition(source, 0, upto)], consumer.consumer_group_metadata(), 60)
            if commit:
                p.commit_transaction(60)
            else:
                p.abort_transaction(60)

        transform(3, commit=False)
        assert committed_offset(cluster, group, source) < 0  # the aborted offsets never became visible
        transform(3, commit=True)
        assert committed_offset(cluster, group, source) == 3
        transform(6, commit=False)
        assert committed_offset(cluster, group, source) == 3
        transform(6, commit=True)
        assert committed_offset(cluster, group, source) == 6
    finally:
        consumer.close()
    end = b"end-" + tid.encode()
    p.begin_transaction()
    send(p, sink, {0: [end]})
    p.commit_transaction(60)
    got = read_committed(cluster, sink, 1, end)[0]
    assert got == [b"IN-0", b"IN-1", b"IN-2", b"IN-0", b"IN-1", b"IN-2", b"IN-3", b"IN-4", b"IN-5", end]


# ------------------------------------------------------------------------------ coordinator failover


def coordinator_partition(cluster, avoid: int = 3) -> tuple[int, int, int]:
    """(__transaction_state partition, its leader, its other replica): a partition whose replicas exclude
    broker ``avoid`` and whose leader is not the controller, so killing the leader leaves the controller."""
    controller = cluster.controller_id()
    for index, (leader, replicas) in sorted(txn_state_partitions(cluster).items()):
        if avoid not in replicas and leader != controller and leader in replicas and len(replicas) == 2:
            return index, leader, next(r for r in replicas if r != leader)
    raise AssertionError(f"no {TXN_STATE_TOPIC} partition on brokers other than {avoid} led by a non-controller")


def test_coordinator_killed_after_end_txn_before_the_markers(failover):
    """EndTxn(commit) answered, one marker held back by pausing that partition's leader, the coordinator
    SIGKILLed: the partition's new leader loads PREPARE_COMMIT, resumes the markers and completes."""
    c = failover
    index, coordinator, successor = coordinator_partition(c, avoid=3)
    tid = transactional_id_in(index, "held")
    topic = unique("held")
    create(c, topic, assignment=[[3], [successor]])
    p = producer(c.bootstrap, tid)
    assert find_coordinator(c, tid) == coordinator
    values = {0: [b"h0-%d" % j for j in range(3)], 1: [b"h1-%d" % j for j in range(3)]}
    p.begin_transaction()
    send(p, topic, values)
    c.pause(3)  # the leader of partition 0: its marker cannot be written
    try:
        p.commit_transaction(60)  # answered once PREPARE_COMMIT is written (on brokers 1 and 2)
        assert describe_state(c, coordinator, tid) == "PrepareCommit"
        c.brokers[coordinator].kill()
        assert find_coordinator(c, tid, via=successor) == successor
        # Loaded in PREPARE_COMMIT; it cannot complete while broker 3 is paused.
        assert wait_until(lambda: describe_state(c, successor, tid), 60, "the new coordinator loaded") \
            == "PrepareCommit"
    finally:
        c.resume(3)
    try:
        assert wait_until(lambda: describe_state(c, successor, tid) == "CompleteCommit", 120,
                          "the new coordinator completing the commit")
        end = b"end-" + tid.encode()
        p2 = producer(c.bootstrap, tid)
        p2.begin_transaction()
        send(p2, topic, {0: [end], 1: [end]})
        p2.commit_transaction(60)
        assert read_committed(c, topic, 2, end) == {i: values[i] + [end] for i in range(2)}
    finally:
        restart(c, coordinator)


def test_coordinator_killed_mid_transaction(failover):
    """Records sent, the coordinator SIGKILLed before the commit: the producer's commit goes to the new
    coordinator (or fails and the transaction is aborted); every committed record is read exactly once, no
    aborted one, and read_committed reaches the end of every partition."""
    c = failover
    index, coordinator, successor = coordinator_partition(c, avoid=3)
    tid = transactional_id_in(index, "mid")
    topic = unique("mid")
    spread_topic(c, topic)
    p = producer(c.bootstrap, tid)
    assert find_coordinator(c, tid) == coordinator
    first = {i: [b"a-p%d-%d" % (i, j) for j in range(3)] for i in range(3)}
    p.begin_transaction()
    send(p, topic, first)
    p.commit_transaction(60)
    second = {i: [b"b-p%d-%d" % (i, j) for j in range(3)] for i in range(3)}
    p.begin_transaction()
    send(p, topic, second)
    c.brokers[coordinator].kill()
    try:
        try:
            p.commit_transaction(120)
            outcome = "committed"
        except KafkaException as e:
            outcome = "unknown"
            if e.args[0].txn_requires_abort():
                p.abort_transaction(60)
                outcome = "aborted"
        assert find_coordinator(c, tid, via=successor) == successor
        end = b"end-" + tid.encode()
        p2 = producer(c.bootstrap, tid)  # fences the first producer; aborts its transaction if still open
        p2.begin_transaction()
        send(p2, topic, {i: [end] for i in range(3)})
        p2.commit_transaction(60)
        got = read_committed(c, topic, 3, end)
        for i in range(3):
            if outcome == "committed":
                assert got[i] == first[i] + second[i] + [end]
            elif outcome == "aborted":
                assert got[i] == first[i] + [end]
            else:  # the commit's answer was lost: all or nothing, never part, never twice
                assert got[i] in (first[i] + second[i] + [end], first[i] + [end])
        print(f"outcome of the transaction across the failover: {outcome}")
    finally:
        restart(c, coordinator)


def test_fencing_across_coordinator_failover(failover):
    """A second producer with the same transactional id, served by the new coordinator, fences the first,
    whose open transaction is aborted; the first's commit fails as fenced."""
    c = failover
    index, coordinator, successor = coordinator_partition(c, avoid=3)
    tid = transactional_id_in(index, "fence")
    topic = unique("fence")
    spread_topic(c, topic)
    first = producer(c.bootstrap, tid)
    assert find_coordinator(c, tid) == coordinator
    first.begin_transaction()
    send(first, topic, {i: [b"zombie-%d" % i] for i in range(3)})
    c.brokers[coordinator].kill()
    try:
        second = producer(c.bootstrap, tid)  # on the new coordinator: aborts the open transaction, new epoch
        assert find_coordinator(c, tid, via=successor) == successor
        end = b"end-" + tid.encode()
        second.begin_transaction()
        send(second, topic, {i: [b"live-%d" % i, end] for i in range(3)})
        second.commit_transaction(60)
        with pytest.raises(KafkaException) as failed:
            first.commit_transaction(60)
        error = failed.value.args[0]
        assert error.fatal() and error.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
        got = read_committed(c, topic, 3, end)
        assert got == {i: [b"live-%d" % i, end] for i in range(3)}
    finally:
        restart(c, coordinator)


def test_producer_ids_are_unique_across_coordinators_and_others_answer_not_coordinator(cluster):
    """Every broker coordinates the ids of the partitions it leads, with producer ids from the cluster's
    ZooKeeper blocks (as idempotent producers'); a broker asked about an id it does not coordinate answers
    NOT_COORDINATOR."""
    leaders = {}
    for index, (leader, _) in txn_state_partitions(cluster).items():
        leaders.setdefault(leader, index)
    assert sorted(leaders) == [1, 2, 3]
    pids = []
    for broker_id, index in sorted(leaders.items()):
        tid = transactional_id_in(index, "pid")
        assert find_coordinator(cluster, tid) == broker_id
        for other in (b for b in (1, 2, 3) if b != broker_id):
            r = raw_request(cluster, other, ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
            assert r.error_code == NOT_COORDINATOR, r

        def init(tid=tid, broker_id=broker_id):
            r = raw_request(cluster, broker_id, ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
            return r if r.error_code == 0 else None
        r = wait_until(init, 60, f"InitProducerId of {tid} on broker {broker_id}")
        pids.append(r.producer_id)
        r = raw_request(cluster, broker_id, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == 0, r
        pids.append(r.producer_id)
    assert len(set(pids)) == len(pids), pids


def test_kafka_transactions_tool_lists_the_ids_of_every_coordinator(cluster, kafka_tool):
    """Kafka's ``kafka-transactions list`` asks every broker (ListTransactions) and ``describe`` finds each
    id's coordinator: ids coordinated by the three brokers all show."""
    topic = unique("tool")
    create(cluster, topic)
    leaders = {}
    for index, (leader, _) in txn_state_partitions(cluster).items():
        leaders.setdefault(leader, index)
    ids = {broker_id: transactional_id_in(index, "tool") for broker_id, index in leaders.items()}
    for broker_id, tid in ids.items():
        p = producer(cluster.bootstrap, tid)
        assert find_coordinator(cluster, tid) == broker_id
        p.begin_transaction()
        send(p, topic, {0: [tid.encode()]})
        p.commit_transaction(60)
    assert sorted(ids) == [1, 2, 3]
    listed = kafka_tool("TransactionsCommand", "--bootstrap-server", cluster.bootstrap, "list").stdout
    for broker_id, tid in ids.items():
        row = next((line.split() for line in listed.splitlines() if tid in line.split()), None)
        assert row is not None and str(broker_id) in row, listed  # TransactionalId Coordinator ProducerId State
    for broker_id, tid in ids.items():
        described = kafka_tool("TransactionsCommand", "--bootstrap-server", cluster.bootstrap, "describe",
                               "--transactional-id", tid).stdout
        row = described.splitlines()[-1].split()  # CoordinatorId TransactionalId ProducerId ... State ...
        assert row[0] == str(broker_id) and tid in row and "CompleteCommit" in row, described


# ------------------------------------------------------------------------------ acks=all across an epoch bump


def test_acks_all_waits_through_a_leader_epoch_bump_of_the_same_leader(failover):
    """A write waiting for acks=all (a Produce here; the coordinators' state writes wait the same way) at a
    leader that stays leader while the controller bumps the partition's leader epoch (a follower of its ISR
    died: ZooKeeper mode removes it with a new epoch, as Kafka does) is acknowledged once the remaining ISR has
    it, as Kafka's DelayedProduce is: the record was never at risk. Answering NOT_LEADER_OR_FOLLOWER instead
    failed the transaction coordinator's writes (its EndTxn, its timed-out aborts) whenever any broker died."""
    c = failover
    topic = unique("epoch-bump")
    create(c, topic, assignment=[[1, 3, 2]], configs={"min.insync.replicas": "2"})
    before = partition(c, topic)
    assert before.leader_id == 1 and sorted(before.isr_nodes) == [1, 2, 3]
    answer: list = []
    c.pause(3)  # a follower in the ISR that does not fetch: the high watermark stands still
    try:
        raw = RawClient(c.brokers[1].bootstrap, timeout=120)
        waiting = threading.Thread(target=lambda: answer.append(raw.request(ApiKey.PRODUCE, 9, {
            "acks": -1, "timeout": 90000, "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": build_batch([(None, b"waits", [], int(time.time() * 1000))])}]}]})))
        waiting.start()
        # Appended at the leader: broker 2, the follower still fetching, has copied it.
        wait_until(lambda: any(f.stat().st_size for f in replica_folder(c, 2, topic).glob("*.log")), 60,
                   "the record in broker 2's replica")
        c.brokers[2].kill()  # the controller (broker 1) drops 2 from the ISR with a new leader epoch
        bumped = wait_until(lambda: (s := partition(c, topic, via=1)).leader_epoch > before.leader_epoch and s, 60,
                            "a new leader epoch for the same leader")
        assert bumped.leader_id == 1 and sorted(bumped.isr_nodes) == [1, 3]
        assert not answer, answer[0].responses[0].partition_responses[0]  # still waiting for broker 3
    finally:
        c.resume(3)
    try:
        waiting.join(120)
        raw.close()
        (resp,) = answer
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0 and part.base_offset == 0, part
    finally:
        restart(c, 2)
