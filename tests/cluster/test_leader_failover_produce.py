"""Producers across a leader's SIGKILL on three tierlog brokers (ZooKeeper mode, RF=3): ``tierlog produce``
(the CLI, a subprocess), tierlog's client producer and Kafka's console producer (4.1) each write 1,000
records, the first half before the kill and the second half after it, to a topic of their own led by the
broker that is killed. A tierlog consumer in a group whose coordinator is that broker reads the client's
topic throughout and commits at the end, and a tierlog admin client asks for the group's offsets right
after the kill: the fetcher follows the leader and both rediscover the lost coordinator.

Kafka's clients follow the leadership: a connection to the dead leader that fails marks the metadata
stale, the client asks for it again (backing off while the answers still name the dead broker) and sends
its batches to the new leader as soon as one is named. The test measures the election (kill to the first
Metadata answer of a surviving broker naming a new leader of every topic) and requires both tierlog
producers to finish, every record acknowledged, within that time plus 2 s; Kafka's producer runs beside
them as the reference. Every topic is read back: each of its 1,000 values exactly once.

The kill waits for an event, not a time: every producer's first 500 records acknowledged (the client's
futures; the high watermark of the CLI's and the console producer's topics, which with acks=all counts
only acknowledged records). ``zookeeper.session.timeout.ms`` is 3 s, so the election takes about that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.harness import apache_kafka, rawclient
from tests.harness.rawclient import RawClient, unique
from tests.harness.tierlog_cluster import create, start_cluster
from tests.harness.transactions import list_offset
from tests.harness.waiting import TimedOut, wait_until, wait_until_async
from tierlog.client.admin import Admin
from tierlog.client.consumer import Consumer
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition
from tierlog.protocol import ApiKey

RECORDS = 1000
HALF = RECORDS // 2
SESSION_MS = 3000
MARGIN_S = 2.0  # what a client may take after the election to find and use the new leader


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    c = start_cluster(tmp_path_factory.mktemp("failover-produce"), zookeeper, brokers=3,
                      settings={"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.fetch.backoff.ms": "200"})
    yield c
    c.stop()


def values(name: str, start: int, stop: int) -> list[bytes]:
    return [f"{name}-{n:04d}".encode() for n in range(start, stop)]


def high_watermark(cluster, leader: int, topic: str) -> int:
    raw = RawClient(cluster.brokers[leader].bootstrap)
    try:
        return list_offset(raw, topic, 0)
    finally:
        raw.close()


def leaders(cluster, topics: list[str], via: int) -> set[int]:
    md = rawclient.metadata(cluster.brokers[via].bootstrap, topics)
    return {p.leader_id for t in md.topics for p in t.partitions}


def read_back(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[bytes]:
    """Every value of the topic's partition from offset 0 up to ``count`` records (confluent-kafka: a
    reader that is not the client under test)."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": unique("failover-read"),
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, 0, 0)])
    got: list[bytes] = []

    def read():
        if len(got) < count:
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        return len(got) >= count

    try:
        with contextlib.suppress(TimedOut):  # the caller judges what arrived
            wait_until(read, timeout, interval=0, what=f"{count} records")
    finally:
        c.close()
    return got


def group_coordinated_by(cluster, broker_id: int) -> str:
    """A new group id whose coordinator is ``broker_id`` (the leader of its __consumer_offsets partition)."""
    def find():
        raw = RawClient(cluster.brokers[broker_id].bootstrap)
        try:
            for _ in range(50):
                group = unique("failover-group")
                r = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
                if r.error_code == 0 and r.node_id == broker_id:
                    return group
        finally:
            raw.close()
        return None
    return cluster.wait_until(find, 30, f"a group coordinated by broker {broker_id}")


class Piped:
    """A producer process reading records from its standard input, one per line. ``reported``: when its
    report line (one starting with ``report``) came, else when it exited: the moment every record is
    acknowledged, whatever the process's own exit costs."""

    def __init__(self, name: str, argv: list[str], report: str | None = None, env: dict | None = None) -> None:
        self.name, self.argv, self.report, self.env = name, argv, report, env
        self.proc: asyncio.subprocess.Process | None = None
        self.reported: float | None = None
        self.exited: float | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(*self.argv, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE, env=self.env)

    async def write(self, lines: list[bytes]) -> None:
        self.proc.stdin.write(b"".join(v + b"\n" for v in lines))
        await self.proc.stdin.drain()

    async def finish(self, lines: list[bytes]) -> tuple[int, str, str]:
        await self.write(lines)
        self.proc.stdin.close()
        err = asyncio.ensure_future(self.proc.stderr.read())
        out = []
        while line := await self.proc.stdout.readline():
            out.append(line.decode())
            if self.report and self.reported is None and line.decode().startswith(self.report):
                self.reported = time.monotonic()
        code = await self.proc.wait()
        self.exited = time.monotonic()
        self.reported = self.reported or self.exited
        return code, "".join(out), (await err).decode()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


async def wait_for(check, timeout: float, what: str) -> None:
    """``wait_until_async`` of a blocking ``check`` (run in a thread), the test's argument order."""
    await wait_until_async(lambda: asyncio.to_thread(check), timeout, what=what)


def test_producers_deliver_every_record_across_a_leader_kill(cluster, kafka_jars):
    controller = cluster.controller_id()
    victim = next(i for i in cluster.running_ids() if i != controller)  # an election, not a controller move
    survivor = controller
    names = {who: unique(f"failover-{who}") for who in ("cli", "client", "kafka")}
    others = [i for i in cluster.running_ids() if i != victim]
    for topic in names.values():
        create(cluster, topic, configs={"min.insync.replicas": "2"}, assignment=[[victim, *others]])
    bootstrap = cluster.bootstrap
    # unbuffered: the report line comes when it is printed, not when the process exits
    cli = Piped("tierlog produce", [sys.executable, "-m", "tierlog", "produce", names["cli"],
                                    "--bootstrap-server", bootstrap], report="produced ",
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    kafka = Piped("kafka-console-producer", apache_kafka.kafka_peer_module.java_command(
        "ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", names["kafka"], "--timeout", "5"))
    group = group_coordinated_by(cluster, victim)
    timings: dict[str, float] = {}
    consumed: list[bytes] = []

    async def consume(consumer: Consumer, count: int) -> None:
        while len(consumed) < count:
            for records in (await consumer.poll(timeout_ms=200)).values():
                consumed.extend(r.value for r in records)

    async def scenario() -> None:
        await cli.start()
        await kafka.start()
        async with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as producer, \
                Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False}) as consumer, Admin({"bootstrap.servers": bootstrap}) as admin:
            topic = names["client"]
            consumer.subscribe([topic])
            first = [await producer.send(topic, v) for v in values("client", 0, HALF)]
            await cli.write(values("cli", 0, HALF))
            await kafka.write(values("kafka", 0, HALF))
            await asyncio.gather(*first)
            await consume(consumer, HALF)
            await consumer.commit()
            await admin.describe_topics(list(names.values()))  # the admin client knows every broker
            # the event: every producer's first half acknowledged
            for who in ("cli", "kafka"):
                await wait_for(lambda who=who: high_watermark(cluster, victim, names[who]) >= HALF, 60,
                               f"{who}'s first {HALF} records acknowledged")
            cluster.brokers[victim].kill()
            killed = time.monotonic()

            def moved() -> bool:
                now = leaders(cluster, list(names.values()), survivor)
                return victim not in now and -1 not in now

            async def elected() -> None:
                await wait_for(moved, 60, "a new leader named")
                timings["election"] = time.monotonic() - killed

            async def client_rest() -> None:
                rest = [await producer.send(topic, v) for v in values("client", HALF, RECORDS)]
                await asyncio.gather(*rest)
                timings["client"] = time.monotonic() - killed

            async def piped(p: Piped, who: str) -> tuple[int, str, str]:
                result = await p.finish(values(who, HALF, RECORDS))
                timings[who] = p.reported - killed
                timings[f"{who} exit"] = p.exited - killed
                return result

            async def group_offsets() -> None:
                got = await admin.list_consumer_group_offsets(group, timeout_ms=40000)
                timings["admin"] = time.monotonic() - killed
                assert got[TopicPartition(topic, 0)].offset >= HALF, got

            async def consume_rest() -> None:
                await consume(consumer, RECORDS)
                await consumer.commit()
                timings["consumer"] = time.monotonic() - killed
                assert (await consumer.committed(TopicPartition(topic, 0))).offset == len(consumed)

            steps = [asyncio.ensure_future(c) for c in (elected(), client_rest(), piped(cli, "cli"),
                                                         piped(kafka, "kafka"), group_offsets(), consume_rest())]
            _done, pending = await asyncio.wait(steps, timeout=45)
            for step in pending:
                step.cancel()
            assert not pending, f"not done 45 s after the kill (done: {timings})"
            _, _, cli_result, kafka_result, _, _ = (step.result() for step in steps)
        code, out, err = cli_result
        assert code == 0 and f"produced {RECORDS} record(s)" in out, (code, out, err)
        code, out, err = kafka_result
        assert code == 0, (code, out, err)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 180))
    finally:
        cli.kill()
        kafka.kill()
    print(f"after the kill: election {timings['election']:.2f} s, tierlog produce {timings['cli']:.2f} s "
          f"(exited {timings['cli exit']:.2f} s), "
          f"tierlog client {timings['client']:.2f} s, Kafka's console producer {timings['kafka']:.2f} s, "
          f"consumer (read and committed) {timings['consumer']:.2f} s, admin group offsets {timings['admin']:.2f} s")
    assert consumed == values("client", 0, RECORDS)  # in order, each once
    readable = cluster.bootstrap
    for who, topic in names.items():
        got = read_back(readable, topic, RECORDS)
        assert sorted(got) == values(who, 0, RECORDS), f"{who}: {len(got)} records read back"
    for who in ("cli", "client"):
        assert timings[who] <= timings["election"] + MARGIN_S, timings
