"""The interoperability scenarios, one function per feature, with the client under test and the broker
as arguments: test_clients.py runs each with every client against tierlog, test_kafka_peer.py with
tierlog's own client against Apache Kafka.

``client`` is the adapter under test (tests/interop/clients.py); ``neutral`` is kafka-python, used only to
set a scenario up or to check what the client under test cannot show; ``broker`` is the broker the
clients talk to (``port``, ``bootstrap``, ``log_dir``); ``interop_broker(settings)`` starts a private
broker (``restart(clean)`` on the same port) and ``make_client(bootstrap)`` connects another adapter.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from pathlib import Path

from tests.harness import waiting
from tests.interop.clients import Rec, drain, unique, wait_until
from tests.interop.proxy import FaultyProxy

# Kafka error codes the scenarios expect.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch_codecs(log_dir: Path, topic: str, partition: int = 0) -> list[int]:
    """Compression codec of every batch in the partition's segment files, read from disk."""
    codecs = []
    for seg in sorted((log_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            codecs.append(attributes & 0x07)
            pos += 12 + length
    return codecs


def values(msgs) -> list[bytes]:
    return [m.value for m in msgs]


# ------------------------------------------------------------------------------------------ admin


def create_topics(client):
    t1, t2 = unique("create"), unique("create")
    assert client.create_topics({t1: (3, {"retention.ms": "3600000"}), t2: (1, {})}) == {t1: 0, t2: 0}
    # A KRaft broker (Kafka 4.4) answers CreateTopics once the controller has committed the topics; its own
    # metadata image may follow a moment later, so the topics are awaited, not expected at once.
    wait_until(lambda: {t: n for t, n in client.metadata().topics.items() if t in (t1, t2)} == {t1: 3, t2: 1}, 10,
               f"{t1} with 3 partitions and {t2} with 1 in the metadata")
    assert client.create_topics({t1: (3, {})}) == {t1: TOPIC_ALREADY_EXISTS}
    assert client.create_topics({"bad/name": (1, {})}) == {"bad/name": INVALID_TOPIC_EXCEPTION}
    assert "bad/name" not in client.metadata().topics


def create_partitions(client):
    topic = unique("partitions")
    assert client.create_topics({topic: (1, {})}) == {topic: 0}
    assert client.create_partitions(topic, 3) == 0
    wait_until(lambda: client.metadata().topics.get(topic) == 3, 10, f"{topic} to have 3 partitions")
    assert client.create_partitions(topic, 2) == INVALID_PARTITIONS


def metadata(client, neutral, broker):
    topic = unique("meta")
    neutral.produce(topic, [Rec(b"auto-created")])
    meta = client.metadata()
    assert meta.brokers == {(1, "127.0.0.1", broker.port)}
    assert meta.topics[topic] == 1


def configs(client):
    topic = unique("configs")
    assert client.create_topics({topic: (1, {"retention.ms": "3600000"})}) == {topic: 0}
    # Kafka answers CreateTopics once its controller committed the topic, before the broker answering
    # DescribeConfigs knows it (UNKNOWN_TOPIC_OR_PARTITION meanwhile, seen in CI against Kafka)
    wait_until(lambda: client.metadata().topics.get(topic) == 1, 10, f"{topic} in the metadata")
    cfg = client.describe_configs("topic", topic)
    assert cfg["retention.ms"] == "3600000"
    assert cfg["cleanup.policy"] == "delete"
    assert cfg["segment.bytes"] == "1073741824"

    assert client.alter_configs("topic", topic, {"retention.ms": "7200000", "max.message.bytes": "2000000"}) == 0
    cfg = client.describe_configs("topic", topic)
    assert (cfg["retention.ms"], cfg["max.message.bytes"]) == ("7200000", "2000000")

    assert client.alter_configs("topic", topic, {"retention.ms": "not-a-number"}) == INVALID_CONFIG
    assert client.describe_configs("topic", topic)["retention.ms"] == "7200000"

    broker = client.describe_configs("broker", "1")
    assert broker["num.partitions"] == "1"
    assert broker["log.retention.hours"] == "168"


def delete_records(client, neutral):
    topic = unique("delrec")
    sent = [f"d{i}".encode() for i in range(10)]
    neutral.produce(topic, [Rec(v) for v in sent])
    assert client.delete_records(topic, 0, 4) == (0, 4)
    assert client.watermarks(topic, 0) == (4, 10)
    msgs = client.consume(topic, 0, "earliest", 6)
    assert [(m.offset, m.value) for m in msgs] == list(zip(range(4, 10), sent[4:]))
    assert client.delete_records(topic, 0, 11)[0] == OFFSET_OUT_OF_RANGE
    assert client.watermarks(topic, 0) == (4, 10)


def delete_topic(client, neutral, broker):
    topic = unique("deltopic")
    assert client.create_topics({topic: (2, {})}) == {topic: 0}
    neutral.produce(topic, [Rec(b"x", partition=0), Rec(b"y", partition=1)])
    assert client.delete_topics([topic]) == {topic: 0}
    wait_until(lambda: topic not in client.metadata().topics, 10, f"{topic} gone from metadata")
    wait_until(lambda: not (broker.log_dir / f"{topic}-0").exists(), 10, f"{topic}-0 log removed")
    assert client.delete_topics([topic]) == {topic: UNKNOWN_TOPIC_OR_PARTITION}
    # The name can be used again, for a new and empty topic.
    assert client.create_topics({topic: (1, {})}) == {topic: 0}
    assert client.watermarks(topic, 0) == (0, 0)


# ------------------------------------------------------------------------------------------ produce


def produce_codec(codec, client, broker):
    topic = unique(f"codec-{codec}")
    recs = [Rec(value=f"{codec}-{i}-{'x' * (i * 37 % 200)}".encode(), key=f"key-{i}".encode(),
                headers=(("source", b"interop"),)) for i in range(50)]
    acked = client.produce(topic, recs, compression=codec)
    if acked is not None:
        assert acked == [(0, i) for i in range(50)]
    msgs = client.consume(topic, 0, "earliest", 50)
    assert [(m.offset, m.key, m.value, m.headers) for m in msgs] == \
        [(i, r.key, r.value, r.headers) for i, r in enumerate(recs)]
    assert client.watermarks(topic, 0) == (0, 50)
    codecs = batch_codecs(broker.log_dir, topic)
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"batches on disk use codecs {codecs}"


def idempotent_retries(fault, make_client, interop_broker):
    """Retries after broken connections or a broker crash leave no duplicate and lose nothing."""
    n = 300
    topic = unique("idempotent")
    recs = [Rec(f"idem-{i:05d}".encode()) for i in range(n)]

    def check(acked, bootstrap):
        if acked is not None:
            assert acked == [(0, i) for i in range(n)]
        reader = make_client(bootstrap)
        msgs = reader.consume(topic, 0, "earliest", n, timeout=30)
        assert [m.offset for m in msgs] == list(range(n))
        assert values(msgs) == [r.value for r in recs]
        assert reader.watermarks(topic, 0) == (0, n)

    if fault == "proxy":
        proxy = FaultyProxy(fault_every=3, max_faults=6)
        broker = interop_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.start(broker.port)
        try:
            bootstrap = f"127.0.0.1:{proxy.port}"
            acked = make_client(bootstrap).produce(topic, recs, idempotent=True, small_batches=True)
            assert proxy.stats["drop_response"] >= 2 and proxy.stats["drop_request"] >= 2, proxy.stats
            check(acked, bootstrap)  # the proxy only breaks Produce requests
        finally:
            proxy.close()
        return
    broker = interop_broker()
    c = make_client(broker.bootstrap)
    result: dict = {}

    def produce():
        try:
            result["acked"] = c.produce(topic, recs, idempotent=True, small_batches=True, pace_s=0.01)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            result["error"] = e

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(1.2)
    assert producer.is_alive(), "the producer finished before the broker was killed"
    broker.restart(clean=False)  # SIGKILL while batches are in flight, then the same port again
    producer.join(120)
    assert not producer.is_alive(), "producer did not finish"
    if "error" in result:
        raise result["error"]
    check(result["acked"], broker.bootstrap)


# ------------------------------------------------------------------------------------------ consume


def consume_from(start, client, neutral):
    topic = unique(f"from-{start}")
    base = int(time.time() * 1000) - 100_000
    recs = [Rec(f"c{i}".encode(), key=f"k{i}".encode(), timestamp=base + i * 1000) for i in range(10)]
    neutral.produce(topic, recs)
    if start == "earliest":
        msgs = client.consume(topic, 0, "earliest", 10)
        assert [(m.offset, m.key, m.value, m.timestamp) for m in msgs] == \
            [(i, r.key, r.value, r.timestamp) for i, r in enumerate(recs)]
    elif start == "timestamp":
        msgs = client.consume(topic, 0, ("timestamp", base + 4500), 5)
        assert [(m.offset, m.value, m.timestamp) for m in msgs] == \
            [(i, recs[i].value, recs[i].timestamp) for i in range(5, 10)]
    else:
        session = client.open_consumer(topic, 0, "latest")
        try:
            # Markers keep arriving until the consumer sees one: "latest" must skip the first ten.
            got = []
            sent = [0]

            def arrived():
                neutral.produce(topic, [Rec(f"late-{sent[0]}".encode())])
                sent[0] += 1
                got.extend(session.poll(0.5))
                return bool(got)

            with contextlib.suppress(waiting.TimedOut):  # asserted below
                waiting.wait_until(arrived, 30, interval=0, what="a record from latest")
            i = sent[0]
            got += drain(session, i - len(got), 3) if got else []
        finally:
            session.close()
        assert got, "nothing consumed from latest"
        first = got[0].offset
        assert first >= 10
        assert [(m.offset, m.value) for m in got] == [(10 + j, f"late-{j}".encode()) for j in range(first - 10, i)]


# ------------------------------------------------------------------------------------------ groups


def consumer_group(client, neutral):
    """Two members split four partitions, commit, and the survivor resumes the leaver's work."""
    topic, group = unique("group"), unique("g")
    assert neutral.create_topics({topic: (4, {})}) == {topic: 0}
    everything = {(topic, p) for p in range(4)}
    a = client.open_group_member(group, [topic])
    b = None
    try:
        wait_until(lambda: a.assigned == everything, 30, "the first member to own all 4 partitions", check=a.check)
        b = client.open_group_member(group, [topic])
        wait_until(lambda: len(a.assigned) == 2 and len(b.assigned) == 2 and a.assigned | b.assigned == everything,
                   30, "a 2/2 split after the second member joined", check=lambda: (a.check(), b.check()))

        first = [Rec(f"first-{i}".encode(), partition=i % 4) for i in range(40)]
        neutral.produce(topic, first)
        wait_until(lambda: len(a.snapshot()) + len(b.snapshot()) >= 40, 30, "40 records between the members",
                   check=lambda: (a.check(), b.check()))
        time.sleep(0.3)  # anything extra (a duplicate) would show up now
        got_a, got_b = a.snapshot(), b.snapshot()
        assert sorted(values(got_a) + values(got_b)) == sorted(r.value for r in first)
        assert {(m.topic, m.partition) for m in got_a} <= a.assigned
        assert {(m.topic, m.partition) for m in got_b} <= b.assigned
        a.commit()
        b.commit()
        assert client.committed(group, topic, [0, 1, 2, 3]) == {p: 10 for p in range(4)}

        b.close()
        b = None
        wait_until(lambda: a.assigned == everything, 30, "the survivor to take over all partitions", check=a.check)
        seen = len(a.snapshot())
        second = [Rec(f"second-{i}".encode(), partition=i % 4) for i in range(20)]
        neutral.produce(topic, second)
        wait_until(lambda: len(a.snapshot()) >= seen + 20, 30, "20 new records at the survivor", check=a.check)
        time.sleep(0.3)
        resumed = a.snapshot()[seen:]
        # Nothing the leaver had committed is delivered again.
        assert sorted(values(resumed)) == sorted(r.value for r in second)
        a.commit()
        assert client.committed(group, topic, [0, 1, 2, 3]) == {p: 15 for p in range(4)}
    finally:
        a.close()
        if b is not None:
            b.close()


def restart_resume(how, make_client, interop_broker):
    """After a clean or SIGKILL restart a group continues from its committed offset: no loss, no duplicate."""
    broker = interop_broker()
    c = make_client(broker.bootstrap)
    topic, group = unique(f"restart-{how}"), unique("g")
    first = [Rec(f"a{i}".encode(), key=b"k") for i in range(10)]
    c.produce(topic, first)
    got = c.group_consume(group, topic, 6)
    assert [(m.offset, m.value) for m in got] == [(i, first[i].value) for i in range(6)]
    assert c.committed(group, topic, [0]) == {0: 6}
    c.close()

    broker.restart(clean=how == "clean")

    c = make_client(broker.bootstrap)
    assert c.committed(group, topic, [0]) == {0: 6}
    second = [Rec(f"b{i}".encode(), key=b"k") for i in range(10)]
    acked = c.produce(topic, second)
    if acked is not None:
        assert acked == [(0, 10 + i) for i in range(10)]
    got = c.group_consume(group, topic, 14)
    assert [(m.offset, m.value) for m in got] == [(6 + i, r.value) for i, r in enumerate(first[6:] + second)]
    assert c.committed(group, topic, [0]) == {0: 20}
    assert c.watermarks(topic, 0) == (0, 20)
    assert values(c.consume(topic, 0, "earliest", 20)) == [r.value for r in first + second]
