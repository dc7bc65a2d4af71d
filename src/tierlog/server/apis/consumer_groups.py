"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat (v0-1) and ConsumerGroupDescribe (v0-1).

Served, and so advertised by ApiVersions, when ``group.coordinator.rebalance.protocols`` names ``consumer``
(the default, as Kafka 4.x; :meth:`~tierlog.coordinator.config.CoordinatorConfig.consumer_protocol_enabled`);
answered UNSUPPORTED_VERSION while the finalized ``group.version`` is below 1 (``kafka-features downgrade``),
as Kafka's ``isConsumerGroupProtocolEnabled``. The handlers translate kio messages for
:class:`~tierlog.coordinator.GroupCoordinator`, which does the work.

Authorization as Kafka's ``KafkaApis``: ConsumerGroupHeartbeat needs READ on the group (and, when subscribing
by names, DESCRIBE on each topic named: TOPIC_AUTHORIZATION_FAILED otherwise); ConsumerGroupDescribe needs
DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for the others).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.cluster.features import GROUP_VERSION
from tierlog.coordinator import GroupCoordinator
from tierlog.coordinator.consumer_group_manager import TopicInfo
from tierlog.errors import (
    NO_ERROR,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from tierlog.protocol import ApiKey, RequestContext, RequestTiming, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.apis.groups import _COMMIT_ERRORS, GROUP_AUTHORIZED_OPERATIONS, _client_host

__all__ = ["ConsumerGroupApis", "topics_of"]

#: ConsumerGroupDescribe's authorized_operations when not asked for (Kafka's INT32_MIN sentinel).
_OPERATIONS_OMITTED = -(2**31)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def topics_of(controller: Controller) -> dict[str, TopicInfo]:
    """The cluster's topics as the group coordinator sees them: id, partition count, the racks of each
    partition's replicas (in the metadata hash, so a rack change bumps a group's epoch, as Kafka's KIP-1101)."""
    image = controller.image
    brokers = image.brokers
    out = {}
    for name, topic in image.topics.items():
        racks = {}
        for p, state in topic.partitions.items():
            rs = frozenset(b.rack for b in (brokers.get(r) for r in state.replicas) if b is not None and b.rack)
            if rs:
                racks[p] = rs
        out[name] = TopicInfo(name, topic.topic_id, len(topic.partitions), racks, topic.is_internal)
    return out


class ConsumerGroupApis:
    def __init__(self, coordinator: GroupCoordinator, controller: Controller,
                 replicated: Callable[[int, float, RequestTiming | None], Awaitable[int]] | None = None, *,
                 authorization: ApiAuthorization = ALLOW_ALL):
        """``replicated``: in a cluster, waits until what was appended to a ``__consumer_offsets`` partition
        reached its in-sync replicas (as GroupApis' commits), so a heartbeat is answered once a new
        coordinator would find the same epochs and assignment."""
        self.coordinator = coordinator
        self.controller = controller
        self.replicated = replicated
        self.authorization = authorization
        if coordinator.topics is None:
            coordinator.topics = lambda: topics_of(controller)

    def register(self, registry) -> None:
        if not self.coordinator.config.consumer_protocol_enabled():
            return
        registry.register(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, self.consumer_group_heartbeat)
        registry.register(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, self.consumer_group_describe)

    def _ready(self) -> GroupCoordinator:
        self.coordinator.ensure_loaded()
        return self.coordinator

    def _enabled(self) -> bool:
        """Kafka's ``isConsumerGroupProtocolEnabled``: the handlers are registered by
        ``group.coordinator.rebalance.protocols``, and the finalized ``group.version`` must be at least 1."""
        return self.controller.finalized_level(GROUP_VERSION) >= 1

    async def consumer_group_heartbeat(self, ctx: RequestContext):
        req = ctx.request
        if not self._enabled():
            return build_response(ctx, {"error_code": UnsupportedVersionError.code, "member_epoch": 0,
                                        "error_message": "The new consumer group protocol is not enabled "
                                                         "(group.version < 1)."})
        if not self.authorization.allowed(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            return build_response(ctx, {"error_code": GroupAuthorizationFailedError.code,
                                        "member_epoch": req.member_epoch})
        names = req.subscribed_topic_names
        if names:
            denied = [t for t in names if not self.authorization.allowed(ctx, AclOperation.DESCRIBE,
                                                                          ResourceType.TOPIC, t)]
            if denied:
                return build_response(ctx, {
                    "error_code": TopicAuthorizationFailedError.code, "member_epoch": req.member_epoch,
                    "error_message": f"Topic authorization failed for topics {sorted(denied)}"})
        owned = None
        if req.topic_partitions is not None:
            owned = [(tp.topic_id, tp.partitions) for tp in req.topic_partitions]
        answer = self._ready().consumer_group_heartbeat(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
            subscribed_topic_names=names, subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor, owned=owned, client_id=ctx.client_id or "",
            client_host=_client_host(ctx), api_version=ctx.api_version)
        if self.replicated is not None and answer["error_code"] == NO_ERROR:
            code = await self.replicated(self.coordinator.partition_for(req.group_id),
                                         self.controller.effective_config["offsets.commit.timeout.ms"] / 1000,
                                         ctx.timing)
            if code:
                code = _COMMIT_ERRORS.get(code, code)
                return build_response(ctx, {"error_code": code, "member_epoch": 0})
        assignment = answer["assignment"]
        return build_response(ctx, {
            "error_code": answer["error_code"], "error_message": answer.get("error_message"),
            "member_id": answer["member_id"], "member_epoch": answer["member_epoch"],
            "heartbeat_interval": answer["heartbeat_interval_ms"],
            "assignment": None if assignment is None else {
                "topic_partitions": [{"topic_id": t, "partitions": list(ps)} for t, ps in assignment]}})

    async def consumer_group_describe(self, ctx: RequestContext):
        req = ctx.request
        if not self._enabled():
            return build_response(ctx, {"groups": [{"group_id": g, "error_code": UnsupportedVersionError.code,
                                                    "authorized_operations": _OPERATIONS_OMITTED}
                                                   for g in req.group_ids]})
        allowed = [g for g in req.group_ids
                   if self.authorization.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        groups: list[dict[str, Any]] = self._ready().consumer_group_describe(allowed)
        for g in groups:
            g["authorized_operations"] = _OPERATIONS_OMITTED
            if req.include_authorized_operations and g["error_code"] == NO_ERROR:
                g["authorized_operations"] = self.authorization.operations(
                    ctx, ResourceType.GROUP, g["group_id"], GROUP_AUTHORIZED_OPERATIONS)
        refused = [{"group_id": g, "error_code": GroupAuthorizationFailedError.code,
                    "authorized_operations": _OPERATIONS_OMITTED}
                   for g in req.group_ids if g not in set(allowed)]
        return build_response(ctx, {"groups": groups + refused})
