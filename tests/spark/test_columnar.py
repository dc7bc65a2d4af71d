"""The columnar decoder (record batches -> Arrow, C kernels) against the consumer's decoder.

Both must give the same rows for any batches: every codec, null keys and values, headers (null header
values too), LogAppendTime, control batches, and offset ranges that cut batches. No Spark needed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.client.fetcher import CompletedFetch
from tierlog.client.types import TopicPartition
from tierlog.records import CompressionType, TimestampType
from tierlog.records.record import build_batch
from tierlog.spark import columnar
from tierlog.spark.read import arrow_schema

TP = TopicPartition("t", 3)

blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
records = st.lists(st.tuples(blobs, blobs, headers, st.integers(0, 2**41)), min_size=1, max_size=20)
batches = st.lists(st.tuples(records, st.sampled_from(list(CompressionType)), st.booleans(), st.booleans()),
                   min_size=1, max_size=6)


def _log(spec) -> bytes:
    out = bytearray()
    offset = 0
    for recs, codec, log_append, control in spec:
        if control:
            out += build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], base_offset=offset,
                               is_control=True, is_transactional=True, producer_id=7, producer_epoch=0)
            offset += 1
        out += build_batch(recs, base_offset=offset, compression=codec,
                           timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else
                           TimestampType.CREATE_TIME)
        offset += len(recs)
    return bytes(out)


def _expected(data: bytes, first: int, end: int, with_headers: bool) -> list[dict]:
    cf = CompletedFetch(TP, first, data, None, True)
    rows = []
    while not cf.done:
        got = cf.take(1000, None, None)
        if not got:
            break
        for r in got:
            if r.offset >= end:
                continue
            row = {"key": r.key, "value": r.value, "topic": TP.topic, "partition": TP.partition,
                   "offset": r.offset, "timestamp": r.timestamp, "timestampType": r.timestamp_type}
            if with_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
            rows.append(row)
    return rows


def _actual(data: bytes, first: int, end: int, with_headers: bool) -> list[dict]:
    out, _ = columnar.decode(data, TP.topic, TP.partition, first, end, with_headers, arrow_schema(with_headers))
    rows = []
    for rb in out:
        for row in rb.to_pylist():
            row["timestamp"] = int(row["timestamp"].timestamp() * 1000 + 0.5) if row["timestamp"] else None
            row["key"] = None if row["key"] is None else bytes(row["key"])
            row["value"] = None if row["value"] is None else bytes(row["value"])
            rows.append(row)
    return rows


@settings(max_examples=150, deadline=None)
@given(batches, st.data(), st.booleans())
def test_same_rows_as_the_consumer(spec, data, with_headers):
    log_bytes = _log(spec)
    count = sum(len(r) + (1 if c else 0) for r, _, _, c in spec)
    first = data.draw(st.integers(0, count))
    end = data.draw(st.integers(first, count + 2))
    assert _actual(log_bytes, first, end, with_headers) == _expected(log_bytes, first, end, with_headers)


def test_next_offset_and_a_corrupt_batch():
    data = _log([([(b"k", b"v", [], 1000)] * 5, CompressionType.NONE, False, False)])
    out, next_offset = columnar.decode(data, "t", 0, 0, 100, False, arrow_schema(False))
    assert next_offset == 5 and sum(b.num_rows for b in out) == 5
    bad = bytearray(data)
    bad[-3] ^= 0xFF
    with pytest.raises(Exception, match="CRC|corrupt"):
        columnar.decode(bytes(bad), "t", 0, 0, 100, False, arrow_schema(False))


def test_grouping_slices_into_spark_tasks():
    """One Spark task per partition's run of remote slices (capped by bytes), each partition's local tail
    in the task of its last remote slices, partitions without remote data alone, every slice alone with
    minPartitions."""
    import uuid

    from tierlog.spark.plan import BrokerSlice, RemoteSlice, group
    from tierlog.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    def seg(p, start, end, size):
        sid = RemoteLogSegmentId(TopicIdPartition(uuid.uuid4(), "t", p), uuid.uuid4())
        return RemoteLogSegmentMetadata(sid, start, end - 1, 0, 0, 0, size, {0: start})

    def remote(p, start, end, size=100):
        return RemoteSlice("t", p, start, end, seg(p, start, end, size))

    p0 = [remote(0, 0, 10), remote(0, 10, 20), remote(0, 20, 30), BrokerSlice("t", 0, 30, 35)]
    p1 = [remote(1, 0, 10), BrokerSlice("t", 1, 10, 12)]
    p2 = [BrokerSlice("t", 2, 0, 50)]
    tasks = p0 + p1 + p2
    # 250 bytes per task: partition 0's third slice starts a task, which reads on into the tail
    assert group(tasks, None, task_bytes=250) == [p0[:2], p0[2:], p1, p2]
    assert group(tasks, None) == [p0, p1, p2]
    assert group(tasks, 4) == [[t] for t in tasks]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60), st.integers(1, 50),
       st.integers(0, 5))
def test_key_partitions_are_the_default_partitioners(keys, count, cut):
    """The exactly-once sink's compiled key hashing (tierlog.spark.sink) puts every keyed row where the
    producer's default partitioner (Kafka's murmur2) would, sliced columns too."""
    import pyarrow as pa

    from tierlog.client.partitioner import partition_for_key
    from tierlog.spark.sink import _key_partitions
    column = pa.array(keys, pa.binary()).slice(min(cut, len(keys)))
    got = _key_partitions(column, count)
    assert [g for g, k in zip(got, column.to_pylist()) if k is not None] == \
        [partition_for_key(k, count) for k in column.to_pylist() if k is not None]


def test_the_sink_leaves_rows_without_a_key_to_the_producers_partitioner():
    """Rows with a key and no partition get the key's partition from the compiled pass; a row without a key
    keeps none (the producer's sticky partitioner spreads those, as Kafka's), and a given partition stays."""
    import pyarrow as pa

    from tierlog.client.partitioner import partition_for_key
    from tierlog.spark.options import parse
    from tierlog.spark.sink import _records

    batch = pa.record_batch({"key": pa.array([b"a", None, b"c", None], pa.binary()),
                             "value": pa.array([b"1", b"2", b"3", b"4"], pa.binary()),
                             "partition": pa.array([None, None, 0, 2], pa.int32())})
    opts = parse({"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:1"}, sink=True)
    parts = [r[3] for r in _records(opts, batch, lambda topic: [0, 1, 2])]
    assert parts == [partition_for_key(b"a", 3), None, 0, 2]
