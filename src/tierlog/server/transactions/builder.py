"""The broker's transactions, built once by the composition root: the transaction coordinator on
``__transaction_state``, its markers' way to the partitions' leaders, KIP-890's verification from this broker's
partitions, and the coordinator's APIs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tierlog.cluster import Controller
from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.features import TRANSACTION_VERSION
from tierlog.config import BrokerConfig
from tierlog.coordinator import GroupCoordinator
from tierlog.coordinator.transaction_coordinator import (
    TransactionConfig,
    TransactionCoordinator,
    TransactionStateStore,
)
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.errors import NotLeaderOrFollowerError
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.apis.transactions import (
    MARKER_REPLICATION_TIMEOUT_S,
    LocalMarkerWriter,
    TransactionCoordinatorApis,
)
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.transactions.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tierlog.server.transactions.offsets_topic_log import BrokerOffsetsTopicLog
from tierlog.server.transactions.txn_marker_channel import TransactionMarkerChannel


@dataclass(frozen=True)
class Transactions:
    coordinator: TransactionCoordinator
    marker_channel: TransactionMarkerChannel | None  # a cluster's: markers to the other brokers
    verification: AddPartitionsToTxnManager  # KIP-890 part 1's questions to the coordinators
    verification_enabled: Callable[[], bool]  # transaction.partition.verification.enable (dynamic)
    apis: TransactionCoordinatorApis


def build_transactions(node_id: int, cfg: BrokerConfig, controller: Controller, rm: ReplicaManager,
                       groups: GroupCoordinator, leads: Callable[[int], bool] | None,
                       inter_broker_channel: Callable[[], NetworkBrokerChannel] | None,
                       authorization: ApiAuthorization = ALLOW_ALL) -> Transactions:
    """The transaction coordinator on ``__transaction_state`` (this broker's log), its state writes waited
    for as acks=all; started once the broker is ready. On a single node its markers are written through the
    replica manager; in a cluster it coordinates the ids of the partitions it leads and its markers go to
    each partition's leader (:class:`TransactionMarkerChannel`, WriteTxnMarkers on the inter-broker
    listener, each user on connections of its own from ``inter_broker_channel``), producer ids coming from the
    cluster's ZooKeeper blocks. ``leads`` says which ``__transaction_state`` partitions this broker leads (None:
    all, a single node). ``authorization`` has the checks of the coordinator's APIs."""
    store = TransactionStateStore(BrokerOffsetsTopicLog(controller, rm), TransactionConfig.from_broker_config(cfg))

    async def replicated(partition: int, timeout_s: float) -> int:
        p = rm.partitions.get((TXN_STATE_TOPIC, partition))
        if p is None:
            return NotLeaderOrFollowerError.code
        codes = await rm.wait_for_acks([(TXN_STATE_TOPIC, partition, p.leader_epoch,
                                         p.log.log_end_offset - 1)], timeout_s)
        return codes[0]

    def coordinator_epoch(partition: int) -> int:
        p = rm.partitions.get((TXN_STATE_TOPIC, partition))
        return max(p.leader_epoch, 0) if p is not None else 0

    write_markers = LocalMarkerWriter(rm, controller, groups)
    marker_channel = None
    if inter_broker_channel is not None:
        # Connections of its own: a marker request waits for replication, controller pushes must not.
        write_markers = marker_channel = TransactionMarkerChannel(
            node_id, lambda: controller.image, write_markers, inter_broker_channel(),
            int(MARKER_REPLICATION_TIMEOUT_S * 1000) + 10000)
    txn = TransactionCoordinator(
        store.config, store, allocate_producer_id=controller.next_producer_id,
        write_markers=write_markers, replicated=replicated, coordinator_epoch=coordinator_epoch,
        transaction_version=lambda: controller.finalized_level(TRANSACTION_VERSION), leads=leads)
    apis = TransactionCoordinatorApis(txn, controller, groups.partition_for, authorization=authorization)
    # KIP-890 part 1's questions from this broker's partitions to the transaction coordinators: in process to
    # its own, in a cluster as AddPartitionsToTxn (verify only) to the others, on connections of their own.
    verification = AddPartitionsToTxnManager(
        node_id, rm, lambda: controller.image, txn.partition_for, txn.verify_partitions,
        inter_broker_channel() if inter_broker_channel is not None else None, cfg["request.timeout.ms"],
        local_add=txn.add_partitions_for_leader)
    return Transactions(txn, marker_channel, verification, _verification_enabled(controller), apis)


def _verification_enabled(controller: Controller) -> Callable[[], bool]:
    """Dynamic (a broker or cluster-wide default), asked on every transactional Produce: read again only when
    the dynamic broker configs change (a new mapping in the image, as effective_config's own cache)."""
    read: list = [None, True]

    def enabled() -> bool:
        dynamic = controller.image.broker_configs
        if read[0] is not dynamic:
            read[1] = bool(controller.effective_config["transaction.partition.verification.enable"])
            read[0] = dynamic
        return read[1]
    return enabled


__all__ = ["Transactions", "build_transactions"]
