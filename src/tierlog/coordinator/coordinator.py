"""The group coordinator for the classic consumer group protocol, and committed offsets.

Behaviour follows Kafka's new group coordinator for classic groups (``GroupMetadataManager``'s
``classicGroup*`` methods, ``OffsetMetadataManager``, ``GroupCoordinatorService`` validations):

- JoinGroup: session timeout bounds (INVALID_SESSION_TIMEOUT), KIP-394 (v4+ dynamic members get a
  member id with MEMBER_ID_REQUIRED and become *pending*), KIP-345 static members (a rejoin with a
  known ``group.instance.id`` replaces and fences the old member id), ``group.max.size``, the delayed
  first rebalance of an empty group (``group.initial.rebalance.delay.ms``, extended while new members
  keep arriving, bounded by the rebalance timeout), rebalance timeouts that drop members which did
  not rejoin, leader election and protocol selection by votes.
- SyncGroup: followers wait for the leader; the leader's assignment is written to
  ``__consumer_offsets`` (GroupMetadata record) before anyone gets it; members that never sync
  within the rebalance timeout are removed and the group rebalances again.
- Heartbeat, LeaveGroup (batched, by member id or group instance id), session expiry.
- OffsetCommit (simple consumers may commit to a missing or empty group with generation -1),
  OffsetFetch (all partitions when topics is null), OffsetDelete, ListGroups, DescribeGroups, DeleteGroups,
  offset retention (``offsets.retention.minutes``) and removal of offsets of deleted topics.

Everything runs on the broker's event loop without blocking: operations are synchronous state
changes plus a synchronous append to the local log; answers that must wait (JoinGroup, SyncGroup)
are delivered later through the responder the caller passed. Time-based work (session, rebalance
and sync timeouts, the initial delay, retention) runs from a :class:`KeyedTimer`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.coordinator.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupError,
    GroupState,
    Member,
    Responder,
)
from tierlog.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from tierlog.coordinator.storage import RecordStore
from tierlog.coordinator.timer import KeyedTimer, monotonic_ms
from tierlog.errors import KafkaError

log = logging.getLogger(__name__)

__all__ = ["CoordinatorConfig", "GroupCoordinator", "OffsetAndMetadata", "map_append_error"]

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = INT32_MAX
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000

    @classmethod
    def from_broker_config(cls, cfg) -> CoordinatorConfig:
        def get(key: str, default: int) -> int:
            try:
                return int(cfg[key])
            except KeyError:
                return default

        return cls(
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", 3000),
            min_session_timeout_ms=get("group.min.session.timeout.ms", 6000),
            max_session_timeout_ms=get("group.max.session.timeout.ms", 1_800_000),
            max_group_size=get("group.max.size", INT32_MAX),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", 4096),
            offsets_retention_ms=get("offsets.retention.minutes", 10080) * 60 * 1000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms", 600_000),
        )


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1   # only from OffsetCommit v2-v4 with a retention time


def map_append_error(error: KafkaError | int) -> ErrorCode:
    """Kafka's translation of a failed ``__consumer_offsets`` write into the error clients get."""
    code = E(error if isinstance(error, int) else error.code)
    if code in (E.unknown_topic_or_partition, E.not_enough_replicas, E.request_timed_out):
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.unknown_server_error
    return code


def _java_length(s: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _join_key(group_id: str) -> tuple:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


_CLEANUP_KEY = ("offsets-cleanup",)


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig, store: RecordStore, *,
                 wall_clock: Callable[[], int] | None = None, timer_clock: Callable[[], int] = monotonic_ms):
        self.config = config
        self.store = store
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))
        self.timer = KeyedTimer(timer_clock)
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.active = False
        self.loaded = False
        self._timer_task: asyncio.Task | None = None

    # ================================================================== lifecycle

    def ensure_loaded(self) -> None:
        """Load on first use (a request may arrive before the broker's ready callback ran)."""
        if not self.loaded:
            try:
                self.load()
            except Exception:  # noqa: BLE001 - the coordinator stays unavailable, the broker keeps running
                log.exception("Loading __consumer_offsets failed; the group coordinator is not available")

    def load(self) -> None:
        """Rebuild groups and offsets from ``__consumer_offsets`` and start serving."""
        self.loaded = True
        self.groups.clear()
        self.offsets.clear()
        self.timer.clear()
        count = 0
        for _partition, (key_bytes, value_bytes) in self.store.read_all():
            count += 1
            try:
                key = decode_key(key_bytes)
                if isinstance(key, UnknownKey):
                    continue
                value = decode_value(key, value_bytes)
            except RecordFormatError as e:
                log.warning("Skipping a malformed %s record: %s", "__consumer_offsets", e)
                continue
            if isinstance(key, OffsetCommitKey):
                self._replay_offset(key, value)
            else:
                self._replay_group(key, value)
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_group_size:
                self._prepare_rebalance(group, "freshly loaded group is over capacity")
        self._schedule_cleanup()
        self.active = True
        if count:
            log.info("Loaded %d group(s) and the offsets of %d group(s) from %d record(s)",
                     len(self.groups), len(self.offsets), count)

    async def start(self) -> None:
        """:meth:`load` (once), then fire timers on time from a task of the running loop."""
        self.ensure_loaded()
        if self._timer_task is None and self.active:
            self._timer_task = asyncio.get_running_loop().create_task(self.timer.run(), name="group-coordinator-timer")

    def tick(self) -> None:
        """Run due timers (the broker's housekeeping calls this; the timer task usually got there first)."""
        if self.active:
            self.timer.poll()

    async def shutdown(self) -> None:
        """Answer parked requests with NOT_COORDINATOR (Kafka's ``onUnloaded``) and stop."""
        self.active = False
        if self._timer_task is not None:
            self._timer_task.cancel()
            try:
                await self._timer_task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._timer_task = None
        self.timer.clear()
        for group in list(self.groups.values()):
            group.complete_all_joins(E.not_coordinator)
            group.complete_all_syncs(E.not_coordinator)
            group.transition_to(DEAD, self.wall_clock())
        self.groups.clear()
        self.offsets.clear()

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.store.num_partitions())

    # ================================================================== persistence

    def _append(self, group_id: str, records: list[tuple[Any, Any]]) -> None:
        """Write (key, value-or-None) records of one group's partition; raises KafkaError."""
        self.store.append(self.partition_for(group_id),
                          [(encode_key(k), encode_value(v)) for k, v in records])

    def _group_metadata_value(self, group: ClassicGroup, assignment: dict[str, bytes]) -> GroupMetadataValue:
        members = []
        for m in group.members.values():
            members.append(MemberMetadata(
                member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
                assignment=assignment.get(m.member_id, b""), rebalance_timeout=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id))
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id, protocol=group.protocol_name,
            leader=group.leader_id, current_state_timestamp=group.current_state_timestamp or -1,
            members=tuple(members))

    def _write_group(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        value = self._group_metadata_value(group, assignment)
        self._append(group.group_id, [(GroupMetadataKey(group.group_id), value)])

    def _replay_offset(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is not None:
            if key.group not in self.groups:
                # Offsets without group metadata: a "simple" group (no membership), as Kafka does.
                self.groups[key.group] = ClassicGroup(key.group, EMPTY, now_ms=self.wall_clock())
            self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
                value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)
        else:
            offsets = self.offsets.get(key.group)
            if offsets is not None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self.offsets[key.group]

    def _replay_group(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            self._drop_group(key.group)
            return
        group = ClassicGroup(
            key.group, STABLE if value.members else EMPTY,
            now_ms=value.current_state_timestamp, generation_id=value.generation,
            protocol_type=value.protocol_type or None, protocol_name=value.protocol, leader_id=value.leader)
        for m in value.members:
            group.restore(Member(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout if m.rebalance_timeout != -1 else m.session_timeout,
                session_timeout_ms=m.session_timeout, protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", m.subscription)], assignment=m.assignment))
        group.subscribed_topics = group.compute_subscribed_topics()
        old = self.groups.get(key.group)
        if old is not None:
            self._cancel_group_timers(old)
        self.groups[key.group] = group

    def _drop_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            self._cancel_group_timers(group)
            if not group.is_in(DEAD):
                group.transition_to(DEAD, self.wall_clock())

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        self.timer.cancel(_join_key(group.group_id))
        self.timer.cancel(_sync_key(group.group_id))
        for member_id in list(group.members) + list(group.pending_join_members):
            self.timer.cancel(_heartbeat_key(group.group_id, member_id))

    # ================================================================== JoinGroup

    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                   protocols: Iterable[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str, api_version: int, respond: Responder,
                   reason: str | None = None) -> None:
        """Handle a JoinGroup; ``respond`` gets the answer now or when the join phase completes."""
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        if not self.active:
            return respond({"member_id": member_id, "error_code": E.coordinator_not_available})
        if not group_id:
            return respond({"member_id": member_id, "error_code": E.invalid_group_id})
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return respond({"member_id": member_id, "error_code": E.invalid_session_timeout})
        if api_version == 0:
            rebalance_timeout_ms = session_timeout_ms  # v0 has none; Kafka uses the session timeout
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return respond({"member_id": member_id, "error_code": E.unknown_member_id})
            group = ClassicGroup(group_id, EMPTY, now_ms=self.wall_clock())
            try:
                # Kafka commits a new group with an empty GroupMetadata record.
                self._write_group(group, {})
            except KafkaError as e:
                log.warning("Failed to write empty metadata for new group %s: %s", group_id, e)
                return respond({"member_id": member_id, "error_code": map_append_error(e)})
            self.groups[group_id] = group
        request = _JoinRequest(member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
                               rebalance_timeout_ms, client_id, client_host, api_version, reason)
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self.timer.cancel(_heartbeat_key(group_id, member_id))
            respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": E.group_max_size_reached})
        elif is_unknown:
            self._join_new_member(group, request, respond)
        else:
            self._join_existing_member(group, request, respond)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_group_size
        if group.is_in(EMPTY, DEAD):
            return True
        if group.is_in(PREPARING):
            return (group.has_member(member_id) and group.member(member_id).is_awaiting_join) or \
                group.num_awaiting_join < limit
        return group.has_member(member_id) or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: _JoinRequest, respond: Responder) -> None:
        if group.is_in(DEAD):
            return respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": E.coordinator_not_available})
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": E.inconsistent_group_protocol})
        new_member_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info("Static member %s of group %s rejoins with an unknown member id; replacing %s by %s",
                         req.group_instance_id, group.group_id, existing, new_member_id)
                return self._update_static_member_then_rebalance(group, req, existing, new_member_id, respond)
            return self._add_member_then_rebalance(group, req, new_member_id, respond)
        if req.api_version >= 4:
            # KIP-394: hand out the member id and wait for the member to come back with it.
            group.add_pending_member(new_member_id)
            self.timer.schedule(_heartbeat_key(group.group_id, new_member_id), req.session_timeout_ms,
                                self._heartbeat_expiry(group.group_id, new_member_id))
            return respond({"member_id": new_member_id, "error_code": E.member_id_required})
        self._add_member_then_rebalance(group, req, new_member_id, respond)

    def _join_existing_member(self, group: ClassicGroup, req: _JoinRequest, respond: Responder) -> None:
        member_id = req.member_id
        if group.is_in(DEAD):
            return respond({"member_id": member_id, "error_code": E.coordinator_not_available})
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return respond({"member_id": member_id, "error_code": E.inconsistent_group_protocol})
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                log.error("JoinGroup with group instance id %s for pending member %s of group %s",
                          req.group_instance_id, member_id, group.group_id)
                return respond({"member_id": member_id, "error_code": E.unknown_server_error})
            return self._add_member_then_rebalance(group, req, member_id, respond)
        try:
            group.validate_member(member_id, req.group_instance_id)
        except GroupError as e:
            return respond({"member_id": member_id, "error_code": e.code, "protocol_type": None,
                            "protocol_name": None})
        member = group.member(member_id)
        if group.is_in(PREPARING):
            return self._update_member_then_rebalance(group, member, req, respond)
        if group.is_in(COMPLETING):
            if member.matches(req.protocols):
                # Same metadata (the member probably missed our answer): repeat this generation's answer.
                return respond(self._join_answer(group, member_id, with_members=group.is_leader(member_id)))
            return self._update_member_then_rebalance(group, member, req, respond)
        if group.is_in(STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A leader's JoinGroup forces a rebalance (e.g. for topic metadata changes).
                return self._update_member_then_rebalance(group, member, req, respond)
            return respond(self._join_answer(group, member_id, with_members=False))
        log.warning("Member %s rejoins group %s in unexpected state %s", member_id, group.group_id, group.state)
        respond({"member_id": member_id, "error_code": E.unknown_member_id})

    def _join_answer(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                     skip_assignment: bool = False, leader: str | None = None) -> dict[str, Any]:
        return {
            "error_code": E.none,
            "members": group.current_member_metadata() if with_members else [],
            "member_id": member_id,
            "generation_id": group.generation_id,
            "protocol_name": group.protocol_name,
            "protocol_type": group.protocol_type,
            "leader": group.leader_id if leader is None else leader,
            "skip_assignment": skip_assignment,
        }

    def _add_member_then_rebalance(self, group: ClassicGroup, req: _JoinRequest, member_id: str,
                                   respond: Responder) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True)
        if group.is_in(PREPARING) and group.previous_state is EMPTY:
            group.new_member_added = True  # lets the initial rebalance wait a bit longer
        group.add(member, respond)
        # A new member cannot heartbeat while its JoinGroup is parked: bound the wait instead.
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding new member {member_id} with group instance id {req.group_instance_id}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_member_then_rebalance(self, group: ClassicGroup, member: Member, req: _JoinRequest,
                                      respond: Responder) -> None:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} joins during {group.state}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_static_member_then_rebalance(self, group: ClassicGroup, req: _JoinRequest, old_member_id: str,
                                             new_member_id: str, respond: Responder) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
        self.timer.cancel(_heartbeat_key(group.group_id, old_member_id))
        self._reschedule_heartbeat(group, member)
        old_settings = (list(member.protocols), member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        if group.is_in(STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # The selected protocol stays: persist the new member id, no rebalance.
                try:
                    self._write_group(group, group.assignments())
                except KafkaError as e:
                    log.warning("Failed to persist static member %s of group %s (%s); reverting to %s",
                                new_member_id, group.group_id, e, old_member_id)
                    group.update_member(member, *old_settings, None)
                    old = group.replace_static_member(req.group_instance_id, new_member_id, old_member_id)
                    self.timer.cancel(_heartbeat_key(group.group_id, new_member_id))
                    self._reschedule_heartbeat(group, old)
                    return respond({"error_code": map_append_error(e), "member_id": UNKNOWN_MEMBER_ID,
                                    "generation_id": group.generation_id, "protocol_name": group.protocol_name,
                                    "protocol_type": group.protocol_type, "leader": current_leader})
                if req.api_version >= 9:
                    is_leader = group.is_leader(new_member_id)
                    group.complete_join(member, self._join_answer(group, new_member_id, with_members=is_leader,
                                                                  skip_assignment=is_leader))
                else:
                    group.complete_join(member, self._join_answer(group, new_member_id, with_members=False,
                                                                  leader=current_leader))
                return None
            return self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {new_member_id} rejoined with a change of protocol")
        if group.is_in(COMPLETING):
            # The leader may already be assigning with the old member id: rebalance again.
            return self._prepare_rebalance(group, f"static member {new_member_id} rejoined during {group.state}")
        self._maybe_complete_join_phase(group)

    # ------------------------------------------------------------------ rebalance machinery

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(COMPLETING):
            self._reset_and_propagate_assignment(group, E.rebalance_in_progress)
        self._remove_sync_expiration(group)
        initial = group.is_in(EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timer.schedule(_join_key(group.group_id), delay,
                                lambda: self._try_complete_initial_rebalance(group.group_id, delay, remaining))
        group.transition_to(PREPARING, self.wall_clock())
        log.info("Preparing to rebalance group %s with old generation %d (reason: %s)",
                 group.group_id, group.generation_id, reason)
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            group_id = group.group_id
            self.timer.schedule(_join_key(group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(_join_key(group_id), new_delay,
                                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(PREPARING):
            return
        if group.previous_state is EMPTY:
            return  # the initial rebalance completes from its timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self.timer.cancel(_join_key(group_id))
        missing = [m for m in group.not_yet_rejoined() if not m.is_static]
        for m in missing:
            group.remove(m.member_id)
            self.timer.cancel(_heartbeat_key(group_id, m.member_id))
        if missing:
            log.info("Group %s removed dynamic members who did not rejoin: %s", group_id,
                     [m.member_id for m in missing])
        if group.is_in(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined yet: wait another rebalance timeout (session expiry will clean up).
            log.error("Group %s could not complete rebalance because no members rejoined", group_id)
            self.timer.schedule(_join_key(group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))
            return
        group.init_next_generation(self.wall_clock())
        if group.is_in(EMPTY):
            log.info("Group %s with generation %d is now empty", group_id, group.generation_id)
            try:
                self._write_group(group, {})
            except KafkaError as e:
                log.warning("Failed to write empty metadata for group %s: %s", group_id, e)
            return
        log.info("Stabilized group %s generation %d (%d members, protocol %s)", group_id, group.generation_id,
                 len(group.members), group.protocol_name)
        for member in list(group.members.values()):
            group.complete_join(member, self._join_answer(group, member.member_id,
                                                          with_members=group.is_leader(member.member_id)))
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self.timer.schedule(_sync_key(group_id), group.rebalance_timeout_ms(),
                            lambda: self._expire_pending_sync(group_id, generation))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or generation_id != group.generation_id:
            return
        if group.is_in(COMPLETING, STABLE) and group.pending_sync_members:
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                group.remove(member_id)
                self.timer.cancel(_heartbeat_key(group_id, member_id))
            self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timer.cancel(_sync_key(group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(DEAD, EMPTY, PREPARING) or not group.pending_sync_members:
            self.timer.cancel(_sync_key(group.group_id))

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, E.none)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == E.none
        for m in list(group.members.values()):
            answer = {"error_code": error, "assignment": m.assignment,
                      "protocol_type": group.protocol_type if ok else None,
                      "protocol_name": group.protocol_name if ok else None}
            if group.complete_sync(m, answer):
                # Sessions restart once the assignment is out (expiries while waiting were ignored).
                self._reschedule_heartbeat(group, m)

    # ------------------------------------------------------------------ heartbeats and expiry

    def _heartbeat_expiry(self, group_id: str, member_id: str) -> Callable[[], None]:
        return lambda: self._expire_heartbeat(group_id, member_id)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        self.timer.schedule(_heartbeat_key(group.group_id, member.member_id),
                            member.session_timeout_ms if timeout_ms is None else timeout_ms,
                            self._heartbeat_expiry(group.group_id, member.member_id))

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("Pending member %s of group %s expired", member_id, group_id)
            group.remove(member_id)
            if group.is_in(PREPARING) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("Member %s of group %s failed (session timeout), removing it", member_id, group_id)
        self._remove_member_and_update_group(group, member, "heartbeat expiration")

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        group.complete_join(member, {"member_id": UNKNOWN_MEMBER_ID, "error_code": E.unknown_member_id})
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING):
            self._maybe_prepare_rebalance_or_complete_join(group, f"removing member {member.member_id} on {reason}")
        elif group.is_in(PREPARING) and group.has_all_members_joined():
            self._complete_join(group)

    # ================================================================== SyncGroup

    def sync_group(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Iterable[tuple[str, bytes]], respond: Responder) -> None:
        if not self.active:
            return respond({"error_code": E.coordinator_not_available})
        if not group_id:
            return respond({"error_code": E.invalid_group_id})
        group = self.groups.get(group_id)
        if group is None or group.is_empty:
            return respond({"error_code": E.unknown_member_id})
        error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error is not None:
            return respond({"error_code": error})
        if group.is_in(PREPARING):
            return respond({"error_code": E.rebalance_in_progress})
        if group.is_in(STABLE):
            self._remove_pending_sync_member(group, member_id)
            return respond({"error_code": E.none, "protocol_type": group.protocol_type,
                            "protocol_name": group.protocol_name, "assignment": group.member(member_id).assignment})
        # CompletingRebalance: park until the leader's assignment is stored.
        group.member(member_id).sync_responder = respond
        self._remove_pending_sync_member(group, member_id)
        if not group.is_leader(member_id):
            return None
        assignment = {mid: bytes(data) for mid, data in assignments}
        missing = [mid for mid in group.members if mid not in assignment]
        for mid in missing:
            assignment[mid] = b""
        if missing:
            log.warning("Empty assignments for members %s of group %s generation %d", missing, group_id,
                        group.generation_id)
        try:
            self._write_group(group, assignment)
        except KafkaError as e:
            if group.is_in(COMPLETING) and generation_id == group.generation_id:
                error = map_append_error(e)
                log.warning("Failed to store the assignment of group %s: %s", group_id, e)
                self._reset_and_propagate_assignment(group, error)
                self._maybe_prepare_rebalance_or_complete_join(group, f"error {error.name} storing the assignment")
            return None
        if group.is_in(COMPLETING) and generation_id == group.generation_id:
            self._set_and_propagate_assignment(group, assignment)
            group.transition_to(STABLE, self.wall_clock())
        return None

    def _validate_sync(self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode | None:
        if group.is_in(DEAD):
            return E.coordinator_not_available
        try:
            group.validate_member(member_id, group_instance_id)
        except GroupError as e:
            return e.code
        if generation_id != group.generation_id:
            return E.illegal_generation
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return E.inconsistent_group_protocol
        return None

    # ================================================================== Heartbeat / LeaveGroup

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> ErrorCode:
        if not self.active:
            return E.coordinator_not_available
        if not group_id:
            return E.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_in(DEAD):
            return E.coordinator_not_available
        try:
            group.validate_member(member_id, group_instance_id)
        except GroupError as e:
            return e.code
        if generation_id != group.generation_id:
            return E.illegal_generation
        if group.is_in(EMPTY):
            return E.unknown_member_id
        self._reschedule_heartbeat(group, group.member(member_id))
        if group.is_in(PREPARING):
            return E.rebalance_in_progress
        return E.none

    def leave_group(self, *, group_id: str, members: Iterable[tuple[str, str | None, str | None]]
                    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        """``members`` are (member id, group instance id, reason); returns (top-level error, per member)."""
        members = list(members)
        if not self.active:
            return E.coordinator_not_available, []
        if not group_id:
            return E.invalid_group_id, []
        group = self.groups.get(group_id)
        if group is None:
            return E.none, [{"member_id": mid, "group_instance_id": gid, "error_code": E.unknown_member_id}
                            for mid, gid, _ in members]
        if group.is_in(DEAD):
            return E.coordinator_not_available, []
        results = []
        left = []
        for member_id, instance_id, reason in members:
            error = E.none
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (kafka-consumer-groups, AdminClient).
                if group.has_static_member(instance_id):
                    self._remove_current_member(group, group.static_member_id(instance_id), reason)
                else:
                    error = E.unknown_member_id
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timer.cancel(_heartbeat_key(group_id, member_id))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                    self._remove_current_member(group, member_id, reason)
                except GroupError as e:
                    error = e.code
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
            if error == E.none:
                left.append(member_id)
        if left:
            if group.is_in(STABLE, COMPLETING):
                self._maybe_prepare_rebalance_or_complete_join(group, f"explicit LeaveGroup of {left}")
            elif group.is_in(PREPARING):
                self._maybe_complete_join_phase(group)
        return E.none, results

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str | None) -> None:
        member = group.member(member_id)
        self.timer.cancel(_heartbeat_key(group.group_id, member_id))
        log.info("Member %s left group %s (client reason: %s)", member_id, group.group_id, reason or "not provided")
        group.complete_join(member, {"member_id": UNKNOWN_MEMBER_ID, "error_code": E.unknown_member_id})
        group.remove(member_id)

    # ================================================================== offsets

    def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       partitions: Iterable[tuple[str, int, int, int, str | None]], api_version: int,
                       retention_time_ms: int = -1) -> dict[tuple[str, int], ErrorCode]:
        """Commit (topic, partition, offset, leader epoch, metadata) items; returns an error per item."""
        items = list(partitions)

        def all_(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
            return {(t, p): code for t, p, *_ in items}

        if not self.active:
            return all_(E.coordinator_not_available)
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_id < 0:
                # Simple consumers (assign + commit) and admin tools: create an empty "simple" group.
                group = self.groups[group_id] = ClassicGroup(group_id, EMPTY, now_ms=self.wall_clock())
                created = True
            else:
                return all_(E.group_id_not_found if api_version >= 9 else E.illegal_generation)
        try:
            self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
        except GroupError as e:
            return all_(e.code)
        if group.is_in(STABLE, PREPARING):
            # Commits keep a classic member's session alive.
            self._reschedule_heartbeat(group, group.member(member_id))
        now = self.wall_clock()
        expire = now + retention_time_ms if retention_time_ms != -1 else -1
        results: dict[tuple[str, int], ErrorCode] = {}
        records = []
        for topic, partition, offset, leader_epoch, metadata in items:
            metadata = metadata or ""
            if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = E.offset_metadata_too_large
                continue
            results[(topic, partition)] = E.none
            records.append((OffsetCommitKey(group_id, topic, partition),
                            OffsetCommitValue(offset, metadata, now, leader_epoch, expire)))
        if records:
            try:
                self._append(group_id, records)
            except KafkaError as e:
                if created:
                    self.groups.pop(group_id, None)
                return all_(map_append_error(e))
            for key, value in records:
                self._replay_offset(key, value)
        return results

    @staticmethod
    def _validate_offset_commit(group: ClassicGroup, member_id: str, group_instance_id: str | None,
                                generation_id: int) -> None:
        if group.is_in(DEAD):
            raise GroupError(E.coordinator_not_available)
        if generation_id < 0 and group.is_in(EMPTY):
            return  # admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise GroupError(E.illegal_generation)
        elif not group.is_in(EMPTY):
            raise GroupError(E.unknown_member_id)
        if group.is_in(COMPLETING):
            raise GroupError(E.rebalance_in_progress)

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None,
                      require_stable: bool = False) -> tuple[ErrorCode, list[tuple[str, list[dict[str, Any]]]]]:
        """Committed offsets of ``topics`` ((name, partitions) pairs), or of everything when None."""
        if not self.active:
            return E.coordinator_not_available, []
        group = self.groups.get(group_id)
        known = group is not None and not group.is_in(DEAD)
        offsets = self.offsets.get(group_id, {}) if known else {}
        out: list[tuple[str, list[dict[str, Any]]]] = []
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in offsets:
                by_topic.setdefault(topic, []).append(partition)
            topics = [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
        for topic, partitions in topics:
            answers = []
            for p in partitions:
                om = offsets.get((topic, p))
                if om is None:
                    answers.append({"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                    "metadata": "", "error_code": E.none})
                else:
                    answers.append({"partition_index": p, "committed_offset": om.offset,
                                    "committed_leader_epoch": om.leader_epoch, "metadata": om.metadata,
                                    "error_code": E.none})
            out.append((topic, answers))
        return E.none, out

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: drop committed offsets of topics the group does not consume (any more)."""
        items = list(partitions)
        if not self.active:
            return E.coordinator_not_available, {}
        if not group_id:
            return E.invalid_group_id, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return E.group_id_not_found, {}
        if group.is_in(STABLE, PREPARING, COMPLETING) and not group.uses_consumer_protocol():
            return E.non_empty_group, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        records = []
        offsets = self.offsets.get(group_id, {})
        for topic, partition in items:
            if group.is_subscribed_to_topic(topic):
                results[(topic, partition)] = E.group_subscribed_to_topic
                continue
            results[(topic, partition)] = E.none
            if (topic, partition) in offsets:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        if records:
            try:
                self._append(group_id, records)
            except KafkaError as e:
                return map_append_error(e), {}
            for key, value in records:
                self._replay_offset(key, value)
        return E.none, results

    def committed(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self.offsets.get(group_id, {}).get((topic, partition))

    def on_topics_deleted(self, topics: Iterable[str]) -> None:
        """Drop the committed offsets of deleted topics (Kafka's ``onPartitionsDeleted``)."""
        if not self.active:
            return
        deleted = set(topics)
        for group_id, offsets in list(self.offsets.items()):
            records = [(OffsetCommitKey(group_id, t, p), None) for (t, p) in offsets if t in deleted]
            if records:
                self._append_and_replay(group_id, records)

    def _append_and_replay(self, group_id: str, records: list[tuple[Any, Any]]) -> bool:
        try:
            self._append(group_id, records)
        except KafkaError as e:
            log.warning("Failed to write %d record(s) for group %s: %s", len(records), group_id, e)
            return False
        for key, value in records:
            if isinstance(key, OffsetCommitKey):
                self._replay_offset(key, value)
            else:
                self._replay_group(key, value)
        return True

    # ------------------------------------------------------------------ retention

    def _schedule_cleanup(self) -> None:
        self.timer.schedule(_CLEANUP_KEY, self.config.offsets_retention_check_interval_ms, self._cleanup)

    def _cleanup(self) -> None:
        try:
            self.cleanup_group_metadata()
        finally:
            self._schedule_cleanup()

    def cleanup_group_metadata(self) -> int:
        """Expire offsets past retention and delete empty groups left without offsets; returns tombstones."""
        written = 0
        now = self.wall_clock()
        for group_id, group in list(self.groups.items()):
            records: list[tuple[Any, Any]] = []
            all_expired = self._expired_offsets(group, now, records)
            if all_expired and group.is_empty:
                records.append((GroupMetadataKey(group_id), None))
            if records and self._append_and_replay(group_id, records):
                written += len(records)
        if written:
            log.info("Wrote %d tombstone(s) while expiring offsets and groups", written)
        return written

    def _expired_offsets(self, group: ClassicGroup, now: int, records: list) -> bool:
        offsets = self.offsets.get(group.group_id)
        if not offsets:
            return True
        base = self._expiration_base(group)
        if base is None:
            return False
        all_expired = True
        for (topic, partition), om in offsets.items():
            if group.is_subscribed_to_topic(topic):
                all_expired = False
                continue
            if om.expire_timestamp >= 0:
                expired = now >= om.expire_timestamp
            else:
                expired = now - base(om) >= self.config.offsets_retention_ms
            if expired:
                records.append((OffsetCommitKey(group.group_id, topic, partition), None))
            else:
                all_expired = False
        return all_expired

    @staticmethod
    def _expiration_base(group: ClassicGroup) -> Callable[[OffsetAndMetadata], int] | None:
        """Kafka's ``ClassicGroup.offsetExpirationCondition``: from when retention is counted."""
        if group.protocol_type is None:
            return lambda om: om.commit_timestamp  # simple group
        if group.is_in(EMPTY):
            ts = group.current_state_timestamp
            return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp)
        if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(STABLE):
            return lambda om: om.commit_timestamp
        return None

    # ================================================================== admin

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        if not self.active:
            return E.coordinator_not_available, []
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and "classic" not in types:
            return E.none, []
        out = []
        for group_id, group in sorted(self.groups.items()):
            if states and str(group.state).lower() not in states:
                continue
            out.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                        "group_state": str(group.state), "group_type": "classic"})
        return E.none, out

    def describe_groups(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for group_id in group_ids:
            if not self.active:
                out.append({"group_id": group_id, "error_code": E.coordinator_not_available})
                continue
            group = self.groups.get(group_id)
            if group is None:
                out.append({"group_id": group_id, "error_code": E.none, "group_state": str(DEAD),
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            stable = group.is_in(STABLE)
            out.append({
                "group_id": group_id, "error_code": E.none, "group_state": str(group.state),
                "protocol_type": group.protocol_type or "",
                "protocol_data": (group.protocol_name or "") if stable else "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                             "member_assignment": m.assignment} for m in group.members.values()],
            })
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):  # distinct, in request order
            if not self.active:
                results[group_id] = E.coordinator_not_available
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(DEAD):
                results[group_id] = E.group_id_not_found
            elif group.is_in(STABLE, PREPARING, COMPLETING):
                results[group_id] = E.non_empty_group
            else:
                results[group_id] = E.none
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)
        for partition, group_ids_here in by_partition.items():
            records: list[tuple[Any, Any]] = []
            for group_id in group_ids_here:
                records += [(OffsetCommitKey(group_id, t, p), None) for t, p in self.offsets.get(group_id, {})]
                records.append((GroupMetadataKey(group_id), None))
            try:
                self.store.append(partition, [(encode_key(k), encode_value(v)) for k, v in records])
            except KafkaError as e:
                error = map_append_error(e)
                for group_id in group_ids_here:
                    results[group_id] = error
                continue
            for key, value in records:
                if isinstance(key, OffsetCommitKey):
                    self._replay_offset(key, value)
                else:
                    self._replay_group(key, value)
            log.info("Deleted group(s) %s", ", ".join(group_ids_here))
        return results


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    reason: str | None


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
