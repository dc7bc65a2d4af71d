"""ListOffsets and OffsetsForLeaderEpoch."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from tierlog.errors import (
    InvalidRequestError,
    KafkaError,
    RequestTimedOutError,
    UnknownServerError,
    UnsupportedVersionError,
)
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.storage import (
    EARLIEST_LOCAL_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

log = logging.getLogger(__name__)

# The ListOffsets version that introduced each special timestamp (KIP-734, KIP-405, KIP-1005).
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


class OffsetApis:
    def __init__(self, broker):
        self.broker = broker

    def register(self, registry) -> None:
        registry.register(ApiKey.LIST_OFFSETS, 1, 11, self.list_offsets)
        registry.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, self.offsets_for_leader_epoch)

    async def list_offsets(self, ctx: RequestContext):
        req = ctx.request
        rm = self.broker.replica_manager
        committed = getattr(req, "isolation_level", 0) == 1
        timeout = getattr(req, "timeout", None)  # ListOffsets v10+ (KIP-1075) carries its own
        timeout_ms = timeout.total_seconds() * 1000 if timeout is not None else 0
        if timeout_ms <= 0:
            timeout_ms = self.broker.controller.effective_config["remote.list.offsets.request.timeout.ms"]
        by_topic: dict[str, list] = {}  # a topic named twice is one entry of the answer, as in Kafka's
        remote = []
        # A partition asked for twice is answered once, with INVALID_REQUEST, as Kafka does (its
        # answers are keyed by partition).
        asked = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
        answered = set()
        for t in req.topics:
            parts = by_topic.setdefault(t.name, [])
            for p in t.partitions:
                out = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                       "leader_epoch": -1}
                if asked[t.name, p.partition_index] > 1:
                    if (t.name, p.partition_index) not in answered:
                        answered.add((t.name, p.partition_index))
                        out["error_code"] = InvalidRequestError.code
                        parts.append(out)
                    continue
                try:
                    partition = rm.get_partition(t.name, p.partition_index)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    if self._needs_remote(partition, p.timestamp):
                        remote.append((out, partition, p.timestamp))
                    else:
                        out.update(self._offset(partition.log, p.timestamp, committed, ctx.api_version))
                except KafkaError as e:
                    out["error_code"] = e.code
                parts.append(out)
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items() if parts]
        if remote:
            await self._remote_offsets(remote, committed, timeout_ms / 1000)
        return build_response(ctx, {"throttle_time_ms": 0, "topics": topics})

    def _needs_remote(self, partition, timestamp: int) -> bool:
        """A real timestamp on a tiered log with data below its local start searches remote segments;
        the special values (-1..-5) never touch remote metadata (so they work while it loads)."""
        rlm = self.broker.remote_log_manager
        lg = partition.log
        return (timestamp >= 0 and rlm is not None and rlm.reader is not None and lg.config.remote_storage_enable
                and lg.log_start_offset < lg.local_log_start_offset)

    async def _remote_offsets(self, remote: list, committed: bool, timeout_s: float) -> None:
        """Timestamp lookups over remote data, concurrently; REQUEST_TIMED_OUT for those that do not finish
        in time (Kafka's DelayedRemoteListOffsets)."""
        reader = self.broker.remote_log_manager.reader
        tasks = [asyncio.ensure_future(reader.find_offset_by_timestamp(partition, ts)) for _, partition, ts in remote]
        done, _ = await asyncio.wait(tasks, timeout=timeout_s)
        for (out, partition, _), task in zip(remote, tasks):
            if task not in done:
                task.cancel()  # the segment search already running finishes in its thread, unused
                out["error_code"] = RequestTimedOutError.code
                continue
            try:
                found = task.result()
            except Exception as e:  # noqa: BLE001 - one partition's failure is that partition's error code
                if isinstance(e, KafkaError):
                    out["error_code"] = e.code
                else:
                    log.exception("Remote timestamp lookup of %s-%d failed", partition.topic, partition.index)
                    out["error_code"] = UnknownServerError.code
                continue
            lg = partition.log
            upper = lg.last_stable_offset if committed else lg.high_watermark
            if found is not None and found.offset < upper:
                out.update({"offset": found.offset, "timestamp": found.timestamp, "leader_epoch": found.leader_epoch})

    @staticmethod
    def _offset(lg, timestamp: int, committed: bool, version: int) -> dict:
        needed = _MIN_VERSION.get(timestamp)
        if needed is not None and version < needed:
            raise UnsupportedVersionError(f"ListOffsets timestamp {timestamp} needs version {needed} or later")
        upper = lg.last_stable_offset if committed else lg.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return {"offset": upper, "timestamp": -1, "leader_epoch": lg.leader_epoch_cache.latest_epoch()}
        found = lg.fetch_offset_by_timestamp(timestamp)
        if found is None or (timestamp >= 0 and found.offset >= upper):
            return {"offset": -1, "timestamp": -1, "leader_epoch": -1}
        return {"offset": found.offset, "timestamp": found.timestamp, "leader_epoch": found.leader_epoch}

    async def offsets_for_leader_epoch(self, ctx: RequestContext):
        req = ctx.request
        rm = self.broker.replica_manager
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                out = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                try:
                    partition = rm.get_partition(t.topic, p.partition)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    lg = partition.log
                    epoch, end = lg.leader_epoch_cache.end_offset_for(p.leader_epoch, lg.log_end_offset)
                    out.update({"leader_epoch": epoch, "end_offset": end})
                except KafkaError as e:
                    out["error_code"] = e.code
                parts.append(out)
            topics.append({"topic": t.topic, "partitions": parts})
        return build_response(ctx, {"throttle_time_ms": 0, "topics": topics})
