"""Reads of a fetch below the local log start offset, answered from the remote tier (Kafka's
``DelayedRemoteFetch`` with the remote parts of ``ReplicaManager.readFromLog``).

A fetch may hold several partitions whose offsets are in remote storage. The replica manager walks the
request in order and gives each such partition, at its place, what is left of the response's ``max_bytes``
(up to the partition's own limit) and the min-one-message right of the first partition with data, as it
would for a local read; those bytes are then reserved, so later partitions cannot take them. The remote
reads run concurrently, each within its reservation, as whole batches. Reads still running after
``remote.fetch.max.wait.ms`` answer empty without error and keep running, so the next fetch finds their
bytes in the read-ahead window.

A sequential reader whose bytes are already in memory (or in a file of the filesystem backend) is
answered on the spot, without a task (``RemoteLogReader.read_now``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.errors import KafkaError, UnknownServerError
from tierlog.server.fetch_types import FetchIsolation, FetchPartitionData
from tierlog.server.partition import Partition
from tierlog.storage import FileRegion
from tierlog.tiered.remote_reader import RemoteLogReader

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RemoteRead:
    """One partition of a fetch to be read from the remote tier within ``max_bytes`` (its reservation),
    and the answer being filled in."""

    partition: Partition
    fetch_offset: int
    max_bytes: int
    min_one: bool
    result: FetchPartitionData


async def read_remote(reader: RemoteLogReader, reads: list[RemoteRead], isolation: FetchIsolation, wait_s: float,
                      read_local: Callable[[Partition, int, int, bool], bytes | FileRegion]) -> None:
    """Fill ``reads`` from the remote tier (see the module doc). ``read_local`` reads the local log of a
    partition whose remote segments end before its local log start (a gap, as compaction leaves)."""
    pending: list = []  # per read: its answer at once, or a task reading it
    for r in reads:
        args = (r.partition, r.fetch_offset, r.max_bytes, r.min_one, isolation.value)
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
        # Past the last remote segment the data continues in the local log.
        records = got.records if got.local_offset is None else \
            read_local(r.partition, got.local_offset, r.max_bytes, r.min_one)
        if len(records):
            r.result.records = records


def _failed(r: RemoteRead, e: BaseException) -> None:
    res = r.result
    res.high_watermark = res.last_stable_offset = res.log_start_offset = -1
    if isinstance(e, KafkaError):
        res.error_code = e.code
    else:
        log.error("Remote read of %s failed", r.partition, exc_info=e)
        res.error_code = UnknownServerError.code


def _ignore_result(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning
