"""The coordinators follow the leadership of their topics' partitions on this broker: the group coordinator
loads the ``__consumer_offsets`` partitions led here and unloads those no longer led (and forgets the offsets
of deleted topics), the transaction coordinator the same of ``__transaction_state`` (Kafka's onElection and
onResignation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tierlog.cluster.image import MetadataDelta, MetadataImage
from tierlog.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tierlog.coordinator.transaction_coordinator import TransactionCoordinator
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.server.replica_manager import ReplicaManager


def coordinator_leadership(coordinator: GroupCoordinator, txn: TransactionCoordinator | None,
                           rm: ReplicaManager) -> Callable[[MetadataDelta, MetadataImage], None]:
    """A metadata listener telling the group coordinator which topics were deleted (their committed offsets
    go) and which ``__consumer_offsets`` partitions this broker now leads (loaded) or no longer leads
    (unloaded), and the transaction coordinator the same of ``__transaction_state``, on the event loop even
    when the change came from another thread. Made on the event loop."""
    loop = asyncio.get_running_loop()

    def on_loop(fn, arg) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(arg)
        else:
            loop.call_soon_threadsafe(fn, arg)

    def follow_leadership(_=None) -> None:
        led = {p for (t, p), partition in rm.partitions.items() if t == OFFSETS_TOPIC and rm.leads(partition)}
        loaded = set(coordinator.loaded_partitions())
        for p in sorted(loaded - led):
            coordinator.unload(p)
        if led - loaded:
            coordinator.on_election(sorted(led - loaded))

    def follow_txn_leadership(_=None) -> None:
        # Kafka's onElection / onResignation of the transaction coordinator.
        led = {p for (t, p), partition in rm.partitions.items() if t == TXN_STATE_TOPIC and rm.leads(partition)}
        loaded = set(txn.loaded_partitions()) | txn.loading
        for p in sorted(loaded - led):
            txn.unload(p)
        if txn.active and led:  # a partition led at a newer epoch than it was loaded at is loaded again
            txn.on_election(sorted(led))

    def on_update(delta: MetadataDelta, image: MetadataImage) -> None:
        deleted = [t.name for t in delta.deleted]
        if deleted:
            on_loop(coordinator.on_topics_deleted, deleted)
        touched = [t for t in (*delta.created, *(t for t, _ in delta.partitions_added), *delta.partitions_changed)
                   if t.name == OFFSETS_TOPIC]
        if touched:
            on_loop(follow_leadership, None)
        if txn is not None and any(t.name == TXN_STATE_TOPIC for t in (
                *delta.created, *(t for t, _ in delta.partitions_added), *delta.partitions_changed)):
            on_loop(follow_txn_leadership, None)
    return on_update


__all__ = ["coordinator_leadership"]
