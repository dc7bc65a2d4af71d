"""The broker: the composition root that builds every service, start-up in explicit phases, and a clean
shutdown.

Every service is constructed here, once, with the typed collaborators it uses as constructor arguments; no
service or request handler receives the broker itself, and a feature that is off is an explicit ``None``
(tiered storage without ``remote.log.storage.system.enable``, replication on a single node). Each feature has
its builder, returning a small frozen value: :func:`~tierlog.server.network.security.build_security`,
:func:`~tierlog.server.quotas.builder.build_quotas`, :func:`~tierlog.server.replication.builder.build_replication`,
:func:`~tierlog.server.transactions.builder.build_transactions`,
:func:`~tierlog.server.remote.builder.build_tiered_storage`; what differs between a single node and a
ZooKeeper-mode cluster is the cluster mode's (:mod:`tierlog.server.cluster_mode`), never a branch here.
Phases (KIP-1197 builds on them): storage recovery, metadata (cluster id, controller, logs for every
partition), listeners, ready. Components that need a serving broker (the topic-based remote log metadata
manager, the coordinators) are started once every listener accepts requests.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

from tierlog.cluster import BrokerImage, Controller
from tierlog.config import BrokerConfig
from tierlog.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, OffsetsTopicStore
from tierlog.coordinator.transaction_log import TXN_STATE_TOPIC
from tierlog.errors import InvalidConfigError, StartupError
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import HandlerRegistry
from tierlog.security import SSL_SETTINGS, server_context
from tierlog.security.scram import ScramCredential
from tierlog.server.apis.acls import AclApis
from tierlog.server.apis.admin import AdminApis
from tierlog.server.apis.authorization import ApiAuthorization
from tierlog.server.apis.configs import ConfigApis
from tierlog.server.apis.consumer_groups import ConsumerGroupApis
from tierlog.server.apis.features import FeatureApis, supported_features
from tierlog.server.apis.fetch import FetchApis
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
from tierlog.server.apis.share import ShareApis
from tierlog.server.apis.transactions import TransactionMarkerApis
from tierlog.server.cluster_mode import SingleNode, ZooKeeperCluster, cluster_mode
from tierlog.server.errors import error_response
from tierlog.server.http.broker_metrics import BrokerStateCollector, BrokerTopicMetrics
from tierlog.server.http.cleaner_status import cleaner_routes
from tierlog.server.http.http_endpoint import HttpEndpoint
from tierlog.server.http.tier_status import tier_routes
from tierlog.server.network.listeners import BoundListener, bind_failure
from tierlog.server.network.sasl_authenticator import SaslApis
from tierlog.server.network.security import Security, build_security
from tierlog.server.network.socket_server import SocketServer
from tierlog.server.quotas.builder import Quotas, build_quotas
from tierlog.server.remote.builder import build_tiered_storage
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.transactions.builder import Transactions, build_transactions
from tierlog.server.transactions.coordinator_leadership import coordinator_leadership
from tierlog.server.transactions.offsets_topic_log import BrokerOffsetsTopicLog
from tierlog.storage import LogDirFailureChannel, LogManager
from tierlog.storage.cleaner import CleanerConfig
from tierlog.tiered.remote_log_manager import RemoteLogManager
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
        # The services, built by start():
        self.mode: SingleNode | ZooKeeperCluster | None = None  # a single node or a ZooKeeper-mode cluster
        self.cluster_id: str | None = None
        self.controller: Controller | None = None
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_manager: LogManager | None = None
        self.security: Security | None = None
        self.quotas: Quotas | None = None
        self.socket_server: SocketServer | None = None
        self.listeners: list[BoundListener] = []
        self.remote_log_manager: RemoteLogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transactions: Transactions | None = None
        self.share: ShareApis | None = None  # share groups (KIP-932)
        self.http_endpoint: HttpEndpoint | None = None
        self._on_ready: list[Callable[[], Awaitable[None]]] = []
        self._housekeeping: asyncio.Task | None = None
        self._stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()

    @property
    def transaction_coordinator(self):
        return self.transactions.coordinator if self.transactions is not None else None

    def _enter(self, state: BrokerState) -> None:
        if state is not BrokerState.SHUTTING_DOWN and state not in _BROKER_NEXT[self.state]:
            raise RuntimeError(f"broker state cannot go from {self.state.value} to {state.value}")
        self.state = state

    # ------------------------------------------------------------------ start-up

    async def start(self) -> None:
        t0 = time.monotonic()
        self._enter(BrokerState.RECOVERING_STORAGE)
        await self._recover_storage()
        self._enter(BrokerState.LOADING_METADATA)
        await self._bind_listeners()
        await self._load_metadata()
        internal_handlers = self._build_services()
        self._enter(BrokerState.STARTING_LISTENERS)
        await self._serve(internal_handlers)
        self._enter(BrokerState.READY)
        await self._ready(t0)

    async def _recover_storage(self) -> None:
        """Join the cluster (or make the single node's controller), then the log manager (not yet opened)."""
        cfg = self.config
        advertised = cfg.advertised_listeners or cfg.listeners
        first = advertised[0]
        me = BrokerImage(self.node_id, first.host, first.port, cfg["broker.rack"])
        self.mode = cluster_mode(cfg, self.node_id)
        controller = self.controller = await self.mode.join(me)
        self.cluster_id = self.mode.cluster_id
        self.log_manager = LogManager(
            cfg.log_dirs, controller.log_config,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
            failure_channel=self.log_dir_failure_channel, metrics=self.metrics,
            cleaner_config=CleanerConfig.from_broker_config(cfg),
            cleaner_config_source=lambda: CleanerConfig.from_broker_config(controller.effective_config),
            cordoned_source=lambda: controller.effective_config["cordoned.log.dirs"])

    async def _bind_listeners(self) -> None:
        """Listeners are bound now (their ports known) but accept connections only once the broker is ready,
        as Kafka's acceptors do. Their security comes first: a broken keystore fails the start with its reason."""
        cfg, controller = self.config, self.controller
        security = self.security = build_security(cfg, controller, self._scram_credential)
        self.quotas = build_quotas(cfg, self.metrics)
        self.socket_server = SocketServer(
            self.registry, max_frame_bytes=cfg["socket.request.max.bytes"],
            idle_timeout_ms=cfg["connections.max.idle.ms"], error_response=error_response,
            config=lambda: controller.effective_config, queued_max_request_bytes=cfg["queued.max.request.bytes"],
            metrics=self.metrics, tls=security.tls, sasl=security.sasl, client_quotas=self.quotas.client,
            inter_broker_listener=self.mode.inter_broker_listener)
        self.listeners = await self.socket_server.bind(cfg.listeners)

    async def _load_metadata(self) -> None:
        """The cluster as the controller has it (every advertised endpoint, bound ports filled in), tiered
        storage, then the logs: storage opens after the image is known so each partition gets its topic's
        settings."""
        cfg, mode = self.config, self.mode
        await mode.connect(self.security, self.listeners)
        if cfg["remote.log.storage.system.enable"]:
            rlm = self.remote_log_manager = build_tiered_storage(
                cfg, self.node_id, self.cluster_id, self.controller, self.listeners, self.log_manager, self.metrics,
                self.fail, mode.leader_session)
            self._on_ready.append(rlm.rlmm.on_broker_ready)
        self.log_manager.startup()
        self.log_manager.start_cleaner()
        mode.elect_leaders()

    def _build_services(self) -> dict | None:
        """The replica manager, the coordinators and the API families, registered in the handler registry;
        returns the handlers of tierlog's inter-broker requests (a cluster's)."""
        cfg, mode, controller, security = self.config, self.mode, self.controller, self.security
        quotas, failures = self.quotas, self.log_dir_failure_channel
        topic_metrics = BrokerTopicMetrics(self.metrics)
        replication = mode.build_replication(security, self.remote_log_manager, self.metrics)
        rm = self.replica_manager = ReplicaManager(self.node_id, self.log_manager, controller,
                                                   self.remote_log_manager, lambda: controller.effective_config,
                                                   topic_metrics, replication)
        self._register_state_metrics(rm)
        failures.add_listener(rm.handle_log_dir_failure)
        mode.attach(rm, failures)
        rm.load(controller.image)
        controller.add_listener(rm.on_metadata_update)
        offsets_store = OffsetsTopicStore.from_broker_config(BrokerOffsetsTopicLog(controller, rm), cfg)
        group_config = CoordinatorConfig.from_broker_config(cfg, live=lambda: controller.effective_config)
        coordinator = self.group_coordinator = GroupCoordinator(group_config, offsets_store,
                                                                leads=mode.leads(rm, OFFSETS_TOPIC))
        self._on_ready.append(coordinator.start)
        authorization = ApiAuthorization(security.authorizer, rm.topic_name)  # each handler asks its API's check
        txn = self.transactions = build_transactions(self.node_id, cfg, controller, rm, coordinator,
                                                     mode.leads(rm, TXN_STATE_TOPIC),
                                                     mode.inter_broker_channels(security), authorization)
        # The one cycle left to a call: the verification manager and the coordinator it asks are built with rm.
        rm.attach_transaction_verification(txn.verification, txn.verification_enabled)
        self._on_ready.append(txn.coordinator.start)
        controller.add_listener(coordinator_leadership(coordinator, txn.coordinator, rm))
        quotas.follow(controller)
        self.share = ShareApis.build(cfg, controller, rm, BrokerOffsetsTopicLog(controller, rm), self.node_id,
                                     security.authorizer, self.metrics)
        self._register_apis(rm, coordinator, txn, topic_metrics, authorization)
        return mode.internal_handlers(rm)

    def _register_apis(self, rm: ReplicaManager, coordinator: GroupCoordinator, txn: Transactions,
                       topic_metrics: BrokerTopicMetrics, authorization: ApiAuthorization) -> None:
        """Every API family with the services it uses and its API's authorization checks (ApiAuthorization, one
        per API, each handler asking its own; Metadata's, Produce's and Fetch's topic checks are inline, hot
        paths, with the authorizer), then a cluster's forwarding wraps them."""
        controller, authorizer, client_quotas = self.controller, self.security.authorizer, self.quotas.client
        request_metrics = self.socket_server.request_metrics
        group_apis = GroupApis(coordinator, controller, self.node_id, self.mode.offsets_replicated(rm),
                               transaction_coordinator=txn.coordinator, replica_manager=rm, authorization=authorization)
        if self.share is not None:
            group_apis.share_groups = self.share.coordinator
            group_apis.share_state = self.share.persister.store if self.share.persister is not None else None
        for family in (MetadataApis(self.registry, controller, self.node_id, authorizer, authorization),
                       ProduceApis(rm, controller, request_metrics, transactions=txn.apis,
                                   client_quotas=client_quotas, authorizer=authorizer, authorization=authorization),
                       FetchApis(rm, controller, request_metrics, topic_metrics, client_quotas=client_quotas,
                                 authorizer=authorizer),
                       OffsetApis(rm, controller, authorization=authorization), AclApis(controller, authorizer),
                       AdminApis(controller, rm, authorization=authorization),
                       LeadershipApis(controller, authorization=authorization),
                       ConfigApis(controller, self.node_id, authorization=authorization),
                       ClientQuotaApis(controller, authorization=authorization),
                       group_apis,
                       ConsumerGroupApis(coordinator, controller, self.mode.offsets_replicated(rm),
                                         authorization=authorization),
                       LogDirApis(self.log_manager, authorization=authorization),
                       ReassignmentApis(controller, authorization=authorization),
                       TransactionMarkerApis(rm, coordinator, authorization=authorization),
                       ProducerApis(controller, rm, authorization=authorization), txn.apis,
                       SaslApis(), ScramApis(controller, authorization=authorization),
                       FeatureApis(controller, authorization=authorization), self.share):
            family.register(self.registry)
        for family in self.mode.api_families(authorizer):
            family.register(self.registry)
        # KIP-584: the feature levels follow what is served (a new cluster's levels are finalized now)
        controller.support_features(supported_features(self.registry))

    async def _serve(self, internal_handlers: dict | None) -> None:
        await self.socket_server.start_serving(internal_handlers)
        if self.config["metrics.port"] is not None:
            await self._start_http_endpoint()
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        await self.mode.register(self.replica_manager, self.listeners)

    async def _ready(self, t0: float) -> None:
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
                if self.share is not None:
                    self.share.tick()
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
        if self.mode is not None and was_ready:  # a cluster's controlled shutdown, while everything serves
            await self.mode.controlled_shutdown(step)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self.share is not None:  # records still ARCHIVING are persisted so; the next start writes them
            await step("the share groups' DLQ writer and state writes to stop", self.share.close())
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
        if self.mode is not None:
            await self.mode.stop(step)
        if self.transactions is not None:
            txn = self.transactions
            await step("the transaction coordinator to stop", txn.coordinator.shutdown())
            if txn.marker_channel is not None:
                await step("the transaction marker channel to close", txn.marker_channel.close())
            await step("the transaction verification to close", txn.verification.close())
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
