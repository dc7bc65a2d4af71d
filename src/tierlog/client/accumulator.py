"""The producer's record accumulator: records become v2 batches per partition as they arrive.

Each record is encoded once, straight into its partition's open batch (a ``bytearray``); closing a
batch compresses the records section and prepends the 61-byte header. Batches are ready to send
when full (``batch.size``), when ``linger.ms`` has passed since the batch opened, or when the
producer flushes or closes. ``buffer.memory`` bounds the bytes held; a send waits for room up to
``max.block.ms``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.records.batch import RECORD_BATCH_OVERHEAD, TRANSACTIONAL_FLAG_MASK
from tierlog.records.compression import CompressionType, compress
from tierlog.records.record import build_batch_header
from tierlog.records.record import encode_uvarint as _uvarint

# Zig-zag varints of small non-negative ints, precomputed: offset deltas and lengths are mostly small.
_VARINT = [b""] * 16384




for _i in range(16384):
    _VARINT[_i] = _uvarint(_i << 1)


def _varint(v: int) -> bytes:
    if 0 <= v < 16384:
        return _VARINT[v]
    return _uvarint((v << 1) ^ (v >> 63))


def _headers(headers: Any) -> bytes:
    """The headers section of a record: count, then each key and value with their lengths."""
    parts = [_varint(len(headers))]
    for hkey, hvalue in headers:
        raw = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
        parts += (_varint(len(raw)), raw)
        if hvalue is None:
            parts.append(b"\x01")
        else:
            parts += (_varint(len(hvalue)), hvalue)
    return b"".join(parts)


def encode_record(offset_delta: int, ts_delta: int, key: Any, value: Any, headers: Any) -> bytes:
    """One v2 record (length prefix included)."""
    parts: list = []
    _append_record(parts, offset_delta, ts_delta, key, value, headers)
    return b"".join(parts)


def _append_record(parts: list, offset_delta: int, ts_delta: int, key: Any, value: Any, headers: Any) -> int:
    """Add the pieces of one v2 record to ``parts`` (joined once when the batch closes); returns
    its size. The hot path of ``send``: the value is not copied here, the rest is a handful of
    small byte strings."""
    tsv = _VARINT[ts_delta] if 0 <= ts_delta < 16384 else _varint(ts_delta)
    ofs = _VARINT[offset_delta] if offset_delta < 16384 else _varint(offset_delta)
    if key is None:
        kpart = b"\x01"
    else:
        klen = len(key)
        kpart = (_VARINT[klen] if klen < 16384 else _varint(klen)) + key
    if value is None:
        vlen = 0
        vpart = b"\x01"
    else:
        vlen = len(value)
        vpart = _VARINT[vlen] if vlen < 16384 else _varint(vlen)
    head = b"".join((b"\x00", tsv, ofs, kpart, vpart))
    hpart = _headers(headers) if headers else b"\x00"
    body = len(head) + vlen + len(hpart)
    lpart = _VARINT[body] if body < 16384 else _varint(body)
    if vlen:
        parts += (lpart, head, value, hpart)
    else:
        parts += (lpart, head, hpart)
    return len(lpart) + body


class ProducerBatch:
    """Records for one partition, sent and acknowledged together."""

    __slots__ = ("tp", "parts", "records", "count", "base_timestamp", "max_timestamp", "created", "future",
                 "attempts", "base_sequence", "producer_id", "producer_epoch", "frame", "size",
                 "last_attempt", "closed", "in_flight", "appended_bytes", "leader", "backoff")

    def __init__(self, tp: TopicPartition, now: float) -> None:
        self.tp = tp
        self.parts: list = []  # the records' pieces until the batch closes
        self.records = b""  # the records section (compressed if so configured), once closed
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        self.created = now
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.attempts = 0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.frame: bytes | None = None  # the encoded batch, built once when the batch closes
        self.size = RECORD_BATCH_OVERHEAD
        self.last_attempt = 0.0
        self.closed = False
        self.in_flight = False
        self.appended_bytes = 0
        self.leader = -1  # the node the last attempt went to
        self.backoff = 0.0  # seconds to wait after a failed attempt before retrying at the same leader

    def append(self, ts: int, key: Any, value: Any, headers: Any) -> int:
        count = self.count
        if count:
            delta = ts - self.base_timestamp
            if ts > self.max_timestamp:
                self.max_timestamp = ts
        else:
            self.base_timestamp = self.max_timestamp = ts
            delta = 0
        n = _append_record(self.parts, count, delta, key, value, headers)
        self.count = count + 1
        self.size += n
        return n

    def close(self, codec: CompressionType, level: int | None) -> None:
        """Freeze the records (compressed once); the header is written at drain time because the
        producer id and sequence are only known then."""
        if self.closed:
            return
        self.closed = True
        records = b"".join(self.parts)
        self.parts = []
        self.records = records if codec is CompressionType.NONE else compress(codec, records, level)

    def encode(self, codec: CompressionType, transactional: bool = False) -> bytes:
        if self.frame is None:
            attributes = int(codec) | (TRANSACTIONAL_FLAG_MASK if transactional else 0)
            self.frame = build_batch_header(
                len(self.records), self.count, attributes, self.base_timestamp, self.max_timestamp,
                self.producer_id, self.producer_epoch, self.base_sequence, self.records) + self.records
        return self.frame

    def complete(self, base_offset: int, log_append_time: int) -> None:
        if not self.future.done():
            self.future.set_result((base_offset, log_append_time))

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
            self.future.exception()  # a failure nobody awaits must not warn at shutdown


class RecordFuture:
    """What :meth:`Producer.send` returns: await it for the record's :class:`RecordMetadata`.

    One asyncio future per batch serves every record in it; this object remembers the record's
    place in the batch, its timestamp and its serialized sizes."""

    __slots__ = ("_batch", "_index", "_timestamp", "_key_size", "_value_size")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int, key_size: int, value_size: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
        self._key_size = key_size
        self._value_size = value_size

    def _metadata(self, base_offset: int, log_append_time: int) -> RecordMetadata:
        tp = self._batch.tp
        return RecordMetadata(tp.topic, tp.partition, base_offset + self._index if base_offset >= 0 else -1,
                              log_append_time if log_append_time >= 0 else self._timestamp,
                              self._key_size, self._value_size)

    def __await__(self):
        fut = self._batch.future
        if not fut.done():
            # one future serves the whole batch: a caller that gives up (cancelled, wait_for timed
            # out) must not cancel it for every other record of the batch
            yield from asyncio.shield(fut).__await__()
        return self._metadata(*fut.result())

    def done(self) -> bool:
        return self._batch.future.done()

    def result(self) -> RecordMetadata:
        return self._metadata(*self._batch.future.result())

    def exception(self) -> BaseException | None:
        return self._batch.future.exception()

    def add_done_callback(self, fn) -> None:
        self._batch.future.add_done_callback(lambda _f: fn(self))


class RecordAccumulator:
    def __init__(self, config: dict[str, Any]) -> None:
        self.batch_size = config["batch.size"]
        self.linger = config["linger.ms"] / 1000
        self.buffer_memory = config["buffer.memory"]
        self.codec = CompressionType.from_name(config["compression.type"])
        self.level = {CompressionType.GZIP: config.get("compression.gzip.level"),
                      CompressionType.LZ4: config.get("compression.lz4.level"),
                      CompressionType.ZSTD: config.get("compression.zstd.level")}.get(self.codec)
        if self.level == -1 and self.codec is CompressionType.GZIP:
            self.level = None
        self.batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.used = 0
        self.flushing = 0
        self.closing = False
        self._room = asyncio.Event()
        self.wakeup = asyncio.Event()  # the sender waits on it

    def has_room(self, size: int) -> bool:
        return self.used + size <= self.buffer_memory or self.used == 0

    async def wait_for_room(self, size: int, deadline: float) -> bool:
        while not self.has_room(size):
            self._room.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._room.wait(), remaining)
            except TimeoutError:
                return False
        return True

    def open_batch(self, tp: TopicPartition, dq: collections.deque | None, last: ProducerBatch | None
                   ) -> tuple[ProducerBatch, bool]:
        """A new open batch at the end of ``tp``'s queue ``dq`` (made when None), closing ``last``
        (the queue's last batch) if still open; returns it and whether ``last`` became ready."""
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        ready = False
        if last is not None and not last.closed:
            last.close(self.codec, self.level)
            ready = True
        batch = ProducerBatch(tp, time.monotonic())
        dq.append(batch)
        # the sender may be idle with no timer at all: it must learn about the batch to send it
        # when linger.ms has passed (or at once with linger.ms=0)
        self.wakeup.set()
        return batch, ready

    def append(self, tp: TopicPartition, ts: int, key: Any, value: Any, headers: Any,
               estimated: int) -> tuple[ProducerBatch, int, bool]:
        """Add a record; returns (batch, index in batch, whether a batch became ready to send: the
        previous one closed for this record, or this one full). ``Producer.send`` inlines this."""
        dq = self.batches.get(tp)
        batch = dq[-1] if dq else None
        ready = False
        if batch is None or batch.closed or (batch.count and batch.size + estimated > self.batch_size):
            batch, ready = self.open_batch(tp, dq, batch)
        index = batch.count
        n = batch.append(ts, key, value, headers)
        batch.appended_bytes += n
        self.used += n
        if batch.size >= self.batch_size:
            batch.close(self.codec, self.level)
            ready = True
        if ready:
            self.wakeup.set()
        return batch, index, ready

    def release(self, batch: ProducerBatch) -> None:
        self.used -= batch.appended_bytes
        batch.appended_bytes = 0
        self._room.set()

    def ready(self, batch: ProducerBatch, now: float) -> bool:
        return (batch.closed or self.flushing > 0 or self.closing or now - batch.created >= self.linger
                or batch.attempts > 0)

    def next_expiry(self, now: float) -> float | None:
        """Seconds until the oldest open batch reaches linger.ms (None when nothing waits)."""
        soonest = None
        for dq in self.batches.values():
            if dq:
                b = dq[0]
                wait = 0.0 if self.ready(b, now) else b.created + self.linger - now
                if soonest is None or wait < soonest:
                    soonest = wait
        return soonest

    def has_unsent(self) -> bool:
        return any(dq for dq in self.batches.values())

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a failed batch back at the front of its partition, keeping sequence order."""
        dq = self.batches.setdefault(batch.tp, collections.deque())
        i = 0
        while i < len(dq) and dq[i].attempts and 0 <= dq[i].base_sequence < batch.base_sequence:
            i += 1
        dq.insert(i, batch)
        self.wakeup.set()
