"""Transactions: the partition side, WriteTxnMarkers, which the transaction coordinator sends to the leaders
of a transaction's partitions to end it there with a COMMIT or ABORT marker; and the coordinator's APIs
(:class:`TransactionCoordinatorApis`) with the markers it writes to partitions led by this broker
(:class:`LocalMarkerWriter`; in a cluster :mod:`tierlog.server.transactions.txn_marker_channel` sends the others).

Each partition's marker is appended as the leader (``ReplicaManager.append_txn_marker``) and answered once the
high watermark passed it, as Kafka's handler appends with RequiredAcks -1. Answers are grouped by producer id,
as Kafka's WriteTxnMarkersResponse is built from a map keyed by producer id. A marker written to a
``__consumer_offsets`` partition is then handed to the group coordinator (Kafka's ``onTransactionCompleted``),
which commits or drops the producer's pending transactional offsets there.
"""

from __future__ import annotations

import datetime
import logging
import re

from tierlog.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tierlog.coordinator.transaction_coordinator import STATE_NAMES, TransactionCoordinator
from tierlog.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    InvalidRequestError,
    KafkaError,
    OperationNotAttemptedError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Kafka waits for the markers' replication up to the broker's request.timeout.ms, 30 s by default.
MARKER_REPLICATION_TIMEOUT_S = 30.0


class TransactionMarkerApis:
    def __init__(self, replica_manager: ReplicaManager, group_coordinator: GroupCoordinator | None = None,
                 timeout_s: float = MARKER_REPLICATION_TIMEOUT_S, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.timeout_s = timeout_s
        self.authorization = authorization

    def register(self, registry) -> None:
        # Kafka 4.0 removed version 0; version 1 (flexible) is the only one Kafka 4.1 accepts.
        registry.register(ApiKey.WRITE_TXN_MARKERS, 1, 1, self.write_txn_markers)

    async def write_txn_markers(self, ctx: RequestContext):
        if (refused := self.authorization.cluster_action(ctx)) is not None:
            return refused
        rm = self.replica_manager
        by_producer: dict[int, dict[str, list[dict]]] = {}
        waits = []  # (partition result, (topic, partition, leader epoch, marker offset), producer id, commit)
        for marker in ctx.request.markers:
            topics = by_producer.setdefault(marker.producer_id, {})
            for topic in marker.topics:
                results = topics.setdefault(topic.name, [])
                for index in topic.partition_indexes:
                    result = {"partition_index": index, "error_code": NO_ERROR}
                    results.append(result)
                    try:
                        offset, epoch = rm.append_txn_marker(topic.name, index, marker.producer_id,
                                                             marker.producer_epoch, marker.coordinator_epoch,
                                                             marker.transaction_result)
                    except KafkaError as e:
                        result["error_code"] = e.code
                        log.debug("%s marker for producer %d in %s-%d refused: %s",
                                  "COMMIT" if marker.transaction_result else "ABORT", marker.producer_id,
                                  topic.name, index, e)
                        continue
                    waits.append((result, (topic.name, index, epoch, offset), marker.producer_id,
                                  marker.transaction_result))
        if waits:
            codes = await rm.wait_for_acks([w for _, w, _, _ in waits], self.timeout_s, ctx.timing)
            for (result, (topic, index, _, _), producer_id, commit), code in zip(waits, codes):
                result["error_code"] = code
                if code == NO_ERROR and topic == OFFSETS_TOPIC and self.group_coordinator is not None:
                    # As Kafka, once the marker is written: materialize (or drop) the pending offsets.
                    self.group_coordinator.on_transaction_completed(index, producer_id, commit)
        return build_response(ctx, {"markers": [
            {"producer_id": pid, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
            for pid, topics in by_producer.items()]})


#: KIP-588: the first version of each coordinator request whose client understands PRODUCER_FENCED; older
#: versions are answered INVALID_PRODUCER_EPOCH instead, as Kafka's handlers do. (TxnOffsetCommit gets
#: INVALID_PRODUCER_EPOCH at every version: its fencing comes through KIP-890's verification.)
_PRODUCER_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                          ApiKey.END_TXN: 2}


def fenced_for_version(ctx: RequestContext, code: int) -> int:
    """``code`` as the request's version understands it (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before
    KIP-588)."""
    if code == ProducerFencedError.code and ctx.api_version < _PRODUCER_FENCED_SINCE.get(ctx.api_key, 0):
        return InvalidProducerEpochError.code
    return code


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


class TransactionCoordinatorApis:
    """The transaction coordinator's APIs: AddPartitionsToTxn (v0-3 one transaction, v4+ batched, with
    KIP-890 part 1's verify-only form), AddOffsetsToTxn (the group's ``__consumer_offsets`` partition joins
    the transaction), EndTxn, DescribeTransactions and ListTransactions (v2: KIP-1152's id pattern).
    InitProducerId with a transactional id goes to the coordinator from the
    Produce family's handler (:meth:`init_producer_id`)."""

    def __init__(self, coordinator: TransactionCoordinator, controller, offsets_partition_for, *,
                 authorization: ApiAuthorization = ALLOW_ALL):
        """``offsets_partition_for(group_id)`` is the group's ``__consumer_offsets`` partition."""
        self.coordinator = coordinator
        self.controller = controller
        self.offsets_partition_for = offsets_partition_for
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, self.add_partitions_to_txn)
        registry.register(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4, self.add_offsets_to_txn)
        registry.register(ApiKey.END_TXN, 0, 5, self.end_txn)
        registry.register(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, self.describe_transactions)
        registry.register(ApiKey.LIST_TRANSACTIONS, 0, 2, self.list_transactions)

    async def init_producer_id(self, ctx: RequestContext):
        req = ctx.request
        code, pid, epoch = await self.coordinator.init_producer_id(
            req.transactional_id, _ms(req.transaction_timeout), getattr(req, "producer_id", -1),
            getattr(req, "producer_epoch", -1))
        return build_response(ctx, {"error_code": fenced_for_version(ctx, code), "producer_id": pid,
                                    "producer_epoch": epoch,
                                    "throttle_time_ms": 0})

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int, topics,
                   verify_only: bool = False, transaction_version: int = 0) -> list[dict]:
        """One transaction's topic results: partitions missing from the metadata UNKNOWN_TOPIC_OR_PARTITION
        and the others OPERATION_NOT_ATTEMPTED (Kafka's handler), else the coordinator's answer for all."""
        image = self.controller.image
        wanted = [(t.name, list(t.partitions)) for t in topics]
        unknown = {(name, p) for name, parts in wanted for p in parts
                   if image.topics.get(name) is None or p not in image.topics[name].partitions}
        if unknown:
            codes = {tp: UnknownTopicOrPartitionError.code if tp in unknown else OperationNotAttemptedError.code
                     for name, parts in wanted for tp in ((name, p) for p in parts)}
        elif verify_only:
            codes = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                       [(name, p) for name, parts in wanted for p in parts])
        else:
            tps = [(name, p) for name, parts in wanted for p in parts]
            if transaction_version >= 2:
                code = await self.coordinator.add_partitions_for_leader(transactional_id, producer_id,
                                                                        producer_epoch, tps)
            else:
                code = await self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, tps)
            codes = {(name, p): code for name, parts in wanted for p in parts}
        return [{"name": name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": codes[name, p]} for p in parts]} for name, parts in wanted]

    async def add_partitions_to_txn(self, ctx: RequestContext):
        if (refused := self.authorization.add_partitions_to_txn(ctx)) is not None:
            return refused
        req = ctx.request
        if ctx.api_version < 4:
            results = await self._add(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                      req.v3_and_below_producer_epoch, req.v3_and_below_topics)
            for topic in results:
                for p in topic["results_by_partition"]:
                    p["partition_error_code"] = fenced_for_version(ctx, p["partition_error_code"])
            return build_response(ctx, {"results_by_topic_v3_and_below": results})
        out = []
        for txn in req.transactions:
            # v5 is what partition leaders send for TV2 (Produce v12, TxnOffsetCommit v5): the add opens a
            # transaction with version 2's rules (Kafka's handler passes TV_2 for v5 and above).
            out.append({"transactional_id": txn.transactional_id, "topic_results": await self._add(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only,
                2 if ctx.api_version >= 5 else 0)})
        return build_response(ctx, {"error_code": NO_ERROR, "results_by_transaction": out})

    async def add_offsets_to_txn(self, ctx: RequestContext):
        if (refused := self.authorization.add_offsets_to_txn(ctx)) is not None:
            return refused
        req = ctx.request
        partition = self.offsets_partition_for(req.group_id)
        code = await self.coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                     [(OFFSETS_TOPIC, partition)])
        return build_response(ctx, {"error_code": fenced_for_version(ctx, code)})

    async def end_txn(self, ctx: RequestContext):
        if (refused := self.authorization.end_txn(ctx)) is not None:
            return refused
        req = ctx.request
        # EndTxn v5 is transaction version 2's (KIP-890): the epoch is bumped and answered with the producer id.
        tv = 2 if ctx.api_version >= 5 else 0
        code, pid, epoch = await self.coordinator.end_transaction(req.transactional_id, req.producer_id,
                                                                  req.producer_epoch, req.committed, tv)
        body = {"error_code": fenced_for_version(ctx, code)}
        if ctx.api_version >= 5:
            body.update(producer_id=pid, producer_epoch=epoch)
        return build_response(ctx, body)


    async def describe_transactions(self, ctx: RequestContext):
        checked = self.authorization.describe_transactions(ctx)
        ctx = checked.ctx
        out = []
        for txn_id in ctx.request.transactional_ids:
            code, meta = self.coordinator.describe(txn_id)
            if meta is None:
                out.append({"error_code": code, "transactional_id": txn_id, "transaction_state": "",
                            "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                            "producer_epoch": -1})
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(p)
            out.append({"error_code": NO_ERROR, "transactional_id": txn_id,
                        "transaction_state": STATE_NAMES[meta.state], "transaction_timeout": meta.timeout_ms,
                        "transaction_start_time": meta.start_ms, "producer_id": meta.producer_id,
                        "producer_epoch": meta.producer_epoch,
                        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        return build_response(ctx, {"transaction_states": out + checked.refused})

    async def list_transactions(self, ctx: RequestContext):
        req = ctx.request
        pattern = getattr(req, "transactional_id_pattern", None)
        try:
            code, unknown, found = self.coordinator.list_transactions(
                req.state_filters, req.producer_id_filters, getattr(req, "duration_filter", -1), pattern)
        except re.error:
            code, unknown, found = InvalidRequestError.code, [], []
        return build_response(ctx, {"error_code": code, "unknown_state_filters": unknown,
                                    "transaction_states": self.authorization.listed_transactions(ctx, [
                                        {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                         "transaction_state": STATE_NAMES[m.state]} for m in found])})


class LocalMarkerWriter:
    """WriteTxnMarkers for partitions led by this broker (all of them on a single node), as the coordinator
    sends them: the markers are appended through the replica manager and acknowledged once replicated (a marker on
    ``__consumer_offsets`` then completes the group's transactional offsets, as WriteTxnMarkers does). A partition whose
    topic was deleted counts as done, as Kafka's marker channel drops it."""

    def __init__(self, replica_manager: ReplicaManager, controller, group_coordinator: GroupCoordinator | None = None,
                 timeout_s: float = MARKER_REPLICATION_TIMEOUT_S):
        self.replica_manager = replica_manager
        self.controller = controller
        self.group_coordinator = group_coordinator
        self.timeout_s = timeout_s

    async def __call__(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                       partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        rm = self.replica_manager
        codes: dict[tuple[str, int], int] = {}
        waits = []
        for topic, index in partitions:
            image = self.controller.image.topics.get(topic)
            if image is None or index not in image.partitions:
                codes[topic, index] = NO_ERROR
                continue
            try:
                offset, epoch = rm.append_txn_marker(topic, index, producer_id, producer_epoch, coordinator_epoch,
                                                     commit)
            except KafkaError as e:
                codes[topic, index] = e.code
                continue
            waits.append(((topic, index), (topic, index, epoch, offset)))
        if waits:
            for (tp, _), code in zip(waits, await rm.wait_for_acks([w for _, w in waits], self.timeout_s)):
                codes[tp] = code
                if code == NO_ERROR and tp[0] == OFFSETS_TOPIC and self.group_coordinator is not None:
                    # As WriteTxnMarkers does: the group's pending transactional offsets are committed or dropped.
                    self.group_coordinator.on_transaction_completed(tp[1], producer_id, commit)
        return codes
