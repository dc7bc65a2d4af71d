"""Produce and InitProducerId."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.errors import (
    NO_ERROR,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    MessageTooLargeError,
    NetworkException,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RecordListTooLargeError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response, offload
from tierlog.protocol.hot_responses import encode_produce_response
from tierlog.protocol.offload import EncodedResponse, Pacer
from tierlog.records import ATTRIBUTES_POS, LENGTH_POS, LOG_OVERHEAD, MAGIC_POS, RECORD_BATCH_OVERHEAD
from tierlog.records.batch import TRANSACTIONAL_FLAG_MASK
from tierlog.records.validation import record_errors_of
from tierlog.server.http.broker_metrics import RequestMetrics
from tierlog.server.quotas.client_quota import ClientQuotas, quota_user
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.transactions.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tierlog.storage.producer_state import SENTINEL

log = logging.getLogger(__name__)

TV2_PRODUCE_VERSION = 12  # a transactional batch's partition is added to the transaction by its leader
KIP_219_PRODUCE_VERSION = 6  # from this version a throttled client is answered at once and waits itself

ZSTD = 4  # the compression codec in a batch's attributes
_PRODUCER_ID_POS = 43  # a v2 batch header's producer id, its epoch and base sequence right after
_PRODUCER = struct.Struct(">qhi")
# KIP-890 part 1, as Kafka's produce path (transaction version 1): a coordinator that cannot answer yet becomes
# an error every producer retries without a metadata refresh.
_VERIFICATION_RETRIABLE = frozenset(e.code for e in (
    CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError, ConcurrentTransactionsError,
    NetworkException))
# Errors Kafka answers with log_start_offset -1 (ReplicaManager.appendToLocalLog's first catch);
# every other append error carries the partition's log start offset.
NO_LOG_START_OFFSET_ERRORS = frozenset(e.code for e in (
    UnknownTopicOrPartitionError, NotLeaderOrFollowerError, MessageTooLargeError, InvalidTopicError,
    RecordListTooLargeError, CorruptMessageError, KafkaStorageError, InvalidRequiredAcksError,
    UnsupportedCompressionTypeError))
# Expected while metadata propagates: not worth a debug line each.
_PROPAGATING = frozenset((UnknownTopicOrPartitionError.code, NotLeaderOrFollowerError.code))


def _validate_records(version: int, records: bytes) -> KafkaError | None:
    """Kafka's ProduceRequest.validateRecords, the request-level check before any append.

    Its errors are answered bare (no message, log start offset -1). Batches are counted as Kafka's
    iterator sees them: complete ones only."""
    batches = []
    pos = 0
    while pos + RECORD_BATCH_OVERHEAD <= len(records):
        size = LOG_OVERHEAD + int.from_bytes(records[pos + LENGTH_POS:pos + LENGTH_POS + 4], "big", signed=True)
        if size < LOG_OVERHEAD or pos + size > len(records):
            break
        batches.append(pos)
        pos += size
        if len(batches) > 1:
            break
    if not batches:
        return InvalidRecordError(f"Produce requests with version {version} must have at least one record batch "
                                  f"per partition")
    if records[MAGIC_POS] != 2:
        return InvalidRecordError(f"Produce requests with version {version} are only allowed to contain record "
                                  f"batches with magic version 2")
    if version < 7 and records[ATTRIBUTES_POS + 1] & 0x07 == ZSTD:
        return UnsupportedCompressionTypeError(f"Produce requests with version {version} are not allowed to use "
                                               f"ZStandard compression")
    if len(batches) > 1:
        return InvalidRecordError(f"Produce requests with version {version} are only allowed to contain exactly "
                                  f"one record batch per partition")
    return None


def _has_transactional_records(req) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition is transactional."""
    for topic_data in req.topic_data:
        for pd in topic_data.partition_data:
            records = pd.records
            if records is not None and len(records) >= RECORD_BATCH_OVERHEAD \
                    and records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_FLAG_MASK:
                return True
    return False


class ProduceApis:
    def __init__(self, replica_manager: ReplicaManager, controller: Controller,
                 request_metrics: RequestMetrics | None = None, *, transactions=None,
                 verification: AddPartitionsToTxnManager | None = None,
                 verification_enabled: Callable[[], bool] = lambda: True, client_quotas: ClientQuotas | None = None,
                 authorizer=None):
        """``request_metrics`` counts the partitions answered with an error (Kafka's ErrorsPerSec)."""
        self.replica_manager = replica_manager
        self.controller = controller
        self.request_metrics = request_metrics
        #: The transaction coordinator's APIs (TransactionCoordinatorApis), when this broker has one.
        self.transactions = transactions
        #: KIP-890 part 1's questions to the transaction coordinators, when this broker verifies
        self.verification = verification
        #: transaction.partition.verification.enable (dynamic; the broker caches it until the dynamic configs change)
        self.verification_enabled = verification_enabled
        #: the broker's client quotas (producer_byte_rate), or None
        self.client_quotas = client_quotas
        #: The authorizer (server/authorizer.py) when authorizer.class.name is set, else None: nothing checked
        self.authorizer = authorizer

    def register(self, registry) -> None:
        registry.register(ApiKey.PRODUCE, 3, 12, self.produce)
        registry.register(ApiKey.INIT_PRODUCER_ID, 0, 5, self.init_producer_id)

    async def produce(self, ctx: RequestContext):
        req = ctx.request
        rm = self.replica_manager
        acks = req.acks
        authz = self.authorizer
        denied_topics = None
        if authz is not None:
            # Kafka: WRITE on the transactional id for the whole request, then WRITE on each topic.
            if req.transactional_id is not None and not authz.authorize(
                    ctx.session, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
                return self._refuse_all(ctx, TransactionalIdAuthorizationFailedError.code)
            denied_topics = set()
            for topic_data in req.topic_data:
                name = getattr(topic_data, "name", None)
                if name is None:
                    name = rm.topic_name(getattr(topic_data, "topic_id", ZERO_UUID)) or ""
                if not authz.authorize(ctx.session, AclOperation.WRITE, ResourceType.TOPIC, name):
                    denied_topics.add(name)
        if req.transactional_id is None and _has_transactional_records(req):
            # Kafka answers the whole request so (with no authorizer too): transactional records need the
            # transactional id.
            return self._refuse_all(ctx, TransactionalIdAuthorizationFailedError.code)
        # Produce v12 is transaction version 2's (KIP-890 part 2): the leader adds the partition to the
        # transaction, whatever transaction.partition.verification.enable says (as Kafka).
        verify = (req.transactional_id is not None and self.verification is not None
                  and (ctx.api_version >= TV2_PRODUCE_VERSION or self.verification_enabled()))
        unverified: dict[tuple[str, int], int] = {}
        guards = None
        if verify:
            verified = await self._verify(ctx)
            if verified is None:
                return self._refuse_all(ctx, InvalidProducerIdMappingError.code)
            unverified, guards = verified
        responses = []
        waits = []  # acks=all: (result, (topic, partition, leader epoch, last offset, duplicate)) to wait for
        # A request may name 100,000s of partitions (Kafka bounds it by socket.request.max.bytes only): the walk
        # yields to the loop every few ms, so that other connections are answered meanwhile.
        pacer = Pacer()
        walked = 0
        for topic_data in req.topic_data:
            name = getattr(topic_data, "name", None)
            if name is None:
                topic_id = getattr(topic_data, "topic_id", ZERO_UUID)
                name = rm.topic_name(topic_id) or ""
            parts = []
            for pd in topic_data.partition_data:
                walked += 1
                if not walked & 255:
                    await pacer()
                result = {"index": pd.index, "error_code": NO_ERROR, "base_offset": -1, "log_append_time_ms": -1,
                          "log_start_offset": -1}
                if denied_topics and name in denied_topics:
                    result["error_code"] = TopicAuthorizationFailedError.code
                    parts.append(result)
                    continue
                try:
                    if acks not in (-1, 0, 1):
                        raise InvalidRequiredAcksError(f"invalid required acks {acks}")
                    records = pd.records or b""
                    invalid = _validate_records(ctx.api_version, records)
                    if invalid is not None:
                        result["error_code"] = invalid.code
                        parts.append(result)
                        if self.request_metrics is not None:
                            self.request_metrics.error(ApiKey.PRODUCE, invalid.code)
                        continue
                    guard = None
                    if guards is not None:
                        code = unverified.get((name, pd.index), NO_ERROR)
                        if code != NO_ERROR:
                            result["error_code"] = code
                            if code == NotEnoughReplicasError.code:
                                result["error_message"] = ("Unable to verify the partition has been added to the "
                                                           "transaction")
                            elif code == InvalidTxnStateError.code:
                                result["error_message"] = "Partition was not added to the transaction"
                            parts.append(result)
                            if self.request_metrics is not None:
                                self.request_metrics.error(ApiKey.PRODUCE, code)
                            continue
                        guard = guards.get((name, pd.index), SENTINEL)
                    appended = rm.append_records(name, pd.index, records, acks, verification_guard=guard)
                    last_offset, epoch = appended.pop("last_offset"), appended.pop("leader_epoch")
                    duplicate = appended.pop("duplicate")
                    result.update(appended)
                    if acks == -1:
                        waits.append((result, (name, pd.index, epoch, last_offset, duplicate)))
                except KafkaError as e:
                    result["error_code"] = e.code
                    if self.request_metrics is not None:
                        self.request_metrics.error(ApiKey.PRODUCE, e.code)
                    record_errors = record_errors_of(e)
                    if record_errors is not None:
                        # Kafka's RecordValidationException: a message and the index of each failing record
                        # in the batch; Kafka's other errors (a record that cannot be read) are bare.
                        result["error_message"] = e.message
                        result["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                                   for i, m in record_errors]
                    if e.code not in NO_LOG_START_OFFSET_ERRORS:
                        result["log_start_offset"] = rm.log_start_offset_or_unknown(name, pd.index)
                    if e.code not in _PROPAGATING:
                        log.debug("Produce to %s-%d failed: %s", name, pd.index, e)
                parts.append(result)
            responses.append({"name": name, "partition_responses": parts})
        if waits:
            codes = await rm.wait_for_acks([w for _, w in waits], req.timeout.total_seconds(), ctx.timing)
            for (result, _), code in zip(waits, codes):
                if code:
                    result["error_code"] = code
                    if self.request_metrics is not None:
                        self.request_metrics.error(ApiKey.PRODUCE, code)
        throttle = 0
        quotas = self.client_quotas
        if quotas is not None and quotas.produce.enabled:  # no quota configured: this one check
            throttle = quotas.produce.record_and_get_throttle_time_ms(quota_user(ctx), ctx.client_id or "",
                                                                      ctx.frame_size)
            if throttle:
                if ctx.api_version < KIP_219_PRODUCE_VERSION:
                    await asyncio.sleep(throttle / 1000)  # an old client: the answer itself is delayed
                else:
                    ctx.throttle_ms = throttle  # answered at once, the connection muted meanwhile
        if acks == 0:
            return None
        if walked >= offload.BIG_ITEMS:  # a big answer is encoded in a worker thread, the request freed there
            def encode_and_free() -> EncodedResponse:
                frame = encode_produce_response(ctx.api_version, ctx.correlation_id, responses, throttle)
                offload.dismantle(responses)
                offload.dismantle(waits)
                offload.dismantle(ctx.request)
                return EncodedResponse(frame)
            with offload.gc_paused():
                return await asyncio.to_thread(encode_and_free)
        # Written straight to bytes: through kio this small answer cost a sixth of the broker's produce CPU.
        return EncodedResponse(encode_produce_response(ctx.api_version, ctx.correlation_id, responses, throttle))

    async def _verify(self, ctx: RequestContext):
        """KIP-890 part 1 before anything is appended (Kafka's ``handleProduceAppend``): the partitions whose
        transactional batch opens the producer's transaction here are verified with its coordinator, in one
        question, while other requests go on. Returns (the errors of the partitions that fail, as Produce
        answers them, the guards to append with), or None when the request carries transactional batches of
        more than one producer (Kafka refuses the request with INVALID_PRODUCER_ID_MAPPING)."""
        req = ctx.request
        rm = self.replica_manager
        producers = set()
        sequences: dict[tuple[str, int], int] = {}
        for topic_data in req.topic_data:
            name = getattr(topic_data, "name", None)
            if name is None:
                name = rm.topic_name(getattr(topic_data, "topic_id", ZERO_UUID)) or ""
            for pd in topic_data.partition_data:
                records = pd.records
                if (records is not None and len(records) >= RECORD_BATCH_OVERHEAD and records[MAGIC_POS] == 2
                        and records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_FLAG_MASK):
                    producer_id, epoch, sequence = _PRODUCER.unpack_from(records, _PRODUCER_ID_POS)
                    producers.add((producer_id, epoch))
                    sequences[name, pd.index] = sequence
        if not producers:
            return {}, {}
        if len(producers) > 1:
            return None
        (producer_id, epoch), = producers
        # Produce v11 (KIP-890) is the first version whose client understands TRANSACTION_ABORTABLE.
        errors, guards = await self.verification.verify_for_append(
            req.transactional_id, producer_id, epoch, sequences, abortable_supported=ctx.api_version > 10,
            add=ctx.api_version >= TV2_PRODUCE_VERSION)
        return {tp: NotEnoughReplicasError.code if code in _VERIFICATION_RETRIABLE else code
                for tp, code in errors.items()}, guards

    def _refuse_all(self, ctx: RequestContext, code: int):
        """Kafka's ProduceRequest.getErrorResponse: every partition with ``code``; no answer for acks=0."""
        req = ctx.request
        if req.acks == 0:
            return None
        responses = []
        for topic_data in req.topic_data:
            name = getattr(topic_data, "name", None)
            if name is None:
                name = self.replica_manager.topic_name(getattr(topic_data, "topic_id", ZERO_UUID)) or ""
            responses.append({"name": name, "partition_responses": [
                {"index": pd.index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
                 "log_start_offset": -1} for pd in topic_data.partition_data]})
            if self.request_metrics is not None:
                for _ in topic_data.partition_data:
                    self.request_metrics.error(ApiKey.PRODUCE, code)
        return EncodedResponse(encode_produce_response(ctx.api_version, ctx.correlation_id, responses))

    async def init_producer_id(self, ctx: RequestContext):
        req = ctx.request
        if req.transactional_id is not None:
            if self.transactions is not None:
                return await self.transactions.init_producer_id(ctx)
            # No transaction coordinator wired in (the broker always builds one; an assembly without it refuses).
            return build_response(ctx, {"error_code": InvalidRequestError.code, "producer_id": -1,
                                        "producer_epoch": -1})
        # Kafka's coordinator gives every idempotent (non-transactional) producer a fresh id.
        return build_response(ctx, {"error_code": NO_ERROR, "producer_id": await self.controller.next_producer_id(),
                                    "producer_epoch": 0, "throttle_time_ms": 0})
