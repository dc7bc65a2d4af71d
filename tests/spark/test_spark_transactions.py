"""Direct Spark reads of topics with transactions (markers written with WriteTxnMarkers, as the transaction
coordinator will) against a tiered broker, mostly from the remote tier: with ``kafka.isolation.level``
read_committed and read_uncommitted the rows (offsets, keys, values) equal what confluent-kafka's consumer
returns with the same isolation level, also when an abort marker is still only in the broker's local log;
and a topic without transactions reads no transaction index."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.tiered import tier_status, wait_for
from tests.harness.transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    init_producer_id,
    marker,
    produce,
    write_markers,
)
from tests.harness.waiting import not_yet, wait_until
from tests.spark.sparklib import source

TOPIC = {"remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}
END = b"end"


def confluent_rows(bootstrap: str, topic: str, isolation: str, timeout: float = 60) -> list[tuple]:
    """(offset, key, value) of every record confluent-kafka returns from the earliest offset up to the record
    whose value is ``end``."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{time.monotonic_ns()}",
                    "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([CKTopicPartition(topic, 0, 0)])
    got: list[tuple] = []

    def reached():
        for m in c.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
            if m.value() == END:
                return got
        return not_yet(got)

    try:
        return wait_until(reached, timeout, interval=0, what=f"confluent-kafka ({isolation}) to reach the end")
    finally:
        c.close()


def spark_rows(df) -> list[tuple]:
    return sorted((r.offset, None if r.key is None else bytes(r.key), bytes(r.value))
                  for r in df.select("offset", "key", "value").collect())


def direct_rows(cluster, topic: str, isolation: str) -> list[tuple]:
    """(offset, key, value) of a direct read planned and read in this process (no Spark)."""
    from tierlog.spark import options, read
    from tierlog.spark.plan import Planner
    opts = options.parse({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                          "tierlog.rsm.dir": str(cluster.remote_dir), "kafka.isolation.level": isolation})
    planner = Planner(opts)
    try:
        tps = planner.partitions()
        bounds = planner.bounds(tps)
        tasks = planner.plan({tp: bounds[tp] for tp in tps})
    finally:
        planner.close()
    assert any(isinstance(t, read.RemoteSlice) for t in tasks)
    out = []
    for batch in read.read_tasks(tasks, opts):
        out += zip(batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                   batch.column("value").to_pylist(), strict=True)
    return sorted(out)


def _tiered(b, topic: str, local_start_above: int) -> None:
    wait_for(lambda: (p := tier_status(b, topic)["partitions"][0])["copy_lag_segments"] == 0
             and p["local_log_start_offset"] > local_start_above, f"{topic} to be tiered", timeout=120)


@pytest.fixture(scope="module")
def interleaved(cluster):
    """Committed and aborted transactions of several producers interleaved with plain records, mostly remote;
    one transaction spans segments and is aborted after others committed."""
    topic = unique("spark-txn")
    create_topic(cluster.bootstrap, topic, configs=TOPIC)
    raw = RawClient(cluster.bootstrap)
    long_pid, long_epoch = init_producer_id(raw)
    long_seq = 0
    for i in range(24):
        pid, epoch = init_producer_id(raw)
        values = [b"t%02d-%d-" % (i, j) + b"x" * 200 for j in range(3)]
        assert produce(raw, topic, values, producer_id=pid, epoch=epoch, sequence=0, transactional=True,
                       keys=[b"k%02d-%d" % (i, j) for j in range(3)]).error_code == 0
        if i < 12:  # the long transaction's data, between the others'
            assert produce(raw, topic, [b"long-%02d" % i], producer_id=long_pid, epoch=long_epoch,
                           sequence=long_seq, transactional=True, keys=[b"long"]).error_code == 0
            long_seq += 1
        assert produce(raw, topic, [b"plain-%02d" % i], keys=[b"p%02d" % i]).error_code == 0
        assert write_markers(raw, marker(pid, epoch, i % 3 != 1, topic)) == {(pid, topic, 0): 0}
        if i == 15:
            assert write_markers(raw, marker(long_pid, long_epoch, False, topic)) == {(long_pid, topic, 0): 0}
    assert produce(raw, topic, [END]).error_code == 0
    raw.close()
    _tiered(cluster, topic, 60)
    return topic


@pytest.mark.parametrize("isolation", [READ_COMMITTED, READ_UNCOMMITTED])
def test_direct_read_equals_confluent_kafka(tierlog_spark, cluster, interleaved, isolation):
    want = confluent_rows(cluster.bootstrap, interleaved, isolation)
    got = spark_rows(source(tierlog_spark, cluster, interleaved, **{"kafka.isolation.level": isolation}))
    assert got == want
    if isolation == READ_COMMITTED:
        assert not any(v.startswith(b"long-") for _, _, v in got)
        assert any(v.startswith(b"t00-") for _, _, v in got) and not any(v.startswith(b"t01-") for _, _, v in got)
    # one slice per remote segment (minPartitions) gives each its own search
    assert spark_rows(source(tierlog_spark, cluster, interleaved, minPartitions="16",
                             **{"kafka.isolation.level": isolation})) == want


def test_remote_slices_filter_from_the_remote_indexes_and_complete_through_the_broker(cluster, interleaved,
                                                                                     monkeypatch):
    """In-process: the read_committed rows equal confluent-kafka's; some remote slices are filtered with the
    remote transaction indexes alone, and those after the last remote abort go through the broker."""
    from tierlog.spark import read
    want = confluent_rows(cluster.bootstrap, interleaved, READ_COMMITTED)
    through_broker = []
    real = read.read_broker

    def counting(tasks, opts):
        through_broker.extend(tasks)
        return real(tasks, opts)

    monkeypatch.setattr(read, "read_broker", counting)
    searched = []
    real_search = read.aborted_transactions

    def search(rsm, task):
        searched.append(task)
        return real_search(rsm, task)

    monkeypatch.setattr(read, "aborted_transactions", search)
    assert direct_rows(cluster, interleaved, READ_COMMITTED) == want
    local_start = tier_status(cluster, interleaved)["partitions"][0]["local_log_start_offset"]
    fallbacks = [t for t in through_broker if t.start < local_start]
    assert fallbacks and len(searched) > len(fallbacks)


def test_an_abort_marker_only_in_the_local_log(tierlog_spark, cluster):
    """A transaction spanning several remote segments whose ABORT marker is in the active segment: the remote
    transaction indexes do not hold it, so the slices are completed through the broker."""
    topic = unique("spark-local-marker")
    create_topic(cluster.bootstrap, topic, configs=TOPIC)
    raw = RawClient(cluster.bootstrap)
    pid, epoch = init_producer_id(raw)
    for i in range(8):
        assert produce(raw, topic, [b"gone-%d-%d-" % (i, j) + b"x" * 200 for j in range(3)], producer_id=pid,
                       epoch=epoch, sequence=3 * i, transactional=True, keys=[b"g"] * 3).error_code == 0
        assert produce(raw, topic, [b"plain-%d" % i], keys=[b"p%d" % i]).error_code == 0
    assert write_markers(raw, marker(pid, epoch, False, topic)) == {(pid, topic, 0): 0}
    assert produce(raw, topic, [END]).error_code == 0
    raw.close()
    _tiered(cluster, topic, 0)
    folder = cluster.log_dir / f"{topic}-0"
    assert [p.stem for p in folder.glob("*.txnindex")] == [sorted(folder.glob("*.log"))[-1].stem]
    got = {}
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        want = confluent_rows(cluster.bootstrap, topic, isolation)
        got[isolation] = spark_rows(source(tierlog_spark, cluster, topic, **{"kafka.isolation.level": isolation}))
        assert got[isolation] == want, isolation
    assert [v for _, _, v in got[READ_COMMITTED]] == [b"plain-%d" % i for i in range(8)] + [END]
    assert len(got[READ_UNCOMMITTED]) == 8 * 4 + 1


def test_a_topic_without_transactions_reads_no_transaction_index(cluster, monkeypatch):
    """read_committed over a plain topic: the same rows as read_uncommitted, and no transaction index is
    asked for (the slices never see a transactional batch). In-process, without Spark."""
    from tierlog.spark import read
    from tierlog.tiered.metadata import IndexType

    topic = unique("spark-plain")
    create_topic(cluster.bootstrap, topic, configs=TOPIC)
    raw = RawClient(cluster.bootstrap)
    for i in range(40):
        assert produce(raw, topic, [b"v%02d-" % i + b"x" * 200] * 3, keys=[b"k%02d" % i] * 3).error_code == 0
    raw.close()
    _tiered(cluster, topic, 60)
    asked = []

    class Counting:
        def __init__(self, rsm):
            self.rsm = rsm

        def fetch_index(self, md, index_type):
            asked.append(index_type)
            return self.rsm.fetch_index(md, index_type)

        def __getattr__(self, name):
            return getattr(self.rsm, name)

    real = read.storage_manager
    monkeypatch.setattr(read, "storage_manager", lambda opts, cluster_id=None: Counting(real(opts, cluster_id)))

    committed = direct_rows(cluster, topic, READ_COMMITTED)
    assert committed == direct_rows(cluster, topic, READ_UNCOMMITTED) and len(committed) == 120
    assert IndexType.TRANSACTION not in asked and IndexType.OFFSET in asked
