"""Consumer groups (classic protocol) and committed offsets, stored in ``__consumer_offsets``.

- :mod:`.group` - a classic group's state machine and members (Kafka's ``ClassicGroup``).
- :mod:`.coordinator` - :class:`GroupCoordinator`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  offsets, listing, describing and deleting groups; timers; loading state back on start.
- :mod:`.records` - Kafka's ``__consumer_offsets`` key/value formats and the group -> partition hash.
- :mod:`.storage` - the topic itself (:class:`OffsetsTopicStore`) and an in-memory double.
- :mod:`.timer` - keyed timers driven by the event loop.

The broker builds one coordinator (``tierlog.server.apis.groups``) and this node coordinates every
group: with a single broker every ``__consumer_offsets`` partition is led here.
"""

from tierlog.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, OffsetAndMetadata, map_append_error
from tierlog.coordinator.group import ClassicGroup, GroupState, Member
from tierlog.coordinator.records import OFFSETS_TOPIC, partition_for
from tierlog.coordinator.storage import MemoryStore, OffsetsTopicStore
from tierlog.coordinator.timer import KeyedTimer

__all__ = [
    "OFFSETS_TOPIC",
    "ClassicGroup",
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupState",
    "KeyedTimer",
    "Member",
    "MemoryStore",
    "OffsetAndMetadata",
    "OffsetsTopicStore",
    "map_append_error",
    "partition_for",
]
