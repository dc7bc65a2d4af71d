"""KIP-848 group membership (``group.protocol=consumer``), as Kafka's ConsumerMembershipManager and
ConsumerHeartbeatRequestManager run it.

- The member makes its own id (KIP-1082) and joins with a ConsumerGroupHeartbeat at member epoch 0
  carrying everything: subscribed topic names or regex (the broker resolves the regex), rebalance
  timeout (``max.poll.interval.ms``), ``group.remote.assignor``, the partitions it owns. Later
  heartbeats, every interval the broker gives, carry only what changed; after any error the next
  one is full again.
- The broker answers with the member epoch and, when it changed, the target assignment as topic
  ids, resolved to names through metadata. Reconciliation runs inside ``poll`` (as Java runs the
  callbacks on the application thread): revoked partitions are committed (``enable.auto.commit``),
  handed to ``on_partitions_revoked`` and dropped, new ones added and handed to
  ``on_partitions_assigned``; the next heartbeat acknowledges the new owned set.
- FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: at the next ``poll`` the partitions are lost
  (``on_partitions_lost``) and the member joins again at epoch 0. NOT_COORDINATOR /
  COORDINATOR_NOT_AVAILABLE: the coordinator is looked up again. Other errors (UNSUPPORTED_ASSIGNOR,
  GROUP_AUTHORIZATION_FAILED, UNRELEASED_INSTANCE_ID, INVALID_REGULAR_EXPRESSION...) are fatal and
  raised by the next ``poll``.
- Leaving: epoch -1, or -2 for a static member (``group.instance.id``), which the broker keeps in
  the group for the session timeout so that a restart with the same instance id gets the same
  partitions back.
- Offsets: OffsetCommit v9 with the member id and epoch. STALE_MEMBER_EPOCH fails an application's
  ``commit`` with CommitFailedError; the commit before a revocation retries it with the newest epoch.

Coordinator discovery, OffsetFetch and automatic commits are the classic coordinator's
(:class:`tierlog.client.group.ConsumerCoordinator`), reused by subclassing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from tierlog import errors
from tierlog.client.errors import CommitFailedError, KafkaTimeoutError
from tierlog.client.fetcher import SubscriptionState
from tierlog.client.group import ConsumerCoordinator, _call_listener
from tierlog.client.types import OffsetAndMetadata, TopicPartition
from tierlog.protocol import ApiKey

log = logging.getLogger("tierlog.client.consumer")

__all__ = ["ConsumerMembershipManager", "MemberState"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_EPOCH_STATIC = -2

_COORDINATOR_ERRORS = frozenset({errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code})
_FENCED = frozenset({errors.FencedMemberEpochError.code, errors.UnknownMemberIdError.code})
_RETRIABLE_HB = frozenset({errors.CoordinatorLoadInProgressError.code, errors.RequestTimedOutError.code})


class MemberState:
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    LEAVING = "LEAVING"
    STALE = "STALE"  # left after max.poll.interval.ms without poll; the next poll joins again
    FATAL = "FATAL"


def _now() -> float:
    return time.monotonic()


def new_member_id() -> str:
    """A random id written as Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class _SentFields:
    """What the last heartbeat carried, to send only changes (Java's HeartbeatState.SentFields)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rebalance_timeout_ms: int | None = None
        self.topic_names: tuple[str, ...] | None = None
        self.regex: str | None = None
        self.server_assignor: str | None = None
        self.owned: dict[uuid.UUID, tuple[int, ...]] | None = None


class ConsumerMembershipManager(ConsumerCoordinator):
    def __init__(self, client: Any, subs: SubscriptionState, config: Mapping[str, Any],
                 wakeup: asyncio.Event) -> None:
        super().__init__(client, subs, config, wakeup, [])
        self.remote_assignor: str | None = config.get("group.remote.assignor") or None
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.mstate = MemberState.UNSUBSCRIBED
        self.heartbeat_interval = 0.0  # the broker's group.consumer.heartbeat.interval.ms, learnt per answer
        self._sent = _SentFields()
        self._owned: dict[uuid.UUID, tuple[int, ...]] = {}  # acknowledged-to-be assignment, by topic id
        self._target: dict[uuid.UUID, tuple[int, ...]] | None = None  # the broker's, not yet reconciled
        self._target_version = 0
        self._fence_count = 0
        self._reconcile_task: asyncio.Task | None = None

    offset_commit_max_version = 10

    # -- state ----------------------------------------------------------------------------------------

    @property
    def in_group(self) -> bool:
        return self.mstate in (MemberState.RECONCILING, MemberState.ACKNOWLEDGING, MemberState.STABLE)

    def _transition_to_joining(self) -> None:
        self.member_epoch = JOIN_EPOCH
        self.generation = -1
        self.mstate = MemberState.JOINING
        self._sent.reset()
        self._owned = {}
        self._target = None
        self._hb_wake.set()

    def _ensure_heartbeat_task(self) -> None:
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = self._spawn(self._heartbeat_loop(), f"tierlog-heartbeat-{self.group_id}")

    async def _drop_partitions(self, method: str) -> None:
        partitions = list(self.subs.assignment)
        if self.subs.auto_assigned:
            self.subs.assign_from_subscribed([])
        if partitions:
            log.info("Group %s: %s partitions %s", self.group_id, method.removeprefix("on_partitions_"),
                     partitions)
            await _call_listener(self.subs.listener, method, partitions)

    # -- poll -----------------------------------------------------------------------------------------

    def rejoin_needed_or_pending(self) -> bool:
        return self.subs.auto_assigned and not self.in_group

    async def poll(self, deadline: float) -> bool:
        """Join when subscribed, reconcile a new assignment, auto-commit; raises a fatal group error.
        Always True: the application waits for records, and the heartbeat task wakes it on news."""
        self.record_poll()
        if self._fatal is not None:
            exc, self._fatal = self._fatal, None
            raise exc
        if self.subs.auto_assigned:
            if self.mstate in (MemberState.FENCED, MemberState.STALE):
                # the group moved on without this member: its partitions may be elsewhere already
                await self._drop_partitions("on_partitions_lost")
                self._transition_to_joining()
            elif self.mstate == MemberState.UNSUBSCRIBED:
                self._transition_to_joining()
            self._ensure_heartbeat_task()
            if self._target is not None and (self._reconcile_task is None or self._reconcile_task.done()):
                self._reconcile_task = self._spawn(self._reconcile(), f"tierlog-reconcile-{self.group_id}")
            task = self._reconcile_task
            if task is not None and not task.done():
                await asyncio.wait({task}, timeout=max(0.0, deadline - _now()))
        self.maybe_auto_commit()
        return True

    # -- heartbeats -----------------------------------------------------------------------------------

    def _subscription_fields(self, full: bool, values: dict[str, Any]) -> None:
        if self.subs.mode == SubscriptionState.AUTO_PATTERN and self.subs.pattern is not None:
            regex, names = self.subs.pattern.pattern, ()
        else:
            regex, names = None, tuple(sorted(self.subs.subscription))
        if full or names != self._sent.topic_names:
            values["subscribed_topic_names"] = list(names)
            self._sent.topic_names = names
        if regex is not None and (full or regex != self._sent.regex):
            values["subscribed_topic_regex"] = regex
        elif regex is None and self._sent.regex:
            values["subscribed_topic_regex"] = ""  # an empty regex drops the one sent before
        self._sent.regex = regex

    def _heartbeat_values(self) -> dict[str, Any]:
        full = self.mstate == MemberState.JOINING
        values: dict[str, Any] = {"group_id": self.group_id, "member_id": self.member_id,
                                  "member_epoch": self.member_epoch, "instance_id": self.group_instance_id,
                                  "topic_partitions": None}
        if self.rack is not None and full:
            values["rack_id"] = self.rack
        if full or self._sent.rebalance_timeout_ms != self.rebalance_timeout_ms:
            values["rebalance_timeout_ms"] = self.rebalance_timeout_ms
            self._sent.rebalance_timeout_ms = self.rebalance_timeout_ms
        self._subscription_fields(full, values)
        if self.remote_assignor is not None and (full or self._sent.server_assignor != self.remote_assignor):
            values["server_assignor"] = self.remote_assignor
            self._sent.server_assignor = self.remote_assignor
        if full or self._sent.owned != self._owned:
            values["topic_partitions"] = [{"topic_id": t, "partitions": list(ps)} for t, ps in self._owned.items()]
            self._sent.owned = dict(self._owned)
        return values

    def _heartbeat_due(self, now: float) -> bool:
        if self.mstate in (MemberState.JOINING, MemberState.ACKNOWLEDGING):
            return True
        return self.mstate in (MemberState.RECONCILING, MemberState.STABLE) and now >= self._next_hb

    async def _heartbeat_loop(self) -> None:
        attempt = 0
        while not self._closed:
            try:
                now = _now()
                if self.mstate in (MemberState.UNSUBSCRIBED, MemberState.STALE, MemberState.FATAL,
                                   MemberState.LEAVING, MemberState.FENCED):  # the next poll moves on
                    await self._sleep_hb(1.0)
                    continue
                if self.coordinator is None:
                    try:
                        if not await self.ensure_coordinator_ready(now + self.request_timeout_ms / 1000):
                            continue
                    except errors.KafkaError as exc:  # e.g. GROUP_AUTHORIZATION_FAILED: poll raises it
                        self._fail(exc)
                        continue
                if (self.in_group and not self.polling
                        and now - self._last_poll > self.rebalance_timeout_ms / 1000):
                    log.warning(
                        "Group %s: consumer poll timeout has expired: the time between poll() calls exceeded "
                        "max.poll.interval.ms (%s ms); leaving the group. Process records faster, lower "
                        "max.poll.records or raise max.poll.interval.ms.", self.group_id, self.rebalance_timeout_ms)
                    await self._send_leave()
                    self.mstate = MemberState.STALE  # the next poll gives the partitions up and joins again
                    continue
                if not self._heartbeat_due(now):
                    await self._sleep_hb(self._next_hb - now if self.in_group else 1.0)
                    continue
                if await self._heartbeat_once():
                    attempt = 0
                else:
                    attempt += 1
                    self._next_hb = _now() + self._backoff(attempt)
                    await self._sleep_hb(self._backoff(attempt))
            except asyncio.CancelledError:
                raise
            except Exception:  # keep heartbeating whatever one round did
                log.exception("Group %s: heartbeat round failed", self.group_id)
                await asyncio.sleep(self.retry_backoff)

    async def _heartbeat_once(self) -> bool:
        """One ConsumerGroupHeartbeat; False when it should be retried after a back-off."""
        acknowledging = self.mstate == MemberState.ACKNOWLEDGING
        sent_epoch, fence_count = self.member_epoch, self._fence_count
        values = self._heartbeat_values()
        self._next_hb = _now() + max(self.heartbeat_interval, self.retry_backoff)
        try:
            response = await self._send(ApiKey.CONSUMER_GROUP_HEARTBEAT, values, timeout_ms=self.request_timeout_ms)
        except errors.KafkaError as exc:
            self._sent.reset()
            log.debug("Group %s: heartbeat failed: %r", self.group_id, exc)
            if isinstance(exc, errors.UnsupportedVersionError):
                self._fail(errors.UnsupportedVersionError(
                    "The cluster does not support the consumer group protocol (KIP-848, ConsumerGroupHeartbeat v1): "
                    f"use group.protocol=classic until the brokers are upgraded ({exc.message})"))
            return False
        if fence_count != self._fence_count or self.mstate in (MemberState.LEAVING, MemberState.FATAL):
            return True  # the membership changed while the request was out
        code = response.error_code.value
        if code:
            self._sent.reset()  # the next heartbeat carries every field
            return await self._on_heartbeat_error(code, response.error_message, sent_epoch)
        if response.member_id:
            self.member_id = response.member_id
        self.member_epoch = int(response.member_epoch)
        self.generation = self.member_epoch
        self.heartbeat_interval = response.heartbeat_interval.total_seconds()
        self._next_hb = _now() + self.heartbeat_interval
        self._last_hb_ok = _now()
        if self.mstate == MemberState.JOINING:
            log.info("Group %s: joined as %s at epoch %s", self.group_id, self.member_id, self.member_epoch)
        if response.assignment is not None:
            self._target = {tp.topic_id: tuple(sorted(int(p) for p in tp.partitions))
                            for tp in response.assignment.topic_partitions}
            self._target_version += 1
            self.mstate = MemberState.RECONCILING
            log.info("Group %s: new target assignment at epoch %s", self.group_id, self.member_epoch)
            self.wakeup.set()  # a waiting poll reconciles
        elif self.mstate == MemberState.JOINING or (acknowledging and self.mstate == MemberState.ACKNOWLEDGING):
            self.mstate = MemberState.STABLE if self._target is None else MemberState.RECONCILING
            self.wakeup.set()
        return True

    def _fail(self, exc: errors.KafkaError) -> None:
        self.mstate = MemberState.FATAL
        self._fatal = exc
        self._target = None
        if self.subs.auto_assigned and self.subs.assignment:
            self._spawn(self._drop_partitions("on_partitions_lost"), f"tierlog-lost-{self.group_id}")
        self.wakeup.set()

    async def _on_heartbeat_error(self, code: int, message: str | None, sent_epoch: int) -> bool:
        cls = errors.error_for_code(code)
        text = message or cls.name
        if code in _COORDINATOR_ERRORS:
            # find it again; backing off, as a coordinator still loading the group answers so for a while
            self.mark_coordinator_unknown(cls.name)
            return False
        if code in _RETRIABLE_HB:
            log.info("Group %s: heartbeat answered %s; retrying", self.group_id, cls.name)
            return False
        if code in _FENCED:
            if sent_epoch == self.member_epoch:
                log.info("Group %s: member %s fenced at epoch %s (%s); rejoining", self.group_id, self.member_id,
                         sent_epoch, cls.name)
                self._fence_count += 1
                if self._reconcile_task is not None and not self._reconcile_task.done():
                    self._reconcile_task.cancel()
                self._target = None
                # the next poll calls on_partitions_lost and joins again at epoch 0, as Java's
                # polling thread does
                self.mstate = MemberState.FENCED
                self.wakeup.set()
            return True
        if code == errors.TopicAuthorizationFailedError.code:
            self.wakeup.set()
            self._fatal = cls(f"ConsumerGroupHeartbeat for group {self.group_id}: {text}")
            return False
        log.error("Group %s: heartbeat failed with %s: %s", self.group_id, cls.name, text)
        self._fail(cls(text))
        return True

    # -- reconciliation -------------------------------------------------------------------------------

    async def _resolve(self, target: Mapping[uuid.UUID, tuple[int, ...]]) -> dict[uuid.UUID, str] | None:
        """Topic id -> name for every topic of ``target``, from metadata (updated until all are known)."""
        for _ in range(100):
            names = {info.topic_id: name for name, info in self.client.cluster.topics.items()}
            missing = [t for t in target if t not in names]
            if not missing:
                return {t: names[t] for t in target}
            log.debug("Group %s: waiting for metadata naming topic ids %s", self.group_id, missing)
            if self.subs.mode == SubscriptionState.AUTO_PATTERN:
                self.client.want_all_topics(True)
            with contextlib.suppress(errors.KafkaError):
                await self.client.wait_for_update(self.request_timeout_ms / 1000)
        return None

    async def _reconcile(self) -> None:
        while self._target is not None and not self._closed:
            version, fence_count, target = self._target_version, self._fence_count, self._target
            names = await self._resolve(target)
            if names is None:
                return  # the next poll tries again
            if fence_count != self._fence_count or version != self._target_version:
                continue
            wanted = [TopicPartition(names[t], p) for t, ps in target.items() for p in ps]
            owned = list(self.subs.assignment)
            revoked = [tp for tp in owned if tp not in set(wanted)]
            added = [tp for tp in wanted if tp not in self.subs.assignment]
            if revoked:
                if self.auto_commit:
                    await self._commit_before_revocation()
                log.info("Group %s: revoking partitions %s", self.group_id, revoked)
                await _call_listener(self.subs.listener, "on_partitions_revoked", revoked)
            if fence_count != self._fence_count:
                continue
            keep = [tp for tp in owned if tp not in set(revoked)]
            self.subs.assign_from_subscribed(keep + added)
            if self.subs.mode == SubscriptionState.AUTO_PATTERN:
                self.subs.change_subscription({tp.topic for tp in keep + added})
            self.client.add_topics({tp.topic for tp in added})
            self._next_auto_commit = _now() + self.auto_commit_interval
            log.info("Group %s: epoch %s assigned partitions %s (added %s)", self.group_id, self.member_epoch,
                     keep + added, added)
            await _call_listener(self.subs.listener, "on_partitions_assigned", added)
            if fence_count != self._fence_count:
                continue
            self._owned = dict(target)
            if version == self._target_version:
                self._target = None
            if self.mstate in (MemberState.RECONCILING, MemberState.STABLE):
                self.mstate = MemberState.ACKNOWLEDGING
            self._hb_wake.set()
            self.wakeup.set()

    async def _commit_before_revocation(self) -> None:
        """Commit every consumed position; STALE_MEMBER_EPOCH is retried with the newest epoch until
        the rebalance timeout (Java's maybeAutoCommitSyncBeforeRevocation)."""
        deadline = _now() + self.rebalance_timeout_ms / 1000
        attempt = 0
        while True:
            offsets = self.subs.all_consumed()
            try:
                await super().commit_offsets(offsets, deadline)
                return
            except errors.StaleMemberEpochError:
                attempt += 1
                if _now() + self._backoff(attempt) >= deadline:
                    log.warning("Group %s: offset commit before revocation: stale member epoch", self.group_id)
                    return
                await asyncio.sleep(self._backoff(attempt))
            except errors.KafkaError as exc:
                log.warning("Group %s: offset commit before revocation failed: %s", self.group_id, exc.message)
                return

    # -- offsets --------------------------------------------------------------------------------------

    def maybe_auto_commit(self) -> None:
        if self.subs.auto_assigned and not self.in_group:
            return  # nothing this member may commit yet
        super().maybe_auto_commit()

    def _commit_identity(self) -> tuple[int, str]:
        if not self.subs.auto_assigned:
            return -1, ""
        if self.member_epoch <= 0 or self.mstate in (MemberState.JOINING, MemberState.FENCED,
                                                     MemberState.FATAL, MemberState.UNSUBSCRIBED):
            raise CommitFailedError(
                "Commit cannot be completed since the consumer is not part of an active group for auto "
                "partition assignment; it is likely that the consumer was kicked out of the group.")
        return self.member_epoch, self.member_id

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        if self.member_epoch <= 0 or not self.subs.auto_assigned:
            return None, -1
        return self.member_id, self.member_epoch

    def _member_commit_error(self, code: int, generation: int, what: str) -> None:
        if code == errors.StaleMemberEpochError.code:
            raise errors.StaleMemberEpochError(f"{what}: the member epoch {generation} is stale")
        if code == errors.UnknownMemberIdError.code:
            raise CommitFailedError(f"OffsetCommit failed with unknown member ID. {what}")

    async def commit_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: float) -> None:
        try:
            await super().commit_offsets(offsets, deadline)
        except errors.StaleMemberEpochError as exc:
            raise CommitFailedError(f"OffsetCommit failed with stale member epoch. {exc.message}") from exc

    # -- leaving --------------------------------------------------------------------------------------

    async def _send_leave(self) -> None:
        """A heartbeat with epoch -1 (dynamic) or -2 (static: the broker keeps the partitions for a
        rejoin with the same group.instance.id); best effort, once."""
        if self.coordinator is None or self.member_epoch <= 0:
            return  # never in the group (or fenced): nothing to leave
        epoch = LEAVE_EPOCH if self.is_dynamic_member else LEAVE_EPOCH_STATIC
        log.info("Group %s: member %s leaving the group with epoch %s", self.group_id, self.member_id, epoch)
        self.mstate = MemberState.LEAVING
        self._fence_count += 1
        try:
            response = await self._send(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                "group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.group_instance_id, "topic_partitions": None},
                timeout_ms=self.request_timeout_ms)
            code = response.error_code.value
            if code:
                log.info("Group %s: leave heartbeat answered %s", self.group_id, errors.error_for_code(code).name)
        except errors.KafkaError as exc:
            log.info("Group %s: leave heartbeat failed: %s", self.group_id, exc.message)
        self.member_epoch = JOIN_EPOCH
        self.generation = -1
        self._owned = {}
        self._target = None
        self._sent.reset()

    async def maybe_leave_group(self, reason: str) -> None:
        await self._send_leave()
        self.mstate = MemberState.UNSUBSCRIBED

    def leave_in_background(self, reason: str) -> None:
        """For unsubscribe(): leave now (the heartbeat stops), the leave heartbeat goes in the background."""
        if self._reconcile_task is not None and not self._reconcile_task.done():
            self._reconcile_task.cancel()
        self._spawn(self.maybe_leave_group(reason), f"tierlog-leave-{self.group_id}")

    async def close(self, deadline: float) -> None:
        """Commit (with enable.auto.commit), revoke, leave the group, stop the background tasks."""
        try:
            if self._reconcile_task is not None and not self._reconcile_task.done():
                self._reconcile_task.cancel()
            if self.auto_commit and self.in_group:
                offsets = self.subs.all_consumed()
                if offsets:
                    try:
                        await self.commit_offsets(offsets, deadline)
                    except errors.KafkaError as exc:
                        log.warning("Group %s: offset commit on close failed: %s", self.group_id, exc.message)
            if self.subs.auto_assigned and self.subs.assignment:
                await _call_listener(self.subs.listener, "on_partitions_revoked", list(self.subs.assignment))
            if self.mstate not in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.STALE):
                if self.coordinator is None:
                    with contextlib.suppress(errors.KafkaError, KafkaTimeoutError):
                        await self.ensure_coordinator_ready(min(deadline, _now() + self.request_timeout_ms / 1000))
                await self.maybe_leave_group("the consumer is being closed")
        finally:
            self._closed = True
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
