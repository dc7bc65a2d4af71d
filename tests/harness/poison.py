"""Record batches with a valid CRC but broken records: what a buggy or hostile producer can send.

``POISON`` maps each kind to a function ``(now_ms) -> batch bytes``; ``TOPIC_CONFIGS`` says which kinds
need a topic config (a compacted topic, a narrow timestamp window). Each batch passes every header check
(CRC-32C, length, magic, codec, base offset 0, records count = last offset delta + 1), so only a broker that
reads the records refuses it. ``EXPECTED`` is the error each gets from tierlog and, but for
``KAFKA_DIFFERS``, from Apache Kafka 4.4 (tests/peer/test_poison_differential.py checks both).
"""

from __future__ import annotations

from tierlog.records import compress, encode_varint, encode_varlong
from tierlog.records.record import build_batch_header

UNKNOWN_SERVER_ERROR = -1
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87


def record(key: bytes | None, value: bytes | None, *, offset_delta: int = 0, ts_delta: int = 0,
           headers: list[tuple[bytes, bytes | None]] = (), raw_headers: bytes | None = None) -> bytes:
    """One record in Kafka's v2 layout, length prefix included; ``raw_headers`` replaces the headers part."""
    body = bytearray(b"\x00")
    body += encode_varlong(ts_delta) + encode_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(part)) + part
    if raw_headers is not None:
        body += raw_headers
    else:
        body += encode_varint(len(headers))
        for hk, hv in headers:
            body += encode_varint(len(hk)) + hk
            body += encode_varint(-1) if hv is None else encode_varint(len(hv)) + hv
    return bytes(encode_varint(len(body)) + body)


def batch(records_section: bytes, count: int, now_ms: int, *, codec: str = "none",
          attributes: int = 0, max_timestamp: int | None = None) -> bytes:
    """A v2 batch with a valid CRC around ``records_section`` (compressed with ``codec``), claiming
    ``count`` records (last offset delta ``count - 1``)."""
    codec_id = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    payload = records_section if codec == "none" else compress(codec, records_section)
    return build_batch_header(len(payload), count, attributes | codec_id, now_ms,
                              now_ms if max_timestamp is None else max_timestamp, -1, -1, -1, payload) + payload


def good(now_ms: int, codec: str = "none", n: int = 3) -> bytes:
    return batch(b"".join(record(b"k%d" % i, b"v" * 20, offset_delta=i) for i in range(n)), n, now_ms, codec=codec)


def _bomb(codec: str, now_ms: int) -> bytes:
    """One valid record, then 1 GiB of zeros, compressed: a few hundred KiB at most on the wire."""
    import cramjam

    zeros = bytes(16 << 20)
    c = cramjam.zstd.Compressor(level=3) if codec == "zstd" else cramjam.gzip.Compressor(level=9)
    c.compress(record(b"k", b"v"))
    for _ in range(64 if codec == "zstd" else 16):  # gzip's deflate tops out near 1000:1
        c.compress(zeros)
    payload = bytes(c.finish())
    return build_batch_header(len(payload), 1, 1 if codec == "gzip" else 4, now_ms, now_ms, -1, -1, -1,
                              payload) + payload


POISON = {
    # bytes that are not records at all
    "garbage records": lambda now: batch(bytes(range(7, 207)), 3, now),
    # two records present, three claimed (the header's last offset delta agrees with the count)
    "count above records": lambda now: batch(record(b"a", b"1") + record(b"b", b"2", offset_delta=1), 3, now),
    # three records present, two claimed
    "count below records": lambda now: batch(
        b"".join(record(b"k", b"v", offset_delta=i) for i in range(3)), 2, now),
    # a record's length varint says more than the batch holds
    "record length past batch": lambda now: batch(encode_varint(5000) + record(b"a", b"1")[1:], 1, now),
    # the value length runs past the end of the batch
    "value length past batch": lambda now: batch(
        encode_varint(9) + b"\x00\x00\x00\x02ka" + encode_varint(4000) + b"xy", 1, now),
    # a varint of six continuation bytes
    "varint too long": lambda now: batch(b"\x10\x00\xff\xff\xff\xff\xff\xff\x01\x00\x00\x00\x00\x00\x00\x00\x00",
                                         1, now),
    # a header count that is negative
    "negative header count": lambda now: batch(record(b"k", b"v", raw_headers=encode_varint(-3)), 1, now),
    # a header key size that is negative
    "negative header key size": lambda now: batch(
        record(b"k", b"v", raw_headers=encode_varint(1) + encode_varint(-2) + encode_varint(-1)), 1, now),
    # zstd data that does not decompress
    "undecodable zstd": lambda now: build_batch_header(64, 1, 4, now, now, -1, -1, -1, bytes(range(64)))
    + bytes(range(64)),
    # gzip data that does not decompress
    "undecodable gzip": lambda now: build_batch_header(64, 1, 1, now, now, -1, -1, -1, bytes(range(64)))
    + bytes(range(64)),
    "zstd bomb": lambda now: _bomb("zstd", now),
    "gzip bomb": lambda now: _bomb("gzip", now),
    # offset deltas 0, 2, 4 in a batch whose last offset delta is 2
    "offset deltas not consecutive": lambda now: batch(
        b"".join(record(b"k", b"v", offset_delta=2 * i) for i in range(3)), 3, now),
    # a record without a key, on a compacted topic
    "null key on compacted topic": lambda now: batch(record(None, b"v"), 1, now),
    # a record an hour and a minute in the future (message.timestamp.after.max.ms 1 h by default)
    "timestamp after max": lambda now: batch(record(b"k", b"v", ts_delta=3_660_000), 1, now),
    # a record a day old on a topic with message.timestamp.before.max.ms of an hour
    "timestamp before max": lambda now: batch(record(b"k", b"v", ts_delta=-86_400_000), 1, now),
    # a producer stamping LogAppendTime itself, to a LogAppendTime topic (to a CreateTime topic Kafka only
    # checks the stamped time's range)
    "log append time from producer": lambda now: batch(record(b"k", b"v"), 1, now, attributes=0x08),
}

TOPIC_CONFIGS = {
    "null key on compacted topic": {"cleanup.policy": "compact"},
    "timestamp before max": {"message.timestamp.before.max.ms": "3600000"},
    "log append time from producer": {"message.timestamp.type": "LogAppendTime"},
}

EXPECTED = {
    "garbage records": INVALID_RECORD,
    "count above records": INVALID_RECORD,
    "count below records": INVALID_RECORD,
    "record length past batch": INVALID_RECORD,
    "value length past batch": INVALID_RECORD,
    "varint too long": INVALID_RECORD,
    "negative header count": INVALID_RECORD,
    "negative header key size": INVALID_RECORD,
    "undecodable zstd": UNKNOWN_SERVER_ERROR,
    "undecodable gzip": UNKNOWN_SERVER_ERROR,
    "zstd bomb": INVALID_RECORD,
    "gzip bomb": INVALID_RECORD,
    "offset deltas not consecutive": INVALID_RECORD,
    "null key on compacted topic": INVALID_RECORD,
    "timestamp after max": INVALID_TIMESTAMP,
    "timestamp before max": INVALID_TIMESTAMP,
    "log append time from producer": INVALID_TIMESTAMP,
}

#: Where Kafka 4.4 answers otherwise, on purpose (docs/compatibility.md): kind -> Kafka's code. Kafka stores an
#: uncompressed batch with gaps in its offset deltas as sent (and rewrites a compressed one); tierlog stores
#: every batch as sent, so it refuses one whose records' offsets would not be the batch's offsets.
KAFKA_DIFFERS = {"offset deltas not consecutive": 0}

#: The kinds Kafka answers as a RecordValidationException: with record_errors and an error message.
WITH_RECORD_ERRORS = {"null key on compacted topic", "timestamp after max", "timestamp before max",
                      "log append time from producer"}
