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
from typing import Any

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, ensure_meta_properties
from tierlog.config import BrokerConfig
from tierlog.protocol import HandlerRegistry
from tierlog.server.network import BoundListener, SocketServer
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage import LogConfig, LogManager

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
        self.log_manager = LogManager(
            log_dirs, self.log_config_for,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            producer_id_expiration_ms=cfg["producer.id.expiration.ms"])

        self.state = BrokerState.LOADING_METADATA
        advertised = cfg.advertised_listeners or cfg.listeners
        first = advertised[0]
        store = FileMetadataStore(log_dirs[0])
        self.controller = Controller(cfg, store, BrokerImage(self.node_id, first.host, first.port), self.cluster_id)
        # Storage opens after the image is known so each partition gets its topic's settings.
        self.log_manager.startup()
        self.controller.elect_leaders()
        self.replica_manager = ReplicaManager(self)
        self.replica_manager.load(self.controller.image)
        self.controller.add_listener(self.replica_manager.on_metadata_update)

        from tierlog.server.apis import register_all
        register_all(self)

        self.state = BrokerState.STARTING_LISTENERS
        self.socket_server = SocketServer(
            self.registry, max_frame_bytes=cfg["socket.request.max.bytes"],
            idle_timeout_ms=cfg["connections.max.idle.ms"], error_response=_error_response)
        self.listeners = await self.socket_server.start(cfg.listeners)
        if any(listener.port == 0 for listener in advertised) or not cfg.advertised_listeners:
            # Advertise the ports actually bound (listeners with port 0 pick a free one).
            self._advertise_bound()
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        self.state = BrokerState.READY
        for component in self._ready_callbacks:
            await _maybe_await(component.on_broker_ready())
        log.info("Broker %d ready in %.0f ms on %s", self.node_id, (time.monotonic() - t0) * 1000,
                 ", ".join(map(str, self.listeners)))

    def _advertise_bound(self) -> None:
        b = self.listeners[0]
        host = b.host if b.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        image = self.controller.image
        from dataclasses import replace
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
        if self.socket_server is not None:
            await self.socket_server.stop()
        if self.group_coordinator is not None and hasattr(self.group_coordinator, "shutdown"):
            await _maybe_await(self.group_coordinator.shutdown())
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
        return LogConfig.from_topic_config(self.controller.topic_config(topic))

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
