"""Three tierlog brokers in ZooKeeper mode: topic administration on any broker, clients through any broker, a share
group's dead-letter queue led by another broker (its writes retried while that broker is away), a share-partition's
state kept by another broker's share coordinator, altered share group offsets taken up by every leader, acks=all
when the ISR is below min.insync.replicas, controller failover after SIGKILL and SIGSTOP, and a rolling restart with
controlled shutdown under an idempotent producer.

One cluster serves the module (the tests run in file order on one worker); each test leaves every broker
running. Replication itself (ISR changes, failover without loss, truncation) is tests/cluster/test_replication.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.harness import rawclient
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, start_cluster
from tests.interop.clients import CLIENTS, Rec, unique
from tierlog.protocol import ApiKey

NOT_ENOUGH_REPLICAS = 19
LEADER_NOT_AVAILABLE = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    # metrics.port: the DLQ test counts the Produce requests a broker received
    c = start_cluster(tmp_path_factory.mktemp("zk-cluster"), zookeeper, brokers=3, settings={"metrics.port": "0"})
    yield c
    c.stop()


def topic_state(cluster, broker_id: int, name: str):
    md = cluster.metadata(broker_id, [name])
    assert md.topics[0].error_code == 0, md.topics[0]
    return {p.partition_index: p for p in md.topics[0].partitions}


def wait_leaders(cluster, name: str, partitions: int, on: list[int] | None = None, timeout: float = 30):
    """Every broker of ``on`` (default: the running ones, not a paused one) shows a leader for every partition
    of ``name``."""
    def ready():
        for i in on or cluster.running_ids():
            parts = topic_state(cluster, i, name)
            if len(parts) != partitions or any(p.leader_id < 0 for p in parts.values()):
                return False
        return True
    cluster.wait_until(ready, timeout, f"leaders for every partition of {name}")


def create(cluster, via: int, name: str, partitions: int, rf: int, configs: dict | None = None,
           assignment: list[list[int]] | None = None, on: list[int] | None = None) -> None:
    """CreateTopics through tierlog's admin client bootstrapped on broker ``via`` only; then wait for leaders
    on the brokers ``on`` (default: every running one)."""
    from tierlog.client.admin import NewTopic
    from tierlog.client.sync import Admin
    admin = Admin({"bootstrap.servers": cluster.brokers[via].bootstrap})
    try:
        if assignment:
            admin.create_topics([NewTopic(name, -1, -1, dict(configs or {}),
                                          {p: reps for p, reps in enumerate(assignment)})])
        else:
            admin.create_topics([NewTopic(name, partitions, rf, dict(configs or {}))])
    finally:
        admin.close()
    wait_leaders(cluster, name, partitions, on)


def test_topic_with_three_replicas_is_spread_and_known_to_every_broker(cluster):
    controller = cluster.controller_id()
    other = next(i for i in cluster.running_ids() if i != controller)
    name = unique("spread")
    create(cluster, other, name, 6, 3)  # sent to a broker that is not the controller: forwarded
    views = [topic_state(cluster, i, name) for i in cluster.running_ids()]
    for view in views[1:]:
        assert {p: (s.leader_id, s.leader_epoch, tuple(s.replica_nodes)) for p, s in view.items()} == \
            {p: (s.leader_id, s.leader_epoch, tuple(s.replica_nodes)) for p, s in views[0].items()}
    leaders = [s.leader_id for s in views[0].values()]
    assert sorted(set(leaders)) == [1, 2, 3], f"leaders not spread: {leaders}"
    for s in views[0].values():
        assert sorted(s.replica_nodes) == [1, 2, 3]
        assert sorted(s.isr_nodes) == [1, 2, 3]  # a new partition: every live replica is in sync
        assert list(s.offline_replicas) == []
    md = cluster.metadata(other)
    assert md.controller_id == controller
    assert sorted(b.node_id for b in md.brokers) == [1, 2, 3]


@pytest.mark.parametrize("client_name", ["kafka-python", "aiokafka", "confluent-kafka", "kcat", "tierlog"])
def test_clients_produce_and_consume_through_any_broker(cluster, client_name):
    name = unique(f"clients-{client_name}")
    create(cluster, 1, name, 3, 2)
    for via in cluster.running_ids():
        client = CLIENTS[client_name](cluster.brokers[via].bootstrap)
        try:
            for p in range(3):  # one partition a run: kcat's limit
                delivered = client.produce(name, [Rec(f"{via}-{i}".encode(), partition=p) for i in range(p, 30, 3)])
                if delivered is not None:
                    assert {q for q, _ in delivered} == {p}
            for p in range(3):
                got = client.consume(name, p, "earliest", 10 * via)
                assert [m.value for m in got[-10:]] == [f"{via}-{i}".encode() for i in range(p, 30, 3)]
        finally:
            client.close()


def test_consumer_group_coordinated_by_the_partition_leader(cluster):
    name = unique("group-topic")
    create(cluster, 2, name, 1, 1)
    client = CLIENTS["kafka-python"](cluster.brokers[3].bootstrap)
    try:
        client.produce(name, [Rec(b"g%d" % i) for i in range(20)])
        got = client.group_consume(unique("g"), name, 20)
        assert [m.value for m in got] == [b"g%d" % i for i in range(20)]
    finally:
        client.close()


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas(cluster):
    name = unique("min-isr")
    # Two replicas on brokers 1 and 2; broker 2 stopped: its replica leaves the ISR, which is then below
    # min.insync.replicas=2.
    create(cluster, 3, name, 1, 3, {"min.insync.replicas": "2"}, assignment=[[1, 2]])
    assert cluster.brokers[2].stop() == 0
    try:
        cluster.wait_until(lambda: list(topic_state(cluster, 1, name)[0].isr_nodes) == [1], 30, "the ISR shrinking")
        addr = cluster.brokers[1].bootstrap
        refused = rawclient.produce(addr, name, 0, [b"never"], acks=-1)
        assert refused.error_code == NOT_ENOUGH_REPLICAS, refused
        accepted = rawclient.produce(addr, name, 0, [b"acks-1"], acks=1)
        assert accepted.error_code == 0
    finally:
        cluster.start([2])
        cluster.wait_formed()
    # The high watermark stands still while the ISR is below min.insync.replicas (Kafka 3.7+): the acks=1
    # record becomes visible once broker 2 is back in sync.
    cluster.wait_until(lambda: sorted(topic_state(cluster, 1, name)[0].isr_nodes) == [1, 2], 60, "the ISR back")
    client = CLIENTS["kafka-python"](cluster.brokers[1].bootstrap)
    try:
        assert [m.value for m in client.consume(name, 0, "earliest", 1)] == [b"acks-1"]
        assert client.watermarks(name, 0) == (0, 1)  # the refused record was never appended
    finally:
        client.close()


def test_partitions_configs_and_deletion_from_a_broker_that_is_not_the_controller(cluster):
    controller = cluster.controller_id()
    other = next(i for i in cluster.running_ids() if i != controller)
    name = unique("admin")
    create(cluster, other, name, 2, 2)
    client = CLIENTS["kafka-python"](cluster.brokers[other].bootstrap)
    try:
        assert client.create_partitions(name, 5) == 0
        wait_leaders(cluster, name, 5)
        assert client.alter_configs("topic", name, {"retention.ms": "123456"}) == 0
        for i in cluster.running_ids():
            probe = CLIENTS["kafka-python"](cluster.brokers[i].bootstrap)
            try:
                assert probe.describe_configs("topic", name)["retention.ms"] == "123456"
            finally:
                probe.close()
        client.produce(name, [Rec(b"x", partition=p) for p in range(5)])
        dirs = [d for b in cluster.brokers.values() for d in b.log_dir.glob(f"{name}-*")]
        assert len(dirs) == 10  # 5 partitions x 2 replicas, each on its broker
        assert client.delete_topics([name]) == {name: 0}
    finally:
        client.close()
    cluster.wait_until(lambda: not [d for b in cluster.brokers.values() for d in b.log_dir.glob(f"{name}-*")], 30,
                       "every replica's log deleted")
    for i in cluster.running_ids():
        assert cluster.metadata(i, [name]).topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_group_configs_from_a_broker_that_is_not_the_controller(cluster):
    """A share group config set through a broker that is not the controller reaches ZooKeeper's
    /config/groups/<group> (Kafka's ConfigType GROUP path) and every broker's DescribeConfigs; DELETE removes it."""
    controller = cluster.controller_id()
    other = next(i for i in cluster.running_ids() if i != controller)
    group = unique("grp")

    def alter(op: int, value: str | None):
        with rawclient.raw_client(cluster.brokers[other].bootstrap) as raw:
            answer = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
                {"resource_type": 32, "resource_name": group, "configs": [
                    {"name": "share.auto.offset.reset", "config_operation": op, "value": value}]}]})
        assert answer.responses[0].error_code == 0, answer

    def described() -> set[tuple[str, int]]:
        seen = set()
        for i in cluster.running_ids():
            with rawclient.raw_client(cluster.brokers[i].bootstrap) as raw:
                r = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                                             "resources": [{"resource_type": 32, "resource_name": group,
                                                                            "configuration_keys": None}]})
                seen |= {(c.value, c.config_source) for c in r.results[0].configs
                         if c.name == "share.auto.offset.reset"}
        return seen

    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=15)
    try:
        alter(0, "earliest")
        data, _ = zk.get(f"/config/groups/{group}")
        assert json.loads(data) == {"version": 1, "config": {"share.auto.offset.reset": "earliest"}}
        cluster.wait_until(lambda: described() == {("earliest", 8)}, 30, "every broker describing the override")
        alter(1, None)
        assert zk.exists(f"/config/groups/{group}") is None
        cluster.wait_until(lambda: described() == {("latest", 5)}, 30, "every broker describing the default")
    finally:
        zk.stop()
        zk.close()


def test_share_group_dlq_written_to_a_partition_led_by_another_broker(cluster):
    """KIP-1191 in a cluster: the source partition's leader (broker 1) writes its share group's rejected records
    to a DLQ partition that broker 2 leads, by a Produce over the inter-broker listener (an append of its own would
    be refused: it does not lead it); the DLQ holds one record per rejection, with Kafka's headers. The two ranges
    rejected by one acknowledgement (offsets 0 and 2) go in one Produce, as Kafka's DLQ manager coalesces what is
    bound for one broker, while DeadLetterQueueTotalProduceRequests counts both ranges, as Kafka 4.4's does."""
    from tests.harness.tiered import sample_value, scrape
    from tests.harness.tierlog_cluster import create
    from tests.server.sharelib import read_dlq, set_group, share_consume
    from tierlog.client.producer import Producer
    from tierlog.client.share_consumer import ACCEPT, REJECT, RELEASE
    from tierlog.server.share_dlq import PRODUCE_REQUESTS

    topic, dlq, group = unique("share-src"), "dlq." + unique("other"), unique("share-dlq")
    create(cluster, topic, assignment=[[1, 2, 3]])
    create(cluster, dlq, assignment=[[2, 3, 1]], configs={"errors.deadletterqueue.group.enable": "true"})
    with rawclient.raw_client(cluster.brokers[1].bootstrap) as raw:
        assert set_group(raw, group, ("errors.deadletterqueue.topic.name", dlq),
                      ("share.auto.offset.reset", "earliest"))[0] == 0

    def produce_requests_at_2() -> float:  # every version's count (the counter has a version label)
        return sum(m.value for m in scrape(cluster.brokers[2])
                   if m.name == "kafka_network_requestmetrics_requests_total" and m.labels.get("request") == "Produce")

    async def produce():
        async with Producer(bootstrap_servers=cluster.bootstrap) as producer:
            for i in range(4):  # one batch: the share consumer gets the four in one delivery
                await producer.send(topic, f"value-{i}".encode(), key=f"key-{i}".encode())
            await producer.flush()

    asyncio.run(produce())
    before = produce_requests_at_2()

    def plan(offset: int, count: int) -> str:
        return REJECT if offset % 2 == 0 else (RELEASE if count == 1 else ACCEPT)

    deliveries = asyncio.run(share_consume(cluster.bootstrap, group, topic, plan, records=4))
    assert sorted(d for d in set(deliveries) if d[3] == REJECT) == [(0, 0, 1, REJECT), (0, 2, 1, REJECT)]
    records = asyncio.run(read_dlq(cluster.bootstrap, dlq, 1, 2))
    assert sorted((p, dict(h)["__dlq.errors.offset"], dict(h)["__dlq.errors.topic"]) for p, _k, _v, h in records) == [
        (0, b"0", topic.encode()), (0, b"2", topic.encode())]
    assert produce_requests_at_2() - before == 1
    assert sample_value(scrape(cluster.brokers[1]), PRODUCE_REQUESTS, group=group) == 2


def test_share_group_dlq_write_retried_while_its_leader_is_away(cluster):
    """KIP-1191's retries, as Kafka 4.4's DLQ manager: the only replica of the DLQ partition is on a fourth broker,
    which hosts nothing else (so the clients need it not), stopped when broker 1 has a rejected record to write
    there; the write fails and is tried again after a back-off (1 s doubling, five attempts in about 30 s). The
    broker back within them, the record arrives. Stopped again for longer than the five attempts, the next rejected
    record is archived without its DLQ record (the share-partition moves past it). Kafka counts
    DeadLetterQueueFailedProduceRequests only for a Produce that failed: a partition without a leader never gets
    one (Kafka retries CreateTopics instead), so neither write counts there. The fourth broker leaves at the end."""
    from tests.harness.broker import BrokerProcess
    from tests.harness.tiered import sample_value, scrape
    from tests.harness.tierlog_cluster import create
    from tests.server.sharelib import read_dlq, set_group, share_consume
    from tierlog.client.producer import Producer
    from tierlog.client.share_consumer import ACCEPT, REJECT
    from tierlog.server.share_dlq import FAILED_PRODUCE_REQUESTS, MAX_REQUEST_ATTEMPTS

    topic, dlq, group = unique("share-retry"), "dlq." + unique("away"), unique("share-dlq-retry")
    away = 4
    cluster.add_brokers([away], shared=True)
    try:
        create(cluster, topic, assignment=[[1, 2]])
        create(cluster, dlq, assignment=[[away]], configs={"errors.deadletterqueue.group.enable": "true"})
        with rawclient.raw_client(cluster.brokers[1].bootstrap) as raw:
            assert set_group(raw, group, ("errors.deadletterqueue.topic.name", dlq),
                             ("errors.deadletterqueue.copy.record.enable", "true"),
                             ("share.auto.offset.reset", "earliest"))[0] == 0

        async def produce(value: bytes):
            async with Producer(bootstrap_servers=cluster.bootstrap) as producer:
                await producer.send(topic, value, key=value)
                await producer.flush()

        def reject_next(offset: int) -> None:
            asyncio.run(asyncio.wait_for(produce(f"value-{offset}".encode()), 60))
            deliveries = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda o, c: REJECT, records=1))
            assert deliveries == [(0, offset, 1, REJECT)]

        def bring_back() -> None:
            cluster.start([away])
            cluster.wait_formed()
            wait_leaders(cluster, dlq, 1)

        def failed_attempt(n: int) -> bool:
            return f"(share group {group}) failed, attempt {n} of {MAX_REQUEST_ATTEMPTS}" in cluster.output(1)

        # within the attempts: the first one fails, the broker comes back, a later one writes the record
        cluster.brokers[away].stop()
        try:
            reject_next(0)
            cluster.wait_until(lambda: failed_attempt(1), 30, "a failed DLQ write retried")
        finally:
            bring_back()
        records = asyncio.run(read_dlq(cluster.bootstrap, dlq, 1, 1))
        assert [(k, dict(h)["__dlq.errors.offset"], dict(h)["__dlq.errors.message"]) for _p, k, _v, h in records] \
            == [(b"value-0", b"0", b"Offset rejected by client.")]

        # beyond them: archived without its DLQ record
        cluster.brokers[away].stop()
        try:
            reject_next(1)
            cluster.wait_until(lambda: f"to the DLQ of share group {group} ({MAX_REQUEST_ATTEMPTS} attempts)"
                               in cluster.output(1), 90, "the DLQ write given up after its attempts")
            assert failed_attempt(MAX_REQUEST_ATTEMPTS - 1) and not failed_attempt(MAX_REQUEST_ATTEMPTS)
            assert not sample_value(scrape(cluster.brokers[1]), FAILED_PRODUCE_REQUESTS, group=group)
        finally:
            bring_back()
        with rawclient.raw_client(cluster.brokers[away].bootstrap) as raw:  # the DLQ partition's end: one record
            answer = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": dlq, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
            assert answer.topics[0].partitions[0].offset == 1, answer
        asyncio.run(produce(b"value-2"))  # the share-partition went past offset 1: the next delivery is offset 2
        deliveries = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda o, c: ACCEPT, records=1))
        assert [(o, c) for _p, o, c, _k in deliveries] == [(2, 1)]
    finally:  # the other tests know three brokers
        gone = cluster.brokers.pop(away)
        gone.stop()
        BrokerProcess.shared.discard(gone)
        cluster.wait_formed()


def test_share_state_kept_by_the_share_coordinator_of_another_broker(cluster):
    """KIP-932's share coordinator RPCs: the share-partition's leader (broker 1) does not lead the
    ``__share_group_state`` partition of its state (FindCoordinator key type 2 names another broker), so it reads and
    writes the state there with ReadShareGroupState/WriteShareGroupState. The acknowledged records are in that
    broker's state (ReadShareGroupStateSummary), broker 1 itself answers NOT_COORDINATOR for them, and a share
    consumer started afterwards gets only the records produced since. Then leadership moves to broker 2 (preferred
    leader election after reordering the replicas): the new leader reads the state from the coordinator (its
    leader epoch recorded) and delivers only what was never acknowledged."""
    from tests.harness.tierlog_cluster import create
    from tests.server.sharelib import set_group, share_consume
    from tierlog.client.producer import Producer
    from tierlog.client.share_consumer import ACCEPT
    from tierlog.kafka_uuid import uuid_to_str

    topic = unique("share-rpc")
    create(cluster, topic, assignment=[[1, 2, 3]])
    topic_id = cluster.metadata(1, [topic]).topics[0].topic_id
    with rawclient.raw_client(cluster.brokers[1].bootstrap) as raw:
        def coordinator_of(group: str) -> int:
            answer = raw.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [
                f"{group}:{uuid_to_str(topic_id)}:0"]})
            return answer.coordinators[0].node_id

        prefix = unique("share-rpc-group")
        cluster.wait_until(lambda: coordinator_of(prefix) >= 0, 30, "__share_group_state with leaders")
        # a group whose state partition broker 3 leads (the key's hash picks the partition): neither leader of the
        # share-partition, 1 then 2, keeps its state
        group = next(g for g in (f"{prefix}-{i}" for i in range(300)) if coordinator_of(g) == 3)
        coordinator = coordinator_of(group)
        assert set_group(raw, group, ("share.auto.offset.reset", "earliest"))[0] == 0

    async def produce(first: int, n: int):
        async with Producer(bootstrap_servers=cluster.bootstrap) as producer:
            for i in range(first, first + n):
                await producer.send(topic, f"value-{i}".encode())
            await producer.flush()

    asyncio.run(produce(0, 4))
    deliveries = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda offset, count: ACCEPT, records=4))
    assert sorted(deliveries) == [(0, offset, 1, ACCEPT) for offset in range(4)]

    def state(broker: int):
        with rawclient.raw_client(cluster.brokers[broker].bootstrap) as raw:
            answer = raw.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, {"group_id": group, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        return answer.results[0].partitions[0]

    kept = state(coordinator)  # acknowledgements are answered once the state is written there
    leader_epoch = topic_state(cluster, 1, topic)[0].leader_epoch
    assert (kept.error_code, kept.start_offset, kept.leader_epoch) == (0, 4, leader_epoch)
    assert state(1).error_code == 16  # NOT_COORDINATOR: broker 1 keeps none of it

    asyncio.run(produce(4, 2))
    again = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda offset, count: ACCEPT, records=2))
    assert sorted(again) == [(0, 4, 1, ACCEPT), (0, 5, 1, ACCEPT)]

    with rawclient.raw_client(rawclient.controller_address(cluster.bootstrap)) as raw:
        moved = raw.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": [2, 1, 3]}]}]})
        assert moved.error_code == 0 and moved.responses[0].partitions[0].error_code == 0, moved

        def led_by_2() -> bool:
            raw.request(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 30000,
                                                  "topic_partitions": [{"topic": topic, "partitions": [0]}]})
            return all(topic_state(cluster, i, topic)[0].leader_id == 2 for i in (1, 2, 3))
        cluster.wait_until(led_by_2, 30, "broker 2 leading the share-partition")
    asyncio.run(produce(6, 2))
    moved_on = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda offset, count: ACCEPT, records=2))
    assert sorted(moved_on) == [(0, 6, 1, ACCEPT), (0, 7, 1, ACCEPT)]
    kept = state(coordinator)
    assert (kept.start_offset, kept.leader_epoch) == (8, topic_state(cluster, 2, topic)[0].leader_epoch)
    assert kept.leader_epoch > leader_epoch


def test_altered_share_group_offsets_taken_up_by_the_leader_of_every_partition(cluster):
    """AlterShareGroupOffsets in a cluster, as Kafka 4.4: the group's coordinator initializes each share-partition's
    state anew (InitializeShareGroupState to the share coordinator), and the partitions' leaders, brokers 1, 2 and
    3, which held the share-partitions in their cache while the group consumed, dropped them when its last share
    session there closed; so when consumers come back, every leader reads the altered state and delivers from the
    altered offset, back before what the group had acknowledged."""
    from tests.harness.tierlog_cluster import create
    from tests.server.sharelib import set_group, share_consume
    from tierlog.client.producer import Producer
    from tierlog.client.share_consumer import ACCEPT

    topic, group = unique("share-alter"), unique("share-alter-group")
    create(cluster, topic, assignment=[[1, 2], [2, 3], [3, 1]])
    with rawclient.raw_client(cluster.brokers[1].bootstrap) as raw:
        assert set_group(raw, group, ("share.auto.offset.reset", "earliest"))[0] == 0

    async def produce():
        async with Producer(bootstrap_servers=cluster.bootstrap) as producer:
            for p in range(3):
                for i in range(4):
                    await producer.send(topic, f"p{p}-{i}".encode(), partition=p)
            await producer.flush()

    asyncio.run(produce())
    first = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda o, c: ACCEPT, records=12))
    assert sorted((p, o) for p, o, _c, _k in first) == [(p, o) for p in range(3) for o in range(4)]

    altered = {0: 1, 1: 2, 2: 3}
    with rawclient.raw_client(cluster.brokers[1].bootstrap) as raw:
        coordinator = raw.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": [group]})
        node = coordinator.coordinators[0].node_id
    with rawclient.raw_client(cluster.brokers[node].bootstrap) as raw:
        def alter():  # the group is empty once the coordinator has seen the consumer leave
            answer = raw.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
                {"topic_name": topic, "partitions": [{"partition_index": p, "start_offset": o}
                                                     for p, o in altered.items()]}]})
            return answer if answer.error_code == 0 else None
        answer = cluster.wait_until(alter, 30, "AlterShareGroupOffsets of the empty group")
        assert [(r.partition_index, r.error_code) for r in answer.responses[0].partitions] == [(0, 0), (1, 0), (2, 0)]

    again = asyncio.run(share_consume(cluster.bootstrap, group, topic, lambda o, c: ACCEPT,
                                      records=sum(4 - o for o in altered.values())))
    assert sorted((p, o, c) for p, o, c, _k in again) == [(p, o, 1) for p, first_offset in altered.items()
                                                          for o in range(first_offset, 4)]
    leaders = {p: s.leader_id for p, s in topic_state(cluster, 1, topic).items()}
    assert leaders == {0: 1, 1: 2, 2: 3}


def test_controller_killed_another_takes_over_and_the_broker_rejoins(cluster):
    name = unique("failover")
    create(cluster, 1, name, 6, 3)
    old = cluster.controller_id()
    led_by_old = {p for p, s in topic_state(cluster, old, name).items() if s.leader_id == old}
    t0 = time.monotonic()
    cluster.brokers[old].kill()
    survivors = cluster.running_ids()

    def elected():
        seen = {cluster.metadata(i).controller_id for i in survivors}
        return seen.pop() if len(seen) == 1 and next(iter(seen)) in survivors else None
    new = cluster.wait_until(elected, SESSION_TIMEOUT_MS / 1000 * 3, "a new controller")
    took = time.monotonic() - t0
    print(f"\ncontroller {old} killed; broker {new} controller after {took:.1f} s "
          f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s)")

    def settled():
        parts = topic_state(cluster, survivors[0], name)
        return all(s.leader_id in survivors and old not in s.isr_nodes for s in parts.values()) and parts
    parts = cluster.wait_until(settled, 30, "every partition led by a survivor, the dead broker out of the ISRs")
    for s in parts.values():
        assert s.error_code == 0 and old in s.offline_replicas
    # Clients go on with every partition: those the dead broker led moved to an in-sync follower.
    client = CLIENTS["confluent-kafka"](",".join(cluster.brokers[i].bootstrap for i in survivors))
    try:
        delivered = client.produce(name, [Rec(b"after", partition=p) for p in range(6)])
        assert sorted(p for p, _ in delivered) == list(range(6))
    finally:
        client.close()
    cluster.start([old])
    cluster.wait_formed()
    wait_leaders(cluster, name, 6)
    cluster.wait_until(lambda: all(old in s.isr_nodes and not s.offline_replicas
                                   for s in topic_state(cluster, old, name).values()), 60,
                       "the returning broker back in every ISR")
    assert led_by_old  # it led some partitions, and they were not left without a leader


def test_paused_controller_is_fenced_when_it_wakes(cluster):
    old = cluster.controller_id()
    survivors = [i for i in cluster.running_ids() if i != old]
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=15)
    try:
        epoch_before = int(zk.get("/controller_epoch")[0])
        cluster.pause(old)
        try:
            def elected():
                seen = {cluster.metadata(i).controller_id for i in survivors}
                return seen.pop() if len(seen) == 1 and next(iter(seen)) in survivors else None
            new = cluster.wait_until(elected, SESSION_TIMEOUT_MS / 1000 * 3, "a controller other than the paused one")
            name = unique("while-paused")
            create(cluster, new, name, 3, 1, assignment=[[new], [new], [new]], on=survivors)
        finally:
            cluster.resume(old)
        epoch_after = int(zk.get("/controller_epoch")[0])
        assert epoch_after > epoch_before
        # The woken broker learns it lost, and rejoins as an ordinary broker under the new controller.
        cluster.wait_until(lambda: cluster.metadata(old).controller_id == new and
                           sorted(b.node_id for b in cluster.metadata(old).brokers) == [1, 2, 3], 60,
                           "the paused broker following the new controller")
        states = [zk.get(f"/brokers/topics/{name}/partitions/{p}/state")[0] for p in range(3)]
        import json
        assert all(json.loads(s)["controller_epoch"] == epoch_after for s in states)
        assert "no longer the controller" in cluster.output(old) or \
            f"Broker {old} is the controller" not in cluster.output(old).split("Broker", 1)[-1]
    finally:
        zk.stop()
        zk.close()
    cluster.wait_formed()


def test_rolling_restart_with_controlled_shutdown_under_an_idempotent_producer(cluster):
    from confluent_kafka import KafkaError, Producer
    name = unique("rolling")
    # RF 1, two partitions on each broker: each restart takes two partitions away for a moment.
    create(cluster, 1, name, 6, 1, assignment=[[1], [2], [3], [1], [2], [3]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120000})
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"{err.name()} retriable={err.retriable()} fatal={err.fatal()}")
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    def produce():
        i = 0
        while not stop.is_set():
            try:
                producer.produce(name, b"r%d" % i, partition=i % 6, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.002)
    writer = threading.Thread(target=produce)
    writer.start()
    try:
        cluster.wait_until(lambda: len(acked) > 100, 30, "the producer under way")
        for broker_id in sorted(cluster.brokers):
            before = len(acked)
            assert cluster.brokers[broker_id].stop() == 0  # SIGTERM: controlled shutdown
            # RF 1 partitions stay (Kafka moves only those with other replicas); the earlier tests' RF 3
            # topics move their leaderships to another in-sync replica.
            assert "Controlled shutdown" in cluster.output(broker_id)
            cluster.start([broker_id])
            cluster.wait_formed()
            wait_leaders(cluster, name, 6)
            cluster.wait_until(lambda before=before: len(acked) > before + 100, 60, "the producer going on")
    finally:
        stop.set()
        writer.join()
        producer.flush(60)
    fatal = [e for e in errors if "fatal=True" in e]
    assert not fatal and not errors, errors[:5]
    assert KafkaError  # imported for the error names above
    # Every acknowledged record is there exactly once.
    client = CLIENTS["confluent-kafka"](cluster.bootstrap)
    try:
        for p in range(6):
            mine = sorted((o, v) for part, o, v in acked if part == p)
            got = client.consume(name, p, "earliest", len(mine), timeout=60)
            assert [(m.offset, m.value) for m in got] == mine
    finally:
        client.close()
    print(f"\nrolling restart of 3 brokers: {len(acked)} records acknowledged, all read back once, "
          f"{len(errors)} delivery errors")
