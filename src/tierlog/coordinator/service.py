"""The group coordinator's front (Kafka's ``GroupCoordinatorService``): route each group to its partition.

Every group lives in one ``__consumer_offsets`` partition (:func:`~tierlog.coordinator.records.partition_for`),
and each partition this node leads has a loaded
:class:`~tierlog.coordinator.shard.GroupCoordinatorShard` holding that partition's groups and
offsets. The service checks what needs no group (the coordinator is active, the group id is not
empty, the session timeout is within bounds), finds the group's shard and hands the request to the
shard's membership or offset manager; requests for a partition that is not loaded here get
NOT_COORDINATOR, so the client looks its coordinator up again.

Partitions move with leadership: :meth:`GroupCoordinator.load` (Kafka's ``onElection``) reads the
partition and replays its records into a new shard, :meth:`GroupCoordinator.unload` (``onResignation``)
answers the shard's parked requests with NOT_COORDINATOR and drops its state. A single node leads
every partition, so :meth:`GroupCoordinator.load_all` loads them all when the broker is ready.

Everything runs on the broker's event loop without blocking: operations are synchronous state
changes plus a synchronous append to the local log; answers that must wait (JoinGroup, SyncGroup)
are delivered later through the responder the caller passed. Time-based work runs from one
:class:`~tierlog.coordinator.timer.KeyedTimer` that each shard sees through its own scope.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.consumer_group import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH
from tierlog.coordinator.consumer_group_manager import TopicsSource
from tierlog.coordinator.group import ClassicGroup, Responder
from tierlog.coordinator.group_metadata_manager import map_append_error
from tierlog.coordinator.offset_metadata_manager import OffsetAndMetadata
from tierlog.coordinator.records import OFFSETS_TOPIC, partition_for
from tierlog.coordinator.regex import InvalidRegex, compile_regex
from tierlog.coordinator.shard import GroupCoordinatorShard
from tierlog.coordinator.storage import RecordStore
from tierlog.coordinator.timer import KeyedTimer, ScopedTimer, monotonic_ms
from tierlog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidGroupIdError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    KafkaError,
    NotCoordinatorError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from tierlog.tasks import stop_tasks

log = logging.getLogger(__name__)

__all__ = ["GroupCoordinator"]


def _is_group_error(e: KafkaError) -> bool:
    """An error of the group's own (not of the __consumer_offsets write, which is mapped)."""
    return e.code in _GROUP_ERRORS

_NOT_AVAILABLE = CoordinatorNotAvailableError.code
_NOT_COORDINATOR = NotCoordinatorError.code
_GROUP_ERRORS = frozenset({
    FencedMemberEpochError.code, UnknownMemberIdError.code, UnreleasedInstanceIdError.code,
    FencedInstanceIdError.code, GroupMaxSizeReachedError.code, GroupIdNotFoundError.code,
    InvalidRequestError.code, UnsupportedAssignorError.code, InvalidRegularExpressionError.code})


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig, store: RecordStore, *,
                 wall_clock: Callable[[], int] | None = None, timer_clock: Callable[[], int] = monotonic_ms,
                 leads: Callable[[int], bool] | None = None):
        self.config = config
        self.store = store
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))
        self.timer = KeyedTimer(timer_clock)
        self.shards: dict[int, GroupCoordinatorShard] = {}
        #: Whether this broker leads a __consumer_offsets partition (given in a cluster; None: it leads all).
        self.leads = leads
        #: The cluster's topics, for consumer groups' subscriptions (the broker sets it from its metadata).
        self.topics: TopicsSource | None = None
        self.active = False
        self._started = False
        self._timer_task: asyncio.Task | None = None

    # ================================================================== lifecycle

    def startup(self) -> None:
        """Start serving (Kafka's ``startup``); partitions are served once loaded."""
        self._started = True
        self.active = True

    def load_all(self) -> None:
        """:meth:`startup`, then load every partition this broker leads (``leads``; a single node leads all of
        them). A partition that fails to load stays unloaded (its groups get NOT_COORDINATOR); the others serve."""
        self.startup()
        leads = self.leads
        self.on_election(p for p in range(self.store.num_partitions()) if leads is None or leads(p))

    def ensure_loaded(self) -> None:
        """Load on first use (a request may arrive before the broker's ready callback ran)."""
        if not self._started:
            try:
                self.load_all()
            except Exception:  # noqa: BLE001 - the coordinator stays unavailable, the broker keeps running
                self.active = False
                log.exception("Loading %s failed; the group coordinator is not available", OFFSETS_TOPIC)

    def load(self, partition: int) -> GroupCoordinatorShard:
        """Become the coordinator of ``partition``'s groups (Kafka's ``onElection``): replay its records
        into a new shard, then start its timers. A partition already loaded stays as it is."""
        if not self.active:
            raise CoordinatorNotAvailableError("the group coordinator is not active")
        shard = self.shards.get(partition)
        if shard is not None:
            return shard
        shard = GroupCoordinatorShard(partition, self.config, self.store, ScopedTimer(self.timer, partition),
                                      self.wall_clock, lambda: self.topics() if self.topics is not None else {})
        records = self.store.read_partition(partition)
        count = shard.replay_all(records)
        read = getattr(records, "records_read", count)  # the store may leave superseded records out
        shard.on_loaded()
        self.shards[partition] = shard
        if read:
            log.info("Loaded %s-%d: %d group(s), the offsets of %d group(s), from %d record(s), %d replayed",
                     OFFSETS_TOPIC, partition, len(shard.group_metadata_manager.groups),
                     len(shard.offset_metadata_manager.offsets), read, count)
        return shard

    def unload(self, partition: int) -> None:
        """Stop coordinating ``partition``'s groups (Kafka's ``onResignation``): parked JoinGroup and
        SyncGroup requests get NOT_COORDINATOR, timers stop, the partition's state is dropped."""
        shard = self.shards.pop(partition, None)
        if shard is not None:
            shard.on_unloaded()
            log.info("Unloaded %s-%d", OFFSETS_TOPIC, partition)

    def on_election(self, partitions: Iterable[int]) -> None:
        """This node now leads ``partitions``: load those not loaded yet (before :meth:`startup`, nothing:
        starting loads every partition). A partition that fails to load is logged and stays unloaded."""
        if not self.active:
            return
        for partition in partitions:
            try:
                self.load(partition)
            except Exception:  # noqa: BLE001 - that partition stays unavailable, the broker keeps running
                log.exception("Loading %s-%d failed; its groups are not coordinated here", OFFSETS_TOPIC, partition)

    def loaded_partitions(self) -> list[int]:
        return sorted(self.shards)

    async def start(self) -> None:
        """:meth:`ensure_loaded`, then fire timers on time from a task of the running loop."""
        self.ensure_loaded()
        if self._timer_task is None and self.active:
            self._timer_task = asyncio.get_running_loop().create_task(self.timer.run(), name="group-coordinator-timer")

    def tick(self) -> None:
        """Run due timers (the broker's housekeeping calls this; the timer task usually got there first)."""
        if self.active:
            self.timer.poll()

    async def shutdown(self) -> None:
        """Unload every partition (parked requests get NOT_COORDINATOR) and stop."""
        self.active = False
        await stop_tasks(self._timer_task)
        self._timer_task = None
        for partition in list(self.shards):
            self.unload(partition)
        self.timer.clear()

    # ================================================================== routing

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.store.num_partitions())

    def shard_for(self, group_id: str) -> GroupCoordinatorShard | None:
        """The loaded shard of the group's partition, or None when that partition is not loaded here."""
        return self.shards.get(self.partition_for(group_id))

    def _route(self, group_id: str) -> GroupCoordinatorShard | int:
        """The group's shard, or the error code to answer with."""
        if not self.active:
            return _NOT_AVAILABLE
        shard = self.shard_for(group_id)
        return _NOT_COORDINATOR if shard is None else shard

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        """A snapshot of every loaded group by id (for tools and tests; changing it changes nothing)."""
        return {gid: g for shard in self.shards.values() for gid, g in shard.group_metadata_manager.groups.items()}

    # ================================================================== membership

    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                   protocols: Iterable[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str, api_version: int, respond: Responder,
                   reason: str | None = None) -> None:
        """Handle a JoinGroup; ``respond`` gets the answer now or when the join phase completes."""
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        if not self.active:
            return respond({"member_id": member_id, "error_code": _NOT_AVAILABLE})
        if not group_id:
            return respond({"member_id": member_id, "error_code": InvalidGroupIdError.code})
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return respond({"member_id": member_id, "error_code": InvalidSessionTimeoutError.code})
        shard = self._route(group_id)
        if isinstance(shard, int):
            return respond({"member_id": member_id, "error_code": shard})
        return shard.group_metadata_manager.classic_group_join(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocols=protocols, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id, client_host=client_host, api_version=api_version, respond=respond, reason=reason)

    def sync_group(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Iterable[tuple[str, bytes]], respond: Responder) -> None:
        if not self.active:
            return respond({"error_code": _NOT_AVAILABLE})
        if not group_id:
            return respond({"error_code": InvalidGroupIdError.code})
        shard = self._route(group_id)
        if isinstance(shard, int):
            return respond({"error_code": shard})
        return shard.group_metadata_manager.classic_group_sync(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=group_instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments, respond=respond)

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        if not self.active:
            return _NOT_AVAILABLE
        if not group_id:
            return InvalidGroupIdError.code
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard
        return shard.group_metadata_manager.classic_group_heartbeat(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=group_instance_id)

    def leave_group(self, *, group_id: str, members: Iterable[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[dict[str, Any]]]:
        """``members`` are (member id, group instance id, reason); returns (top-level error, per member)."""
        members = list(members)
        if not self.active:
            return _NOT_AVAILABLE, []
        if not group_id:
            return InvalidGroupIdError.code, []
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, []
        return shard.group_metadata_manager.classic_group_leave(group_id=group_id, members=members)

    # ================================================================== consumer groups (KIP-848)

    def consumer_group_heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                                 instance_id: str | None, rack_id: str | None, rebalance_timeout_ms: int,
                                 subscribed_topic_names: Iterable[str] | None, subscribed_topic_regex: str | None,
                                 server_assignor: str | None, owned: Iterable[tuple[Any, Iterable[int]]] | None,
                                 client_id: str, client_host: str, api_version: int) -> dict[str, Any]:
        """ConsumerGroupHeartbeat: the answer's fields (``error_code``, ``error_message``, ``member_id``,
        ``member_epoch``, ``heartbeat_interval_ms``, ``assignment``: None or (topic id, partitions) pairs)."""
        names = tuple(subscribed_topic_names) if subscribed_topic_names is not None else None
        owned_map = None
        if owned is not None:
            owned_map = {}
            for topic_id, partitions in owned:
                owned_map.setdefault(topic_id, set()).update(partitions)

        def error(e: KafkaError) -> dict[str, Any]:
            return {"error_code": e.code, "error_message": str(e) or None, "member_id": None, "member_epoch": 0,
                    "heartbeat_interval_ms": 0, "assignment": None}

        try:
            self._validate_heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                     names, subscribed_topic_regex, server_assignor, owned_map, api_version)
        except KafkaError as e:
            return error(e)
        if not self.active:
            return error(CoordinatorNotAvailableError("The coordinator is not available."))
        shard = self._route(group_id)
        if isinstance(shard, int):
            return error(NotCoordinatorError("This is not the correct coordinator."))
        if not member_id:
            member_id = str(uuid.uuid4())  # v0: the coordinator names new members
        try:
            return shard.consumer_group_manager.heartbeat(
                group_id=group_id, member_id=member_id, member_epoch=member_epoch, instance_id=instance_id,
                rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=names,
                subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor, owned=owned_map,
                client_id=client_id, client_host=client_host)
        except KafkaError as e:
            return error(map_append_error(e)(str(e)) if not _is_group_error(e) else e)

    def _validate_heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                            names, regex, server_assignor, owned, api_version) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``; raises KafkaError."""
        def invalid(message: str) -> KafkaError:
            return InvalidRequestError(message)

        if not group_id:
            raise invalid("GroupId can't be empty.")
        if instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if rack_id == "":
            raise invalid("RackId can't be empty.")
        if api_version >= 1 and not member_id:
            raise invalid("MemberId can't be empty.")
        if member_epoch > 0 or member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not member_id:
                raise invalid("MemberId can't be empty.")
        elif member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                              "(re-)joining.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not member_id:
                raise invalid("MemberId can't be empty.")
            if instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid(f"MemberEpoch is {member_epoch}, but must be greater than or equal to -2.")
        if regex is not None:
            try:
                compile_regex(regex)
            except InvalidRegex as e:
                raise InvalidRegularExpressionError(
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.") from None
        if server_assignor is not None and server_assignor not in self.config.consumer_assignors:
            raise UnsupportedAssignorError(f"ServerAssignor {server_assignor} is not supported. Supported "
                                           f"assignors: {', '.join(self.config.consumer_assignors)}.")

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ from a consumer group member (Kafka's ``ConsumerGroup.validateOffsetFetch``):
        UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH, else NO_ERROR (also for other groups and admin fetches)."""
        if member_epoch < 0 and member_id is None:  # an admin client (a null member id, as Kafka checks)
            return NO_ERROR
        shard = self._route(group_id)
        if isinstance(shard, int):
            return NO_ERROR  # the fetch itself answers the routing error
        group = shard.group_metadata_manager.consumer_group(group_id)
        if group is None:
            return NO_ERROR
        member = group.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        return NO_ERROR if member.member_epoch == member_epoch else StaleMemberEpochError.code

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for group_id in group_ids:
            shard = self._route(group_id)
            if isinstance(shard, int):
                out.append({"group_id": group_id, "error_code": shard})
                continue
            manager = shard.group_metadata_manager
            if group_id in manager.groups and manager.consumer_group(group_id) is None:
                out.append({"group_id": group_id, "error_code": GroupIdNotFoundError.code,
                            "error_message": f"Group {group_id} is not a consumer group."})
            else:
                out.append(shard.consumer_group_manager.describe(group_id))
        return out

    # ================================================================== offsets

    def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       partitions: Iterable[tuple[str, int, int, int, str | None]], api_version: int,
                       retention_time_ms: int = -1) -> dict[tuple[str, int], int]:
        """Commit (topic, partition, offset, leader epoch, metadata) items; returns an error code per item."""
        items = list(partitions)
        shard = self._route(group_id)
        if isinstance(shard, int):
            return {(t, p): shard for t, p, *_ in items}
        return shard.offset_metadata_manager.commit_offset(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=group_instance_id,
            partitions=items, api_version=api_version, retention_time_ms=retention_time_ms)

    def commit_transactional_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                     generation_id: int, member_id: str, group_instance_id: str | None,
                                     partitions: Iterable[tuple[str, int, int, int, str | None]]
                                     ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: (topic, partition, offset, leader epoch, metadata) items written in the producer's
        transaction, pending until its marker; an error code per item."""
        items = list(partitions)
        if not self.active:
            return {(t, p): _NOT_AVAILABLE for t, p, *_ in items}
        if not group_id:
            return {(t, p): InvalidGroupIdError.code for t, p, *_ in items}
        shard = self._route(group_id)
        if isinstance(shard, int):
            return {(t, p): shard for t, p, *_ in items}
        return shard.offset_metadata_manager.commit_transactional_offset(
            group_id=group_id, producer_id=producer_id, producer_epoch=producer_epoch, generation_id=generation_id,
            member_id=member_id, group_instance_id=group_instance_id, partitions=items)

    def on_transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` was written to ``__consumer_offsets-partition``
        (Kafka's ``onTransactionCompleted``): its pending offsets there are committed or dropped."""
        shard = self.shards.get(partition)
        if shard is not None:
            shard.replay_end_transaction(producer_id, commit)

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None,
                      require_stable: bool = False, entry: Callable[..., Any] = dict
                      ) -> tuple[int, list[tuple[str, list[Any]]]]:
        """Committed offsets of ``topics`` ((name, partitions) pairs), or of everything when None; each
        partition's answer made by ``entry`` (see ``OffsetMetadataManager.fetch_offsets``). With
        ``require_stable`` a partition with offsets of an open transaction answers UNSTABLE_OFFSET_COMMIT."""
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, []
        return NO_ERROR, shard.offset_metadata_manager.fetch_offsets(group_id, topics, entry, require_stable)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                       ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: drop committed offsets of topics the group does not consume (any more)."""
        items = list(partitions)
        if not self.active:
            return _NOT_AVAILABLE, {}
        if not group_id:
            return InvalidGroupIdError.code, {}
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, {}
        return shard.offset_metadata_manager.delete_offsets(group_id, items)

    def committed(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        shard = self.shard_for(group_id)
        return shard.offset_metadata_manager.committed(group_id, topic, partition) if shard is not None else None

    def on_topics_deleted(self, topics: Iterable[str]) -> None:
        """Drop the committed offsets of deleted topics (Kafka's ``onPartitionsDeleted``), in every partition."""
        if not self.active:
            return
        deleted = set(topics)
        for shard in list(self.shards.values()):
            shard.on_partitions_deleted(deleted)

    def cleanup_group_metadata(self) -> int:
        """Run offset and group expiration in every loaded partition now; returns the tombstones written."""
        return sum(shard.cleanup_group_metadata() for shard in list(self.shards.values()))

    # ================================================================== admin

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> tuple[int, list[dict[str, Any]]]:
        """The groups of every loaded partition, by group id."""
        if not self.active:
            return _NOT_AVAILABLE, []
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        out = [g for shard in self.shards.values() for g in shard.group_metadata_manager.list_groups(states, types)]
        out.sort(key=lambda g: g["group_id"])
        return NO_ERROR, out

    def describe_groups(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for group_id in group_ids:
            shard = self._route(group_id)
            if isinstance(shard, int):
                out.append({"group_id": group_id, "error_code": shard})
            else:
                out.append(shard.group_metadata_manager.describe_group(group_id))
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Delete groups (distinct, answered in request order), one write per partition."""
        results: dict[str, int] = {}
        by_shard: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):
            shard = self._route(group_id)
            if isinstance(shard, int):
                results[group_id] = shard
            else:
                results[group_id] = NO_ERROR
                by_shard.setdefault(shard.partition, []).append(group_id)
        for partition, ids in by_shard.items():
            results.update(self.shards[partition].delete_groups(ids))
        return results
