"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups.

The handlers translate between kio messages of every supported version and the
:class:`~tierlog.coordinator.GroupCoordinator`, which does the work. JoinGroup and SyncGroup await
an asyncio future the coordinator completes when the rebalance step is done, so a parked join only
holds its own connection.

Version notes (what Kafka's ``KafkaApis`` and request/response classes do):

- FindCoordinator v0-3 answers one key (``error_message`` is Kafka's ``Errors.message()``, "NONE" on
  success); v4+ answers each of ``coordinator_keys``. Key type 0 (group): this node, creating
  ``__consumer_offsets`` on first use. Key type 1 (transaction): the same with ``__transaction_state``.
  On a single node the answer is this node; in a cluster it is the leader of the key's partition
  (``partition_for`` of the group id or transactional id), COORDINATOR_NOT_AVAILABLE while that partition
  has no live leader or the topic is being created. The broker named answers NOT_COORDINATOR or
  COORDINATOR_LOAD_IN_PROGRESS itself when leadership moved or its load is not done, and the client asks again.
  Key type 2 (share, v6+): the leader of the ``__share_group_state`` partition of a share-partition key
  ``"<group>:<topic id>:<partition>"`` (created on first use; INVALID_REQUEST for a key that is not three parts,
  as Kafka's ``SharePartitionKey``). Unknown types: INVALID_REQUEST.
- JoinGroup: protocol name "" before v7, null from v7; v0 uses the session timeout as the
  rebalance timeout.
- SyncGroup v5+: protocol type and name are mandatory (INCONSISTENT_GROUP_PROTOCOL otherwise).
- LeaveGroup v0-2 carry one member and answer its error at the top level.
- OffsetCommit and OffsetDelete: topics or partitions missing from the metadata get
  UNKNOWN_TOPIC_OR_PARTITION, the others go to the coordinator. OffsetCommit v10 names topics by id
  (KIP-848): ids are resolved in the metadata image (offsets stay stored by name), an unknown id (the
  zero id too) answers UNKNOWN_TOPIC_ID before any authorization, and the answer names topics by id.
  An OffsetDelete refused for the whole group (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)
  answers only the top-level error, as Kafka's ``getErrorResponse``.
- OffsetFetch v1-7 answer one group (v1 has no top-level error: a group error goes on each
  partition); v8+ answer many; null topics mean every committed partition. v10 names topics by id as
  OffsetCommit v10 does (an unknown id: UNKNOWN_TOPIC_ID on each partition, offset -1).
- DescribeGroups v6 (KIP-1043) answers a group that does not exist, or is not a classic group,
  GROUP_ID_NOT_FOUND with Kafka's message; v0-5 describe it as a Dead group with no error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import typing
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tierlog.coordinator.share.records import SHARE_STATE_TOPIC
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.errors import (
    NO_ERROR,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    NetworkException,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    describe_error,
)
from tierlog.kafka_uuid import ZERO_UUID, uuid_from_str
from tierlog.logs import RepeatLimiter
from tierlog.protocol import ApiKey, RequestContext, RequestTiming, build_response, offload
from tierlog.protocol.offload import Pacer, paced
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.network.listener_security import endpoint_for_client
from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
#: DescribeGroups answers a group that does not exist (or is not a classic group) GROUP_ID_NOT_FOUND from v6 on
#: (KIP-1043); older versions describe it as a Dead group with no error.
GROUP_ID_NOT_FOUND_DESCRIBE_VERSION = 6
#: OffsetCommit and OffsetFetch name topics by id from v10 (KIP-848)
TOPIC_ID_OFFSETS_VERSION = 10


def _share_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """A share coordinator key ``"<group>:<topic id>:<partition>"`` (Kafka's SharePartitionKey), None when bad."""
    parts = (key or "").split(":")
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        return parts[0], uuid_from_str(parts[1]), int(parts[2])
    except ValueError:
        return None
SHARE_KEY_TYPE = 2

#: DescribeGroups' authorized_operations with no authorizer: every operation on a GROUP resource
#: (READ 3, DELETE 6, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11), Kafka's AclEntry.supportedOperations.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)

# Kafka's Errors.message() texts for the errors FindCoordinator v1-3 can carry.
_ERROR_MESSAGES = {
    NO_ERROR: "NONE",
    CoordinatorNotAvailableError.code: "The coordinator is not available.",
    InvalidRequestError.code: "This most likely occurs because of a request being malformed by the client library or "
                       "the message was sent to an incompatible broker. See the broker logs for more details.",
}


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def _client_host(ctx: RequestContext) -> str:
    """The member's client host as Kafka's JoinGroup keeps it: the address of the request's session, written as
    Java writes an InetAddress without a host name ("/127.0.0.1")."""
    session = ctx.session
    return "/" + session.client_host if session is not None and session.client_host else ""


#: How a commit's replication failure is answered (Kafka's GroupMetadataManager.storeOffsets mapping).
_COMMIT_ERRORS = {
    RequestTimedOutError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasAfterAppendError.code: CoordinatorNotAvailableError.code,
    NotLeaderOrFollowerError.code: NotCoordinatorError.code,
    KafkaStorageError.code: NotCoordinatorError.code,
}
#: How a failed KIP-890 verification is answered (Kafka 3.9's GroupMetadataManager.maybeConvertOffsetCommitError):
#: a network failure becomes a retry without a coordinator lookup.
_VERIFICATION_ERRORS = {**_COMMIT_ERRORS, NetworkException.code: CoordinatorLoadInProgressError.code,
                        UnknownTopicOrPartitionError.code: CoordinatorNotAvailableError.code}


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, controller: Controller, node_id: int,
                 replicated: Callable[[int, float, RequestTiming | None], Awaitable[int]] | None = None, *,
                 transaction_coordinator=None, replica_manager: ReplicaManager | None = None,
                 authorization: ApiAuthorization = ALLOW_ALL):
        """``replicated(partition, timeout_s, timing)`` waits until what was appended to that ``__consumer_offsets``
        partition reached its in-sync replicas and returns the append's error code (in a cluster); the wait is
        added to ``timing``, the request's."""
        self.coordinator = coordinator
        self.controller = controller
        self.node_id = node_id
        self.replicated = replicated
        self._warn = RepeatLimiter(log)
        #: The transaction coordinator (FindCoordinator key type 1), when this broker has one.
        self.transaction_coordinator = transaction_coordinator
        #: The replica manager, whose KIP-890 verification a transactional commit passes first (Kafka's group
        #: coordinator asks ReplicaManager.maybeStartTransactionVerificationForPartition)
        self.replica_manager = replica_manager
        self.authorization = authorization
        #: The share groups' coordinator (KIP-932), whose groups ListGroups lists too; set by the broker.
        self.share_groups = None
        #: ``__share_group_state`` (FindCoordinator key type 2), when share groups are served; set by the broker.
        self.share_state = None

    def register(self, registry) -> None:
        registry.register(ApiKey.FIND_COORDINATOR, 0, 6, self.find_coordinator)
        registry.register(ApiKey.JOIN_GROUP, 0, 9, self.join_group)
        registry.register(ApiKey.SYNC_GROUP, 0, 5, self.sync_group)
        registry.register(ApiKey.HEARTBEAT, 0, 4, self.heartbeat)
        registry.register(ApiKey.LEAVE_GROUP, 0, 5, self.leave_group)
        registry.register(ApiKey.OFFSET_COMMIT, 2, 10, self.offset_commit)
        registry.register(ApiKey.OFFSET_FETCH, 1, 10, self.offset_fetch)
        # Kafka 4.1 accepts 0-5; v3+ carry the member (KIP-447). The group's partition is verified with the
        # transaction coordinator first (KIP-890 part 1, ``verification``).
        registry.register(ApiKey.TXN_OFFSET_COMMIT, 0, 5, self.txn_offset_commit)
        registry.register(ApiKey.OFFSET_DELETE, 0, 0, self.offset_delete)
        registry.register(ApiKey.LIST_GROUPS, 0, 5, self.list_groups)
        registry.register(ApiKey.DESCRIBE_GROUPS, 0, 6, self.describe_groups)
        registry.register(ApiKey.DELETE_GROUPS, 0, 2, self.delete_groups)

    def _ready(self) -> GroupCoordinator:
        self.coordinator.ensure_loaded()
        return self.coordinator

    # ------------------------------------------------------------------ FindCoordinator

    def _coordinator_for(self, ctx: RequestContext, key_type: int, api_version: int, key: str = ""
                         ) -> tuple[int, tuple[int, str, int]]:
        no_node = (-1, "", -1)
        if key_type == GROUP_KEY_TYPE:
            coordinator = self._ready()
            if not coordinator.active:
                return CoordinatorNotAvailableError.code, no_node
            try:
                coordinator.store.ensure_created()
            except KafkaError as e:
                # Every FindCoordinator tries again: one line and a count, not one per request.
                hint = ("; set offsets.topic.replication.factor to at most the brokers alive, or start more"
                        if isinstance(e, InvalidReplicationFactorError) else "")
                self._warn.warning(e.code, "Cannot create __consumer_offsets: %s%s", describe_error(e), hint)
                return CoordinatorNotAvailableError.code, no_node
            topic_name, partition = OFFSETS_TOPIC, coordinator.partition_for(key)
        elif key_type == TRANSACTION_KEY_TYPE:
            txn = self.transaction_coordinator
            if txn is None or not txn.active:
                return CoordinatorNotAvailableError.code, no_node  # not started yet
            try:
                txn.store.ensure_created()
            except KafkaError as e:
                hint = ("; set transaction.state.log.replication.factor to at most the brokers alive, or start more"
                        if isinstance(e, InvalidReplicationFactorError) else "")
                self._warn.warning(e.code, "Cannot create __transaction_state: %s%s", describe_error(e), hint)
                return CoordinatorNotAvailableError.code, no_node
            topic_name, partition = TXN_STATE_TOPIC, txn.partition_for(key)
        elif key_type == SHARE_KEY_TYPE and self.share_state is not None and api_version >= 6:
            share_key = _share_key(key)
            if share_key is None:
                return InvalidRequestError.code, no_node
            try:
                self.share_state.ensure_created()
            except KafkaError as e:
                self._warn.warning(e.code, "Cannot create __share_group_state: %s", describe_error(e))
                return CoordinatorNotAvailableError.code, no_node
            topic_name, partition = SHARE_STATE_TOPIC, self.share_state.partition_of(share_key)
        else:  # unknown key types
            return InvalidRequestError.code, no_node
        image = self.controller.image
        if not self.controller.clustered:
            me = image.brokers[self.node_id]
            return NO_ERROR, (self.node_id, *endpoint_for_client(me, ctx))
        # In a cluster the coordinator is the leader of the key's partition (__consumer_offsets for a group,
        # __transaction_state for a transactional id).
        topic = image.topics.get(topic_name)
        state = topic.partitions.get(partition) if topic is not None else None
        leader = image.brokers.get(state.leader) if state is not None else None
        if leader is None:
            return CoordinatorNotAvailableError.code, no_node
        return NO_ERROR, (leader.node_id, *endpoint_for_client(leader, ctx))

    async def find_coordinator(self, ctx: RequestContext):
        checked = self.authorization.find_coordinator(ctx)
        if checked.response is not None:
            return checked.response
        ctx = checked.ctx
        req = ctx.request
        key_type = getattr(req, "key_type", GROUP_KEY_TYPE)
        if ctx.api_version < 4:
            error, (node_id, host, port) = self._coordinator_for(ctx, key_type, ctx.api_version, req.key)
            return build_response(ctx, {"error_code": error, "error_message": _ERROR_MESSAGES[error],
                                        "node_id": node_id, "host": host, "port": port})
        coordinators = []
        for key in req.coordinator_keys:
            error, (node_id, host, port) = self._coordinator_for(ctx, key_type, ctx.api_version, key)
            coordinators.append({"key": key, "node_id": node_id, "host": host, "port": port,
                                 "error_code": error, "error_message": None})
        return build_response(ctx, {"coordinators": coordinators + checked.refused})

    # ------------------------------------------------------------------ JoinGroup / SyncGroup

    async def join_group(self, ctx: RequestContext):
        if (refused := self.authorization.group(ctx, AclOperation.READ)) is not None:
            return refused
        req = ctx.request
        coordinator = self._ready()
        future = asyncio.get_running_loop().create_future()

        def respond(answer: dict[str, Any]) -> None:
            if not future.done():
                future.set_result(answer)

        session_timeout = _ms(req.session_timeout)
        coordinator.join_group(
            group_id=req.group_id, member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None), protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols], session_timeout_ms=session_timeout,
            rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", session_timeout)),
            client_id=ctx.client_id or "", client_host=_client_host(ctx), api_version=ctx.api_version,
            respond=respond, reason=getattr(req, "reason", None))
        answer = dict(await future)
        name = answer.get("protocol_name")
        answer["protocol_name"] = (name or "") if ctx.api_version < 7 else (name or None)
        answer["leader"] = answer.get("leader") or ""
        return build_response(ctx, answer)

    async def sync_group(self, ctx: RequestContext):
        if (refused := self.authorization.group(ctx, AclOperation.READ)) is not None:
            return refused
        req = ctx.request
        protocol_type = getattr(req, "protocol_type", None)
        protocol_name = getattr(req, "protocol_name", None)
        if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
            return build_response(ctx, {"error_code": InconsistentGroupProtocolError.code})
        coordinator = self._ready()
        future = asyncio.get_running_loop().create_future()

        def respond(answer: dict[str, Any]) -> None:
            if not future.done():
                future.set_result(answer)

        coordinator.sync_group(
            group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None), protocol_type=protocol_type,
            protocol_name=protocol_name, assignments=[(a.member_id, a.assignment) for a in req.assignments],
            respond=respond)
        answer = await future
        return build_response(ctx, {"error_code": answer["error_code"], "assignment": answer.get("assignment", b""),
                                    "protocol_type": answer.get("protocol_type"),
                                    "protocol_name": answer.get("protocol_name")})

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup

    async def heartbeat(self, ctx: RequestContext):
        if (refused := self.authorization.group(ctx, AclOperation.READ)) is not None:
            return refused
        req = ctx.request
        error = self._ready().heartbeat(group_id=req.group_id, generation_id=req.generation_id,
                                        member_id=req.member_id,
                                        group_instance_id=getattr(req, "group_instance_id", None))
        return build_response(ctx, {"error_code": error})

    async def leave_group(self, ctx: RequestContext):
        if (refused := self.authorization.group(ctx, AclOperation.READ)) is not None:
            return refused
        req = ctx.request
        if ctx.api_version < 3:
            members = [(req.member_id, None, None)]
        else:
            members = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in req.members]
        error, results = self._ready().leave_group(group_id=req.group_id, members=members)
        if ctx.api_version >= 3:
            return build_response(ctx, {"error_code": error, "members": results})
        if error == NO_ERROR and results:
            error = results[0]["error_code"]
        return build_response(ctx, {"error_code": error})

    # ------------------------------------------------------------------ offsets

    async def offset_commit(self, ctx: RequestContext):
        checked = self.authorization.offset_commit(ctx)
        if checked.response is not None:
            return checked.response
        ctx = checked.ctx
        req = ctx.request
        pacer = Pacer()  # a request may name a million partitions: its loops yield to the event loop
        names = self._topic_keys(ctx, req.topics)
        errors, known = await self._known_partitions(req.topics, pacer, names)
        valid = []
        async for chunk in paced(known, 512, pacer):
            valid += [(name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                       p.committed_metadata) for name, p in chunk]
        if valid:
            committed = self._ready().commit_offsets(
                group_id=req.group_id, generation_id=req.generation_id_or_member_epoch, member_id=req.member_id,
                group_instance_id=getattr(req, "group_instance_id", None), partitions=valid,
                api_version=ctx.api_version, retention_time_ms=_ms(getattr(req, "retention_time", -1)))
            errors.update(await self._replicated_commit(ctx, req.group_id, committed))
        offload.free_later(known, valid)
        topics, items = await _partition_errors(req.topics, errors, pacer, names)
        offload.free_later(errors)
        topics += checked.refused
        items += sum(1 + len(t["partitions"]) for t in checked.refused)
        return await offload.respond(ctx, {"topics": topics}, items)

    def _topic_keys(self, ctx: RequestContext, topics) -> list[str | uuid.UUID]:
        """Each request topic's name. OffsetCommit and OffsetFetch v10 name topics by id (KIP-848), resolved in
        the metadata image; an id this cluster does not know (the zero id too) stays the id, which
        :meth:`_known_partitions` answers UNKNOWN_TOPIC_ID, as Kafka does before it authorizes the topic."""
        if ctx.api_version < TOPIC_ID_OFFSETS_VERSION:
            return [t.name for t in topics or ()]
        topic_name = self.replica_manager.topic_name if self.replica_manager is not None else _image_name(
            self.controller)
        # kio reads the zero id as None: it is no topic's, answered UNKNOWN_TOPIC_ID as an unknown one
        ids = [t.topic_id or ZERO_UUID for t in topics or ()]
        return [(topic_name(i) if i != ZERO_UUID else None) or i for i in ids]

    async def _replicated_commit(self, ctx: RequestContext, group_id: str, committed: dict) -> dict:
        """``committed`` (an error code per partition) once the in-sync replicas have the commit, as Kafka appends
        commits with acks=all: a commit a new coordinator would not find is not answered as done."""
        if self.replicated is None or all(code != NO_ERROR for code in committed.values()):
            return committed
        code = await self.replicated(self.coordinator.partition_for(group_id),
                                     self.controller.effective_config["offsets.commit.timeout.ms"] / 1000, ctx.timing)
        if not code:
            return committed
        code = _COMMIT_ERRORS.get(code, code)
        return {tp: code if c == NO_ERROR else c for tp, c in committed.items()}

    async def txn_offset_commit(self, ctx: RequestContext):
        """TxnOffsetCommit: offsets written in the producer's transaction, visible once its COMMIT marker reaches
        the group's ``__consumer_offsets`` partition (WriteTxnMarkers). Unknown partitions answer
        UNKNOWN_TOPIC_OR_PARTITION, as Kafka's handler checks the metadata first."""
        checked = self.authorization.txn_offset_commit(ctx)
        if checked.response is not None:
            return checked.response
        ctx = checked.ctx
        req = ctx.request
        pacer = Pacer()
        errors, known = await self._known_partitions(req.topics, pacer)
        valid = [(name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                  p.committed_metadata) for name, p in known]
        # TxnOffsetCommit v5 is transaction version 2's: the group's partition is added to the transaction
        # (no AddOffsetsToTxn), whatever transaction.partition.verification.enable says. v4 is the first
        # version whose client understands TRANSACTION_ABORTABLE.
        if valid and self.replica_manager is not None:
            tp = (OFFSETS_TOPIC, self._ready().partition_for(req.group_id))
            code = await self.replica_manager.verify_transactional_append(
                tp, req.transactional_id, req.producer_id, req.producer_epoch, abortable_supported=ctx.api_version >= 4,
                add=ctx.api_version >= 5)
            if code != NO_ERROR:
                code = _VERIFICATION_ERRORS.get(code, code)
                errors.update({(name, p.partition_index): code for name, p in known})
                valid = []
        if valid:
            committed = self._ready().commit_transactional_offsets(
                group_id=req.group_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                generation_id=getattr(req, "generation_id", -1), member_id=getattr(req, "member_id", ""),
                group_instance_id=getattr(req, "group_instance_id", None), partitions=valid)
            committed = {tp: _COMMIT_ERRORS.get(c, c) for tp, c in committed.items()}
            errors.update(await self._replicated_commit(ctx, req.group_id, committed))
        topics, _items = await _partition_errors(req.topics, errors, pacer)
        return build_response(ctx, {"topics": topics + checked.refused})

    async def _known_partitions(self, topics, pacer: Pacer, names: list | None = None
                                ) -> tuple[dict[tuple[str, int], int], list]:
        """Split request partitions into UNKNOWN_TOPIC_OR_PARTITION errors (UNKNOWN_TOPIC_ID for a topic id
        ``names`` could not resolve, :meth:`_topic_keys`) and known (topic, partition object)s."""
        image_topics = self.controller.image.topics
        errors: dict[tuple[str, int], int] = {}
        known = []
        for i, topic in enumerate(topics):
            name = topic.name if names is None else names[i]
            if isinstance(name, uuid.UUID):
                async for chunk in paced(topic.partitions, 512, pacer):
                    errors.update(((name, p.partition_index), UnknownTopicIdError.code) for p in chunk)
                continue
            meta = image_topics.get(name)
            async for chunk in paced(topic.partitions, 512, pacer):
                for p in chunk:
                    if meta is None or p.partition_index not in meta.partitions:
                        errors[(name, p.partition_index)] = UnknownTopicOrPartitionError.code
                    else:
                        known.append((name, p))
        return errors, known

    async def offset_delete(self, ctx: RequestContext):
        checked = self.authorization.offset_delete(ctx)
        if checked.response is not None:
            return checked.response
        ctx = checked.ctx
        req = ctx.request
        pacer = Pacer()
        errors, known = await self._known_partitions(req.topics, pacer)
        # The coordinator checks the group even with no known partition left, as Kafka's (GROUP_ID_NOT_FOUND,
        # NON_EMPTY_GROUP): also when the authorizer took every topic out.
        items = []
        async for chunk in paced(known, 512, pacer):
            items += [(t, p.partition_index) for t, p in chunk]
        error, results = self._ready().delete_offsets(req.group_id, items)
        offload.free_later(known, items)
        if error != NO_ERROR:
            return build_response(ctx, {"error_code": error})
        errors.update(results)
        topics, items = await _partition_errors(req.topics, errors, pacer)
        offload.free_later(errors)
        topics += checked.refused
        items += sum(1 + len(t["partitions"]) for t in checked.refused)
        return await offload.respond(ctx, {"error_code": error, "topics": topics}, items)

    async def offset_fetch(self, ctx: RequestContext):
        checked = self.authorization.offset_fetch(ctx)
        if checked.response is not None:
            return checked.response
        ctx = checked.ctx
        req = ctx.request
        if checked.refused and not req.groups:  # every group refused: the coordinator is not asked
            return build_response(ctx, {"groups": checked.refused})
        coordinator = self._ready()
        require_stable = getattr(req, "require_stable", False)
        pacer = Pacer()
        entry = _partition_entry(ctx.response_type)
        if ctx.api_version >= 8:
            groups = []
            items = 0
            for g in req.groups:
                # v9+: a consumer group member's fetch carries its epoch (KIP-848), checked as a commit's.
                error = coordinator.validate_offset_fetch(g.group_id, getattr(g, "member_id", None),
                                                          getattr(g, "member_epoch", -1))
                topics = []
                if error == NO_ERROR:
                    error, topics = await _fetch_offsets(coordinator, g.group_id, g.topics, require_stable, pacer,
                                                         entry, self._topic_keys(ctx, g.topics))
                items += sum(len(parts) for _, parts in topics)
                if ctx.api_version >= TOPIC_ID_OFFSETS_VERSION:
                    answer = self._by_topic_id(topics)
                else:
                    answer = [{"name": name, "partitions": parts} for name, parts in topics]
                self.authorization.hide_offsets(ctx, answer)
                groups.append({"group_id": g.group_id, "error_code": error, "topics": answer})
            return await offload.respond(ctx, {"groups": groups + checked.refused}, items)
        error, topics = await _fetch_offsets(coordinator, req.group_id, req.topics, require_stable, pacer, entry)
        if error != NO_ERROR:
            topics = []
            if ctx.api_version < 2:  # no top-level error yet: report it on every partition
                topics = [(t.name, [{"partition_index": p, "committed_offset": -1, "metadata": "",
                                     "error_code": error} for p in t.partition_indexes]) for t in req.topics or ()]
        answer = [{"name": name, "partitions": parts} for name, parts in topics]
        self.authorization.hide_offsets(ctx, answer)
        return await offload.respond(ctx, {"error_code": error, "topics": answer},
                                     sum(len(parts) for _, parts in topics))

    def _by_topic_id(self, topics: list[tuple[str | uuid.UUID, list[Any]]]) -> list[dict[str, Any]]:
        """OffsetFetch v10's topics, named by id (KIP-848); ``name`` stays for the authorization, None for an
        unknown id. Offsets of a topic without an id here (committed before it was deleted) are left out: the
        answer cannot name it."""
        image_topics = self.controller.image.topics
        out = []
        for key, parts in topics:
            if isinstance(key, uuid.UUID):
                out.append({"name": None, "topic_id": key, "partitions": parts})
            elif (meta := image_topics.get(key)) is not None:
                out.append({"name": key, "topic_id": meta.topic_id, "partitions": parts})
        return out

    # ------------------------------------------------------------------ admin

    async def list_groups(self, ctx: RequestContext):
        req = ctx.request
        states_filter, types_filter = getattr(req, "states_filter", ()), getattr(req, "types_filter", ())
        error, groups = self._ready().list_groups(states_filter, types_filter)
        if error == NO_ERROR and self.share_groups is not None:
            # Kafka 4.4 lists share groups (group type and protocol type "share") at every version; DescribeGroups
            # answers one as an unknown group (Dead, no error), which the coordinator's describe already does.
            groups += self.share_groups.list_groups({s.strip().lower() for s in states_filter},
                                                    {t.strip().lower() for t in types_filter})
            groups.sort(key=lambda g: g["group_id"])
        return build_response(ctx, {"error_code": error, "groups": self.authorization.listed_groups(ctx, groups)})

    async def describe_groups(self, ctx: RequestContext):
        checked = self.authorization.describe_groups(ctx)
        ctx = checked.ctx
        req = ctx.request
        include_ops = getattr(req, "include_authorized_operations", False)
        coordinator = self._ready()
        groups: list[dict[str, Any]] = []
        async for chunk in paced(req.groups, 64):  # a request may name a million groups
            groups += coordinator.describe_groups(chunk)
        share = self.share_groups.groups if self.share_groups is not None else {}
        for g in groups:
            if g["error_code"] != GroupIdNotFoundError.code:
                continue
            if ctx.api_version < GROUP_ID_NOT_FOUND_DESCRIBE_VERSION:
                g["error_code"], g["error_message"] = NO_ERROR, None  # a Dead group, as before KIP-1043
            elif g["group_id"] in share:  # Kafka keeps share groups in the same map: not a classic group
                g["error_message"] = f"Group {g['group_id']} is not a classic group."
        if include_ops:
            for g in groups:
                if g["error_code"] == NO_ERROR:
                    g["authorized_operations"] = self.authorization.operations(
                        ctx, ResourceType.GROUP, g["group_id"], GROUP_AUTHORIZED_OPERATIONS)
        groups += checked.refused
        items = len(groups) + sum(len(g.get("members", ())) for g in groups)
        return await offload.respond(ctx, {"groups": groups}, items)

    async def delete_groups(self, ctx: RequestContext):
        checked = self.authorization.delete_groups(ctx)
        ctx = checked.ctx
        results = self._ready().delete_groups(ctx.request.groups_names)
        return build_response(ctx, {"results": [{"group_id": g, "error_code": e} for g, e in results.items()]
                                    + checked.refused})


async def _partition_errors(topics, errors: dict[tuple[str, int], int], pacer: Pacer, names: list | None = None
                            ) -> tuple[list[dict[str, Any]], int]:
    """The answer's topics (each request topic with an error code per partition, in request order, named as the
    request named it: by name, or by id from OffsetCommit v10), and how many items they hold, made a slice at
    a time."""
    out = []
    items = 0
    for i, topic in enumerate(topics):
        name = topic.name if names is None else names[i]
        parts: list[dict[str, Any]] = []
        async for chunk in paced(topic.partitions, 512, pacer):
            parts += [{"partition_index": p.partition_index, "error_code": errors[(name, p.partition_index)]}
                      for p in chunk]
        out.append({"name": topic.name, "partitions": parts} if hasattr(topic, "name")
                   else {"topic_id": topic.topic_id or ZERO_UUID, "partitions": parts})
        items += 1 + len(parts)
    return out, items


def _image_name(controller: Controller) -> Callable[[uuid.UUID], str | None]:
    """A topic's name by its id from the metadata image (an assembly without a replica manager)."""
    def name(topic_id: uuid.UUID) -> str | None:
        topic = controller.image.topic_by_id(topic_id)
        return topic.name if topic is not None else None
    return name


_ENTRIES: dict[type, Callable[..., Any]] = {}


def _partition_entry(response_type: type) -> Callable[..., Any]:
    """The OffsetFetch response's partition class of this version, as a function of the coordinator's
    answer for a partition: kio objects made directly, with no dict per partition in between."""
    entry = _ENTRIES.get(response_type)
    if entry is None:
        hints = typing.get_type_hints(response_type)
        cls = response_type
        if "groups" in hints:  # v8+: groups, then topics
            cls = typing.get_args(hints["groups"])[0]
            hints = typing.get_type_hints(cls)
        topic_cls = typing.get_args(hints["topics"])[0]
        partition_cls = typing.get_args(typing.get_type_hints(topic_cls)["partitions"])[0]
        names = {f.name for f in dataclasses.fields(partition_cls)}
        errors = {code.value: code for code in ErrorCode}

        if "committed_leader_epoch" in names:
            def entry(*, error_code, **fields):
                return partition_cls(error_code=errors[error_code], **fields)
        else:  # v1-v4
            def entry(*, error_code, committed_leader_epoch, **fields):
                return partition_cls(error_code=errors[error_code], **fields)
        _ENTRIES[response_type] = entry
    return entry


async def _fetch_offsets(coordinator: GroupCoordinator, group_id: str, topics, require_stable: bool,
                         pacer: Pacer, entry: Callable[..., Any], names: list | None = None
                         ) -> tuple[int, list[tuple[str | uuid.UUID, list[Any]]]]:
    """``coordinator.fetch_offsets`` for the request's topics (None: every committed offset), a slice of
    partitions at a time, yielding to the event loop between slices of a big request. ``names`` are the
    topics' names (GroupApis._topic_keys); a topic id left unresolved answers UNKNOWN_TOPIC_ID."""
    if topics is None:
        return coordinator.fetch_offsets(group_id, None, require_stable, entry)
    out: list[tuple[str | uuid.UUID, list[Any]]] = []
    for i, t in enumerate(topics):
        name = t.name if names is None else names[i]
        answers: list[Any] = []
        if isinstance(name, uuid.UUID):  # as Kafka answers an unknown topic id
            out.append((name, [entry(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                                     error_code=UnknownTopicIdError.code) for p in t.partition_indexes]))
            continue
        async for chunk in paced(t.partition_indexes, 256, pacer):
            error, found = coordinator.fetch_offsets(group_id, [(name, chunk)], require_stable, entry)
            if error != NO_ERROR:
                return error, []
            answers += found[0][1]
        out.append((name, answers))
    return NO_ERROR, out
