"""The producer's record encoder and the consumer's decoder, both hand-inlined for speed, against
tierlog.records (the reference codec used by the broker and the tools), at the varint boundaries:
lengths, offset deltas and timestamp deltas of 63/64, 8191/8192 and 16383/16384 bytes or steps."""

from __future__ import annotations

import asyncio
import random

import pytest

from tierlog.client.accumulator import ProducerBatch, encode_record
from tierlog.client.fetcher import _decode_records
from tierlog.client.types import TopicPartition
from tierlog.records.batch import RECORD_BATCH_OVERHEAD, read_header
from tierlog.records.compression import CompressionType
from tierlog.records.record import decode_batch

SIZES = [0, 1, 63, 64, 8191, 8192, 16383, 16384, 70000]


def _records(seed: int, count: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    ts = 1_700_000_000_000
    for i in range(count):
        ts += rnd.choice([0, 1, 63, 64, 8191, 8192, 100_000])
        key = None if i % 5 == 0 else bytes(rnd.getrandbits(8) for _ in range(rnd.choice(SIZES[:6])))
        value = None if i % 7 == 3 else bytes(rnd.getrandbits(8) for _ in range(rnd.choice(SIZES)))
        headers = [] if i % 3 else [("h", b"x" * rnd.choice(SIZES[:5])), ("none", None)]
        out.append((ts, key, value, headers))
    return out


@pytest.mark.parametrize("count", [1, 70, 9000])
def test_encoder_and_decoder_agree_with_the_reference_codec(count):
    recs = _records(count, count if count < 9000 else 200)
    if count == 9000:  # offset deltas past two varint bytes: many tiny records
        recs += [(recs[-1][0], None, b"v", []) for _ in range(count)]

    async def build() -> bytes:
        batch = ProducerBatch(TopicPartition("t", 0), 0.0)
        for ts, key, value, headers in recs:
            batch.append(ts, key, value, headers)
        batch.close(CompressionType.NONE, None)
        return batch.encode(CompressionType.NONE)

    frame = asyncio.run(build())
    header, decoded = decode_batch(frame)  # checks the CRC too
    assert header.records_count == len(recs)
    assert [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in decoded] == [
        (i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(recs)]
    hdr = read_header(frame, 0)
    fast = _decode_records(frame[RECORD_BATCH_OVERHEAD:], hdr, "t", 0, 0)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers, r.serialized_key_size, r.serialized_value_size)
            for r in fast] == [(i, ts, key, value, tuple(headers), -1 if key is None else len(key),
                                -1 if value is None else len(value))
                               for i, (ts, key, value, headers) in enumerate(recs)]
    # from an offset inside the batch
    assert [r.offset for r in _decode_records(frame[RECORD_BATCH_OVERHEAD:], hdr, "t", 0, 3)] == \
        list(range(3, len(recs)))


def test_encode_record_matches_a_batch_member():
    async def one() -> bytes:
        batch = ProducerBatch(TopicPartition("t", 0), 0.0)
        batch.append(1000, b"k", b"v" * 300, [("a", b"1")])
        batch.close(CompressionType.NONE, None)
        return batch.records
    assert encode_record(0, 0, b"k", b"v" * 300, [("a", b"1")]) == asyncio.run(one())
