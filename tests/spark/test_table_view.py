"""Compacted topics as tables (``tierlog.view=table``, issue 41 item 2; docs/spark.md "Compacted topics as
tables"), on the shared Spark session: a 2-partition compacted changelog whose first part is cleaned, tiered and
deleted locally, and whose dirty tail (kept from the cleaner by ``min.compaction.lag.ms``) holds overwrites,
tombstones, a key put back after its tombstone, and an aborted and a committed transaction. The table view
equals the latest value per (partition, key) computed here from the full history, for ``latest``, an as-of
offset and an as-of time in the middle of the dirty tail; inside the cleaned part it is a subset, never a wrong
value."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import call, tier_status, tiered_settings
from tests.tiered.compactlib import CLEANER_SETTINGS, COMPACTED_TOPIC, alter, wait_until
from tierlog.spark import options, table
from tierlog.spark.plan import BrokerSlice, RemoteSlice
from tierlog.spark.read import arrow_schema
from tierlog.spark.source import TierlogDataSource

TOPIC = "customers"
Record = tuple[int, int, bytes, bytes | None, int]  # partition, offset, key, value, timestamp (ms)


@pytest.fixture(scope="module")
def changelog_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-table")
    b = BrokerProcess(root / "logs", tiered_settings(root, **CLEANER_SETTINGS)).start()
    b.remote_dir = root / "remote"
    yield b
    b.kill()


class Changelog:
    """Writes (key, value) with increasing CreateTime timestamps, partitioned by key, and keeps what was
    acknowledged: the full history."""

    def __init__(self, b: BrokerProcess) -> None:
        self.b = b
        # 10 minutes ago: below min.compaction.lag.ms (1 h) once the tail is written, within Kafka's limits
        self.clock = int(time.time() * 1000) - 600_000
        self.history: list[Record] = []

    def write(self, records: list[tuple[bytes, bytes | None]], transaction: str | None = None,
              commit: bool = True, partition: int = -1) -> list[Record]:
        config = {"bootstrap.servers": self.b.bootstrap, "linger.ms": 2, "batch.size": 600}
        if transaction:
            config["transactional.id"] = transaction
        p = Producer(config)
        acked: list[Record] = []

        def done(err, msg):
            assert err is None, err
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
        if transaction:
            p.init_transactions(30)
            p.begin_transaction()
        for key, value in records:
            self.clock += 1
            p.produce(TOPIC, value, key, partition, timestamp=self.clock, on_delivery=done)
            p.poll(0)
        assert p.flush(60) == 0 and len(acked) == len(records)
        if transaction:
            p.commit_transaction(30) if commit else p.abort_transaction(30)
        if commit:
            self.history += acked
        return sorted(acked)


def latest(history: list[Record], until=lambda r: True) -> list[tuple]:
    """The table from the full history: the last record of each (partition, key) that ``until`` keeps, in
    offset order, tombstones left out."""
    last: dict[tuple[int, bytes], Record] = {}
    for r in sorted(history):
        if until(r):
            last[(r[0], r[2])] = r
    return sorted((p, o, k, v) for p, o, k, v, _ in last.values() if v is not None)


def rows(batches) -> list[tuple]:
    out = []
    for b in batches:
        out += zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), b.column("key").to_pylist(),
                   b.column("value").to_pylist(), strict=True)
    return sorted(out)


def spark_table(spark, b, **as_of) -> list[tuple]:
    reader = (spark.read.format("tierlog").option("kafka.bootstrap.servers", b.bootstrap)
              .option("subscribe", TOPIC).option("tierlog.rsm.dir", str(b.remote_dir)).option("tierlog.view", "table"))
    for k, v in as_of.items():
        reader = reader.option(k, v)
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in reader.load().select("partition", "offset", "key", "value").collect())


def in_process(b, **extra) -> tuple[list, list[tuple]]:
    """The table reader's plan and rows, planned and read in this process as Spark's tasks would."""
    raw = {"kafka.bootstrap.servers": b.bootstrap, "subscribe": TOPIC, "tierlog.rsm.dir": str(b.remote_dir),
           "tierlog.view": "table", **extra}
    reader = table.TableReader(options.parse(raw), table.parse(raw))
    tasks = reader.partitions()
    return tasks, rows(b for t in tasks for b in reader.read(t))


def cleaned_tiered_and_trimmed(b: BrokerProcess, past: dict[int, int]) -> bool:
    cleaner = call(b, f"/v1/cleaner/status?topic={TOPIC}")["partitions"]
    dirty = {p["partition"]: p["first_dirty_offset"] for p in cleaner}
    status = {p["partition"]: p for p in tier_status(b, TOPIC)["partitions"]}
    return all(dirty.get(p, -1) > last and status[p]["ready"] and status[p]["highest_offset_in_remote_storage"] >= last
               and status[p]["copy_lag_segments"] == 0 and status[p]["local_log_start_offset"] > last
               for p, last in past.items())


def test_compacted_topic_as_a_table(tierlog_spark, changelog_broker):
    spark, b = tierlog_spark, changelog_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1, config=COMPACTED_TOPIC)]).values():
        f.result(60)
    log = Changelog(b)

    # Cleaned part: 80 customers, half updated, a quarter deleted, then unique keys rolling the segments.
    log.write([(b"c%03d" % i, b"v1-%03d" % i + b"x" * 60) for i in range(80)])
    log.write([(b"c%03d" % i, b"v2-%03d" % i + b"y" * 60) for i in range(40)] + [(b"c%03d" % i, None)
                                                                                 for i in range(60, 80)])
    cleaned = {p: max(o for q, o, *_ in log.history if q == p) for p in (0, 1)}
    log.write([(b"fill-%03d" % i, b"f" * 100) for i in range(120)])
    wait_until(lambda: len(dirty := call(b, f"/v1/cleaner/status?topic={TOPIC}")["partitions"]) == 2 and all(
        p["first_dirty_offset"] > cleaned[p["partition"]] for p in dirty), "the first part cleaned")
    # the tail stays dirty: younger than the compaction lag
    alter(b, TOPIC, **{"min.compaction.lag.ms": "3600000", "local.retention.bytes": "1"})
    wait_until(lambda: cleaned_tiered_and_trimmed(b, cleaned), "the cleaned part tiered and deleted locally")

    # Dirty tail: updates, deletes, a deleted customer back, new ones, an aborted and a committed transaction.
    middle = log.write([(b"c%03d" % i, b"v3-%03d" % i) for i in range(20, 60)] + [(b"c%03d" % i, None)
                                                                                   for i in range(10)]
                       + [(b"c070", b"back")] + [(b"n%03d" % i, b"new-%03d" % i) for i in range(20)])
    log.write([(b"c%03d" % i, b"aborted") for i in range(30, 50)] + [(b"c001", b"aborted")], "tx-abort", commit=False)
    log.write([(b"c%03d" % i, b"v4-%03d" % i) for i in range(50, 55)] + [(b"c002", b"v4")], "tx-commit")
    log.write([(b"c%03d" % i, b"v5-%03d" % i) for i in range(45, 48)])
    for p in (0, 1):  # a key written to both partitions (another partitioner): a row in each
        log.write([(b"twice", b"in-%d" % p)], partition=p)

    # one task per partition: the cleaned remote segments straight from the store, then the dirty tail
    tasks, got = in_process(b)
    assert sorted((t.tasks[0].partition, type(t.tasks[0]), type(t.tasks[-1])) for t in tasks) == [
        (0, RemoteSlice, BrokerSlice), (1, RemoteSlice, BrokerSlice)]
    expected = latest(log.history)
    assert got == expected
    assert spark_table(spark, b) == expected
    assert not any(v == b"aborted" for *_, v in expected)
    keys = {k for _, _, k, _ in expected}
    assert sorted((p, v) for p, _, k, v in expected if k == b"twice") == [(0, b"in-0"), (1, b"in-1")]
    assert keys >= {b"c002", b"c070", b"n000"} and b"c005" not in keys

    # as of an offset and a time in the middle of the dirty tail
    at = {p: (lambda offsets: offsets[len(offsets) // 2])([o for q, o, *_ in middle if q == p]) for p in (0, 1)}
    by_offset = latest(log.history, lambda r: r[1] < at[r[0]])
    assert by_offset != expected
    as_of = {TOPIC: {str(p): o for p, o in at.items()}}
    assert spark_table(spark, b, **{"tierlog.asOfOffsets": json.dumps(as_of)}) == by_offset
    when = sorted(r[4] for r in middle)[len(middle) // 2]
    by_time = latest(log.history, lambda r: r[4] <= when)
    assert by_time not in (expected, by_offset)
    assert spark_table(spark, b, **{"tierlog.asOfTimestamp": str(when)}) == by_time

    # inside the cleaned part: fewer keys, but each with the value it had there
    inside = {p: o // 2 for p, o in cleaned.items()}
    _, early = in_process(b, **{"tierlog.asOfOffsets": json.dumps({TOPIC: {str(p): o for p, o in inside.items()}})})
    truth = latest(log.history, lambda r: r[1] < inside[r[0]])
    assert early and set(early) <= set(truth)
    with pytest.raises(options.SourceOptionError, match="outside its log"):
        in_process(b, **{"tierlog.asOfOffsets": json.dumps({TOPIC: {"0": 10**9}})})


def test_latest_per_key_reduces_in_chunks(monkeypatch):
    """The reduction alone: the same table whether the rows come in one chunk or many, keys of null dropped."""
    schema = arrow_schema(False)
    records = [(None if o % 13 == 0 else b"k%d" % (o * 7 % 11), None if o % 5 == 0 else b"v%d" % o, o)
               for o in range(300)]
    def batch(part):
        n = len(part)
        return pa.RecordBatch.from_arrays(
            [pa.array([r[0] for r in part], pa.binary()), pa.array([r[1] for r in part], pa.binary()),
             pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array([r[2] for r in part], pa.int64()),
             pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32())],
            schema=schema)
    batches = [batch(records[i:i + 17]) for i in range(0, len(records), 17)]
    last: dict[bytes, tuple] = {}
    for k, v, o in records:
        if k is not None:
            last[k] = (0, o, k, v)
    expected = sorted(r for r in last.values() if r[3] is not None)
    for chunk in (1, 40, 10_000):
        monkeypatch.setattr(table, "CHUNK_ROWS", chunk)
        assert rows(table.latest_per_key(iter(batches), schema)) == expected


def test_table_options_are_checked():
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": TOPIC}
    assert not table.requested(base) and table.requested({**base, "tierlog.view": "TABLE"})
    for bad, said in (({"tierlog.view": "tables"}, "must be log or table"),
                      ({"endingOffsets": "latest"}, "does not apply"),
                      ({"tierlog.asOfOffsets": "{"}, "must be JSON"),
                      ({"tierlog.asOfOffsets": "latest", "tierlog.asOfTimestamp": "1"}, "not both")):
        with pytest.raises(options.SourceOptionError, match=said):
            opts = {**base, "tierlog.view": "table", **bad} if "tierlog.view" not in bad else {**base, **bad}
            table.requested(opts)
            table.parse(opts)
    with pytest.raises(options.SourceOptionError, match="batch reads only"):
        TierlogDataSource({**base, "tierlog.view": "table"}).streamReader(None)
    assert table.parse({**base, "tierlog.asOfTimestamp": "1700000000000"}).timestamp == 1700000000000
    parsed = table.table_options(options.parse(base))
    assert parsed.read_committed
    assert not table.table_options(options.parse({**base, "kafka.isolation.level": "read_uncommitted"})).read_committed
