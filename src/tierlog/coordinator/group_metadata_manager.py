"""Membership of the classic groups of one ``__consumer_offsets`` partition (Kafka's ``GroupMetadataManager``).

Behaviour follows the ``classicGroup*`` methods of Kafka's new group coordinator:

- JoinGroup: KIP-394 (v4+ dynamic members get a member id with MEMBER_ID_REQUIRED and become
  *pending*), KIP-345 static members (a rejoin with a known ``group.instance.id`` replaces and fences
  the old member id), ``group.max.size``, the delayed first rebalance of an empty group
  (``group.initial.rebalance.delay.ms``, extended while new members keep arriving, bounded by the
  rebalance timeout), rebalance timeouts that drop members which did not rejoin, leader election
  and protocol selection by votes.
- SyncGroup: followers wait for the leader; the leader's assignment is written to
  ``__consumer_offsets`` (GroupMetadata record) before anyone gets it; members that never sync
  within the rebalance timeout are removed and the group rebalances again.
- Heartbeat, LeaveGroup (batched, by member id or group instance id), session expiry.
- ListGroups and DescribeGroups of this partition's groups; the group half of DeleteGroups and of
  offset expiration (:meth:`validate_delete_group`, :meth:`create_group_tombstone_records`,
  :meth:`maybe_delete_group`).

Like Kafka's classic groups, membership changes the in-memory group first and writes a
GroupMetadata record of the result; only loading replays those records (:meth:`replay`).
:meth:`on_loaded` starts the session timers of loaded members, :meth:`on_unloaded` answers parked
requests with NOT_COORDINATOR and marks every group dead. The request-level checks that need no
group (coordinator active, group id not empty, session timeout bounds) are the service's.

Answers that must wait (JoinGroup, SyncGroup) are delivered through the responder the caller
passed; timers (session, rebalance and sync timeouts, the initial delay) run on the partition's
:class:`~tierlog.coordinator.timer.ScopedTimer`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tierlog.client.consumer_protocol import ConsumerProtocolError, decode_subscription, encode_assignment
from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.consumer_group import ConsumerGroup
from tierlog.coordinator.consumer_group_manager import ConsumerGroupManager
from tierlog.coordinator.group import UNKNOWN_MEMBER_ID, ClassicGroup, GroupState, Member, Responder
from tierlog.coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    RecordWriter,
)
from tierlog.coordinator.timer import ScopedTimer
from tierlog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidFetchSizeError,
    KafkaError,
    KafkaStorageError,
    MemberIdRequiredError,
    MessageTooLargeError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RebalanceInProgressError,
    RecordListTooLargeError,
    RequestTimedOutError,
    UnknownMemberIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)

log = logging.getLogger(__name__)

__all__ = ["GroupMetadataManager", "map_append_error"]

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

_UNAVAILABLE = frozenset({UnknownTopicOrPartitionError.code, NotEnoughReplicasError.code, RequestTimedOutError.code})
_NOT_LEADER = frozenset({NotLeaderOrFollowerError.code, KafkaStorageError.code})
_TOO_LARGE = frozenset({MessageTooLargeError.code, RecordListTooLargeError.code, InvalidFetchSizeError.code})


def map_append_error(error: KafkaError) -> type[KafkaError]:
    """The error clients get for a failed ``__consumer_offsets`` write (Kafka's
    ``appendGroupMetadataErrorToResponseError``)."""
    code = error.code
    if code in _UNAVAILABLE:
        return CoordinatorNotAvailableError
    if code in _NOT_LEADER:
        return NotCoordinatorError
    if code in _TOO_LARGE:
        return UnknownServerError
    return error_for_code(code)


def _join_key(group_id: str) -> tuple:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


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


class GroupMetadataManager:
    def __init__(self, config: CoordinatorConfig, timer: ScopedTimer, write: RecordWriter,
                 wall_clock: Callable[[], int], consumer: ConsumerGroupManager | None = None):
        self.config = config
        self.timer = timer
        self.write = write
        self.wall_clock = wall_clock
        self.groups: dict[str, ClassicGroup] = {}
        #: The consumer groups (KIP-848) of the same partition: a group id is one or the other.
        self.consumer = consumer or ConsumerGroupManager(config, timer, write, wall_clock)
        self.consumer.on_group_created = self._on_consumer_group_created
        self.consumer.classic_group = self.groups.get
        self.consumer.downgrade = self._downgrade

    def _on_consumer_group_created(self, group_id: str) -> None:
        """A consumer group took this id: the classic group it replaces goes (its tombstone is written with the
        consumer group's first records); members waiting in a rebalance rejoin the consumer group."""
        group = self.groups.get(group_id)
        if group is not None:
            group.complete_all_joins(RebalanceInProgressError.code)
            group.complete_all_syncs(RebalanceInProgressError.code)
            self.remove_group(group_id)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer.groups.get(group_id)

    # ================================================================== groups

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def group_ids(self) -> list[str]:
        """Every group of the partition, classic and consumer ones."""
        return list(self.groups) + list(self.consumer.groups)

    def get_or_create_classic_group(self, group_id: str) -> tuple[ClassicGroup, bool]:
        """The group, created empty when missing (a "simple" group: offsets without membership);
        the flag says whether it was created."""
        group = self.groups.get(group_id)
        if group is not None:
            return group, False
        group = self.groups[group_id] = ClassicGroup(group_id, EMPTY, now_ms=self.wall_clock())
        return group, True

    def remove_group(self, group_id: str) -> None:
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

    # ================================================================== records

    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        """Apply a GroupMetadata record (or its tombstone) read from the partition."""
        if value is None:
            self.remove_group(key.group)
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
        """Write the group's GroupMetadata record; raises KafkaError."""
        self.write([(GroupMetadataKey(group.group_id), self._group_metadata_value(group, assignment))])

    # ================================================================== load / unload

    def on_loaded(self) -> None:
        """The partition was loaded: start the sessions of loaded members; rebalance oversized groups."""
        for group in self.groups.values():
            for member in group.members.values():
                self.reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_group_size:
                self._prepare_rebalance(group, "freshly loaded group is over capacity")

    def on_unloaded(self) -> None:
        """The partition moved away: answer parked requests with NOT_COORDINATOR, every group is dead."""
        now = self.wall_clock()
        for group in self.groups.values():
            group.complete_all_joins(NotCoordinatorError.code)
            group.complete_all_syncs(NotCoordinatorError.code)
            group.transition_to(DEAD, now)
        self.groups.clear()

    def _downgrade(self, consumer_group: ConsumerGroup, leaving_member_id: str, records: list) -> None:
        """The consumer group's classic members, without the leaving one, become a classic group at the group
        epoch with their target assignments, which rebalances at once (Kafka's ``convertToClassicGroup``)."""
        group_id = consumer_group.group_id
        group = ClassicGroup(group_id, STABLE, now_ms=self.wall_clock(), generation_id=consumer_group.group_epoch,
                             protocol_type="consumer")
        for m in consumer_group.members.values():
            if m.member_id != leaving_member_id and m.classic is not None:
                group.add(Member(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                    client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.classic.session_timeout_ms, protocol_type="consumer",
                    protocols=list(m.classic.supported_protocols)))
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        names = {info.topic_id: name for name, info in self.consumer.topics().items()}
        assignment = {}
        for member in group.members.values():
            try:
                version = min(decode_subscription(member.metadata(group.protocol_name)).version, 3)
            except ConsumerProtocolError:
                version = 0
            target = consumer_group.target.get(member.member_id, {})
            assignment[member.member_id] = member.assignment = encode_assignment(
                {names[t]: ps for t, ps in target.items() if t in names}, version=version)
        records.append((GroupMetadataKey(group_id), self._group_metadata_value(group, assignment)))
        self.write(records)
        log.info("[GroupId %s] Downgraded the consumer group to a classic group at generation %d.", group_id,
                 group.generation_id)
        self.consumer.remove_group(group_id)
        self.groups[group_id] = group
        for member in group.members.values():
            self.reschedule_heartbeat(group, member)
        self._prepare_rebalance(group, f"Downgrade group {group_id} from consumer to classic.")

    # ================================================================== JoinGroup

    def classic_group_join(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                           protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                           rebalance_timeout_ms: int, client_id: str, client_host: str, api_version: int,
                           respond: Responder, reason: str | None = None) -> None:
        """Handle a JoinGroup; ``respond`` gets the answer now or when the join phase completes."""
        if api_version == 0:
            rebalance_timeout_ms = session_timeout_ms  # v0 has none; Kafka uses the session timeout
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                # A classic member of a consumer group (KIP-848's online migration).
                try:
                    return respond(self.consumer.classic_join(
                        consumer_group, member_id=member_id, instance_id=group_instance_id,
                        protocol_type=protocol_type, protocols=protocols, session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms, client_id=client_id, client_host=client_host,
                        api_version=api_version))
                except KafkaError as e:
                    return respond({"member_id": member_id, "error_code": map_append_error(e).code})
            records: list = []
            self.consumer.tombstones(consumer_group, records)
            try:
                self.write(records)
            except KafkaError as e:
                return respond({"member_id": member_id, "error_code": map_append_error(e).code})
            self.consumer.remove_group(group_id)
            log.info("[GroupId %s] Converted the empty consumer group to a classic group.", group_id)
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return respond({"member_id": member_id, "error_code": UnknownMemberIdError.code})
            group = ClassicGroup(group_id, EMPTY, now_ms=self.wall_clock())
            try:
                # Kafka commits a new group with an empty GroupMetadata record.
                self._write_group(group, {})
            except KafkaError as e:
                log.warning("Failed to write empty metadata for new group %s: %s", group_id, e)
                return respond({"member_id": member_id, "error_code": map_append_error(e).code})
            self.groups[group_id] = group
        request = _JoinRequest(member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
                               rebalance_timeout_ms, client_id, client_host, api_version, reason)
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self.timer.cancel(_heartbeat_key(group_id, member_id))
            respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": GroupMaxSizeReachedError.code})
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
            return respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": CoordinatorNotAvailableError.code})
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return respond({"member_id": UNKNOWN_MEMBER_ID, "error_code": InconsistentGroupProtocolError.code})
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
            return respond({"member_id": new_member_id, "error_code": MemberIdRequiredError.code})
        self._add_member_then_rebalance(group, req, new_member_id, respond)

    def _join_existing_member(self, group: ClassicGroup, req: _JoinRequest, respond: Responder) -> None:
        member_id = req.member_id
        if group.is_in(DEAD):
            return respond({"member_id": member_id, "error_code": CoordinatorNotAvailableError.code})
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return respond({"member_id": member_id, "error_code": InconsistentGroupProtocolError.code})
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                log.error("JoinGroup with group instance id %s for pending member %s of group %s",
                          req.group_instance_id, member_id, group.group_id)
                return respond({"member_id": member_id, "error_code": UnknownServerError.code})
            return self._add_member_then_rebalance(group, req, member_id, respond)
        try:
            group.validate_member(member_id, req.group_instance_id)
        except KafkaError as e:
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
        respond({"member_id": member_id, "error_code": UnknownMemberIdError.code})

    def _join_answer(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                     skip_assignment: bool = False, leader: str | None = None) -> dict[str, Any]:
        return {
            "error_code": NO_ERROR,
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
        self.reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
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
        self.reschedule_heartbeat(group, member)
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
                    self.reschedule_heartbeat(group, old)
                    return respond({"error_code": map_append_error(e).code, "member_id": UNKNOWN_MEMBER_ID,
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
            self._reset_and_propagate_assignment(group, RebalanceInProgressError.code)
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
            self.reschedule_heartbeat(group, member)
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

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error_code: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error_code)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, NO_ERROR)

    def _propagate_assignment(self, group: ClassicGroup, error_code: int) -> None:
        ok = error_code == NO_ERROR
        for m in list(group.members.values()):
            answer = {"error_code": error_code, "assignment": m.assignment,
                      "protocol_type": group.protocol_type if ok else None,
                      "protocol_name": group.protocol_name if ok else None}
            if group.complete_sync(m, answer):
                # Sessions restart once the assignment is out (expiries while waiting were ignored).
                self.reschedule_heartbeat(group, m)

    # ------------------------------------------------------------------ heartbeats and expiry

    def _heartbeat_expiry(self, group_id: str, member_id: str) -> Callable[[], None]:
        return lambda: self._expire_heartbeat(group_id, member_id)

    def reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        """Restart a member's session (Kafka's ``rescheduleClassicGroupMemberHeartbeat``)."""
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
        group.complete_join(member, {"member_id": UNKNOWN_MEMBER_ID, "error_code": UnknownMemberIdError.code})
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING):
            self._maybe_prepare_rebalance_or_complete_join(group, f"removing member {member.member_id} on {reason}")
        elif group.is_in(PREPARING) and group.has_all_members_joined():
            self._complete_join(group)

    # ================================================================== SyncGroup

    def classic_group_sync(self, *, group_id: str, generation_id: int, member_id: str,
                           group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
                           assignments: Iterable[tuple[str, bytes]], respond: Responder) -> None:
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            try:
                return respond(self.consumer.classic_sync(
                    consumer_group, member_id=member_id, instance_id=group_instance_id, generation_id=generation_id,
                    protocol_type=protocol_type, protocol_name=protocol_name))
            except KafkaError as e:
                return respond({"error_code": e.code})
        group = self.groups.get(group_id)
        if group is None or group.is_empty:
            return respond({"error_code": UnknownMemberIdError.code})
        error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error is not None:
            return respond({"error_code": error})
        if group.is_in(PREPARING):
            return respond({"error_code": RebalanceInProgressError.code})
        if group.is_in(STABLE):
            self._remove_pending_sync_member(group, member_id)
            return respond({"error_code": NO_ERROR, "protocol_type": group.protocol_type,
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
                error_class = map_append_error(e)
                log.warning("Failed to store the assignment of group %s: %s", group_id, e)
                self._reset_and_propagate_assignment(group, error_class.code)
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"error {error_class.name} storing the assignment")
            return None
        if group.is_in(COMPLETING) and generation_id == group.generation_id:
            self._set_and_propagate_assignment(group, assignment)
            group.transition_to(STABLE, self.wall_clock())
        return None

    def _validate_sync(self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> int | None:
        if group.is_in(DEAD):
            return CoordinatorNotAvailableError.code
        try:
            group.validate_member(member_id, group_instance_id)
        except KafkaError as e:
            return e.code
        if generation_id != group.generation_id:
            return IllegalGenerationError.code
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return InconsistentGroupProtocolError.code
        return None

    # ================================================================== Heartbeat / LeaveGroup

    def classic_group_heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                                group_instance_id: str | None = None) -> int:
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            try:
                return self.consumer.classic_heartbeat(consumer_group, member_id=member_id,
                                                       instance_id=group_instance_id, generation_id=generation_id)
            except KafkaError as e:
                return e.code
        group = self.groups.get(group_id)
        if group is None:
            return UnknownMemberIdError.code
        if group.is_in(DEAD):
            return CoordinatorNotAvailableError.code
        try:
            group.validate_member(member_id, group_instance_id)
        except KafkaError as e:
            return e.code
        if generation_id != group.generation_id:
            return IllegalGenerationError.code
        if group.is_in(EMPTY):
            return UnknownMemberIdError.code
        self.reschedule_heartbeat(group, group.member(member_id))
        if group.is_in(PREPARING):
            return RebalanceInProgressError.code
        return NO_ERROR

    def classic_group_leave(self, *, group_id: str, members: list[tuple[str, str | None, str | None]]
                            ) -> tuple[int, list[dict[str, Any]]]:
        """``members`` are (member id, group instance id, reason); returns (top-level error, per member)."""
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            try:
                return NO_ERROR, self.consumer.classic_leave(consumer_group, members)
            except KafkaError as e:
                return map_append_error(e).code, []
        group = self.groups.get(group_id)
        if group is None:
            return NO_ERROR, [{"member_id": mid, "group_instance_id": gid, "error_code": UnknownMemberIdError.code}
                              for mid, gid, _ in members]
        if group.is_in(DEAD):
            return CoordinatorNotAvailableError.code, []
        results = []
        left = []
        for member_id, instance_id, reason in members:
            error = NO_ERROR
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (kafka-consumer-groups, AdminClient).
                if group.has_static_member(instance_id):
                    self._remove_current_member(group, group.static_member_id(instance_id), reason)
                else:
                    error = UnknownMemberIdError.code
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timer.cancel(_heartbeat_key(group_id, member_id))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                    self._remove_current_member(group, member_id, reason)
                except KafkaError as e:
                    error = e.code
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
            if error == NO_ERROR:
                left.append(member_id)
        if left:
            if group.is_in(STABLE, COMPLETING):
                self._maybe_prepare_rebalance_or_complete_join(group, f"explicit LeaveGroup of {left}")
            elif group.is_in(PREPARING):
                self._maybe_complete_join_phase(group)
        return NO_ERROR, results

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str | None) -> None:
        member = group.member(member_id)
        self.timer.cancel(_heartbeat_key(group.group_id, member_id))
        log.info("Member %s left group %s (client reason: %s)", member_id, group.group_id, reason or "not provided")
        group.complete_join(member, {"member_id": UNKNOWN_MEMBER_ID, "error_code": UnknownMemberIdError.code})
        group.remove(member_id)

    # ================================================================== admin

    def list_groups(self, states: set[str], types: set[str]) -> list[dict[str, Any]]:
        """This partition's groups; ``states`` and ``types`` are lower-case filters (empty: all)."""
        out = []
        if not types or "consumer" in types:
            for group in self.consumer.groups.values():
                entry = self.consumer.list_entry(group)
                if not states or entry["group_state"].lower() in states:
                    out.append(entry)
        if types and "classic" not in types:
            return out
        for group_id, group in self.groups.items():
            if states and str(group.state).lower() not in states:
                continue
            out.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                        "group_state": str(group.state), "group_type": "classic"})
        return out

    def describe_group(self, group_id: str) -> dict[str, Any]:
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            return self.consumer.describe_classic(consumer_group)
        group = self.groups.get(group_id)
        if group is None:
            # Kafka's describeGroups: GROUP_ID_NOT_FOUND with its message; the handler answers it from
            # DescribeGroups v6 (KIP-1043), older versions get a Dead group with no error
            return {"group_id": group_id, "error_code": GroupIdNotFoundError.code,
                    "error_message": f"Group {group_id} not found.", "group_state": str(DEAD),
                    "protocol_type": "", "protocol_data": "", "members": []}
        stable = group.is_in(STABLE)
        return {
            "group_id": group_id, "error_code": NO_ERROR, "group_state": str(group.state),
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                         "member_assignment": m.assignment} for m in group.members.values()],
        }

    def validate_delete_group(self, group_id: str) -> None:
        """GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP unless the group can be deleted."""
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            return self.consumer.validate_delete(consumer_group)
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        if group.is_in(STABLE, PREPARING, COMPLETING):
            raise NonEmptyGroupError(f"group {group_id} has members")

    def create_group_tombstone_records(self, group_id: str, records: list[CoordinatorRecord]) -> None:
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            self.consumer.tombstones(consumer_group, records)
        else:
            records.append((GroupMetadataKey(group_id), None))

    def maybe_delete_group(self, group_id: str, records: list[CoordinatorRecord]) -> bool:
        """Add the group's tombstone when it is empty (offset expiration); says whether it did."""
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return False
            self.consumer.tombstones(consumer_group, records)
            return True
        group = self.groups.get(group_id)
        if group is not None and group.is_empty:
            self.create_group_tombstone_records(group_id, records)
            return True
        return False
