"""The share coordinator's RPCs (KIP-932), which a share-partition's leader sends to the leader of the
``__share_group_state`` partition holding its state: InitializeShareGroupState v0, ReadShareGroupState v0,
WriteShareGroupState v0-1, DeleteShareGroupState v0 and ReadShareGroupStateSummary v0-1, the versions Kafka 4.4
serves.

As Kafka 4.4's ``ShareCoordinatorService``: Read and Write answer an empty response to a request without topics,
with a topic without partitions or without a group id, then COORDINATOR_NOT_AVAILABLE ("Share coordinator is not
available.") for every partition while the coordinator is not active; Initialize, Delete and ReadSummary check
the coordinator first, then the group id, the topics and partitions. Each share-partition is then answered by
:class:`~tierlog.coordinator.share.share_coordinator.ShareCoordinator` (NOT_COORDINATOR when its state partition is
led elsewhere). Kafka authorizes them as CLUSTER_ACTION (inter-broker), as tierlog does.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.coordinator.share.records import StateBatch
from tierlog.coordinator.share.share_coordinator import ShareCoordinator
from tierlog.protocol import ApiKey, RequestContext, build_response

NOT_AVAILABLE = "Share coordinator is not available."


class ShareStateApis:
    """``active()``: whether the share coordinator serves (the broker is ready)."""

    def __init__(self, coordinator: ShareCoordinator, active: Callable[[], bool], authorizer=None):
        self.coordinator = coordinator
        self.active = active
        self.authorizer = authorizer

    def register(self, registry) -> None:
        registry.register(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0, self.initialize)
        registry.register(ApiKey.READ_SHARE_GROUP_STATE, 0, 0, self.read)
        registry.register(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1, self.write)
        registry.register(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0, self.delete)
        registry.register(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1, self.summary)

    def _refusal(self, ctx: RequestContext, check_active_first: bool) -> tuple[int, str] | str | None:
        """"empty" for Kafka's empty answer, (code, message) for every partition, None to go on."""
        req = ctx.request
        empty = not req.topics or any(not t.partitions for t in req.topics) or not req.group_id
        if self.authorizer is not None and not self.authorizer.authorize(
                ctx.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed, None
        if check_active_first and not self.active():
            return ErrorCode.coordinator_not_available, NOT_AVAILABLE
        if empty:
            return "empty"
        if not self.active():
            return ErrorCode.coordinator_not_available, NOT_AVAILABLE
        return None

    def _answer(self, ctx: RequestContext, check_active_first: bool, each) -> object:
        refused = self._refusal(ctx, check_active_first)
        if refused == "empty":
            return build_response(ctx, {"results": []})
        results = []
        for t in ctx.request.topics:
            parts = []
            for p in t.partitions:
                if refused is not None:
                    parts.append({"partition": p.partition, "error_code": refused[0], "error_message": refused[1]})
                else:
                    parts.append(each(t.topic_id, p))
            # an error answer leaves the data fields at the schema's defaults, as Kafka's error results
            results.append({"topic_id": t.topic_id, "partitions": parts})
        return build_response(ctx, {"results": results})

    async def read(self, ctx: RequestContext):
        group = ctx.request.group_id
        return self._answer(ctx, False, lambda tid, p: self.coordinator.read(group, tid, p.partition, p.leader_epoch))

    async def write(self, ctx: RequestContext):
        group = ctx.request.group_id
        return self._answer(ctx, False, lambda tid, p: self.coordinator.write(
            group, tid, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
            [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches],
            getattr(p, "delivery_complete_count", -1)))

    async def initialize(self, ctx: RequestContext):
        group = ctx.request.group_id
        return self._answer(ctx, True, lambda tid, p: self.coordinator.initialize(
            group, tid, p.partition, p.state_epoch, p.start_offset))

    async def delete(self, ctx: RequestContext):
        group = ctx.request.group_id
        return self._answer(ctx, True, lambda tid, p: self.coordinator.delete(group, tid, p.partition))

    async def summary(self, ctx: RequestContext):
        group = ctx.request.group_id
        return self._answer(ctx, True, lambda tid, p: self.coordinator.summary(group, tid, p.partition))

