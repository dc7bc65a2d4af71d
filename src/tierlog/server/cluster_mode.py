"""What differs between a single node and a ZooKeeper-mode cluster, in one place: how the broker joins (the
cluster id and the controller), the channel of controller -> broker requests, replication, the inter-broker
handlers and Envelope forwarding, the registration once serving, and the steps of a shutdown. The composition
root (``broker.py``) asks its mode and never branches on it.

- :class:`SingleNode`: the embedded controller (``meta.properties`` and ``FileMetadataStore``), requests to the
  broker as function calls, every partition led here, no replication.
- :class:`ZooKeeperCluster`: a ``ZkClient`` agreeing on the cluster id with ``/cluster/id``, a ``ZkController``
  reading the cluster once the listeners are bound (this broker leads nothing until the controller's first
  push), a ``NetworkBrokerChannel`` on the inter-broker listener, replica fetchers and ISR changes,
  ``/brokers/ids/<id>`` and the controller election once serving, and Kafka's controlled shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, LocalBrokerChannel, ensure_meta_properties
from tierlog.cluster.channel import DisableRemoteTopicRequest, NetworkBrokerChannel
from tierlog.cluster.store import existing_cluster_id
from tierlog.cluster.zk_controller import ZkController
from tierlog.cluster.zookeeper import ZkClient, broker_registration
from tierlog.config import BrokerConfig
from tierlog.errors import NotControllerError, StaleControllerEpochError, StartupError
from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str
from tierlog.metrics import MetricsRegistry
from tierlog.protocol.internal import InternalApi
from tierlog.server.apis.forwarding import ForwardingApis
from tierlog.server.authorizer import Authorizer
from tierlog.server.network.listeners import BoundListener
from tierlog.server.network.security import Security
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.replication.builder import Replication, build_replication
from tierlog.storage import LogDirFailureChannel
from tierlog.tiered.remote_log_manager import RemoteLogManager

log = logging.getLogger("tierlog.server.broker")  # the broker's start-up and shutdown lines, as before

#: A shutdown step: awaits ``aw``, saying in the log which step it still waits for.
Step = Callable[[str, Awaitable], Awaitable[None]]


def advertised_endpoints(cfg: BrokerConfig, listeners: list[BoundListener]) -> tuple[tuple[str, str, int], ...]:
    """This broker as other brokers and clients reach it: every advertised listener, bound ports filled in."""
    bound = {b.name: b for b in listeners}
    endpoints = []
    for lst in (cfg.advertised_listeners or cfg.listeners):
        b = bound.get(lst.name)
        use_bound = b is not None and (lst.port == 0 or not cfg.advertised_listeners)
        host = b.host if use_bound else lst.host
        host = host if host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        endpoints.append((lst.name, host, b.port if use_bound else lst.port))
    return tuple(endpoints)


def _leads(rm: ReplicaManager, topic: str) -> Callable[[int], bool]:
    """Whether this broker leads ``topic``'s partition now (a coordinator's partitions in a cluster)."""
    return lambda p: (topic, p) in rm.partitions and rm.leads(rm.partitions[topic, p])


class SingleNode:
    clustered = False

    def __init__(self, cfg: BrokerConfig, node_id: int):
        self.config = cfg
        self.node_id = node_id
        self.zk: ZkClient | None = None
        self.leader_session = None  # every leadership is this process's
        self.inter_broker_listener = ""  # no other broker sends tierlog's inter-broker requests
        self.cluster_id: str | None = None
        self.controller: Controller | None = None
        # controller -> broker requests: a function call on one node
        self.channel = LocalBrokerChannel()

    async def join(self, me: BrokerImage) -> Controller:
        cfg = self.config
        self.cluster_id = ensure_meta_properties(cfg.log_dirs, self.node_id, None)
        self.controller = Controller(cfg, FileMetadataStore(cfg.log_dirs[0]), me, self.cluster_id)
        return self.controller

    async def connect(self, security: Security, listeners: list[BoundListener]) -> None:
        self.controller.advertise(advertised_endpoints(self.config, listeners))

    def elect_leaders(self) -> None:
        self.controller.elect_leaders()  # every partition is led here

    def leads(self, rm: ReplicaManager, topic: str) -> None:
        return None  # a single node leads every partition of the coordinators' topics

    def build_replication(self, security: Security, rlm: RemoteLogManager | None,
                          metrics: MetricsRegistry) -> Replication | None:
        return None

    def inter_broker_channels(self, security: Security) -> None:
        return None  # the transaction coordinator and the verification answer in process

    def attach(self, rm: ReplicaManager, failures: LogDirFailureChannel) -> None:
        pass

    def offsets_replicated(self, rm: ReplicaManager) -> None:
        return None  # no other replica: a commit is durable once appended

    def api_families(self, authorizer: Authorizer | None) -> list:
        return []

    def internal_handlers(self, rm: ReplicaManager) -> dict | None:
        return None

    async def register(self, rm: ReplicaManager, listeners: list[BoundListener]) -> None:
        self.channel.register(self.node_id, rm.disable_remote_topic)
        self.controller.start_disablements(self.channel)

    async def controlled_shutdown(self, step: Step) -> None:
        pass

    async def stop(self, step: Step) -> None:
        pass


class ZooKeeperCluster:
    clustered = True

    def __init__(self, cfg: BrokerConfig, node_id: int):
        self.config = cfg
        self.node_id = node_id
        self.zk = ZkClient(cfg["zookeeper.connect"], cfg["zookeeper.session.timeout.ms"],
                           cfg["zookeeper.connection.timeout.ms"])
        # A leader whose session ended publishes no upload and deletes nothing (the remote log manager).
        self.leader_session = self.zk.live_session
        self.inter_broker_listener = cfg.inter_broker_listener.name
        self.cluster_id: str | None = None
        self.controller: ZkController | None = None
        self.channel: NetworkBrokerChannel | None = None  # made once the inter-broker listener's security is known

    async def join(self, me: BrokerImage) -> ZkController:
        """Connect to ZooKeeper, agree on the cluster id with the log dirs (``meta.properties``), and make the
        broker's view of the cluster."""
        cfg, zk = self.config, self.zk
        await zk.call(zk.start)
        proposed = existing_cluster_id(cfg.log_dirs) or uuid_to_str(new_kafka_uuid())
        cluster_id = await zk.call(zk.get_or_create_cluster_id, proposed)
        self.cluster_id = ensure_meta_properties(cfg.log_dirs, self.node_id, cluster_id)
        log.info("Joined the cluster %s through ZooKeeper at %s", cluster_id, cfg["zookeeper.connect"])
        self.controller = ZkController(cfg, zk, me, cluster_id)
        return self.controller

    async def connect(self, security: Security, listeners: list[BoundListener]) -> None:
        """The listeners are bound: this broker's endpoints are known; read the cluster as ZooKeeper has it."""
        cfg, controller = self.config, self.controller
        controller.advertise(advertised_endpoints(cfg, listeners))
        self.channel = NetworkBrokerChannel(self.node_id, cfg.inter_broker_listener.name,
                                            lambda: controller.image.brokers, cfg["controller.socket.timeout.ms"],
                                            security.inter_broker_ssl, security.inter_broker_sasl)
        await controller.start(self.channel)

    def elect_leaders(self) -> None:
        pass  # the active controller elects, and pushes

    def leads(self, rm: ReplicaManager, topic: str) -> Callable[[int], bool]:
        return _leads(rm, topic)

    def build_replication(self, security: Security, rlm: RemoteLogManager | None,
                          metrics: MetricsRegistry) -> Replication:
        return build_replication(self.node_id, self.config, self.controller, self.channel, security, rlm, metrics)

    def inter_broker_channels(self, security: Security) -> Callable[[], NetworkBrokerChannel]:
        """New connections to the other brokers on the inter-broker listener, for a user that must not wait
        behind the controller's pushes (the transaction markers, KIP-890's verification)."""
        cfg, controller = self.config, self.controller
        return lambda: NetworkBrokerChannel(self.node_id, cfg.inter_broker_listener.name,
                                            lambda: controller.image.brokers, cfg["controller.socket.timeout.ms"],
                                            security.inter_broker_ssl, security.inter_broker_sasl)

    def attach(self, rm: ReplicaManager, failures: LogDirFailureChannel) -> None:
        """The replica manager, built from the controller's image, starts replicating; the controller learns
        this broker's offline replicas from it and hears of every log dir failure."""
        controller = self.controller
        rm.start_replication()
        controller.track_local_replicas(rm.offline_replicas)
        failures.add_listener(lambda _log_dir: controller.report_log_dir_failure())

    def offsets_replicated(self, rm: ReplicaManager):
        return rm.offsets_replicated  # a commit is answered once the in-sync replicas have it

    def api_families(self, authorizer: Authorizer | None) -> list:
        """Envelope, and the controller APIs forwarded to the active controller (wrapping the handlers)."""
        return [ForwardingApis(self.controller, self.channel, self.config["controller.socket.timeout.ms"],
                               authorizer)]

    def internal_handlers(self, rm: ReplicaManager) -> dict:
        """tierlog's inter-broker requests, accepted on the inter-broker listener only."""
        controller = self.controller

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

    async def register(self, rm: ReplicaManager, listeners: list[BoundListener]) -> None:
        """``/brokers/ids/<id>``, then the controller election. A registration left by this broker's previous
        process (killed less than ``zookeeper.session.timeout.ms`` ago) is waited out, as long as a session
        lasts."""
        cfg, controller = self.config, self.controller
        protocols = {b.name: b.security_protocol for b in listeners}
        data = broker_registration(controller.me, [(n, h, p, protocols.get(n, "PLAINTEXT"))
                                                   for n, h, p in controller.me.endpoints])
        started = time.monotonic()
        deadline = started + cfg["zookeeper.session.timeout.ms"] / 1000 * 1.5
        waited = False
        while True:
            try:
                await controller.register(data)
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
        controller.on_activation(lambda: controller.start_disablements(self.channel), controller.stop_disablements)
        controller.begin_election()

    async def controlled_shutdown(self, step: Step) -> None:
        if self.controller is not None and self.config["controlled.shutdown.enable"]:
            await step("the controlled shutdown", self._controlled_shutdown())

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled shutdown), retrying
        ``controlled.shutdown.max.retries`` times; the broker stops anyway afterwards."""
        cfg, controller = self.config, self.controller
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

    async def stop(self, step: Step) -> None:
        """After the listeners closed: the controller resigns (another is elected at once), the session and
        with it the registration go."""
        if self.controller is not None:
            await step("the controller to stop", self.controller.stop())
        await step("the ZooKeeper session to close", self.zk.call(self.zk.close))
        if self.channel is not None:
            self.channel.close()


def cluster_mode(cfg: BrokerConfig, node_id: int) -> SingleNode | ZooKeeperCluster:
    """ZooKeeper mode when ``zookeeper.connect`` is set, else a single node."""
    return ZooKeeperCluster(cfg, node_id) if cfg.zookeeper_mode else SingleNode(cfg, node_id)


__all__ = ["SingleNode", "ZooKeeperCluster", "advertised_endpoints", "cluster_mode"]
