"""The follower's side of tiered storage: ``RLMFollowerTask`` (Kafka's) tracks how far the leader uploaded, and
``build_remote_log_aux_state`` (Kafka's ``TierStateMachine.buildRemoteLogAuxState``) starts a follower's log
from a remote segment when the leader holds its next offset only in the remote tier."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tierlog.storage.checkpoints import parse_leader_epoch_checkpoint, write_atomically
from tierlog.storage.producer_state import snapshot_path
from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.lineage import find_highest_remote_offset
from tierlog.tiered.metadata import IndexType, TopicIdPartition
from tierlog.tiered.partition import TopicPartitionLog
from tierlog.tiered.tasks.base import NOT_READY_RECHECK_S
from tierlog.tiered.tasks.state import log

if TYPE_CHECKING:
    from tierlog.tiered.remote_log_manager import RemoteLogManager


class RLMFollowerTask:
    """Every task interval, once the partition's metadata is loaded, moves the follower log's highest remote
    offset to the highest offset the leader uploaded within this replica's leader-epoch lineage, so local
    retention deletes here what the leader tiered, as it does on the leader. Ends when the log goes offline."""

    def __init__(self, rlm: RemoteLogManager, tp: TopicIdPartition, partition: TopicPartitionLog) -> None:
        self.rlm = rlm
        self.tp = tp
        self.partition = partition

    async def loop(self) -> None:
        rlm, tp = self.rlm, self.tp
        while True:
            if self.partition.log.offline is not None:
                return
            if not rlm.rlmm.is_ready(tp):
                await asyncio.sleep(min(rlm.task_interval_s, NOT_READY_RECHECK_S))
                continue
            try:
                self.execute()
            except Exception as e:  # noqa: BLE001 - metadata read again next run
                log.debug("Following the remote offsets of %s failed: %s", tp, e)
            await asyncio.sleep(rlm.task_interval_s)

    def execute(self) -> None:
        """Move the follower log's highest remote offset to what the leader uploaded in its lineage."""
        lg, rlmm = self.partition.log, self.rlm.rlmm
        offset, _ = find_highest_remote_offset(lg.leader_epoch_cache.entries, lg.log_end_offset,
                                               lambda e: rlmm.highest_offset_for_epoch(self.tp, e))
        if offset > lg.highest_offset_in_remote_storage:
            lg.highest_offset_in_remote_storage = offset


async def build_remote_log_aux_state(rlm: RemoteLogManager, tp: TopicIdPartition, partition: TopicPartitionLog,
                                     target_epoch: int, offset: int, leader_log_start: int) -> int:
    """KIP-405's follower path: the follower needs ``offset``'s successor, which the leader holds only in the
    remote tier. From the remote segment holding ``offset`` in ``target_epoch`` it takes the leader-epoch
    checkpoint and the producer snapshot shipped with it, starts the log empty after that segment with that
    state, its log start at the leader's; returns the offset to fetch from (the segment's end + 1). Raises a
    retriable storage error while the metadata is loading or the segment is not known yet."""
    if not rlm.rlmm.is_ready(tp):
        raise RemoteResourceNotFoundError(f"the remote log metadata of {tp} is still loading")
    md = rlm.rlmm.remote_log_segment_metadata(tp, target_epoch, offset)
    if md is None:
        raise RemoteResourceNotFoundError(f"no remote segment of {tp} holds offset {offset} in leader "
                                          f"epoch {target_epoch}")
    loop = asyncio.get_running_loop()
    epochs_blob = await loop.run_in_executor(rlm.reader.pool, rlm.rsm.fetch_index, md, IndexType.LEADER_EPOCH)
    try:
        snapshot = await loop.run_in_executor(rlm.reader.pool, rlm.rsm.fetch_index, md, IndexType.PRODUCER_SNAPSHOT)
    except RemoteResourceNotFoundError:
        snapshot = None  # a segment uploaded without producer state (no idempotent producer yet)
    epochs = parse_leader_epoch_checkpoint(epochs_blob, f"remote segment {md.segment_id.id} of {tp}")
    next_offset = md.end_offset + 1
    lg = partition.log
    lg.truncate_fully_and_start_at(next_offset)
    for epoch, start in epochs:
        if start < next_offset:
            lg.leader_epoch_cache.assign(epoch, start)
    if snapshot:
        write_atomically(snapshot_path(lg.dir, next_offset), snapshot, fsync=True)
        lg.producer_state.load_snapshot(next_offset)
    lg.log_start_offset = min(max(leader_log_start, 0), next_offset)
    lg.leader_epoch_cache.truncate_from_start(lg.log_start_offset)
    lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, md.end_offset)
    log.info("Built the state of follower %s from remote segment %s (offsets %d-%d, leader epochs %s): "
             "fetching from %d, log start %d", tp, md.segment_id.id, md.start_offset, md.end_offset,
             lg.leader_epoch_cache.entries, next_offset, lg.log_start_offset)
    return next_offset
