"""Filter pushdown in the ``tierlog`` source (tierlog.spark.pushdown) on the shared Spark session against a
real tiered broker: a filtered query returns exactly the rows of the unfiltered one filtered, and reads only
the remote segments that hold a matching row (counted from ``tierlog.debug.readLog``, what the executors
read); CreateTime timestamps out of offset order; LogAppendTime upper bounds; the broker-only mode."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from tests.harness.tiered import tier_status
from tests.harness.waiting import wait_until
from tests.spark.sparklib import TIERED_TOPIC, create, source, tiered

BASE = (int(time.time()) - 3600) * 1000  # an hour ago, in ms: older records would be past retention
N = 900  # records per partition


def test_pushed_filters_taken_and_returned():
    """Which filters the source applies itself and which it hands back to Spark, and how a timestamp
    bound in microseconds becomes Kafka's milliseconds (no broker, no Spark session)."""
    import datetime

    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        Not,
        StringStartsWith,
    )

    from tierlog.client.types import TopicPartition
    from tierlog.spark.pushdown import Pushdown

    def at(us: int) -> datetime.datetime:
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=us)

    pd = Pushdown()
    kept = [In(("offset",), (5, 9)), Not(EqualTo(("partition",), 1)), StringStartsWith(("topic",), "t"),
            EqualTo(("value",), b"x"), GreaterThan(("timestamp",), datetime.datetime(2026, 1, 1))]  # naive
    taken = [EqualTo(("topic",), "t"), In(("partition",), (0, 1, 2)), LessThan(("partition",), 2),
             GreaterThanOrEqual(("offset",), 3), IsNotNull(("timestamp",)),
             GreaterThan(("timestamp",), at(1_000_500)), LessThan(("timestamp",), at(2_000_001))]
    back = list(pd.accept(kept[:2] + taken + kept[2:]))
    assert back == kept and all(a is b for a, b in zip(back, kept))
    assert (pd.ts_lo, pd.ts_hi) == (1001, 2000)  # > 1000.5 ms: from 1001; < 2000.001 ms: up to 2000
    assert pd.offset_range == (5, 9) and not pd.nothing
    assert [p for p in range(4) if pd.keeps(TopicPartition("t", p))] == [0, 1]
    assert not pd.keeps(TopicPartition("u", 0))
    assert pd.cut_offsets({TopicPartition("t", 0): (0, 100)}) == {TopicPartition("t", 0): (5, 10)}
    nothing = Pushdown()
    assert list(nothing.accept([IsNull(("offset",))])) == [] and nothing.nothing
    assert list(nothing.accept([IsNull(("key",))])) == [IsNull(("key",))]
    sub_ms = Pushdown()
    assert list(sub_ms.accept([EqualTo(("timestamp",), at(1_000_500))])) == [] and sub_ms.nothing


def produce_stamped(b, topic: str, stamps: dict[int, list[int]]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 4000})
    for partition, times in stamps.items():
        for i, ts in enumerate(times):
            p.produce(topic, b"value-%06d" % i + b"x" * 100, b"key-%d" % i, partition=partition, timestamp=ts)
    assert p.flush(30) == 0


@pytest.fixture(scope="module")
def timed(cluster, tierlog_spark, tmp_path_factory):
    """CreateTime, two partitions, one record a second, with a late stamp early in partition 0 and an
    early stamp late in partition 1 (timestamps out of offset order): the topic, its rows (partition,
    offset, timestamp, value) read without a filter, and the slices that read them."""
    topic = "timed"
    create(cluster, topic, 2)
    stamps = {p: [BASE + i * 1000 for i in range(N)] for p in (0, 1)}
    stamps[0][50] = BASE + (N + 100) * 1000
    stamps[1][N - 10] = BASE - 5000
    produce_stamped(cluster, topic, stamps)
    tiered(cluster, topic, 2)
    everything, full = read(tierlog_spark, cluster, topic, tmp_path_factory.mktemp("unfiltered"))
    assert len(everything) == 2 * N
    return topic, everything, full


def read(spark, b, topic: str, folder: Path, where=None, **options):
    df = source(spark, b, topic, **{"tierlog.debug.readLog": str(folder), **options})
    if where is not None:
        df = df.where(where)
    rows = sorted((r.partition, r.offset, int(r.timestamp.timestamp() * 1000 + 0.5), bytes(r.value))
                  for r in df.select("partition", "offset", "timestamp", "value").collect())
    return rows, read_log(folder)


def read_log(folder: Path) -> list[tuple]:
    """(tier, partition, segment id, start, end) of every slice the query's tasks read."""
    out = []
    for f in folder.glob("*.log") if folder.exists() else ():
        for line in f.read_text().splitlines():
            tier, _, partition, segment, start, end = line.split()
            out.append((tier, int(partition), segment, int(start), int(end)))
    return sorted(out, key=lambda s: (s[1], s[3]))


def needed(slices: list[tuple], rows: list[tuple]) -> set[str]:
    """The remote segments holding at least one of ``rows``."""
    return {seg for tier, p, seg, start, end in slices if tier == "remote"
            and any(r[0] == p and start <= r[1] < end for r in rows)}


def test_a_time_filter_returns_the_same_rows_and_reads_only_the_segments_that_hold_them(
        tierlog_spark, cluster, timed, tmp_path, capsys):
    timed, everything, full = timed
    remote = [s for s in full if s[0] == "remote"]
    assert {s[1] for s in remote} == {0, 1} and len(remote) >= 4
    # the bound: the middle of partition 1's last remote segment, so it lies inside a segment
    last = max((s for s in remote if s[1] == 1), key=lambda s: s[3])
    lo = next(r[2] for r in everything if r[0] == 1 and r[1] == (last[3] + last[4]) // 2)
    want = [r for r in everything if r[2] >= lo]
    got, filtered = read(tierlog_spark, cluster, timed, tmp_path / "lo", F.col("timestamp") >= F.timestamp_millis(
        F.lit(lo)))
    assert got == want
    assert any(r[0] == 0 and r[1] == 50 for r in got)  # the late stamp at offset 50 is there
    # Every remote segment read holds a wanted row (and got == want says none was missed). Judged on the read's
    # own slices: local retention may have moved more segments to the remote tier since the unfiltered read.
    read_remote = {s[2] for s in filtered if s[0] == "remote"}
    assert read_remote == needed(filtered, want)
    assert len(read_remote) < sum(p["remote_segments"] for p in tier_status(cluster, timed)["partitions"])
    # the first segment read of partition 1 is read from a time index entry on, not from its start
    first = next(s for s in filtered if s[0] == "remote" and s[1] == 1)
    assert first[2] == last[2] and last[3] < first[3] <= (last[3] + last[4]) // 2

    df = source(tierlog_spark, cluster, timed).where(F.col("timestamp") >= F.timestamp_millis(F.lit(lo)))
    df.explain(mode="formatted")
    plan = capsys.readouterr().out
    assert "PushedFilters: [" in plan and "GreaterThanOrEqual(timestamp" in plan, plan

    # an upper bound too (CreateTime: only the rows are filtered after it, nothing is cut by it)
    hi = lo + 60_000
    got, _ = read(tierlog_spark, cluster, timed, tmp_path / "range",
                  F.col("timestamp").between(F.timestamp_millis(F.lit(lo)), F.timestamp_millis(F.lit(hi))))
    assert got == [r for r in everything if lo <= r[2] <= hi]


def test_partition_offset_and_topic_filters_cut_the_slices(tierlog_spark, cluster, timed, tmp_path):
    timed, everything, _ = timed
    got, slices = read(tierlog_spark, cluster, timed, tmp_path / "cut",
                       (F.col("topic") == timed) & (F.col("partition") == 1) & (F.col("offset") >= 100)
                       & (F.col("offset") < 300))
    assert got == [r for r in everything if r[0] == 1 and 100 <= r[1] < 300]
    assert slices and all(s[1] == 1 and s[3] >= 100 and s[4] <= 300 for s in slices)
    # offset IN narrows the range and stays with Spark; a filter on value is Spark's alone
    got, slices = read(tierlog_spark, cluster, timed, tmp_path / "in",
                       F.col("offset").isin(5, 7, 400) & F.col("value").cast("string").startswith("value-000400"))
    assert got == [r for r in everything if r[1] == 400]
    assert all(s[3] >= 5 and s[4] <= 401 for s in slices)
    got, slices = read(tierlog_spark, cluster, timed, tmp_path / "none", F.col("topic") == "other")
    assert got == [] and slices == []


def test_broker_mode_starts_each_partition_at_the_brokers_answer(tierlog_spark, cluster, timed, tmp_path):
    timed, everything, _ = timed
    lo = BASE + 600 * 1000
    got, slices = read(tierlog_spark, cluster, timed, tmp_path / "broker", F.col("timestamp") > F.timestamp_millis(
        F.lit(lo)), direct=False)
    assert got == [r for r in everything if r[2] > lo]
    starts = {s[1]: s[3] for s in slices}
    # partition 0 holds a late stamp at offset 50; partition 1 starts at its first record past the bound
    assert all(s[0] == "broker" for s in slices) and starts == {0: 50, 1: 601}


def test_a_log_append_time_upper_bound_stops_reading_where_timestamps_pass_it(tierlog_spark, cluster, tmp_path):
    topic = "appended"
    create(cluster, topic, 1, {**TIERED_TOPIC, "message.timestamp.type": "LogAppendTime"})
    for _ in range(3):
        produce_stamped(cluster, topic, {0: [0] * 300})
        now = time.time() * 1000
        wait_until(lambda now=now: time.time() * 1000 > now + 5, 5, what="the clock to move on")
    tiered(cluster, topic, 1)
    everything, full = read(tierlog_spark, cluster, topic, tmp_path / "all")
    assert len(everything) == 900
    hi = max(r[2] for r in everything if r[1] < 300)  # the first round's last append time
    want = [r for r in everything if r[2] <= hi]
    got, slices = read(tierlog_spark, cluster, topic, tmp_path / "hi", F.col("timestamp") <= F.timestamp_millis(
        F.lit(hi)))
    assert got == want and len(want) >= 300
    need = needed(full, want)
    read_remote = [s[2] for s in slices if s[0] == "remote"]
    later = [s[2] for s in full if s[0] == "remote" and s[2] not in need]
    # at most the one segment where timestamps pass the bound beyond those that hold rows, no local tail
    assert need <= set(read_remote) and len(set(read_remote) - need) <= 1 and len(later) >= 1
    assert not [s for s in slices if s[0] == "broker"]
