"""Reads of a fetch below the local log start offset, answered from the remote tier (Kafka's
``DelayedRemoteFetch`` with the remote parts of ``ReplicaManager.readFromLog``).

A fetch may hold several partitions whose offsets are in remote storage. The local reads of the fetch go
first; then the remote reads run concurrently, each up to its partition limit within what the local reads
left of the response's ``max_bytes``; finally, in request order, each keeps the whole batches that fit
what is still left (the first partition with data may exceed it by one batch when the response holds
nothing else: Kafka's min-one-message rule). So the response never exceeds ``max_bytes`` (Kafka's may, by
its remote partition). Reads still running after ``remote.fetch.max.wait.ms`` answer empty without error
and keep running, so the next fetch finds their bytes in the read-ahead window; so does what the budget
cut off.

A sequential reader whose bytes are already in memory (or in a file of the filesystem backend) is
answered on the spot, without a task (``RemoteLogReader.read_now``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.errors import KafkaError, UnknownServerError
from tierlog.records import iter_batches
from tierlog.server.fetch_types import FetchIsolation, FetchPartitionData
from tierlog.server.partition import Partition
from tierlog.storage import FetchDataInfo, FileRegion
from tierlog.tiered.remote_reader import RemoteLogReader

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RemoteRead:
    """One partition of a fetch to be read from the remote tier, and the answer being filled in."""

    partition: Partition
    fetch_offset: int
    max_bytes: int  # the partition's limit
    result: FetchPartitionData


async def read_remote(reader: RemoteLogReader, reads: list[RemoteRead], budget: int, min_one: bool,
                      isolation: FetchIsolation, wait_s: float,
                      read_local: Callable[[Partition, int, int, bool], FetchDataInfo]) -> None:
    """Fill ``reads`` from the remote tier within ``budget`` bytes, the part of ``max_bytes`` the local reads
    left, ``min_one`` when they read nothing (see the module doc). ``read_local`` reads the local log of a
    partition whose remote segments end before its local log start (a gap, as compaction leaves)."""
    pending: list = []  # per read: its answer at once, or a task reading it
    for r in reads:
        args = (r.partition, r.fetch_offset, max(0, min(r.max_bytes, budget)), min_one, isolation.value)
        pending.append(reader.read_now(*args) or asyncio.ensure_future(reader.read_result(*args)))
    tasks = [p for p in pending if isinstance(p, asyncio.Future)]
    done = (await asyncio.wait(tasks, timeout=wait_s))[0] if tasks else set()
    for r, got in zip(reads, pending):
        if isinstance(got, asyncio.Future):
            if got not in done:
                got.add_done_callback(_ignore_result)
                continue
            if got.exception() is not None:  # one partition's failure is that partition's error code
                _failed(r, got.exception())
                continue
            got = got.result()
        if got.aborted_transactions:
            r.result.aborted_transactions = got.aborted_transactions
        if got.local_offset is not None:  # past the last remote segment the data continues locally
            info = read_local(r.partition, got.local_offset, max(0, min(r.max_bytes, budget)), min_one)
            records = info.region if info.size else b""
            if info.aborted_transactions:
                r.result.aborted_transactions = info.aborted_transactions
        else:
            records = whole_batches_within(got.records, budget, min_one)
        if len(records):
            r.result.records = records
            budget -= len(records)
            min_one = False


def _failed(r: RemoteRead, e: BaseException) -> None:
    res = r.result
    res.high_watermark = res.last_stable_offset = res.log_start_offset = -1
    if isinstance(e, KafkaError):
        res.error_code = e.code
    else:
        log.error("Remote read of %s failed", r.partition, exc_info=e)
        res.error_code = UnknownServerError.code


def whole_batches_within(data, budget: int, min_one: bool):
    """The leading whole batches of ``data`` (bytes, or a file region) that fit ``budget`` (at least one with
    ``min_one``)."""
    if len(data) <= budget:
        return data
    if isinstance(data, FileRegion):  # rare: earlier partitions of the fetch took the budget meanwhile
        data = data.read()
    end = 0
    for pos, h in iter_batches(data):
        if pos + h.size > budget and not (min_one and pos == 0):
            break
        end = pos + h.size
    return data[:end]


def _ignore_result(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning
