"""The consumer's fetch path: subscription state, Fetch requests, record decoding, offset resets.

Kafka's rules, as its ``Fetcher``/``FetchCollector``/``CompletedFetch`` apply them:

- One Fetch request per leader at a time, covering every assigned partition that has a position,
  is not paused and has room in its buffer. ``current_leader_epoch`` comes from metadata so a
  stale leader answers FENCED_LEADER_EPOCH instead of data.
- Data is kept undecoded until ``poll`` takes records from it; batches are decoded (and their CRC
  checked with ``check.crcs``) one at a time. Records before the fetch position are skipped (a
  fetch can return a batch that starts earlier), control batches and, with ``read_committed``,
  batches of aborted transactions (from the response's ``aborted_transactions`` and the abort
  markers) are skipped too. A partial batch at the end of the data is ignored; an oversized first
  batch (KIP-74) is decoded like any other.
- Each partition may hold two completed fetches: while the application works through one, the
  next is already requested from where the buffered data ends, so a steady consumer does not wait
  a round trip per buffer (Java's consumer waits for its buffer to drain first).
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION and other stale-metadata
  errors refresh metadata and retry the partition after ``retry.backoff.ms``; REPLICA_NOT_AVAILABLE
  (a tiered broker's remote metadata still loading: :class:`RemoteStorageNotReadyError`, logged once,
  counted in ``remote-storage-not-ready-total``) and other retriable errors back off and retry.
  OFFSET_OUT_OF_RANGE resets the position by ``auto.offset.reset`` or, with ``none``, raises
  :class:`NoOffsetForPartitionError` from ``poll``.
- Errors found in the background are raised by the next ``poll`` that has no records to return.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tierlog import errors
from tierlog.client.connection import FETCH_LAST_VERSION_WITH_NAMES
from tierlog.client.errors import IllegalStateError, NoOffsetForPartitionError, RemoteStorageNotReadyError
from tierlog.client.types import ConsumerRecord, OffsetAndMetadata, TopicPartition
from tierlog.protocol import ApiKey
from tierlog.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    iter_batches,
    verify_crc,
)
from tierlog.records.compression import CompressionType, decompress_bounded, decompression_limit
from tierlog.records.record import decode_varint, decode_varlong

log = logging.getLogger("tierlog.client.consumer")

__all__ = [
    "CompletedFetch", "Fetcher", "PartitionState", "RecordDeserializationError", "SubscriptionState",
    "parse_reset_strategy",
]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

# Errors that mean our metadata is stale: refresh it, then fetch again (Kafka's FetchCollector).
_METADATA_ERRORS = frozenset({
    errors.NotLeaderOrFollowerError.code, errors.FencedLeaderEpochError.code, errors.UnknownLeaderEpochError.code,
    errors.UnknownTopicOrPartitionError.code, errors.KafkaStorageError.code, 5,  # LEADER_NOT_AVAILABLE
    78,  # OFFSET_NOT_AVAILABLE
    100,  # UNKNOWN_TOPIC_ID
    103,  # INCONSISTENT_TOPIC_ID
})
_OFFSET_OUT_OF_RANGE = errors.OffsetOutOfRangeError.code
_REPLICA_NOT_AVAILABLE = errors.ReplicaNotAvailableError.code
_CONTROL_ABORT = 0
_CONTROL_KEY = struct.Struct(">hh")
_new_tuple = tuple.__new__


def _now() -> float:
    return time.monotonic()


class RecordDeserializationError(errors.KafkaError):
    """``key.deserializer`` or ``value.deserializer`` failed on a record; ``seek`` past
    ``offset`` to skip it. The deserializer's exception is the ``__cause__``."""

    def __init__(self, message: str, tp: TopicPartition, offset: int) -> None:
        super().__init__(message)
        self.topic_partition = tp
        self.offset = offset


# ---------------------------------------------------------------------------------------- reset policy

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_reset_strategy(value: str) -> str | int:
    """``auto.offset.reset`` as "earliest", "latest", "none" or, for ``by_duration:<ISO-8601>``
    (KIP-1106), the duration in ms."""
    v = str(value).strip()
    low = v.lower()
    if low in ("earliest", "latest", "none"):
        return low
    if low.startswith("by_duration:"):
        m = _DURATION.fullmatch(v[len("by_duration:"):])
        if m:
            d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            return int(((d * 24 + h) * 60 + mi) * 60000 + s * 1000)
    raise errors.InvalidConfigError(f"auto.offset.reset: unsupported value {value!r}")


def reset_timestamp(strategy: str | int) -> int:
    """The ListOffsets timestamp a reset strategy asks for."""
    if strategy == "earliest":
        return EARLIEST_TIMESTAMP
    if strategy == "latest":
        return LATEST_TIMESTAMP
    return int(time.time() * 1000) - int(strategy)


# ---------------------------------------------------------------------------------------- subscription state


class PartitionState:
    """What the consumer knows about one assigned partition."""

    __slots__ = ("position", "epoch", "paused", "reset", "resetting", "committed_pending", "high_watermark",
                 "last_stable_offset", "log_start_offset", "backoff_until", "failures", "generation", "pending",
                 "not_ready_logged")

    def __init__(self) -> None:
        self.position: int | None = None  # next offset to return
        self.epoch = -1  # leader epoch of the last returned batch (committed with the offset)
        self.paused = False
        self.reset: str | int | None = None  # reset strategy waiting for a ListOffsets answer
        self.resetting = False  # a ListOffsets for the reset is in flight
        self.committed_pending = False  # an OffsetFetch for the initial position is in flight
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.backoff_until = 0.0
        self.failures = 0
        # bumped whenever the position is set from outside, so in-flight answers for the old one are dropped
        self.generation = 0
        self.pending: deque[CompletedFetch] = deque()
        self.not_ready_logged = False  # RemoteStorageNotReadyError said once until data flows again

    def seek(self, offset: int, epoch: int = -1) -> None:
        self.position = offset
        self.epoch = epoch
        self.reset = None
        self.generation += 1
        self.pending.clear()

    def request_reset(self, strategy: str | int) -> None:
        self.position = None
        self.reset = strategy
        self.generation += 1
        self.pending.clear()
        self.backoff_until = 0.0

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None


class SubscriptionState:
    """Kafka's SubscriptionState: topics or pattern subscribed to, or partitions assigned by the
    user, and a :class:`PartitionState` per assigned partition (in fetch order)."""

    AUTO_TOPICS = "topics"
    AUTO_PATTERN = "pattern"
    USER_ASSIGNED = "assigned"

    def __init__(self, default_reset: str | int) -> None:
        self.mode: str | None = None
        self.subscription: set[str] = set()
        self.pattern: re.Pattern | None = None
        self.group_subscription: set[str] = set()  # the leader's view: every member's topics
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.default_reset = default_reset
        self.listener: Any = None

    def _set_mode(self, mode: str) -> None:
        if self.mode is None:
            self.mode = mode
        elif self.mode != mode:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")

    @property
    def auto_assigned(self) -> bool:
        return self.mode in (self.AUTO_TOPICS, self.AUTO_PATTERN)

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> bool:
        self._set_mode(self.AUTO_TOPICS)
        self.listener = listener
        return self.change_subscription(topics)

    def subscribe_pattern(self, pattern: re.Pattern, listener: Any = None) -> None:
        self._set_mode(self.AUTO_PATTERN)
        self.listener = listener
        self.pattern = pattern

    def change_subscription(self, topics: Iterable[str]) -> bool:
        topics = set(topics)
        if topics == self.subscription:
            return False
        self.subscription = topics
        return True

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> bool:
        self._set_mode(self.USER_ASSIGNED)
        wanted = list(dict.fromkeys(partitions))
        if set(wanted) == set(self.assignment):
            return False
        self._set_assignment(wanted)
        self.subscription = {tp.topic for tp in wanted}
        return True

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        if not self.auto_assigned:
            raise IllegalStateError("Attempt to dynamically assign partitions while manual assignment in use")
        self._set_assignment(list(partitions))

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        old = self.assignment
        self.assignment = {tp: old.get(tp) or PartitionState() for tp in partitions}

    def unsubscribe(self) -> None:
        self.mode = None
        self.subscription = set()
        self.group_subscription = set()
        self.pattern = None
        self.assignment = {}
        self.listener = None

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.assignment.get(tp)
        if st is None:
            raise IllegalStateError(f"No current assignment for partition {tp.topic}-{tp.partition}")
        return st

    def move_to_end(self, tp: TopicPartition) -> None:
        st = self.assignment.pop(tp, None)
        if st is not None:
            self.assignment[tp] = st

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(st.position, "", st.epoch)
                for tp, st in self.assignment.items() if st.position is not None}

    def initializing(self) -> list[TopicPartition]:
        """Partitions without a position and nothing under way to find one."""
        return [tp for tp, st in self.assignment.items()
                if st.position is None and st.reset is None and not st.committed_pending]

    def missing_positions(self) -> bool:
        return any(st.position is None for st in self.assignment.values())


# ---------------------------------------------------------------------------------------- record decoding


def _decode_records(data: bytes, hdr: BatchHeader, topic: str, partition: int, first: int, start: int = 0,
                    stop: int | None = None) -> list[ConsumerRecord]:
    """The records of one (decompressed) batch at or after offset ``first``, as ConsumerRecords with
    raw bytes. This is the consumer's hot loop: varints of one and two bytes (values up to 8191, which
    covers lengths of records up to 8 KiB, offset deltas and most timestamp deltas) are inlined. The
    records are ``data[start:stop]`` (the whole of ``data`` by default), read in place."""
    base_offset = hdr.base_offset
    # LogAppendTime batches give every record the batch's max timestamp
    lat = hdr.max_timestamp if hdr.attributes & TIMESTAMP_TYPE_MASK else None
    base_ts = hdr.base_timestamp
    ts_type = 0 if lat is None else 1
    epoch = hdr.partition_leader_epoch
    n = len(data) if stop is None else stop
    out: list[ConsumerRecord] = []
    append = out.append
    p = start
    try:
        for _ in range(hdr.records_count):
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = decode_varint(data, p)
            end = p + length
            if length < 1 or end > n:
                raise errors.CorruptMessageError(f"record length {length} does not fit in the {n - p} bytes left")
            p += 1  # attributes
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                ts_delta, p = decode_varlong(data, p)
            b = data[p]
            if b < 0x80:
                offset = base_offset + ((b >> 1) ^ -(b & 1))
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                offset = base_offset + ((raw >> 1) ^ -(raw & 1))
                p += 2
            else:
                delta, p = decode_varint(data, p)
                offset = base_offset + delta
            if offset < first:
                p = end
                continue
            b = data[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                klen = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                klen, p = decode_varint(data, p)
            if klen < 0:
                key = None
            else:
                key = data[p:p + klen]
                p += klen
            b = data[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                vlen = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                vlen, p = decode_varint(data, p)
            if vlen < 0:
                value = None
            else:
                value = data[p:p + vlen]
                p += vlen
            b = data[p]
            if b == 0:
                headers = ()  # a tuple, not a list: records made of immutables leave the GC's watch
                p += 1
            else:
                count, p = decode_varint(data, p)
                pairs = []
                for _h in range(count):
                    hk, p = decode_varint(data, p)
                    hkey = data[p:p + hk].decode("utf-8")
                    p += hk
                    hv, p = decode_varint(data, p)
                    if hv < 0:
                        pairs.append((hkey, None))
                    else:
                        pairs.append((hkey, data[p:p + hv]))
                        p += hv
                headers = tuple(pairs)
            if p != end:
                raise errors.CorruptMessageError(
                    f"record at offset {offset} says {length} bytes but holds {p - end + length}")
            append(_new_tuple(ConsumerRecord, (topic, partition, offset, base_ts + ts_delta if lat is None else lat,
                                               ts_type, key, value, headers, epoch, klen, vlen)))
    except (IndexError, UnicodeDecodeError, errors.InvalidRecordError) as exc:
        raise errors.CorruptMessageError(f"malformed record in batch at offset {base_offset}: {exc}") from None
    return out


# ---------------------------------------------------------------------------------------- completed fetch


class CompletedFetch:
    """The undecoded data of one partition from one Fetch response, consumed batch by batch."""

    __slots__ = ("tp", "fetch_offset", "buf", "batches", "end_offset", "next_offset", "last_epoch", "_bi",
                 "_records", "_idx", "_cur", "_aborted", "_aborted_pids", "_verify", "done")

    def __init__(self, tp: TopicPartition, fetch_offset: int, buf: bytes, aborted: Iterable | None,
                 verify: bool) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.buf = buf
        # Headers only (no record work): tells where the data ends, so the next fetch can start there.
        self.batches = list(iter_batches(buf))
        last = self.batches[-1][1].next_offset if self.batches else fetch_offset
        self.end_offset = max(last, fetch_offset)
        self.next_offset = fetch_offset
        self.last_epoch = -1
        self._bi = 0
        self._records: list[ConsumerRecord] | None = None
        self._idx = 0
        self._cur: BatchHeader | None = None
        self._verify = verify
        self.done = False
        if aborted is not None:
            # (first offset, producer id), ascending: aborted transactions still ahead
            self._aborted: list[tuple[int, int]] | None = sorted((int(a.first_offset), int(a.producer_id))
                                                                 for a in aborted)
            self._aborted_pids: set[int] = set()
        else:
            self._aborted = None

    def _skip(self, pos: int, hdr: BatchHeader) -> bool:
        """Whether the batch at ``pos`` is not for the application: a control batch, or with
        read_committed a batch of an aborted transaction (Kafka's CompletedFetch: the response's
        aborted transactions that start at or before the batch's last offset make its producer
        aborted, until that producer's abort marker). Called once per batch, in order."""
        attrs = hdr.attributes
        if self._aborted is not None and hdr.producer_id >= 0:
            aborted = self._aborted
            while aborted and aborted[0][0] <= hdr.last_offset:
                self._aborted_pids.add(aborted.pop(0)[1])
            if attrs & CONTROL_FLAG_MASK:
                if hdr.producer_id in self._aborted_pids and self._abort_marker(pos, hdr):
                    self._aborted_pids.discard(hdr.producer_id)
            elif attrs & TRANSACTIONAL_FLAG_MASK and hdr.producer_id in self._aborted_pids:
                return True
        return bool(attrs & CONTROL_FLAG_MASK)

    def committed_only(self) -> CompletedFetch:
        """This fetch with only the batches ``take`` would return records of (read_committed's
        undecoded path): the batches kept are copied into a new buffer; ``end_offset`` stays, so the
        position still moves past aborted batches and markers."""
        kept = []
        for pos, hdr in self.batches:
            if hdr.next_offset <= self.fetch_offset:
                continue
            if self._verify:
                verify_crc(self.buf, pos, hdr)
            if not self._skip(pos, hdr):
                kept.append(memoryview(self.buf)[pos:pos + hdr.size])
        out = CompletedFetch(self.tp, self.fetch_offset, b"".join(kept), None, False)
        out.end_offset = self.end_offset
        return out

    def _abort_marker(self, pos: int, hdr: BatchHeader) -> bool:
        recs = self._decode(pos, hdr, hdr.base_offset)
        return bool(recs) and recs[0].key is not None and len(recs[0].key) >= 4 \
            and _CONTROL_KEY.unpack_from(recs[0].key)[1] == _CONTROL_ABORT

    def _decode(self, pos: int, hdr: BatchHeader, first: int) -> list[ConsumerRecord]:
        buf = self.buf
        end = pos + hdr.size
        codec = hdr.attributes & COMPRESSION_CODEC_MASK
        if codec == 0:
            return _decode_records(buf, hdr, self.tp.topic, self.tp.partition, first, pos + RECORD_BATCH_OVERHEAD, end)
        else:
            if codec > CompressionType.ZSTD:
                raise errors.UnsupportedCompressionTypeError(
                    f"batch at offset {hdr.base_offset} of {self.tp.topic}-{self.tp.partition} uses codec id {codec}")
            if hdr.records_count <= 0:
                return []
            # bounded: a decompression bomb raises DecompressedTooLargeError instead of taking GBs
            data = bytes(decompress_bounded(CompressionType(codec), memoryview(buf)[pos + RECORD_BATCH_OVERHEAD:end],
                                            decompression_limit(hdr.records_count)))
        return _decode_records(data, hdr, self.tp.topic, self.tp.partition, first)

    def take(self, max_records: int, kd: Callable | None, vd: Callable | None) -> list[ConsumerRecord]:
        """Up to ``max_records`` records from ``next_offset`` on, advancing it. A corrupt batch or a
        failing deserializer raises when no record comes before it; otherwise the records before it
        are returned and the next call raises (the bad record stays next in line)."""
        out: list[ConsumerRecord] = []
        try:
            while len(out) < max_records:
                recs = self._records
                if recs is not None and self._idx < len(recs):
                    i = self._idx
                    j = min(len(recs), i + max_records - len(out))
                    chunk = recs[i:j]
                    if kd is not None or vd is not None:
                        chunk = self._deserialize(chunk, kd, vd, out)
                    out.extend(chunk)
                    self._idx = j
                    self.next_offset = recs[j - 1].offset + 1
                    continue
                if self._cur is not None:
                    # v2 keeps a batch's last offset even when compaction removed its last records
                    self.next_offset = max(self.next_offset, self._cur.next_offset)
                    self._cur = None
                    self._records = None
                if self._bi >= len(self.batches):
                    self.done = True
                    self.next_offset = max(self.next_offset, self.end_offset)
                    break
                pos, hdr = self.batches[self._bi]
                if hdr.next_offset <= self.next_offset:
                    self._bi += 1  # wholly before the position
                    continue
                if self._verify:
                    verify_crc(self.buf, pos, hdr)
                if self._skip(pos, hdr):
                    self._bi += 1
                    self.next_offset = hdr.next_offset
                    continue
                self._records = self._decode(pos, hdr, self.next_offset)
                self._bi += 1
                self._idx = 0
                self._cur = hdr
                self.last_epoch = hdr.partition_leader_epoch
        except errors.KafkaError:
            if not out:
                raise
        return out

    def _deserialize(self, chunk: list[ConsumerRecord], kd: Callable | None, vd: Callable | None,
                     out: list[ConsumerRecord]) -> list[ConsumerRecord]:
        done: list[ConsumerRecord] = []
        for r in chunk:
            try:
                key = r[5] if kd is None else kd(r[5])
                value = r[6] if vd is None else vd(r[6])
            except Exception as exc:
                # return what was good; the bad record stays next in line
                self._idx += len(done)
                if done:
                    self.next_offset = done[-1].offset + 1
                out.extend(done)
                err = RecordDeserializationError(
                    f"Error deserializing key/value for partition {r.topic}-{r.partition} at offset {r.offset}. "
                    "If needed, please seek past the record to continue consumption.", self.tp, r.offset)
                err.__cause__ = exc
                raise err from exc
            done.append(r._replace(key=key, value=value))
        return done


# ---------------------------------------------------------------------------------------- fetcher


class Fetcher:
    """Sends Fetch and ListOffsets requests for the partitions in ``subs`` and turns the answers
    into records; ``wakeup`` is set whenever something a waiting ``poll`` cares about happens."""

    def __init__(self, client: Any, subs: SubscriptionState, config: Mapping[str, Any], wakeup: asyncio.Event,
                 key_deserializer: Callable | None = None, value_deserializer: Callable | None = None) -> None:
        self.client = client
        self.subs = subs
        self.config = config
        self.wakeup = wakeup
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.read_committed = config["isolation.level"] == "read_committed"
        self.check_crcs = bool(config["check.crcs"])
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.request_timeout_ms = config["request.timeout.ms"]
        self.retry_backoff_ms = config["retry.backoff.ms"]
        self.retry_backoff_max_ms = max(self.retry_backoff_ms, config.get("retry.backoff.max.ms", 0))
        self.rack = config.get("client.rack") or ""
        self._inflight: dict[int, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._errors: deque[BaseException] = deque()
        self._kick_handle: asyncio.TimerHandle | None = None
        self._metadata_waiter: asyncio.Task | None = None
        self._closed = False
        self.metrics = {"fetch-total": 0, "records-consumed-total": 0, "bytes-fetched-total": 0,
                        "remote-storage-not-ready-total": 0}

    async def close(self) -> None:
        self._closed = True
        if self._kick_handle is not None:
            self._kick_handle.cancel()
        tasks = list(self._inflight.values()) + list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._inflight.clear()

    # -- errors raised from poll -----------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        self._errors.append(exc)
        self.wakeup.set()

    def raise_pending(self) -> None:
        if self._errors:
            raise self._errors.popleft()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # whoever needed the result has seen the error; this only marks it retrieved
            log.debug("background task %s failed: %r", task.get_name(), task.exception())

    def _backoff(self, st: PartitionState) -> None:
        st.failures += 1
        ms = min(self.retry_backoff_max_ms, self.retry_backoff_ms * 2 ** min(st.failures - 1, 20))
        if self.retry_backoff_max_ms > self.retry_backoff_ms:
            ms *= random.uniform(0.8, 1.2)
        st.backoff_until = _now() + ms / 1000
        self._kick_later(ms / 1000)

    def _kick_later(self, delay: float) -> None:
        """Try fetching and resetting again after ``delay`` seconds, without waiting for a poll."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        if self._kick_handle is not None and not self._kick_handle.cancelled() and self._kick_handle.when() <= when:
            return
        if self._kick_handle is not None:
            self._kick_handle.cancel()
        self._kick_handle = loop.call_at(when, self._kick)

    def _no_leader(self, topics: set[str]) -> None:
        """Some partitions have no known leader: refresh metadata and try again after the retry backoff,
        or as soon as the answer comes when their topic is not in the metadata yet (the first poll after
        an assign waits one round trip, as the Java consumer does, not a backoff)."""
        self.client.request_update()
        self._kick_later(self.retry_backoff_ms / 1000)
        if self._metadata_waiter is None and any(t not in self.client.cluster.topics for t in topics):
            self._metadata_waiter = self._spawn(self._kick_after_update(), "tierlog-fetch-metadata")

    async def _kick_after_update(self) -> None:
        try:
            await self.client.wait_for_update(self.retry_backoff_ms / 1000)
        finally:
            self._metadata_waiter = None
        self._kick()

    def _kick(self) -> None:
        self._kick_handle = None
        if self._closed:
            return
        self.reset_positions()
        self.send_fetches()
        self.wakeup.set()

    # -- fetching ----------------------------------------------------------------------------------------

    def send_fetches(self) -> None:
        """One Fetch per leader without a Fetch in flight, for every partition that can take more data."""
        if self._closed:
            return
        now = _now()
        cluster = self.client.cluster
        plan: dict[int, tuple[Any, list]] = {}
        no_leader: set[str] = set()
        for tp, st in self.subs.assignment.items():
            if st.position is None or st.paused or len(st.pending) >= 2 or st.backoff_until > now:
                continue
            if st.pending:
                last = st.pending[-1]
                if last.end_offset <= last.fetch_offset:
                    continue
                offset = last.end_offset
            else:
                offset = st.position
            node = cluster.leader_for(tp.topic, tp.partition)
            if node is None:
                no_leader.add(tp.topic)
                continue
            if node.node_id in self._inflight:
                continue
            epoch = cluster.topics[tp.topic].partitions[tp.partition].leader_epoch
            entry = plan.get(node.node_id)
            if entry is None:
                entry = plan[node.node_id] = (node, [])
            entry[1].append((tp, st, offset, epoch))
        if no_leader:
            self._no_leader(no_leader)
        for node_id, (node, parts) in plan.items():
            self._inflight[node_id] = asyncio.get_running_loop().create_task(
                self._fetch(node, parts), name=f"tierlog-fetch-{node_id}")

    def _fetch_request(self, parts: list, ids: Mapping[str, Any]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, int]]] = {}
        for tp, _st, offset, epoch in parts:
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": epoch, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": self.partition_max_bytes})
        # session 0 / epoch -1: a full fetch that opens no fetch session (KIP-227)
        return {"replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes, "isolation_level": 1 if self.read_committed else 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "topic_id": ids[t], "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": self.rack}

    async def _fetch(self, node: Any, parts: list) -> None:
        sent = {tp: (st, st.generation, offset) for tp, st, offset, _ in parts}
        # Fetch v13+ names topics by id (KIP-516), as Kafka's consumer when every topic has one: a topic
        # recreated under the same name answers UNKNOWN_TOPIC_ID (metadata refreshed, then fetched again)
        # instead of handing this position's records of another topic
        ids, names = self.client.cluster.topic_ids({tp.topic for tp in sent})
        try:
            response = await self.client.send(
                node, ApiKey.FETCH, self._fetch_request(parts, ids),
                max_version=FETCH_LAST_VERSION_WITH_NAMES if None in ids.values() else None,
                timeout_ms=self.request_timeout_ms + self.max_wait_ms)
        except asyncio.CancelledError:
            self._inflight.pop(node.node_id, None)
            raise
        except errors.KafkaError as exc:
            self._inflight.pop(node.node_id, None)
            log.debug("Fetch from node %s failed: %r", node.node_id, exc)
            self._fetch_failed(sent, exc)
            return
        except Exception as exc:  # a bug must not leave the node blocked
            self._inflight.pop(node.node_id, None)
            self.fail(exc)
            return
        self._inflight.pop(node.node_id, None)
        self.metrics["fetch-total"] += 1
        top = getattr(response, "error_code", None)
        if top is not None and top.value:
            cls = errors.error_for_code(top.value)
            self._fetch_failed(sent, cls(f"Fetch refused by node {node.node_id}: {top.name}"))
            return
        got_data = False
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(getattr(t, "topic", None) or names.get(t.topic_id), int(p.partition_index))
                entry = sent.pop(tp, None)
                if entry is None:
                    continue
                st, generation, offset = entry
                if self.subs.assignment.get(tp) is not st or st.generation != generation:
                    continue  # unassigned, sought or reset meanwhile
                try:
                    got_data |= self._partition_answer(tp, st, offset, p)
                except errors.KafkaError as exc:
                    self._backoff(st)
                    self.fail(exc)
        self.wakeup.set()
        if got_data:
            self.send_fetches()  # keep the next buffer coming while the application works

    def _fetch_failed(self, sent: dict, exc: errors.KafkaError) -> None:
        if exc.retriable:
            self.client.request_update()
        else:
            self.fail(exc)
        for tp, (st, generation, _offset) in sent.items():
            if self.subs.assignment.get(tp) is st and st.generation == generation:
                self._backoff(st)
        self.wakeup.set()

    def _partition_answer(self, tp: TopicPartition, st: PartitionState, offset: int, p: Any) -> bool:
        """Handle one partition of a Fetch answer; True when data was buffered."""
        code = p.error_code.value
        if code == errors.NO_ERROR:
            st.failures = 0
            st.not_ready_logged = False
            if p.high_watermark >= 0:
                st.high_watermark = int(p.high_watermark)
            lso = getattr(p, "last_stable_offset", -1)
            if lso >= 0:
                st.last_stable_offset = int(lso)
            lso = getattr(p, "log_start_offset", -1)
            if lso >= 0:
                st.log_start_offset = int(lso)
            records = p.records
            if not records:
                return False
            self.metrics["bytes-fetched-total"] += len(records)
            aborted = (p.aborted_transactions or ()) if self.read_committed else None
            cf = CompletedFetch(tp, offset, records, aborted, self.check_crcs)
            if cf.end_offset <= offset:
                # only a partial batch: the next fetch (this partition first, see collect) gets it whole
                return False
            st.pending.append(cf)
            return True
        cls = errors.error_for_code(code)
        where = f"{tp.topic}-{tp.partition} at offset {offset}"
        if code in _METADATA_ERRORS:
            log.debug("Fetch for %s: %s; refreshing metadata", where, cls.name)
            self.client.request_update()
            self._backoff(st)
        elif code == _OFFSET_OUT_OF_RANGE:
            if st.pending or offset != st.position:
                self._backoff(st)  # a fetch ahead of the position: look again when the position gets there
            elif self.subs.default_reset == "none":
                self._backoff(st)
                self.fail(NoOffsetForPartitionError(
                    f"Fetch position {offset} is out of range for partition {tp.topic}-{tp.partition} "
                    "and auto.offset.reset is none"))
            else:
                log.info("Fetch position %s is out of range for partition %s-%s, resetting offset",
                         offset, tp.topic, tp.partition)
                st.request_reset(self.subs.default_reset)
                self.reset_positions()
        elif code == _REPLICA_NOT_AVAILABLE:
            # From a tiered broker: the offset is in the remote tier and the partition's remote metadata
            # is still loading after a restart (KIP-1007). Wait and fetch again.
            self.metrics["remote-storage-not-ready-total"] += 1
            if not st.not_ready_logged:
                st.not_ready_logged = True
                log.info("%s", RemoteStorageNotReadyError(f"Remote storage of {where} is not ready yet (its "
                                                          f"remote log metadata is loading); retrying"))
            self._backoff(st)
        elif cls.retriable:
            log.debug("Fetch for %s: %s; retrying after back-off", where, cls.name)
            self._backoff(st)
        else:
            self._backoff(st)
            self.fail(cls(f"Fetch for {where} failed: {cls.name}"))
        return False

    # -- handing records to poll ---------------------------------------------------------------------

    def collect(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Take up to ``max_records`` buffered records, advancing positions. Raises a pending error
        when there is nothing to return."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        consumed: list[TopicPartition] = []
        kd, vd = self.key_deserializer, self.value_deserializer
        try:
            for tp, st in list(self.subs.assignment.items()):
                if remaining <= 0:
                    break
                if st.paused or not st.pending:
                    continue
                while st.pending and remaining > 0:
                    cf = st.pending[0]
                    if cf.next_offset != st.position:
                        st.pending.popleft()  # from before a seek or a reset
                        continue
                    try:
                        records = cf.take(remaining, kd, vd)
                    finally:
                        if cf.next_offset > st.position:
                            st.position = cf.next_offset
                            if cf.last_epoch >= 0:
                                st.epoch = cf.last_epoch
                    if records:
                        have = out.get(tp)
                        if have is None:
                            out[tp] = records
                        else:
                            have.extend(records)
                        remaining -= len(records)
                    if cf.done:
                        st.pending.popleft()
                    elif not records:
                        break
                consumed.append(tp)
        except errors.KafkaError:
            if not out:
                raise
        finally:
            for tp in consumed:
                self.subs.move_to_end(tp)  # the next poll and fetch start with the others
        if not out:
            self.raise_pending()
        else:
            self.metrics["records-consumed-total"] += max_records - remaining
        return out

    def collect_batches(self, max_bytes: int) -> dict[TopicPartition, list[CompletedFetch]]:
        """Take buffered fetches undecoded, about ``max_bytes`` of them, advancing positions past them:
        for readers that decode whole batches themselves (the Spark reader's columnar decoder). Each
        holds whole batches from ``fetch_offset`` on (the first may start earlier) to ``end_offset``.
        With ``read_committed`` the batches of aborted transactions and control batches are left out
        (copied into a new buffer); with ``read_uncommitted`` nothing is filtered."""
        out: dict[TopicPartition, list[CompletedFetch]] = {}
        size = 0
        consumed: list[TopicPartition] = []
        for tp, st in list(self.subs.assignment.items()):
            if size >= max_bytes:
                break
            if st.paused or not st.pending:
                continue
            while st.pending and size < max_bytes:
                cf = st.pending.popleft()
                if cf.next_offset != st.position or cf.end_offset <= st.position:
                    continue  # from before a seek or a reset, or nothing whole
                if self.read_committed:
                    cf = cf.committed_only()
                out.setdefault(tp, []).append(cf)
                size += len(cf.buf)
                st.position = cf.end_offset
                if cf.batches:
                    st.epoch = cf.batches[-1][1].partition_leader_epoch
            consumed.append(tp)
        for tp in consumed:
            self.subs.move_to_end(tp)
        if not out:
            self.raise_pending()
        return out

    def has_buffered(self) -> bool:
        return any(st.pending and not st.paused for st in self.subs.assignment.values())

    # -- positions ---------------------------------------------------------------------------------------

    def reset_positions(self) -> None:
        """Send ListOffsets for every partition waiting for a reset (non-blocking)."""
        if self._closed:
            return
        now = _now()
        cluster = self.client.cluster
        plan: dict[int, tuple[Any, list]] = {}
        no_leader: set[str] = set()
        for tp, st in self.subs.assignment.items():
            if st.reset is None or st.resetting or st.backoff_until > now:
                continue
            node = cluster.leader_for(tp.topic, tp.partition)
            if node is None:
                no_leader.add(tp.topic)
                continue
            st.resetting = True
            entry = plan.get(node.node_id)
            if entry is None:
                entry = plan[node.node_id] = (node, [])
            entry[1].append((tp, st, st.reset, st.generation))
        if no_leader:
            self._no_leader(no_leader)
        for node_id, (node, items) in plan.items():
            self._spawn(self._reset(node, items), f"tierlog-reset-{node_id}")

    async def _reset(self, node: Any, items: list) -> None:
        try:
            wanted = {tp: reset_timestamp(strategy) for tp, _, strategy, _ in items}
            results = await self.list_offsets_from(node, wanted)
        except errors.KafkaError as exc:
            results = {tp: exc for tp, *_ in items}
        for tp, st, strategy, generation in items:
            st.resetting = False
            if self.subs.assignment.get(tp) is not st or st.generation != generation or st.reset != strategy:
                continue
            r = results.get(tp)
            if r is None:
                r = errors.UnknownServerError(f"ListOffsets answer lacks {tp.topic}-{tp.partition}")
            if isinstance(r, BaseException):
                self._backoff(st)
                if getattr(r, "retriable", False):
                    self.client.request_update()
                else:
                    self.fail(r)
                continue
            offset, _ts, epoch = r
            if offset < 0:
                if isinstance(strategy, int):
                    st.reset = "latest"  # by_duration past the last record: start at the end (KIP-1106)
                    continue
                self._backoff(st)
                continue
            st.failures = 0
            st.seek(offset, epoch if epoch is not None else -1)
            log.debug("Reset position of %s-%s to %s (%s)", tp.topic, tp.partition, offset, strategy)
        self.wakeup.set()
        self.reset_positions()  # the ones just turned to "latest"
        self.send_fetches()

    async def list_offsets_from(self, node: Any, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, Any]:
        """One ListOffsets to ``node``: per partition (offset, timestamp, leader epoch) or a KafkaError."""
        cluster = self.client.cluster
        topics: dict[str, list[dict[str, int]]] = {}
        for tp, ts in timestamps.items():
            info = cluster.topics.get(tp.topic)
            pinfo = info.partitions.get(tp.partition) if info is not None else None
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "timestamp": ts,
                "current_leader_epoch": pinfo.leader_epoch if pinfo is not None else -1})
        response = await self.client.send(node, ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 1 if self.read_committed else 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        out: dict[TopicPartition, Any] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                code = p.error_code.value
                if code == _REPLICA_NOT_AVAILABLE:
                    out[tp] = RemoteStorageNotReadyError(
                        f"ListOffsets for {tp.topic}-{tp.partition}: its remote storage is not ready yet (remote "
                        f"log metadata loading)")
                elif code:
                    cls = errors.error_for_code(code)
                    out[tp] = cls(f"ListOffsets for {tp.topic}-{tp.partition} failed: {cls.name}")
                else:
                    out[tp] = (int(p.offset), int(p.timestamp), int(getattr(p, "leader_epoch", -1)))
        return out

    async def list_offsets(self, timestamps: Mapping[TopicPartition, int],
                           deadline: float) -> dict[TopicPartition, Any]:
        """(offset, timestamp, leader epoch) per partition, from the leaders, retrying retriable errors
        until ``deadline``; raises KafkaTimeoutError then, or a non-retriable error at once."""
        remaining = dict(timestamps)
        result: dict[TopicPartition, Any] = {}
        self.client.add_topics({tp.topic for tp in remaining})
        attempt = 0
        last: BaseException | None = None
        while remaining:
            cluster = self.client.cluster
            plan: dict[int, tuple[Any, dict]] = {}
            stale = False
            for tp, ts in remaining.items():
                node = cluster.leader_for(tp.topic, tp.partition)
                if node is None:
                    stale = True
                    continue
                plan.setdefault(node.node_id, (node, {}))[1][tp] = ts
            if plan:
                answers = await asyncio.gather(*(self.list_offsets_from(node, items) for node, items in plan.values()),
                                               return_exceptions=True)
                for (_node, items), answer in zip(plan.values(), answers):
                    if isinstance(answer, BaseException):
                        if not isinstance(answer, errors.KafkaError) or not answer.retriable:
                            raise answer
                        last = answer
                        stale = True
                        continue
                    for tp in items:
                        r = answer.get(tp)
                        if isinstance(r, errors.KafkaError):
                            if not r.retriable:
                                raise r
                            last = r
                            stale = stale or r.code in _METADATA_ERRORS
                        elif r is not None:
                            result[tp] = r
                            remaining.pop(tp, None)
            if not remaining:
                break
            left = deadline - _now()
            if left <= 0:
                if isinstance(last, RemoteStorageNotReadyError):
                    raise RemoteStorageNotReadyError(f"{last}; still not ready when the time was up")
                raise self.client.timeout_error(f"Failed to get offsets of {sorted(remaining)} in time", last)
            attempt += 1
            # a first lookup of topics not in the metadata yet waits for it, not for a backoff as well
            unknown = attempt == 1 and last is None and any(tp.topic not in cluster.topics for tp in remaining)
            if stale:
                try:
                    await self.client.wait_for_update(min(left, self.request_timeout_ms / 1000))
                except errors.KafkaError as exc:
                    last = exc
            if unknown and last is None:
                # the answer may be to a request sent before these topics were added: one more round trip
                if any(tp.topic not in self.client.cluster.topics for tp in remaining):
                    try:
                        await self.client.wait_for_update(min(left, self.request_timeout_ms / 1000))
                    except errors.KafkaError as exc:
                        last = exc
                continue
            delay = min(self.retry_backoff_max_ms, self.retry_backoff_ms * 2 ** min(attempt - 1, 20)) / 1000
            await asyncio.sleep(min(delay, max(0.0, deadline - _now())))
        return result
