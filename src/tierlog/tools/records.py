"""Records in and out of a running broker: ``tierlog produce`` and ``tierlog consume`` (Kafka's
console producer and consumer, rpk's produce and consume).

Produce reads lines (or whole inputs) and sends each as a record; consume reads from earliest, latest,
an offset or a time, with or without a consumer group, and hands each poll's records to a callback,
so this module never prints. Both check first, within the tool's timeout, that the topic exists and
the broker answers, so a typo or a stopped broker is one clear error instead of a long wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from tierlog.client.admin import Admin
from tierlog.client.consumer import Consumer
from tierlog.client.errors import KafkaError
from tierlog.client.producer import Producer
from tierlog.client.types import ConsumerRecord, TopicPartition
from tierlog.tools.clients import settings

Record = tuple[bytes | None, bytes]  # key, value


# ------------------------------------------------------------------------------------------ input


def read_chunks(stream: IO[bytes], key_separator: bytes | None = None, whole: bool = False,
                chunk: int = 1 << 20) -> Iterator[list[Record]]:
    """Records from a binary stream, as lists: the complete lines of one read each. One per line (the line
    ending is not part of the record), or the whole stream as one (``whole``). With ``key_separator`` a
    line is ``key SEP value``; a line without the separator is a record without a key. A read returns
    what has arrived (``read1``), so lines from a pipe or a terminal are records as soon as they are
    written, not when the input ends."""
    if whole:
        yield [(None, stream.read())]
        return
    read = getattr(stream, "read1", stream.read)
    rest = b""
    while True:
        data = read(chunk)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        if lines:
            yield [_split(line, key_separator) for line in lines]
    if rest:
        yield [_split(rest, key_separator)]


def read_records(stream: IO[bytes], key_separator: bytes | None = None, whole: bool = False,
                 chunk: int = 1 << 20) -> Iterator[Record]:
    """The records of :func:`read_chunks`, one by one."""
    for records in read_chunks(stream, key_separator, whole, chunk):
        yield from records


def _split(line: bytes, sep: bytes | None) -> Record:
    if sep:
        key, found, value = line.partition(sep)
        if found:
            return key, value
    return None, line


# ------------------------------------------------------------------------------------------ produce


async def partitions_of(admin: Admin, topic: str) -> int:
    """The topic's partition count; UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""
    return len((await admin.describe_topics([topic]))[topic].partitions)


def _check_partition(topic: str, partition: int | None, count: int) -> None:
    if partition is not None and not 0 <= partition < count:
        raise ValueError(f"partition {partition} of topic {topic} does not exist; it has partitions 0-{count - 1}")


class DeliveryFailed(Exception):
    """Not every record was acknowledged: ``acknowledged`` of ``sent`` were (they are written, each once),
    the others may or may not be. ``error`` is the first failure, also the ``__cause__``."""

    def __init__(self, sent: int, acknowledged: int, error: BaseException) -> None:
        super().__init__(f"{acknowledged} of {sent} record(s) acknowledged, {sent - acknowledged} not "
                         f"acknowledged: {error}")
        self.sent, self.acknowledged, self.error = sent, acknowledged, error


async def produce(bootstrap: str, timeout_s: float, topic: str, chunks: Iterable[list[Record]], *,
                  partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
                  acks: str = "all", compression: str = "none",
                  client_config: Mapping[str, Any] | None = None) -> dict:
    """Send every record of ``chunks`` (lists of records, taken off the event loop, so a blocking read of
    standard input does not hold up the records already sent) and wait for all answers; returns counts,
    bytes (keys and values) and, per partition, the first and last offset written. When a record fails,
    :class:`DeliveryFailed` says how many were acknowledged. ``client_config``: the user's client
    settings (security.protocol, ssl.*, sasl.*...)."""
    base = settings(bootstrap, timeout_s, client_config)
    async with Admin({**base, "default.api.timeout.ms": base["request.timeout.ms"]}) as admin:
        count = await partitions_of(admin, topic)
    _check_partition(topic, partition, count)
    request_ms = max(30000, base["request.timeout.ms"])
    producer = Producer({**settings(bootstrap, timeout_s, client_config, "producer"), "request.timeout.ms": request_ms,
                         "delivery.timeout.ms": request_ms + 5000,
                         "max.block.ms": base["request.timeout.ms"], "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks in ("all", "-1"), "compression.type": compression})
    futures = []
    sent = size = 0
    failure: BaseException | None = None
    source = iter(chunks)
    try:
        async with producer:
            while (records := await asyncio.to_thread(next, source, None)) is not None:
                for key, value in records:
                    futures.append(await producer.send(topic, value, key, partition=partition, headers=headers))
                    sent += 1
                    size += len(value) + (len(key) if key else 0)
            await producer.flush()
    except KafkaError as exc:  # a record that could not even be queued; those queued are answered first
        failure = exc
    offsets: dict[int, list[int]] = {}
    acknowledged = 0
    for f in futures:
        exc = f.exception() if f.done() else KafkaError("no answer before the producer closed")
        if exc is not None:
            failure = failure or exc
            continue
        acknowledged += 1
        md = f.result()
        span = offsets.setdefault(md.partition, [md.offset, md.offset])
        span[0], span[1] = min(span[0], md.offset), max(span[1], md.offset)
    if failure is not None:
        raise DeliveryFailed(sent, acknowledged, failure) from failure
    return {"topic": topic, "records": sent, "bytes": size,
            "partitions": {p: {"first_offset": a, "last_offset": b} for p, (a, b) in sorted(offsets.items())}}


# ------------------------------------------------------------------------------------------ consume


@dataclass(frozen=True)
class Start:
    """Where consuming starts: ``kind`` is "earliest", "latest", "offset" or "timestamp" (ms)."""

    kind: str
    value: int = 0


def parse_start(text: str) -> Start:
    """``earliest``, ``latest``, an offset, or ``@`` and a time: ms since the epoch or an ISO-8601 time
    (without a zone it is local time, as Kafka's tools read it). ValueError says what is accepted."""
    t = text.strip()
    if t in ("earliest", "beginning", "oldest", "start"):
        return Start("earliest")
    if t in ("latest", "end", "newest"):
        return Start("latest")
    if t.startswith("@"):
        return Start("timestamp", parse_time(t[1:]))
    if t.isdigit():
        return Start("offset", int(t))
    raise ValueError(f"invalid start {text!r}: use earliest, latest, an offset (e.g. 1000) or @ and a time "
                     f"(e.g. @1700000000000 or @2024-05-01T12:00:00)")


def parse_time(text: str) -> int:
    """ms since the epoch from a number of ms or an ISO-8601 time (local time without a zone)."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"invalid time {text!r}: use ms since the epoch or an ISO-8601 time such as "
                         f"2024-05-01T12:00:00 or 2024-05-01T12:00:00+02:00") from None
    return int(when.timestamp() * 1000)


async def consume(bootstrap: str, timeout_s: float, topic: str, on_records: Callable[[list[ConsumerRecord]], Any],
                  *, start: Start | None = None, partition: int | None = None, count: int | None = None,
                  group: str | None = None, idle_s: float | None = None, commit_every_s: float = 5.0,
                  client_config: Mapping[str, Any] | None = None) -> dict:
    """Read ``topic`` and call ``on_records`` with the records of each poll, in offset order per partition.

    Without a group: the topic's partitions (or ``partition``) from ``start`` (earliest by default; an
    offset outside a partition's records starts at its nearest end). With a group: its committed offsets,
    else ``start`` ("earliest" or "latest"), and the offsets of the records handed over are committed
    (every ``commit_every_s`` and at the end), so the next consumer of the group goes on right after them.
    Stops after ``count`` records or ``idle_s`` seconds without one; returns the count and end positions.
    ``client_config``: the user's client settings (security.protocol, ssl.*, sasl.*...)."""
    base = settings(bootstrap, timeout_s, client_config)
    api_ms = base["request.timeout.ms"]
    async with Admin({**base, "default.api.timeout.ms": api_ms}) as admin:
        nparts = await partitions_of(admin, topic)
    _check_partition(topic, partition, nparts)
    start = start or Start("earliest" if group is None else "latest")
    if group is not None and start.kind not in ("earliest", "latest"):
        raise ValueError("with a group, --from takes earliest or latest (where the group has no committed "
                         "offset); move a group with tierlog group reset-offsets")
    config = {**settings(bootstrap, timeout_s, client_config, "consumer"), "default.api.timeout.ms": api_ms,
              "request.timeout.ms": max(30000, api_ms),
              "enable.auto.commit": False, "auto.offset.reset": start.kind if start.kind == "latest" else "earliest"}
    if group is not None:
        config["group.id"] = group
    consumer = Consumer(config)
    received = 0
    positions: dict[TopicPartition, int] = {}
    committed: dict[TopicPartition, int] = {}
    async with consumer:
        if group is not None:
            consumer.subscribe([topic])
        else:
            tps = [TopicPartition(topic, p) for p in ([partition] if partition is not None else range(nparts))]
            consumer.assign(tps)
            await _seek(consumer, tps, start)
        last_record = time.monotonic()
        last_commit = time.monotonic()
        while count is None or received < count:
            wait = 1.0 if idle_s is None else max(0.0, min(1.0, idle_s - (time.monotonic() - last_record)))
            batch = await consumer.poll(timeout_ms=wait * 1000)
            records = [r for rs in batch.values() for r in rs]
            now = time.monotonic()
            if group is not None and not consumer.assignment():
                last_record = now  # joining the group is not idleness
            if not records:
                if idle_s is not None and now - last_record >= idle_s:
                    break
                continue
            last_record = now
            if count is not None and received + len(records) > count:
                records = _first(batch, count - received)
            received += len(records)
            for r in records:
                positions[TopicPartition(r.topic, r.partition)] = r.offset + 1
            on_records(records)
            if group is not None and now - last_commit >= commit_every_s and positions != committed:
                await consumer.commit(dict(positions))
                committed = dict(positions)
                last_commit = now
        if group is not None and positions != committed:
            await consumer.commit(dict(positions))
    return {"topic": topic, "records": received,
            "positions": {f"{tp.topic}-{tp.partition}": o for tp, o in sorted(positions.items())}}


def _first(batch: dict[TopicPartition, list[ConsumerRecord]], n: int) -> list[ConsumerRecord]:
    """The first ``n`` records of a poll, taking whole partitions' runs in order (offsets stay contiguous
    per partition, so committed positions never skip a record that was not handed over)."""
    out: list[ConsumerRecord] = []
    for rs in batch.values():
        take = rs[: n - len(out)]
        out += take
        if len(out) == n:
            break
    return out


async def _seek(consumer: Consumer, tps: list[TopicPartition], start: Start) -> None:
    if start.kind == "earliest":
        consumer.seek_to_beginning(*tps)
    elif start.kind == "latest":
        consumer.seek_to_end(*tps)
    elif start.kind == "offset":
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, min(max(start.value, begin[tp]), end[tp]))
    else:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, start.value))
        for tp in tps:
            if found[tp] is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found[tp].offset)
