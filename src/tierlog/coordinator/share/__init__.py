"""Share groups (KIP-932), kept apart from the consumer groups of :mod:`tierlog.coordinator`:

- :mod:`.group` - membership: ShareGroupHeartbeat, ShareGroupDescribe, the simple assignor.
- :mod:`.share_partition` - one share-partition's delivery state on its leader: start and end offsets,
  in-flight records, acquisition locks, delivery counts.
- :mod:`.manager` - the share-partitions of this broker and :class:`ShareConfig`.
- :mod:`.sessions` - share sessions (ShareSessionCache).
- :mod:`.records` and :mod:`.state_store` - ``__share_group_state``, Kafka's share coordinator's records.
"""

from tierlog.coordinator.share.group import ShareGroupCoordinator
from tierlog.coordinator.share.manager import ShareConfig, SharePartitionManager
from tierlog.coordinator.share.records import SHARE_STATE_TOPIC
from tierlog.coordinator.share.sessions import ShareSessionCache
from tierlog.coordinator.share.share_partition import AcknowledgeType, RecordState, SharePartition
from tierlog.coordinator.share.state_store import ShareStateStore

__all__ = ["SHARE_STATE_TOPIC", "AcknowledgeType", "RecordState", "ShareConfig", "ShareGroupCoordinator",
           "SharePartition", "SharePartitionManager", "ShareSessionCache", "ShareStateStore"]
