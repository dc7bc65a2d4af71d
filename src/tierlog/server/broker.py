"""The broker: the composition root that builds every service, start-up in explicit phases, and a clean
shutdown.

Every service is constructed here, once, with the typed collaborators it uses; no service or request
handler receives the broker itself, and a feature that is off is an explicit ``None`` (tiered storage
without ``remote.log.storage.system.enable``). Phases (KIP-1197 builds on them): storage recovery,
metadata (cluster id, controller, logs for every partition), listeners, ready. Components that need a
serving broker (the topic-based remote log metadata manager, the group coordinator) are started once
every listener accepts requests.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, LocalBrokerChannel, ensure_meta_properties
from tierlog.cluster.channel import DisableRemoteTopicRequest, NetworkBrokerChannel
from tierlog.cluster.image import MetadataDelta, MetadataImage
from tierlog.cluster.store import existing_cluster_id
from tierlog.cluster.zk_controller import ZkController
from tierlog.cluster.zookeeper import ZkClient, broker_registration
from tierlog.config import BrokerConfig
from tierlog.config.definitions import RLMM_PREFIX
from tierlog.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, OffsetsTopicStore
from tierlog.coordinator.transaction_coordinator import (
    TransactionConfig,
    TransactionCoordinator,
    TransactionStateStore,
)
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.errors import (
    InvalidConfigError,
    NotControllerError,
    NotLeaderOrFollowerError,
    StaleControllerEpochError,
    StartupError,
)
from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import HandlerRegistry
from tierlog.protocol.internal import InternalApi
from tierlog.security import SSL_SETTINGS, server_context
from tierlog.security.scram import ScramCredential
from tierlog.server.apis.acls import AclApis
from tierlog.server.apis.admin import AdminApis
from tierlog.server.apis.authorization import ApiAuthorization
from tierlog.server.apis.configs import ConfigApis
from tierlog.server.apis.fetch import FetchApis
from tierlog.server.apis.forwarding import ForwardingApis
from tierlog.server.apis.groups import GroupApis
from tierlog.server.apis.leadership import LeadershipApis
from tierlog.server.apis.log_dirs import LogDirApis
from tierlog.server.apis.metadata import MetadataApis
from tierlog.server.apis.offsets import OffsetApis
from tierlog.server.apis.produce import ProduceApis
from tierlog.server.apis.producers import ProducerApis
from tierlog.server.apis.quotas import ClientQuotaApis
from tierlog.server.apis.reassignment import ReassignmentApis
from tierlog.server.apis.scram import ScramApis
from tierlog.server.apis.transactions import (
    MARKER_REPLICATION_TIMEOUT_S,
    LocalMarkerWriter,
    TransactionCoordinatorApis,
    TransactionMarkerApis,
)
from tierlog.server.authorizer import Authorizer
from tierlog.server.errors import error_response
from tierlog.server.http.broker_metrics import BrokerStateCollector, BrokerTopicMetrics, IsrChangeMetrics
from tierlog.server.http.cleaner_status import cleaner_routes
from tierlog.server.http.http_endpoint import HttpEndpoint
from tierlog.server.http.tier_status import tier_routes
from tierlog.server.network.listener_security import (
    dynamic_config_check,
    inter_broker_client_context,
    listener_security,
)
from tierlog.server.network.listeners import BoundListener, bind_failure
from tierlog.server.network.sasl_authenticator import SaslApis, inter_broker_credentials, jaas_config, sasl_listeners
from tierlog.server.network.socket_server import SocketServer
from tierlog.server.quotas.client_quota import ClientQuotaMetrics, ClientQuotas
from tierlog.server.quotas.replication_quota import ReplicationQuotaManager
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.replication.alter_partition import AlterPartitionManager
from tierlog.server.replication.replica_fetcher import ReplicaFetcherManager
from tierlog.server.transactions.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tierlog.server.transactions.offsets_topic_log import BrokerOffsetsTopicLog
from tierlog.server.transactions.txn_marker_channel import TransactionMarkerChannel
from tierlog.storage import LogDirFailureChannel, LogManager
from tierlog.storage.cleaner import CleanerConfig
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.rlmm import create_remote_log_metadata_manager
from tierlog.tiered.rlmm.consumer_task import METADATA_TOPIC
from tierlog.tiered.rsm import create_remote_storage_manager
from tierlog.tiered.store_request_metrics import StoreRequestsCollector
from tierlog.tiered.tiering_metrics import TieringStateCollector

log = logging.getLogger(__name__)

HOUSEKEEPING_TICK_S = 0.5


class BrokerState(enum.Enum):
    NOT_STARTED = "not started"
    RECOVERING_STORAGE = "recovering storage"
    LOADING_METADATA = "loading metadata"
    STARTING_LISTENERS = "starting listeners"
    READY = "ready"
    SHUTTING_DOWN = "shutting down"
    STOPPED = "stopped"


#: The phases in order; a shutdown may begin from any state (a start that failed half-way is shut down too).
_BROKER_NEXT: dict[BrokerState, frozenset[BrokerState]] = {
    BrokerState.NOT_STARTED: frozenset({BrokerState.RECOVERING_STORAGE}),
    BrokerState.RECOVERING_STORAGE: frozenset({BrokerState.LOADING_METADATA}),
    BrokerState.LOADING_METADATA: frozenset({BrokerState.STARTING_LISTENERS}),
    BrokerState.STARTING_LISTENERS: frozenset({BrokerState.READY}),
    BrokerState.READY: frozenset(),
    BrokerState.SHUTTING_DOWN: frozenset({BrokerState.STOPPED}),
    BrokerState.STOPPED: frozenset(),
}


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id: int = config["node.id"]
        self.state = BrokerState.NOT_STARTED
        self.fatal_error: str | None = None
        self.metrics = MetricsRegistry()
        self.registry = HandlerRegistry()
        # controller -> broker requests: a function call on one node, the network in a cluster
        self.channel: LocalBrokerChannel | NetworkBrokerChannel = LocalBrokerChannel()
        self.zk: ZkClient | None = None
        # The services, built by start():
        self.cluster_id: str | None = None
        self.controller: Controller | None = None
        self.log_manager: LogManager | None = None
        self.socket_server: SocketServer | None = None
        self.listeners: list[BoundListener] = []
        self.remote_log_manager: RemoteLogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.txn_marker_channel: TransactionMarkerChannel | None = None
        self.txn_verification: AddPartitionsToTxnManager | None = None
        self.http_endpoint: HttpEndpoint | None = None
        self.inter_broker_ssl: ssl.SSLContext | None = None  # a cluster whose inter-broker listener speaks TLS
        self.inter_broker_sasl = None  # ... or authenticates with SASL (SaslCredentials)
        self._on_ready: list[Callable[[], Awaitable[None]]] = []
        self._housekeeping: asyncio.Task | None = None
        self._stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()

    def _enter(self, state: BrokerState) -> None:
        if state is not BrokerState.SHUTTING_DOWN and state not in _BROKER_NEXT[self.state]:
            raise RuntimeError(f"broker state cannot go from {self.state.value} to {state.value}")
        self.state = state

    # ------------------------------------------------------------------ start-up

    async def start(self) -> None:
        t0 = time.monotonic()
        cfg = self.config
        log_dirs = cfg.log_dirs
        self._enter(BrokerState.RECOVERING_STORAGE)
        advertised = cfg.advertised_listeners or cfg.listeners
        first = advertised[0]
        me = BrokerImage(self.node_id, first.host, first.port, cfg["broker.rack"])
        if cfg.zookeeper_mode:
            controller = self.controller = await self._join_zookeeper(me)
        else:
            self.cluster_id = ensure_meta_properties(log_dirs, self.node_id, None)
            controller = self.controller = Controller(cfg, FileMetadataStore(log_dirs[0]), me, self.cluster_id)
        failures = self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_manager = LogManager(
            log_dirs, controller.log_config,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
            failure_channel=failures, metrics=self.metrics, cleaner_config=CleanerConfig.from_broker_config(cfg),
            cleaner_config_source=lambda: CleanerConfig.from_broker_config(controller.effective_config))

        self._enter(BrokerState.LOADING_METADATA)
        # Listeners are bound now (their ports known) but accept connections only once the broker is
        # ready, as Kafka's acceptors do.
        self.socket_server = SocketServer(
            self.registry, max_frame_bytes=cfg["socket.request.max.bytes"],
            idle_timeout_ms=cfg["connections.max.idle.ms"], error_response=error_response,
            config=lambda: controller.effective_config, queued_max_request_bytes=cfg["queued.max.request.bytes"],
            metrics=self.metrics)
        self.listeners = await self.socket_server.bind(cfg.listeners)
        try:  # SSL listeners: their keystores are read now, so a broken one fails the start with its reason
            self.socket_server.tls = listener_security(cfg.listeners, lambda: controller.effective_config)
            controller.dynamic_config_check = dynamic_config_check(self.socket_server.tls)
            self.socket_server.sasl = sasl_listeners(cfg.listeners, lambda: controller.effective_config,
                                                     self._scram_credential)
            self.inter_broker_ssl = inter_broker_client_context(cfg) if controller.clustered else None
            self.inter_broker_sasl = inter_broker_credentials(cfg) if controller.clustered else None
        except InvalidConfigError as e:
            raise StartupError(e.message) from None
        self._advertise_bound()  # listeners with port 0 picked a free one; every listener's endpoint
        if isinstance(controller, ZkController):
            controller.me = self._zk_broker_image(controller.me)
            self.channel = NetworkBrokerChannel(self.node_id, cfg.inter_broker_listener.name,
                                                lambda: controller.image.brokers, cfg["controller.socket.timeout.ms"],
                                                self.inter_broker_ssl, self.inter_broker_sasl)
            await controller.start(self.channel)  # the cluster as ZooKeeper has it
        if cfg["remote.log.storage.system.enable"]:
            self.remote_log_manager = self._build_tiered_storage()
            if self.zk is not None:  # a leader whose session ended publishes no upload and deletes nothing
                self.remote_log_manager.leader_session = self.zk.live_session
        # Storage opens after the image is known so each partition gets its topic's settings.
        self.log_manager.startup()
        self.log_manager.start_cleaner()
        if not controller.clustered:
            controller.elect_leaders()
        topic_metrics = BrokerTopicMetrics(self.metrics)
        rm = self.replica_manager = ReplicaManager(self.node_id, self.log_manager, controller,
                                                   self.remote_log_manager, lambda: controller.effective_config,
                                                   topic_metrics)
        self._register_state_metrics(rm)
        request_metrics = self.socket_server.request_metrics
        failures.add_listener(rm.handle_log_dir_failure)
        if isinstance(controller, ZkController):
            self._attach_replication(controller, rm)
            controller.local_offline_replicas = rm.offline_replicas
            failures.add_listener(lambda _log_dir: controller.report_log_dir_failure())
        rm.load(controller.image)
        controller.add_listener(rm.on_metadata_update)
        offsets_store = OffsetsTopicStore.from_broker_config(BrokerOffsetsTopicLog(controller, rm), cfg)
        coordinator = self.group_coordinator = GroupCoordinator(CoordinatorConfig.from_broker_config(cfg),
                                                                offsets_store)
        if controller.clustered:
            coordinator.leads = lambda p: ((OFFSETS_TOPIC, p) in rm.partitions
                                           and rm.leads(rm.partitions[OFFSETS_TOPIC, p]))
        self._on_ready.append(coordinator.start)
        txn_apis = self._build_transaction_coordinator(cfg, controller, rm, coordinator)
        controller.add_listener(self._metadata_changes_to(coordinator, self.transaction_coordinator, rm))
        quotas = self.client_quotas = ClientQuotas(cfg["quota.window.num"], cfg["quota.window.size.seconds"],
                                                   metrics=ClientQuotaMetrics(self.metrics))
        quotas.update(controller.image.client_quotas)
        controller.add_listener(lambda _delta, image: quotas.update(image.client_quotas))
        self.socket_server.client_quotas = quotas
        produce_apis = ProduceApis(rm, controller, request_metrics)
        produce_apis.transactions = txn_apis
        produce_apis.client_quotas = quotas
        fetch_apis = FetchApis(rm, controller, request_metrics, topic_metrics)
        fetch_apis.client_quotas = quotas

        # Dynamic (a broker or cluster-wide default), asked on every transactional Produce: read again only
        # when the dynamic broker configs change (a new mapping in the image, as effective_config's own cache).
        verification_read: list = [None, True]

        def verification_enabled() -> bool:
            dynamic = controller.image.broker_configs
            if verification_read[0] is not dynamic:
                verification_read[1] = bool(controller.effective_config["transaction.partition.verification.enable"])
                verification_read[0] = dynamic
            return verification_read[1]

        rm.add_partitions_to_txn_manager = self._build_transaction_verification(cfg, controller, rm)
        rm.transaction_verification_enabled = verification_enabled
        group_apis = GroupApis(coordinator, controller, self.node_id,
                               rm.offsets_replicated if controller.clustered else None)
        group_apis.transaction_coordinator = self.transaction_coordinator
        group_apis.replica_manager = rm
        authorizer = self._build_authorizer(cfg, controller)
        metadata_apis = MetadataApis(self.registry, controller, self.node_id)
        for checked in (metadata_apis, produce_apis, fetch_apis):  # their topic checks are inline (hot paths)
            checked.authorizer = authorizer
        authorization = ApiAuthorization(authorizer, rm.topic_name)  # each handler asks its API's check
        for family in (metadata_apis, produce_apis, fetch_apis, OffsetApis(rm, controller),
                       AclApis(controller, authorizer),
                       AdminApis(controller, rm), LeadershipApis(controller),
                       ConfigApis(controller, self.node_id), ClientQuotaApis(controller),
                       group_apis, LogDirApis(self.log_manager), ReassignmentApis(controller),
                       TransactionMarkerApis(rm, coordinator), ProducerApis(controller, rm), txn_apis,
                       SaslApis(), ScramApis(controller)):
            if hasattr(family, "authorization"):  # the families whose APIs are authorized
                family.authorization = authorization
            family.register(self.registry)
        if isinstance(controller, ZkController):
            ForwardingApis(controller, self.channel, cfg["controller.socket.timeout.ms"],
                           authorizer).register(self.registry)
            self.socket_server.internal_handlers = self._inter_broker_handlers(controller, rm)
            self.socket_server.inter_broker_listener = cfg.inter_broker_listener.name

        self._enter(BrokerState.STARTING_LISTENERS)
        await self.socket_server.start_serving()
        if cfg["metrics.port"] is not None:
            await self._start_http_endpoint()
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        if isinstance(controller, ZkController):
            await self._register_in_zookeeper(controller)
        else:
            self.channel.register(self.node_id, rm.disable_remote_topic)
            controller.start_disablements(self.channel)
        self._enter(BrokerState.READY)
        log.info("Broker %d ready in %.0f ms on %s", self.node_id, (time.monotonic() - t0) * 1000,
                 ", ".join(map(str, self.listeners)))
        for on_ready in self._on_ready:
            try:
                await on_ready()
            except Exception:  # noqa: BLE001 - KIP-1197: a failing callback does not fail start-up
                log.exception("Start-up of %s once the broker is ready failed", getattr(on_ready, "__qualname__", ""))

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's SCRAM credential as the cluster metadata has it now (AlterUserScramCredentials)."""
        text = self.controller.image.user_scram.get(user, {}).get(mechanism) if self.controller else None
        return ScramCredential.from_text(text) if text else None

    def _build_transaction_coordinator(self, cfg, controller: Controller, rm: ReplicaManager,
                                       groups: GroupCoordinator) -> TransactionCoordinatorApis:
        """The transaction coordinator on ``__transaction_state`` (this broker's log), its state writes waited
        for as acks=all; started once the broker is ready. On a single node its markers are written through the
        replica manager; in a cluster it coordinates the ids of the partitions it leads and its markers go to
        each partition's leader (:class:`TransactionMarkerChannel`, WriteTxnMarkers on the inter-broker
        listener), producer ids coming from the cluster's ZooKeeper blocks."""
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
        if controller.clustered:
            # Connections of its own: a marker request waits for replication, controller pushes must not.
            channel = NetworkBrokerChannel(self.node_id, cfg.inter_broker_listener.name,
                                           lambda: controller.image.brokers, cfg["controller.socket.timeout.ms"],
                                           self.inter_broker_ssl, self.inter_broker_sasl)
            write_markers = self.txn_marker_channel = TransactionMarkerChannel(
                self.node_id, lambda: controller.image, write_markers, channel,
                int(MARKER_REPLICATION_TIMEOUT_S * 1000) + 10000)
        txn = self.transaction_coordinator = TransactionCoordinator(
            store.config, store, allocate_producer_id=controller.next_producer_id,
            write_markers=write_markers, replicated=replicated, coordinator_epoch=coordinator_epoch,
            transaction_version=lambda: cfg["transaction.version"])
        if controller.clustered:
            txn.leads = lambda p: ((TXN_STATE_TOPIC, p) in rm.partitions
                                   and rm.leads(rm.partitions[TXN_STATE_TOPIC, p]))
        self._on_ready.append(txn.start)
        return TransactionCoordinatorApis(txn, controller, groups.partition_for)

    def _build_transaction_verification(self, cfg, controller: Controller,
                                        rm: ReplicaManager) -> AddPartitionsToTxnManager:
        """KIP-890 part 1's questions from this broker's partitions to the transaction coordinators: in process
        to its own, in a cluster as AddPartitionsToTxn (verify only) to the others, on connections of their
        own."""
        txn = self.transaction_coordinator
        channel = None
        if controller.clustered:
            channel = NetworkBrokerChannel(self.node_id, cfg.inter_broker_listener.name,
                                           lambda: controller.image.brokers, cfg["controller.socket.timeout.ms"],
                                           self.inter_broker_ssl, self.inter_broker_sasl)
        self.txn_verification = AddPartitionsToTxnManager(
            self.node_id, rm, lambda: controller.image, txn.partition_for, txn.verify_partitions, channel,
            cfg["request.timeout.ms"], local_add=txn.add_partitions_for_leader)
        return self.txn_verification

    def _attach_replication(self, controller: ZkController, rm: ReplicaManager) -> None:
        """In a cluster, the replica manager follows the partitions it does not lead (replica fetchers on the
        inter-broker listener) and asks the controller for the ISR changes of those it leads."""
        cfg = self.config
        rm.fetchers = ReplicaFetcherManager(self.node_id, cfg.inter_broker_listener.name,
                                            lambda: controller.image.brokers, lambda: controller.effective_config,
                                            rm.follower_appended)
        rm.fetchers.ssl_context = self.inter_broker_ssl
        rm.fetchers.sasl = self.inter_broker_sasl
        rm.fetchers.remote_log_manager = self.remote_log_manager  # KIP-405's follower path
        rm.alter_partition = AlterPartitionManager(
            self.node_id, self.channel, lambda: controller.image.controller_id, lambda: -1, rm.isr_updated,
            rm.isr_update_failed, cfg["controller.socket.timeout.ms"])
        rm.alter_partition.start()
        rm.isr_metrics = IsrChangeMetrics(self.metrics)
        rm.start_replication()
        # Replication throttles (a reassignment's copy): the rates are dynamic broker configs, the replicas
        # topic configs.
        quota_args = (lambda: controller.effective_config, lambda: controller.image.topics)
        rm.leader_quota = ReplicationQuotaManager(self.node_id, "leader", *quota_args)
        rm.fetchers.quota = ReplicationQuotaManager(self.node_id, "follower", *quota_args)

    @staticmethod
    def _build_authorizer(cfg, controller) -> Authorizer | None:
        """Kafka's ACL authorizer when authorizer.class.name names it; None: no authorization at all."""
        if not cfg["authorizer.class.name"]:
            return None
        log.info("Authorization on (%s), super users: %s", cfg["authorizer.class.name"], cfg["super.users"] or "none")
        return Authorizer(lambda: controller.image.acls, cfg["super.users"], cfg["allow.everyone.if.no.acl.found"])

    def _register_state_metrics(self, rm: ReplicaManager) -> None:
        """The figures computed when scraped: partitions and logs, the metadata manager's readiness, and the
        process (CPU seconds, resident memory, open descriptors; Python's garbage collector and version)."""
        rlm = self.remote_log_manager

        def rlmm_ready() -> bool | None:  # the same rule as /ready's
            return None if rlm is None else rlm.not_ready_reason() is None

        self.metrics.register(BrokerStateCollector(self.node_id, lambda: rm.partitions.values(), rlmm_ready))
        if rlm is not None:
            self.metrics.register(TieringStateCollector(rlm))
            self.metrics.register(StoreRequestsCollector(rlm.rsm))
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.metrics.registry)

    async def _start_http_endpoint(self) -> None:
        """Metrics, the orchestrators' probes (/health, /ready) and the tiered storage status on
        ``metrics.host``:``metrics.port`` (read-only unless ``metrics.admin.enable``)."""
        cfg = self.config
        token = cfg["metrics.admin.token"]
        def serving() -> str | None:
            return None if self.state is BrokerState.READY else self.state.value

        routes = {**tier_routes(serving, self.controller, self.remote_log_manager, self.log_manager, self.node_id),
                  **cleaner_routes(serving, self.log_manager, self.node_id)}
        self.http_endpoint = HttpEndpoint(self.metrics, routes, ready=self.not_ready_reason,
                                          admin_enabled=cfg["metrics.admin.enable"],
                                          admin_token=token.value if token is not None else None)
        host = cfg["metrics.host"]
        tls = None
        if cfg["metrics.ssl.enable"]:  # HTTPS with the broker-wide keystore; no client certificates
            try:
                tls = server_context({**{n: cfg[n] for n in SSL_SETTINGS}, "ssl.client.auth": "none"},
                                     where="metrics.ssl.enable")
            except InvalidConfigError as e:
                raise StartupError(e.message) from None
        try:
            port = await self.http_endpoint.start(host, cfg["metrics.port"], ssl_context=tls)
        except OSError as e:
            raise StartupError(bind_failure(host, cfg["metrics.port"], e, setting="metrics.port")) from e
        log.info("Metrics on %s://%s:%d/metrics", "https" if tls else "http", host, port)
        if cfg["metrics.admin.enable"] and not tls and host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("metrics.admin.enable=true on %s, which is not a loopback address: the admin token "
                        "travels in clear text (plain HTTP); keep the port on a trusted network", host)

    def not_ready_reason(self) -> str | None:
        """None when the broker serves requests and, with tiered storage on, its remote log metadata is
        loaded; else why not (the endpoint's /ready)."""
        if self.fatal_error is not None:
            return f"the broker is stopping: {self.fatal_error}"
        if self.state is not BrokerState.READY:
            return f"the broker is {self.state.value}"
        if self.remote_log_manager is not None:
            return self.remote_log_manager.not_ready_reason()
        return None

    def _build_tiered_storage(self) -> RemoteLogManager:
        """The storage plugin, the metadata manager (configured now, started once the broker is ready,
        KIP-1197) and the remote log manager driving both, with its reader."""
        cfg = self.config
        controller = self.controller
        rsm = create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"],
                                            {**cfg.rsm_config(), "broker.id": str(self.node_id),
                                             "cluster.id": self.cluster_id or ""},
                                            cfg["remote.log.storage.manager.class.path"])
        listener = cfg.remote_log_metadata_listener
        bound = next((b for b in self.listeners if b.name == listener.name), self.listeners[0])
        host = bound.host if bound.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        rlmm_configs = {
            "remote.log.metadata.common.client.bootstrap.servers": f"{host}:{bound.port}",
            "remote.log.metadata.common.client.security.protocol": bound.security_protocol,
            **_client_ssl_settings(cfg, bound),
            **_client_sasl_settings(cfg, bound),
            **cfg.rlmm_config(),
            "broker.id": str(self.node_id), "log.dir": cfg.log_dirs[0], "cluster.id": self.cluster_id or "",
        }
        if cfg["remote.log.metadata.manager.class.name"] == "topic":
            # Kafka's default factor of 3 can never be met on one node: the controller's rule caps it there.
            rf = "remote.log.metadata.topic.replication.factor"
            rlmm_configs[rf] = str(controller.internal_topic_replication_factor(
                METADATA_TOPIC, cfg.rlmm_prefix + rf, cfg[RLMM_PREFIX + rf]))
        rlmm = create_remote_log_metadata_manager(cfg["remote.log.metadata.manager.class.name"], rlmm_configs,
                                                  cfg["remote.log.metadata.manager.class.path"])
        rlmm.set_fatal_error_handler(self.fail)
        self._on_ready.append(rlmm.on_broker_ready)
        log.info("Tiered storage on: %s remote storage, %s metadata manager", type(rsm).__name__,
                 type(rlmm).__name__)
        cleaner = self.log_manager.cleaner
        return build_remote_log_manager(cfg, self.node_id, rsm, rlmm, cfg.log_dirs[0], self.metrics,
                                        lambda: controller.effective_config,
                                        lambda topic, partition: cleaner.cleaned_up_to((topic, partition)))

    # ------------------------------------------------------------------ ZooKeeper mode (a cluster)

    async def _join_zookeeper(self, me: BrokerImage) -> ZkController:
        """Connect to ZooKeeper, agree on the cluster id with the log dirs (``meta.properties``), and make the
        broker's view of the cluster."""
        cfg = self.config
        zk = self.zk = ZkClient(cfg["zookeeper.connect"], cfg["zookeeper.session.timeout.ms"],
                                cfg["zookeeper.connection.timeout.ms"])
        await zk.call(zk.start)
        proposed = existing_cluster_id(cfg.log_dirs) or uuid_to_str(new_kafka_uuid())
        cluster_id = await zk.call(zk.get_or_create_cluster_id, proposed)
        self.cluster_id = ensure_meta_properties(cfg.log_dirs, self.node_id, cluster_id)
        log.info("Joined the cluster %s through ZooKeeper at %s", cluster_id, cfg["zookeeper.connect"])
        return ZkController(cfg, zk, me, cluster_id)

    def _zk_broker_image(self, me: BrokerImage) -> BrokerImage:
        """This broker as other brokers and clients reach it: every advertised listener, bound ports filled in."""
        bound = {b.name: b for b in self.listeners}
        endpoints = []
        for lst in (self.config.advertised_listeners or self.config.listeners):
            b = bound.get(lst.name)
            use_bound = b is not None and (lst.port == 0 or not self.config.advertised_listeners)
            host = b.host if use_bound else lst.host
            host = host if host not in ("0.0.0.0", "", "::") else "127.0.0.1"
            endpoints.append((lst.name, host, b.port if use_bound else lst.port))
        return replace(me, host=endpoints[0][1], port=endpoints[0][2], endpoints=tuple(endpoints))

    def _inter_broker_handlers(self, controller: ZkController, rm: ReplicaManager) -> dict:
        async def disable_remote_topic(body: dict) -> dict:
            request = DisableRemoteTopicRequest.from_json(body)
            if request.controller_epoch < controller.controller_epoch:
                return {"error_code": StaleControllerEpochError.code,
                        "error_message": f"controller epoch {request.controller_epoch} is stale"}
            answer = await rm.disable_remote_topic(request)
            return {"error_code": answer.error_code, "error_message": answer.error_message}

        async def controlled_shutdown(body: dict) -> dict:
            if not controller.is_active:
                return {"error_code": NotControllerError.code, "error_message": "not the controller"}
            remaining = await controller.call(controller.controlled_shutdown, int(body["broker_id"]))
            return {"error_code": 0, "remaining": [list(tp) for tp in remaining]}

        return {InternalApi.UPDATE_METADATA: controller.handle_update_metadata,
                InternalApi.DISABLE_REMOTE_TOPIC: disable_remote_topic,
                InternalApi.CONTROLLED_SHUTDOWN: controlled_shutdown}

    async def _register_in_zookeeper(self, controller: ZkController) -> None:
        """``/brokers/ids/<id>``, then the controller election. A registration left by this broker's previous
        process (killed less than ``zookeeper.session.timeout.ms`` ago) is waited out, as long as a session
        lasts."""
        cfg = self.config
        protocols = {b.name: b.security_protocol for b in self.listeners}
        data = broker_registration(controller.me, [(n, h, p, protocols.get(n, "PLAINTEXT"))
                                                   for n, h, p in controller.me.endpoints])
        controller.registration = data
        started = time.monotonic()
        deadline = started + cfg["zookeeper.session.timeout.ms"] / 1000 * 1.5
        waited = False
        while True:
            try:
                await self.zk.call(self.zk.register_broker, self.node_id, data)
                break
            except StartupError:
                if time.monotonic() >= deadline:
                    raise
                if not waited:  # said once: the retries every 0.5 s are no news
                    log.info("Broker id %d is still registered by a previous session; waiting for it to expire "
                             "(up to %.0f s)", self.node_id, deadline - started)
                    waited = True
                await asyncio.sleep(0.5)
        log.info("Registered broker %d in ZooKeeper (%s)%s", self.node_id,
                 ", ".join(f"{n}://{h}:{p}" for n, h, p in controller.me.endpoints),
                 f" after waiting {time.monotonic() - started:.1f} s for the previous session" if waited else "")

        def start_driving() -> None:
            controller.start_disablements(self.channel)

        def stop_driving() -> None:
            if controller.disablements is not None:
                asyncio.get_running_loop().create_task(controller.disablements.stop())
                controller.disablements = None
        controller.on_activation(start_driving, stop_driving)
        controller.begin_election()

    async def _controlled_shutdown(self, controller: ZkController) -> None:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled shutdown), retrying
        ``controlled.shutdown.max.retries`` times; the broker stops anyway afterwards."""
        cfg = self.config
        attempts = max(1, cfg["controlled.shutdown.max.retries"])
        for attempt in range(attempts):
            try:
                if controller.is_active:
                    remaining = await asyncio.wait_for(controller.call(controller.controlled_shutdown, self.node_id),
                                                       cfg["controller.socket.timeout.ms"] / 1000)
                else:
                    target = controller.image.controller_id
                    if target < 0:
                        raise NotControllerError("no controller is known")
                    answer = await self.channel.send(target, InternalApi.CONTROLLED_SHUTDOWN,
                                                     {"broker_id": self.node_id})
                    if answer.get("error_code"):
                        raise NotControllerError(answer.get("error_message") or "refused")
                    remaining = answer.get("remaining", [])
                if not remaining:
                    log.info("Controlled shutdown complete: this broker leads no partition with other replicas")
                    return
                log.info("Controlled shutdown: %d partition(s) could not move yet (no other in-sync replica)",
                         len(remaining))
            except Exception as e:  # noqa: BLE001 - retried, then the broker stops anyway
                log.info("Controlled shutdown attempt %d failed: %s", attempt + 1, e)
            if attempt + 1 < attempts:
                await asyncio.sleep(cfg["controlled.shutdown.retry.backoff.ms"] / 1000)
        log.warning("Controlled shutdown did not move every leadership; stopping anyway")

    def _metadata_changes_to(self, coordinator: GroupCoordinator, txn: TransactionCoordinator | None,
                             rm: ReplicaManager) -> Callable[[MetadataDelta, MetadataImage], None]:
        """A metadata listener telling the group coordinator which topics were deleted (their committed
        offsets go) and which ``__consumer_offsets`` partitions this broker now leads (loaded) or no longer
        leads (unloaded), and the transaction coordinator the same of ``__transaction_state``, on the event
        loop even when the change came from another thread."""
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

    def _advertise_bound(self) -> None:
        """This broker in the image with every advertised listener's endpoint (bound ports filled in), so a
        client is answered with the addresses of the listener it came in on."""
        image = self.controller.image
        if self.node_id not in image.brokers:
            return
        broker = self._zk_broker_image(image.brokers[self.node_id])
        self.controller.image = replace(image, brokers={**image.brokers, self.node_id: broker})

    # ------------------------------------------------------------------ running

    def fail(self, reason: str) -> None:
        """A component that cannot work says why; the broker stops and exits non-zero (as Kafka exits when
        its topic-based metadata manager cannot initialize)."""
        if self.fatal_error is None:
            self.fatal_error = reason
            log.error("Stopping the broker: %s", reason)
        self._stop_requested.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    async def _run_housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_TICK_S)
            try:
                self.log_manager.run_housekeeping()
                self.group_coordinator.tick()
            except Exception:  # noqa: BLE001 - housekeeping must keep running
                log.exception("Housekeeping failed")

    # ------------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        if self.state in (BrokerState.SHUTTING_DOWN, BrokerState.STOPPED):
            return
        was_ready = self.state is BrokerState.READY
        self._enter(BrokerState.SHUTTING_DOWN)
        if was_ready:  # a start that failed said why already
            log.info("Shutting down broker %d", self.node_id)
        step = _ShutdownStep()
        controller = self.controller
        if isinstance(controller, ZkController) and was_ready and self.config["controlled.shutdown.enable"]:
            await step("the controlled shutdown", self._controlled_shutdown(controller))
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self.log_manager is not None:
            await step("the log cleaner to stop", self.log_manager.stop_cleaner())
        if self.controller is not None and self.controller.disablements is not None:
            await step("the tiering disablements to stop", self.controller.disablements.stop())
        if self.remote_log_manager is not None:
            # Before the listeners close: the metadata manager's clients talk to this broker.
            rlm = self.remote_log_manager
            await step("the remote log manager to close", rlm.close())
            await step("the remote log metadata manager to close", rlm.rlmm.close())
            rlm.rsm.close()
        if self.socket_server is not None:
            await step("the connections to close", self.socket_server.stop())
        if isinstance(controller, ZkController):
            await step("the controller to stop", controller.stop())  # resigns: another is elected at once
        if self.zk is not None:
            await step("the ZooKeeper session to close", self.zk.call(self.zk.close))  # registration goes too
        if isinstance(self.channel, NetworkBrokerChannel):
            self.channel.close()
        if self.transaction_coordinator is not None:
            await step("the transaction coordinator to stop", self.transaction_coordinator.shutdown())
        if self.txn_marker_channel is not None:
            await step("the transaction marker channel to close", self.txn_marker_channel.close())
        if self.txn_verification is not None:
            await step("the transaction verification to close", self.txn_verification.close())
        if self.group_coordinator is not None:
            await step("the group coordinator to stop", self.group_coordinator.shutdown())
        if self.http_endpoint is not None:
            await step("the HTTP endpoint to stop", self.http_endpoint.stop())
        if self.replica_manager is not None:
            rm = self.replica_manager
            if rm.fetchers is not None:
                await step("the replica fetchers to stop", rm.fetchers.shutdown())
            if rm.alter_partition is not None:
                await step("the ISR change requests to stop", rm.alter_partition.stop())
            rm.shutdown()
        if self.log_manager is not None and self.log_manager.started:
            self.log_manager.shutdown()
        self._enter(BrokerState.STOPPED)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


class _ShutdownStep:
    """Awaits one step of the shutdown, saying every ``SLOW_S`` seconds which one it still waits for: a stop
    that hangs names its step in the log."""

    SLOW_S = 10.0

    async def __call__(self, what: str, aw) -> None:
        task = asyncio.ensure_future(aw)
        started = time.monotonic()
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.SLOW_S)
            if done:
                task.result()
                return
            log.warning("Shutdown still waiting for %s after %.0f s", what, time.monotonic() - started)


#: The ssl.* settings a client reads (a listener's values handed to the metadata manager's clients).
_CLIENT_SSL_SETTINGS = tuple(n for n in SSL_SETTINGS if n != "ssl.client.auth")


def _client_ssl_settings(cfg: BrokerConfig, bound: BoundListener) -> dict[str, str]:
    """The metadata manager's clients talk to an SSL or SASL_SSL listener with that listener's ssl settings
    (this broker's certificate, its truststore), as text under the common client prefix."""
    if bound.security_protocol not in ("SSL", "SASL_SSL"):
        return {}
    out = {}
    for name, value in cfg.listener_ssl_settings(bound.name).items():
        if name in _CLIENT_SSL_SETTINGS and value is not None:
            value = getattr(value, "value", value)
            text = ",".join(value) if isinstance(value, list) else str(value)
            out[f"remote.log.metadata.common.client.{name}"] = text
    return out


def _client_sasl_settings(cfg: BrokerConfig, bound: BoundListener) -> dict[str, str]:
    """On a SASL_PLAINTEXT or SASL_SSL listener the metadata manager's clients authenticate as the broker does
    to the others: ``sasl.mechanism.inter.broker.protocol`` with the listener's JAAS configuration for it (the
    broker's own user). ``remote.log.metadata.common.client.sasl.*`` set under the manager's prefix win, as
    Kafka's operators set them there."""
    if not bound.security_protocol.startswith("SASL_"):
        return {}
    mechanism = str(cfg["sasl.mechanism.inter.broker.protocol"]).upper()
    out = {"remote.log.metadata.common.client.sasl.mechanism": mechanism}
    text = jaas_config(cfg, bound.name, mechanism)
    if text:
        out["remote.log.metadata.common.client.sasl.jaas.config"] = text
    return out
