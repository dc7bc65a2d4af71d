"""The broker: start-up in explicit phases, the running services, and a clean shutdown.

Phases (KIP-1197 builds on them): storage recovery, metadata (cluster id, controller, logs for
every partition), listeners, ready. Components that need a serving broker get ``on_broker_ready``
once every listener accepts requests.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import replace
from typing import Any

from tierlog.cluster import (
    BrokerImage,
    Controller,
    DisableRemoteTopicRequest,
    DisableRemoteTopicResponse,
    FileMetadataStore,
    LocalBrokerChannel,
    TieringState,
    ensure_meta_properties,
)
from tierlog.config import BrokerConfig
from tierlog.errors import KafkaStorageError, StaleControllerEpochError
from tierlog.metrics import MetricsRegistry, MetricsServer
from tierlog.protocol import HandlerRegistry
from tierlog.server.network import BoundListener, SocketServer
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage import LogConfig, LogDirFailureChannel, LogManager
from tierlog.tiered.remote_log_manager import RemoteLogManager
from tierlog.tiered.remote_reader import RemoteLogReader
from tierlog.tiered.rlmm import create_remote_log_metadata_manager
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


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id: int = config["node.id"]
        self.state = BrokerState.NOT_STARTED
        self.cluster_id: str | None = None
        self.log_manager: LogManager | None = None
        self.controller: Controller | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: Any = None
        self.registry = HandlerRegistry()
        self.socket_server: SocketServer | None = None
        self.listeners: list[BoundListener] = []
        self._ready_callbacks: list[Any] = []
        self._housekeeping: asyncio.Task | None = None
        self._stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self.fatal_error: str | None = None
        self.metrics = MetricsRegistry()
        self.metrics_server: MetricsServer | None = None
        self.remote_log_manager: RemoteLogManager | None = None
        self.channel = LocalBrokerChannel()  # controller -> broker requests (DisableRemoteTopic)

    # ------------------------------------------------------------------ lifecycle

    def add_ready_callback(self, component: Any) -> None:
        """Register a component whose ``on_broker_ready()`` runs once the listeners accept requests."""
        self._ready_callbacks.append(component)

    async def start(self) -> None:
        t0 = time.monotonic()
        cfg = self.config
        log_dirs = cfg.log_dirs
        self.state = BrokerState.RECOVERING_STORAGE
        self.cluster_id = ensure_meta_properties(log_dirs, self.node_id, None)
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_manager = LogManager(
            log_dirs, self.log_config_for,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
            failure_channel=self.log_dir_failure_channel, metrics=self.metrics)

        self.state = BrokerState.LOADING_METADATA
        advertised = cfg.advertised_listeners or cfg.listeners
        first = advertised[0]
        store = FileMetadataStore(log_dirs[0])
        self.controller = Controller(cfg, store, BrokerImage(self.node_id, first.host, first.port), self.cluster_id)
        # Listeners are bound now (their ports known) but accept connections only once the broker is
        # ready, as Kafka's acceptors do.
        self.socket_server = SocketServer(
            self.registry, max_frame_bytes=cfg["socket.request.max.bytes"],
            idle_timeout_ms=cfg["connections.max.idle.ms"], error_response=_error_response)
        self.listeners = await self.socket_server.bind(cfg.listeners)
        if any(listener.port == 0 for listener in advertised) or not cfg.advertised_listeners:
            # Advertise the ports actually bound (listeners with port 0 pick a free one).
            self._advertise_bound()
        if cfg["remote.log.storage.system.enable"]:
            self.remote_log_manager = self._create_remote_log_manager()
        # Storage opens after the image is known so each partition gets its topic's settings.
        self.log_manager.startup()
        self.controller.elect_leaders()
        self.replica_manager = ReplicaManager(self)
        self.log_dir_failure_channel.add_listener(self.replica_manager.handle_log_dir_failure)
        self.replica_manager.load(self.controller.image)
        self.controller.add_listener(self.replica_manager.on_metadata_update)

        from tierlog.server.apis import register_all
        register_all(self)

        self.state = BrokerState.STARTING_LISTENERS
        await self.socket_server.start_serving()
        if cfg["metrics.port"] is not None:
            self.metrics_server = MetricsServer(self.metrics, {"/v1/tier/status": self.tier_status,
                                                               "/v1/tier/reconcile": self.tier_reconcile})
            port = await self.metrics_server.start(cfg["metrics.host"], cfg["metrics.port"])
            log.info("Metrics on http://%s:%d/metrics", cfg["metrics.host"], port)
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        self.channel.register(self.node_id, self.disable_remote_topic)
        self.controller.start_disablements(self.channel)
        self.state = BrokerState.READY
        log.info("Broker %d ready in %.0f ms on %s", self.node_id, (time.monotonic() - t0) * 1000,
                 ", ".join(map(str, self.listeners)))
        for component in self._ready_callbacks:
            try:
                await _maybe_await(component.on_broker_ready())
            except Exception:  # noqa: BLE001 - KIP-1197: a failing callback does not fail start-up
                log.exception("on_broker_ready of %s failed", type(component).__name__)

    def _create_remote_log_manager(self) -> RemoteLogManager:
        """The storage plugin, the metadata manager (configured now, started once the broker is ready,
        KIP-1197) and the remote log manager driving both."""
        cfg = self.config
        rsm = create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"],
                                            {**cfg.rsm_config(), "broker.id": str(self.node_id)},
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
        rlmm = create_remote_log_metadata_manager(cfg["remote.log.metadata.manager.class.name"], rlmm_configs,
                                                  cfg["remote.log.metadata.manager.class.path"])
        if hasattr(rlmm, "set_fatal_error_handler"):
            rlmm.set_fatal_error_handler(self.fail)
        self.add_ready_callback(rlmm)
        rlm = RemoteLogManager(cfg, self.node_id, rsm, rlmm, self.metrics,
                               effective_config=lambda: self.controller.effective_config)
        rlm.reader = RemoteLogReader(lambda: self.controller.effective_config, rsm, rlmm, rlm.metrics, cfg.log_dirs[0])
        log.info("Tiered storage on: %s remote storage, %s metadata manager", type(rsm).__name__,
                 type(rlmm).__name__)
        return rlm

    def fail(self, reason: str) -> None:
        """A component that cannot work says why; the broker stops and exits non-zero (as Kafka exits when
        its topic-based metadata manager cannot initialize)."""
        if self.fatal_error is None:
            self.fatal_error = reason
            log.error("Stopping the broker: %s", reason)
        self._stop_requested.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    def tier_status(self, topic: str | None = None) -> dict:
        """What ``tierlog tier status`` prints: each tiered partition, and each topic's tiering state
        with what a disablement still has to delete."""
        rlm = self.remote_log_manager
        driver = self.controller.disablements
        topics = []
        for t in sorted(self.controller.image.topics.values(), key=lambda t: t.name):
            if t.tiering is None or (topic is not None and t.name != topic):
                continue
            left = [v for tp, v in (rlm.disabling.items() if rlm is not None else ()) if tp.topic == t.name]
            topics.append({"topic": t.name, "state": t.tiering.state.value, "policy": t.tiering.policy,
                           "epoch": t.tiering.epoch,
                           "remote_segments_to_delete": sum(v["segments"] for v in left),
                           "remote_bytes_to_delete": sum(v["bytes"] for v in left),
                           "last_error": driver.last_error.get(t.name) if driver is not None else None})
        return {"node_id": self.node_id, "remote_storage_enabled": rlm is not None, "topics": topics,
                "partitions": rlm.status(topic) if rlm is not None else [],
                "log_dirs": self.log_manager.log_dir_status()}

    async def tier_reconcile(self, delete: str = "false") -> dict:
        """``tierlog tier reconcile``: orphaned remote objects and segments whose objects are missing."""
        if self.remote_log_manager is None:
            return {"error": "tiered storage is off on this broker (remote.log.storage.system.enable=false)"}
        return await self.remote_log_manager.reconcile(delete=delete.lower() == "true")

    def _advertise_bound(self) -> None:
        b = self.listeners[0]
        host = b.host if b.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        image = self.controller.image
        broker = replace(image.brokers[self.node_id], host=host, port=b.port)
        self.controller.image = replace(image, brokers={**image.brokers, self.node_id: broker})

    async def _run_housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_TICK_S)
            try:
                self.log_manager.run_housekeeping()
                if self.group_coordinator is not None and hasattr(self.group_coordinator, "tick"):
                    await _maybe_await(self.group_coordinator.tick())
            except Exception:  # noqa: BLE001 - housekeeping must keep running
                log.exception("Housekeeping failed")

    async def shutdown(self) -> None:
        if self.state in (BrokerState.SHUTTING_DOWN, BrokerState.STOPPED):
            return
        self.state = BrokerState.SHUTTING_DOWN
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
        if self.group_coordinator is not None and hasattr(self.group_coordinator, "shutdown"):
            await _maybe_await(self.group_coordinator.shutdown())
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.log_manager is not None and self.log_manager.started:
            self.log_manager.shutdown()
        self.state = BrokerState.STOPPED
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ helpers for APIs

    def log_config_for(self, topic: str) -> LogConfig:
        """The log settings of ``topic``: its configuration, with remote storage in effect as Kafka decides
        it (broker switch, topic switch, not compacted, not internal) and as its tiering lifecycle
        (KIP-950) requires: data retained by a disablement stays readable and expires, nothing more is
        uploaded; after a delete disablement the log is a plain local log."""
        tc = self.controller.topic_config(topic)
        remote = tc.remote_log_enabled(topic)
        copy_disable = bool(tc["remote.log.copy.disable"])
        t = self.controller.image.topics.get(topic)
        tiering = t.tiering if t is not None else None
        if tiering is not None and tiering.state != TieringState.ENABLED:
            copy_disable = True
            if tiering.policy == "retain":
                remote = remote or (tc.remote_storage_system_enabled and not tc.compact and not t.is_internal)
            else:
                remote = False
        return replace(LogConfig.from_topic_config(tc), remote_storage_enable=remote,
                       remote_log_copy_disable=copy_disable)

    async def disable_remote_topic(self, request: DisableRemoteTopicRequest) -> DisableRemoteTopicResponse:
        """DisableRemoteTopic from the controller (KIP-950): stop tiering the topic's partitions hosted
        here; with the delete policy, delete their remote data. Errors go back to the controller, which
        repeats the request."""
        rlm = self.remote_log_manager
        t = self.controller.image.topics.get(request.topic)
        if t is None or t.topic_id != request.topic_id:
            return DisableRemoteTopicResponse()  # deleted meanwhile: its remote data went with it
        epoch = t.tiering.epoch if t.tiering is not None else -1
        if request.tiering_epoch > epoch:  # this broker has not seen that metadata yet: asked again later
            return DisableRemoteTopicResponse(StaleControllerEpochError.code,
                                              f"tiering epoch {request.tiering_epoch} is newer than {epoch}")
        if request.tiering_epoch < epoch:
            return DisableRemoteTopicResponse()  # superseded by a later change of the topic's tiering
        if rlm is None:
            return DisableRemoteTopicResponse()
        partitions = [p for p in self.replica_manager.partitions.values()
                      if p.topic == request.topic and p.index in request.partitions]
        try:
            await rlm.disable_remote_topic(partitions, request.policy)
        except Exception as e:  # noqa: BLE001 - reported to the controller, which retries
            log.warning("DisableRemoteTopic for %s (policy %s) failed: %s", request.topic, request.policy, e)
            return DisableRemoteTopicResponse(KafkaStorageError.code, str(e))
        return DisableRemoteTopicResponse()

    @property
    def advertised_host_port(self) -> tuple[str, int]:
        b = self.controller.image.brokers[self.node_id]
        return b.host, b.port


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value):
        return await value
    return value


def _error_response(ctx, error):
    from tierlog.server.errors import error_response
    return error_response(ctx, error)
