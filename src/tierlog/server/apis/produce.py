"""Produce and InitProducerId."""

from __future__ import annotations

import logging

from tierlog.errors import KafkaError, UnsupportedCompressionTypeError, error_for_code
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.records import ATTRIBUTES_POS

log = logging.getLogger(__name__)

INVALID_REQUIRED_ACKS = 21
ZSTD = 4


class ProduceApis:
    def __init__(self, broker):
        self.broker = broker

    def register(self, registry) -> None:
        registry.register(ApiKey.PRODUCE, 3, 12, self.produce)
        registry.register(ApiKey.INIT_PRODUCER_ID, 0, 5, self.init_producer_id)

    async def produce(self, ctx: RequestContext):
        req = ctx.request
        rm = self.broker.replica_manager
        acks = req.acks
        responses = []
        for topic_data in req.topic_data:
            name = getattr(topic_data, "name", None)
            if name is None:
                topic_id = getattr(topic_data, "topic_id", ZERO_UUID)
                name = rm.topic_name(topic_id) or ""
            parts = []
            for pd in topic_data.partition_data:
                result = {"index": pd.index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                          "log_start_offset": -1}
                try:
                    if acks not in (-1, 0, 1):
                        raise error_for_code(INVALID_REQUIRED_ACKS)(f"invalid required acks {acks}")
                    records = pd.records or b""
                    if ctx.api_version < 7 and len(records) > ATTRIBUTES_POS + 1 and \
                            records[ATTRIBUTES_POS + 1] & 0x07 == ZSTD:
                        raise UnsupportedCompressionTypeError(
                            f"zstd-compressed batches need Produce v7 or later, got v{ctx.api_version}")
                    result.update(rm.append(name, pd.index, records))
                except KafkaError as e:
                    result["error_code"] = e.code
                    result["error_message"] = e.message
                    if e.code not in (3, 6):  # expected while metadata propagates
                        log.debug("Produce to %s-%d failed: %s", name, pd.index, e)
                parts.append(result)
            responses.append({"name": name, "topic_id": getattr(topic_data, "topic_id", ZERO_UUID),
                              "partition_responses": parts})
        if acks == 0:
            return None
        return build_response(ctx, {"responses": responses, "throttle_time_ms": 0})

    async def init_producer_id(self, ctx: RequestContext):
        req = ctx.request
        if req.transactional_id is not None:
            # The transaction coordinator is not built yet: refuse clearly instead of pretending.
            return build_response(ctx, {"error_code": 42, "producer_id": -1, "producer_epoch": -1})
        # Kafka's coordinator gives every idempotent (non-transactional) producer a fresh id.
        return build_response(ctx, {"error_code": 0, "producer_id": self.broker.controller.allocate_producer_id(),
                                    "producer_epoch": 0, "throttle_time_ms": 0})
