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
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, LocalBrokerChannel, ensure_meta_properties
from tierlog.cluster.image import MetadataDelta, MetadataImage
from tierlog.config import BrokerConfig
from tierlog.config.definitions import RLMM_PREFIX
from tierlog.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, OffsetsTopicStore
from tierlog.errors import StartupError
from tierlog.metrics import MetricsRegistry
from tierlog.protocol import HandlerRegistry
from tierlog.records import validation as record_validation
from tierlog.server.apis.admin import AdminApis
from tierlog.server.apis.configs import ConfigApis
from tierlog.server.apis.fetch import FetchApis
from tierlog.server.apis.groups import GroupApis
from tierlog.server.apis.metadata import MetadataApis
from tierlog.server.apis.offsets import OffsetApis
from tierlog.server.apis.produce import ProduceApis
from tierlog.server.broker_metrics import BrokerStateCollector, BrokerTopicMetrics
from tierlog.server.errors import error_response
from tierlog.server.http_endpoint import HttpEndpoint
from tierlog.server.network import BoundListener, SocketServer, bind_failure
from tierlog.server.offsets_topic_log import BrokerOffsetsTopicLog
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.tier_status import tier_routes
from tierlog.storage import LogDirFailureChannel, LogManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.rlmm import create_remote_log_metadata_manager
from tierlog.tiered.rlmm.consumer_task import METADATA_TOPIC
from tierlog.tiered.rsm import create_remote_storage_manager

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
        self.channel = LocalBrokerChannel()  # controller -> broker requests (DisableRemoteTopic)
        # The services, built by start():
        self.cluster_id: str | None = None
        self.controller: Controller | None = None
        self.log_manager: LogManager | None = None
        self.socket_server: SocketServer | None = None
        self.listeners: list[BoundListener] = []
        self.remote_log_manager: RemoteLogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.http_endpoint: HttpEndpoint | None = None
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
        _compile_record_validator_in_background()
        self.cluster_id = ensure_meta_properties(log_dirs, self.node_id, None)
        advertised = cfg.advertised_listeners or cfg.listeners
        first = advertised[0]
        controller = self.controller = Controller(cfg, FileMetadataStore(log_dirs[0]),
                                                  BrokerImage(self.node_id, first.host, first.port), self.cluster_id)
        failures = self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_manager = LogManager(
            log_dirs, controller.log_config,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
            failure_channel=failures, metrics=self.metrics)

        self._enter(BrokerState.LOADING_METADATA)
        # Listeners are bound now (their ports known) but accept connections only once the broker is
        # ready, as Kafka's acceptors do.
        self.socket_server = SocketServer(
            self.registry, max_frame_bytes=cfg["socket.request.max.bytes"],
            idle_timeout_ms=cfg["connections.max.idle.ms"], error_response=error_response,
            config=lambda: controller.effective_config, queued_max_request_bytes=cfg["queued.max.request.bytes"],
            metrics=self.metrics)
        self.listeners = await self.socket_server.bind(cfg.listeners)
        if any(listener.port == 0 for listener in advertised) or not cfg.advertised_listeners:
            self._advertise_bound()  # listeners with port 0 picked a free one
        if cfg["remote.log.storage.system.enable"]:
            self.remote_log_manager = self._build_tiered_storage()
        # Storage opens after the image is known so each partition gets its topic's settings.
        self.log_manager.startup()
        controller.elect_leaders()
        topic_metrics = BrokerTopicMetrics(self.metrics)
        rm = self.replica_manager = ReplicaManager(self.node_id, self.log_manager, controller,
                                                   self.remote_log_manager, lambda: controller.effective_config,
                                                   topic_metrics)
        self._register_state_metrics(rm)
        request_metrics = self.socket_server.request_metrics
        failures.add_listener(rm.handle_log_dir_failure)
        rm.load(controller.image)
        controller.add_listener(rm.on_metadata_update)
        offsets_store = OffsetsTopicStore.from_broker_config(BrokerOffsetsTopicLog(controller, rm), cfg)
        coordinator = self.group_coordinator = GroupCoordinator(CoordinatorConfig.from_broker_config(cfg),
                                                                offsets_store)
        controller.add_listener(self._metadata_changes_to(coordinator))
        self._on_ready.append(coordinator.start)
        for family in (MetadataApis(self.registry, controller, self.node_id),
                       ProduceApis(rm, controller, request_metrics),
                       FetchApis(rm, controller, request_metrics, topic_metrics), OffsetApis(rm, controller),
                       AdminApis(controller, rm),
                       ConfigApis(controller, self.node_id), GroupApis(coordinator, controller, self.node_id)):
            family.register(self.registry)

        self._enter(BrokerState.STARTING_LISTENERS)
        await self.socket_server.start_serving()
        if cfg["metrics.port"] is not None:
            await self._start_http_endpoint()
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
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

    def _register_state_metrics(self, rm: ReplicaManager) -> None:
        """The figures computed when scraped: partitions and logs, the metadata manager's readiness, and the
        process (CPU seconds, resident memory, open descriptors; Python's garbage collector and version)."""
        rlm = self.remote_log_manager

        def rlmm_ready() -> bool | None:  # the same rule as /ready's
            return None if rlm is None else rlm.not_ready_reason() is None

        self.metrics.register(BrokerStateCollector(self.node_id, lambda: rm.partitions.values(), rlmm_ready))
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.metrics.registry)

    async def _start_http_endpoint(self) -> None:
        """Metrics, the orchestrators' probes (/health, /ready) and the tiered storage status on
        ``metrics.host``:``metrics.port`` (read-only unless ``metrics.admin.enable``)."""
        cfg = self.config
        token = cfg["metrics.admin.token"]
        routes = tier_routes(lambda: None if self.state is BrokerState.READY else self.state.value,
                             self.controller, self.remote_log_manager, self.log_manager, self.node_id)
        self.http_endpoint = HttpEndpoint(self.metrics, routes, ready=self.not_ready_reason,
                                          admin_enabled=cfg["metrics.admin.enable"],
                                          admin_token=token.value if token is not None else None)
        host = cfg["metrics.host"]
        try:
            port = await self.http_endpoint.start(host, cfg["metrics.port"])
        except OSError as e:
            raise StartupError(bind_failure(host, cfg["metrics.port"], e, setting="metrics.port")) from e
        log.info("Metrics on http://%s:%d/metrics", host, port)
        if cfg["metrics.admin.enable"] and host not in ("127.0.0.1", "::1", "localhost"):
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
        return build_remote_log_manager(cfg, self.node_id, rsm, rlmm, cfg.log_dirs[0], self.metrics,
                                        lambda: controller.effective_config)

    @staticmethod
    def _metadata_changes_to(coordinator: GroupCoordinator) -> Callable[[MetadataDelta, MetadataImage], None]:
        """A metadata listener telling the group coordinator which topics were deleted (their committed
        offsets go) and which ``__consumer_offsets`` partitions were created (this node leads them: they
        are loaded), on the event loop even when the change came from another thread."""
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

        def on_update(delta: MetadataDelta, image: MetadataImage) -> None:
            deleted = [t.name for t in delta.deleted]
            if deleted:
                on_loop(coordinator.on_topics_deleted, deleted)
            led = [p for t in delta.created if t.name == OFFSETS_TOPIC for p in t.partitions]
            led += [p for t, added in delta.partitions_added if t.name == OFFSETS_TOPIC for p in added]
            if led:
                on_loop(coordinator.on_election, led)
        return on_update

    def _advertise_bound(self) -> None:
        b = self.listeners[0]
        host = b.host if b.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        image = self.controller.image
        broker = replace(image.brokers[self.node_id], host=host, port=b.port)
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
        self._enter(BrokerState.SHUTTING_DOWN)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self.controller is not None and self.controller.disablements is not None:
            await self.controller.disablements.stop()
        if self.remote_log_manager is not None:
            # Before the listeners close: the metadata manager's clients talk to this broker.
            rlm = self.remote_log_manager
            await rlm.close()
            await rlm.rlmm.close()
            rlm.rsm.close()
        if self.socket_server is not None:
            await self.socket_server.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.http_endpoint is not None:
            await self.http_endpoint.stop()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.log_manager is not None and self.log_manager.started:
            self.log_manager.shutdown()
        self._enter(BrokerState.STOPPED)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _compile_record_validator_in_background() -> None:
    """Compile the produce path's record validator (or load it from numba's cache) on a thread, so neither
    the start nor the first produce waits for it; until it is ready, produce runs its plain-Python twin."""
    if record_validation.is_compiled():
        return

    def run() -> None:
        try:
            seconds = record_validation.warm_up()
        except Exception:  # noqa: BLE001 - produce keeps validating with the Python twin
            log.exception("Record validator failed to compile; produce validates records in Python")
            return
        log.info("Record validator compiled in %.2f s", seconds)

    threading.Thread(target=run, name="record-validator-jit", daemon=True).start()
