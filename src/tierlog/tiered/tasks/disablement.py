"""``RemoteTopicDisablement``: KIP-950's DisableRemoteTopic on one broker, and the deletion of all of a
partition's remote data it shares with topic deletion."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from tierlog.tiered.exceptions import RemoteResourceNotFoundError
from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.partition import TopicPartitionLog
from tierlog.tiered.rsm import RemoteStorageError
from tierlog.tiered.tasks.base import publish_state
from tierlog.tiered.tasks.state import log

if TYPE_CHECKING:
    from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState

#: How long a follower answering a delete disablement waits for its metadata to load (then the controller asks again).
_DISABLE_LOAD_WAIT_S = 20
#: How long deleting a partition's remote data waits for its metadata to load.
_DELETE_LOAD_WAIT_S = 300


class RemoteTopicDisablement:
    """Acts for the remote log manager ``rlm``; the bytes still to delete are in ``rlm.disabling``."""

    def __init__(self, rlm: RemoteLogManager) -> None:
        self.rlm = rlm

    async def disable(self, led: list[TopicPartitionLog], followed: list[TopicPartitionLog], policy: str) -> None:
        """See ``RemoteLogManager.disable_remote_topic``."""
        rlm = self.rlm
        partitions = [*led, *followed]
        if policy == "retain":
            for partition in partitions:
                st = rlm.partitions.get(rlm.topic_id_partition(partition))
                if st is not None and st.copy_task is not None:
                    st.stop_copy = True
                    await asyncio.wait([st.copy_task])
            return
        tps = await rlm.stop_tasks(partitions)
        for tp in tps:
            await rlm.reader.drain(tp)
        leading = [rlm.topic_id_partition(p) for p in led]
        # The manager follows the partitions again for as long as the deletion takes (after a restart it
        # has to load their metadata first).
        rlm.rlmm.on_partition_leadership_changes(leading, [tp for tp in tps if tp not in leading])
        for tp in leading:
            await self.delete_all_remote(tp)
        for tp in tps:
            if tp not in leading:
                await self.check_remote_deleted(tp)
        rlm.rlmm.on_stop_partitions(tps)
        rlm.metrics.disablements.inc(policy=policy)

    async def check_remote_deleted(self, tp: TopicIdPartition) -> None:
        """A followed partition's part of a delete disablement: raise while its leader has not deleted all
        (not waiting for it: the controller asks again after a back-off)."""
        await self._metadata_ready(tp, _DISABLE_LOAD_WAIT_S,
                                   RemoteResourceNotFoundError(f"the remote log metadata of {tp} is still loading"))
        left = self._undeleted(tp)
        if left:
            raise RemoteStorageError(f"{len(left)} remote segment(s) of {tp} are still to be deleted by its leader")

    async def _metadata_ready(self, tp: TopicIdPartition, timeout_s: float, error: Exception) -> None:
        """Wait while the partition's remote metadata loads (after a restart it may still be); ``error`` when
        it takes longer than ``timeout_s`` or the manager closes."""
        rlm = self.rlm
        deadline = time.monotonic() + timeout_s
        while not rlm.rlmm.is_ready(tp):
            if time.monotonic() > deadline or rlm.closed:
                raise error
            await asyncio.sleep(0.1)

    def _undeleted(self, tp: TopicIdPartition) -> list:
        return [md for md in self.rlm.rlmm.list_remote_log_segments(tp) if md.state != S.DELETE_SEGMENT_FINISHED]

    async def delete_all_remote(self, tp: TopicIdPartition) -> None:
        """Delete every remote segment of ``tp`` not deleted yet: DELETE_SEGMENT_STARTED for all, then the
        objects and DELETE_SEGMENT_FINISHED one by one (what is left counted in ``rlm.disabling``)."""
        rlm = self.rlm
        await self._metadata_ready(tp, _DELETE_LOAD_WAIT_S,
                                   TimeoutError(f"remote log metadata of {tp} did not become ready"))
        segments = self._undeleted(tp)
        left = rlm.disabling[tp] = {"segments": len(segments),
                                    "bytes": sum(md.segment_size_in_bytes for md in segments)}
        try:
            await self._delete_segments(tp, segments, left)
        finally:
            rlm.disabling.pop(tp, None)
            rlm.metrics.disable_bytes_left.remove(topic=tp.topic, partition=tp.partition)
        log.info("Deleted %d remote segment(s) of %s", len(segments), tp)

    async def _delete_segments(self, tp: TopicIdPartition, segments: list[RemoteLogSegmentMetadata],
                               left: dict) -> None:
        rlm = self.rlm
        for md in segments:
            if md.state != S.DELETE_SEGMENT_STARTED:
                await publish_state(rlm.rlmm, rlm.broker_id, md, S.DELETE_SEGMENT_STARTED)
        loop = asyncio.get_running_loop()
        for md in segments:
            rlm.metrics.delete_requests.inc(topic=tp.topic)
            try:
                await loop.run_in_executor(rlm.expiration_pool, rlm.rsm.delete_log_segment_data, md)
            except Exception:
                rlm.metrics.delete_errors.inc(topic=tp.topic)
                raise
            rlm.reader.evict(md)
            await publish_state(rlm.rlmm, rlm.broker_id, md, S.DELETE_SEGMENT_FINISHED)
            left["segments"] -= 1
            left["bytes"] -= md.segment_size_in_bytes
            rlm.metrics.disable_bytes_left.set(left["bytes"], topic=tp.topic, partition=tp.partition)
