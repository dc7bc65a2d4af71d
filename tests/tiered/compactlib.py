"""Helpers of the tests of tiered compacted topics (tests/tiered/test_compacted_tiering.py and Spark's
tests/spark/test_compacted_tiered_source.py): produce keys with overwrites and tombstones, roll past them
with unique keys, wait until the cleaner and the copy are past them, and the compacted view a reader must
see (the last record of every key, in offset order)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.harness import waiting
from tests.harness.broker import BrokerProcess
from tests.harness.tiered import call, tier_status
from tests.harness.waiting import not_yet

#: Small segments, every rolled segment cleanable at once; tombstones stay (delete.retention.ms one day) so the
#: compacted view is exact: the last record of each key, a tombstone included.
COMPACTED_TOPIC = {"cleanup.policy": "compact", "remote.storage.enable": "true", "segment.bytes": "4000",
                   "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                   "delete.retention.ms": "86400000", "file.delete.delay.ms": "0"}
#: What the brokers of these tests set besides tiering: the cleaner looks for work every 0.1 s.
CLEANER_SETTINGS = {"log.cleaner.backoff.ms": "100"}
#: A 3-broker cluster's tiered compacted topics: the metadata topic on every broker (a new leader reads it while
#: the old one is dead), and a follower out of the ISR within seconds when a test stops it.
CLUSTER_SETTINGS = {**CLEANER_SETTINGS, "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
                    "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200"}

Record = tuple[int, bytes, bytes | None]  # offset, key, value (None: a tombstone)


def create(b: BrokerProcess, topic: str, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=configs or COMPACTED_TOPIC)]).values():
        f.result(60)


def alter(b: BrokerProcess, topic: str, **configs: str) -> None:
    """Incremental AlterConfigs (SET) of topic settings."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(60)


def produce(b: BrokerProcess, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[Record]:
    """Produce in order (one partition, idempotent); returns (offset, key, value) of each."""
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.size": 600})
    acked: list[Record] = []

    def done(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.key(), msg.value()))
    for key, value in records:
        p.produce(topic, value, key, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == len(records)
    return sorted(acked)


def fill(b: BrokerProcess, topic: str, tag: str) -> list[Record]:
    """Records of unique keys, more bytes than a segment: what was produced before lies in rolled segments,
    and the active segment holds only keys written once (the compacted view is exact over the whole log)."""
    return produce(b, topic, [(b"fill-%s-%03d" % (tag.encode(), i), b"f" * 100) for i in range(60)])


def compacted_view(records: list[Record]) -> list[Record]:
    """The last record of every key, in offset order."""
    last: dict[bytes, Record] = {}
    for rec in sorted(records):
        last[rec[1]] = rec
    return sorted(last.values())


def read_earliest(b: BrokerProcess, topic: str, last_offset: int, timeout: float = 120) -> list[Record]:
    """Every record from the earliest offset up to ``last_offset`` (the last record, never compacted away),
    with confluent-kafka."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"compacted-{time.monotonic()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([CKTopicPartition(topic, 0, 0)])
    got: list[Record] = []

    def read():
        if got and got[-1][0] >= last_offset:
            return True
        for m in c.consume(500, timeout=1):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
        return not_yet(got[-1][0] if got else None)

    try:
        waiting.wait_until(read, timeout, interval=0, what=f"offset {last_offset} read (the last read)")
    finally:
        c.close()
    return got


def partition_status(b: BrokerProcess, topic: str) -> dict:
    return tier_status(b, topic)["partitions"][0]


def first_dirty_offset(b: BrokerProcess, topic: str) -> int:
    return call(b, f"/v1/cleaner/status?topic={topic}")["partitions"][0]["first_dirty_offset"]


def wait_until(predicate, what: str, timeout: float = 180):
    """``waiting.wait_until``, what first; any error (a broker still starting answers 503) counts as not yet."""
    return waiting.wait_until(predicate, timeout, what=what, interval=0.2, ignore=(Exception,))


def cleaned_and_tiered(b: BrokerProcess, topic: str, past: int) -> dict | None:
    """The partition's status once the cleaner's checkpoint and the remote tier are past offset ``past``,
    nothing is left to copy and no replaced segment waits for deletion."""
    if first_dirty_offset(b, topic) <= past:
        return None
    s = partition_status(b, topic)
    if not s["ready"] or s["highest_offset_in_remote_storage"] < past or s["copy_lag_segments"] != 0 \
            or s["remote_segments_in_progress"] != 0 or s["remote_segments_to_clean"] != 0:
        return None
    return s


def led_cleaned_and_trimmed(b: BrokerProcess, topic: str, past: int, what: str, timeout: float = 180) -> dict:
    """Until ``b`` leads ``topic``, has cleaned and tiered it past ``past`` and deleted locally what lies there;
    its status row then."""
    return wait_until(lambda: (s := cleaned_and_tiered(b, topic, past)) and s["role"] == "leader"
                      and s["local_log_start_offset"] > past and s, what, timeout=timeout)


def read_as_produced(b: BrokerProcess, topic: str, records: list[Record]) -> tuple[list[Record], list[Record]]:
    """What a consumer from earliest reads of ``topic`` up to the compacted view's last offset, checked to come
    in ascending offsets, none twice, each record the one produced at its offset; and that view."""
    expected = compacted_view(records)
    got = read_earliest(b, topic, expected[-1][0])
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets ascending, none twice"
    produced = {o: (k, v) for o, k, v in records}
    assert all(produced[o] == (k, v) for o, k, v in got), "every record read is the one produced at its offset"
    return got, expected


def rewrite_with_replacement_held(b: BrokerProcess, topic: str, records: list[Record]) -> tuple[int, list[Record]]:
    """Phase 2 of the tiered compaction tests, with the metadata manager holding DELETE_SEGMENT_STARTED
    (``b.hold``/``b.reached``, tests/tiered/holds.py): half the keys written again and a quarter deleted, all in
    one cleaning round (min.compaction.lag.ms keeps the cleaner off until all is written), which shrinks uploaded
    segments; their replacements upload and the first replaced segment's mark waits; then local retention
    deletes what is uploaded and current. ``records`` grows by what was written; returns the last offset of the
    rewrite and the compacted view readers must see."""
    alter(b, topic, **{"min.compaction.lag.ms": "3600000"})
    b.hold.touch()
    records += produce(b, topic, [(b"k%03d" % i, b"v2-%03d-" % i + b"y" * 80) for i in range(100)]
                       + [(b"k%03d" % i, None) for i in range(100, 150)])
    last = records[-1][0]
    records += fill(b, topic, "b")
    expected = compacted_view(records)
    alter(b, topic, **{"min.compaction.lag.ms": "0"})
    wait_until(lambda: b.reached.exists(), "a replaced segment's DELETE_SEGMENT_STARTED (held)")
    alter(b, topic, **{"local.retention.bytes": "1"})
    wait_until(lambda: partition_status(b, topic)["local_log_start_offset"] > 0, "local segments deleted")
    return last, expected
