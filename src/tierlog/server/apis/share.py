"""Share group APIs (KIP-932): ShareGroupHeartbeat v1, ShareGroupDescribe v1, ShareFetch v1-2, ShareAcknowledge
v1-2, DescribeShareGroupOffsets v0-1, AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0 (refused with
NON_EMPTY_GROUP while the group has members, as Kafka's).

Membership is :class:`~tierlog.coordinator.share.ShareGroupCoordinator`'s (on the broker a client finds with
FindCoordinator key type 0, as Kafka's share consumer does); each share-partition's delivery state is
:class:`~tierlog.coordinator.share.SharePartitionManager`'s on the partition's leader, persisted in
``__share_group_state``.

ShareFetch, as Kafka's ``KafkaApis.handleShareFetchRequest``:

1. The share session: epoch 0 opens one with the request's partitions (an initial request may not
   acknowledge: INVALID_REQUEST), -1 closes it (acknowledgements only), any other epoch must be the session's
   next (INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND); a later request adds its
   partitions and removes its forgotten ones.
2. Acknowledgements piggybacked on the request are applied first (per partition ``acknowledge_error_code``).
3. Each partition of the session is read through the replica manager's normal fetch path (both tiers, so
   records only in the remote tier are delivered too) from the share-partition's first AVAILABLE record or its
   end offset, and the records read are acquired for the member (:meth:`SharePartition.acquire`): at most
   ``MaxRecords`` in either ``ShareAcquireMode`` (v2), as Kafka 4.4's broker caps both, answered as acquired
   ranges of at most ``BatchSize`` records. Without anything acquired the request waits for appends, for
   acknowledgements or releases of other members, or for a lock to expire, up to ``MaxWaitMs``.
4. The answer holds the batches read and the acquired ranges with their delivery counts; an incremental
   session's answer leaves out partitions with nothing to say, as Kafka's does.

The ``share.version`` feature gates every API here through one check, :func:`share_groups_enabled`; at level 2 a
group with ``errors.deadletterqueue.topic.name`` sends the records it gives up on to its dead-letter queue
(KIP-1191): the share-partitions changed by an acknowledgement, a release or an expired lock hand their ARCHIVING
ranges to :class:`~tierlog.server.share_dlq.ShareGroupDlqWriter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.cluster.features import SHARE_VERSION
from tierlog.config.group_configs import (
    AUTO_OFFSET_RESET,
    DLQ_TOPIC_NAME,
    ISOLATION_LEVEL,
    RECORD_LOCK_DURATION_MS,
    group_config_value,
    parse_duration,
)
from tierlog.coordinator.share import (
    ShareConfig,
    ShareGroupCoordinator,
    SharePartitionManager,
    ShareSessionCache,
    ShareStateStore,
)
from tierlog.coordinator.share.records import SHARE_STATE_TOPIC
from tierlog.coordinator.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from tierlog.coordinator.share.share_coordinator import ShareCoordinator
from tierlog.errors import KafkaError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.records.batch import iter_batches
from tierlog.server.apis.share_state import ShareStateApis
from tierlog.server.fetch_types import FetchIsolation, FetchParams, PartitionFetch
from tierlog.server.network.listener_security import endpoint_for_client
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.share_dlq import ShareGroupDlqWriter
from tierlog.server.share_persister import SharePersister

log = logging.getLogger(__name__)

#: The longest a waiting ShareFetch goes without looking again (appends, acknowledgements and releases wake it
#: at once, an acquisition lock's expiry at its deadline).
MAX_IDLE_S = 1.0


def share_groups_enabled(controller: Controller) -> bool:
    """Kafka's ``share.version`` finalized at 1 or more (KIP-584; a new cluster finalizes 1, ``kafka-features
    disable --feature share.version`` turns share groups off): the one check every share group API makes,
    answering UNSUPPORTED_VERSION otherwise, as Kafka does."""
    return controller.finalized_level(SHARE_VERSION) >= 1


def _client_host(ctx: RequestContext) -> str:
    session = ctx.session
    return "/" + session.client_host if session is not None and session.client_host else ""


def group_config(controller: Controller, group_id: str, name: str) -> str:
    """The group's config ``name`` (GROUP resource, config/group_configs.py), or what it falls back to."""
    return group_config_value(controller.image.group_configs.get(group_id), name, controller.effective_config)


class ShareApis:
    def __init__(self, coordinator: ShareGroupCoordinator, manager: SharePartitionManager,
                 sessions: ShareSessionCache, replica_manager: ReplicaManager, controller: Controller,
                 node_id: int, authorizer=None, metrics=None, persister: SharePersister | None = None,
                 state_apis: ShareStateApis | None = None):
        self.coordinator = coordinator
        self.persister = persister
        self.state_apis = state_apis  # the share coordinator's RPCs (__share_group_state led here)
        self.manager = manager
        self.sessions = sessions
        self.rm = replica_manager
        self.controller = controller
        self.node_id = node_id
        self.authorizer = authorizer
        # Set and replaced whenever records may have become acquirable (acknowledged, released): wakes waiting
        # ShareFetch requests, whose acquisition may now pass max.record.locks or find released records.
        self._changed = asyncio.Event()
        coordinator.on_member_removed.append(self._member_removed)
        self.dlq = ShareGroupDlqWriter(replica_manager, controller, self._group_config, self._dlq_done, metrics)

    @classmethod
    def build(cls, cfg, controller: Controller, rm: ReplicaManager, offsets_log, node_id: int,
              authorizer=None, metrics=None) -> ShareApis:
        """The share group services of a broker: membership, the share-partitions and their state topic."""
        config = ShareConfig.from_broker_config(cfg)
        store = ShareStateStore(offsets_log, num_partitions=cfg["share.coordinator.state.topic.num.partitions"],
                                replication_factor=cfg["share.coordinator.state.topic.replication.factor"],
                                min_isr=cfg["share.coordinator.state.topic.min.isr"],
                                segment_bytes=cfg["share.coordinator.state.topic.segment.bytes"],
                                leader_epoch=lambda p: _leader_epoch(rm, SHARE_STATE_TOPIC, p))
        persister = SharePersister(store, controller, node_id)

        def partitions_of(topic_id: uuid.UUID) -> int | None:
            name = rm.topic_name(topic_id)
            topic = controller.image.topics.get(name) if name is not None else None
            return len(topic.partitions) if topic is not None else None

        state_apis = ShareStateApis(ShareCoordinator(store, partitions_of), lambda: True, authorizer)

        def topics() -> dict[str, tuple[uuid.UUID, int]]:
            return {name: (t.topic_id, len(t.partitions)) for name, t in controller.image.topics.items()
                    if not t.is_internal}

        coordinator = ShareGroupCoordinator(topics, session_timeout_ms=config.session_timeout_ms,
                                            heartbeat_interval_ms=config.heartbeat_interval_ms,
                                            max_size=config.max_size)

        def dlq_enabled(group_id: str) -> bool:
            """KIP-1191: share.version 2 and a DLQ topic named by the group (Kafka's isDLQEnabledForGroup)."""
            return controller.finalized_level(SHARE_VERSION) >= 2 and bool(
                group_config(controller, group_id, DLQ_TOPIC_NAME))

        return cls(coordinator, SharePartitionManager(config, persister, dlq_enabled),
                   ShareSessionCache(config.max_share_sessions), rm, controller, node_id, authorizer, metrics,
                   persister, state_apis)

    def register(self, registry) -> None:
        registry.register(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, self.share_group_heartbeat)
        registry.register(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, self.share_group_describe)
        registry.register(ApiKey.SHARE_FETCH, 1, 2, self.share_fetch)
        registry.register(ApiKey.SHARE_ACKNOWLEDGE, 1, 2, self.share_acknowledge)
        registry.register(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, self.describe_share_group_offsets)
        registry.register(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, self.alter_share_group_offsets)
        registry.register(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, self.delete_share_group_offsets)
        if self.state_apis is not None:
            self.state_apis.register(registry)

    async def close(self) -> None:
        """Stop the DLQ writer and the state writes queued for other brokers."""
        await self.dlq.close()
        if self.persister is not None:
            await self.persister.close()

    def tick(self) -> None:
        """Housekeeping: members whose session timed out leave, expired locks release their records."""
        self.coordinator.expire()
        for sp, topic_id in self.manager.expire_locks():
            self.dlq.submit(sp, topic_id)

    def _member_removed(self, group_id: str, member_id: str) -> None:
        self._close_session(group_id, member_id)

    def _close_session(self, group_id: str, member_id: str) -> None:
        """The member's share session ends (ShareFetch/ShareAcknowledge epoch -1, or it left the group): its
        records are released; the group's last session here drops its share-partitions from the cache."""
        self.sessions.close(group_id, member_id)
        self._release_member(group_id, member_id)
        if not self.sessions.has_group(group_id):
            self.manager.forget_group(group_id)
        self._wake()

    def _release_member(self, group_id: str, member_id: str) -> None:
        for sp, topic_id in self.manager.release_member(group_id, member_id):
            self.dlq.submit(sp, topic_id)

    def _dlq_done(self, sp, topic_id: uuid.UUID) -> None:
        """Records written to the DLQ (or given up on) are archived: persist, and wake fetches waiting for the
        start offset to move."""
        self._persist(sp, topic_id)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _group_config(self, group_id: str, name: str) -> str:
        return group_config(self.controller, group_id, name)

    def _lock_ms(self, group_id: str) -> int:
        return int(self._group_config(group_id, RECORD_LOCK_DURATION_MS))

    def _initial_offset(self, group_id: str, part) -> int:
        """Where a share-partition without state starts (Kafka's share.auto.offset.reset): the high watermark
        (latest), the log start (earliest), or the first record at or after now minus the duration (by_duration;
        the high watermark when there is none; local segments only)."""
        log_ = part.log
        reset = self._group_config(group_id, AUTO_OFFSET_RESET)
        if reset == "earliest":
            return max(log_.log_start_offset, 0)
        if reset.startswith("by_duration:"):
            duration = parse_duration(reset[len("by_duration:"):].strip())
            found = log_.fetch_offset_by_timestamp(int((time.time() - duration.total_seconds()) * 1000))
            return min(found.offset, log_.high_watermark) if found is not None else log_.high_watermark
        return log_.high_watermark

    def _allowed(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer is None or self.authorizer.authorize(ctx.session, op, rtype, name)

    # ------------------------------------------------------------------ membership

    async def share_group_heartbeat(self, ctx: RequestContext):
        req = ctx.request
        if not share_groups_enabled(self.controller):
            return build_response(ctx, error_code=ErrorCode.unsupported_version, member_epoch=-1,
                                  heartbeat_interval_ms=0, throttle_time_ms=0)
        if not self._allowed(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            return build_response(ctx, error_code=ErrorCode.group_authorization_failed, member_epoch=-1,
                                  heartbeat_interval_ms=0, throttle_time_ms=0)
        subscribed = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
        answer = self.coordinator.heartbeat(req.group_id, req.member_id, req.member_epoch, req.rack_id, subscribed,
                                            ctx.client_id or "", _client_host(ctx))
        return build_response(ctx, {**answer, "throttle_time_ms": 0})

    async def share_group_describe(self, ctx: RequestContext):
        names = self.rm.topic_names()
        groups = []
        for group_id in ctx.request.group_ids:
            if not self._allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                groups.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed,
                               "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                               "members": []})
                continue
            groups.append(self.coordinator.describe(group_id, names))
        return build_response(ctx, {"throttle_time_ms": 0, "groups": groups})

    # ------------------------------------------------------------------ fetch and acknowledge

    async def _acknowledge(self, group_id: str, member_id: str, topics) -> dict[tuple[uuid.UUID, int], int]:
        """Apply the acknowledgement batches of a request; the error code per partition acknowledged. Answered once
        the new state is written (to another broker's share coordinator too), as Kafka's acknowledgements are."""
        out: dict[tuple[uuid.UUID, int], int] = {}
        written = []
        for t in topics:
            for p in t.partitions:
                if not p.acknowledgement_batches:
                    continue
                key = (t.topic_id, p.partition_index)
                sp = self.manager.partitions.get((group_id, t.topic_id, p.partition_index))
                if sp is None:
                    out[key] = ErrorCode.invalid_record_state
                    continue
                code = ErrorCode.none
                for b in p.acknowledgement_batches:
                    code = sp.acknowledge(member_id, b.first_offset, b.last_offset, list(b.acknowledge_types))
                    if code != ErrorCode.none:
                        break
                out[key] = code
                self._persist(sp, t.topic_id)
                self.dlq.submit(sp, t.topic_id)
                written.append((key, sp, t.topic_id))
        if out:
            self._wake()
        for key, sp, topic_id in written:
            try:
                await self.manager.flush(sp, topic_id)
            except KafkaError as e:
                if out[key] == ErrorCode.none:
                    out[key] = e.code
        return out

    def _persist(self, sp, topic_id: uuid.UUID) -> None:
        p = self.rm.partitions.get((sp.topic, sp.partition))
        try:
            self.manager.persist(sp, topic_id, p.leader_epoch if p is not None else None)
        except KafkaError as e:  # the state stays in memory; the next change writes it again
            log.warning("Cannot write the share state of %s-%d for group %s: %s", sp.topic, sp.partition,
                        sp.group_id, e)

    def _session(self, req, epoch: int) -> ShareSession | int:
        if epoch == INITIAL_EPOCH:
            parts = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
            return self.sessions.open(req.group_id, req.member_id, parts)
        return self.sessions.check(req.group_id, req.member_id, epoch)

    def _refused(self, ctx: RequestContext):
        """The whole-request refusal of a ShareFetch or ShareAcknowledge (share groups off, no group or member,
        the group not readable), as a response; None when the request may go on."""
        req = ctx.request
        if not share_groups_enabled(self.controller):
            return _top_error(ctx, ErrorCode.unsupported_version, "Share groups are not enabled (share.version).")
        if not req.group_id or not req.member_id:
            return _top_error(ctx, ErrorCode.invalid_request, "GroupId and MemberId must be set.")
        if not self._allowed(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            return _top_error(ctx, ErrorCode.group_authorization_failed, "Not authorized to read the group.")
        return None

    async def share_fetch(self, ctx: RequestContext):
        req = ctx.request
        epoch = req.share_session_epoch
        group_id, member_id = req.group_id or "", req.member_id or ""

        refused = self._refused(ctx)
        if refused is not None:
            return refused
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        if epoch == INITIAL_EPOCH and has_acks:
            return _top_error(ctx, ErrorCode.invalid_request, "Acknowledge data present in the initial ShareFetch.")
        session = self._session(req, epoch)
        if isinstance(session, int):
            return _top_error(ctx, session, None)
        ack_errors = await self._acknowledge(group_id, member_id, req.topics) if has_acks else {}
        # v2's IsRenewAck: the request only renews (and acknowledges); nothing new is acquired (Kafka's rule)
        if epoch == FINAL_EPOCH or getattr(req, "is_renew_ack", False):
            if epoch == FINAL_EPOCH:
                self._close_session(group_id, member_id)
            else:
                self.sessions.advance(session)
            responses = self._group_by_topic(
                [((tid, p), {"acknowledge_error_code": code}) for (tid, p), code in ack_errors.items()])
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": ErrorCode.none,
                                        "acquisition_lock_timeout_ms": self._lock_ms(group_id),
                                        "responses": responses, "node_endpoints": []})
        if epoch != INITIAL_EPOCH:
            for t in req.topics:
                for p in t.partitions:
                    session.partitions[(t.topic_id, p.partition_index)] = None
            for f in req.forgotten_topics_data:
                for p in f.partitions:
                    session.partitions.pop((f.topic_id, p), None)
            self.sessions.advance(session)
        max_records = max(getattr(req, "max_records", 500) or 500, 1)
        batch_size = max(getattr(req, "batch_size", 0) or max_records, 1)
        max_bytes = min(req.max_bytes, self.controller.effective_config["fetch.max.bytes"])
        results = await self._fetch(ctx, group_id, member_id, list(session.partitions), max_records, batch_size,
                                    max_bytes, max(req.max_wait.total_seconds(), 0))
        entries = []
        node_endpoints: dict[int, dict] = {}
        for key, data in results.items():
            if key in ack_errors:
                data["acknowledge_error_code"] = ack_errors.pop(key)
            if epoch != INITIAL_EPOCH and not (data.get("acquired_records") or data.get("error_code")
                                               or "acknowledge_error_code" in data):
                continue  # an incremental answer names only what changed
            if data.get("error_code") == ErrorCode.not_leader_or_follower:
                leader = data["current_leader"]["leader_id"]
                broker = self.controller.image.brokers.get(leader)
                if broker is not None:
                    host, port = endpoint_for_client(broker, ctx)
                    node_endpoints[leader] = {"node_id": leader, "host": host, "port": port, "rack": broker.rack}
            entries.append((key, data))
        entries.extend(((tid, p), {"acknowledge_error_code": code}) for (tid, p), code in ack_errors.items())
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": ErrorCode.none,
                                    "acquisition_lock_timeout_ms": self._lock_ms(group_id),
                                    "responses": self._group_by_topic(entries),
                                    "node_endpoints": list(node_endpoints.values())})

    @staticmethod
    def _group_by_topic(entries: list) -> list[dict]:
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), data in entries:
            topics.setdefault(tid, []).append({
                "partition_index": p, "error_code": data.get("error_code", ErrorCode.none),
                "error_message": data.get("error_message"),
                "acknowledge_error_code": data.get("acknowledge_error_code", ErrorCode.none),
                "current_leader": data.get("current_leader", {"leader_id": -1, "leader_epoch": -1}),
                "records": data.get("records", b""), "acquired_records": data.get("acquired_records", [])})
        return [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]

    async def _fetch(self, ctx: RequestContext, group_id: str, member_id: str, partitions: list,
                     max_records: int, batch_size: int, max_bytes: int, max_wait_s: float) -> dict:
        deadline = time.monotonic() + max_wait_s
        while True:
            changed = self._changed
            results, led = await self._acquire_round(ctx, group_id, member_id, partitions, max_records,
                                                     batch_size, max_bytes)
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0 or any(r.get("acquired_records") or r.get("error_code") for r in results.values()):
                return results
            # Nothing to deliver yet: wait for an append, an acknowledgement or release, or a lock's expiry
            expiry = min((sp.next_expiry for (g, _t, _p), sp in self.manager.partitions.items() if g == group_id),
                         default=float("inf"))
            timeout = min(remaining, MAX_IDLE_S, max(expiry - now, 0.001))
            if changed.is_set():
                continue
            appended = asyncio.ensure_future(self.rm.wait_for_data(led, timeout, ctx.timing))
            woken = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait((appended, woken), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (appended, woken):
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task

    async def _acquire_round(self, ctx: RequestContext, group_id: str, member_id: str, partitions: list,
                             max_records: int, batch_size: int, max_bytes: int) -> tuple[dict, list]:
        results: dict[tuple[uuid.UUID, int], dict] = {}
        led: list[tuple[str, int]] = []
        left_records, left_bytes = max_records, max_bytes
        for tid, index in partitions:
            key = (tid, index)
            name = self.rm.topic_name(tid)
            if name is None:
                results[key] = {"error_code": ErrorCode.unknown_topic_id}
                continue
            if not self._allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
                results[key] = {"error_code": ErrorCode.topic_authorization_failed}
                continue
            try:
                part = self.rm.get_partition(name, index)
            except KafkaError as e:
                # Not led here (any more): a share-partition kept from an earlier leadership would be stale when
                # leadership comes back; the persisted state is read again then.
                self.manager.forget(tid, index)
                hosted = self.controller.image.topics.get(name)
                leader = hosted.partitions[index].leader if hosted and index in hosted.partitions else -1
                epoch = hosted.partitions[index].leader_epoch if hosted and index in hosted.partitions else -1
                results[key] = {"error_code": e.code, "error_message": e.message,
                                "current_leader": {"leader_id": leader, "leader_epoch": epoch}}
                continue
            current = {"leader_id": self.node_id, "leader_epoch": part.leader_epoch}
            results[key] = {"current_leader": current}
            led.append((name, index))
            try:
                sp = await self.manager.get(group_id, tid, name, index,
                                            lambda p=part: self._initial_offset(group_id, p),
                                            leader_epoch=part.leader_epoch, lock_duration_ms=self._lock_ms(group_id))
            except KafkaError as e:  # its persisted state cannot be read now: the client retries
                results[key] = {"error_code": e.code, "error_message": e.message, "current_leader": current}
                continue
            sp.reset_to_log_start(part.log.log_start_offset if part.log.log_start_offset >= 0 else 0)
            self.dlq.submit(sp, tid)  # ARCHIVING records of a reloaded state, or past the limit by an expiry
            if left_records <= 0 or left_bytes <= 0 or not sp.can_acquire():
                continue
            offset = sp.next_fetch_offset()
            # share.isolation.level read_committed: up to the last stable offset, aborted transactions archived
            committed = self._group_config(group_id, ISOLATION_LEVEL) == "read_committed"
            if offset >= (part.log.last_stable_offset if committed else part.log.high_watermark):
                continue
            read = await self.rm.fetch_messages(
                FetchParams(-1, 0, 0, left_bytes,
                            FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK),
                [PartitionFetch(name, index, offset, left_bytes)], ctx.timing)
            r = read[0]
            if r.error_code:
                results[key] = {"error_code": r.error_code, "current_leader": current}
                continue
            records = r.records
            data = records.read() if hasattr(records, "read") else bytes(records)
            if not data:
                continue
            batches, ends, aborted = [], [], set()
            # the consumer's rule for aborted batches: a producer's aborted transaction runs from its first offset
            # to the producer's next control batch (its ABORT marker)
            pending = sorted((first, pid) for pid, first in (r.aborted_transactions or ()))
            aborting: set[int] = set()
            for pos, h in iter_batches(memoryview(data)):
                batches.append((h.base_offset, h.last_offset))
                ends.append(pos + h.size)
                while pending and pending[0][0] <= h.last_offset:
                    aborting.add(pending.pop(0)[1])
                if committed and h.is_transactional and h.producer_id in aborting:
                    if h.is_control:
                        aborting.discard(h.producer_id)
                    else:
                        aborted.add((h.base_offset, h.last_offset))
            acquired = sp.acquire(member_id, batches, left_records, frozenset(aborted))
            self.dlq.submit(sp, tid)  # next_fetch_offset's expiry may have sent records past the limit there
            if not acquired:
                continue
            last = acquired[-1].last_offset
            # Send the batches up to the one holding the last acquired record, not what was read past it
            for (_base, last_off), end in zip(batches, ends):
                if last_off >= last:
                    data = data[:end]
                    break
            left_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            left_bytes -= len(data)
            # Acquired ranges of at most BatchSize records: the client hands out (and acknowledges) one at a time
            results[key] = {"current_leader": current, "records": data, "acquired_records": [
                {"first_offset": first, "last_offset": min(first + batch_size - 1, a.last_offset),
                 "delivery_count": a.delivery_count}
                for a in acquired for first in range(a.first_offset, a.last_offset + 1, batch_size)]}
        return results, led

    async def share_acknowledge(self, ctx: RequestContext):
        req = ctx.request
        epoch = req.share_session_epoch
        group_id, member_id = req.group_id or "", req.member_id or ""

        refused = self._refused(ctx)
        if refused is not None:
            return refused
        if epoch == INITIAL_EPOCH:
            return _top_error(ctx, ErrorCode.invalid_share_session_epoch,
                              "ShareAcknowledge cannot open a share session.")
        session = self.sessions.check(group_id, member_id, epoch)
        if isinstance(session, int):
            return _top_error(ctx, session, None)
        errors = await self._acknowledge(group_id, member_id, req.topics)
        if epoch == FINAL_EPOCH:
            self._close_session(group_id, member_id)
        else:
            self.sessions.advance(session)
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), code in errors.items():
            part = self.rm.partitions.get((self.rm.topic_name(tid), p))
            topics.setdefault(tid, []).append({
                "partition_index": p, "error_code": code,
                "current_leader": {"leader_id": self.node_id if part else -1,
                                   "leader_epoch": part.leader_epoch if part else -1}})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": ErrorCode.none,
                                    "acquisition_lock_timeout_ms": self._lock_ms(group_id),
                                    "responses": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                                    "node_endpoints": []})

    # ------------------------------------------------------------------ offsets

    async def describe_share_group_offsets(self, ctx: RequestContext):
        image = self.controller.image
        groups = []
        for g in ctx.request.groups:
            if not self._allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
                groups.append({"group_id": g.group_id, "topics": [],
                               "error_code": ErrorCode.group_authorization_failed, "error_message": None})
                continue
            if g.topics is None:  # every partition the group has state for here
                wanted: dict[str, list[int]] = {}
                for (_group, tid, p) in self.manager.group_partitions(g.group_id):
                    name = self.rm.topic_name(tid)
                    if name is not None:
                        wanted.setdefault(name, []).append(p)
            else:
                wanted = {t.topic_name: list(t.partitions) for t in g.topics}
            topics = []
            for name, parts in wanted.items():
                t = image.topics.get(name)
                entries = []
                for p in sorted(parts):
                    if t is None or p not in t.partitions:
                        entries.append({"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                                        "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None})
                        continue
                    try:
                        start = await self.manager.start_offset(g.group_id, t.topic_id, p)
                    except KafkaError as e:
                        entries.append({"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                                        "error_code": e.code, "error_message": e.message})
                        continue
                    sp = self.manager.partitions.get((g.group_id, t.topic_id, p))
                    hosted = self.rm.partitions.get((name, p))
                    lag = -1
                    if start is not None and hosted is not None:
                        done = sp.delivery_complete_count() if sp is not None else 0
                        lag = max(hosted.log.high_watermark - start - done, 0)
                    entries.append({"partition_index": p, "start_offset": start if start is not None else -1,
                                    "leader_epoch": hosted.leader_epoch if hosted is not None else -1,
                                    "lag": lag, "error_code": ErrorCode.none, "error_message": None})
                topics.append({"topic_name": name, "topic_id": t.topic_id if t is not None else uuid.UUID(int=0),
                               "partitions": entries})
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": ErrorCode.none,
                           "error_message": None})
        return build_response(ctx, {"throttle_time_ms": 0, "groups": groups})

    def _offsets_refusal(self, ctx: RequestContext, group_id: str, op: AclOperation) -> tuple[int, str] | None:
        """Kafka's checks before a share group's offsets change: allowed, share groups on, no member."""
        if not share_groups_enabled(self.controller):
            return ErrorCode.unsupported_version, "Share groups are not enabled (share.version)."
        if not self._allowed(ctx, op, ResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed, "Not authorized to alter the group."
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group, "The group is not empty."
        return None

    async def alter_share_group_offsets(self, ctx: RequestContext):
        req = ctx.request
        image = self.controller.image
        refused = self._offsets_refusal(ctx, req.group_id, AclOperation.READ)
        topics = []
        for t in req.topics:
            known = image.topics.get(t.topic_name)
            parts = []
            for p in t.partitions:
                code, message = (refused if refused else (ErrorCode.none, None))
                if refused is None:
                    if known is None or p.partition_index not in known.partitions:
                        code, message = ErrorCode.unknown_topic_or_partition, "Unknown topic or partition."
                    elif p.start_offset < 0:
                        code, message = ErrorCode.invalid_request, "The start offset must not be negative."
                    else:
                        try:
                            await self.manager.alter(req.group_id, known.topic_id, t.topic_name, p.partition_index,
                                               p.start_offset)
                        except KafkaError as e:
                            code, message = e.code, e.message
                parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
            topics.append({"topic_name": t.topic_name, "topic_id": known.topic_id if known else uuid.UUID(int=0),
                           "partitions": parts})
        if refused is None:
            self._wake()
        code, message = refused if refused else (ErrorCode.none, None)
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                                    "responses": topics})

    async def delete_share_group_offsets(self, ctx: RequestContext):
        req = ctx.request
        image = self.controller.image
        refused = self._offsets_refusal(ctx, req.group_id, AclOperation.DELETE)
        if refused is not None:
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": refused[0],
                                        "error_message": refused[1], "responses": []})
        topics = []
        for t in req.topics:
            known = image.topics.get(t.topic_name)
            if known is None:
                topics.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0),
                               "error_code": ErrorCode.unknown_topic_or_partition,
                               "error_message": "Unknown topic or partition."})
                continue
            code, message = ErrorCode.none, None
            try:
                await self.manager.delete(req.group_id, known.topic_id, sorted(known.partitions))
            except KafkaError as e:
                code, message = e.code, e.message
            topics.append({"topic_name": t.topic_name, "topic_id": known.topic_id, "error_code": code,
                           "error_message": message})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": ErrorCode.none, "error_message": None,
                                    "responses": topics})


def _leader_epoch(rm: ReplicaManager, topic: str, partition: int) -> int | None:
    """This broker's leader epoch of the partition; None when it does not lead it."""
    p = rm.partitions.get((topic, partition))
    return p.leader_epoch if p is not None and rm.leads(p) else None


def _top_error(ctx: RequestContext, code: int, message: str | None):
    """A ShareFetch or ShareAcknowledge answer with a top-level error and no partitions (their fields are alike)."""
    return build_response(ctx, {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []})
