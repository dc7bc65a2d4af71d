"""Remote storage managers (KIP-405's RemoteStorageManager): the plugin contract in :mod:`.api`, the
built-in backends ``filesystem`` and ``objectstore`` (sharing :mod:`.base`, the object layout of
:mod:`.layout` and the transforms of :mod:`.transforms`), and :mod:`.faults`, a fault-injecting wrapper
for tests and drills."""

from tierlog.tiered.rsm.api import (
    BUILTIN_MANAGERS,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    create_remote_storage_manager,
    load_manager_class,
)

__all__ = [
    "BUILTIN_MANAGERS", "RemoteResourceNotFoundError", "RemoteStorageError", "RemoteStorageManager",
    "RetriableRemoteStorageError", "create_remote_storage_manager", "load_manager_class",
]
