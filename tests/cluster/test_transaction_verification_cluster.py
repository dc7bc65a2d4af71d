"""KIP-890 part 1 (transaction.partition.verification.enable) on a three-broker ZooKeeper-mode cluster where
the transaction's coordinator is never the partition's leader: the leader verifies a producer's first
transactional batch with the coordinator on another broker (AddPartitionsToTxn v4, verify only). A real
producer commits and aborts as usual; a hand-made batch of a producer whose transaction is not open at the
coordinator (never begun, aborted, or of a fenced epoch) is refused with Kafka's errors and leaves the last
stable offset free; with verification turned off the same batch is appended and hangs the partition's last
stable offset until an ABORT marker, which is the hole verification closes."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.cluster.txn_cluster import (
    SETTINGS,
    TXN_PARTITIONS,
    commit_and_abort,
    committed_offset,
    describe_state,
    find_coordinator,
    offsets_coordinator_other_than,
    producer,
    transactional_id_in,
    txn_state_partitions,
)
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, partition, start_cluster, wait_until
from tests.harness.transactions import READ_COMMITTED, consume_confluent, list_offset, marker, write_markers
from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC, partition_for
from tierlog.protocol import ApiKey
from tierlog.records import build_batch
from tierlog.server.transactions.add_partitions_to_txn_manager import AddPartitionsToTxnManager

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, TRANSACTION_ABORTABLE = 0, 47, 48, 120
NOT_ENOUGH_REPLICAS = 19  # Produce's answer while the coordinator cannot answer yet (loading, moving)
# The coordinator is busy (a write in flight, loading): ask again.
COORDINATOR_BUSY = frozenset((14, 15, 16, 51))  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("txn-verify"), zookeeper, brokers=3, settings=SETTINGS)
    yield c
    c.stop()


@pytest.fixture
def raws(cluster):
    """A raw client per broker, closed after the test."""
    clients = {b: RawClient(cluster.brokers[b].bootstrap, timeout=60) for b in cluster.running_ids()}
    yield clients
    for c in clients.values():
        c.close()


def remote_coordinator(cluster, prefix: str) -> tuple[str, int, list[int]]:
    """(a transactional id, its coordinator, the two other brokers)."""
    leaders = txn_state_partitions(cluster)
    index, (coordinator, _) = min(leaders.items())
    tid = transactional_id_in(index, prefix)
    assert find_coordinator(cluster, tid) == coordinator
    return tid, coordinator, sorted(b for b in cluster.running_ids() if b != coordinator)


def coordinator_request(raw: RawClient, api: int, version: int, values: dict, code_of=lambda r: r.error_code):
    """A request to the transaction coordinator, again while it is busy; the response."""
    def ask():
        r = raw.request(api, version, values)
        return None if code_of(r) in COORDINATOR_BUSY else r
    return wait_until(ask, 60, f"{ApiKey(api).name} answered")


def init_producer_id(raw: RawClient, tid: str) -> tuple[int, int]:
    r = coordinator_request(raw, ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": tid, "transaction_timeout": 120000, "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == NONE, r
    return r.producer_id, r.producer_epoch


def produce_txn(raw: RawClient, tid: str, topic: str, value: bytes, pid: int, epoch: int, sequence: int,
                version: int = 9) -> int:
    """One hand-made transactional batch (acks=all); the partition's error, asked again while the leader
    answers NOT_ENOUGH_REPLICAS (the coordinator could not answer yet)."""
    batch = build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                        is_transactional=True)

    def ask():
        r = raw.request(ApiKey.PRODUCE, version, {"acks": -1, "timeout": 30000, "transactional_id": tid,
                                                  "topic_data": [{"name": topic, "partition_data": [
                                                      {"index": 0, "records": batch}]}]})
        code = r.responses[0].partition_responses[0].error_code
        return None if code == NOT_ENOUGH_REPLICAS else (code,)
    return wait_until(ask, 60, "a verified answer to the transactional batch")[0]


def produce_plain(raw: RawClient, topic: str, value: bytes) -> None:
    r = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 30000, "transactional_id": None, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}]})
    assert r.responses[0].partition_responses[0].error_code == NONE, r


def stable(raw: RawClient, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark)."""
    return list_offset(raw, topic, 1), list_offset(raw, topic, 0)


def test_producer_with_its_coordinator_on_another_broker_commits_and_aborts(cluster):
    """confluent-kafka's transactional producer, its coordinator on neither partition's leader: every
    transaction's first batch on each partition is verified over the inter-broker listener; read_committed
    sees exactly the committed transactions."""
    tid, coordinator, others = remote_coordinator(cluster, "remote")
    topic = unique("remote")
    create(cluster, topic, assignment=[[others[0], coordinator], [others[1], coordinator]])
    assert [partition(cluster, topic, i).leader_id for i in range(2)] == others
    p = producer(cluster.bootstrap, tid)
    commit_and_abort(cluster, p, topic, tid, [True, False, False, True, False, True], 2, b"r")
    assert wait_until(lambda: describe_state(cluster, coordinator, tid) == "CompleteCommit", 60,
                      "the last transaction complete")


def test_batches_outside_the_remote_coordinators_transaction_are_refused(cluster, raws):
    """The hanging transaction KIP-890 closes, with the coordinator on another broker than the leader: a
    transactional batch of a producer whose transaction at the coordinator does not hold the partition is
    refused (INVALID_TXN_STATE before Produce v11, TRANSACTION_ABORTABLE from v11), after an abort too, and
    one of a fenced epoch is INVALID_PRODUCER_EPOCH; none of them holds back the last stable offset."""
    tid, coordinator, (leader, _) = remote_coordinator(cluster, "hang")
    topic = unique("hang")
    create(cluster, topic, assignment=[[leader, coordinator]])
    to_coordinator, to_leader = raws[coordinator], raws[leader]
    pid, epoch = init_producer_id(to_coordinator, tid)

    # No transaction begun at the coordinator (EMPTY).
    assert produce_txn(to_leader, tid, topic, b"never-begun", pid, epoch, 0) == INVALID_TXN_STATE
    assert produce_txn(to_leader, tid, topic, b"never-begun", pid, epoch, 0, version=11) == TRANSACTION_ABORTABLE
    produce_plain(to_leader, topic, b"plain-1")
    assert stable(to_leader, topic) == (1, 1)

    # A transaction that holds the partition: verified by the remote coordinator, appended, then aborted.
    r = coordinator_request(to_coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]},
        code_of=lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == NONE, r
    assert produce_txn(to_leader, tid, topic, b"aborted", pid, epoch, 0) == NONE
    assert stable(to_leader, topic) == (1, 2)  # the open transaction holds the last stable offset
    r = coordinator_request(to_coordinator, ApiKey.END_TXN, 3, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": False})
    assert r.error_code == NONE, r
    wait_until(lambda: describe_state(cluster, coordinator, tid) == "CompleteAbort", 60, "the abort complete")
    wait_until(lambda: stable(to_leader, topic) == (3, 3), 60, "the ABORT marker below the last stable offset")

    # The same producer and epoch after the abort: its transaction is over at the coordinator and here.
    assert produce_txn(to_leader, tid, topic, b"after-abort", pid, epoch, 1) == INVALID_TXN_STATE
    # A new epoch fences the old one: the coordinator answers PRODUCER_FENCED, producers get INVALID_PRODUCER_EPOCH.
    new_pid, new_epoch = init_producer_id(to_coordinator, tid)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    assert produce_txn(to_leader, tid, topic, b"fenced", pid, epoch, 1) == INVALID_PRODUCER_EPOCH
    produce_plain(to_leader, topic, b"plain-2")
    assert stable(to_leader, topic) == (4, 4)
    got = [v for _, v in consume_confluent(cluster.bootstrap, topic, READ_COMMITTED, b"plain-2", timeout=120)]
    assert got == [b"plain-1", b"plain-2"]


def test_txn_offset_commit_outside_the_remote_coordinators_transaction_is_refused(cluster, raws):
    """TxnOffsetCommit at a group coordinator on another broker than the transaction's: refused while the
    group's ``__consumer_offsets`` partition is not in the transaction (INVALID_TXN_STATE before v4,
    TRANSACTION_ABORTABLE from v4), accepted once AddOffsetsToTxn put it there, refused again after the
    abort; nothing is committed."""
    tid, coordinator, _ = remote_coordinator(cluster, "offs")
    group = offsets_coordinator_other_than(cluster, coordinator)
    to_group = raws[find_coordinator(cluster, group, key_type=0)]
    topic = unique("offs")
    create(cluster, topic)
    to_coordinator = raws[coordinator]
    pid, epoch = init_producer_id(to_coordinator, tid)

    def commit(version: int) -> int:
        return coordinator_request(to_group, ApiKey.TXN_OFFSET_COMMIT, version, {
            "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
            code_of=lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions[0].error_code

    assert commit(3) == INVALID_TXN_STATE
    assert commit(4) == TRANSACTION_ABORTABLE
    r = coordinator_request(to_coordinator, ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group})
    assert r.error_code == NONE, r
    assert commit(3) == NONE
    r = coordinator_request(to_coordinator, ApiKey.END_TXN, 3, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": False})
    assert r.error_code == NONE, r
    wait_until(lambda: describe_state(cluster, coordinator, tid) == "CompleteAbort", 60, "the abort complete")
    assert commit(3) == INVALID_TXN_STATE
    assert committed_offset(cluster, group, topic) < 0  # the one accepted was aborted


def add_partition(raw: RawClient, tid: str, pid: int, epoch: int, topic: str) -> None:
    r = coordinator_request(raw, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]},
        code_of=lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == NONE, r


def test_questions_to_one_coordinator_share_a_request(cluster, raws):
    """The leader side's manager, in this process, against the cluster's coordinator: questions asked together
    for two transactional ids go in one AddPartitionsToTxn v4 and each gets its own answer, in the error its
    caller's version understands; an older epoch queued beside a newer one of the same id is refused at once
    (INVALID_PRODUCER_EPOCH, Kafka's rule)."""
    tid_a, coordinator, _ = remote_coordinator(cluster, "batch-a")
    tid_b = transactional_id_in(partition_for(tid_a, TXN_PARTITIONS), "batch-b")
    topic = unique("batch")
    create(cluster, topic)
    pid_a, epoch_a = init_producer_id(raws[coordinator], tid_a)
    pid_b, epoch_b = init_producer_id(raws[coordinator], tid_b)
    add_partition(raws[coordinator], tid_a, pid_a, epoch_a, topic)
    brokers = {b.node_id: BrokerImage(b.node_id, b.host, b.port) for b in cluster.metadata(coordinator).brokers}
    index = partition_for(tid_a, TXN_PARTITIONS)
    image = MetadataImage("", -1, brokers, {TXN_STATE_TOPIC: TopicImage(TXN_STATE_TOPIC, uuid.uuid4(), {
        index: PartitionImage(index, coordinator, 0, (coordinator,), (coordinator,))})})
    tp = (topic, 0)

    async def ask():
        channel = NetworkBrokerChannel(99, None, lambda: brokers, 30000)
        sent = []
        request = channel.request

        async def counted(broker_id, api_key, values, **kw):
            sent.append((broker_id, sorted(t["transactional_id"] for t in values["transactions"])))
            return await request(broker_id, api_key, values, **kw)
        channel.request = counted
        manager = AddPartitionsToTxnManager(99, None, lambda: image, lambda t: partition_for(t, TXN_PARTITIONS),
                                            None, channel, 30000)
        try:
            answers = await asyncio.gather(
                manager.verify(tid_a, pid_a, epoch_a, [tp], abortable_supported=False),
                manager.verify(tid_b, pid_b, epoch_b, [tp], abortable_supported=False),
                manager.verify(tid_b, pid_b, epoch_b, [tp], abortable_supported=True))
            stale = await asyncio.gather(
                manager.verify(tid_a, pid_a, epoch_a + 1, [tp], abortable_supported=False),
                manager.verify(tid_a, pid_a, epoch_a, [tp], abortable_supported=False))
            return sent, answers, stale
        finally:
            await manager.close()

    sent, answers, stale = asyncio.run(ask())
    assert answers == [{tp: NONE}, {tp: INVALID_TXN_STATE}, {tp: TRANSACTION_ABORTABLE}]
    # The newer epoch is fenced at the coordinator (PRODUCER_FENCED, handed on as INVALID_PRODUCER_EPOCH).
    assert stale == [{tp: INVALID_PRODUCER_EPOCH}, {tp: INVALID_PRODUCER_EPOCH}]
    assert sent == [(coordinator, [tid_a, tid_b]), (coordinator, [tid_a])]


def _set_verification(raw: RawClient, value: str | None) -> None:
    """transaction.partition.verification.enable as a cluster-wide dynamic default (None deletes it)."""
    r = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 4, "resource_name": "", "configs": [
            {"name": "transaction.partition.verification.enable", "config_operation": 0 if value else 1,
             "value": value}]}], "validate_only": False})
    assert r.responses[0].error_code == NONE, r.responses[0]


def test_verification_turned_off_appends_the_batch_and_it_hangs(cluster, raws):
    """With transaction.partition.verification.enable=false (a dynamic cluster default) the leader asks no
    coordinator: the batch of a transaction never begun is appended and holds the last stable offset until
    an ABORT marker, written here by hand; turned on again, such a batch is refused."""
    tid, coordinator, (leader, _) = remote_coordinator(cluster, "off")
    topic = unique("off")
    create(cluster, topic, assignment=[[leader, coordinator]])
    to_coordinator, to_leader = raws[coordinator], raws[leader]
    pid, epoch = init_producer_id(to_coordinator, tid)
    assert produce_txn(to_leader, tid, topic, b"refused", pid, epoch, 0) == INVALID_TXN_STATE
    _set_verification(to_leader, "false")
    try:
        # The default reaches the leader with the controller's next push: refused until then.
        codes = []

        def appended():
            codes.append(produce_txn(to_leader, tid, topic, b"hanging", pid, epoch, 0))
            return codes[-1] != INVALID_TXN_STATE
        wait_until(appended, 60, "the batch appended unverified")
        assert codes[-1] == NONE, codes
        assert stable(to_leader, topic) == (0, 1)  # hanging: no coordinator will ever end it
        assert write_markers(to_leader, marker(pid, epoch, False, topic)) == {(pid, topic, 0): NONE}
        assert stable(to_leader, topic) == (2, 2)
    finally:
        _set_verification(to_leader, None)
    other_tid = transactional_id_in(partition_for(tid, TXN_PARTITIONS), "off-again")
    other_pid, other_epoch = init_producer_id(to_coordinator, other_tid)
    codes = []

    def refused():
        codes.append(produce_txn(to_leader, other_tid, topic, b"on-again", other_pid, other_epoch, len(codes)))
        if codes[-1] == NONE:  # the deletion has not reached the leader yet: end that transaction too
            write_markers(to_leader, marker(other_pid, other_epoch, False, topic))
            return False
        return True
    wait_until(refused, 60, "verification on again")
    assert codes[-1] == INVALID_TXN_STATE, codes
    produce_plain(to_leader, topic, b"plain")
    last_stable, high_watermark = stable(to_leader, topic)
    assert last_stable == high_watermark
