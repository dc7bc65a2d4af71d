"""What each API asks of the authorizer, and the answers it gives when refused (Kafka's KafkaApis checks).

Each handler asks its API's check here before doing any work, as Kafka's ``handleXxxRequest`` calls
``authorize`` and ``filterByAuthorized`` first. A check either refuses the whole request (it returns the
answer: the API's error in every place Kafka puts it) or splits it (:class:`Checked`): the handler runs the
authorized part and puts the refused items' error entries after its own answers, in its normal response
building. A few APIs filter or mark what they answer (ListGroups, ListTransactions, OffsetFetch's
committed offsets, the authorized-operations bit fields): their handlers call the helpers here on the entries
they build. No answer is ever decoded or edited after it is built. Without an authorizer
(``authorizer.class.name`` unset) every check passes the request untouched. Produce, Fetch and Metadata ask
the authorizer inline for their topics (hot paths; Metadata hides topics rather than refusing them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.cluster.acls import AclOperation as Op
from tierlog.cluster.acls import ResourceType as Rt
from tierlog.cluster.acls import operations_bitfield
from tierlog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.authorizer import Authorizer
from tierlog.server.errors import error_response

TOPIC_DENIED = TopicAuthorizationFailedError.code
GROUP_DENIED = GroupAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code
TXN_DENIED = TransactionalIdAuthorizationFailedError.code
OPERATION_NOT_ATTEMPTED = 55
AUTHORIZATION_FAILED = "Authorization failed."
OPERATIONS_OMITTED = -2147483648  # an authorized-operations field not asked for

# Config resource types of DescribeConfigs / AlterConfigs
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32


def with_request(ctx: RequestContext, request) -> RequestContext:
    out = RequestContext(ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.header, request, ctx.frame_size)
    out.session, out.sasl, out.timing = ctx.session, ctx.sasl, ctx.timing
    return out


@dataclasses.dataclass(slots=True)
class Checked:
    """A request as its API's check left it: the handler runs ``ctx`` (the authorized part; the request itself
    when nothing was refused) and answers ``refused`` (the refused items' entries) after its own answers; with
    ``response`` set the whole request was refused and that is the answer."""

    ctx: RequestContext
    refused: list = dataclasses.field(default_factory=list)
    response: Any = None


class ApiAuthorization:
    """The per-API checks (Kafka's ``AuthHelper`` and the checks at the top of each ``KafkaApis`` handler)."""

    def __init__(self, authorizer: Authorizer | None = None,
                 topic_name_of_id: Callable[[object], str | None] = lambda _topic_id: None):
        self.authorizer = authorizer
        self.topic_name_of_id = topic_name_of_id

    def allowed(self, ctx: RequestContext, op: Op, rt: Rt, name: str | None = None) -> bool:
        if self.authorizer is None:
            return True
        if name is None:
            return self.authorizer.authorize(ctx.session, op, rt)
        return self.authorizer.authorize(ctx.session, op, rt, name)

    def operations(self, ctx: RequestContext, rt: Rt, name: str | None, default: int) -> int:
        """Kafka's authorized-operations bit field of a resource, from the ACLs; ``default`` without an
        authorizer."""
        if self.authorizer is None:
            return default
        return operations_bitfield(rt, lambda op: self.allowed(ctx, op, rt, name))

    # ------------------------------------------------------------------ splitting requests

    def _split(self, ctx: RequestContext, items_field: str, allowed, denied_entry: Callable[[Any], dict]
               ) -> Checked:
        """Kafka's ``filterByAuthorized``: the request with the items ``allowed(item)`` keeps, and the error
        entries of the others."""
        if self.authorizer is None:
            return Checked(ctx)
        items = getattr(ctx.request, items_field) or ()
        keep = [i for i in items if allowed(i)]
        if len(keep) == len(items):
            return Checked(ctx)
        return Checked(with_request(ctx, dataclasses.replace(ctx.request, **{items_field: tuple(keep)})),
                       [denied_entry(i) for i in items if not allowed(i)])

    # ------------------------------------------------------------------ topics

    def create_topics(self, ctx: RequestContext) -> Checked:
        cluster = self.allowed(ctx, Op.CREATE, Rt.CLUSTER)
        return self._split(
            ctx, "topics", lambda t: cluster or self.allowed(ctx, Op.CREATE, Rt.TOPIC, t.name),
            lambda t: {"name": t.name, "error_code": TOPIC_DENIED, "error_message": AUTHORIZATION_FAILED,
                       "num_partitions": -1, "replication_factor": -1, "topic_config_error_code": TOPIC_DENIED})

    def _topic_name(self, t) -> str | None:
        name = getattr(t, "name", None)
        if name is None:
            topic_id = getattr(t, "topic_id", None)
            if topic_id not in (None, ZERO_UUID):
                name = self.topic_name_of_id(topic_id)
        return name

    def delete_topics(self, ctx: RequestContext) -> Checked:
        if ctx.api_version < 6:
            return self._split(ctx, "topic_names", lambda n: self.allowed(ctx, Op.DELETE, Rt.TOPIC, n),
                               lambda n: {"name": n, "error_code": TOPIC_DENIED})

        def allowed(t) -> bool:
            name = self._topic_name(t)
            return name is None or self.allowed(ctx, Op.DELETE, Rt.TOPIC, name)  # unknown ids: the handler's
        return self._split(ctx, "topics", allowed,
                           lambda t: {"name": t.name, "topic_id": t.topic_id, "error_code": TOPIC_DENIED,
                                      "error_message": AUTHORIZATION_FAILED})

    def create_partitions(self, ctx: RequestContext) -> Checked:
        return self._split(
            ctx, "topics", lambda t: self.allowed(ctx, Op.ALTER, Rt.TOPIC, t.name),
            lambda t: {"name": t.name, "error_code": TOPIC_DENIED, "error_message": AUTHORIZATION_FAILED})

    def delete_records(self, ctx: RequestContext) -> Checked:
        return self._split(
            ctx, "topics", lambda t: self.allowed(ctx, Op.DELETE, Rt.TOPIC, t.name),
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index, "low_watermark": -1,
                                                       "error_code": TOPIC_DENIED} for p in t.partitions]})

    def list_offsets(self, ctx: RequestContext) -> Checked:
        if getattr(ctx.request, "replica_id", -1) >= 0 and not self.allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
            allowed = lambda t: False  # noqa: E731 - a follower's request without CLUSTER_ACTION
        else:
            allowed = lambda t: self.allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t.name)  # noqa: E731
        return self._split(
            ctx, "topics", allowed,
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                       "error_code": TOPIC_DENIED, "timestamp": -1, "offset": -1,
                                                       "leader_epoch": -1} for p in t.partitions]})

    def offsets_for_leader_epoch(self, ctx: RequestContext) -> Checked:
        """A follower (replica_id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on each topic; either way Kafka
        answers a refused partition TOPIC_AUTHORIZATION_FAILED."""
        if getattr(ctx.request, "replica_id", -1) >= 0:
            if self.allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
                return Checked(ctx)
            allowed = lambda t: False  # noqa: E731
        else:
            allowed = lambda t: self.allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t.topic)  # noqa: E731
        return self._split(
            ctx, "topics", allowed,
            lambda t: {"topic": t.topic, "partitions": [{"error_code": TOPIC_DENIED, "partition": p.partition,
                                                         "leader_epoch": -1, "end_offset": -1}
                                                        for p in t.partitions]})

    def describe_producers(self, ctx: RequestContext) -> Checked:
        return self._split(
            ctx, "topics", lambda t: self.allowed(ctx, Op.READ, Rt.TOPIC, t.name),
            lambda t: {"name": t.name, "partitions": [{"partition_index": p, "error_code": TOPIC_DENIED,
                                                       "active_producers": []} for p in t.partition_indexes]})

    # ------------------------------------------------------------------ configs

    def _config_allowed(self, ctx, op: Op, r) -> bool:
        if r.resource_type == CONFIG_TOPIC:
            return self.allowed(ctx, op, Rt.TOPIC, r.resource_name)
        if r.resource_type == CONFIG_GROUP:
            return self.allowed(ctx, op, Rt.GROUP, r.resource_name)
        if r.resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
            return self.allowed(ctx, op, Rt.CLUSTER)
        return True  # the handler answers what it does not know

    @staticmethod
    def _config_denied_code(r) -> int:
        return {CONFIG_TOPIC: TOPIC_DENIED, CONFIG_GROUP: GROUP_DENIED}.get(r.resource_type, CLUSTER_DENIED)

    def describe_configs(self, ctx: RequestContext) -> Checked:
        return self._split(
            ctx, "resources", lambda r: self._config_allowed(ctx, Op.DESCRIBE_CONFIGS, r),
            lambda r: {"error_code": self._config_denied_code(r), "error_message": None,
                       "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []})

    def alter_configs(self, ctx: RequestContext) -> Checked:
        """AlterConfigs and IncrementalAlterConfigs."""
        return self._split(
            ctx, "resources", lambda r: self._config_allowed(ctx, Op.ALTER_CONFIGS, r),
            lambda r: {"error_code": self._config_denied_code(r), "error_message": None,
                       "resource_type": r.resource_type, "resource_name": r.resource_name})

    # ------------------------------------------------------------------ groups

    def group(self, ctx: RequestContext, op: Op = Op.READ):
        """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: the refusal, or None."""
        if self.allowed(ctx, op, Rt.GROUP, ctx.request.group_id):
            return None
        return error_response(ctx, GroupAuthorizationFailedError())

    def offset_commit(self, ctx: RequestContext) -> Checked:
        """READ on the group, then on each topic by its name (v10 names topics by id: an unknown id is left to
        the handler, which answers UNKNOWN_TOPIC_ID, as Kafka does before authorizing)."""
        req = ctx.request
        if not self.allowed(ctx, Op.READ, Rt.GROUP, req.group_id):
            return Checked(ctx, response=build_response(ctx, {"topics": [
                {**_topic_ref(t), "partitions": [{"partition_index": p.partition_index, "error_code": GROUP_DENIED}
                                                 for p in t.partitions]} for t in req.topics]}))

        def allowed(t) -> bool:
            name = self._topic_name(t)
            return name is None or self.allowed(ctx, Op.READ, Rt.TOPIC, name)
        return self._split(
            ctx, "topics", allowed,
            lambda t: {**_topic_ref(t), "partitions": [{"partition_index": p.partition_index,
                                                        "error_code": TOPIC_DENIED} for p in t.partitions]})

    def offset_fetch(self, ctx: RequestContext) -> Checked:
        """v8+ (batched groups): a refused group answers GROUP_AUTHORIZATION_FAILED alone; before, the whole
        request. The topics the principal may not DESCRIBE are marked afterwards (:meth:`hide_offsets`)."""
        req = ctx.request
        if ctx.api_version >= 8:
            return self._split(ctx, "groups", lambda g: self.allowed(ctx, Op.DESCRIBE, Rt.GROUP, g.group_id),
                               lambda g: {"group_id": g.group_id, "error_code": GROUP_DENIED, "topics": []})
        if self.allowed(ctx, Op.DESCRIBE, Rt.GROUP, req.group_id):
            return Checked(ctx)
        return Checked(ctx, response=error_response(ctx, GroupAuthorizationFailedError()) or build_response(
            ctx, {"topics": [{"name": t.name, "partitions": [{"partition_index": p, "committed_offset": -1,
                                                              "error_code": GROUP_DENIED}
                                                             for p in t.partition_indexes]}
                             for t in req.topics or ()]}))

    def hide_offsets(self, ctx: RequestContext, topics: list[dict]) -> None:
        """OffsetFetch's answer ``topics`` (``name``, ``partitions``), in place: the committed offsets of
        topics the principal may not DESCRIBE become TOPIC_AUTHORIZATION_FAILED (Kafka's OffsetFetch)."""
        if self.authorizer is None:
            return
        for t in topics:
            if t["name"] is not None and not self.allowed(ctx, Op.DESCRIBE, Rt.TOPIC, t["name"]):
                t["partitions"] = [
                    {**p, "committed_offset": -1, "error_code": TOPIC_DENIED} if isinstance(p, dict)
                    else dataclasses.replace(p, committed_offset=-1, error_code=ErrorCode(TOPIC_DENIED))
                    for p in t["partitions"]]

    def offset_delete(self, ctx: RequestContext) -> Checked:
        if not self.allowed(ctx, Op.DELETE, Rt.GROUP, ctx.request.group_id):
            return Checked(ctx, response=error_response(ctx, GroupAuthorizationFailedError()))
        return self._split(
            ctx, "topics", lambda t: self.allowed(ctx, Op.READ, Rt.TOPIC, t.name),
            lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                       "error_code": TOPIC_DENIED} for p in t.partitions]})

    def describe_groups(self, ctx: RequestContext) -> Checked:
        """The described groups' authorized operations come from :meth:`operations`."""
        return self._split(
            ctx, "groups", lambda g: self.allowed(ctx, Op.DESCRIBE, Rt.GROUP, g),
            lambda g: {"error_code": GROUP_DENIED, "group_id": g, "group_state": "", "protocol_type": "",
                       "protocol_data": "", "members": [], "authorized_operations": OPERATIONS_OMITTED})

    def delete_groups(self, ctx: RequestContext) -> Checked:
        return self._split(ctx, "groups_names", lambda g: self.allowed(ctx, Op.DELETE, Rt.GROUP, g),
                           lambda g: {"group_id": g, "error_code": GROUP_DENIED})

    def listed_groups(self, ctx: RequestContext, groups: list[dict]) -> list[dict]:
        """ListGroups: every group with DESCRIBE on the cluster, else those the principal may DESCRIBE."""
        if self.authorizer is None or self.allowed(ctx, Op.DESCRIBE, Rt.CLUSTER):
            return groups
        return [g for g in groups if self.allowed(ctx, Op.DESCRIBE, Rt.GROUP, g["group_id"])]

    def find_coordinator(self, ctx: RequestContext) -> Checked:
        req = ctx.request
        if getattr(req, "key_type", 0) == 2:  # share coordinator keys are the brokers' own (Kafka: CLUSTER_ACTION)
            if self.allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
                return Checked(ctx)
            return Checked(ctx, response=build_response(ctx, {"coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.cluster_authorization_failed,
                 "error_message": None} for k in req.coordinator_keys]}))
        rt, code = (Rt.TRANSACTIONAL_ID, TXN_DENIED) if getattr(req, "key_type", 0) == 1 else (Rt.GROUP, GROUP_DENIED)
        if ctx.api_version >= 4:
            return self._split(ctx, "coordinator_keys", lambda k: self.allowed(ctx, Op.DESCRIBE, rt, k),
                               lambda k: {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
                                          "error_message": None})
        if self.allowed(ctx, Op.DESCRIBE, rt, req.key):
            return Checked(ctx)
        return Checked(ctx, response=build_response(ctx, {"error_code": code, "error_message": None,
                                                          "node_id": -1, "host": "", "port": -1}))

    # ------------------------------------------------------------------ transactions and producers

    def init_producer_id(self, ctx: RequestContext):
        """The refusal, or None."""
        if self.authorizer is None:
            return None
        txn = ctx.request.transactional_id
        if txn is not None:
            if not self.allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, txn):
                return error_response(ctx, TransactionalIdAuthorizationFailedError())
        elif not (self.allowed(ctx, Op.IDEMPOTENT_WRITE, Rt.CLUSTER)
                  or self.authorizer.authorize_any(ctx.session, Op.WRITE, Rt.TOPIC)):
            return error_response(ctx, ClusterAuthorizationFailedError())
        return None

    def end_txn(self, ctx: RequestContext):
        """The refusal, or None."""
        if not self.allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, ctx.request.transactional_id):
            return error_response(ctx, TransactionalIdAuthorizationFailedError())
        return None

    def add_offsets_to_txn(self, ctx: RequestContext):
        """The refusal, or None."""
        if not self.allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, ctx.request.transactional_id):
            return error_response(ctx, TransactionalIdAuthorizationFailedError())
        if not self.allowed(ctx, Op.READ, Rt.GROUP, ctx.request.group_id):
            return error_response(ctx, GroupAuthorizationFailedError())
        return None

    def add_partitions_to_txn(self, ctx: RequestContext):
        """The refusal, or None."""
        if self.authorizer is None:
            return None
        req = ctx.request
        if ctx.api_version >= 4:  # from brokers (verification) or batched clients: CLUSTER_ACTION for the batch
            if getattr(req, "transactions", None) and not self.allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
                return error_response(ctx, ClusterAuthorizationFailedError())
            return None
        if not self.allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
            return build_response(ctx, {"results_by_topic_v3_and_below": [
                {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": TXN_DENIED}
                                                          for p in t.partitions]}
                for t in req.v3_and_below_topics]})
        denied = [t for t in req.v3_and_below_topics if not self.allowed(ctx, Op.WRITE, Rt.TOPIC, t.name)]
        if denied:  # Kafka: refused topics get TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED
            return build_response(ctx, {"results_by_topic_v3_and_below": [
                {"name": t.name, "results_by_partition": [
                    {"partition_index": p,
                     "partition_error_code": TOPIC_DENIED if t in denied else OPERATION_NOT_ATTEMPTED}
                    for p in t.partitions]} for t in req.v3_and_below_topics]})
        return None

    def txn_offset_commit(self, ctx: RequestContext) -> Checked:
        req = ctx.request
        if not self.allowed(ctx, Op.WRITE, Rt.TRANSACTIONAL_ID, req.transactional_id):
            code = TXN_DENIED
        elif not self.allowed(ctx, Op.READ, Rt.GROUP, req.group_id):
            code = GROUP_DENIED
        else:
            return self._split(
                ctx, "topics", lambda t: self.allowed(ctx, Op.READ, Rt.TOPIC, t.name),
                lambda t: {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                           "error_code": TOPIC_DENIED} for p in t.partitions]})
        return Checked(ctx, response=build_response(ctx, {"topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in req.topics]}))

    def describe_transactions(self, ctx: RequestContext) -> Checked:
        return self._split(
            ctx, "transactional_ids", lambda t: self.allowed(ctx, Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t),
            lambda t: {"error_code": TXN_DENIED, "transactional_id": t, "transaction_state": "",
                       "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                       "producer_epoch": -1, "topics": []})

    def listed_transactions(self, ctx: RequestContext, states: list[dict]) -> list[dict]:
        """ListTransactions: only the transactional ids the principal may DESCRIBE."""
        if self.authorizer is None:
            return states
        return [t for t in states if self.allowed(ctx, Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t["transactional_id"])]

    # ------------------------------------------------------------------ cluster

    def cluster_action(self, ctx: RequestContext):
        """WriteTxnMarkers, AlterPartition: the refusal, or None."""
        if self.allowed(ctx, Op.CLUSTER_ACTION, Rt.CLUSTER):
            return None
        response = error_response(ctx, ClusterAuthorizationFailedError())
        if response is None:  # WriteTxnMarkers: per partition
            return build_response(ctx, {"markers": [
                {"producer_id": m.producer_id, "topics": [
                    {"name": t.name, "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED}
                                                    for p in t.partition_indexes]} for t in m.topics]}
                for m in ctx.request.markers]})
        return response

    def cluster(self, ctx: RequestContext, op: Op):
        """The cluster-wide admin APIs: the refusal, or None."""
        if self.allowed(ctx, op, Rt.CLUSTER):
            return None
        return error_response(ctx, ClusterAuthorizationFailedError(AUTHORIZATION_FAILED)) or \
            _all_items_error(ctx, CLUSTER_DENIED)


def _topic_ref(t) -> dict:
    """How a request topic is named in its answer: by id when the request named it by id (OffsetCommit v10)."""
    return {"name": t.name} if hasattr(t, "name") else {"topic_id": t.topic_id or ZERO_UUID}


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


#: Every check passes: the families' default until the composition root gives them the broker's.
ALLOW_ALL = ApiAuthorization()

__all__ = ["ALLOW_ALL", "ApiAuthorization", "Checked", "with_request"]
