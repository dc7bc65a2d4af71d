"""Replication across three tierlog brokers: followers copy the leader's log byte for byte, the ISR shrinks
when a follower stalls and grows when it catches up, acks=all answers Kafka's errors when the ISR is below
``min.insync.replicas``, a killed leader loses no acknowledged record, an old leader's divergent records are
truncated when it returns (KIP-101), an idempotent producer's retry is still a duplicate after a failover,
committed offsets survive the loss of their coordinator, and a consumer in a follower's rack is sent to that
follower and reads from it (KIP-392), and a failed log dir moves the leaderships of its replicas and takes them
out of their ISRs.

One cluster serves the module (its tests run in file order on one worker); the brokers talk through the
harness's link proxies so a test can cut a leader off from its followers. Each test leaves every broker
running and every link healed.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import rawclient
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, partition, replica_folder, start_cluster, wait_isr
from tests.harness.waiting import not_yet, wait_until
from tests.harness.writer import BackgroundWriter
from tests.interop.clients import CLIENTS
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

NOT_ENOUGH_REPLICAS = 19
REQUEST_TIMED_OUT = 7
LAG_MS = 3000
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    work = tmp_path_factory.mktemp("replication")
    racks = {i: {"broker.rack": f"rack-{i}"} for i in (1, 2, 3)}
    # Broker 3 has two log dirs, checkpointed often: a test fails one of them under it.
    racks[3].update({"log.dirs": ",".join(str(work / "broker-3" / d) for d in ("logs", "logs-b")),
                     "log.flush.offset.checkpoint.interval.ms": "300"})
    c = start_cluster(work, zookeeper, brokers=3, proxies=True,
                      settings={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200",
                                "replica.selector.class": RACK_AWARE}, per_broker=racks)
    yield c
    c.stop()


def log_bytes(cluster, broker_id: int, name: str, p: int = 0) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(replica_folder(cluster, broker_id, name, p).glob("*.log")))


def wait_same_logs(cluster, name: str, p: int = 0, timeout: float = 30) -> bytes:
    """Every replica's log files hold the same bytes (a follower copies batches as they are)."""
    def same():
        logs = {i: log_bytes(cluster, i, name, p) for i in cluster.brokers}
        first = next(iter(logs.values()))
        return first if first and all(v == first for v in logs.values()) else None
    return cluster.wait_until(same, timeout, f"every replica of {name}-{p} holding the same records")


def produce(cluster, broker_id: int, name: str, values: list[bytes], acks: int = -1, p: int = 0):
    return rawclient.produce(cluster.brokers[broker_id].bootstrap, name, p, values, acks=acks)


def test_followers_hold_the_leaders_records_byte_for_byte(cluster):
    name = unique("copy")
    create(cluster, name, configs={"min.insync.replicas": "2"})
    state = partition(cluster, name)
    assert sorted(state.isr_nodes) == [1, 2, 3]  # a new partition starts with every live replica in sync
    for i in range(30):
        answer = produce(cluster, state.leader_id, name, [b"v%d-%d" % (i, j) for j in range(5)])
        assert (answer.error_code, answer.base_offset) == (0, i * 5)
    data = wait_same_logs(cluster, name)
    assert data.count(b"v29-4") == 1
    client = CLIENTS["confluent-kafka"](cluster.bootstrap)
    try:
        got = client.consume(name, 0, "earliest", 150)
        assert [m.value for m in got] == [b"v%d-%d" % (i, j) for i in range(30) for j in range(5)]
    finally:
        client.close()


def test_a_stalled_follower_leaves_the_isr_and_acks_all_answers_not_enough_replicas(cluster):
    name = unique("stall")
    create(cluster, name, configs={"min.insync.replicas": "3"})
    state = partition(cluster, name)
    leader = state.leader_id
    # Not the controller: cutting it from the leader would also cut the controller's metadata pushes to the
    # leader, whose Metadata answers (read below through broker 1, maybe the leader) would then never change.
    controller = cluster.controller_id()
    follower = next(r for r in state.replica_nodes if r not in (leader, controller))
    assert produce(cluster, leader, name, [b"all-three"]).error_code == 0
    cluster.proxies[leader].cut(source=follower)  # the follower cannot fetch from the leader any more
    try:
        # Appended while the ISR was big enough; the ISR then shrinks below min.insync.replicas before the
        # stalled follower has it, and the high watermark stands still under min.insync.replicas (Kafka 3.9):
        # the wait ends with REQUEST_TIMED_OUT, as Kafka's does.
        stalled = produce(cluster, leader, name, [b"appended-then-shrunk"])
        assert stalled.error_code == REQUEST_TIMED_OUT, stalled
        assert follower not in wait_isr(cluster, name, 2).isr_nodes
        refused = produce(cluster, leader, name, [b"refused"])
        assert refused.error_code == NOT_ENOUGH_REPLICAS, refused
        assert produce(cluster, leader, name, [b"acks-1"], acks=1).error_code == 0
    finally:
        cluster.proxies[leader].heal(source=follower)
    back = wait_isr(cluster, name, 3)
    assert follower in back.isr_nodes
    assert produce(cluster, leader, name, [b"all-three-again"]).error_code == 0
    wait_same_logs(cluster, name)
    out = cluster.output(leader)
    assert "Shrinking the ISR" in out and "Expanding the ISR" in out


def test_a_killed_leader_loses_no_acknowledged_record(cluster):
    name = unique("failover")
    create(cluster, name, 3, {"min.insync.replicas": "2"})
    writer = BackgroundWriter(cluster.bootstrap, name, b"f", partitions=3).start()
    acked, errors = writer.acked, writer.errors
    victim = partition(cluster, name, 0).leader_id
    try:
        cluster.wait_until(lambda: len(acked) > 300, 60, "the producer under way")
        cluster.brokers[victim].kill()
        before = len(acked)
        cluster.wait_until(lambda: partition(cluster, name, 0).leader_id not in (victim, -1), 60,
                           "a new leader for partition 0")
        cluster.wait_until(lambda: len(acked) > before + 300, 60, "the producer going on after the kill")
        cluster.start([victim])
        cluster.wait_formed()
        for p in range(3):
            wait_isr(cluster, name, 3, p, 60)
    finally:
        writer.stop()
    assert not errors, errors[:5]
    client = CLIENTS["confluent-kafka"](cluster.bootstrap)
    try:
        for p in range(3):
            mine = [(o, v) for part, o, v in acked if part == p]
            got = client.consume(name, p, "earliest", len(mine), timeout=60)
            values = [m.value for m in got]
            # Every acknowledged record once, in the order written. librdkafka acknowledges some records of
            # an idempotent retry without an offset (implicitly): those are checked by value only.
            assert sorted(values) == sorted(v for _, v in mine) and len(set(values)) == len(values)
            assert values == sorted(values)
            at = {m.value: m.offset for m in got}
            assert all(at[v] == o for o, v in mine if o is not None and o >= 0)
    finally:
        client.close()
    for p in range(3):
        wait_same_logs(cluster, name, p, 60)
    print(f"\nleader {victim} killed under load: {len(acked)} records acknowledged, all read back once")


def test_an_old_leaders_divergent_records_are_truncated_when_it_returns(cluster):
    name = unique("diverge")
    create(cluster, name, assignment=[[1, 2, 3]], configs={"min.insync.replicas": "1"})
    cluster.wait_until(lambda: partition(cluster, name).leader_id == 1, 30, "broker 1 leading")
    assert produce(cluster, 1, name, [b"shared-%d" % i for i in range(3)]).error_code == 0
    wait_same_logs(cluster, name)
    for follower in (2, 3):
        cluster.proxies[1].cut(source=follower)  # the followers cannot fetch from broker 1 any more
    try:
        lonely = produce(cluster, 1, name, [b"only-on-the-old-leader-%d" % i for i in range(4)], acks=1)
        assert (lonely.error_code, lonely.base_offset) == (0, 3)
        cluster.brokers[1].kill()  # its ISR still names 2 and 3 (less than replica.lag.time.max.ms passed)
        cluster.wait_until(lambda: partition(cluster, name, via=2).leader_id in (2, 3), 60, "a new leader")
        new_leader = partition(cluster, name, via=2).leader_id
        written = produce(cluster, new_leader, name, [b"new-term-%d" % i for i in range(2)])
        assert (written.error_code, written.base_offset) == (0, 3)
    finally:
        for follower in (2, 3):
            cluster.proxies[1].heal(source=follower)
    cluster.start([1])
    cluster.wait_formed()
    wait_isr(cluster, name, 3, timeout=60)
    data = wait_same_logs(cluster, name)
    assert b"only-on-the-old-leader" not in data and data.count(b"new-term-1") == 1
    assert "Truncating" in cluster.output(1)
    client = CLIENTS["confluent-kafka"](cluster.bootstrap)
    try:
        got = client.consume(name, 0, "earliest", 5)
        assert [m.value for m in got] == [b"shared-0", b"shared-1", b"shared-2", b"new-term-0", b"new-term-1"]
    finally:
        client.close()


def test_offsets_for_leader_epoch_answers_from_the_leaders_epoch_cache(cluster):
    name = unique("epochs")
    create(cluster, name, assignment=[[2, 3, 1]])
    leader = partition(cluster, name).leader_id
    assert produce(cluster, leader, name, [b"a", b"b"]).error_code == 0
    epoch0 = partition(cluster, name).leader_epoch
    raw = RawClient(cluster.brokers[leader].bootstrap)
    try:
        def ask(epoch):
            r = raw.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{"topic": name,
                            "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]})
            p = r.topics[0].partitions[0]
            return p.error_code, p.leader_epoch, p.end_offset
        assert ask(epoch0) == (0, epoch0, 2)
        assert ask(epoch0 + 5) == (0, -1, -1)  # newer than any epoch known: undefined, as Kafka answers
    finally:
        raw.close()
    follower = next(r for r in partition(cluster, name).replica_nodes if r != leader)
    refused = RawClient(cluster.brokers[follower].bootstrap)
    try:
        r = refused.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{"topic": name,
                            "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch0}]}]})
        assert r.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER: only the leader answers
    finally:
        refused.close()


def produce_batch(cluster, broker_id: int, name: str, batch: bytes):
    """One Produce (acks=all) of ``batch`` to partition 0 of ``name``; the partition's answer."""
    raw = RawClient(cluster.brokers[broker_id].bootstrap)
    try:
        resp = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": batch}]}]})
        return resp.responses[0].partition_responses[0]
    finally:
        raw.close()


def test_an_idempotent_retry_while_the_isr_is_too_small_gets_its_original_offset(cluster):
    """A retry of a batch already in the log is answered as the duplicate it is even while the ISR is below
    min.insync.replicas, where Kafka answers NOT_ENOUGH_REPLICAS ("not written"): librdkafka then renumbered the
    batch under a bumped epoch once a later batch of its met OUT_OF_ORDER_SEQUENCE_NUMBER, and it was written
    twice (the Jepsen run's duplicates). A batch not in the log is still refused."""
    name = unique("dedup-isr")
    create(cluster, name, configs={"min.insync.replicas": "3"})
    state = partition(cluster, name)
    leader, controller = state.leader_id, cluster.controller_id()
    follower = next(r for r in state.replica_nodes if r not in (leader, controller))
    now = int(time.time() * 1000)
    first, second = (build_batch([(None, v, [], now)], producer_id=4343, producer_epoch=0, base_sequence=seq)
                     for seq, v in enumerate([b"once", b"next"]))
    answer = produce_batch(cluster, leader, name, first)
    assert (answer.error_code, answer.base_offset) == (0, 0)
    cluster.proxies[leader].cut(source=follower)
    try:
        # A follower behind the leader's log end leaves the ISR (one at the end stays in it, however silent).
        assert produce(cluster, leader, name, [b"plain"], acks=1).error_code == 0
        cluster.wait_until(lambda: follower not in partition(cluster, name, via=leader).isr_nodes, 30,
                           f"the leader dropping {follower} from the ISR of {name}-0")
        retry = produce_batch(cluster, leader, name, first)  # its answer was lost: the producer sends it again
        assert (retry.error_code, retry.base_offset) == (0, 0), retry
        refused = produce_batch(cluster, leader, name, second)
        assert refused.error_code == NOT_ENOUGH_REPLICAS, refused
    finally:
        cluster.proxies[leader].heal(source=follower)
    wait_isr(cluster, name, 3, timeout=60)
    answer = produce_batch(cluster, leader, name, second)
    assert (answer.error_code, answer.base_offset) == (0, 2), answer
    assert produce_batch(cluster, leader, name, first).base_offset == 0  # still the duplicate it was
    client = CLIENTS["confluent-kafka"](cluster.brokers[leader].bootstrap)
    try:
        assert client.watermarks(name, 0) == (0, 3)
    finally:
        client.close()


def test_an_idempotent_retry_after_a_failover_is_a_duplicate(cluster):
    name = unique("dedup")
    create(cluster, name, assignment=[[3, 1, 2]], configs={"min.insync.replicas": "2"})
    cluster.wait_until(lambda: partition(cluster, name).leader_id == 3, 30, "broker 3 leading")
    batch = build_batch([(None, b"once", [], int(time.time() * 1000))], producer_id=4242, producer_epoch=0,
                        base_sequence=0)

    def send(broker_id):
        return produce_batch(cluster, broker_id, name, batch)
    first = send(3)
    assert (first.error_code, first.base_offset) == (0, 0)
    wait_same_logs(cluster, name)
    cluster.brokers[3].kill()
    cluster.wait_until(lambda: partition(cluster, name, via=1).leader_id in (1, 2), 60, "a new leader")
    new_leader = partition(cluster, name, via=1).leader_id
    retry = send(new_leader)  # the producer never saw its answer and sends the batch again
    assert (retry.error_code, retry.base_offset) == (0, 0)  # the new leader knows it: the same offset
    client = CLIENTS["confluent-kafka"](cluster.brokers[new_leader].bootstrap)
    try:
        assert client.watermarks(name, 0) == (0, 1)  # one record, not two
    finally:
        client.close()
    cluster.start([3])
    cluster.wait_formed()
    wait_isr(cluster, name, 3, timeout=60)


def test_committed_offsets_survive_the_loss_of_their_coordinator(cluster):
    from confluent_kafka import Consumer, TopicPartition
    name = unique("commits")
    group = unique("g")
    create(cluster, name, 1)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(name, 0, 17)], asynchronous=False)
        coordinator = None
        md = cluster.metadata(cluster.running_ids()[0], ["__consumer_offsets"]).topics[0]
        assert all(len(p.replica_nodes) == 3 for p in md.partitions)  # replicated with Kafka's default
        raw = RawClient(cluster.bootstrap.split(",")[0])
        try:
            found = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
            coordinator = found.node_id
        finally:
            raw.close()
    finally:
        consumer.close()
    cluster.brokers[coordinator].kill()
    try:
        survivors = ",".join(cluster.brokers[i].bootstrap for i in cluster.brokers if i != coordinator)

        def committed():
            c = Consumer({"bootstrap.servers": survivors, "group.id": group, "enable.auto.commit": False})
            try:
                return c.committed([TopicPartition(name, 0)], timeout=10)[0].offset
            finally:
                c.close()
        assert cluster.wait_until(lambda: committed() == 17, 60, "the commit read from a new coordinator")
    finally:
        cluster.start([coordinator])
        cluster.wait_formed()


def test_a_consumer_is_sent_to_the_replica_in_its_rack(cluster):
    from confluent_kafka import Consumer, TopicPartition
    name = unique("closest")
    create(cluster, name, assignment=[[1, 2, 3]])
    cluster.wait_until(lambda: partition(cluster, name).leader_id == 1, 30, "broker 1 leading")
    assert produce(cluster, 1, name, [b"near-%d" % i for i in range(20)]).error_code == 0
    wait_same_logs(cluster, name)

    def fetch(broker_id: int, rack: str):
        raw = RawClient(cluster.brokers[broker_id].bootstrap)
        try:
            r = raw.request(ApiKey.FETCH, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 1,
                                               "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                               "session_epoch": -1, "topics": [{"topic": name, "partitions": [{
                                                   "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                   "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                               "forgotten_topics_data": [], "rack_id": rack})
            return r.responses[0].partitions[0]
        finally:
            raw.close()
    sent = fetch(1, "rack-2")
    assert (sent.error_code, sent.preferred_read_replica, sent.records or b"") == (0, 2, b"")
    local = fetch(1, "rack-1")
    assert local.preferred_read_replica == -1 and local.records  # the leader is in the consumer's rack
    # The follower serves a consumer of Fetch v11, up to its high watermark (which reaches it with its next fetch).
    served = cluster.wait_until(lambda: (r := fetch(2, "rack-2")).high_watermark == 20 and r, 30,
                                "the follower knowing the high watermark")
    assert served.error_code == 0 and served.records
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("g"), "client.rack": "rack-3",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(name, 0, 0)])
        got = []

        def read():
            if len(got) >= 20:
                return True
            m = consumer.poll(1)
            if m is not None and not m.error():
                got.append(m.value())
            return not_yet(len(got))

        wait_until(read, 30, interval=0, what="20 records (how many arrived)")
        assert got == [b"near-%d" % i for i in range(20)]
    finally:
        consumer.close()


def test_a_failed_log_dir_moves_its_leaderships_and_leaves_the_isrs(cluster):
    name = unique("dir-fails")
    create(cluster, name, 2, assignment=[[3, 1, 2], [3, 1, 2]], configs={"min.insync.replicas": "2"})
    cluster.wait_until(lambda: all(partition(cluster, name, p).leader_id == 3 for p in (0, 1)), 30, "3 leading")
    for p in (0, 1):
        assert produce(cluster, 3, name, [b"before-%d" % p], p=p).error_code == 0
    failing = replica_folder(cluster, 3, name, 0).parent
    hit = [p for p in (0, 1) if replica_folder(cluster, 3, name, p).parent == failing]
    spared = [p for p in (0, 1) if p not in hit]
    checkpoint = failing / "recovery-point-offset-checkpoint"
    checkpoint.unlink()
    (checkpoint / "in-the-way").mkdir(parents=True)  # the next checkpoint fails with EISDIR: the dir goes offline
    try:
        for p in hit:
            state = cluster.wait_until(lambda p=p: (s := partition(cluster, name, p, via=1)).leader_id in (1, 2)
                                       and 3 not in s.isr_nodes and s, 60, f"{name}-{p} moving off broker 3")
            answer = produce(cluster, state.leader_id, name, [b"after-%d" % p], p=p)
            assert answer.error_code == 0, answer  # the two in-sync replicas left meet min.insync.replicas
        for p in spared:
            assert partition(cluster, name, p).leader_id == 3  # the other dir's replicas are not touched
            assert produce(cluster, 3, name, [b"after-%d" % p], p=p).error_code == 0
        assert "offline replica" in cluster.output(cluster.controller_id())
    finally:
        (checkpoint / "in-the-way").rmdir()
        checkpoint.rmdir()
        cluster.brokers[3].stop()
        cluster.start([3])
        cluster.wait_formed()
    for p in (0, 1):
        wait_isr(cluster, name, 3, p, timeout=60)
        assert wait_same_logs(cluster, name, p).count(b"after-%d" % p) == 1
