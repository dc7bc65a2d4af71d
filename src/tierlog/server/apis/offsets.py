"""ListOffsets and OffsetsForLeaderEpoch: the wire to replica-manager calls and back."""

from __future__ import annotations

from collections import Counter

from tierlog.cluster import Controller
from tierlog.errors import NO_ERROR, InvalidRequestError, KafkaError, UnsupportedVersionError
from tierlog.protocol import ApiKey, RequestContext, build_response, offload
from tierlog.protocol.offload import Pacer, paced
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.fetch_types import FetchIsolation, OffsetLookup, OffsetLookupResult
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    MAX_TIMESTAMP,
)

# The ListOffsets version that introduced each special timestamp (KIP-734, KIP-405, KIP-1005, KIP-1023).
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
                EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}
READ_COMMITTED = 1


#: ListOffsets' replica id of a debugging tool: any replica answers from its own log, not only the leader.
DEBUGGING_REPLICA_ID = -2


class OffsetApis:
    def __init__(self, replica_manager: ReplicaManager, controller: Controller, *,
                 authorization: ApiAuthorization = ALLOW_ALL):
        self.replica_manager = replica_manager
        self.controller = controller
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.LIST_OFFSETS, 1, 11, self.list_offsets)
        registry.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, self.offsets_for_leader_epoch)

    async def list_offsets(self, ctx: RequestContext):
        checked = self.authorization.list_offsets(ctx)
        ctx = checked.ctx
        req = ctx.request
        isolation = (FetchIsolation.TXN_COMMITTED if getattr(req, "isolation_level", 0) == READ_COMMITTED
                     else FetchIsolation.HIGH_WATERMARK)
        if req.replica_id >= 0:  # a follower (or a debugging tool): the latest offset is the log end, as in Kafka
            isolation = FetchIsolation.LOG_END
        timeout = getattr(req, "timeout", None)  # ListOffsets v10+ (KIP-1075) carries its own
        timeout_ms = timeout.total_seconds() * 1000 if timeout is not None else 0
        if timeout_ms <= 0:
            timeout_ms = self.controller.effective_config["remote.list.offsets.request.timeout.ms"]
        by_topic: dict[str, list] = {}  # a topic named twice is one entry of the answer, as in Kafka's
        # A partition asked for twice is answered once, with INVALID_REQUEST, as Kafka does (its answers
        # are keyed by partition). A request may name a million partitions: every loop over them yields
        # to the event loop every few ms, and a big answer is built and encoded off the loop.
        pacer = Pacer()
        asked: Counter = Counter()
        for t in req.topics:
            async for chunk in paced(t.partitions, 512, pacer):
                asked.update((t.name, p.partition_index) for p in chunk)
        answered = set()
        lookups: list[OffsetLookup] = []
        outs: list[dict] = []
        for t in req.topics:
            parts = by_topic.setdefault(t.name, [])
            async for chunk in paced(t.partitions, 256, pacer):
                for p in chunk:
                    out = {"partition_index": p.partition_index, "error_code": NO_ERROR, "timestamp": -1,
                           "offset": -1, "leader_epoch": -1}
                    if asked[t.name, p.partition_index] > 1:
                        if (t.name, p.partition_index) not in answered:
                            answered.add((t.name, p.partition_index))
                            out["error_code"] = InvalidRequestError.code
                            parts.append(out)
                        continue
                    needed = _MIN_VERSION.get(p.timestamp)
                    if needed is not None and ctx.api_version < needed:
                        out["error_code"] = self._version_error(t.name, p)
                    else:
                        lookups.append(OffsetLookup(t.name, p.partition_index, p.timestamp,
                                                    getattr(p, "current_leader_epoch", -1)))
                        outs.append(out)
                    parts.append(out)
        # Kafka's DEBUGGING_REPLICA_ID: a tool asking a follower what its log holds (a leader is away)
        only_from_leader = req.replica_id != DEBUGGING_REPLICA_ID
        results = await self.replica_manager.fetch_offsets(lookups, isolation, timeout_ms / 1000, only_from_leader)
        for start in range(0, len(outs), 512):
            for out, r in zip(outs[start:start + 512], results[start:start + 512]):
                _fill(out, r)
            await pacer()
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items() if parts]
        topics += checked.refused
        items = len(topics) + sum(len(t["partitions"]) for t in topics)
        offload.free_later(lookups, results, outs, asked, answered)
        return await offload.respond(ctx, {"throttle_time_ms": 0, "topics": topics}, items)

    def _version_error(self, topic: str, p) -> int:
        """A special timestamp this version does not know: the partition's own error comes first."""
        try:
            self.replica_manager.get_partition(topic, p.partition_index).check_leader_epoch(
                getattr(p, "current_leader_epoch", -1))
        except KafkaError as e:
            return e.code
        return UnsupportedVersionError.code

    async def offsets_for_leader_epoch(self, ctx: RequestContext):
        checked = self.authorization.offsets_for_leader_epoch(ctx)
        ctx = checked.ctx
        topics = []
        for t in ctx.request.topics:
            parts = []
            for p in t.partitions:
                out = {"partition": p.partition, "error_code": NO_ERROR, "leader_epoch": -1, "end_offset": -1}
                try:
                    epoch, end = self.replica_manager.last_offset_for_leader_epoch(
                        t.topic, p.partition, p.leader_epoch, getattr(p, "current_leader_epoch", -1))
                    out.update({"leader_epoch": epoch, "end_offset": end})
                except KafkaError as e:
                    out["error_code"] = e.code
                parts.append(out)
            topics.append({"topic": t.topic, "partitions": parts})
        return build_response(ctx, {"throttle_time_ms": 0, "topics": topics + checked.refused})


def _fill(out: dict, r: OffsetLookupResult) -> None:
    out.update(error_code=r.error_code, timestamp=r.timestamp, offset=r.offset, leader_epoch=r.leader_epoch)
