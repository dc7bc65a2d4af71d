"""This broker's ``__consumer_offsets`` as the group coordinator's store sees it.

:class:`BrokerOffsetsTopicLog` implements :class:`~tierlog.coordinator.OffsetsTopicLog` with the two
services that own the topic: the controller (its metadata, creation, the registered brokers) and
the replica manager (appends as leader, the partition's log for reads). The composition root builds
it and hands it to :class:`~tierlog.coordinator.OffsetsTopicStore`; the coordinator never sees the
broker.
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.cluster import Controller
from tierlog.server.replica_manager import ReplicaManager

__all__ = ["BrokerOffsetsTopicLog"]


class BrokerOffsetsTopicLog:
    def __init__(self, controller: Controller, replica_manager: ReplicaManager):
        self.controller = controller
        self.replica_manager = replica_manager

    def partition_count(self, topic: str) -> int | None:
        image = self.controller.image.topics.get(topic)
        return len(image.partitions) if image is not None else None

    def internal_topic_replication_factor(self, topic: str, setting: str, configured: int) -> int:
        return self.controller.internal_topic_replication_factor(topic, setting, configured)

    def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> None:
        configs = dict(configs)
        if self.controller.effective_config["min.insync.replicas"] > replication_factor:
            # Writes of the coordinator would fail with NOT_ENOUGH_REPLICAS otherwise.
            configs.setdefault("min.insync.replicas", str(replication_factor))
        self.controller.create_internal_topic(topic, num_partitions, replication_factor, configs)

    def append(self, topic: str, partition: int, records: bytes) -> dict:
        # Kafka's coordinators append with origin COORDINATOR (a transactional offset commit has no sequence).
        return self.replica_manager.append_records(topic, partition, records, internal_topics_allowed=True,
                                                   from_coordinator=True)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.replica_manager.get_partition(topic, partition).log.log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.replica_manager.get_partition(topic, partition).log.log_end_offset

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        log = self.replica_manager.get_partition(topic, partition).log
        return log.read(offset, max_bytes, isolation="log_end").read()
