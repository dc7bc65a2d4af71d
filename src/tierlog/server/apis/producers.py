"""DescribeProducers (KIP-664): the active producers of partitions this broker leads, read from each partition's
producer state, as ``kafka-transactions describe-producers`` and ``find-hanging`` ask for them.

As Kafka's handler: a partition missing from the metadata answers UNKNOWN_TOPIC_OR_PARTITION, one this broker
does not lead NOT_LEADER_OR_FOLLOWER (``ReplicaManager.activeProducerState``), one whose log dir failed
KAFKA_STORAGE_ERROR; each producer's id, epoch, last sequence, last timestamp, coordinator epoch and the first
offset of its open transaction (-1 when none).
"""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.errors import NO_ERROR, KafkaError, UnknownTopicOrPartitionError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.replica_manager import ReplicaManager


class ProducerApis:
    def __init__(self, controller: Controller, replica_manager: ReplicaManager, *,
                 authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.replica_manager = replica_manager
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.DESCRIBE_PRODUCERS, 0, 0, self.describe_producers)

    async def describe_producers(self, ctx: RequestContext):
        checked = self.authorization.describe_producers(ctx)
        ctx = checked.ctx
        image_topics = self.controller.image.topics
        topics = []
        for topic in ctx.request.topics:
            meta = image_topics.get(topic.name)
            partitions = []
            for index in topic.partition_indexes:
                if meta is None or index not in meta.partitions:
                    partitions.append({"partition_index": index, "error_code": UnknownTopicOrPartitionError.code,
                                       "active_producers": []})
                    continue
                try:
                    p = self.replica_manager.get_partition(topic.name, index)
                except KafkaError as e:
                    partitions.append({"partition_index": index, "error_code": e.code, "active_producers": []})
                    continue
                partitions.append({"partition_index": index, "error_code": NO_ERROR,
                                   "active_producers": _active_producers(p.log.producer_state)})
            topics.append({"name": topic.name, "partitions": partitions})
        return build_response(ctx, {"topics": topics + checked.refused})


def _active_producers(state) -> list[dict]:
    """Kafka's ``UnifiedLog.activeProducers``: every producer the partition's state holds."""
    return [{"producer_id": pid, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
             "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
             "current_txn_start_offset": e.current_txn_first_offset}
            for pid, e in state.producers.items()]
