"""Produce and InitProducerId."""

from __future__ import annotations

import asyncio

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.errors import (
    NO_ERROR,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicIdError,
    UnsupportedCompressionTypeError,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response, offload
from tierlog.protocol.hot_responses import encode_produce_response
from tierlog.protocol.offload import EncodedResponse, Pacer
from tierlog.records import (
    ATTRIBUTES_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    RECORD_BATCH_OVERHEAD,
    is_transactional,
)
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.http.broker_metrics import RequestMetrics
from tierlog.server.quotas.client_quota import ClientQuotas, quota_user
from tierlog.server.replica_manager import ReplicaManager

TV2_PRODUCE_VERSION = 12  # a transactional batch's partition is added to the transaction by its leader
KIP_219_PRODUCE_VERSION = 6  # from this version a throttled client is answered at once and waits itself

ZSTD = 4  # the compression codec in a batch's attributes


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


def _refused(index: int, code: int) -> dict:
    """A partition answered before any append (refused or invalid): bare, log start offset -1."""
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}


class ProduceApis:
    def __init__(self, replica_manager: ReplicaManager, controller: Controller,
                 request_metrics: RequestMetrics | None = None, *, transactions=None,
                 client_quotas: ClientQuotas | None = None, authorizer=None,
                 authorization: ApiAuthorization = ALLOW_ALL):
        """``request_metrics`` counts the partitions answered with an error (Kafka's ErrorsPerSec)."""
        self.replica_manager = replica_manager
        self.controller = controller
        self.request_metrics = request_metrics
        #: The transaction coordinator's APIs (TransactionCoordinatorApis), when this broker has one.
        self.transactions = transactions
        #: the broker's client quotas (producer_byte_rate), or None
        self.client_quotas = client_quotas
        #: The authorizer (server/authorizer.py) when authorizer.class.name is set, else None: nothing checked
        self.authorizer = authorizer
        self.authorization = authorization

    def register(self, registry) -> None:
        # v13 names topics by id (KIP-516): an unknown id answers UNKNOWN_TOPIC_ID, the answer names topics by id
        registry.register(ApiKey.PRODUCE, 3, 13, self.produce)
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
                name = self._topic_name(topic_data)
                # an unknown topic id is answered UNKNOWN_TOPIC_ID before any authorization, as in Kafka
                if name is not None and not authz.authorize(ctx.session, AclOperation.WRITE, ResourceType.TOPIC,
                                                            name):
                    denied_topics.add(name)
        # Kafka's RequestUtils.hasTransactionalRecords answers the whole request so (with no authorizer too):
        # transactional records need the transactional id. Checked during the paced walk below (nothing is
        # appended before it ends), not in one pass over every partition, which held the loop for 0.1 s at 500,000.
        untransactional = req.transactional_id is None
        metrics = self.request_metrics
        responses = []
        invalid_codes = []  # counted once the request is not refused as a whole
        entries = []  # (topic, partition, records) the replica manager appends
        # A request may name 100,000s of partitions (Kafka bounds it by socket.request.max.bytes only): the walk
        # yields to the loop every few ms, so that other connections are answered meanwhile.
        pacer = Pacer()
        walked = 0
        for topic_data in req.topic_data:
            name = self._topic_name(topic_data)
            parts = []
            for pd in topic_data.partition_data:
                walked += 1
                if not walked & 255:
                    await pacer()
                if untransactional and pd.records is not None and is_transactional(pd.records):
                    return self._refuse_all(ctx, TransactionalIdAuthorizationFailedError.code)
                if name is None:  # v13: a topic id this cluster does not know (the zero id included)
                    parts.append(_refused(pd.index, UnknownTopicIdError.code))
                    invalid_codes.append(UnknownTopicIdError.code)
                    continue
                if denied_topics and name in denied_topics:
                    parts.append(_refused(pd.index, TopicAuthorizationFailedError.code))
                    continue
                records = pd.records or b""
                # An invalid acks is the replica manager's answer for every partition, before the records'.
                invalid = _validate_records(ctx.api_version, records) if acks in (-1, 0, 1) else None
                if invalid is not None:
                    parts.append(_refused(pd.index, invalid.code))
                    invalid_codes.append(invalid.code)
                    continue
                parts.append(None)  # the replica manager's answer, in order
                entries.append((name, pd.index, records))
            responses.append({"name": name, "topic_id": getattr(topic_data, "topic_id", None),
                              "partition_responses": parts})
        try:
            # Produce v12 is transaction version 2's (KIP-890 part 2): the leader adds the partition to the
            # transaction. Produce v11 is the first version whose client understands TRANSACTION_ABORTABLE.
            appended = await rm.handle_produce_append(
                entries, acks, req.timeout.total_seconds(), req.transactional_id,
                transaction_version_2=ctx.api_version >= TV2_PRODUCE_VERSION,
                abortable_supported=ctx.api_version > 10, timing=ctx.timing)
        except InvalidProducerIdMappingError:
            return self._refuse_all(ctx, InvalidProducerIdMappingError.code)
        if metrics is not None:
            for code in invalid_codes:
                metrics.error(ApiKey.PRODUCE, code)
        answers = iter(appended)
        placed = 0
        for topic_response in responses:
            parts = topic_response["partition_responses"]
            for i, part in enumerate(parts):
                if part is None:
                    placed += 1
                    if not placed & 255:
                        await pacer()
                    parts[i] = part = next(answers)
                    if part["error_code"] and metrics is not None:
                        metrics.error(ApiKey.PRODUCE, part["error_code"])
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
                offload.dismantle(entries)
                offload.dismantle(appended)
                offload.dismantle(ctx.request)
                return EncodedResponse(frame)
            with offload.gc_paused():
                return await asyncio.to_thread(encode_and_free)
        # Written straight to bytes: through kio this small answer cost a sixth of the broker's produce CPU.
        return EncodedResponse(encode_produce_response(ctx.api_version, ctx.correlation_id, responses, throttle))

    def _refuse_all(self, ctx: RequestContext, code: int):
        """Kafka's ProduceRequest.getErrorResponse: every partition with ``code``; no answer for acks=0."""
        req = ctx.request
        if req.acks == 0:
            return None
        responses = []
        for topic_data in req.topic_data:
            responses.append({"name": getattr(topic_data, "name", None),
                              "topic_id": getattr(topic_data, "topic_id", None), "partition_responses": [
                {"index": pd.index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
                 "log_start_offset": -1} for pd in topic_data.partition_data]})
            if self.request_metrics is not None:
                for _ in topic_data.partition_data:
                    self.request_metrics.error(ApiKey.PRODUCE, code)
        return EncodedResponse(encode_produce_response(ctx.api_version, ctx.correlation_id, responses))

    def _topic_name(self, topic_data) -> str | None:
        """A request topic's name: v3-v12 carry it, v13 a topic id (KIP-516) resolved in the metadata image
        (None when unknown; the zero id is never a topic's)."""
        name = getattr(topic_data, "name", None)
        if name is not None:
            return name
        topic_id = getattr(topic_data, "topic_id", None)
        return None if topic_id in (None, ZERO_UUID) else self.replica_manager.topic_name(topic_id)

    async def init_producer_id(self, ctx: RequestContext):
        if (refused := self.authorization.init_producer_id(ctx)) is not None:
            return refused
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
