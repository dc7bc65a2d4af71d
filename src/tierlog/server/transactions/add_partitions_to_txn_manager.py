"""KIP-890 part 1 from the partition leader's side (Kafka's ``AddPartitionsToTxnManager``): before a
producer's first transactional batch of a transaction is appended to a partition, the leader asks the
transaction's coordinator whether the partition is in that open transaction.

The coordinator is the leader of the transactional id's ``__transaction_state`` partition in the broker's
metadata image. When that is this broker the coordinator is asked in process; otherwise the question goes as
AddPartitionsToTxn v4+ (the batched form, ``verify_only`` true) over the inter-broker listener. Questions
for one coordinator are queued and each request carries everything queued (several transactional ids), one
request in flight per coordinator, as Kafka's manager drains a node's queue (the queues and their senders are
:class:`~tierlog.cluster.inter_broker_sender.InterBrokerSender`'s). Two questions for the same
transactional id share a request entry: with the same producer id and epoch their partitions are merged (Kafka
instead fails the older one with a retriable error); with another epoch Kafka's rule applies, the older epoch
gets INVALID_PRODUCER_EPOCH.

Answers, as Kafka's manager hands them to the caller: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what
producers expect here); TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for a caller whose request version
predates it; a request-level CLUSTER_AUTHORIZATION_FAILED becomes INVALID_TXN_STATE; a coordinator without
AddPartitionsToTxn v4 means no verification (every partition passes); a failed request (connection,
timeout) is NETWORK_EXCEPTION; no live coordinator COORDINATOR_NOT_AVAILABLE. Each caller maps what remains
to its own API's errors (Produce and TxnOffsetCommit differ).

Under transaction version 2 (KIP-890 part 2: Produce v12, TxnOffsetCommit v5) the question becomes an add
(``add``): the coordinator adds the partition to the producer's transaction, in process or with
AddPartitionsToTxn v5 and ``verify_only`` false. While the previous transaction's markers are in flight the
coordinator waits for them and answers CONCURRENT_TRANSACTIONS; the leader then asks again with a fresh guard
(the markers dropped the one it had), a few times, as Kafka's leaders retry that error.

The manager has connections of its own (the controller's pushes and the markers' long waits are elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.inter_broker_sender import InterBrokerSender
from tierlog.errors import (
    NO_ERROR,
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    NetworkException,
    ProducerFencedError,
    TransactionAbortableError,
    UnsupportedVersionError,
)
from tierlog.protocol import ApiKey
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage.producer_state import SENTINEL, VerificationGuard

log = logging.getLogger(__name__)

__all__ = ["AddPartitionsToTxnManager"]

TopicPartition = tuple[str, int]
TXN_STATE_TOPIC = "__transaction_state"
#: AddPartitionsToTxn's first batched version (KIP-890), the one with ``verify_only``.
FIRST_BATCHED_VERSION = 4
#: The version whose adds open transactions with transaction version 2's rules.
TV2_ADD_VERSION = 5
#: How many times a TV2 add answered CONCURRENT_TRANSACTIONS is asked again before the producer is answered.
_ADD_ATTEMPTS = 4


@dataclass
class _Transaction:
    """One transactional id's entry in the next request to a coordinator, and the callers waiting on it."""
    producer_id: int
    producer_epoch: int
    add: bool = False  # TV2: add the partitions rather than verify them
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # an ordered set
    waiters: list[asyncio.Future] = field(default_factory=list)


def _for_caller(code: int, abortable_supported: bool) -> int:
    if code == ProducerFencedError.code:
        return InvalidProducerEpochError.code
    if code == TransactionAbortableError.code and not abortable_supported:
        return InvalidTxnStateError.code
    return code


class AddPartitionsToTxnManager(InterBrokerSender[dict[str, _Transaction]]):
    """``verify`` (see the module docstring)."""

    def __init__(self, node_id: int, replica_manager: ReplicaManager, image: Callable,
                 partition_for: Callable[[str], int], local_verify: Callable, channel: NetworkBrokerChannel | None,
                 request_timeout_ms: int, local_add: Callable | None = None):
        """``image()`` is the broker's metadata image; ``partition_for(transactional_id)`` the id's
        ``__transaction_state`` partition; ``local_verify`` the coordinator of this broker
        (``TransactionCoordinator.verify_partitions``), ``local_add`` its TV2 add
        (``TransactionCoordinator.add_partitions_for_leader``); ``channel`` None on a single node."""
        super().__init__(channel, log, "txn-verification-to", "Transaction verification with broker %d failed: %s")
        self.node_id = node_id
        self.replica_manager = replica_manager
        self.image = image
        self.partition_for = partition_for
        self.local_verify = local_verify
        self.local_add = local_add
        self.request_timeout_ms = request_timeout_ms

    async def verify_for_append(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                sequences: dict[TopicPartition, int], abortable_supported: bool, add: bool = False,
                                ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, VerificationGuard]]:
        """Kafka's ``maybeStartTransactionVerificationForPartitions``: for each led partition (with the base
        sequence of the producer's batch) the guard to append with, taken before the coordinator is asked;
        ``SENTINEL`` where the producer's transaction is already open there (no question; the append still
        refuses the batch if a marker closed it meanwhile). Returns the errors (a partition not led here, or
        the coordinator's answer, as :meth:`verify` gives it) and the guards. With ``add`` (TV2) the
        partitions are added to the transaction, asked again with new guards while the coordinator answers
        CONCURRENT_TRANSACTIONS (it waited for the previous transaction's markers)."""
        for _attempt in range(_ADD_ATTEMPTS if add else 1):
            errors: dict[TopicPartition, int] = {}
            guards: dict[TopicPartition, VerificationGuard] = {}
            for tp, sequence in sequences.items():
                try:
                    guards[tp] = self.replica_manager.maybe_start_transaction_verification(
                        *tp, producer_id, sequence, producer_epoch)
                except KafkaError as e:
                    errors[tp] = e.code
            asked = [tp for tp, guard in guards.items() if guard is not SENTINEL]
            if asked:
                codes = await self.verify(transactional_id, producer_id, producer_epoch, asked, abortable_supported,
                                          add)
                errors.update((tp, code) for tp, code in codes.items() if code != NO_ERROR)
            if ConcurrentTransactionsError.code not in errors.values():
                break
        return errors, guards

    def guard_holds(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                    guard: VerificationGuard) -> bool:
        """Whether a batch verified with ``guard`` may still be appended to ``tp`` (led here) now: the
        check ``Log.append_as_leader`` makes, for an append that goes through a coordinator's own writer."""
        p = self.replica_manager.partitions.get(tp)
        if p is None:
            return False
        state = p.log.producer_state
        return (state.has_ongoing_transaction(producer_id, producer_epoch)
                or state.verification_guard(producer_id).verify(guard))

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The live broker leading the id's ``__transaction_state`` partition (Kafka's
        ``getTransactionCoordinator``), or None."""
        if self.channel is None:
            return self.node_id
        image = self.image()
        topic = image.topics.get(TXN_STATE_TOPIC)
        state = topic.partitions.get(self.partition_for(transactional_id)) if topic is not None else None
        if state is None or state.leader < 0 or state.leader not in image.brokers:
            return None
        return state.leader

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition], abortable_supported: bool,
                     add: bool = False) -> dict[TopicPartition, int]:
        """The error of each partition (NONE: it is in the producer's open transaction; with ``add``, it was
        added to it)."""
        partitions = list(partitions)
        coordinator = self.coordinator_of(transactional_id)
        if coordinator is None:
            return dict.fromkeys(partitions, CoordinatorNotAvailableError.code)
        if coordinator == self.node_id:
            if add:
                codes = dict.fromkeys(partitions, await self.local_add(transactional_id, producer_id, producer_epoch,
                                                                       partitions))
            else:
                codes = self.local_verify(transactional_id, producer_id, producer_epoch, partitions)
        else:
            codes = await self._enqueue(coordinator, transactional_id, producer_id, producer_epoch, partitions, add)
        return {tp: _for_caller(codes.get(tp, NetworkException.code), abortable_supported) for tp in partitions}

    async def _enqueue(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition], add: bool = False) -> dict[TopicPartition, int]:
        if self._closed:
            return dict.fromkeys(partitions, NetworkException.code)
        queue = self._queues.setdefault(node, {})
        txn = queue.get(transactional_id)
        if txn is not None and (txn.producer_id, txn.producer_epoch, txn.add) != (producer_id, producer_epoch, add):
            if producer_epoch < txn.producer_epoch and producer_id == txn.producer_id:
                return dict.fromkeys(partitions, InvalidProducerEpochError.code)
            # A newer epoch (or another producer id) replaces the queued one, whose callers are answered now.
            del queue[transactional_id]
            fenced = producer_id == txn.producer_id and producer_epoch > txn.producer_epoch
            old = dict.fromkeys(txn.partitions, InvalidProducerEpochError.code if fenced else NetworkException.code)
            for waiter in txn.waiters:
                if not waiter.done():
                    waiter.set_result(old)
            txn = None
        if txn is None:
            txn = queue[transactional_id] = _Transaction(producer_id, producer_epoch, add)
        txn.partitions.update(dict.fromkeys(partitions))
        done = asyncio.get_running_loop().create_future()
        txn.waiters.append(done)
        self._wake(node)
        return await done

    def _next_batches(self, node: int) -> list[dict[str, _Transaction]]:
        """Everything queued: verify-only questions (v4) and TV2 adds (v5) in requests of their own versions."""
        queued = self._queues.pop(node, None)
        if not queued:
            return []
        batches = ({tid: t for tid, t in queued.items() if t.add is add} for add in (False, True))
        return [batch for batch in batches if batch]

    async def _send(self, node: int, batch: dict[str, _Transaction]) -> dict[tuple[str, str, int], int]:
        add = next(iter(batch.values())).add
        try:
            response = await self.channel.request(node, ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [
                {"transactional_id": tid, "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
                 "verify_only": not add,
                 "topics": [{"name": topic, "partitions": [i for n, i in t.partitions if n == topic]}
                            for topic in dict.fromkeys(n for n, _ in t.partitions)]}
                for tid, t in batch.items()]}, min_version=TV2_ADD_VERSION if add else FIRST_BATCHED_VERSION,
                timeout_ms=self.request_timeout_ms)
        except UnsupportedVersionError:
            # A coordinator that cannot verify: Kafka goes on with the append unverified. One that cannot add
            # could never end the transaction on this partition: refused.
            code = InvalidTxnStateError.code if add else NO_ERROR
            return {(tid, *tp): code for tid, t in batch.items() for tp in t.partitions}
        if response.error_code != NO_ERROR:
            # Kafka hides an authorization failure of the brokers' own request from the client.
            code = (InvalidTxnStateError.code if response.error_code == ClusterAuthorizationFailedError.code
                    else int(response.error_code))
            return {(tid, *tp): code for tid, t in batch.items() for tp in t.partitions}
        return {(r.transactional_id, topic.name, p.partition_index): int(p.partition_error_code)
                for r in response.results_by_transaction for topic in r.topic_results
                for p in topic.results_by_partition}

    def _answer(self, batch: dict[str, _Transaction], answers: dict[tuple[str, str, int], int] | None) -> None:
        """Each partition not answered (a failed request, a stopped sender) gets NETWORK_EXCEPTION."""
        answers = answers or {}
        for tid, t in batch.items():
            answer = {tp: answers.get((tid, *tp), NetworkException.code) for tp in t.partitions}
            for waiter in t.waiters:
                if not waiter.done():
                    waiter.set_result(answer)
