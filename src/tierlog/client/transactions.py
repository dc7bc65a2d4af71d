"""The transactional producer's state machine and its requests to the coordinators, after Kafka's
``TransactionManager`` (KIP-98, with KIP-360's epoch bump and KIP-447's group metadata).

- ``init_transactions``: FindCoordinator (key type TRANSACTION) for ``transactional.id``, then
  InitProducerId with it. The coordinator fences any older producer of the same id (it bumps the
  epoch and aborts that producer's open transaction; CONCURRENT_TRANSACTIONS until it is done).
- Within a transaction, a partition is added with AddPartitionsToTxn before its first batch is sent
  (the new partitions of a drain go in one request; one such request at a time), offsets with
  AddOffsetsToTxn to the transaction coordinator and TxnOffsetCommit to the group coordinator.
  EndTxn commits or aborts once every batch has been answered.
- Transaction version 2 (KIP-890 part 2), used as Kafka 4.x's Java producer does when the cluster's
  finalized ``transaction.version`` (ApiVersions) is 2 or more: no AddPartitionsToTxn and no
  AddOffsetsToTxn (the partition leader adds a partition on the first Produce v12, the group
  coordinator the offsets on TxnOffsetCommit v5), and EndTxn v5 ends every transaction with a new
  epoch, which the producer takes (sequences start again from 0). Otherwise transaction version 1:
  explicit adds, Produce at most v11, EndTxn at most v4. The mode is chosen at ``init_transactions``
  and again after each transaction.
- Errors are retriable (retried here: coordinator moved or loading, CONCURRENT_TRANSACTIONS),
  abortable (the application calls ``abort_transaction`` and goes on; a KIP-360 epoch bump with
  InitProducerId follows the abort when sequence numbers are in doubt) or fatal (fenced by a newer
  producer, not authorized, invalid state: every later call raises the error; close the producer).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tierlog import errors
from tierlog.client.cluster import Node
from tierlog.client.errors import CommitFailedError, IllegalStateError, KafkaConnectionError, KafkaTimeoutError
from tierlog.client.network import KafkaClient, retry_until
from tierlog.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from tierlog.protocol import ApiKey

log = logging.getLogger("tierlog.client.producer")

__all__ = ["TransactionManager", "TransactionState"]

# FindCoordinator key types
_GROUP = 0
_TRANSACTION = 1

# The highest Produce version of Kafka's transaction version 1: v12 means the broker adds partitions
# to the transaction itself (KIP-890 part 2), which this client does not rely on.
PRODUCE_MAX_VERSION_TV1 = 11
_END_TXN_V2 = 5
_TXN_OFFSET_COMMIT_V2 = 5

_COORDINATOR_MOVED = frozenset({errors.CoordinatorNotAvailableError.code, errors.NotCoordinatorError.code})
_RETRY = frozenset({errors.CoordinatorLoadInProgressError.code, errors.ConcurrentTransactionsError.code})
_FENCED = frozenset({errors.ProducerFencedError.code, errors.InvalidProducerEpochError.code})
# answers that call for a new epoch after the abort (KIP-360)
_BUMP = frozenset({errors.UnknownProducerIdError.code, errors.InvalidProducerIdMappingError.code})
_TRANSACTION_ABORTABLE = errors.TransactionAbortableError.code
_GROUP_FENCED = frozenset({errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code,
                           errors.FencedInstanceIdError.code})


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState
# target -> the states it may be reached from (Kafka's TransactionManager.State.isTransitionValid)
_VALID_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(S),
}


class TransactionManager:
    """One transactional producer's transaction state. ``wakeup`` is called whenever the sender has
    something new to do (partitions added, an error that fails queued batches)."""

    def __init__(self, client: KafkaClient, config: Mapping[str, Any], wakeup: Callable[[], None]) -> None:
        self.client = client
        self.config = config
        self.transactional_id: str = config["transactional.id"]
        self.transaction_timeout_ms: int = config["transaction.timeout.ms"]
        self.retry_backoff = config["retry.backoff.ms"] / 1000
        self._wakeup = wakeup
        self.state = S.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.last_error: errors.KafkaError | None = None
        # a batch's sequence is in doubt: after the abort, InitProducerId with the current id and
        # epoch gets a new epoch and every partition's sequences start from 0 (KIP-360)
        self.epoch_bump_required = False
        self.coordinator: Node | None = None
        self._group_coordinators: dict[str, Node] = {}
        self.partitions: set[TopicPartition] = set()  # added to the current transaction
        self.new_partitions: set[TopicPartition] = set()  # to add before their first batch goes out
        self.started = False  # the coordinator knows this transaction (a partition or offsets added)
        self.transaction_v2 = False  # KIP-890 part 2 (see the module doc)
        self._add_task: asyncio.Task | None = None

    # -- state ------------------------------------------------------------------------------------

    def _transition(self, target: TransactionState) -> None:
        if self.state not in _VALID_FROM[target]:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                                    f"state {self.state.value} to state {target.value}")
        log.debug("TransactionalId %s: %s -> %s", self.transactional_id, self.state.value, target.value)
        self.state = target

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    @property
    def is_aborting(self) -> bool:
        return self.state is S.ABORTING_TRANSACTION

    def raise_if_error(self) -> None:
        """Raise the error that put the transaction in an error state (fatal or abortable)."""
        if self.has_error and self.last_error is not None:
            raise self.last_error

    def fatal(self, exc: errors.KafkaError) -> errors.KafkaError:
        """The producer can no longer be used; returns ``exc`` for raising."""
        if self.state is not S.FATAL_ERROR:
            log.error("TransactionalId %s: fatal error, the producer can only be closed now: %s",
                      self.transactional_id, exc)
            self.state = S.FATAL_ERROR
            self.last_error = exc
            self._wakeup()
        return exc

    def abortable(self, exc: BaseException, bump: bool = False) -> BaseException:
        """The current transaction cannot commit; the application must abort it. Returns ``exc``."""
        if bump:
            self.epoch_bump_required = True
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            log.info("TransactionalId %s: transaction must be aborted: %s", self.transactional_id, exc)
            self.state = S.ABORTABLE_ERROR
            self.last_error = exc if isinstance(exc, errors.KafkaError) else errors.KafkaError(str(exc))
            self._wakeup()
        return exc

    def _fenced(self, code: int, what: str) -> errors.KafkaError:
        return self.fatal(errors.ProducerFencedError(
            f"{what}: {errors.error_for_code(code).name}: there is a newer producer with the same transactional.id "
            f"{self.transactional_id!r}; this producer (producer id {self.producer_id}, epoch {self.producer_epoch}) "
            "is fenced and can only be closed"))

    def _unexpected(self, code: int, what: str) -> errors.KafkaError:
        """A coordinator's answer that no rule covers: fatal, as in Java's handlers."""
        cls = errors.error_for_code(code)
        if code in _FENCED:
            return self._fenced(code, what)
        return self.fatal(cls(f"TransactionalId {self.transactional_id}: {what} failed: {cls.name}"))

    # -- coordinators ------------------------------------------------------------------------------

    async def _find_coordinator(self, key_type: int, key: str) -> Node:
        response = await self.client.send_any(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type})
        code = response.error_code.value
        if code:
            cls = errors.error_for_code(code)
            what = "transaction" if key_type == _TRANSACTION else "group"
            if cls.retriable:
                raise cls(f"FindCoordinator for {what} {key!r}: {cls.name}")
            if key_type == _TRANSACTION:
                raise self.fatal(cls(f"FindCoordinator for transactional id {key!r}: {cls.name}"))
            raise cls(f"FindCoordinator for group {key!r}: {cls.name}")
        return Node(int(response.node_id), response.host, int(response.port))

    async def _coordinator_request(self, api: int, values: Mapping[str, Any], **kwargs: Any) -> Any:
        """One request to the transaction coordinator (looked up when unknown)."""
        node = self.coordinator
        if node is None:
            node = self.coordinator = await self._find_coordinator(_TRANSACTION, self.transactional_id)
            log.debug("TransactionalId %s: coordinator is broker %s", self.transactional_id, node.node_id)
        try:
            return await self.client.send(node, api, values, **kwargs)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.coordinator = None
            raise

    async def _group_request(self, group_id: str, api: int, values: Mapping[str, Any], **kwargs: Any) -> Any:
        node = self._group_coordinators.get(group_id)
        if node is None:
            node = self._group_coordinators[group_id] = await self._find_coordinator(_GROUP, group_id)
        try:
            return await self.client.send(node, api, values, **kwargs)
        except (KafkaConnectionError, KafkaTimeoutError):
            self._group_coordinators.pop(group_id, None)
            raise

    def _retriable(self, code: int, what: str) -> errors.KafkaError | None:
        """The retriable error for a coordinator's answer (forgetting a moved coordinator), else None."""
        if code in _COORDINATOR_MOVED:
            self.coordinator = None
        if code in _COORDINATOR_MOVED or code in _RETRY:
            cls = errors.error_for_code(code)
            return cls(f"TransactionalId {self.transactional_id}: {what}: {cls.name}")
        return None

    # -- InitProducerId ---------------------------------------------------------------------------

    async def initialize(self, deadline: float) -> None:
        """``init_transactions``: a producer id and epoch for ``transactional.id``, fencing older producers."""
        if self.state is S.FATAL_ERROR:
            raise self.last_error
        if self.state not in (S.UNINITIALIZED, S.INITIALIZING):
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: init_transactions() was already "
                                    f"called (state {self.state.value})")
        self._transition(S.INITIALIZING)
        await self._init_producer_id(deadline, bump=False)
        await self._choose_transaction_version()
        self._transition(S.READY)

    async def _choose_transaction_version(self) -> None:
        """Transaction version 2 when the cluster has finalized it and the coordinator speaks its
        request versions (Java's maybeUpdateTransactionV2Enabled); kept as it was if unknown now."""
        node = self.coordinator
        if node is None:
            return
        try:
            conn = await self.client.connection(node)
        except errors.KafkaError:
            return
        versions = conn.api_versions
        v2 = (conn.finalized_features.get("transaction.version", 0) >= 2
              and versions.get(ApiKey.PRODUCE, (0, 0))[1] >= PRODUCE_MAX_VERSION_TV1 + 1
              and versions.get(ApiKey.END_TXN, (0, 0))[1] >= _END_TXN_V2
              and versions.get(ApiKey.TXN_OFFSET_COMMIT, (0, 0))[1] >= _TXN_OFFSET_COMMIT_V2)
        if v2 != self.transaction_v2:
            log.info("TransactionalId %s: using transaction version %d", self.transactional_id, 2 if v2 else 1)
        self.transaction_v2 = v2

    async def _init_producer_id(self, deadline: float, bump: bool) -> None:
        pid, epoch = (self.producer_id, self.producer_epoch) if bump else (-1, -1)

        async def attempt() -> None:
            response = await self._coordinator_request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": pid, "producer_epoch": epoch}, min_version=3 if bump else None)
            code = response.error_code.value
            if code:
                retriable = self._retriable(code, "InitProducerId")
                if retriable is not None:
                    raise retriable
                raise self._unexpected(code, "InitProducerId")
            self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)

        await retry_until(attempt, deadline, self.config, "InitProducerId", self.client)
        log.info("TransactionalId %s: producer id %d, epoch %d%s", self.transactional_id, self.producer_id,
                 self.producer_epoch, " (epoch bumped)" if bump else "")

    async def resume(self, producer_id: int, producer_epoch: int, deadline: float) -> None:
        """Take over the open transaction another producer of this ``transactional.id`` left with every
        record answered, to commit or abort it here (a two-phase commit's second phase, as Flink's Kafka
        sink resumes one). No InitProducerId: that would fence the transaction and abort it."""
        if self.state is not S.UNINITIALIZED:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: resume_transaction() needs a fresh "
                                    f"producer (state {self.state.value})")
        self.producer_id, self.producer_epoch = int(producer_id), int(producer_epoch)

        async def find() -> None:
            if self.coordinator is None:
                self.coordinator = await self._find_coordinator(_TRANSACTION, self.transactional_id)

        await retry_until(find, deadline, self.config, "FindCoordinator", self.client)
        await self._choose_transaction_version()
        self.state = S.IN_TRANSACTION
        self.started = True  # the coordinator knows it: EndTxn must go out even with nothing sent here

    # -- the transaction --------------------------------------------------------------------------

    def begin(self) -> None:
        self.raise_if_error()
        if self.state in (S.UNINITIALIZED, S.INITIALIZING):
            raise IllegalStateError("Cannot begin a transaction before init_transactions() has completed")
        if self.state is not S.READY:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Cannot begin a transaction in state "
                                    f"{self.state.value} (a transaction is already in progress or completing)")
        self._transition(S.IN_TRANSACTION)

    def check_send(self) -> None:
        """``send`` is allowed only inside a transaction that has not failed."""
        if self.state is S.IN_TRANSACTION:  # the per-record case: no error state, nothing else to check
            return
        self.raise_if_error()
        if self.state in (S.UNINITIALIZED, S.INITIALIZING):
            raise IllegalStateError("Cannot perform a 'send' before completing a call to init_transactions() when "
                                    "transactions are enabled")
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot call send in state {self.state.value}: records of a transactional "
                                    "producer are sent between begin_transaction() and commit/abort")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        if tp not in self.partitions:
            if self.transaction_v2:
                self.partitions.add(tp)  # the leader adds it with the first Produce
            else:
                self.new_partitions.add(tp)

    @property
    def produce_max_version(self) -> int | None:
        return None if self.transaction_v2 else PRODUCE_MAX_VERSION_TV1

    def is_added(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    def maybe_send_add_partitions(self) -> None:
        """Start one AddPartitionsToTxn for every partition waiting to be added (if none is in flight)."""
        if (self.new_partitions and (self._add_task is None or self._add_task.done())
                and self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION)):
            self._add_task = asyncio.get_running_loop().create_task(
                self._add_partitions(), name=f"tierlog-add-partitions-{self.transactional_id}")

    async def wait_add_partitions(self) -> None:
        task = self._add_task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)

    async def _add_partitions(self) -> None:
        attempt = 0
        try:
            while self.new_partitions and self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                pending = set(self.new_partitions)
                retry = await self._add_partitions_once(pending)
                self.new_partitions -= pending - retry
                self._wakeup()
                if not retry or self.has_error:
                    continue
                attempt += 1
                await asyncio.sleep(min(self.retry_backoff * 2 ** min(attempt - 1, 5),
                                        self.config.get("retry.backoff.max.ms", 1000) / 1000))
        except asyncio.CancelledError:
            raise
        except errors.KafkaError as exc:  # a non-retriable answer already set the state
            if not self.has_error:
                self.abortable(exc)
        finally:
            self._wakeup()

    async def _add_partitions_once(self, pending: set[TopicPartition]) -> set[TopicPartition]:
        """One AddPartitionsToTxn; returns the partitions to try again."""
        topics: dict[str, list[int]] = {}
        for tp in sorted(pending):
            topics.setdefault(tp.topic, []).append(tp.partition)
        try:
            response = await self._coordinator_request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                max_version=3)  # v4+ is the brokers' batched form
        except errors.KafkaError as exc:
            if exc.retriable:
                log.debug("TransactionalId %s: AddPartitionsToTxn failed (%r); retrying", self.transactional_id, exc)
                return pending
            raise
        retry: set[TopicPartition] = set()
        unauthorized: list[str] = []
        for t in response.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                tp = TopicPartition(t.name, int(p.partition_index))
                code = p.partition_error_code.value
                if not code:
                    self.partitions.add(tp)
                    self.started = True
                elif (code in _COORDINATOR_MOVED or code in _RETRY or code == errors.UnknownTopicOrPartitionError.code
                      or code == errors.OperationNotAttemptedError.code):
                    if code in _COORDINATOR_MOVED:
                        self.coordinator = None
                    retry.add(tp)
                elif code == errors.TopicAuthorizationFailedError.code:
                    unauthorized.append(t.name)
                elif code in _BUMP:
                    self.abortable(errors.error_for_code(code)(
                        f"AddPartitionsToTxn for {tp.topic}-{tp.partition}: {errors.error_for_code(code).name}"),
                        bump=True)
                elif code == _TRANSACTION_ABORTABLE:
                    self.abortable(errors.TransactionAbortableError(
                        f"AddPartitionsToTxn for {tp.topic}-{tp.partition}: TRANSACTION_ABORTABLE"))
                else:
                    raise self._unexpected(code, f"AddPartitionsToTxn for {tp.topic}-{tp.partition}")
        if unauthorized:
            self.abortable(errors.TopicAuthorizationFailedError(
                f"Not authorized to write to topics {sorted(set(unauthorized))} in a transaction"))
        return retry & pending

    # -- offsets (KIP-447) ---------------------------------------------------------------------------

    async def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                           group: ConsumerGroupMetadata, deadline: float) -> None:
        self.raise_if_error()
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot send offsets if a transaction is not in progress (state "
                                    f"{self.state.value})")
        group_id = group.group_id

        async def add_offsets() -> None:
            response = await self._coordinator_request(ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "group_id": group_id})
            code = response.error_code.value
            if not code:
                return
            retriable = self._retriable(code, f"AddOffsetsToTxn for group {group_id}")
            if retriable is not None:
                raise retriable
            cls = errors.error_for_code(code)
            if code == errors.GroupAuthorizationFailedError.code or code == _TRANSACTION_ABORTABLE or code in _BUMP:
                raise self.abortable(cls(f"AddOffsetsToTxn for group {group_id}: {cls.name}"), bump=code in _BUMP)
            raise self._unexpected(code, f"AddOffsetsToTxn for group {group_id}")

        v2 = self.transaction_v2
        if not v2:  # with transaction version 2 the group coordinator adds the offsets itself
            await retry_until(add_offsets, deadline, self.config, "AddOffsetsToTxn", self.client)
        self.started = True
        remaining = dict(offsets)

        async def commit_offsets() -> None:
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, om in remaining.items():
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                    "committed_metadata": om.metadata or ""})
            response = await self._group_request(group_id, ApiKey.TXN_OFFSET_COMMIT, {
                "transactional_id": self.transactional_id, "group_id": group_id,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                **({"min_version": _TXN_OFFSET_COMMIT_V2} if v2 else {"max_version": _TXN_OFFSET_COMMIT_V2 - 1}))
            retry: errors.KafkaError | None = None
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    code = p.error_code.value
                    cls = errors.error_for_code(code)
                    what = f"TxnOffsetCommit of {tp.topic}-{tp.partition} for group {group_id}"
                    if not code:
                        remaining.pop(tp, None)
                    elif code in _COORDINATOR_MOVED or code in _RETRY or code in (
                            errors.UnknownTopicOrPartitionError.code, errors.RequestTimedOutError.code):
                        if code in _COORDINATOR_MOVED:
                            self._group_coordinators.pop(group_id, None)
                        retry = cls(f"{what}: {cls.name}")
                    elif code in _GROUP_FENCED:
                        raise self.abortable(CommitFailedError(
                            f"{what}: {cls.name}: the consumer's group generation is stale (the group rebalanced); "
                            "abort the transaction"))
                    elif code == errors.GroupAuthorizationFailedError.code or code == _TRANSACTION_ABORTABLE:
                        raise self.abortable(cls(f"{what}: {cls.name}"))
                    else:
                        raise self._unexpected(code, what)
            if retry is not None and remaining:
                raise retry

        await retry_until(commit_offsets, deadline, self.config, "TxnOffsetCommit", self.client)

    # -- EndTxn ---------------------------------------------------------------------------------------

    def begin_commit(self) -> None:
        self.raise_if_error()
        if self.state is S.COMMITTING_TRANSACTION:
            return  # a commit that timed out, called again
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Cannot commit a transaction in state "
                                    f"{self.state.value}: no transaction in progress")
        self._transition(S.COMMITTING_TRANSACTION)

    def begin_abort(self) -> None:
        if self.state is S.FATAL_ERROR:
            raise self.last_error
        if self.state is S.ABORTING_TRANSACTION or (self.state is S.INITIALIZING and self.epoch_bump_required):
            return  # an abort (or the epoch bump after it) that ran out of time, called again
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Cannot abort a transaction in state "
                                    f"{self.state.value}: no transaction in progress")
        self._transition(S.ABORTING_TRANSACTION)
        self.new_partitions.clear()

    async def end(self, commit: bool, deadline: float) -> bool:
        """EndTxn (when the coordinator knows the transaction), then READY; after an abort that needs
        it, InitProducerId bumps the epoch first (transaction version 2: EndTxn's answer carries the
        new epoch). True when the producer id or epoch changed."""
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        v2 = self.transaction_v2
        before = (self.producer_id, self.producer_epoch)
        if self.started:
            async def attempt() -> None:
                response = await self._coordinator_request(ApiKey.END_TXN, {
                    "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch, "committed": commit},
                    **({"min_version": _END_TXN_V2} if v2 else {"max_version": _END_TXN_V2 - 1}))
                code = response.error_code.value
                if not code:
                    if v2 and int(response.producer_id) >= 0:
                        self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)
                    return
                retriable = self._retriable(code, what)
                if retriable is not None:
                    raise retriable
                if code in _BUMP or code == _TRANSACTION_ABORTABLE:
                    raise self.abortable(errors.error_for_code(code)(f"{what}: {errors.error_for_code(code).name}"),
                                         bump=code in _BUMP)
                raise self._unexpected(code, what)

            await retry_until(attempt, deadline, self.config, what, self.client)
        self.partitions.clear()
        self.new_partitions.clear()
        self.started = False
        if v2 and before != (self.producer_id, self.producer_epoch):
            self.epoch_bump_required = False  # the coordinator's new epoch resolves every sequence
        if self.epoch_bump_required and not commit:
            self._transition(S.INITIALIZING)
            await self._init_producer_id(deadline, bump=True)
            self.epoch_bump_required = False
        await self._choose_transaction_version()
        self._transition(S.READY)
        return before != (self.producer_id, self.producer_epoch)

    def close(self) -> None:
        if self._add_task is not None:
            self._add_task.cancel()
