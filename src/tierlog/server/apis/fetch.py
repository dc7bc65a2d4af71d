"""Fetch, by topic name (v4-v12) and by topic id (v13+), with long polling.

The broker answers as soon as ``min_bytes`` are available or ``max_wait_ms`` has passed, waking on
appends to any partition in the request. Incremental fetch sessions are not kept: every answer
carries session id 0, which tells clients to send full fetch requests (all clients accept that).
"""

from __future__ import annotations

import asyncio
import logging
import time

from tierlog.errors import KafkaError, OffsetMovedToTieredStorageError, OffsetOutOfRangeError, UnknownServerError
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.records import iter_batches
from tierlog.storage.segment import FileRegion

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_ID = 100
UNKNOWN_TOPIC_OR_PARTITION = 3


class FetchApis:
    def __init__(self, broker):
        self.broker = broker

    def register(self, registry) -> None:
        registry.register(ApiKey.FETCH, 4, 17, self.fetch)

    async def fetch(self, ctx: RequestContext):
        req = ctx.request
        rm = self.broker.replica_manager
        by_id = ctx.api_version >= 13
        isolation = "committed" if getattr(req, "isolation_level", 0) == 1 else "high_watermark"
        replica_id = _replica_id(req)
        if replica_id >= 0:
            isolation = "log_end"  # a follower (next milestone) reads up to the log end
        max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF)
        if replica_id < 0:  # a consumer's request is capped by the broker's fetch.max.bytes, as in Kafka
            max_bytes = min(max_bytes, self.broker.controller.effective_config["fetch.max.bytes"])
        wanted = []  # (topic response key, topic name or None, partition request)
        for t in req.topics:
            if by_id:
                name = rm.topic_name(t.topic_id)
                key = t.topic_id
            else:
                name = t.topic
                key = t.topic
            for p in t.partitions:
                wanted.append((key, name, p))
        deadline = time.monotonic() + max(req.max_wait.total_seconds(), 0)
        # A fetch naming no partition (a closing session) returns at once; min_bytes never above max_bytes.
        min_bytes = min(req.min_bytes, max_bytes) if wanted else 0
        consumer = replica_id < 0
        while True:
            results, total, errors, remote = self._read(wanted, max_bytes, isolation, by_id, consumer)
            if remote:
                # Remote reads answer at once, with what they got within remote.fetch.max.wait.ms.
                await self._read_remote(remote, max_bytes - total, total == 0, isolation)
                break
            remaining = deadline - time.monotonic()
            if total >= min_bytes or errors or remaining <= 0:
                break
            await rm.wait_for_data([(name, p.partition) for _, name, p in wanted if name], remaining)
        topics = []
        index = {}
        for key, part in results:
            if key not in index:
                index[key] = len(topics)
                topics.append({"topic_id" if by_id else "topic": key, "partitions": []})
            topics[index[key]]["partitions"].append(part)
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                    "responses": topics})

    async def _read_remote(self, remote: list, budget: int, min_one: bool, isolation: str) -> None:
        """Read every partition below its local log start from the remote tier, concurrently, each up to
        its partition limit and the bytes the local reads left; then keep, in request order, the whole
        batches that fit what is left of ``max_bytes`` (the first partition with data may exceed it by
        one batch when the response holds nothing else: Kafka's min-one-message rule). Reads still
        running after ``remote.fetch.max.wait.ms`` answer empty without error and keep running, so the
        next fetch finds their bytes in the read-ahead window; so does what the budget cut off."""
        rlm = self.broker.remote_log_manager
        reader = rlm.reader
        wait_s = self.broker.controller.effective_config["remote.fetch.max.wait.ms"] / 1000
        reads: list = []  # per partition: its answer at once, or a task reading it
        for partition, _part, fetch_offset, partition_max in remote:
            args = (partition, fetch_offset, max(0, min(partition_max, budget)), min_one, isolation)
            reads.append(reader.read_now(*args) or asyncio.ensure_future(reader.read_result(*args)))
        tasks = [r for r in reads if isinstance(r, asyncio.Future)]
        done = (await asyncio.wait(tasks, timeout=wait_s))[0] if tasks else set()
        for (partition, part, _, _), read in zip(remote, reads):
            if isinstance(read, asyncio.Future):
                if read not in done:
                    read.add_done_callback(_ignore_result)
                    continue
                if read.exception() is not None:  # one partition's failure is that partition's error code
                    _remote_read_failed(partition, part, read.exception())
                    continue
                read = read.result()
            data = _whole_batches_within(read.records, budget, min_one)
            if read.aborted_transactions:
                part["aborted_transactions"] = [{"producer_id": pid, "first_offset": first}
                                                for pid, first in read.aborted_transactions]
            if data:
                part["records"] = data
                budget -= len(data)
                min_one = False

    def _read(self, wanted, max_bytes: int, isolation: str, by_id: bool, consumer: bool = True):
        rm = self.broker.replica_manager
        rlm = self.broker.remote_log_manager
        results = []
        total = 0
        errors = False
        min_one = True
        remote = []
        for key, name, p in wanted:
            part = {"partition_index": p.partition, "error_code": 0, "high_watermark": -1,
                    "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                    "preferred_read_replica": -1, "records": b""}
            try:
                if name is None:
                    part["error_code"] = UNKNOWN_TOPIC_ID if by_id and key != ZERO_UUID else UNKNOWN_TOPIC_OR_PARTITION
                    errors = True
                    results.append((key, part))
                    continue
                partition = rm.get_partition(name, p.partition)
                partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                lg = partition.log
                limit = min(p.partition_max_bytes, max_bytes - total)
                info = None
                if limit > 0 or min_one:
                    try:
                        info = lg.read(p.fetch_offset, max(limit, 0), isolation=isolation, min_one_message=min_one)
                    except OffsetMovedToTieredStorageError as e:
                        # Followers get 109 and rebuild from the remote tier themselves; consumers are
                        # served from it, never given 109 (the Java consumer treats it as fatal).
                        if not consumer:
                            raise
                        if rlm is None or rlm.reader is None or not lg.config.remote_storage_enable:
                            raise OffsetOutOfRangeError(f"{e} (remote storage is not in effect)") from None
                        if rlm.reader.fetch_quota.throttle_time_ms() > 0:
                            # Over the remote fetch quota (KIP-956): no data and no error, as Kafka
                            # answers; the request waits for its other partitions as usual.
                            rlm.metrics.fetch_throttled.inc(topic=name)
                        else:
                            remote.append((partition, part, p.fetch_offset, p.partition_max_bytes))
                # Offsets are reported only for a partition read without error (an error answer
                # carries -1 for all three, as Kafka's does).
                part["high_watermark"] = lg.high_watermark
                part["last_stable_offset"] = lg.last_stable_offset
                part["log_start_offset"] = lg.log_start_offset
                if isolation == "committed":
                    part["aborted_transactions"] = []
                if info is not None and info.size:
                    # A file region, not bytes: the socket server sends it with sendfile.
                    part["records"] = info.region
                    total += info.size
                    min_one = False
            except KafkaError as e:
                part["error_code"] = e.code
                errors = True
            results.append((key, part))
        return results, total, errors, remote


def _remote_read_failed(partition, part: dict, e: BaseException) -> None:
    for key in ("high_watermark", "last_stable_offset", "log_start_offset"):
        part[key] = -1
    if isinstance(e, KafkaError):
        part["error_code"] = e.code
    else:
        log.exception("Remote read of %s-%d failed", partition.topic, partition.index, exc_info=e)
        part["error_code"] = UnknownServerError.code


def _replica_id(req) -> int:
    """The fetching replica (-1 for consumers): a field of its own up to v14, in ReplicaState from v15."""
    state = getattr(req, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(req, "replica_id", -1)


def _whole_batches_within(data, budget: int, min_one: bool):
    """The leading whole batches of ``data`` (bytes, or a file region) that fit ``budget`` (at least
    one with ``min_one``)."""
    if len(data) <= budget:
        return data
    if isinstance(data, FileRegion):  # rare: concurrent remote reads took the budget meanwhile
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
