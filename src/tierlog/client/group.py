"""Classic consumer-group membership and offsets, as Kafka's ConsumerCoordinator runs them.

- The group coordinator is found with FindCoordinator and reached on a connection of its own (node
  id ``2**31 - 1 - broker id``, Kafka's trick) so heartbeats never queue behind long-polling
  fetches. A connection failure or NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forgets it and the
  next request looks it up again.
- Joining: JoinGroup (an empty member id first; MEMBER_ID_REQUIRED at v4+ hands out the id to join
  with), the leader runs the assignor named by the coordinator over every member's subscription,
  SyncGroup delivers each member's partitions. ``group.instance.id`` makes the member static
  (KIP-345): it keeps its partitions across restarts and never sends LeaveGroup.
- The protocol is eager: before rejoining, a member commits its positions (``enable.auto.commit``),
  tells the rebalance listener its partitions are revoked and drops them.
- A heartbeat task runs every ``heartbeat.interval.ms`` while the member is in the group.
  REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID make the next ``poll`` rejoin;
  no heartbeat answer for ``session.timeout.ms`` marks the coordinator unknown; no ``poll`` for
  ``max.poll.interval.ms`` makes the member leave the group, and the next ``poll`` rejoins.
- Offsets: OffsetCommit with the member's generation (generation -1 and no member id for
  partitions assigned by hand), OffsetFetch for initial positions (``require_stable`` with
  read_committed), automatic commits every ``auto.commit.interval.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tierlog import errors
from tierlog.client.assignors import PartitionAssignor
from tierlog.client.cluster import Node
from tierlog.client.connection import OFFSET_COMMIT_LAST_VERSION_WITH_NAMES, OFFSET_FETCH_LAST_VERSION_WITH_NAMES
from tierlog.client.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tierlog.client.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from tierlog.client.fetcher import SubscriptionState
from tierlog.client.types import OffsetAndMetadata, TopicPartition
from tierlog.protocol import ApiKey

log = logging.getLogger("tierlog.client.consumer")

__all__ = ["ConsumerCoordinator", "MemberState"]

_COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.code
_COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.code
_NOT_COORDINATOR = errors.NotCoordinatorError.code
_REQUEST_TIMED_OUT = errors.RequestTimedOutError.code
_ILLEGAL_GENERATION = errors.IllegalGenerationError.code
_UNKNOWN_MEMBER_ID = errors.UnknownMemberIdError.code
_REBALANCE_IN_PROGRESS = errors.RebalanceInProgressError.code
_TOPIC_AUTHORIZATION_FAILED = errors.TopicAuthorizationFailedError.code
_GROUP_AUTHORIZATION_FAILED = errors.GroupAuthorizationFailedError.code
_MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.code
_FENCED_INSTANCE_ID = errors.FencedInstanceIdError.code
_UNSTABLE_OFFSET_COMMIT = errors.UnstableOffsetCommitError.code
_UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.code
_COORDINATOR_ERRORS = frozenset({_COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR})
# JoinGroup / SyncGroup failures after which the member simply joins again at once (Java's joinGroupIfNeeded)
_REJOIN_AT_ONCE = frozenset({_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION, _REBALANCE_IN_PROGRESS, _MEMBER_ID_REQUIRED})
_JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000
_INT32_MAX = 2**31 - 1

RebalanceInProgressError = errors.RebalanceInProgressError


def offset_fetch_values(version: int, group_id: str, topics: Mapping[str, list[int]] | None,
                        ids: Mapping[str, Any], require_stable: bool, member_id: str | None = None,
                        member_epoch: int = -1) -> dict[str, Any]:
    """An OffsetFetch of one group at ``version`` (``topics`` None: every partition the group committed):
    v8+ in the batched form, v9+ with the KIP-848 member, v10+ naming topics by id (``ids``)."""
    if topics is None:
        listed = None
    elif version >= 10:
        listed = [{"topic_id": ids[t], "partition_indexes": ps} for t, ps in topics.items()]
    else:
        listed = [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    if version < 8:
        return {"group_id": group_id, "topics": listed, "require_stable": require_stable}
    group: dict[str, Any] = {"group_id": group_id, "topics": listed}
    if version >= 9:
        group.update(member_id=member_id, member_epoch=member_epoch)
    return {"groups": [group], "require_stable": require_stable}


def offset_fetch_answer(response: Any, version: int, names: Mapping[Any, str]) -> tuple[int, list[tuple[str, Any]]]:
    """The group's error code and its (topic name, partitions) from an OffsetFetch answer at ``version``
    (``names``: topic id -> name, for v10+); a topic id this client did not ask for is left out."""
    if version >= 8:
        response = response.groups[0]
    top = getattr(response, "error_code", None)
    if version < 10:
        return (top.value if top is not None else 0), [(t.name, t.partitions) for t in response.topics]
    return top.value, [(names[t.topic_id], t.partitions) for t in response.topics if t.topic_id in names]


class MemberState:
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


def _now() -> float:
    return time.monotonic()


def _error(code: int, what: str) -> errors.KafkaError:
    cls = errors.error_for_code(code)
    return cls(f"{what}: {cls.name}")


async def _call_listener(listener: Any, method: str, partitions: list[TopicPartition]) -> None:
    """Call a ConsumerRebalanceListener method (plain or async); its errors are logged, not raised."""
    fn = getattr(listener, method, None) if listener is not None else None
    if fn is None and method == "on_partitions_lost":
        fn = getattr(listener, "on_partitions_revoked", None)  # Java's default onPartitionsLost
    if fn is None:
        return
    try:
        result = fn(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("User provided listener %s failed on %s", type(listener).__name__, method)


class ConsumerCoordinator:
    def __init__(self, client: Any, subs: SubscriptionState, config: Mapping[str, Any], wakeup: asyncio.Event,
                 assignors: Sequence[PartitionAssignor]) -> None:
        self.client = client
        self.subs = subs
        self.config = config
        self.wakeup = wakeup
        self.assignors = list(assignors)
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config.get("group.instance.id")
        self.session_timeout_ms = config["session.timeout.ms"]
        self.heartbeat_interval = config["heartbeat.interval.ms"] / 1000
        self.rebalance_timeout_ms = config["max.poll.interval.ms"]
        self.request_timeout_ms = config["request.timeout.ms"]
        self.retry_backoff = config["retry.backoff.ms"] / 1000
        self.retry_backoff_max = max(self.retry_backoff, config.get("retry.backoff.max.ms", 0) / 1000)
        self.auto_commit = bool(config["enable.auto.commit"])
        self.auto_commit_interval = config["auto.commit.interval.ms"] / 1000
        self.require_stable = config["isolation.level"] == "read_committed"
        self.rack = config.get("client.rack") or None
        self.exclude_internal = bool(config.get("exclude.internal.topics", True))

        self.coordinator: Node | None = None
        self.generation = -1
        self.member_id = ""
        self.protocol: str | None = None
        self.leader = False
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.needs_join_prepare = True
        self.joined_subscription: set[str] | None = None
        self.assignment_snapshot: dict[str, int | None] | None = None  # the leader's metadata at assignment
        self.pattern_metadata_pending = False

        self._find_task: asyncio.Task | None = None
        self._join_task: asyncio.Task | None = None
        self._hb_task: asyncio.Task | None = None
        self._auto_commit_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._hb_wake = asyncio.Event()
        self._fatal: BaseException | None = None
        now = _now()
        self._last_poll = now
        self.polling = 0  # poll() calls under way: the application is not stalled
        self._last_hb_ok = now
        self._next_hb = now
        self._next_auto_commit = now + self.auto_commit_interval
        self._closed = False

    # -- helpers -------------------------------------------------------------------------------------

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # whoever needed the result has seen the error; this only marks it retrieved
            log.debug("background task %s failed: %r", task.get_name(), task.exception())

    @property
    def is_dynamic_member(self) -> bool:
        return self.group_instance_id is None

    def _reset_state(self, reset_member_id: bool, reason: str) -> None:
        """Forget the generation (and the member id unless the generation alone was stale), rejoin."""
        log.info("Group %s: resetting generation (%s)", self.group_id, reason)
        self.generation = -1
        self.protocol = None
        if reset_member_id:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.request_rejoin(reason)

    def request_rejoin(self, reason: str) -> None:
        self.rejoin_needed = True
        self.rejoin_reason = reason
        self.wakeup.set()

    def _metadata_snapshot(self) -> dict[str, int | None]:
        cluster = self.client.cluster
        return {t: cluster.partition_count(t) for t in self.subs.group_subscription}

    def _backoff(self, attempt: int) -> float:
        delay = min(self.retry_backoff_max, self.retry_backoff * 2 ** min(max(attempt - 1, 0), 20))
        return delay * random.uniform(0.8, 1.2) if self.retry_backoff_max > self.retry_backoff else delay

    # -- coordinator discovery ----------------------------------------------------------------------

    def mark_coordinator_unknown(self, reason: str) -> None:
        if self.coordinator is not None:
            log.info("Group %s: coordinator %s is unavailable or invalid (%s); will rediscover it",
                     self.group_id, self.coordinator.address, reason)
            self.coordinator = None

    async def _find_coordinator(self) -> None:
        response = await self.client.send_any(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0})
        code = response.error_code.value
        if code:
            raise _error(code, f"FindCoordinator for group {self.group_id}")
        node_id = int(response.node_id)
        # a connection of its own, apart from the broker's data connection
        self.coordinator = Node(_INT32_MAX - node_id, response.host, int(response.port))
        self._last_hb_ok = _now()
        log.info("Group %s: discovered coordinator %s (broker %s)", self.group_id, self.coordinator.address, node_id)

    def lookup_coordinator(self) -> asyncio.Task:
        if self._find_task is None or self._find_task.done():
            self._find_task = self._spawn(self._find_coordinator(), f"tierlog-find-coordinator-{self.group_id}")
        return self._find_task

    async def ensure_coordinator_ready(self, deadline: float) -> bool:
        """Find the coordinator, retrying until ``deadline``; False when time ran out."""
        attempt = 0
        while self.coordinator is None:
            if self._closed:
                raise IllegalStateError("the consumer is closed")
            task = self.lookup_coordinator()
            remaining = deadline - _now()
            if remaining <= 0:
                return False
            done, _ = await asyncio.wait({task}, timeout=remaining)
            if not done:
                return False
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                if not isinstance(exc, errors.KafkaError) or not exc.retriable:
                    raise exc
                attempt += 1
                log.debug("Group %s: FindCoordinator failed: %r", self.group_id, exc)
                if exc.code in (_COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR):
                    self.client.request_update()
                await asyncio.sleep(min(self._backoff(attempt), max(0.0, deadline - _now())))
        return True

    async def _send(self, api_key: int, values: Mapping[str, Any], timeout_ms: int | None = None,
                    max_version: int | None = None) -> Any:
        node = self.coordinator
        if node is None:
            raise errors.CoordinatorNotAvailableError(f"no known coordinator for group {self.group_id}")
        try:
            return await self.client.send(node, api_key, values, timeout_ms=timeout_ms, max_version=max_version)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            if self.coordinator is node:
                self.mark_coordinator_unknown(str(exc))
            raise

    # -- poll -----------------------------------------------------------------------------------------

    def record_poll(self) -> None:
        self._last_poll = _now()

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subs.auto_assigned:
            return False
        if self.rejoin_needed or self.state != MemberState.STABLE:
            return True
        if self.joined_subscription is not None and self.joined_subscription != self.subs.subscription:
            return True
        return self.assignment_snapshot is not None and self.assignment_snapshot != self._metadata_snapshot()

    def update_pattern_subscription(self) -> None:
        """Match the pattern against the topics in metadata (a change triggers a rejoin)."""
        if self.subs.mode != SubscriptionState.AUTO_PATTERN or self.subs.pattern is None:
            return
        cluster = self.client.cluster
        topics = {t for t, info in cluster.topics.items()
                  if self.subs.pattern.fullmatch(t) and cluster.partition_count(t)
                  and not (self.exclude_internal and info.internal)}
        if self.subs.change_subscription(topics):
            log.info("Group %s: pattern subscription now matches %s", self.group_id, sorted(topics))

    async def poll(self, deadline: float) -> bool:
        """Keep the membership current: find the coordinator, (re)join when needed, auto-commit.
        False when ``deadline`` passed before the member was in the group."""
        self.record_poll()
        if self._fatal is not None:
            exc, self._fatal = self._fatal, None
            raise exc
        if self.subs.auto_assigned:
            if self.subs.mode == SubscriptionState.AUTO_PATTERN:
                if self.pattern_metadata_pending:
                    # match against fresh metadata before the first join, as Java does
                    with contextlib.suppress(errors.KafkaError):
                        await self.client.wait_for_update(max(0.0, deadline - _now()))
                    self.pattern_metadata_pending = False
                self.update_pattern_subscription()
            if self.coordinator is None and not await self.ensure_coordinator_ready(deadline):
                return False
            if self.rejoin_needed_or_pending() and not await self.ensure_active_group(deadline):
                return False
        self.maybe_auto_commit()
        return True

    # -- joining --------------------------------------------------------------------------------------

    async def ensure_active_group(self, deadline: float) -> bool:
        if self._hb_task is None:
            self._hb_task = self._spawn(self._heartbeat_loop(), f"tierlog-heartbeat-{self.group_id}")
        if self._join_task is None or self._join_task.done():
            self._join_task = self._spawn(self._join_loop(), f"tierlog-join-{self.group_id}")
        task = self._join_task
        remaining = deadline - _now()
        if remaining <= 0 and not task.done():
            return False
        done, _ = await asyncio.wait({task}, timeout=max(remaining, 0))
        if not done or task.cancelled():
            return False
        exc = task.exception()
        if exc is not None:
            raise exc
        return not self.rejoin_needed_or_pending()

    async def _join_loop(self) -> None:
        attempt = 0
        while self.rejoin_needed_or_pending() and not self._closed:
            if not await self.ensure_coordinator_ready(_now() + 3600):
                continue
            if self.needs_join_prepare:
                self.needs_join_prepare = False
                await self._on_join_prepare()
            try:
                assignment = await self._join_and_sync()
            except errors.KafkaError as exc:
                if self.state != MemberState.STABLE:
                    self.state = MemberState.UNJOINED
                if exc.code in _REJOIN_AT_ONCE:
                    log.info("Group %s: %s; joining again", self.group_id, exc.message)
                    continue
                if not exc.retriable:
                    raise
                attempt += 1
                log.info("Group %s: join failed (%s); retrying", self.group_id, exc.message)
                await asyncio.sleep(self._backoff(attempt))
                continue
            attempt = 0
            await self._on_join_complete(assignment)

    async def _on_join_prepare(self) -> None:
        if self.auto_commit:
            offsets = self.subs.all_consumed()
            if offsets:
                try:
                    await self.commit_offsets(offsets, _now() + self.rebalance_timeout_ms / 1000)
                except errors.KafkaError as exc:
                    log.warning("Group %s: offset commit before rebalance failed: %s", self.group_id, exc.message)
        revoked = list(self.subs.assignment)
        if revoked:
            lost = self.generation < 0  # the group moved on without us: the partitions may be elsewhere already
            log.info("Group %s: %s partitions %s", self.group_id, "lost" if lost else "revoking", revoked)
            await _call_listener(self.subs.listener, "on_partitions_lost" if lost else "on_partitions_revoked",
                                 revoked)
        if self.subs.auto_assigned:
            self.subs.assign_from_subscribed([])
        self.leader = False
        self.assignment_snapshot = None

    def _subscription_bytes(self, assignor: PartitionAssignor, topics: list[str]) -> bytes:
        owned = [(tp.topic, tp.partition) for tp in self.subs.assignment]
        return encode_subscription(topics, assignor.subscription_user_data(set(topics)), owned_partitions=owned,
                                   generation_id=self.generation, rack_id=self.rack)

    async def _join_and_sync(self) -> Assignment:
        topics = sorted(self.subs.subscription)
        self.joined_subscription = set(topics)
        protocols = [{"name": a.name, "metadata": self._subscription_bytes(a, topics)} for a in self.assignors]
        self.state = MemberState.PREPARING_REBALANCE
        response = await self._send(ApiKey.JOIN_GROUP, {
            "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocols": protocols, "reason": self.rejoin_reason or None,
        }, timeout_ms=min(_INT32_MAX, max(self.request_timeout_ms,
                                          self.rebalance_timeout_ms + _JOIN_GROUP_TIMEOUT_LAPSE_MS)))
        code = response.error_code.value
        if code == _MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self.generation = -1
            raise _error(code, f"JoinGroup for group {self.group_id} needs member id {self.member_id}")
        if code == _UNKNOWN_MEMBER_ID:
            self._reset_state(True, "JoinGroup: unknown member id")
            raise _error(code, f"JoinGroup for group {self.group_id}")
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(errors.error_for_code(code).name)
            raise _error(code, f"JoinGroup for group {self.group_id}")
        if code:
            raise _error(code, f"JoinGroup for group {self.group_id} failed")
        ptype = getattr(response, "protocol_type", None)
        if ptype is not None and ptype != CONSUMER_PROTOCOL_TYPE:
            raise errors.InconsistentGroupProtocolError(f"JoinGroup answered protocol type {ptype!r}, not 'consumer'")
        self.generation = int(response.generation_id)
        self.member_id = response.member_id
        self.protocol = response.protocol_name
        self.state = MemberState.COMPLETING_REBALANCE
        self._last_hb_ok = _now()
        self._next_hb = _now() + self.heartbeat_interval
        self._hb_wake.set()
        log.info("Group %s: joined generation %s as %s (protocol %s)", self.group_id, self.generation,
                 self.member_id, self.protocol)
        assignments: list[dict[str, Any]] = []
        self.leader = response.leader == response.member_id
        if self.leader:
            assignments = await self._perform_assignment(response)
        return await self._sync(assignments)

    async def _perform_assignment(self, response: Any) -> list[dict[str, Any]]:
        assignor = next((a for a in self.assignors if a.name == response.protocol_name), None)
        if assignor is None:
            raise IllegalStateError(f"Coordinator selected invalid assignment protocol: {response.protocol_name}")
        members = {m.member_id: decode_subscription(m.metadata, group_instance_id=m.group_instance_id)
                   for m in response.members}
        all_topics: set[str] = set()
        for sub in members.values():
            all_topics.update(sub.topics)
        self.subs.group_subscription = all_topics | self.subs.subscription
        cluster = self.client.cluster
        if self.client.add_topics(all_topics) or any(t not in cluster.topics for t in all_topics):
            # the leader assigns every member's topics: know them all first
            with contextlib.suppress(errors.KafkaError):
                await self.client.wait_for_update(self.request_timeout_ms / 1000)
        self.assignment_snapshot = self._metadata_snapshot()
        if getattr(response, "skip_assignment", False):
            return []  # KIP-814: the coordinator assigns; the leader only tracks metadata
        counts = {t: n for t, n in self.assignment_snapshot.items() if n}
        result = assignor.assign(counts, members)
        log.info("Group %s: leader assigned %s", self.group_id,
                 {m: {t: ps for t, ps in a.items()} for m, a in result.items()})
        return [{"member_id": m, "assignment": encode_assignment(a)} for m, a in result.items()]

    async def _sync(self, assignments: list[dict[str, Any]]) -> Assignment:
        generation, member_id = self.generation, self.member_id
        response = await self._send(ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": generation, "member_id": member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocol_name": self.protocol, "assignments": assignments})
        code = response.error_code.value
        if code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
            if generation == self.generation and member_id == self.member_id:
                self._reset_state(code == _UNKNOWN_MEMBER_ID, f"SyncGroup: {errors.error_for_code(code).name}")
            raise _error(code, f"SyncGroup for group {self.group_id}")
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(errors.error_for_code(code).name)
            raise _error(code, f"SyncGroup for group {self.group_id}")
        if code:
            raise _error(code, f"SyncGroup for group {self.group_id} failed")
        name = getattr(response, "protocol_name", None)
        if name is not None and self.protocol is not None and name != self.protocol:
            raise errors.InconsistentGroupProtocolError(f"SyncGroup answered protocol {name!r}, not {self.protocol!r}")
        if self.state != MemberState.COMPLETING_REBALANCE or generation != self.generation:
            # the heartbeat task reset the generation meanwhile
            raise _error(_ILLEGAL_GENERATION, f"SyncGroup for group {self.group_id}: generation reset meanwhile")
        self.state = MemberState.STABLE
        self.rejoin_needed = False
        self.rejoin_reason = ""
        return decode_assignment(response.assignment)

    async def _on_join_complete(self, assignment: Assignment) -> None:
        assignor = next((a for a in self.assignors if a.name == self.protocol), None)
        if assignor is not None:
            assignor.on_assignment(assignment, self.generation)
        partitions = [TopicPartition(t, p) for t, ps in assignment.partitions.items() for p in ps]
        foreign = {tp.topic for tp in partitions} - self.subs.subscription
        if foreign:
            # the subscription changed while joining (a pattern match, a new subscribe): join again
            log.info("Group %s: assigned topics %s we are not subscribed to; rejoining", self.group_id, sorted(foreign))
            self.request_rejoin("assigned topics are not subscribed")
        self.subs.assign_from_subscribed(partitions)
        self.client.add_topics({tp.topic for tp in partitions})
        self.needs_join_prepare = True
        self._next_auto_commit = _now() + self.auto_commit_interval
        log.info("Group %s: generation %s assigned partitions %s", self.group_id, self.generation, partitions)
        await _call_listener(self.subs.listener, "on_partitions_assigned", partitions)
        self.wakeup.set()

    # -- heartbeats -----------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                await self._heartbeat_step()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep heartbeating whatever one round did
                log.exception("Group %s: heartbeat round failed", self.group_id)
                await asyncio.sleep(self.retry_backoff)

    async def _sleep_hb(self, seconds: float) -> None:
        self._hb_wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hb_wake.wait(), max(seconds, 0.001))

    async def _heartbeat_step(self) -> None:
        if self.state not in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE):
            await self._sleep_hb(self.heartbeat_interval)
            return
        now = _now()
        if self.coordinator is None:
            self.lookup_coordinator()
            await self._sleep_hb(self.retry_backoff)
            return
        if now - self._last_hb_ok > self.session_timeout_ms / 1000:
            self.mark_coordinator_unknown("session timed out without receiving a heartbeat response")
            return
        if not self.polling and now - self._last_poll > self.rebalance_timeout_ms / 1000:
            log.warning(
                "Group %s: consumer poll timeout has expired: the time between poll() calls exceeded "
                "max.poll.interval.ms (%s ms); leaving the group. Process records faster, lower "
                "max.poll.records or raise max.poll.interval.ms.", self.group_id, self.rebalance_timeout_ms)
            await self.maybe_leave_group("consumer poll timeout has expired.")
            return
        if now < self._next_hb:
            await self._sleep_hb(self._next_hb - now)
            return
        self._next_hb = now + self.heartbeat_interval
        if not await self._send_heartbeat():
            self._next_hb = _now() + self.retry_backoff

    async def _send_heartbeat(self) -> bool:
        generation, member_id = self.generation, self.member_id
        try:
            response = await self._send(ApiKey.HEARTBEAT, {
                "group_id": self.group_id, "generation_id": generation, "member_id": member_id,
                "group_instance_id": self.group_instance_id}, timeout_ms=self.request_timeout_ms)
        except errors.KafkaError as exc:
            log.debug("Group %s: heartbeat failed: %r", self.group_id, exc)
            return False
        code = response.error_code.value
        if code == errors.NO_ERROR:
            self._last_hb_ok = _now()
            return True
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(errors.error_for_code(code).name)
            return False
        if code == _REBALANCE_IN_PROGRESS:
            # keep heartbeating while the group rebalances, so the session does not expire meanwhile
            self._last_hb_ok = _now()
            if self.state == MemberState.STABLE:
                self.request_rejoin("group is already rebalancing")
            return True
        if code in (_ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID, _FENCED_INSTANCE_ID):
            if generation == self.generation and member_id == self.member_id:
                self._reset_state(code != _ILLEGAL_GENERATION, f"heartbeat: {errors.error_for_code(code).name}")
                if code == _FENCED_INSTANCE_ID:
                    self._fatal = _error(code, f"group.instance.id {self.group_instance_id} was fenced by another "
                                               "consumer with the same id")
            return code != _FENCED_INSTANCE_ID
        if code == _GROUP_AUTHORIZATION_FAILED:
            self._fatal = _error(code, f"Heartbeat for group {self.group_id}")
            self.wakeup.set()
            return False
        log.warning("Group %s: unexpected heartbeat error %s", self.group_id, errors.error_for_code(code).name)
        return False

    # -- leaving --------------------------------------------------------------------------------------

    async def maybe_leave_group(self, reason: str) -> None:
        """LeaveGroup for a dynamic member in the group (best effort, no retries); always forgets the
        generation, so the next poll joins again."""
        member_id = self.member_id
        if (self.is_dynamic_member and self.coordinator is not None and self.state != MemberState.UNJOINED
                and member_id):
            log.info("Group %s: member %s leaving the group (%s)", self.group_id, member_id, reason)
            try:
                response = await self._send(ApiKey.LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": member_id,
                    "members": [{"member_id": member_id, "group_instance_id": None, "reason": reason[:255]}]},
                    timeout_ms=self.request_timeout_ms)
                code = response.error_code.value
                if code:
                    log.info("Group %s: LeaveGroup answered %s", self.group_id, errors.error_for_code(code).name)
            except errors.KafkaError as exc:
                log.info("Group %s: LeaveGroup failed: %s", self.group_id, exc.message)
        self._reset_state(True, reason)

    def leave_in_background(self, reason: str) -> None:
        """For unsubscribe(): drop the membership now, send LeaveGroup in the background."""
        if self._join_task is not None and not self._join_task.done():
            self._join_task.cancel()
        self._spawn(self.maybe_leave_group(reason), f"tierlog-leave-{self.group_id}")
        self.needs_join_prepare = True
        self.joined_subscription = None
        self.assignment_snapshot = None

    async def close(self, deadline: float) -> None:
        """Commit (with enable.auto.commit), revoke, leave the group, stop the background tasks."""
        try:
            if self._join_task is not None and not self._join_task.done():
                self._join_task.cancel()
            if self.auto_commit:
                offsets = self.subs.all_consumed()
                if offsets:
                    try:
                        await self.commit_offsets(offsets, deadline)
                    except errors.KafkaError as exc:
                        log.warning("Group %s: offset commit on close failed: %s", self.group_id, exc.message)
            if self.subs.auto_assigned and self.subs.assignment:
                await _call_listener(self.subs.listener, "on_partitions_revoked", list(self.subs.assignment))
            if self.subs.auto_assigned or self.state != MemberState.UNJOINED:
                await self.maybe_leave_group("the consumer is being closed")
        finally:
            self._closed = True
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    # -- offsets --------------------------------------------------------------------------------------

    def maybe_auto_commit(self) -> None:
        if not self.auto_commit or self._closed:
            return
        now = _now()
        if now < self._next_auto_commit:
            return
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        self._next_auto_commit = now + self.auto_commit_interval
        offsets = self.subs.all_consumed()
        if offsets:
            self._auto_commit_task = self._spawn(self._auto_commit(offsets), f"tierlog-autocommit-{self.group_id}")

    async def _auto_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        # one attempt, as Java's commitAsync; a retriable failure brings the next one forward
        try:
            if not await self.ensure_coordinator_ready(_now() + self.request_timeout_ms / 1000):
                raise KafkaTimeoutError("coordinator not available")
            await self._commit_once(offsets)
            log.debug("Group %s: auto-committed %s", self.group_id, offsets)
        except errors.KafkaError as exc:
            log.warning("Group %s: asynchronous auto-commit of offsets failed: %s", self.group_id, exc.message)
            if exc.retriable:
                self._next_auto_commit = _now() + self.retry_backoff

    async def commit_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: float) -> None:
        """Synchronous commit, retrying retriable errors until ``deadline``."""
        if not offsets:
            return
        attempt = 0
        last: errors.KafkaError | None = None
        while True:
            try:
                if not await self.ensure_coordinator_ready(deadline):
                    raise KafkaTimeoutError(f"coordinator of group {self.group_id} not found in time")
                await self._commit_once(offsets)
                return
            except errors.KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            attempt += 1
            delay = self._backoff(attempt)
            if _now() + delay >= deadline:
                if isinstance(last, KafkaTimeoutError) and not self.client.brokers_unreachable:
                    raise last
                raise self.client.timeout_error(f"Offset commit for group {self.group_id} did not complete in time",
                                                last) from last
            await asyncio.sleep(delay)

    #: OffsetCommit v9 means "member epoch" to the broker (KIP-848); a classic member stays at v8
    offset_commit_max_version = 8

    def _commit_identity(self) -> tuple[int, str]:
        """The generation and member id an OffsetCommit carries; raises when the member cannot commit."""
        if self.subs.auto_assigned:
            if self.state != MemberState.STABLE or self.generation < 0:
                if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                    raise RebalanceInProgressError(
                        "Offset commit cannot be completed since the consumer group is executing a rebalance "
                        "at the moment. You can try completing the rebalance by calling poll() and then retry "
                        "commit again")
                raise CommitFailedError(
                    "Commit cannot be completed since the consumer is not part of an active group for auto "
                    "partition assignment; it is likely that the consumer was kicked out of the group.")
            return self.generation, self.member_id
        return -1, ""

    def _member_commit_error(self, code: int, generation: int, what: str) -> None:
        """Raise for an OffsetCommit error about the membership (the classic protocol's generation)."""
        if code == _REBALANCE_IN_PROGRESS:
            self.request_rejoin("offset commit failed since group is already rebalancing")
            raise RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer group is executing a rebalance at "
                "the moment. You can try completing the rebalance by calling poll() and then retry commit")
        if code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
            if generation != self.generation and self.state == MemberState.PREPARING_REBALANCE:
                raise RebalanceInProgressError(
                    "Offset commit cannot be completed since the consumer member's generation is already "
                    "stale; call poll() to complete the rebalance and retry")
            if generation == self.generation:
                why = f"OffsetCommit: {errors.error_for_code(code).name}"
                self._reset_state(code == _UNKNOWN_MEMBER_ID, why)
            raise CommitFailedError(
                "Commit cannot be completed since the group has already rebalanced and assigned the "
                "partitions to another member. This means that the time between subsequent calls to poll() "
                "was longer than the configured max.poll.interval.ms, which typically implies that the poll "
                "loop is spending too much time message processing.")

    async def _commit_once(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        generation, member_id = self._commit_identity()
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                "committed_metadata": om.metadata or ""})
        # v10 names topics by id (a KIP-848 member's commits, as Kafka's consumer), when every topic has one
        ids, names = self.client.cluster.topic_ids(topics)
        max_version = self.offset_commit_max_version
        if None in ids.values():
            max_version = min(max_version, OFFSET_COMMIT_LAST_VERSION_WITH_NAMES)
        response = await self._send(ApiKey.OFFSET_COMMIT, {
            "group_id": self.group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": self.group_instance_id,
            "topics": [{"name": t, "topic_id": ids[t], "partitions": ps} for t, ps in topics.items()]},
            max_version=max_version)
        unauthorized: set[str] = set()
        for t in response.topics:
            name = getattr(t, "name", None) or names.get(t.topic_id)
            for p in t.partitions:
                code = p.error_code.value
                if not code:
                    continue
                what = f"Offset commit for {name}-{p.partition_index} in group {self.group_id}"
                if code == _TOPIC_AUTHORIZATION_FAILED:
                    unauthorized.add(name)
                    continue
                if code in (errors.UnknownTopicIdError.code, errors.InconsistentTopicIdError.code):
                    self.client.request_update()  # the topic was recreated: commit again with its new id
                    raise _error(code, what)
                if code in _COORDINATOR_ERRORS or code == _REQUEST_TIMED_OUT:
                    self.mark_coordinator_unknown(errors.error_for_code(code).name)
                    raise _error(code, what)
                self._member_commit_error(code, generation, what)
                raise _error(code, what)
        if unauthorized:
            raise _error(_TOPIC_AUTHORIZATION_FAILED, f"Not authorized to commit to topics {sorted(unauthorized)}")

    async def fetch_committed(self, partitions: Iterable[TopicPartition],
                              deadline: float) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets (None where nothing is committed), retrying retriable errors until ``deadline``."""
        partitions = list(dict.fromkeys(partitions))
        if not partitions:
            return {}
        attempt = 0
        last: errors.KafkaError | None = None
        while True:
            try:
                if not await self.ensure_coordinator_ready(deadline):
                    raise KafkaTimeoutError(f"coordinator of group {self.group_id} not found in time")
                return await self._fetch_committed_once(partitions)
            except errors.KafkaError as exc:
                # STALE_MEMBER_EPOCH: the epoch moved on while asking; the next attempt carries the new one
                if not exc.retriable and exc.code != errors.StaleMemberEpochError.code:
                    raise
                last = exc
            attempt += 1
            delay = self._backoff(attempt)
            if _now() + delay >= deadline:
                if isinstance(last, KafkaTimeoutError) and not self.client.brokers_unreachable:
                    raise last
                raise self.client.timeout_error(
                    f"Fetching committed offsets of group {self.group_id} did not complete in time", last) from last
            await asyncio.sleep(delay)

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        """The member id and epoch an OffsetFetch v9+ carries: none for a classic member (KIP-848's member
        sends its own, checked by the coordinator as a commit's)."""
        return None, -1

    async def _fetch_committed_once(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Any]:
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        node = self.coordinator
        if node is None:
            raise errors.CoordinatorNotAvailableError(f"no known coordinator for group {self.group_id}")
        ids, names = self.client.cluster.topic_ids(topics)
        version = await self.client.version(node, ApiKey.OFFSET_FETCH, OFFSET_FETCH_LAST_VERSION_WITH_NAMES
                                            if None in ids.values() else None)
        member_id, member_epoch = self._offset_fetch_member()
        response = await self._send(ApiKey.OFFSET_FETCH, offset_fetch_values(
            version, self.group_id, topics, ids, self.require_stable, member_id, member_epoch), max_version=version)
        top, answered = offset_fetch_answer(response, version, names)
        if top:
            if top in _COORDINATOR_ERRORS:
                self.mark_coordinator_unknown(errors.error_for_code(top).name)
            raise _error(top, f"OffsetFetch for group {self.group_id}")
        out: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in partitions}
        for name, parts in answered:
            for p in parts:
                tp = TopicPartition(name, int(p.partition_index))
                code = p.error_code.value
                if code == _UNKNOWN_TOPIC_OR_PARTITION:
                    continue  # nothing committed for a topic the broker does not know
                if code:
                    if code == _UNSTABLE_OFFSET_COMMIT:
                        log.debug("Group %s: %s has an unstable offset commit; retrying", self.group_id, tp)
                    raise _error(code, f"OffsetFetch for {tp.topic}-{tp.partition} in group {self.group_id}")
                offset = int(p.committed_offset)
                if offset >= 0:
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[tp] = OffsetAndMetadata(offset, p.metadata or "", epoch)
        return out
