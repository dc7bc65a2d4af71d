"""A cluster member's replication, built once by the composition root: the followers' fetchers, the ISR changes
to the controller, the replication throttles and the ISR metrics, handed to the replica manager's constructor
(a single node has none: ``None``)."""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.cluster import Controller
from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.config import BrokerConfig
from tierlog.metrics import MetricsRegistry
from tierlog.server.http.broker_metrics import IsrChangeMetrics
from tierlog.server.network.security import Security
from tierlog.server.quotas.replication_quota import ReplicationQuotaManager
from tierlog.server.replication.alter_partition import AlterPartitionManager
from tierlog.server.replication.replica_fetcher import ReplicaFetcherManager
from tierlog.tiered.remote_log_manager import RemoteLogManager


@dataclass(frozen=True)
class Replication:
    """What the replica manager drives in a cluster (Kafka's ReplicaManager collaborators of the same names)."""

    fetchers: ReplicaFetcherManager
    alter_partition: AlterPartitionManager
    leader_quota: ReplicationQuotaManager  # leader.replication.throttled.*
    isr_metrics: IsrChangeMetrics


def build_replication(node_id: int, cfg: BrokerConfig, controller: Controller, channel: NetworkBrokerChannel,
                      security: Security, remote_log_manager: RemoteLogManager | None,
                      metrics: MetricsRegistry) -> Replication:
    """The replica manager follows the partitions it does not lead (replica fetchers on the inter-broker
    listener, through the remote tier when a follower's state is below its leader's local log: KIP-405) and
    asks the controller for the ISR changes of those it leads."""
    # Replication throttles (a reassignment's copy): the rates are dynamic broker configs, the replicas topic
    # configs.
    quota_args = (lambda: controller.effective_config, lambda: controller.image.topics)
    fetchers = ReplicaFetcherManager(node_id, cfg.inter_broker_listener.name, lambda: controller.image.brokers,
                                     lambda: controller.effective_config, ssl_context=security.inter_broker_ssl,
                                     sasl=security.inter_broker_sasl,
                                     quota=ReplicationQuotaManager(node_id, "follower", *quota_args),
                                     remote_log_manager=remote_log_manager)
    alter_partition = AlterPartitionManager(node_id, channel, lambda: controller.image.controller_id, lambda: -1,
                                            cfg["controller.socket.timeout.ms"])
    return Replication(fetchers, alter_partition, ReplicationQuotaManager(node_id, "leader", *quota_args),
                       IsrChangeMetrics(metrics))


__all__ = ["Replication", "build_replication"]
