"""The console's message browser: one page of a partition's records, from an offset or a time, read through
the brokers with tierlog's own consumer (no group, nothing committed), so records the leader serves from the
remote tier come back like local ones.

A page is bounded twice, whatever the browser asks: at most ``MAX_RECORDS`` records and about ``max_bytes``
of record data (the consumer's ``fetch.max.bytes`` and ``max.partition.fetch.bytes``; as Kafka's consumer, a
first batch larger than that still comes whole so the read makes progress, and ``message.max.bytes`` bounds
a batch). Each key, value and header value is sent to the page at most ``SHOWN_BYTES`` long, with its full
size, in the three forms the page can show: text (when the bytes are UTF-8), JSON pretty-printed (when the
whole field parses as JSON) and hex. ``read_committed`` is the default: records of open or aborted
transactions are not shown, and the page ends at the last stable offset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from tierlog import errors
from tierlog.client.consumer import Consumer
from tierlog.client.types import ConsumerRecord, TopicPartition
from tierlog.tools import clients

#: Records on one page: the default, and the most one request may ask for.
PAGE_RECORDS = 50
MAX_RECORDS = 500
#: Bytes of record data one request reads: the default, and the most one request may ask for.
PAGE_BYTES = 1 << 20
MAX_BYTES = 8 << 20
#: The longest key, value or header value sent to the page; a longer one is cut, with its size shown.
SHOWN_BYTES = 4096

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def field(data: bytes | None, shown: int = SHOWN_BYTES) -> dict | None:
    """A key, value or header value as the page shows it: ``size`` (all of it), ``truncated``, and of its
    first ``shown`` bytes ``text`` (None unless UTF-8; a cut inside a character drops that character),
    ``json`` (pretty; None unless the whole field is a JSON object, array or string) and ``hex``. None
    stays None (a null key, a tombstone)."""
    if data is None:
        return None
    data = bytes(data)
    head = data[:shown]
    truncated = len(data) > shown
    text = _utf8(head, cut_ok=truncated)
    pretty = None
    # numbers, true and null parse as JSON too, but showing "42" as JSON says nothing: objects, arrays, strings
    if text is not None and not truncated and text.lstrip()[:1] in ("{", "[", '"'):
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    return {"size": len(data), "truncated": truncated, "text": text, "json": pretty, "hex": head.hex()}


def _utf8(head: bytes, cut_ok: bool) -> str | None:
    """``head`` as text, or None when it is not UTF-8; when ``cut_ok``, up to three bytes of a character
    cut at the end are left out."""
    for cut in range(4 if cut_ok else 1):
        try:
            return head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def record(r: ConsumerRecord, shown: int = SHOWN_BYTES) -> dict:
    return {"offset": r.offset, "timestamp": r.timestamp,
            "timestamp_type": TIMESTAMP_TYPES.get(r.timestamp_type, str(r.timestamp_type)),
            "leader_epoch": r.leader_epoch, "key": field(r.key, shown), "value": field(r.value, shown),
            "headers": [{"key": k, "value": field(v, shown)} for k, v in r.headers]}


async def read_page(bootstrap: str, timeout_s: float, topic: str, partition: int, *, offset: int | None = None,
                    timestamp: int | None = None, limit: int = PAGE_RECORDS, max_bytes: int = PAGE_BYTES,
                    isolation_level: str = "read_committed", client_config: Mapping[str, Any] | None = None
                    ) -> dict:
    """Up to ``limit`` records of ``topic``-``partition`` from ``offset`` (or the first record at or after
    ``timestamp``, ms; neither: the log start), about ``max_bytes`` of record data at most. An offset
    outside the partition's records starts at the nearest end (said by ``moved``). The answer carries the
    offsets a page needs to go on: ``log_start_offset``, ``end_offset`` (high watermark, or last stable
    offset with read_committed), ``next_offset`` (after the last record read) and ``previous_offset``
    (``limit`` offsets back, not below the log start)."""
    if not 1 <= limit <= MAX_RECORDS:
        raise ValueError(f"limit must be 1 to {MAX_RECORDS}")
    if not 1 <= max_bytes <= MAX_BYTES:
        raise ValueError(f"max_bytes must be 1 to {MAX_BYTES}")
    if isolation_level not in ISOLATION_LEVELS:
        raise ValueError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}")
    ms = max(1, int(timeout_s * 1000))
    config = {**clients.settings(bootstrap, timeout_s, client_config, "consumer"), "client.id": "tierlog-console",
              "default.api.timeout.ms": ms, "request.timeout.ms": max(30000, ms), "enable.auto.commit": False,
              "isolation.level": isolation_level, "max.poll.records": limit, "fetch.max.bytes": max_bytes,
              "max.partition.fetch.bytes": max_bytes, "fetch.max.wait.ms": 100, "auto.offset.reset": "none",
              "allow.auto.create.topics": False}  # browsing a name that does not exist must not create it
    tp = TopicPartition(topic, partition)
    async with Consumer(config) as consumer:
        if partition not in await consumer.partitions_for_topic(topic):
            raise errors.UnknownTopicOrPartitionError(f"Topic {topic} has no partition {partition}")
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        found_at = None
        if timestamp is not None:
            found = (await consumer.offsets_for_times({tp: timestamp}))[tp]
            start = end if found is None else found.offset
            found_at = None if found is None else found.timestamp
        else:
            start = first if offset is None else offset
        wanted = start
        start = min(max(start, first), end)
        records: list[ConsumerRecord] = []
        read_bytes = 0
        if start < end:
            consumer.assign([tp])
            consumer.seek(tp, start)
            deadline = time.monotonic() + timeout_s
            # poll until the page is full, the byte budget is spent, or the partition's end is reached
            while len(records) < limit and read_bytes < max_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                got = (await consumer.poll(timeout_ms=min(left, 1.0) * 1000, max_records=limit - len(records))
                       ).get(tp, [])
                records += got
                read_bytes += sum(max(0, r.serialized_key_size) + max(0, r.serialized_value_size) for r in got)
                if await consumer.position(tp) >= end:
                    break
            next_offset = await consumer.position(tp)
        else:
            next_offset = start
    return {"topic": topic, "partition": partition, "isolation_level": isolation_level,
            "log_start_offset": first, "end_offset": end, "start_offset": start,
            "moved": start != wanted if timestamp is None and offset is not None else False,
            "timestamp": timestamp, "found_timestamp": found_at,
            "next_offset": next_offset, "previous_offset": max(first, start - limit),
            "limit": limit, "max_bytes": max_bytes, "read_bytes": read_bytes,
            "records": [record(r) for r in records]}
