"""What each API asks of the authorizer, and the answers it gives when refused (Kafka's KafkaApis checks).

Installed only with an authorizer (``authorizer.class.name``): it wraps the registered handlers, so a broker
without one runs them untouched. A check refuses either the whole request (the API's error in every place
Kafka puts it) or some of its items: those are taken out of the request the handler sees and answered with
the authorization error, after the handler's answers, as Kafka's ``filterByAuthorized`` does. Produce, Fetch
and Metadata check inside their handlers (hot paths, and Metadata hides topics rather than refusing them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tierlog.cluster.acls import AclOperation as Op
from tierlog.cluster.acls import ResourceType as Rt
from tierlog.cluster.acls import operations_bitfield
from tierlog.errors import (
    NO_ERROR,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response, offload, parse_response
from tierlog.protocol.registry import Handler, HandlerRegistry
from tierlog.server.authorizer import Authorizer
from tierlog.server.errors import error_response

TOPIC_DENIED = TopicAuthorizationFailedError.code
GROUP_DENIED = GroupAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code
TXN_DENIED = TransactionalIdAuthorizationFailedError.code
AUTHORIZATION_FAILED = "Authorization failed."
OPERATIONS_OMITTED = -2147483648  # an authorized-operations field not asked for

# Config resource types of DescribeConfigs / AlterConfigs
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32


def with_request(ctx: RequestContext, request) -> RequestContext:
    out = RequestContext(ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.header, request, ctx.frame_size)
    out.session, out.sasl, out.timing = ctx.session, ctx.sasl, ctx.timing
    return out


def _decoded(ctx: RequestContext, response):
    if isinstance(response, offload.EncodedResponse):  # a big answer, already bytes: read it back to add to it
        return parse_response(bytes(response.frame[4:]), ctx.response_type)[1]
    return response


class AuthorizingApis:
    def __init__(self, authorizer: Authorizer, topic_name_of_id: Callable[[object], str | None]):
        self.authorizer = authorizer
        self.topic_name_of_id = topic_name_of_id

    def register(self, registry: HandlerRegistry) -> None:
        checks = {
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._alter_configs,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.JOIN_GROUP: self._group(Op.READ),
            ApiKey.SYNC_GROUP: self._group(Op.READ),
            ApiKey.HEARTBEAT: self._group(Op.READ),
            ApiKey.LEAVE_GROUP: self._group(Op.READ),
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.END_TXN: self._txn_write,
            ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets_to_txn,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.WRITE_TXN_MARKERS: self._cluster_action,
            ApiKey.ENVELOPE: self._cluster_action,
            ApiKey.ELECT_LEADERS: self._cluster(Op.ALTER),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._cluster(Op.ALTER),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._cluster(Op.DESCRIBE),
            ApiKey.DESCRIBE_LOG_DIRS: self._cluster(Op.DESCRIBE),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self._cluster(Op.DESCRIBE_CONFIGS),
            ApiKey.ALTER_CLIENT_QUOTAS: self._cluster(Op.ALTER_CONFIGS),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._cluster(Op.DESCRIBE),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._cluster(Op.ALTER),
            ApiKey.DESCRIBE_PRODUCERS: self._describe_producers,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self._list_transactions,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.ALTER_PARTITION: self._cluster_action,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offsets_for_leader_epoch,
            ApiKey.METADATA: self._metadata_operations,
        }
        for key, check in checks.items():
            if key in registry:
                registry.wrap(key, lambda handler, check=check: self._wrapped(handler, check))

    @staticmethod
    def _wrapped(handler: Handler, check) -> Handler:
        async def handle(ctx: RequestContext):
            return await check(ctx, handler)
        return handle

    def _allowed(self, ctx: RequestContext, op: Op, rt: Rt, name: str | None = None) -> bool:
        if name is None:
            return self.authorizer.authorize(ctx.session, op, rt)
        return self.authorizer.authorize(ctx.session, op, rt, name)

    # ------------------------------------------------------------------ filtering items

    async def _filtered(self, ctx: RequestContext, handler: Handler, items_field: str, allowed,
                        results_field: str, denied_result: Callable[[object], dict]):
        """Run ``handler`` on the items ``allowed(item)`` keeps; answer the others with ``denied_result``."""
        items = getattr(ctx.request, items_field) or ()
        keep = [i for i in items if allowed(i)]
        if len(keep) == len(items):
            return await handler(ctx)
        denied = [denied_result(i) for i in items if not allowed(i)]
        request = dataclasses.replace(ctx.request, **{items_field: tuple(keep)})
        response = _decoded(ctx, await handler(with_request(ctx, request)))
        extra = getattr(build_response(ctx, {results_field: denied}), results_field)
        return dataclasses.replace(response, **{results_field: tuple(getattr(response, results_field)) + extra})

    # ------------------------------------------------------------------ topics

    async def _create_topics(self, ctx, handler):
        cluster = self._allowed(ctx, Op.CREATE, Rt.CLUSTER)
        return await self._filtered(
            ctx, handler, "topics", lambda t: cluster or self._allowed(ctx, Op.CREATE, Rt.TOPIC, t.name), "topics",
            lambda t: {"name": t.name, "error_code": TOPIC_DENIED, "error_message": AUTHORIZATION_FAILED,
                       "num_partitions": -1, "replication_factor": -1, "topic_config_error_code": TOPIC_DENIED})

    def _topic_name(self, t) -> str | None:
        name = getattr(t, "name", None)
        if name is None:
            topic_id = getattr(t, "topic_id", None)
            if topic_id not in (None, ZERO_UUID):
                name = self.topic_name_of_id(topic_id)
        return name

    async def _delete_topics(self, ctx, handler):
        if ctx.api_version < 6:
            names = ctx.request.topic_names or ()
            keep = [n for n in names if self._allowed(ctx, Op.DELETE, Rt.TOPIC, n)]
            if len(keep) == len(names):
                return await handler(ctx)
            response = _decoded(ctx, await handler(with_request(
                ctx, dataclasses.replace(ctx.request, topic_names=tuple(keep)))))
            extra = build_response(ctx, {"responses": [{"name": n, "error_code": TOPIC_DENIED}
                                                       for n in names if n not in keep]}).responses
            return dataclasses.replace(response, responses=tuple(response.responses) + extra)

        def allowed(t) -> bool:
            name = self._topic_name(t)
            return name is None or self._allowed(ctx, Op.DELETE, Rt.TOPIC, name)  # unknown ids: the handler's
        return await self._filtered(ctx, handler, "topics", allowed, "responses",
                                    lambda t: {"name": t.name, "topic_id": t.topic_id, "error_code": TOPIC_DENIED,
                                               "error_message": AUTHORIZATION_FAILED})

    async def _create_partitions(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "topics", lambda t: self._allowed(ctx, Op.ALTER, Rt.TOPIC, t.name), "results",
            lambda t: {"name": t.name, "error_code": TOPIC_DENIED, "error_message": AUTHORIZATION_FAILED})

    async def _delete_records(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "topics", lambda t: self._allowed(ctx, Op.DELETE, Rt.TOPIC, t.name), "topics",
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index, "low_watermark": -1,
                                                       "error_code": TOPIC_DENIED} for p in t.partitions]})

    async def _list_offsets(self, ctx, handler):
        if getattr(ctx.request, "replica_id", -1) >= 0 and not self._allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
            allowed = lambda t: False  # noqa: E731 - a follower's request without CLUSTER_ACTION
        else:
            allowed = lambda t: self._allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t.name)  # noqa: E731
        return await self._filtered(
            ctx, handler, "topics", allowed, "topics",
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                       "error_code": TOPIC_DENIED, "timestamp": -1, "offset": -1,
                                                       "leader_epoch": -1} for p in t.partitions]})

    async def _offsets_for_leader_epoch(self, ctx, handler):
        """A follower (replica_id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on each topic; either way Kafka
        answers a refused partition TOPIC_AUTHORIZATION_FAILED."""
        if getattr(ctx.request, "replica_id", -1) >= 0:
            if self._allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
                return await handler(ctx)
            allowed = lambda t: False  # noqa: E731
        else:
            allowed = lambda t: self._allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t.topic)  # noqa: E731
        return await self._filtered(
            ctx, handler, "topics", allowed, "topics",
            lambda t: {"topic": t.topic, "partitions": [{"error_code": TOPIC_DENIED, "partition": p.partition,
                                                         "leader_epoch": -1, "end_offset": -1}
                                                        for p in t.partitions]})

    async def _describe_producers(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "topics", lambda t: self._allowed(ctx, Op.READ, Rt.TOPIC, t.name), "topics",
            lambda t: {"name": t.name, "partitions": [{"partition_index": p, "error_code": TOPIC_DENIED,
                                                       "active_producers": []} for p in t.partition_indexes]})

    # ------------------------------------------------------------------ configs

    def _config_allowed(self, ctx, op: Op, r) -> bool:
        if r.resource_type == CONFIG_TOPIC:
            return self._allowed(ctx, op, Rt.TOPIC, r.resource_name)
        if r.resource_type == CONFIG_GROUP:
            return self._allowed(ctx, op, Rt.GROUP, r.resource_name)
        if r.resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
            return self._allowed(ctx, op, Rt.CLUSTER)
        return True  # the handler answers what it does not know

    @staticmethod
    def _config_denied_code(r) -> int:
        return {CONFIG_TOPIC: TOPIC_DENIED, CONFIG_GROUP: GROUP_DENIED}.get(r.resource_type, CLUSTER_DENIED)

    async def _describe_configs(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "resources", lambda r: self._config_allowed(ctx, Op.DESCRIBE_CONFIGS, r), "results",
            lambda r: {"error_code": self._config_denied_code(r), "error_message": None,
                       "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []})

    async def _alter_configs(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "resources", lambda r: self._config_allowed(ctx, Op.ALTER_CONFIGS, r), "responses",
            lambda r: {"error_code": self._config_denied_code(r), "error_message": None,
                       "resource_type": r.resource_type, "resource_name": r.resource_name})

    # ------------------------------------------------------------------ groups

    def _group(self, op: Op):
        async def check(ctx, handler):
            if not self._allowed(ctx, op, Rt.GROUP, ctx.request.group_id):
                return error_response(ctx, GroupAuthorizationFailedError())
            return await handler(ctx)
        return check

    async def _offset_commit(self, ctx, handler):
        req = ctx.request
        if not self._allowed(ctx, Op.READ, Rt.GROUP, req.group_id):
            return build_response(ctx, {"topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": GROUP_DENIED}
                                                for p in t.partitions]} for t in req.topics]})
        return await self._filtered(
            ctx, handler, "topics", lambda t: self._allowed(ctx, Op.READ, Rt.TOPIC, t.name), "topics",
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                       "error_code": TOPIC_DENIED} for p in t.partitions]})

    async def _offset_fetch(self, ctx, handler):
        req = ctx.request
        if ctx.api_version >= 8:  # batched groups: a refused group answers GROUP_AUTHORIZATION_FAILED alone
            groups = req.groups
            keep = [g for g in groups if self._allowed(ctx, Op.DESCRIBE, Rt.GROUP, g.group_id)]
            if len(keep) == len(groups):
                response = await handler(ctx)
            else:
                response = _decoded(ctx, await handler(with_request(ctx, dataclasses.replace(
                    req, groups=tuple(keep))))) if keep else build_response(ctx, {"groups": []})
                extra = build_response(ctx, {"groups": [{"group_id": g.group_id, "error_code": GROUP_DENIED,
                                                         "topics": []} for g in groups if g not in keep]}).groups
                response = dataclasses.replace(response, groups=tuple(response.groups) + extra)
            return self._hide_offsets(ctx, response)
        if not self._allowed(ctx, Op.DESCRIBE, Rt.GROUP, req.group_id):
            return error_response(ctx, GroupAuthorizationFailedError()) or build_response(ctx, {"topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "committed_offset": -1,
                                                 "error_code": GROUP_DENIED} for p in t.partition_indexes]}
                for t in req.topics or ()]})
        return self._hide_offsets(ctx, await handler(ctx))

    def _hide_offsets(self, ctx, response):
        """Committed offsets of topics the principal may not DESCRIBE: dropped from an all-topics answer,
        TOPIC_AUTHORIZATION_FAILED where the request named them (Kafka's OffsetFetch)."""
        response = _decoded(ctx, response)

        def topics(ts):
            out = []
            for t in ts:
                if self._allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t.name):
                    out.append(t)
                else:
                    out.append(dataclasses.replace(t, partitions=tuple(
                        dataclasses.replace(p, committed_offset=-1, error_code=ErrorCode(TOPIC_DENIED))
                        for p in t.partitions)))
            return tuple(out)
        if hasattr(response, "groups"):
            return dataclasses.replace(response, groups=tuple(dataclasses.replace(g, topics=topics(g.topics))
                                                              for g in response.groups))
        return dataclasses.replace(response, topics=topics(response.topics))

    async def _offset_delete(self, ctx, handler):
        if not self._allowed(ctx, Op.DELETE, Rt.GROUP, ctx.request.group_id):
            return error_response(ctx, GroupAuthorizationFailedError())
        return await self._filtered(
            ctx, handler, "topics", lambda t: self._allowed(ctx, Op.READ, Rt.TOPIC, t.name), "topics",
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                       "error_code": TOPIC_DENIED} for p in t.partitions]})

    async def _describe_groups(self, ctx, handler):
        response = await self._filtered(
            ctx, handler, "groups", lambda g: self._allowed(ctx, Op.DESCRIBE, Rt.GROUP, g), "groups",
            lambda g: {"error_code": GROUP_DENIED, "group_id": g, "group_state": "", "protocol_type": "",
                       "protocol_data": "", "members": [], "authorized_operations": OPERATIONS_OMITTED})
        if not getattr(ctx.request, "include_authorized_operations", False):
            return response
        response = _decoded(ctx, response)
        return dataclasses.replace(response, groups=tuple(
            dataclasses.replace(g, authorized_operations=self._operations(ctx, Rt.GROUP, g.group_id))
            if g.error_code == 0 else g for g in response.groups))

    def _operations(self, ctx, rt: Rt, name: str | None = None) -> int:
        """Kafka's authorized-operations bit field of a resource, from the ACLs."""
        return operations_bitfield(rt, lambda op: self._allowed(ctx, op, rt, name))

    async def _describe_cluster(self, ctx, handler):
        response = await handler(ctx)
        if not ctx.request.include_cluster_authorized_operations:
            return response
        return dataclasses.replace(_decoded(ctx, response),
                                   cluster_authorized_operations=self._operations(ctx, Rt.CLUSTER))

    async def _metadata_operations(self, ctx, handler):
        """The handler checks the topics itself; the operation bit fields asked for (v8+) come from the ACLs."""
        response = await handler(ctx)
        req = ctx.request
        topics_ops = getattr(req, "include_topic_authorized_operations", False)
        cluster_ops = getattr(req, "include_cluster_authorized_operations", False)
        if not topics_ops and not cluster_ops:
            return response
        response = _decoded(ctx, response)
        if cluster_ops and hasattr(response, "cluster_authorized_operations"):
            response = dataclasses.replace(response, cluster_authorized_operations=self._operations(ctx, Rt.CLUSTER))
        if topics_ops:
            response = dataclasses.replace(response, topics=tuple(
                dataclasses.replace(t, topic_authorized_operations=self._operations(ctx, Rt.TOPIC, t.name))
                if t.error_code == 0 and t.name else t for t in response.topics))
        return response

    async def _delete_groups(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "groups_names", lambda g: self._allowed(ctx, Op.DELETE, Rt.GROUP, g), "results",
            lambda g: {"group_id": g, "error_code": GROUP_DENIED})

    async def _list_groups(self, ctx, handler):
        response = await handler(ctx)
        if self._allowed(ctx, Op.DESCRIBE, Rt.CLUSTER):
            return response
        response = _decoded(ctx, response)
        return dataclasses.replace(response, groups=tuple(
            g for g in response.groups if self._allowed(ctx, Op.DESCRIBE, Rt.GROUP, g.group_id)))

    async def _find_coordinator(self, ctx, handler):
        req = ctx.request
        key_type = getattr(req, "key_type", 0)
        rt, code = (Rt.TRANSACTIONAL_ID, TXN_DENIED) if key_type == 1 else (Rt.GROUP, GROUP_DENIED)
        if ctx.api_version >= 4:
            keys = req.coordinator_keys
            keep = [k for k in keys if self._allowed(ctx, Op.DESCRIBE, rt, k)]
            if len(keep) == len(keys):
                return await handler(ctx)
            response = _decoded(ctx, await handler(with_request(ctx, dataclasses.replace(
                req, coordinator_keys=tuple(keep))))) if keep else build_response(ctx, {"coordinators": []})
            extra = build_response(ctx, {"coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
                for k in keys if k not in keep]}).coordinators
            return dataclasses.replace(response, coordinators=tuple(response.coordinators) + extra)
        if not self._allowed(ctx, Op.DESCRIBE, rt, req.key):
            return build_response(ctx, {"error_code": code, "error_message": None, "node_id": -1, "host": "",
                                        "port": -1})
        return await handler(ctx)

    # ------------------------------------------------------------------ transactions and producers

    async def _init_producer_id(self, ctx, handler):
        txn = ctx.request.transactional_id
        if txn is not None:
            if not self._allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, txn):
                return error_response(ctx, TransactionalIdAuthorizationFailedError())
        elif not (self._allowed(ctx, Op.IDEMPOTENT_WRITE, Rt.CLUSTER)
                  or self.authorizer.authorize_any(ctx.session, Op.WRITE, Rt.TOPIC)):
            return error_response(ctx, ClusterAuthorizationFailedError())
        return await handler(ctx)

    async def _txn_write(self, ctx, handler):
        if not self._allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, ctx.request.transactional_id):
            return error_response(ctx, TransactionalIdAuthorizationFailedError())
        return await handler(ctx)

    async def _add_offsets_to_txn(self, ctx, handler):
        if not self._allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, ctx.request.transactional_id):
            return error_response(ctx, TransactionalIdAuthorizationFailedError())
        if not self._allowed(ctx, Op.READ, Rt.GROUP, ctx.request.group_id):
            return error_response(ctx, GroupAuthorizationFailedError())
        return await handler(ctx)

    async def _add_partitions_to_txn(self, ctx, handler):
        req = ctx.request
        if ctx.api_version >= 4:  # from brokers (verification) or batched clients: CLUSTER_ACTION for the batch
            if getattr(req, "transactions", None) and not self._allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
                return error_response(ctx, ClusterAuthorizationFailedError())
            return await handler(ctx)
        if not self._allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
            return build_response(ctx, {"results_by_topic_v3_and_below": [
                {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": TXN_DENIED}
                                                          for p in t.partitions]}
                for t in req.v3_and_below_topics]})
        denied = [t for t in req.v3_and_below_topics if not self._allowed(ctx, Op.WRITE, Rt.TOPIC, t.name)]
        if denied:  # Kafka: refused topics get TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED
            return build_response(ctx, {"results_by_topic_v3_and_below": [
                {"name": t.name, "results_by_partition": [
                    {"partition_index": p, "partition_error_code": TOPIC_DENIED if t in denied else 55}
                    for p in t.partitions]} for t in req.v3_and_below_topics]})
        return await handler(ctx)

    async def _txn_offset_commit(self, ctx, handler):
        req = ctx.request
        if not self._allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, req.transactional_id):
            code = TXN_DENIED
        elif not self._allowed(ctx, Op.READ, Rt.GROUP, req.group_id):
            code = GROUP_DENIED
        else:
            return await self._filtered(
                ctx, handler, "topics", lambda t: self._allowed(ctx, Op.READ, Rt.TOPIC, t.name), "topics",
                lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                           "error_code": TOPIC_DENIED} for p in t.partitions]})
        return build_response(ctx, {"topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in req.topics]})

    async def _describe_transactions(self, ctx, handler):
        return await self._filtered(
            ctx, handler, "transactional_ids", lambda t: self._allowed(ctx, Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t),
            "transaction_states",
            lambda t: {"error_code": TXN_DENIED, "transactional_id": t, "transaction_state": "",
                       "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                       "producer_epoch": -1, "topics": []})

    async def _list_transactions(self, ctx, handler):
        """Only the transactional ids the principal may DESCRIBE are listed."""
        response = _decoded(ctx, await handler(ctx))
        return dataclasses.replace(response, transaction_states=tuple(
            t for t in response.transaction_states
            if self._allowed(ctx, Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t.transactional_id)))

    # ------------------------------------------------------------------ cluster

    async def _cluster_action(self, ctx, handler):
        if not self._allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
            response = error_response(ctx, ClusterAuthorizationFailedError())
            if response is None:  # WriteTxnMarkers: per partition
                return build_response(ctx, {"markers": [
                    {"producer_id": m.producer_id, "topics": [
                        {"name": t.name, "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED}
                                                        for p in t.partition_indexes]} for t in m.topics]}
                    for m in ctx.request.markers]})
            return response
        return await handler(ctx)

    def _cluster(self, op: Op):
        async def check(ctx, handler):
            if not self._allowed(ctx, op, Rt.CLUSTER):
                return error_response(ctx, ClusterAuthorizationFailedError(AUTHORIZATION_FAILED)) or \
                    _all_items_error(ctx, CLUSTER_DENIED)
            return await handler(ctx)
        return check


def _all_items_error(ctx: RequestContext, code: int):
    """DescribeLogDirs before v3, ElectLeaders v0, AlterClientQuotas and AlterUserScramCredentials have no
    top-level error: every item carries it."""
    req = ctx.request
    if ctx.api_key == ApiKey.DESCRIBE_LOG_DIRS:
        return build_response(ctx, {"error_code": code, "results": []})
    if ctx.api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return build_response(ctx, {"entries": [
            {"error_code": code, "error_message": AUTHORIZATION_FAILED,
             "entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in e.entity]}
            for e in req.entries]})
    if ctx.api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        names = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        return build_response(ctx, {"results": [{"user": n, "error_code": code, "error_message": AUTHORIZATION_FAILED}
                                                for n in names]})
    if ctx.api_key == ApiKey.ELECT_LEADERS:
        return build_response(ctx, {"replica_election_results": [
            {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": None}
                                                    for p in t.partitions]} for t in req.topic_partitions or ()]})
    raise KafkaError(f"refused ({code})")


__all__ = ["AuthorizingApis", "NO_ERROR", "with_request"]
