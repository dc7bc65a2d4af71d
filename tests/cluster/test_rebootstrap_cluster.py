"""KIP-899 / KIP-1102 on a cluster: every broker replaced by a disjoint set while clients run.

The scenario, as an operator moves a Kafka cluster to new hosts: three brokers hold an RF=3 topic
(min.insync.replicas=2) and ``__consumer_offsets``; three brokers with new ids join the same ZooKeeper
chroot, every partition (the internal ones too) is moved to them with AlterPartitionReassignments, so no
record is left behind, and the old three are stopped. Each test replaces the current set once (1-3 by
4-6, then 4-6 by 7-9...; the test order does not matter), so one cluster serves the module.

Two choices make the scenario KIP-899's and not an ordinary leader change:

- A client that keeps talking to the cluster during the move learns the new brokers from Metadata (the
  old brokers list them as soon as they register) and needs no rebootstrap at all, with either
  strategy. KIP-899 is for the client that never saw the new set: one cut off from the cluster while it
  was replaced (a network partition, a suspended host), as Kafka's RebootstrapTest client never sees the
  broker that was down while it ran. So the clients reach every broker through a forwarder of their own
  (the cluster harness's ``client_proxies``, the address each broker advertises); the forwarders of
  the old brokers are cut before the new brokers start, and those of the new ones open only after the old
  brokers are stopped. The clients keep running and sending throughout. The control test moves the
  cluster without the cut and shows the other case: tierlog's clients with ``none`` carry on.
- ``bootstrap.servers`` names the old brokers' and the new brokers' addresses, as a DNS name or a
  configuration listing the hosts to come would. Those of the new brokers are the forwarders' ports,
  bound when the test starts, so no other process can take them before the brokers exist (a port picked
  free and bound seconds later can be). Kafka's own RebootstrapTest does the same with its two fixed
  broker addresses.

With ``metadata.recovery.strategy=rebootstrap`` tierlog's client, confluent-kafka (librdkafka) and Kafka's
Java client (4.1) go back to ``bootstrap.servers`` once no broker they know is usable, find the new set
and continue: every acknowledged record reads back once (counted per client), consumer groups continue
from their committed offsets, admin calls work. With ``none`` each fails clearly instead: tierlog with
BrokersUnavailableError, librdkafka with Local: Message timed out (producer) and Local: Broker transport
failure (admin), Java with TimeoutException.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import rawclient
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import in_parallel, start_cluster
from tests.harness.waiting import TimedOut, not_yet, wait_until, wait_until_async
from tests.harness.writer import BackgroundWriter
from tierlog.client import admin as tierlog_admin
from tierlog.client.consumer import Consumer
from tierlog.client.errors import BrokersUnavailableError
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition
from tierlog.protocol import ApiKey

PARTITIONS = 3
#: Kafka's RebootstrapTest settings: reconnect back-off and connection set-up times of seconds.
BACKOFF = {"reconnect.backoff.ms": 1000, "reconnect.backoff.max.ms": 1000,
           "socket.connection.setup.timeout.ms": 5000}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, zookeeper):
    cluster = start_cluster(tmp_path_factory.mktemp("rebootstrap"), zookeeper, brokers=3, client_proxies=True,
                            timeout=180, settings={"replica.fetch.backoff.ms": "200",
                                                   "replica.lag.time.max.ms": "10000"})
    fleet = Fleet(cluster)
    yield fleet
    cluster.stop()


class Fleet:
    """The module's cluster and the set of brokers serving it now; ``replace`` moves to the next set."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.current = [1, 2, 3]

    @property
    def next(self) -> list[int]:
        return [i + 3 for i in self.current]

    def bootstrap_servers(self) -> str:
        """What the clients are given: the current brokers' addresses and the next ones'."""
        for i in self.next:
            self.cluster.client_proxy(i).cut()  # bound now, closed until the brokers behind serve
        return self.cluster.client_bootstrap(self.current + self.next)

    def direct(self) -> str:
        """An address of the serving set the test's own requests use (not the clients' path)."""
        return self.cluster.brokers[self.current[0]].bootstrap

    def create_topic(self, name: str, partitions: int = PARTITIONS) -> None:
        rawclient.create_topic_in_cluster(self.direct(), name, partitions, 3, {"min.insync.replicas": "2"})

    def replace(self, timeout: float = 180, cut: bool = True) -> None:
        """Cut the clients off the serving brokers, start the next set, move every partition to it, stop
        the old brokers, then open the clients' paths to the new ones. ``cut=False``: the clients reach
        every broker all along (the new ones as soon as they run), as in a move nobody is cut off from."""
        c, old, new = self.cluster, self.current, self.next
        for i in old if cut else ():
            c.client_proxy(i).cut()
        c.add_brokers(new, timeout=timeout, shared=True)  # the module's cluster
        for i in new if not cut else ():
            c.client_proxy(i).heal()
        via = c.brokers[new[0]].bootstrap  # forwarded to the controller, wherever it is
        targets = reassign_everything(via, new)
        c.wait_until(lambda: moved(c, new, targets), timeout, f"every partition on brokers {new} with a full ISR")
        in_parallel(lambda i: c.brokers[i].stop(60), old)
        self.current = new
        c.wait_formed(timeout)
        for i in new:
            c.client_proxy(i).heal()


def reassign_everything(via: str, new: list[int]) -> dict[tuple[str, int], list[int]]:
    """AlterPartitionReassignments of every partition of every topic (the internal ones too) onto ``new``,
    each keeping its replication factor, preferred leaders spread; the targets."""
    md = rawclient.metadata(via)
    targets = {(t.name, p.partition_index): [new[(p.partition_index + k) % len(new)]
                                             for k in range(len(p.replica_nodes))]
               for t in md.topics for p in t.partitions}
    by_topic: dict[str, list[dict]] = {}
    for (name, p), replicas in targets.items():
        by_topic.setdefault(name, []).append({"partition_index": p, "replicas": replicas})
    raw = RawClient(via, timeout=60)
    try:
        resp = raw.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
            {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
    finally:
        raw.close()
    assert resp.error_code == 0, resp
    assert all(p.error_code == 0 for t in resp.responses for p in t.partitions), resp
    return targets


def moved(cluster, new: list[int], targets: dict) -> bool:
    """Every new broker's Metadata shows every partition on its target replicas, all in sync, led by one."""
    for i in new:
        md = cluster.metadata(i)
        seen = {(t.name, p.partition_index): p for t in md.topics for p in t.partitions}
        for key, replicas in targets.items():
            p = seen.get(key)
            if p is None or list(p.replica_nodes) != replicas or sorted(p.isr_nodes) != sorted(replicas) \
                    or p.leader_id not in replicas:
                return False
    return True


def flowing_again(acked, more: int = 50, timeout: float = 120) -> float:
    """Wait until ``acked()`` (a count of acknowledgements) grew by ``more`` after the replacement; the
    seconds from the replacement's end (the new brokers reachable) to the first of them."""
    start, at_start, first = time.monotonic(), acked(), None
    while acked() < at_start + more:
        assert time.monotonic() < start + timeout, f"{acked() - at_start} records acknowledged in {timeout} s"
        if first is None and acked() > at_start:
            first = time.monotonic() - start
        time.sleep(0.02)
    return first if first is not None else time.monotonic() - start


def run(coro, timeout: float = 400):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# ------------------------------------------------------------------------------------ tierlog's client


class Writer:
    """Sends numbered values on its own task until stopped, keeping what was acknowledged."""

    def __init__(self, producer: Producer, topic: str, prefix: str) -> None:
        self.producer, self.topic, self.prefix = producer, topic, prefix
        self.acked: list[bytes] = []
        self.failed: list[BaseException] = []
        self.pending: list[asyncio.Future] = []
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"{self.prefix}{i}".encode()
            future = await self.producer.send(self.topic, value, key=f"k{i}".encode())
            future.add_done_callback(lambda f, v=value: self.failed.append(f.exception()) if f.exception()
                                     else self.acked.append(v))
            self.pending.append(future)
            i += 1
            await asyncio.sleep(0.02)

    async def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        await self._task
        await asyncio.wait_for(asyncio.gather(*self.pending, return_exceptions=True), timeout)


async def consume(consumer: Consumer, got: list[bytes], until, timeout: float) -> None:
    async def consumed():
        if until():
            return True
        for records in (await consumer.poll(timeout_ms=500)).values():
            got.extend(r.value for r in records)
        return False

    with contextlib.suppress(TimedOut):  # the caller judges what arrived
        await wait_until_async(consumed, timeout, interval=0, what="the records")


async def read_back(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS,
                    timeout: float = 60) -> list[bytes]:
    """Every value of ``topic`` as a fresh consumer reads it; the end offsets must add up to ``expected``."""
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        assert sum(ends.values()) == expected, f"{topic} holds {sum(ends.values())} records, not {expected}"
        got: list[bytes] = []
        await consume(consumer, got, lambda: len(got) >= expected, timeout)
        return got


def test_tierlog_clients_rebootstrap_or_fail_clearly(fleet):
    topic = unique("reb-tierlog")
    fleet.create_topic(topic)
    bootstrap = fleet.bootstrap_servers()
    old = list(fleet.current)

    async def scenario():
        rebootstrap = {**BACKOFF, "bootstrap.servers": bootstrap, "metadata.recovery.strategy": "rebootstrap"}
        none = {**BACKOFF, "bootstrap.servers": bootstrap, "metadata.recovery.strategy": "none",
                "request.timeout.ms": 3000}
        async with Producer({**rebootstrap, "acks": "all", "enable.idempotence": True,
                             "delivery.timeout.ms": 300000}) as producer, \
                Consumer({**rebootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                          "enable.auto.commit": False}) as consumer, \
                tierlog_admin.Admin(rebootstrap) as admin, \
                Producer({**none, "delivery.timeout.ms": 8000, "linger.ms": 0}) as producer_none, \
                Consumer({**none, "default.api.timeout.ms": 8000}) as consumer_none, \
                tierlog_admin.Admin({**none, "default.api.timeout.ms": 8000}) as admin_none:
            # both sets of clients work with the old brokers
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            for i in range(20):
                await (await producer_none.send(topic, f"n{i}".encode()))
            consumer_none.assign(tps)
            assert sum((await consumer_none.end_offsets(tps)).values()) == 20
            assert topic in await admin_none.list_topics()
            assert {b.node_id for b in (await admin.describe_cluster()).brokers} == set(old)

            consumer.subscribe([topic])
            writer = Writer(producer, topic, "w")
            got: list[bytes] = []
            reader = asyncio.get_running_loop().create_task(
                consume(consumer, got, lambda: False, 3600))  # runs until cancelled
            await consume_until(got, 40)  # the group reads while the writer writes
            t0 = time.monotonic()
            await asyncio.to_thread(fleet.replace)  # the clients' tasks run on meanwhile
            print(f"brokers {old} replaced by {fleet.current} in {time.monotonic() - t0:.1f} s")
            resumed = await asyncio.to_thread(flowing_again, lambda: len(writer.acked))
            print(f"tierlog: acknowledgements again {resumed:.1f} s after the new brokers became reachable")
            await writer.stop()
            assert writer.failed == [], writer.failed[:3]
            expected = sorted(writer.acked + [f"n{i}".encode() for i in range(20)])
            await consume_until(got, len(expected))
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            for records in (await consumer.poll(timeout_ms=1000)).values():  # a duplicate would come now
                got += [r.value for r in records]
            assert sorted(got) == expected, f"read {len(got)} of {len(expected)} acknowledged"
            await consumer.commit()
            committed = await consumer.committed(tps)
            assert sum(om.offset for om in committed.values()) == len(expected)
            name = unique("reb-admin")
            await admin.create_topics([tierlog_admin.NewTopic(name, 1, 3)])
            assert {topic, name} <= set(await admin.list_topics())
            assert {b.node_id for b in (await admin.describe_cluster()).brokers} == set(fleet.current)
            for client in (producer.client, consumer.client, admin._client):
                assert client.rebootstraps >= 1
            print(f"tierlog: {len(writer.acked)} acknowledged while the brokers were replaced, "
                  f"{len(got)} consumed by the group")

            # strategy none: the brokers it knows are gone, and it never looks anywhere else
            async def lost() -> None:
                await (await producer_none.send(topic, b"lost"))
            outcomes = await asyncio.gather(lost(), consumer_none.end_offsets(tps), admin_none.list_topics(),
                                            return_exceptions=True)
            for outcome in outcomes:
                assert isinstance(outcome, BrokersUnavailableError), outcome
                assert "metadata.recovery.strategy=none" in str(outcome)
                for i in old:
                    assert f"{i}@" in str(outcome)  # it names the brokers it still knows
            for client in (producer_none.client, consumer_none.client, admin_none._client):
                assert client.rebootstraps == 0
        back = await read_back(fleet.cluster.client_bootstrap(fleet.current), topic, len(expected))
        assert sorted(back) == expected
        print(f"tierlog: {len(expected)} acknowledged, {len(back)} read back")

    async def consume_until(got: list[bytes], n: int, timeout: float = 120) -> None:
        await wait_until_async(lambda: len(got) >= n or not_yet(len(got)), timeout, interval=0.1,
                               what=f"the group to read {n} (how many it read)")

    run(scenario())


def test_clients_that_see_the_move_need_no_rebootstrap(fleet):
    """The control: clients never cut off learn the new brokers from Metadata while partitions move, so
    even with ``none`` and only the old brokers in ``bootstrap.servers`` they carry on."""
    topic = unique("reb-control")
    fleet.create_topic(topic)
    old = list(fleet.current)

    async def scenario():
        none = {"bootstrap.servers": fleet.cluster.client_bootstrap(old), "metadata.recovery.strategy": "none"}
        async with Producer({**none, "acks": "all", "enable.idempotence": True,
                             "delivery.timeout.ms": 300000}) as producer, \
                Consumer({**none, "group.id": unique("g"), "auto.offset.reset": "earliest",
                          "enable.auto.commit": False}) as consumer:
            consumer.subscribe([topic])
            writer = Writer(producer, topic, "w")
            got: list[bytes] = []
            reader = asyncio.get_running_loop().create_task(consume(consumer, got, lambda: False, 3600))
            await asyncio.to_thread(fleet.replace, cut=False)
            await asyncio.to_thread(flowing_again, lambda: len(writer.acked))
            await writer.stop()
            assert writer.failed == [], writer.failed[:3]
            with contextlib.suppress(TimedOut):  # asserted below
                await wait_until_async(lambda: len(got) >= len(writer.acked), 120, interval=0.1,
                                       what="every acknowledged record consumed")
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            assert sorted(got) == sorted(writer.acked)
            # learned from Metadata (the stopped brokers go at the next refresh)
            assert set(fleet.current) <= {n.node_id for n in producer.client.cluster.brokers.values()}
            assert producer.client.rebootstraps == consumer.client.rebootstraps == 0
            print(f"control: {len(writer.acked)} acknowledged and consumed without a rebootstrap")
        assert sorted(await read_back(fleet.cluster.client_bootstrap(fleet.current), topic,
                                      len(writer.acked))) == sorted(writer.acked)
    run(scenario())


# ------------------------------------------------------------------------------------ confluent-kafka


class ThreadConsumer:
    """A librdkafka consumer in a group, polling on a thread of its own until stopped."""

    def __init__(self, conf: dict, topic: str) -> None:
        self.consumer = confluent_kafka.Consumer(conf)
        self.consumer.subscribe([topic])
        self.got: list[bytes] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"consumer-{topic}")
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.consume(100, 0.2):
                (self.errors if m.error() else self.got).append(m.error() or m.value())

    def wait_for(self, n: int, timeout: float = 120) -> None:
        wait_until(lambda: len(self.got) >= n or not_yet(len(self.got)), timeout, interval=0.1,
                   what=f"the group to read {n} (how many it read)")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_confluent_kafka_rebootstraps_or_fails_clearly(fleet):
    topic = unique("reb-librdkafka")
    fleet.create_topic(topic)
    bootstrap = fleet.bootstrap_servers()
    old = list(fleet.current)
    conf = {**BACKOFF, "bootstrap.servers": bootstrap, "metadata.recovery.strategy": "rebootstrap"}
    none = {**BACKOFF, "bootstrap.servers": bootstrap, "metadata.recovery.strategy": "none"}
    producer_none = confluent_kafka.Producer({**none, "message.timeout.ms": 5000})
    admin_none = AdminClient(none)
    admin = AdminClient(conf)
    reports: list = []
    for i in range(20):
        producer_none.produce(topic, f"n{i}".encode(), on_delivery=lambda err, _m: reports.append(err))
    assert producer_none.flush(30) == 0 and reports == [None] * 20
    assert topic in admin_none.list_topics(timeout=10).topics

    writer = BackgroundWriter(bootstrap, topic, b"w", PARTITIONS, settings={
        **conf, "message.timeout.ms": 300000, "queue.buffering.max.messages": 20000}).start()
    group = ThreadConsumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest",
                            "enable.auto.commit": False}, topic)
    try:
        group.wait_for(40)
        t0 = time.monotonic()
        fleet.replace()
        print(f"brokers {old} replaced by {fleet.current} in {time.monotonic() - t0:.1f} s")
        resumed = flowing_again(writer.acked.__len__)
        print(f"librdkafka: acknowledgements again {resumed:.1f} s after the new brokers became reachable")
        writer.stop()
        assert writer.errors == [], writer.errors[:3]
        acked = len(writer.acked)
        expected = sorted([v for _, _, v in writer.acked] + [f"n{i}".encode() for i in range(20)])
        group.wait_for(len(expected))
    finally:
        group.stop()
    try:
        assert sorted(group.got) == expected, f"read {len(group.got)} of {len(expected)} acknowledged"
        group.consumer.commit(asynchronous=False)
        committed = group.consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)],
                                             timeout=30)
        assert sum(tp.offset for tp in committed) == len(expected)
    finally:
        group.consumer.close()
    name = unique("reb-admin")
    admin.create_topics([NewTopic(name, 1, 3)])[name].result(30)
    md = admin.list_topics(timeout=30)
    assert {topic, name} <= set(md.topics)
    assert set(md.brokers) == set(fleet.current)
    print(f"librdkafka: {acked} acknowledged while the brokers were replaced, "
          f"{len(group.got)} consumed by the group")

    # strategy none: the brokers it knows are gone, and it never looks anywhere else
    reports.clear()
    producer_none.produce(topic, b"lost", on_delivery=lambda err, _m: reports.append(err))
    assert producer_none.flush(30) == 0
    assert [e.code() for e in reports] == [confluent_kafka.KafkaError._MSG_TIMED_OUT]
    with pytest.raises(confluent_kafka.KafkaException) as info:
        admin_none.list_topics(timeout=5)
    assert info.value.args[0].code() == confluent_kafka.KafkaError._TRANSPORT

    # librdkafka's handles go (they keep dialling the old brokers otherwise); info's traceback holds the frame
    del producer_none, admin_none, admin, writer, info
    gc.collect()
    back = run(read_back(fleet.cluster.client_bootstrap(fleet.current), topic, len(expected)))
    assert sorted(back) == expected
    print(f"librdkafka: {len(expected)} acknowledged, {len(back)} read back")


# ------------------------------------------------------------------------------------ Kafka's Java client


def test_java_client_rebootstraps_or_fails_clearly(fleet, java):
    topic = unique("reb-java")
    fleet.create_topic(topic)
    bootstrap = fleet.bootstrap_servers()
    old = list(fleet.current)
    settings = {**BACKOFF, "socket.connection.setup.timeout.max.ms": 5000, "bootstrap.servers": bootstrap}
    clients = java({**settings, "metadata.recovery.strategy": "rebootstrap", "acks": "all",
                    "delivery.timeout.ms": 300000})
    clients_none = java({**settings, "metadata.recovery.strategy": "none", "delivery.timeout.ms": 5000,
                         "request.timeout.ms": 2000, "default.api.timeout.ms": 5000, "linger.ms": 0})
    clients_none.ok(f"produce {topic} n 20")
    assert topic in clients_none.ok("list").split(",")
    clients.ok(f"produce {topic} a 100")
    clients.ok(f"subscribe {topic} {unique('g')}")
    got = clients.ok("consume 120 60000").split(",")

    replacing = threading.Thread(target=fleet.replace)
    replacing.start()
    try:
        fleet.cluster.wait_until(lambda: all(fleet.cluster.client_proxy(i).is_cut for i in old), 30, "the cut")
        t0 = time.monotonic()
        clients.ok(f"produce {topic} w 100", timeout=400)  # sent while no broker is reachable
        print(f"Java producer delivered {time.monotonic() - t0:.1f} s after the clients were cut off")
    finally:
        replacing.join()
    got += clients.ok("consume 100 120000").split(",")
    clients.ok(f"produce {topic} b 50")
    got += clients.ok("consume 50 60000").split(",")
    assert clients.ok("consume 1 2000") == ""  # nothing more: no duplicate
    name = unique("reb-admin")
    clients.ok(f"create {name} 1")
    assert {topic, name} <= set(clients.ok("list").split(","))
    expected = sorted(f"{p}{i}".encode() for p, n in (("n", 20), ("a", 100), ("w", 100), ("b", 50))
                      for i in range(n))
    assert sorted(v.encode() for v in got) == expected, f"read {len(got)} of {len(expected)} acknowledged"

    # strategy none: the brokers it knows are gone, and it never looks anywhere else
    assert clients_none(f"produce {topic} lost 1").startswith("ERR org.apache.kafka.common.errors.TimeoutException")
    assert clients_none("list").startswith("ERR org.apache.kafka.common.errors.TimeoutException")

    back = run(read_back(fleet.cluster.client_bootstrap(fleet.current), topic, len(expected)))
    assert sorted(back) == expected
    print(f"Java: {len(expected)} acknowledged, {len(back)} read back")
