"""Partitions this broker leads: appends, reads with long polling, offsets.

The replica manager keeps one :class:`Partition` per local log, created and removed from the
controller's metadata deltas. On a single node every partition's only replica is the leader, so
the high watermark follows the log end offset right after each append; replication will move that
step behind follower acknowledgements without changing the callers.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from tierlog.cluster import MetadataDelta, MetadataImage, TopicImage
from tierlog.errors import (
    FencedLeaderEpochError,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage import Log

log = logging.getLogger(__name__)

REPLICA_COUNT = ISR_SIZE = 1  # single node: the leader is the only replica (replication changes this)


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_epoch: int

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing: a client with a newer epoch than ours waits; an older one refreshes."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} of {self.topic}-{self.index} is newer than ours "
                f"({self.leader_epoch})")
        raise FencedLeaderEpochError(
            f"leader epoch {current_leader_epoch} of {self.topic}-{self.index} is older than the current "
            f"{self.leader_epoch}")


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    # ------------------------------------------------------------------ metadata

    def load(self, image: MetadataImage) -> None:
        lm = self.broker.log_manager
        known = set()
        for topic in image.topics.values():
            for p in topic.partitions:
                self._add(topic, p)
                known.add((topic.name, p))
        for tp in list(lm.logs):
            if tp not in known:
                log.warning("Deleting log %s-%d: its topic is not in the cluster metadata", *tp)
                lm.delete_log(*tp)
        self._lead_tiered(self.partitions.values())

    def _lead_tiered(self, partitions) -> None:
        """Hand the partitions whose logs have remote storage in effect to the remote log manager (on a
        single node this broker leads every partition)."""
        rlm = self.broker.remote_log_manager
        if rlm is not None:
            rlm.on_leadership_change([p for p in partitions if p.log.config.remote_storage_enable])

    def _add(self, topic: TopicImage, p: int, is_new: bool = False) -> None:
        """``is_new``: created since start-up (a metadata delta), so it cannot be in a log dir that failed."""
        lg = self.broker.log_manager.get_or_create_log(topic.name, p, self.broker.log_config_for(topic.name),
                                                       topic.topic_id, is_new=is_new)
        # This broker is the partition's only replica, so its leader's ISR is itself and everything in
        # its log is committed: as Kafka's leader with ISR {self}, the high watermark is the log end
        # (after an unclean stop the checkpointed one may lag behind acknowledged records).
        lg.update_high_watermark(lg.log_end_offset)
        self.partitions[(topic.name, p)] = Partition(topic.name, p, topic.topic_id, lg,
                                                     topic.partitions[p].leader_epoch)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        lm = self.broker.log_manager
        rlm = self.broker.remote_log_manager
        for topic in delta.created:
            for p in topic.partitions:
                self._add(topic, p, is_new=True)
            self._lead_tiered(self._topic_partitions(topic.name))
        for topic, added in delta.partitions_added:
            for p in added:
                self._add(topic, p, is_new=True)
            self._lead_tiered(self._topic_partitions(topic.name))
        for topic in delta.deleted:
            gone = [self.partitions.pop((topic.name, p)) for p in topic.partitions
                    if (topic.name, p) in self.partitions]
            if rlm is not None and any(p.log.config.remote_storage_enable for p in gone):
                # The leader deletes the remote data of a deleted topic (KIP-405), in the background.
                rlm.spawn(rlm.stop_partitions(gone, delete_remote=True), f"delete-remote-{topic.name}")
            for p in gone:
                lm.delete_log(topic.name, p.index)
                self._wake((topic.name, p.index))
        for topic in delta.configs_changed:
            config = self.broker.log_config_for(topic.name)
            partitions = self._topic_partitions(topic.name)
            was_tiered = any(p.log.config.remote_storage_enable for p in partitions)
            lm.update_config(topic.name, config)
            if rlm is None:
                continue
            if config.remote_storage_enable:
                self._lead_tiered(partitions)  # newly tiered topics start copying from the log start
                for p in partitions:
                    rlm.on_config_change(p)
            elif was_tiered:
                # A delete disablement (KIP-950): remote reads are fenced at once, the log now starts at
                # its local start; the controller's DisableRemoteTopic then deletes the remote data.
                for p in partitions:
                    p.log.increment_log_start_offset_from_remote(p.log.local_log_start_offset)
                rlm.spawn(rlm.stop_tasks(partitions), f"stop-remote-{topic.name}")

    def handle_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure on one node, called by the log dir failure channel after
        the log manager closed the dir's logs (each now refuses reads and writes with KAFKA_STORAGE_ERROR):
        fetches waiting on those partitions answer at once, and tiered storage stops copying them. The
        partitions stay led here (no other replica could take them) and answer KAFKA_STORAGE_ERROR."""
        offline = [p for p in self.partitions.values() if p.log.parent_dir == log_dir]
        for p in offline:
            self._wake((p.topic, p.index))
        rlm = self.broker.remote_log_manager
        if rlm is not None:
            rlm.on_log_dir_failure([p for p in offline if p.log.config.remote_storage_enable])

    def _topic_partitions(self, topic: str) -> list[Partition]:
        return [p for (t, _), p in self.partitions.items() if t == topic]

    def shutdown(self) -> None:
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    # ------------------------------------------------------------------ lookup

    def get_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            t = self.broker.controller.image.topics.get(topic)
            if t is not None and partition in t.partitions:
                raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{partition}")
        if p.log.offline is not None:  # Kafka's HostedPartition.Offline: its log dir failed
            raise p.log.offline_error()
        return p

    def log_start_offset_or_unknown(self, topic: str, partition: int) -> int:
        p = self.partitions.get((topic, partition))
        return p.log.log_start_offset if p is not None else -1

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        t = self.broker.controller.image.topic_by_id(topic_id)
        return t.name if t else None

    # ------------------------------------------------------------------ produce

    def append(self, topic: str, partition: int, records: bytes, acks: int = 1) -> dict:
        """Append a client's batch as leader; returns the fields of a produce partition response."""
        p = self.get_partition(topic, partition)
        # Kafka's effectiveMinIsr: min.insync.replicas capped at the replica count, so on one broker
        # acks=all never fails for it (checked against Kafka in the differential suite).
        min_isr = min(p.log.config.min_insync_replicas, REPLICA_COUNT)
        if acks == -1 and min_isr > ISR_SIZE:
            raise NotEnoughReplicasError(
                f"the in-sync replicas of {topic}-{partition} ({ISR_SIZE}) are fewer than the "
                f"{min_isr} that min.insync.replicas requires")
        try:
            info = p.log.append_as_leader(records, p.leader_epoch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {topic}-{partition}: {e}") from e
        # Single replica: the append is committed at once.
        p.log.update_high_watermark(p.log.log_end_offset)
        if not info.duplicate:
            self._wake((topic, partition))
        return {"base_offset": info.first_offset, "log_append_time_ms": info.log_append_time,
                "log_start_offset": p.log.log_start_offset}

    # ------------------------------------------------------------------ fetch long polling

    def _wake(self, tp: tuple[str, int]) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, tps: list[tuple[str, int]], timeout_s: float) -> None:
        """Return when any of ``tps`` gets an append, or after ``timeout_s``."""
        if timeout_s <= 0:
            return
        if not tps:  # nothing can wake us: wait out the time rather than let a caller spin
            await asyncio.sleep(timeout_s)
            return
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        self._waiters.pop(tp, None)


__all__ = ["KafkaError", "Partition", "ReplicaManager"]
