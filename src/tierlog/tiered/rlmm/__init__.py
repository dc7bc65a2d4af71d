"""Remote log metadata managers (KIP-405's RemoteLogMetadataManager): the plugin contract in :mod:`.api`,
the topic-based manager over ``__remote_log_metadata`` (:mod:`.topic_based` with its consumer task,
cache, record serde, snapshots and partition mapping) and the in-process :mod:`.memory` manager."""

from tierlog.tiered.rlmm.api import (
    BUILTIN_METADATA_MANAGERS,
    RemoteLogMetadataManager,
    create_remote_log_metadata_manager,
)

__all__ = ["BUILTIN_METADATA_MANAGERS", "RemoteLogMetadataManager", "create_remote_log_metadata_manager"]
