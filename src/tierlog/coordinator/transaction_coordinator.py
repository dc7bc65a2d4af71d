"""The transaction coordinator (Kafka's ``TransactionCoordinator`` with its ``TransactionStateManager`` and
``TransactionMarkerChannelManager``): KIP-98 and KIP-360, and KIP-890 part 2 (transaction version 2) for the
transactions its clients run with it.

Every transactional id lives in one ``__transaction_state`` partition (:func:`partition_for`); this node
coordinates the ids of the partitions it leads once they are loaded (their records replayed, last value per
id wins, a null value deletes). In a cluster the broker loads a partition when it becomes its leader and
unloads it when it stops leading it (``leads``, :meth:`on_election`, :meth:`unload`), as the group
coordinator does with ``__consumer_offsets``. Each state change is written to the id's partition and waits for its
replication (``replicated``) before the metadata changes and the client is answered; while a write or the
markers of a commit or abort are in flight the id has a pending state and other requests get
CONCURRENT_TRANSACTIONS.

EndTxn writes PREPARE_COMMIT or PREPARE_ABORT and answers; the markers then go to every partition of the
transaction (``write_markers``, which reaches each partition's leader), retried until each one acknowledged,
and COMPLETE_COMMIT or COMPLETE_ABORT is written. A partition loaded in a PREPARE state resumes its markers.

Transaction version 2 (``client_transaction_version`` of a transaction, 2 when its partitions were added by
partition leaders with AddPartitionsToTxn v5 and ended with EndTxn v5): every commit or abort bumps the producer
epoch in its PREPARE state, the markers carry the bumped epoch, and EndTxn answers the producer id and epoch
the producer goes on with; an exhausted epoch takes a new producer id (``next_producer_id`` in PREPARE, the
producer id once complete, the old one kept as ``previous_producer_id`` to recognize a retry). A partition
leader adding a partition while the previous transaction's markers are in flight waits for them
(:meth:`wait_for_completion`), as Kafka's leaders retry CONCURRENT_TRANSACTIONS.

Timers (:meth:`abort_timed_out_transactions`, :meth:`remove_expired_transactional_ids`): a transaction open
longer than its timeout is aborted with the epoch bumped, so its producer is fenced; an id idle in EMPTY or
COMPLETE_* for ``transactional.id.expiration.ms`` is removed with a tombstone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tierlog.coordinator.storage import OffsetsTopicLog, Record
from tierlog.coordinator.transaction_log import (
    TXN_STATE_TOPIC,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from tierlog.errors import (
    NO_ERROR,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TransactionAbortableError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from tierlog.records import build_batch, iter_batches, iter_records

log = logging.getLogger(__name__)

__all__ = ["STATE_NAMES", "TransactionConfig", "TransactionCoordinator", "TransactionMetadata", "TransactionStateStore"]

#: Kafka's TransactionState.stateName, as DescribeTransactions and ListTransactions show them
STATE_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
               TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
               TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
               TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_MAX_EPOCH = 32767  # Short.MAX_VALUE; an epoch reaching MAX - 1 takes a new producer id
_LOAD_READ_BYTES = 5 * 1024 * 1024
_MARKER_RETRY_S = 0.1  # Kafka's marker sender retries on its next round; a short pause between rounds
# A leader's TV2 add waits this long for the previous transaction's markers (Kafka's leaders retry for up to
# add.partitions.to.txn.retry.backoff.max.ms, then the producer retries)
_TV2_COMPLETION_WAIT_S = 1.0


@dataclass(frozen=True)
class TransactionConfig:
    """The broker's ``transaction.*`` settings the coordinator uses."""
    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104857600
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_interval_ms: int = 10000
    remove_interval_ms: int = 3600000
    write_timeout_ms: int = 30000  # a state write waits this long for the ISR (Kafka: the broker's request.timeout.ms)

    @classmethod
    def from_broker_config(cls, cfg) -> TransactionConfig:
        return cls(num_partitions=cfg["transaction.state.log.num.partitions"],
                   replication_factor=cfg["transaction.state.log.replication.factor"],
                   min_isr=cfg["transaction.state.log.min.isr"],
                   segment_bytes=cfg["transaction.state.log.segment.bytes"],
                   max_timeout_ms=cfg["transaction.max.timeout.ms"],
                   id_expiration_ms=cfg["transactional.id.expiration.ms"],
                   abort_interval_ms=cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                   remove_interval_ms=cfg["transaction.remove.expired.transaction.cleanup.interval.ms"],
                   write_timeout_ms=cfg["request.timeout.ms"])


class TransactionStateStore:
    """``__transaction_state`` on the broker's log: created on first need with Kafka's settings, one batch per
    write, a partition read back whole when it is loaded."""

    def __init__(self, log_: OffsetsTopicLog, config: TransactionConfig):
        self.log = log_
        self.config = config

    def num_partitions(self) -> int:
        count = self.log.partition_count(TXN_STATE_TOPIC)
        return count if count is not None else self.config.num_partitions

    def exists(self) -> bool:
        return self.log.partition_count(TXN_STATE_TOPIC) is not None

    def ensure_created(self) -> None:
        if self.exists():
            return
        rf = self.log.internal_topic_replication_factor(TXN_STATE_TOPIC, "transaction.state.log.replication.factor",
                                                        self.config.replication_factor)
        try:
            self.log.create_topic(TXN_STATE_TOPIC, self.config.num_partitions, rf, {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(min(self.config.min_isr, rf)),
                "segment.bytes": str(self.config.segment_bytes),
                "unclean.leader.election.enable": "false",
            })
            log.info("Created %s with %d partitions", TXN_STATE_TOPIC, self.config.num_partitions)
        except TopicAlreadyExistsError:
            pass

    def append(self, partition: int, records: list[Record]) -> None:
        now = int(time.time() * 1000)
        batch = build_batch([(key, value, [], now) for key, value in records])
        try:
            self.log.append(TXN_STATE_TOPIC, partition, batch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {TXN_STATE_TOPIC}-{partition}: {e}") from e

    def read_partition(self, partition: int) -> Iterator[Record]:
        if not self.exists():
            return
        offset = self.log.log_start_offset(TXN_STATE_TOPIC, partition)
        end = self.log.log_end_offset(TXN_STATE_TOPIC, partition)
        while offset < end:
            data = self.log.read(TXN_STATE_TOPIC, partition, offset, _LOAD_READ_BYTES)
            if not data:
                break
            view = memoryview(data)
            next_offset = offset
            for _pos, header in iter_batches(view):
                next_offset = header.last_offset + 1
            for rec in iter_records(view, allow_partial_tail=True):
                if rec.key is not None:
                    yield rec.key, rec.value
            if next_offset <= offset:
                break
            offset = next_offset


@dataclass
class TransactionMetadata:
    """One transactional id's state (Kafka's ``TransactionMetadata``); ``pending`` is set while a write or
    the markers of an ending transaction are in flight."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    #: set while the markers of an ending transaction are in flight; released when it is complete
    completion: asyncio.Event | None = None

    def value(self, **changes) -> TxnLogValue:
        v = TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        frozenset(self.partitions), self.last_update_ms, self.start_ms, self.previous_producer_id,
                        self.next_producer_id, self.client_transaction_version)
        return dataclasses.replace(v, **changes)


#: write_markers(producer id, epoch, coordinator epoch, commit, partitions) -> error code per partition
MarkerWriter = Callable[[int, int, int, bool, list[tuple[str, int]]], Awaitable[Mapping[tuple[str, int], int]]]

_WRITE_ERRORS = {  # Kafka's TransactionStateManager.appendTransactionToLog mapping
    UnknownTopicOrPartitionError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasAfterAppendError.code: CoordinatorNotAvailableError.code,
    RequestTimedOutError.code: CoordinatorNotAvailableError.code,
    NotLeaderOrFollowerError.code: NotCoordinatorError.code,
    KafkaStorageError.code: NotCoordinatorError.code,
}
_MARKER_GIVE_UP = {InvalidProducerEpochError.code, TransactionCoordinatorFencedError.code}


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, store: TransactionStateStore, *,
                 allocate_producer_id: Callable[[], Awaitable[int]], write_markers: MarkerWriter,
                 replicated: Callable[[int, float], Awaitable[int]] | None = None,
                 coordinator_epoch: Callable[[int], int] = lambda _p: 0,
                 wall_clock: Callable[[], int] | None = None,
                 transaction_version: Callable[[], int] = lambda: 0,
                 leads: Callable[[int], bool] | None = None):
        """``transaction_version()`` is the finalized ``transaction.version`` (it picks the log value version
        and the rules of the transactions the coordinator itself ends: timeouts, fencing)."""
        self.config = config
        self.store = store
        self.allocate_producer_id = allocate_producer_id
        self.write_markers = write_markers
        self.replicated = replicated
        self.coordinator_epoch = coordinator_epoch
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))
        self.transaction_version = transaction_version
        #: partition -> {transactional id: metadata}, for the loaded partitions
        self.partitions: dict[int, dict[str, TransactionMetadata]] = {}
        self.loading: set[int] = set()
        #: partition -> the coordinator epoch (its leader epoch) it was loaded at
        self.loaded_epochs: dict[int, int] = {}
        #: Whether this broker leads a __transaction_state partition (None: a single node leads all).
        self.leads = leads
        self.active = False
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.Task] = []

    # ================================================================== lifecycle

    async def start(self) -> None:
        """Load every partition this broker leads, then run the two cleanup timers."""
        self.active = True
        if self.store.exists():
            self.on_election(p for p in range(self.store.num_partitions()) if self.leads is None or self.leads(p))
        loop = asyncio.get_running_loop()
        self._timers = [
            loop.create_task(self._every(self.config.abort_interval_ms, self.abort_timed_out_transactions),
                             name="txn-abort-timed-out"),
            loop.create_task(self._every(self.config.remove_interval_ms, self.remove_expired_transactional_ids),
                             name="txn-remove-expired")]

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception:  # noqa: BLE001 - the timer keeps running
                log.exception("Transaction coordinator timer failed")

    async def shutdown(self) -> None:
        self.active = False
        for task in (*self._timers, *self._tasks):
            task.cancel()
        for task in (*self._timers, *self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self._timers.clear()
        self._tasks.clear()
        self.partitions.clear()
        self.loaded_epochs.clear()

    def on_election(self, partitions: Iterable[int]) -> None:
        """This node now leads ``partitions``: load them (Kafka's ``onElection``); ids there answer
        COORDINATOR_LOAD_IN_PROGRESS until done. Transactions found in a PREPARE state get their markers.
        A partition loaded at an older coordinator epoch is loaded again, as Kafka does: another broker may
        have led it in between (this one missed the change, paused say) and its state here is stale."""
        for partition in partitions:
            epoch = self.coordinator_epoch(partition)
            if partition in self.partitions:
                if self.loaded_epochs.get(partition, epoch) >= epoch:
                    continue
                log.info("Reloading %s-%d: coordinator epoch %d, loaded at %d", TXN_STATE_TOPIC, partition, epoch,
                         self.loaded_epochs[partition])
                self.unload(partition)
            self.loading.add(partition)
            try:
                state: dict[str, TransactionMetadata] = {}
                for key, value in self.store.read_partition(partition):
                    txn_id = decode_key(key)
                    if txn_id is None:
                        continue
                    if value is None:
                        state.pop(txn_id, None)
                        continue
                    v = decode_value(value)
                    state[txn_id] = TransactionMetadata(
                        txn_id, v.producer_id, v.producer_epoch, -1, v.timeout_ms, v.state, set(v.partitions),
                        v.start_ms, v.last_update_ms, previous_producer_id=v.previous_producer_id,
                        next_producer_id=v.next_producer_id, client_transaction_version=v.client_transaction_version)
            except Exception:  # noqa: BLE001 - that partition stays unavailable, the broker keeps running
                log.exception("Loading %s-%d failed; its transactional ids are not coordinated here",
                              TXN_STATE_TOPIC, partition)
                continue
            finally:
                self.loading.discard(partition)
            self.partitions[partition] = state
            self.loaded_epochs[partition] = epoch
            if state:
                log.info("Loaded %s-%d: %d transactional id(s)", TXN_STATE_TOPIC, partition, len(state))
            for meta in state.values():
                if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    meta.pending = (TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT
                                    else TxnState.COMPLETE_ABORT)
                    meta.completion = asyncio.Event()
                    self._spawn(self._complete(partition, meta))

    def unload(self, partition: int) -> None:
        """Stop coordinating ``partition``'s ids (Kafka's ``onResignation``): requests for them get
        NOT_COORDINATOR, a state write in flight answers NOT_COORDINATOR when it returns (its metadata is no
        longer the loaded one), markers being sent stop after their round, and the timers no longer see
        them. The new leader loads the partition and resumes what was in a PREPARE state."""
        self.loading.discard(partition)
        self.loaded_epochs.pop(partition, None)
        state = self.partitions.pop(partition, None)
        if state is not None:
            log.info("Unloaded %s-%d (%d transactional id(s))", TXN_STATE_TOPIC, partition, len(state))

    def loaded_partitions(self) -> list[int]:
        return sorted(self.partitions)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ================================================================== routing

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.store.num_partitions())

    def _route(self, transactional_id: str) -> tuple[int, dict[str, TransactionMetadata] | None]:
        if not self.active:
            return CoordinatorNotAvailableError.code, None
        partition = self.partition_for(transactional_id)
        if (partition not in self.loading and self.store.exists() and (self.leads is None or self.leads(partition))
                and self.loaded_epochs.get(partition, -1) < self.coordinator_epoch(partition)):
            # Not loaded yet (the topic was created after start: load on first use), or loaded at an older
            # epoch than this broker leads at now, before the leadership change reached the listener.
            self.on_election([partition])
        if partition in self.loading:
            return CoordinatorLoadInProgressError.code, None
        state = self.partitions.get(partition)
        if state is None:
            return NotCoordinatorError.code, None
        return NO_ERROR, state

    async def _write(self, meta: TransactionMetadata, value: TxnLogValue | None) -> int:
        """Append ``meta``'s new value (None: a tombstone) and wait for its replication; the error code a
        client gets (Kafka's mapping of append errors)."""
        partition = self.partition_for(meta.transactional_id)
        try:
            # Kafka writes value version 1 once transaction.version is at least 1
            version = 1 if self.transaction_version() >= 1 else 0
            self.store.append(partition, [(encode_key(meta.transactional_id),
                                           None if value is None else encode_value(value, version))])
            code = NO_ERROR if self.replicated is None else \
                await self.replicated(partition, self.config.write_timeout_ms / 1000)
        except KafkaError as e:
            code = e.code
        if code != NO_ERROR:
            log.warning("Writing the state of transactional id %s to %s-%d failed: error %d", meta.transactional_id,
                        TXN_STATE_TOPIC, partition, code)
            return _WRITE_ERRORS.get(code, CoordinatorNotAvailableError.code)
        if self.partitions.get(partition, {}).get(meta.transactional_id) is not meta and value is not None:
            return NotCoordinatorError.code  # unloaded meanwhile
        return NO_ERROR

    def _apply(self, meta: TransactionMetadata, v: TxnLogValue) -> None:
        meta.producer_id, meta.producer_epoch, meta.timeout_ms = v.producer_id, v.producer_epoch, v.timeout_ms
        meta.state, meta.partitions = v.state, set(v.partitions)
        meta.last_update_ms, meta.start_ms = v.last_update_ms, v.start_ms
        meta.previous_producer_id, meta.next_producer_id = v.previous_producer_id, v.next_producer_id
        meta.client_transaction_version = v.client_transaction_version

    # ================================================================== InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for a transactional producer (Kafka's ``handleInitProducerId``)."""
        fail = -1, -1
        if not transactional_id:
            return InvalidRequestError.code, *fail
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InvalidTransactionTimeoutError.code, *fail
        try:
            self.store.ensure_created()
        except KafkaError as e:
            log.warning("Cannot create %s: %s", TXN_STATE_TOPIC, e)
            return CoordinatorNotAvailableError.code, *fail
        code, state = self._route(transactional_id)
        if state is None:
            return code, *fail
        now = self.wall_clock()
        meta = state.get(transactional_id)
        if meta is None:
            pid = await self.allocate_producer_id()
            meta = state.setdefault(transactional_id, TransactionMetadata(
                transactional_id, pid, -1, -1, timeout_ms, TxnState.EMPTY, set(), -1, now))
        if meta.pending is not None:
            return ConcurrentTransactionsError.code, *fail
        if producer_id != -1:  # KIP-360: the producer names the id and epoch it had
            if producer_id != meta.producer_id:
                return ProducerFencedError.code, *fail
            if producer_epoch != meta.producer_epoch and producer_epoch != meta.last_producer_epoch:
                return ProducerFencedError.code, *fail
            if producer_epoch == meta.last_producer_epoch and producer_epoch != meta.producer_epoch and \
                    meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                # a retry of a bump that went through (Kafka's prepareIncrementProducerEpoch keeps the epoch),
                # also after a timed-out transaction was aborted with the epoch bumped
                return NO_ERROR, meta.producer_id, meta.producer_epoch
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE,
                          TxnState.DEAD):
            return ConcurrentTransactionsError.code, *fail
        if meta.state == TxnState.ONGOING:
            # Abort the open transaction with a bumped epoch (its producer is fenced); the client retries.
            code = await self._abort_fencing(meta)
            return (code if code != NO_ERROR else ConcurrentTransactionsError.code), *fail
        # EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT: bump the epoch (a new producer id when exhausted).
        if meta.producer_epoch + 1 >= _MAX_EPOCH - 1:
            new_pid, new_epoch = await self.allocate_producer_id(), 0
        else:
            new_pid, new_epoch = meta.producer_id, meta.producer_epoch + 1
        value = meta.value(producer_id=new_pid, producer_epoch=new_epoch, timeout_ms=timeout_ms,
                           state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1, last_update_ms=now)
        meta.pending = TxnState.EMPTY
        try:
            code = await self._write(meta, value)
        finally:
            meta.pending = None
        if code != NO_ERROR:
            if meta.producer_epoch == -1:  # never written: forget it
                state.pop(transactional_id, None)
            return code, *fail
        meta.last_producer_epoch = meta.producer_epoch if new_pid == meta.producer_id else -1
        self._apply(meta, value)
        return NO_ERROR, meta.producer_id, meta.producer_epoch

    # ================================================================== AddPartitionsToTxn / AddOffsetsToTxn

    def _check_producer(self, meta: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> int:
        if meta is None or meta.producer_id != producer_id:
            return InvalidProducerIdMappingError.code
        if meta.producer_epoch != producer_epoch:
            return ProducerFencedError.code
        if meta.pending is not None:
            return ConcurrentTransactionsError.code
        return NO_ERROR

    async def wait_for_completion(self, transactional_id: str, producer_id: int, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until the markers of ``transactional_id``'s ending transaction are written
        and its complete state logged, when its producer (``producer_id``, or the one it rotates to) goes on
        with transaction version 2; whether there was something to wait for."""
        code, state = self._route(transactional_id)
        meta = state.get(transactional_id) if state is not None else None
        if (meta is None or meta.completion is None or meta.client_transaction_version < 2
                or producer_id not in (meta.producer_id, meta.next_producer_id)):
            return False
        try:
            await asyncio.wait_for(meta.completion.wait(), timeout_s)
        except TimeoutError:
            pass
        return True

    async def add_partitions_for_leader(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                        partitions: Iterable[tuple[str, int]]) -> int:
        """A partition leader's add under TV2 (AddPartitionsToTxn v5, or in process). While the previous
        transaction's markers are in flight it first waits for them and answers CONCURRENT_TRANSACTIONS: the
        leader asks again at once with a fresh verification guard (a marker drops the one it took before
        asking), where Kafka's leaders retry after a backoff."""
        if await self.wait_for_completion(transactional_id, producer_id, _TV2_COMPLETION_WAIT_S):
            return ConcurrentTransactionsError.code
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, 2)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]], transaction_version: int = 0) -> int:
        """The error for every partition (Kafka's ``handleAddPartitionsToTransaction``); the verify-only form
        is :meth:`verify_partitions`. ``transaction_version`` 2: a partition leader adds the partition of a
        producer's batch (Produce v12, TxnOffsetCommit v5), and the transaction it opens ends with TV2 rules."""
        partitions = set(partitions)
        code, state = self._route(transactional_id)
        if state is None:
            return code
        meta = state.get(transactional_id)
        code = self._check_producer(meta, producer_id, producer_epoch)
        if code != NO_ERROR:
            return code
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ConcurrentTransactionsError.code
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return NO_ERROR
        now = self.wall_clock()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        value = meta.value(state=TxnState.ONGOING, partitions=frozenset(meta.partitions | partitions),
                           start_ms=start, last_update_ms=now, client_transaction_version=transaction_version)
        meta.pending = TxnState.ONGOING
        try:
            code = await self._write(meta, value)
        finally:
            meta.pending = None
        if code == NO_ERROR:
            self._apply(meta, value)
        return code

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """KIP-890 part 1 (Kafka's ``handleVerifyPartitionsInTransaction``): the error per partition,
        TRANSACTION_ABORTABLE for one not in the open transaction. Partition leaders ask through
        ``tierlog.server.transactions.add_partitions_to_txn_manager`` (in process when they coordinate the id); the
        verification guard in their producer state keeps an answer that raced with a marker from letting a batch
        in."""
        partitions = list(partitions)
        code, state = self._route(transactional_id)
        if state is not None:
            meta = state.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                code = InvalidProducerIdMappingError.code
            elif meta.producer_epoch != producer_epoch:
                code = ProducerFencedError.code
            elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                code = ConcurrentTransactionsError.code
            else:
                # Partitions join with AddPartitionsToTxn's write and leave with the complete state's.
                return {tp: NO_ERROR if tp in meta.partitions else TransactionAbortableError.code
                        for tp in partitions}
        return {tp: code for tp in partitions}

    def partitions_of(self, transactional_id: str) -> set[tuple[str, int]] | None:
        code, state = self._route(transactional_id)
        meta = state.get(transactional_id) if state is not None else None
        return None if meta is None else set(meta.partitions)

    # ================================================================== EndTxn

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool, transaction_version: int = 0) -> tuple[int, int, int]:
        """Kafka's ``handleEndTransaction``: (error, producer id, epoch the producer goes on with; -1, -1 with
        an error). The prepare state is written and the client answered; markers and the complete state
        follow. ``transaction_version`` 2 (EndTxn v5) bumps the epoch (a new producer id when exhausted)."""
        fail = -1, -1
        code, state = self._route(transactional_id)
        if state is None:
            return code, *fail
        meta = state.get(transactional_id)
        if meta is None:
            return InvalidProducerIdMappingError.code, *fail
        s = meta.state
        retry = True  # an end of the transaction in the state (TV1 always: its epoch does not move)
        if meta.client_transaction_version >= 2:
            # Under TV2 the same epoch names the next transaction; a retry of an end that went through comes
            # with the epoch before its bump (or, after a rotation, the old producer id at the last epoch).
            retry_on_bump = meta.producer_epoch == producer_epoch + 1
            retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == _MAX_EPOCH - 1
                                 and meta.producer_epoch == 0)
            if s in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                valid = retry_on_bump
            elif s in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                # the current epoch: the end of a next transaction no partition joined (Kafka 4.1)
                retry = retry_on_bump or retry_on_overflow
                valid = retry or producer_epoch == meta.producer_epoch
            else:
                valid = producer_epoch == meta.producer_epoch
        else:
            retry_on_overflow = False
            valid = producer_epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            return InvalidProducerIdMappingError.code, *fail
        if not valid:
            return ProducerFencedError.code, *fail
        if meta.pending is not None and s not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ConcurrentTransactionsError.code, *fail
        # While the markers are written (PREPARE_*, the complete state pending) Kafka answers from the state:
        # the same end again CONCURRENT_TRANSACTIONS, the other INVALID_TXN_STATE. _end writes nothing there.
        return await self._end(meta, commit, transaction_version, retry=retry)

    async def _end(self, meta: TransactionMetadata, commit: bool, transaction_version: int,
                   fencing: bool = False, retry: bool = True) -> tuple[int, int, int]:
        """``retry`` False: a TV2 end at the current epoch of a completed transaction (a next one that no
        partition joined)."""
        s = meta.state
        fail = -1, -1
        complete = s in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        # TV2: an abort of a transaction no partition joined yet still bumps the epoch (no markers to write);
        # its commit is INVALID_TXN_STATE (as Kafka 4.1)
        empty_abort = (not commit and transaction_version >= 2 and not fencing
                       and (s == TxnState.EMPTY or (complete and not retry)))
        if commit and complete and not retry:
            return InvalidTxnStateError.code, *fail
        if s == TxnState.ONGOING or empty_abort:
            prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            epoch, last_epoch, next_pid = meta.producer_epoch, meta.last_producer_epoch, -1
            meta.pending = prepare
            if transaction_version >= 2 and not fencing:  # a fence bumped the epoch already
                if meta.producer_epoch >= _MAX_EPOCH - 1:
                    try:
                        next_pid = await self.allocate_producer_id()  # exhausted: the next producer id
                    except KafkaError as e:
                        meta.pending = None
                        return e.code, *fail
                epoch, last_epoch = min(meta.producer_epoch + 1, _MAX_EPOCH), meta.producer_epoch
            value = meta.value(state=prepare, producer_epoch=epoch, next_producer_id=next_pid,
                               client_transaction_version=transaction_version, last_update_ms=self.wall_clock())
            code = await self._write(meta, value)
            if code != NO_ERROR:
                meta.pending = None
                return code, *fail
            self._apply(meta, value)
            meta.last_producer_epoch = last_epoch
            meta.pending = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            meta.completion = asyncio.Event()
            self._spawn(self._complete(self.partition_for(meta.transactional_id), meta))
            if next_pid != -1:
                return NO_ERROR, next_pid, 0
            return NO_ERROR, meta.producer_id, meta.producer_epoch
        current = NO_ERROR, meta.producer_id, meta.producer_epoch
        invalid = InvalidTxnStateError.code, *fail
        concurrent = ConcurrentTransactionsError.code, *fail
        if s == TxnState.COMPLETE_COMMIT:
            return current if commit else invalid
        if s == TxnState.COMPLETE_ABORT:
            return invalid if commit else current
        if s == TxnState.PREPARE_COMMIT:
            return concurrent if commit else invalid
        if s == TxnState.PREPARE_ABORT:
            return invalid if commit else concurrent
        return invalid  # EMPTY, DEAD, PREPARE_EPOCH_FENCE

    async def _complete(self, partition: int, meta: TransactionMetadata) -> None:
        """Send the markers until every partition acknowledged, then write the complete state (Kafka's
        ``TransactionMarkerChannelManager``). Ends quietly when the partition is unloaded meanwhile."""
        try:
            await self._send_markers_and_complete(partition, meta)
        finally:
            if meta.completion is not None:
                meta.completion.set()
                meta.completion = None

    async def _send_markers_and_complete(self, partition: int, meta: TransactionMetadata) -> None:
        commit = meta.state == TxnState.PREPARE_COMMIT
        remaining = sorted(meta.partitions)
        while remaining:
            if self.partitions.get(partition, {}).get(meta.transactional_id) is not meta:
                return
            try:
                # The markers carry the PREPARE state's producer id and epoch (under TV2 the bumped one).
                codes = await self.write_markers(meta.producer_id, meta.producer_epoch,
                                                 self.coordinator_epoch(partition), commit, remaining)
            except Exception as e:  # noqa: BLE001 - the next round retries
                log.debug("Markers for %s failed: %s", meta.transactional_id, e)
                codes = {}
            for tp in list(remaining):
                code = codes.get(tp)
                if code == NO_ERROR or code in _MARKER_GIVE_UP:
                    if code in _MARKER_GIVE_UP:
                        log.warning("Marker of transactional id %s refused by %s-%d: error %d",
                                    meta.transactional_id, *tp, code)
                    remaining.remove(tp)
            if remaining:
                await asyncio.sleep(_MARKER_RETRY_S)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        changes = {}
        if meta.client_transaction_version >= 2 and meta.next_producer_id != -1:
            # The epoch was exhausted: the producer goes on with the next producer id, epoch 0.
            changes = {"producer_id": meta.next_producer_id, "producer_epoch": 0,
                       "previous_producer_id": meta.producer_id}
        value = meta.value(state=done, partitions=frozenset(), last_update_ms=self.wall_clock(),
                           next_producer_id=-1, **changes)
        while True:
            if self.partitions.get(partition, {}).get(meta.transactional_id) is not meta:
                return
            code = await self._write(meta, value)
            if code == NO_ERROR:
                self._apply(meta, value)
                meta.pending = None
                return
            await asyncio.sleep(_MARKER_RETRY_S)

    async def _abort_fencing(self, meta: TransactionMetadata) -> int:
        """Abort ``meta``'s open transaction with the epoch bumped (Kafka's ``prepareFenceProducerEpoch``
        then an abort not from the client, with the finalized transaction version's rules): the producer of
        the old epoch is fenced."""
        before = meta.producer_epoch, meta.last_producer_epoch
        if meta.producer_epoch + 1 < _MAX_EPOCH:
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_epoch += 1
        tv = 2 if meta.client_transaction_version >= 2 and self.transaction_version() >= 2 else 0
        code, _, _ = await self._end(meta, False, tv, fencing=True)
        if code != NO_ERROR:  # not written: the bump did not happen
            meta.producer_epoch, meta.last_producer_epoch = before
        return code

    # ================================================================== timers

    async def abort_timed_out_transactions(self) -> int:
        """Abort every open transaction past its timeout (``transaction.abort.timed.out.transaction.cleanup
        .interval.ms``); returns how many were aborted."""
        now = self.wall_clock()
        aborted = 0
        for state in list(self.partitions.values()):
            for meta in list(state.values()):
                if meta.state == TxnState.ONGOING and meta.pending is None and meta.start_ms + meta.timeout_ms < now:
                    log.info("Aborting the transaction of %s (producer id %d, epoch %d): open longer than its "
                             "timeout of %d ms", meta.transactional_id, meta.producer_id, meta.producer_epoch,
                             meta.timeout_ms)
                    if await self._abort_fencing(meta) == NO_ERROR:
                        aborted += 1
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        """Remove ids idle for ``transactional.id.expiration.ms`` in EMPTY or COMPLETE_* with a tombstone."""
        now = self.wall_clock()
        removed = 0
        for state in list(self.partitions.values()):
            for txn_id, meta in list(state.items()):
                if (meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                        and meta.pending is None and meta.last_update_ms + self.config.id_expiration_ms <= now):
                    meta.pending = TxnState.DEAD
                    code = await self._write(meta, None)
                    meta.pending = None
                    if code == NO_ERROR and state.get(txn_id) is meta:
                        del state[txn_id]
                        removed += 1
        return removed

    # ================================================================== admin

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, pattern: str | None = None
                          ) -> tuple[int, list[str], list[TransactionMetadata]]:
        """ListTransactions (Kafka's ``listTransactionStates``): (error, unknown state filters, matches)."""
        if not self.active:
            return CoordinatorNotAvailableError.code, [], []
        if self.loading:
            return CoordinatorLoadInProgressError.code, [], []
        wanted_states = set(states)
        unknown = sorted(wanted_states - set(STATE_NAMES.values()))
        pids = set(producer_ids)
        regex = re.compile(pattern) if pattern else None
        now = self.wall_clock()
        out = []
        for state in self.partitions.values():
            for meta in state.values():
                if wanted_states and STATE_NAMES[meta.state] not in wanted_states:
                    continue
                if pids and meta.producer_id not in pids:
                    continue
                if duration_ms >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms < duration_ms):
                    continue
                if regex is not None and not regex.fullmatch(meta.transactional_id):
                    continue
                out.append(meta)
        return NO_ERROR, unknown, sorted(out, key=lambda m: m.transactional_id)

    def describe(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        code, state = self._route(transactional_id)
        if state is None:
            return code, None
        meta = state.get(transactional_id)
        if meta is None:
            return TransactionalIdNotFoundError.code, None
        return NO_ERROR, meta
