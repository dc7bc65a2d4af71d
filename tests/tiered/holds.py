"""Test plugins loaded by live brokers (``remote.log.metadata.manager.class.name=tests.tiered.holds:...``
with ``remote.log.metadata.manager.class.path`` the repository root): windows that a test holds open
and releases itself, instead of relying on something being slow.

``HeldTopicBasedRemoteLogMetadataManager`` is the topic-based manager whose reader of
``__remote_log_metadata`` reads nothing while the file named by ``rlmm.config.test.hold.file`` exists:
after a restart the partitions' metadata stays loading (REPLICA_NOT_AVAILABLE for remote reads) until the
test removes the file; then the catch-up runs as usual. With ``rlmm.config.test.configure.delay.ms`` its
``configure`` (called before the broker loads its logs) returns that much later: a start-up that lasts at
least that long after the manager was configured, on any machine."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from pathlib import Path

from tierlog.tiered.rlmm.consumer_task import ConsumerTask
from tierlog.tiered.rlmm.topic_based import TopicBasedRemoteLogMetadataManager

ROOT = Path(__file__).resolve().parents[2]
HELD_RLMM = "tests.tiered.holds:HeldTopicBasedRemoteLogMetadataManager"


def held_rlmm_settings(hold_file: os.PathLike | str) -> dict[str, str]:
    """Broker settings that load the held manager, holding while ``hold_file`` exists."""
    return {"remote.log.metadata.manager.class.name": HELD_RLMM, "remote.log.metadata.manager.class.path": str(ROOT),
            "rlmm.config.test.hold.file": str(hold_file)}


class _HeldConsumer:
    """The manager's consumer, whose polls return nothing while the hold file exists."""

    def __init__(self, consumer, hold_file: str) -> None:
        self._consumer = consumer
        self._hold_file = hold_file

    async def poll(self, timeout_ms: int = 0, **kwargs):
        if os.path.exists(self._hold_file):
            await asyncio.sleep(min(timeout_ms, 100) / 1000)
            return {}
        return await self._consumer.poll(timeout_ms=timeout_ms, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._consumer, name)


class HeldTopicBasedRemoteLogMetadataManager(TopicBasedRemoteLogMetadataManager):
    def configure(self, configs: Mapping[str, str]) -> None:
        super().configure(configs)
        delay_ms = int(configs.get("test.configure.delay.ms", 0))
        if delay_ms:
            time.sleep(delay_ms / 1000)  # a lower bound on the start-up, not a wait for anything

    def _new_consumer_task(self) -> ConsumerTask:
        task = super()._new_consumer_task()
        hold_file = self.configs.get("test.hold.file")
        if hold_file:
            task.consumer = _HeldConsumer(task.consumer, hold_file)
        return task


DELETE_HELD_RLMM = "tests.tiered.holds:DeleteHeldTopicBasedRemoteLogMetadataManager"


def delete_held_rlmm_settings(hold_file: os.PathLike | str, reached_file: os.PathLike | str) -> dict[str, str]:
    """Broker settings that load the manager whose DELETE_SEGMENT_STARTED writes wait while ``hold_file``
    exists; the first one held writes its segment's offsets to ``reached_file``."""
    return {"remote.log.metadata.manager.class.name": DELETE_HELD_RLMM,
            "remote.log.metadata.manager.class.path": str(ROOT),
            "rlmm.config.test.delete.hold.file": str(hold_file),
            "rlmm.config.test.delete.reached.file": str(reached_file)}


class DeleteHeldTopicBasedRemoteLogMetadataManager(TopicBasedRemoteLogMetadataManager):
    """The topic-based manager holding every DELETE_SEGMENT_STARTED event while the hold file exists: a
    compacted segment's replacement is COPY_SEGMENT_FINISHED and the segment it replaces not yet marked, for
    as long as the test needs (it kills the broker there, say)."""

    async def update_remote_log_segment_metadata(self, update) -> None:
        from tierlog.tiered.metadata import RemoteLogSegmentState

        hold = self.configs.get("test.delete.hold.file")
        if hold and update.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED and os.path.exists(hold):
            reached = self.configs.get("test.delete.reached.file")
            if reached and not os.path.exists(reached):
                Path(reached).write_text(str(update.segment_id))
            while os.path.exists(hold):
                await asyncio.sleep(0.05)
        await super().update_remote_log_segment_metadata(update)
