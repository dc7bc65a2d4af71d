"""The RemoteLogMetadataManager plugin contract (KIP-405) and its factory.

The broker is one asyncio event loop, and so are its metadata manager's clients: writes (``add``,
``update``, partition delete markers) are coroutines that complete once the event is visible in
this broker's own cache (read your writes); lookups are plain methods over that cache, called on
the loop. Lookups raise ``ReplicaNotAvailableError`` (9, retriable) while a partition's metadata is
still being loaded, and ``RemoteResourceNotFoundError`` for a partition the manager does not follow.

Kafka's ``BrokerReadyCallback`` (KIP-1197) is the optional ``on_broker_ready`` coroutine: managers
that need a serving broker start their clients there, not in ``configure``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Mapping

from tierlog.tiered.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.plugins import load_plugin_class

log = logging.getLogger(__name__)


def check_add(md: RemoteLogSegmentMetadata) -> None:
    if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise ValueError(f"Given remoteLogSegmentMetadata {md.segment_id} should have state "
                         f"COPY_SEGMENT_STARTED but it contains state {md.state.name}")


def check_update(update: RemoteLogSegmentMetadataUpdate) -> None:
    if update.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise ValueError(f"Given remoteLogSegmentMetadataUpdate {update.segment_id} should not have the state "
                         f"COPY_SEGMENT_STARTED")


class RemoteLogMetadataManager(abc.ABC):
    """Kafka's ``RemoteLogMetadataManager``: where remote segments and their states are recorded."""

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional
        """Read settings (``rlmm.config.*`` stripped, plus ``broker.id``, ``log.dir``, ``cluster.id`` and
        the ``remote.log.metadata.common.client.bootstrap.servers`` of the broker's own listener). Must
        not touch the network."""

    async def on_broker_ready(self) -> None:  # noqa: B027 - optional (KIP-1197's BrokerReadyCallback)
        """Called once every listener of the broker accepts requests."""

    def set_fatal_error_handler(self, handler: Callable[[str], None]) -> None:  # noqa: B027 - optional
        """Install ``handler(reason)``, which a manager calls once when it can never work (the broker then
        stops and exits non-zero, as Kafka does when its metadata manager cannot initialize). Managers
        that cannot fail that way ignore it."""

    # -- writes --

    @abc.abstractmethod
    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        """Record a COPY_SEGMENT_STARTED segment (any other state is a ValueError)."""

    @abc.abstractmethod
    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Record a state change (COPY_SEGMENT_STARTED is a ValueError)."""

    @abc.abstractmethod
    async def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        """Record a partition-level delete marker."""

    # -- lookups --

    @abc.abstractmethod
    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` in ``leader_epoch``, if any."""

    @abc.abstractmethod
    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """Highest offset copied (COPY_SEGMENT_FINISHED) for ``leader_epoch``."""

    @abc.abstractmethod
    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments not yet DELETE_SEGMENT_FINISHED: all of them (any order), or those holding
        ``leader_epoch`` sorted by start offset."""

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        return sum(md.segment_size_in_bytes for md in self.list_remote_log_segments(tp, leader_epoch))

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """Whether ``tp``'s metadata has been caught up (KAFKA-17980); tasks skip a partition until then."""
        return True

    def not_ready_reason(self) -> str | None:
        """None when the manager works (partitions may still be loading: see ``is_ready``); else why it
        does not yet or no longer (the broker's /ready answer)."""
        return None

    # -- partitions followed --

    async def catch_up(self, tp: TopicIdPartition) -> None:  # noqa: B027 - optional
        """Return once every event written so far for ``tp`` is applied here: a new leader calls it before
        its first copy, so the previous leader's last uploads count. Managers that apply writes at once
        (in memory) have nothing to do."""

    @abc.abstractmethod
    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        """Start following these partitions' metadata."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop following these partitions (deleted, moved away, remote storage turned off)."""

    async def close(self) -> None:  # noqa: B027 - optional
        """Release clients and caches."""


# ---------------------------------------------------------------------------------------------- factory

BUILTIN_METADATA_MANAGERS: Mapping[str, str] = {
    "topic": "tierlog.tiered.rlmm.topic_based:TopicBasedRemoteLogMetadataManager",
    "memory": "tierlog.tiered.rlmm.memory:InMemoryRemoteLogMetadataManager",
}


def create_remote_log_metadata_manager(class_name: str, configs: Mapping[str, str],
                                       class_path: str | None = None) -> RemoteLogMetadataManager:
    """Instantiate and configure the manager named by ``remote.log.metadata.manager.class.name``."""
    cls = load_plugin_class(class_name, BUILTIN_METADATA_MANAGERS, RemoteLogMetadataManager, class_path)
    manager = cls()
    manager.configure(configs)
    return manager
