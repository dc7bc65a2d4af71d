"""The record validator (records/validation.py) on its own: each poison kind gets its error, good batches of
every codec pass, and bounded decompression stops a bomb at the bound. The compiled walk against its
plain-Python reference: tests/records/test_kernels.py."""

from __future__ import annotations

import resource
import time

import pytest
from tests.harness import poison

from tierlog.errors import CorruptMessageError, InvalidRecordError, InvalidTimestampError, UnknownServerError
from tierlog.records import build_batch, compress, read_header
from tierlog.records import validation as v
from tierlog.records.compression import DecompressedTooLargeError, decompress_bounded, decompression_limit

LONG_MAX = (1 << 63) - 1


def _check(batch, now, **overrides):
    opts = {"now_ms": now, "create_time": True, "before_max_ms": LONG_MAX, "after_max_ms": 3_600_000,
            "compacted": False, "max_message_bytes": 1048588, "topic_partition": "t-0"}
    opts.update(overrides)
    v.validate_batch_records(batch, 0, read_header(batch), **opts)


def _options(kind):
    cfg = poison.TOPIC_CONFIGS.get(kind, {})
    return {"compacted": cfg.get("cleanup.policy") == "compact",
            "before_max_ms": int(cfg.get("message.timestamp.before.max.ms", LONG_MAX)),
            "create_time": cfg.get("message.timestamp.type", "CreateTime") == "CreateTime"}


@pytest.mark.parametrize("kind", sorted(set(poison.POISON) - {"zstd bomb", "gzip bomb"}))
def test_each_poison_kind_gets_kafkas_error(kind):
    now = int(time.time() * 1000)
    expected = {87: InvalidRecordError, 32: InvalidTimestampError, -1: UnknownServerError}[poison.EXPECTED[kind]]
    with pytest.raises(expected) as info:
        _check(poison.POISON[kind](now), now, **_options(kind))
    assert type(info.value) is expected
    errors = v.record_errors_of(info.value)
    if kind in poison.WITH_RECORD_ERRORS:
        assert [i for i, _ in errors] == [0] and errors[0][1]
    else:
        assert errors is None


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_good_batches_pass(codec):
    now = int(time.time() * 1000)
    batch = build_batch([(b"k%d" % i, b"v" * i, [("h", b"x"), ("n", None)], now - i) for i in range(200)],
                        compression=codec)
    _check(batch, now)
    _check(batch, now, compacted=True)
    _check(build_batch([(None, b"")] * 3, compression=codec), now)


def test_every_record_error_is_listed_with_its_index():
    now = int(time.time() * 1000)
    records = [(b"k" if i % 3 else None, b"v", [], now) for i in range(300)]
    with pytest.raises(InvalidRecordError) as info:
        _check(build_batch(records), now, compacted=True)
    assert [i for i, _ in v.record_errors_of(info.value)] == list(range(0, 300, 3))
    # a timestamp error anywhere makes the batch's error INVALID_TIMESTAMP, as Kafka's processRecordErrors
    records[1] = (b"k", b"v", [], now + 10 * 3_600_000)
    with pytest.raises(InvalidTimestampError) as info:
        _check(build_batch(records), now, compacted=True)
    assert [i for i, _ in v.record_errors_of(info.value)][:3] == [0, 1, 3]


def test_bombs_are_refused_without_inflating():
    now = int(time.time() * 1000)
    for kind in ("zstd bomb", "gzip bomb"):
        batch = poison.POISON[kind](now)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        with pytest.raises(InvalidRecordError):
            _check(batch, now)
        assert time.perf_counter() - started < 5
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grown_mib < 2 * decompression_limit(1) / (1 << 20), kind


def test_decompress_bounded_stops_at_the_limit():
    data = bytes(range(256)) * 64
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        packed = compress(codec, data)
        assert bytes(decompress_bounded(codec, packed, len(data))) == data
        with pytest.raises(DecompressedTooLargeError):
            decompress_bounded(codec, packed, len(data) - 1)
        with pytest.raises(CorruptMessageError):
            decompress_bounded(codec, b"\x00" * 7 + bytes(range(50)), 1 << 20)


def test_the_decompression_bound():
    assert decompression_limit(1) == 16 << 20
    assert decompression_limit(1000) == 64 * 1048588
    assert decompression_limit(1, 100 << 20) == 100 << 20
