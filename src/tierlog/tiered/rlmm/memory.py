"""A metadata manager that keeps remote segment metadata in this process only (``memory``)."""

from __future__ import annotations

from tierlog.tiered.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.rlmm.api import RemoteLogMetadataManager, check_add, check_update
from tierlog.tiered.rlmm.cache import RemotePartitionMetadataStore


class InMemoryRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Metadata kept in this process only: for tests of the remote log manager and tools, never for a
    broker whose remote data must survive a restart (nothing is persisted)."""

    def __init__(self) -> None:
        self.store = RemotePartitionMetadataStore()
        self.events: list = []  # every event, in order, for tests that assert on the sequence

    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        check_add(md)
        self.events.append(md)
        self.store.handle(md)

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        check_update(update)
        self.events.append(update)
        self.store.handle(update)

    async def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        self.events.append(md)
        self.store.handle(md)

    def remote_log_segment_metadata(self, tp, leader_epoch, offset):
        return self.store.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp, leader_epoch):
        return self.store.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(self, tp, leader_epoch=None):
        return self.store.list_remote_log_segments(tp, leader_epoch)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return self.store.is_initialized(tp)

    def on_partition_leadership_changes(self, leaders, followers) -> None:
        for tp in [*leaders, *followers]:
            self.store.maybe_load_partition(tp)
            self.store.mark_initialized(tp)

    def on_stop_partitions(self, partitions) -> None:
        for tp in partitions:
            self.store.clear_partition(tp)
