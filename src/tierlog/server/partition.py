"""A partition this broker hosts (Kafka's ``kafka.cluster.Partition``): its log, leader epoch and replicas.

This is the object replication extends: the replica set and the in-sync replicas come from the cluster
metadata, and the high watermark is the minimum log end offset of the ISR. On a single node the leader
is the only replica, so the ISR is the leader alone and the high watermark follows the log end offset
as soon as an append returns (:meth:`Partition.maybe_increment_high_watermark`).

Tiered storage sees partitions through :class:`tierlog.tiered.partition.TopicPartitionLog`, which this
class satisfies.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tierlog.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from tierlog.storage import Log


@dataclass(slots=True, eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_epoch: int
    leader_id: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def remote_storage_enabled(self) -> bool:
        return self.log.config.remote_storage_enable

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing: a client with a newer epoch than ours waits; an older one refreshes."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} of {self} is newer than ours ({self.leader_epoch})")
        raise FencedLeaderEpochError(
            f"leader epoch {current_leader_epoch} of {self} is older than the current {self.leader_epoch}")

    def effective_min_isr(self) -> int:
        """Kafka's effectiveMinIsr: ``min.insync.replicas`` capped at the replica count, so a topic with
        fewer replicas than the setting still accepts acks=all (checked against Kafka)."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    def maybe_increment_high_watermark(self) -> int:
        """Move the high watermark to the lowest log end offset of the ISR. With this broker as the
        only in-sync replica that is its own log end offset; replication will take the followers'
        fetch offsets into account here."""
        return self.log.update_high_watermark(self.log.log_end_offset)
