"""The partition side of transactions: WriteTxnMarkers, which the transaction coordinator sends to the leaders
of a transaction's partitions to end it there with a COMMIT or ABORT marker.

Each partition's marker is appended as the leader (``ReplicaManager.append_txn_marker``) and answered once the
high watermark passed it, as Kafka's handler appends with RequiredAcks -1. Answers are grouped by producer id,
as Kafka's WriteTxnMarkersResponse is built from a map keyed by producer id. A marker written to a
``__consumer_offsets`` partition is then handed to the group coordinator (Kafka's ``onTransactionCompleted``),
which commits or drops the producer's pending transactional offsets there.
"""

from __future__ import annotations

import logging

from tierlog.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tierlog.errors import NO_ERROR, KafkaError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Kafka waits for the markers' replication up to the broker's request.timeout.ms, 30 s by default.
MARKER_REPLICATION_TIMEOUT_S = 30.0


class TransactionMarkerApis:
    def __init__(self, replica_manager: ReplicaManager, group_coordinator: GroupCoordinator | None = None,
                 timeout_s: float = MARKER_REPLICATION_TIMEOUT_S):
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.timeout_s = timeout_s

    def register(self, registry) -> None:
        # Kafka 4.0 removed version 0; version 1 (flexible) is the only one Kafka 4.1 accepts.
        registry.register(ApiKey.WRITE_TXN_MARKERS, 1, 1, self.write_txn_markers)

    async def write_txn_markers(self, ctx: RequestContext):
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
            codes = await rm.wait_for_acks([w for _, w, _, _ in waits], self.timeout_s)
            for (result, (topic, index, _, _), producer_id, commit), code in zip(waits, codes):
                result["error_code"] = code
                if code == NO_ERROR and topic == OFFSETS_TOPIC and self.group_coordinator is not None:
                    # As Kafka, once the marker is written: materialize (or drop) the pending offsets.
                    self.group_coordinator.on_transaction_completed(index, producer_id, commit)
        return build_response(ctx, {"markers": [
            {"producer_id": pid, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
            for pid, topics in by_producer.items()]})
