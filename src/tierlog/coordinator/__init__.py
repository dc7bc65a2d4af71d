"""Consumer groups (the classic protocol and KIP-848's consumer protocol) and committed offsets, stored in
``__consumer_offsets``.

Split as Kafka's new group coordinator is, so that each ``__consumer_offsets`` partition's state
can move with the partition's leadership:

- :mod:`.service` - :class:`GroupCoordinator` (Kafka's ``GroupCoordinatorService``): routes each
  group to its partition's shard; :meth:`~GroupCoordinator.load` / :meth:`~GroupCoordinator.unload`
  a partition; lifecycle and timers.
- :mod:`.shard` - :class:`GroupCoordinatorShard`: one partition's managers, timers and writer;
  replays the partition's records into both managers; DeleteGroups and expiration.
- :mod:`.group_metadata_manager` - :class:`GroupMetadataManager`: classic group membership
  (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalance timers, static members), ListGroups,
  DescribeGroups.
- :mod:`.offset_metadata_manager` - :class:`OffsetMetadataManager`: committed offsets (OffsetCommit,
  OffsetFetch, OffsetDelete, retention, deleted topics).
- :mod:`.group` - a classic group's state machine and members (Kafka's ``ClassicGroup``).
- :mod:`.consumer_group_manager` - :class:`ConsumerGroupManager`: KIP-848 consumer groups
  (ConsumerGroupHeartbeat, ConsumerGroupDescribe, their records); :mod:`.consumer_group` - the group, its
  members and the reconciliation; :mod:`.assignors` - the uniform and range server assignors;
  :mod:`.consumer_group_records` - their ``__consumer_offsets`` records; :mod:`.regex` - RE2 subscriptions.
- :mod:`.records` - Kafka's ``__consumer_offsets`` key/value formats and the group -> partition hash.
- :mod:`.storage` - the topic itself (:class:`OffsetsTopicStore` over an :class:`OffsetsTopicLog`
  the broker provides) and an in-memory double.
- :mod:`.config` - :class:`CoordinatorConfig`; :mod:`.timer` - keyed timers driven by the event loop.

With a single broker every ``__consumer_offsets`` partition is led here, so the coordinator loads
them all when the broker is ready.
"""

from tierlog.coordinator.config import CoordinatorConfig
from tierlog.coordinator.group import ClassicGroup, GroupState, Member
from tierlog.coordinator.group_metadata_manager import GroupMetadataManager, map_append_error
from tierlog.coordinator.offset_metadata_manager import OffsetAndMetadata, OffsetMetadataManager
from tierlog.coordinator.records import OFFSETS_TOPIC, partition_for
from tierlog.coordinator.service import GroupCoordinator
from tierlog.coordinator.shard import GroupCoordinatorShard
from tierlog.coordinator.storage import MemoryStore, OffsetsTopicLog, OffsetsTopicStore, RecordStore
from tierlog.coordinator.timer import KeyedTimer, ScopedTimer

__all__ = [
    "OFFSETS_TOPIC",
    "ClassicGroup",
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupCoordinatorShard",
    "GroupMetadataManager",
    "GroupState",
    "KeyedTimer",
    "Member",
    "MemoryStore",
    "OffsetAndMetadata",
    "OffsetMetadataManager",
    "OffsetsTopicLog",
    "OffsetsTopicStore",
    "RecordStore",
    "ScopedTimer",
    "map_append_error",
    "partition_for",
]
