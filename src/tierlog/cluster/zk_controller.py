"""The controller of a multi-broker cluster whose metadata lives in ZooKeeper (Kafka's ZooKeeper-mode
``KafkaController``), and every broker's view of the cluster.

Every broker has one :class:`ZkController`. It is always the broker's metadata view: the image the active
controller last pushed (UPDATE_METADATA, :mod:`tierlog.protocol.internal`), applied only when it carries a
controller epoch at least as new as any seen, and never taking a partition back to an older leader epoch.
One broker at a time is also the active controller: the one whose ephemeral ``/controller`` znode exists.
It then

- loads everything from ZooKeeper (brokers alive, topics, partition states, configs, deletions in
  progress) and finishes what its predecessor left half-done (deletions, partitions without a state);
- runs the inherited :class:`~tierlog.cluster.controller.Controller` rules for topic creation, deletion,
  partitions and configs, writing each change to ZooKeeper in one transaction that checks the
  ``/controller_epoch`` version it won (a paused old controller that wakes up writes nothing);
- elects leaders when brokers come and go (from the ISR; out of it only with
  ``unclean.leader.election.enable``), on controlled shutdown, on ElectLeaders and for preferred-replica
  balance (``auto.leader.rebalance.enable``);
- pushes the new image to every live broker, itself included, over the inter-broker listener.

ZooKeeper calls and every change the controller makes run on one thread of their own (Kafka's controller
event thread); the event loop reaches it through :meth:`ZkController.call`. A partition's ISR changes when a
replica's broker leaves (the controller drops it, with a new leader epoch) and when its leader asks
(AlterPartition: followers that caught up join, those that lag leave).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from urllib.parse import quote

from kazoo.exceptions import NoNodeError

from tierlog.cluster import acls
from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.controller import Controller, password_encoders, with_endpoints
from tierlog.cluster.features import FEATURE_ZNODE, FinalizedFeatures, encode_feature_znode
from tierlog.cluster.image import (
    BrokerImage,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TopicImage,
    diff_images,
)
from tierlog.cluster.placement import assign_replicas
from tierlog.cluster.reassignment import PartitionReassignments
from tierlog.cluster.zookeeper import (
    BROKER_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CHANGES,
    CONFIG_GROUPS,
    CONFIG_TOPICS,
    CONFIG_USERS,
    DEFAULT_BROKER_CONFIG,
    DELETE_TOPICS,
    DELETED_TOPIC_IDS,
    SESSION_ENDED,
    ControllerFence,
    FencedControllerError,
    ZkClient,
    commit_fenced,
    config_entity,
    partition_state,
    partition_state_path,
    topic_assignment,
    topic_path,
)
from tierlog.config import BrokerConfig
from tierlog.errors import (
    CoordinatorNotAvailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    KafkaError,
    KafkaStorageError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PreferredLeaderNotAvailableError,
    StaleControllerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    describe_error,
    error_for_code,
)
from tierlog.kafka_uuid import uuid_to_str
from tierlog.logs import RepeatLimiter
from tierlog.protocol import ApiKey
from tierlog.protocol.internal import InternalApi

log = logging.getLogger(__name__)

NO_LEADER = -1
PUSH_RETRY_S = (0.05, 1.0)  # first and longest wait before pushing metadata to a broker again
PROPAGATION_WAIT_S = 5.0  # how long an admin request waits for its change to reach every live broker
EVENT_ATTEMPTS = 3  # runs of an event whose partition state writes found the states moved


class StatesReloaded(Exception):
    """Partition state writes refused because a state's znode had moved (a write whose answer a lost connection
    swallowed, usually); the states were read again, and the event that wrote them can run again."""


def image_to_wire(image: MetadataImage, controller_epoch: int) -> dict:
    return {"controllerId": image.controller_id, "controllerEpoch": controller_epoch,
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                         "endpoints": [list(e) for e in b.endpoints]} for b in image.brokers.values()],
            "image": image.to_json()}


def image_from_wire(body: Mapping) -> tuple[MetadataImage, int]:
    brokers = {int(b["id"]): BrokerImage(int(b["id"]), b["host"], int(b["port"]), b.get("rack"),
                                         tuple((e[0], e[1], int(e[2])) for e in b.get("endpoints", ())))
               for b in body["brokers"]}
    return MetadataImage.from_json(body["image"], brokers), int(body["controllerEpoch"])


class ZkController(Controller):
    clustered = True

    def __init__(self, broker_config: BrokerConfig, zk: ZkClient, broker: BrokerImage, cluster_id: str):
        self._init_common(broker_config, broker.node_id)
        self.encode_passwords = True  # Kafka's ZooKeeper mode: /config/brokers/<id> holds them encoded
        self.password_encoders = password_encoders(broker_config)
        self.zk = zk
        self.me = broker
        self.cluster_id = cluster_id
        self.fence: ControllerFence | None = None  # set while this broker is the active controller
        self.controller_epoch = 0  # the newest controller epoch this broker has seen
        self.image = MetadataImage(cluster_id, NO_LEADER, {broker.node_id: broker}, {})
        self._applied = self.image  # what this broker's partitions were last set from
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"controller-{self.node_id}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.channel: NetworkBrokerChannel | None = None
        self._version = 0  # bumped by every change the active controller makes
        self._acked: dict[int, int] = {}  # broker -> newest version it applied
        self._pushers: dict[int, asyncio.Task] = {}
        self._push_wake: dict[int, asyncio.Event] = {}
        self._propagated: asyncio.Condition | None = None
        self._shutting_down: set[int] = set()
        self._stopped = False
        self._background: set[asyncio.Task] = set()
        self._on_activate: list[Callable[[], None]] = []
        self._on_resign: list[Callable[[], None]] = []
        self._rebalance_task: asyncio.Task | None = None
        self._pid_lock = threading.Lock()
        self._creating: set[str] = set()
        self._session_lost = False
        self._broker_epochs: dict[int, int] = {}
        self.registration: bytes | None = None  # this broker's /brokers/ids znode, registered again after expiry
        # Replicas whose log dir failed, by broker (reported in the brokers' UPDATE_METADATA answers, as Kafka
        # learns them from LeaderAndIsr answers): they leave their ISRs and lead nothing until the broker restarts.
        self._offline_replicas: dict[int, frozenset[tuple[str, int]]] = {}
        #: This broker's offline replicas, for its UPDATE_METADATA answers (the replica manager's, given by
        #: track_local_replicas).
        self.local_offline_replicas: Callable[[], list[tuple[str, int]]] = list
        self._creation_failures = RepeatLimiter(log)
        self.reassignments = PartitionReassignments(self)  # KIP-455, on the controller thread

    # ================================================================== plumbing

    def advertise(self, endpoints: tuple[tuple[str, str, int], ...]) -> None:
        super().advertise(endpoints)
        self.me = with_endpoints(self.me, endpoints)  # what start() and the registration publish

    def track_local_replicas(self, offline_replicas: Callable[[], list[tuple[str, int]]]) -> None:
        """The replica manager's offline replicas (log dir failures), answered to the controller's
        UPDATE_METADATA. The replica manager is built from this controller's image, hence given here."""
        self.local_offline_replicas = offline_replicas

    async def register(self, data: bytes) -> None:
        """``/brokers/ids/<id>`` with ``data``, kept to register again after a session expiry."""
        self.registration = data
        await self.zk.call(self.zk.register_broker, self.node_id, data)

    def stop_disablements(self) -> None:
        """This broker's controller resigned: its disablement driver stops (a new one starts if re-elected)."""
        if self.disablements is not None:
            asyncio.get_running_loop().create_task(self.disablements.stop())
            self.disablements = None

    @property
    def is_active(self) -> bool:
        return self.fence is not None

    def replica_hosts(self) -> int:
        return max(1, len(self.image.brokers))

    def internal_topic_replication_factor(self, topic: str, setting: str, configured: int) -> int:
        return configured  # a cluster keeps Kafka's rule: wait for enough brokers, never fewer replicas

    async def call(self, fn: Callable, *args, **kwargs):
        """Run a controller operation on the controller thread; a change it made reaches every live broker
        before this returns (within :data:`PROPAGATION_WAIT_S`), so a client's next request sees it."""
        if not self.is_active:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))
        await self.wait_propagated(self._version, PROPAGATION_WAIT_S)
        return result

    async def execute(self, fn: Callable, *args):
        """Run ``fn`` on the controller thread and return at once: its change reaches brokers with the next
        pushes (AlterPartition answers the leader itself)."""
        if not self.is_active:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(*args))

    def _submit(self, fn: Callable, *args, attempt: int = 1) -> None:
        """Queue ``fn`` on the controller thread (from kazoo's watch thread or the loop); an event whose
        partition state writes found the states moved (:class:`StatesReloaded`) is queued again, at most
        :data:`EVENT_ATTEMPTS` times in all."""
        if self._stopped:
            return

        def run() -> None:
            try:
                fn(*args)
            except StatesReloaded as e:  # its changes were computed from states that had moved: once more
                if attempt < EVENT_ATTEMPTS:
                    log.info("Controller event %s runs again: %s", getattr(fn, "__name__", fn), e)
                    self._submit(fn, *args, attempt=attempt + 1)
                else:
                    log.error("Controller event %s failed %d times: %s", getattr(fn, "__name__", fn), attempt, e)
            except FencedControllerError as e:  # expected after a pause: another controller was elected
                log.info("Controller %d was fenced (%s); resigning", self.node_id, e)
                self._resign()
            except SESSION_ENDED as e:  # _on_zk_state resigns, then registers again and reads the cluster anew
                log.warning("Controller event %s skipped: the ZooKeeper session ended (%s)",
                            getattr(fn, "__name__", fn), type(e).__name__)
            except Exception as e:  # noqa: BLE001 - the controller thread keeps serving events
                if self.fence is None or self._session_lost:  # resigned meanwhile: the failure is the fencing's
                    log.info("Controller event %s cut short: broker %d is no longer the controller (%s: %s)",
                             getattr(fn, "__name__", fn), self.node_id, type(e).__name__, e)
                else:
                    log.exception("Controller event %s failed", getattr(fn, "__name__", fn))
        try:
            self._executor.submit(run)
        except RuntimeError:  # executor shut down
            pass

    def _on_loop(self, fn: Callable, *args) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    # ================================================================== start and stop

    async def start(self, channel: NetworkBrokerChannel) -> None:
        """Read the cluster from ZooKeeper (the view until the controller's first push: this broker leads
        nothing yet), then take part in the controller election."""
        self._loop = asyncio.get_running_loop()
        self.channel = channel
        self._propagated = asyncio.Condition()
        image = await self._loop.run_in_executor(self._executor, self._read_cluster)
        parts_off = {name: replace(t, partitions={
            p: replace(pi, leader=NO_LEADER) if pi.leader == self.node_id else pi for p, pi in t.partitions.items()})
            for name, t in image.topics.items()}
        self.image = self._applied = replace(image, topics=parts_off,
                                             brokers={**image.brokers, self.node_id: self.me})
        self.zk.add_state_listener(self._on_zk_state)

    def begin_election(self) -> None:
        self._submit(self._elect)

    async def stop(self) -> None:
        self._stopped = True
        for t in list(self._pushers.values()) + list(self._background):
            t.cancel()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        if self.disablements is not None:
            await self.disablements.stop()
        # A controller event stuck in a ZooKeeper call must not hold the shutdown: its thread is left behind.
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.is_active:
            self.fence = None
            self.zk.resign_controller(self.node_id)

    def _on_zk_state(self, state: str) -> None:
        """Called on kazoo's thread. A lost session took the registration and any controllership with it;
        once a new session is up (kazoo reconnects by itself), register again and rejoin the election, as
        Kafka's broker does after a session expiry. Reconnected in the same session (ZooKeeper restarted, a
        short cut), look at the election again: a ``/controller`` created just before the disconnection may be
        this broker's without its knowing (the transaction's answer lost)."""
        if state == "LOST":
            self._session_lost = True
            self._submit(self._resign)
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            self._submit(self._new_session)
        elif state == "CONNECTED":  # the same session back: what a disconnection cut short is looked at again
            self._submit(self._reconnected)

    def _reconnected(self) -> None:
        """An event that met the disconnection was skipped (kazoo does not resend): the active controller
        compares the live brokers with its image again; another broker looks at the election again."""
        if self.is_active:
            self._brokers_changed()
        else:
            self._elect()

    def _new_session(self) -> None:
        if self.registration is not None:
            self.zk.register_broker(self.node_id, self.registration)
            log.info("Registered broker %d again in a new ZooKeeper session", self.node_id)
        self._elect()

    # ================================================================== the broker's view

    async def handle_update_metadata(self, body: Mapping) -> dict:
        """UPDATE_METADATA from the controller: apply the image to this broker's partitions."""
        try:
            image, epoch = image_from_wire(body)
        except (KeyError, ValueError, TypeError) as e:
            return {"error_code": 42, "error_message": f"malformed metadata: {e}"}  # INVALID_REQUEST
        if epoch < self.controller_epoch:
            return {"error_code": StaleControllerEpochError.code,
                    "error_message": f"controller epoch {epoch} is older than {self.controller_epoch}"}
        self.controller_epoch = epoch
        old = self._applied
        topics = {}
        for name, t in image.topics.items():
            mine = old.topics.get(name)
            if mine is not None and mine.topic_id == t.topic_id:
                # Never back to an older leadership term (a late push of an older image).
                t = replace(t, partitions={p: (mine.partitions[p] if p in mine.partitions
                                               and mine.partitions[p].leader_epoch > pi.leader_epoch else pi)
                                           for p, pi in t.partitions.items()})
            topics[name] = t
        image = replace(image, topics=topics)
        delta = diff_images(old, image)
        self._applied = image
        if not self.is_active:
            self.image = image
        for listener in self._listeners:
            listener(delta, image)
        return {"error_code": 0, "offline_replicas": [list(tp) for tp in self.local_offline_replicas()]}

    def report_log_dir_failure(self) -> None:
        """A log dir of this broker failed: tell the controller (Kafka's log dir event notification), which then
        asks this broker again and hears of the offline replicas in the answer."""
        def notify() -> None:
            try:
                self.zk.notify_log_dir_failure(self.node_id)
            except Exception:  # noqa: BLE001 - the controller learns it at the next push anyway
                log.exception("Cannot notify the controller of a log dir failure")
        threading.Thread(target=notify, name="log-dir-event", daemon=True).start()

    # ================================================================== reading ZooKeeper

    def _read_cluster(self, watch_brokers: Callable | None = None) -> MetadataImage:
        zk = self.zk
        brokers, self._broker_epochs = zk.live_brokers(watch=watch_brokers)
        topics, versions = {}, {}
        for name in zk.topic_names():
            got = zk.read_topic(name)
            if got is None or got[0].topic_id is None:
                continue
            topics[name], versions[name] = got
        self._state_versions = versions
        return MetadataImage(self.cluster_id, zk.controller_id() or NO_LEADER, brokers, topics,
                             zk.broker_configs(), 0, zk.deleted_topic_ids(), zk.client_quotas(), zk.read_acls(),
                             zk.user_scram_credentials(), zk.finalized_features(), zk.group_configs())

    # ================================================================== election

    def _elect(self) -> None:
        if self._stopped or self.is_active:
            return
        current = self.zk.controller_id(watch=self._on_controller_change)
        if current == self.node_id:  # this session's own /controller: adopted, else a session's left-over
            fence = self.zk.own_controller_fence(self.node_id)
            if fence is not None:
                log.info("Broker %d holds /controller from an election whose answer was lost; taking it up",
                         self.node_id)
                self._activate(fence)
                return
        if current is not None:
            self.image = replace(self.image, controller_id=current)
            return
        fence = self.zk.try_become_controller(self.node_id)
        if fence is None:
            self.zk.controller_id(watch=self._on_controller_change)
            return
        self._activate(fence)

    def _on_controller_change(self, event) -> None:
        self._submit(self._controller_changed)

    def _controller_changed(self) -> None:
        current = self.zk.controller_id(watch=self._on_controller_change)
        if self.is_active and current != self.node_id:
            self._resign()
        if current is None or (current == self.node_id and not self.is_active):
            self._elect()
        elif not self.is_active:
            self.image = replace(self.image, controller_id=current)

    def _activate(self, fence: ControllerFence) -> None:
        self.fence = fence
        try:
            self._take_over(fence)
        except BaseException:  # half a failover is no controller: the next _elect (reconnected) starts again
            self.fence = None
            raise

    def _take_over(self, fence: ControllerFence) -> None:
        self.controller_epoch = max(self.controller_epoch, fence.epoch)
        self._shutting_down.clear()  # another controller's controlled shutdowns are not ours to remember
        image = self._read_cluster(watch_brokers=self._on_brokers_change)
        self.image = replace(image, controller_id=self.node_id)
        log.info("Broker %d is the controller (epoch %d): %d broker(s) alive, %d topic(s)", self.node_id,
                 fence.epoch, len(image.brokers), len(image.topics))
        for name in self.zk.topics_being_deleted():
            log.info("Finishing the deletion of topic %s", name)
            t = self.image.topics.get(name)
            if t is None:
                self._delete_topic_znodes(name, None)
            else:
                self._commit(self.image.without_topic(name), MetadataDelta(deleted=(t,)))
        self._offline_replicas.clear()  # brokers report theirs again in the answers to this controller's pushes
        self.zk.take_log_dir_events(watch=self._on_log_dir_event)
        if self.config["authorizer.class.name"]:
            self.zk.watch_acl_changes(self._on_acl_change)
        # Replicas on brokers that are not alive leave their ISRs, as Kafka's new controller puts them offline.
        hosted = {r for t in self.image.topics.values() for pi in t.partitions.values() for r in pi.replicas}
        self._elect_partitions(self._offline_partitions(self.image, hosted - set(self.image.brokers)),
                               "controller failover")
        self.reassignments.resume()
        if self.image.features is None and self.supported_features:  # no /feature yet: a new cluster's levels
            self._finalize_new_cluster()
        self._version += 1
        self._on_loop(self._start_active)

    def _resign(self) -> None:
        if not self.is_active:
            return
        log.info("Broker %d is no longer the controller", self.node_id)
        self.fence = None
        self.image = replace(self._applied, controller_id=NO_LEADER)
        self._on_loop(self._stop_active)

    def _start_active(self) -> None:
        if not self.is_active:
            return
        for broker_id in self.image.brokers:
            self._ensure_pusher(broker_id)
        for callback in self._on_activate:
            callback()
        if self.config["auto.leader.rebalance.enable"] and self._rebalance_task is None:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_loop(),
                                                                          name="leader-rebalance")

    def _stop_active(self) -> None:
        for task in self._pushers.values():
            task.cancel()
        self._pushers.clear()
        self._acked.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        for callback in self._on_resign:
            callback()

    def on_activation(self, start: Callable[[], None], stop: Callable[[], None]) -> None:
        """Callbacks (on the loop) when this broker becomes and stops being the controller."""
        self._on_activate.append(start)
        self._on_resign.append(stop)

    # ================================================================== ACLs written to ZooKeeper by others

    def _on_acl_change(self, event) -> None:
        self._submit(self._acl_changes)

    def _acl_changes(self) -> None:
        """A change notification: ACLs another tool wrote (Kafka's ``kafka-acls`` straight to ZooKeeper) enter
        the image and reach every broker; this controller's own writes read back unchanged."""
        if not self.is_active:
            return
        self.zk.watch_acl_changes(self._on_acl_change)
        acls = self.zk.read_acls()
        if acls != self.image.acls:
            log.info("ACLs changed in ZooKeeper: %d binding(s)", len(acls))
            self.image = replace(self.image, acls=acls)
            self._version += 1
            self._on_loop(self._wake_pushers)

    # ================================================================== log dir failures

    def _on_log_dir_event(self, event) -> None:
        self._submit(self._log_dir_events)

    def _log_dir_events(self) -> None:
        if not self.is_active:
            return
        for broker_id in self.zk.take_log_dir_events(watch=self._on_log_dir_event):
            log.info("Broker %d reported a failed log dir; asking it for its offline replicas", broker_id)
            self._on_loop(self._push_again, broker_id)

    def _push_again(self, broker_id: int) -> None:
        self._acked.pop(broker_id, None)
        event = self._push_wake.get(broker_id)
        if event is not None:
            event.set()

    def _replicas_offline(self, broker_id: int, replicas: frozenset[tuple[str, int]]) -> None:
        """``broker_id`` answered a push naming replicas it cannot serve (a failed log dir): they leave their
        ISRs, and those it led get another leader from the ISR (Kafka's OfflineReplica transition)."""
        if not self.is_active or broker_id not in self.image.brokers:
            return
        known = self._offline_replicas.get(broker_id, frozenset())
        self._offline_replicas[broker_id] = replicas
        changes = {}
        for name, p in replicas - known:
            t = self.image.topics.get(name)
            if t is None or p not in t.partitions:
                continue
            pi = t.partitions[p]
            if pi.leader == broker_id:
                leader, isr = self._choose_leader(name, pi, avoid={broker_id})
                changes[(name, p)] = replace(pi, leader=leader, isr=isr if leader != NO_LEADER else pi.isr,
                                             leader_epoch=pi.leader_epoch + 1)
            elif broker_id in pi.isr and len(pi.isr) > 1:
                changes[(name, p)] = replace(pi, isr=tuple(r for r in pi.isr if r != broker_id),
                                             leader_epoch=pi.leader_epoch + 1)
        if changes:
            self._write_states(changes)
            self._version += 1
            self._on_loop(self._wake_pushers)
        log.info("Broker %d has %d offline replica(s) (log dir failure): %d partition state(s) changed", broker_id,
                 len(replicas), len(changes))

    def _replica_offline(self, broker_id: int, name: str, p: int) -> bool:
        return (name, p) in self._offline_replicas.get(broker_id, ())

    # ================================================================== brokers coming and going

    def _on_brokers_change(self, event) -> None:
        self._submit(self._brokers_changed)

    def _brokers_changed(self) -> None:
        if not self.is_active:
            return
        live, epochs = self.zk.live_brokers(watch=self._on_brokers_change)
        before = self.image.brokers
        # A broker that restarted between two looks (a new registration, same id) left and joined again.
        bounced = {b for b in set(live) & set(before) if epochs.get(b) != self._broker_epochs.get(b)}
        dead = set(before) - set(live) | bounced
        new = set(live) - set(before) | bounced
        if not dead and not new and live == before:
            self._broker_epochs = epochs
            return
        try:
            self._brokers_joined_or_left(live, before, dead, new, bounced)
        except BaseException:  # looked at again from the same starting point (a retry, a reconnection)
            self.image = replace(self.image, brokers=before)
            raise
        self._broker_epochs = epochs

    def _brokers_joined_or_left(self, live: dict, before: dict, dead: set[int], new: set[int],
                                bounced: set[int]) -> None:
        self._shutting_down -= dead | new
        for b in dead | new:  # a restarted broker opened its log dirs again
            self._offline_replicas.pop(b, None)
        if dead:
            log.info("Broker(s) %s left the cluster", sorted(dead))
        if new:
            log.info("Broker(s) %s joined the cluster", sorted(new))
        if bounced:  # first as gone: their leaderships end (a new leader epoch), then back
            self.image = replace(self.image, brokers={b: i for b, i in live.items() if b not in bounced})
            self._elect_partitions(self._offline_partitions(self.image, bounced), "broker restart")
        self.image = replace(self.image, brokers=live)
        self._elect_partitions(self._offline_partitions(self.image, dead), "broker change")
        self._version += 1
        for b in dead:  # a bounced broker's pusher starts again: it has applied nothing yet
            self._on_loop(self._drop_pusher, b)
        self._on_loop(self._wake_pushers)

    def _offline_partitions(self, image: MetadataImage, dead: set[int] = frozenset()) -> list[tuple[str, int]]:
        """Partitions whose leader is not alive, or that lost a replica of their ISR."""
        out = []
        for t in image.topics.values():
            for p, pi in t.partitions.items():
                if pi.leader not in image.brokers or set(pi.isr) & dead or pi.leader_epoch < 0:
                    out.append((t.name, p))
        return out

    def _unclean_allowed(self, topic: str) -> bool:
        try:
            return bool(self.topic_config(topic)["unclean.leader.election.enable"])
        except (KeyError, InvalidConfigError):
            return False

    def _choose_leader(self, topic: str, pi: PartitionImage, avoid: set[int] = frozenset(),
                       unclean: bool | None = None) -> tuple[int, tuple[int, ...]]:
        """Kafka's offline partition election: the first replica in assignment order that is alive and in the
        ISR; else, with unclean election on, the first alive replica (the ISR becomes it alone); else none,
        and the ISR keeps its last member, as Kafka keeps it."""
        live = set(self.image.brokers) - avoid - self._shutting_down
        live -= {r for r in pi.replicas if self._replica_offline(r, topic, pi.partition)}
        isr_live = tuple(r for r in pi.isr if r in live)
        # The ISR keeps its live members: a replica that left (or restarted) must catch up again. A leader that
        # is alive and in sync keeps leading (only its followers left).
        isr = tuple(x for x in pi.replicas if x in isr_live)
        if pi.leader in isr_live:
            return pi.leader, isr
        for r in pi.replicas:
            if r in isr_live:
                return r, isr
        if unclean if unclean is not None else self._unclean_allowed(topic):
            for r in pi.replicas:
                if r in live:
                    log.warning("Unclean leader election of %s-%d: broker %d, not in the ISR %s, leads; records "
                                "only the old leader had are lost", topic, pi.partition, r, list(pi.isr))
                    return r, (r,)
        return NO_LEADER, (pi.isr[-1:] if pi.isr else pi.replicas[:1])

    def _elect_partitions(self, tps: Iterable[tuple[str, int]], why: str, avoid: set[int] = frozenset()) -> int:
        changes: dict[tuple[str, int], PartitionImage] = {}
        for name, p in tps:
            t = self.image.topics.get(name)
            if t is None or p not in t.partitions:
                continue
            pi = t.partitions[p]
            leader, isr = self._choose_leader(name, pi, avoid)
            if (leader, isr) != (pi.leader, pi.isr) or pi.leader_epoch < 0:
                changes[(name, p)] = replace(pi, leader=leader, isr=isr, leader_epoch=pi.leader_epoch + 1)
        if changes:
            self._write_states(changes)
            online = sum(1 for c in changes.values() if c.leader != NO_LEADER)
            log.info("Leader election (%s): %d partition(s) changed, %d of them with a leader", why, len(changes),
                     online)
        return len(changes)

    def _write_states(self, changes: Mapping[tuple[str, int], PartitionImage],
                      extra: Callable[[object], None] | None = None) -> None:
        """Write partition states with compare-and-set on their znode versions (and the controller fence), with
        what ``extra`` adds to the same transaction (a reassignment's topic assignments), then take them into
        the image."""
        fence = self.fence
        if fence is None:
            raise FencedControllerError("not the controller")
        versions = self._state_versions

        def build(tx) -> None:
            for (name, p), pi in changes.items():
                data = partition_state(pi, fence.epoch)
                v = versions.get(name, {}).get(p)
                if v is None:
                    tx.create(partition_state_path(name, p), data)
                else:
                    tx.set_data(partition_state_path(name, p), data, version=v)
            if extra is not None:
                extra(tx)
        try:
            commit_fenced(self.zk, fence, build)
        except FencedControllerError:
            raise
        except Exception as e:  # a state moved under us (a write whose answer was lost, a bug): reload, retry
            log.warning("Writing %d partition state(s) failed (%s); reloading them", len(changes),
                        type(e).__name__ if not str(e) else e)
            for name in {n for n, _ in changes}:
                got = self.zk.read_topic(name)
                if got is not None:
                    self.image = self.image.with_topic(got[0])
                    self._state_versions[name] = got[1]
            raise StatesReloaded(f"{len(changes)} partition state(s) had moved: {type(e).__name__}") from e
        topics = dict(self.image.topics)
        for (name, p), pi in changes.items():
            v = versions.setdefault(name, {})
            v[p] = v[p] + 1 if p in v else 0
            t = topics[name]
            topics[name] = replace(t, partitions={**t.partitions, p: replace(pi, partition_epoch=v[p])})
        self.image = replace(self.image, topics=topics)

    # ================================================================== changes from the inherited rules

    def _place(self, num_partitions, replication_factor, assignments, start=0, fixed_rf=None):
        if assignments:
            return super()._place(num_partitions, replication_factor, assignments, start, fixed_rf)
        if replication_factor < -1 or replication_factor == 0 or num_partitions < -1 or num_partitions == 0:
            return super()._place(num_partitions, replication_factor, assignments, start, fixed_rf)
        n = self.config["num.partitions"] if num_partitions == -1 else num_partitions
        rf = fixed_rf or (self.config["default.replication.factor"] if replication_factor == -1
                          else replication_factor)
        brokers = {b.node_id: b.rack for b in self.image.brokers.values()}
        if rf > len(brokers):
            raise InvalidReplicationFactorError(
                f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
        return assign_replicas(brokers, n, rf, start)

    def _new_partition(self, p: int, replicas: list[int]) -> PartitionImage:
        """A new partition is led by its first live replica, with every live replica in sync (empty logs)."""
        live = [r for r in replicas if r in self.image.brokers]
        leader = live[0] if live else NO_LEADER
        return PartitionImage(p, leader, 0, tuple(replicas), tuple(live) if live else tuple(replicas[:1]))

    def _check_broker_resource(self, resource: str) -> None:
        if resource not in ("", *map(str, self.image.brokers)):
            raise InvalidConfigError(f"Unknown broker {resource}")

    def _persist(self, image: MetadataImage | None = None) -> None:  # noqa: ARG002 - writes go by delta
        return

    def _commit(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Write the change to ZooKeeper (one fenced transaction per step), then make it the image and push it."""
        fence = self.fence
        if fence is None:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        zk = self.zk
        try:
            for t in delta.deleted:
                self._delete_topic(t, fence)
            for t in delta.created:
                self._create_topic_znodes(t, fence)
            for t, added in delta.partitions_added:
                def add(tx, t=t, added=added) -> None:
                    tx.set_data(topic_path(t.name), topic_assignment(t))
                    for p in added:
                        tx.create(f"{BROKER_TOPICS}/{t.name}/partitions/{p}", b"")
                        tx.create(partition_state_path(t.name, p), partition_state(t.partitions[p], fence.epoch))
                commit_fenced(zk, fence, add)
                self._state_versions.setdefault(t.name, {}).update({p: 0 for p in added})
            changed_topics = {t.name: t for t in delta.configs_changed if t.name not in
                              {c.name for c in delta.created}}
            if delta.client_quotas_changed:
                self._write_client_quotas(image, fence)
            if delta.group_configs_changed:
                self._write_group_configs(image, fence)
            if delta.acls_changed:
                self._write_acls(image, fence)
            if delta.user_scram_changed:
                self._write_user_scram(image, fence)
            if delta.features_changed and image.features is not None:
                image = replace(image, features=self._write_features(image.features, fence))
            if delta.broker_configs_changed:
                self._write_broker_configs(image, fence)
            elif changed_topics:
                def configs(tx) -> None:
                    for t in changed_topics.values():
                        old = self.image.topics.get(t.name)
                        if old is None or old.configs != t.configs:
                            tx.set_data(f"{CONFIG_TOPICS}/{t.name}", config_entity(t.configs))
                            tx.create(f"{CONFIG_CHANGES}/config_change_",
                                      b'{"version":2,"entity_path":"topics/' + t.name.encode() + b'"}',
                                      sequence=True)
                        if old is None or old.tiering != t.tiering:
                            tx.set_data(topic_path(t.name), topic_assignment(t))
                commit_fenced(zk, fence, configs)
        except (FencedControllerError, NotControllerError):
            raise
        except KafkaStorageError:
            raise
        except Exception as e:
            log.error("Cannot write the cluster metadata to ZooKeeper: %s; the change is refused", e)
            raise KafkaStorageError(f"cannot write the cluster metadata to ZooKeeper: {e}") from e
        self.image = replace(image, brokers=self.image.brokers, controller_id=self.node_id)
        self._version += 1
        self._on_loop(self._wake_pushers)

    def _create_topic_znodes(self, t: TopicImage, fence: ControllerFence) -> None:
        def build(tx) -> None:
            tx.create(f"{CONFIG_TOPICS}/{t.name}", config_entity(t.configs))
            tx.create(topic_path(t.name), topic_assignment(t))
            tx.create(f"{BROKER_TOPICS}/{t.name}/partitions", b"")
            for p, pi in sorted(t.partitions.items()):
                tx.create(f"{BROKER_TOPICS}/{t.name}/partitions/{p}", b"")
                tx.create(partition_state_path(t.name, p), partition_state(pi, fence.epoch))
        commit_fenced(self.zk, fence, build)
        self._state_versions[t.name] = {p: 0 for p in t.partitions}

    def _delete_topic(self, t: TopicImage, fence: ControllerFence) -> None:
        """Kafka's order: mark the deletion (a new controller finishes it), then remove the topic's znodes and
        remember its id; the brokers delete their replicas when the pushed image no longer has it."""
        marker = f"{DELETE_TOPICS}/{t.name}"
        if not self.zk.kazoo.exists(marker):
            commit_fenced(self.zk, fence, lambda tx: tx.create(marker, b""))
        self._delete_topic_znodes(t.name, t)

    def _delete_topic_znodes(self, name: str, t: TopicImage | None) -> None:
        fence = self.fence
        zk = self.zk
        paths = []

        def walk(path: str) -> None:
            for child in zk.kazoo.get_children(path):
                walk(f"{path}/{child}")
            paths.append(path)
        if zk.kazoo.exists(topic_path(name)):
            walk(topic_path(name))

        def build(tx) -> None:
            for path in paths:
                tx.delete(path)
            if zk.kazoo.exists(f"{CONFIG_TOPICS}/{name}"):
                tx.delete(f"{CONFIG_TOPICS}/{name}")
            if t is not None:
                tx.create(f"{DELETED_TOPIC_IDS}/{uuid_to_str(t.topic_id)}", name.encode())
            tx.delete(f"{DELETE_TOPICS}/{name}")
        commit_fenced(zk, fence, build)
        self._state_versions.pop(name, None)

    def _write_acls(self, image: MetadataImage, fence: ControllerFence) -> None:
        """Kafka's layout: one znode per resource pattern holding its entries, and a change notification per
        changed pattern (what a Kafka broker's AclAuthorizer watching the same ZooKeeper reloads)."""
        def patterns(acls) -> dict:
            out: dict = {}
            for b in acls:
                out.setdefault((b.resource_type, b.pattern_type, b.resource_name), []).append(b)
            return out
        old, new = patterns(self.image.acls), patterns(image.acls)
        changed = [k for k in set(old) | set(new) if old.get(k) != new.get(k)]
        if not changed:
            return
        self.zk.ensure_acl_paths()

        def build(tx) -> None:
            for key in sorted(changed):
                path = acls.znode_path(*key)
                if key not in new:
                    tx.delete(path)
                elif key in old:
                    tx.set_data(path, acls.resource_entry_json(new[key]))
                else:
                    tx.create(path, acls.resource_entry_json(new[key]))
                parent, data = acls.change_notification(*key)
                tx.create(f"{parent}/{acls.ACL_CHANGE_PREFIX}", data, sequence=True)
        commit_fenced(self.zk, fence, build)

    def _write_broker_configs(self, image: MetadataImage, fence: ControllerFence) -> None:
        def build(tx) -> None:
            for resource in set(image.broker_configs) | set(self.image.broker_configs):
                node = DEFAULT_BROKER_CONFIG if resource == "" else resource
                path = f"{CONFIG_BROKERS}/{node}"
                data = config_entity(image.broker_configs.get(resource, {}))
                if self.zk.kazoo.exists(path):
                    tx.set_data(path, data)
                else:
                    tx.create(path, data)
                tx.create(f"{CONFIG_CHANGES}/config_change_",
                          b'{"version":2,"entity_path":"brokers/' + node.encode() + b'"}', sequence=True)
        commit_fenced(self.zk, fence, build)

    def _write_group_configs(self, image: MetadataImage, fence: ControllerFence) -> None:
        """``/config/groups/<group>`` (Kafka's ConfigType GROUP path) holds a group's config overrides; a group
        left with none loses its znode. No ``/config/changes`` notification: Kafka 3.9's ZooKeeper brokers have
        no handler for the groups entity type, and tierlog's brokers get the controller's image."""
        changed = [g for g in set(image.group_configs) | set(self.image.group_configs)
                   if image.group_configs.get(g) != self.image.group_configs.get(g)]
        self.zk.kazoo.ensure_path(CONFIG_GROUPS)

        def build(tx) -> None:
            for group in changed:
                node = f"{CONFIG_GROUPS}/{quote(group, safe='')}"
                configs = image.group_configs.get(group)
                exists = self.zk.kazoo.exists(node) is not None
                if not configs:
                    if exists:
                        tx.delete(node)
                elif exists:
                    tx.set_data(node, config_entity(configs))
                else:
                    tx.create(node, config_entity(configs))
        commit_fenced(self.zk, fence, build)

    def _write_client_quotas(self, image: MetadataImage, fence: ControllerFence) -> None:
        """Kafka's layout: ``/config/<entity path>`` holds the entity's quotas (an emptied entity keeps its
        znode with no config), and a ``/config/changes`` notification names the entity."""
        changed = [p for p in set(image.client_quotas) | set(self.image.client_quotas)
                   if image.client_quotas.get(p) != self.image.client_quotas.get(p)]
        for path in changed:  # parents outside the transaction (a transaction cannot make them)
            self.zk.kazoo.ensure_path("/config/" + path.rpartition("/")[0])

        def build(tx) -> None:
            for path in changed:
                node = f"/config/{path}"
                try:  # a user's SCRAM credentials share the znode (written by _write_user_scram): kept
                    data, _ = self.zk.kazoo.get(node)
                    scram = {k: v for k, v in json.loads(data or b"{}").get("config", {}).items()
                             if k.startswith("SCRAM-")}
                    exists = True
                except NoNodeError:
                    scram, exists = {}, False
                data = config_entity({**scram, **image.client_quotas.get(path, {})})
                if exists:
                    tx.set_data(node, data)
                else:
                    tx.create(node, data)
                tx.create(f"{CONFIG_CHANGES}/config_change_",
                          b'{"version":2,"entity_path":"' + path.encode() + b'"}', sequence=True)
        commit_fenced(self.zk, fence, build)
    def _write_user_scram(self, image: MetadataImage, fence: ControllerFence) -> None:
        """/config/users/<user> as Kafka's ZooKeeper mode keeps it: {"version":1,"config":{"SCRAM-SHA-256":
        "salt=...,stored_key=...,server_key=...,iterations=..."}}, keys other than SCRAM ones kept, and a
        config change notification per user."""
        zk = self.zk
        if not zk.kazoo.exists(CONFIG_USERS):
            zk.kazoo.ensure_path(CONFIG_USERS)
        users = {u for u in set(image.user_scram) | set(self.image.user_scram)
                 if image.user_scram.get(u) != self.image.user_scram.get(u)}

        def build(tx) -> None:
            for user in sorted(users):
                path = f"{CONFIG_USERS}/{quote(user, safe='')}"
                try:
                    data, _ = zk.kazoo.get(path)
                    others = {k: v for k, v in json.loads(data or b"{}").get("config", {}).items()
                              if not k.startswith("SCRAM-")}
                    exists = True
                except NoNodeError:
                    others, exists = {}, False
                entity = config_entity({**others, **image.user_scram.get(user, {})})
                if exists:
                    tx.set_data(path, entity)
                else:
                    tx.create(path, entity)
                tx.create(f"{CONFIG_CHANGES}/config_change_",
                          b'{"version":2,"entity_path":"users/' + quote(user, safe='').encode() + b'"}',
                          sequence=True)
        commit_fenced(zk, fence, build)

    def _write_features(self, features: FinalizedFeatures, fence: ControllerFence) -> FinalizedFeatures:
        """Kafka's /feature znode (FeatureZNode v2); its data version is the features' epoch."""
        exists = self.zk.kazoo.exists(FEATURE_ZNODE) is not None
        data = encode_feature_znode(features)

        def build(tx) -> None:
            if exists:
                tx.set_data(FEATURE_ZNODE, data)
            else:
                tx.create(FEATURE_ZNODE, data)
        commit_fenced(self.zk, fence, build)
        stat = self.zk.kazoo.exists(FEATURE_ZNODE)
        return replace(features, epoch=stat.version if stat is not None else features.epoch)

    def support_features(self, supported: Mapping[str, tuple[int, int]]) -> None:
        self.supported_features = dict(supported)
        if self.image.features is None and self.is_active:
            self._submit(self._finalize_new_cluster)  # on the controller's thread, as its other ZooKeeper writes

    def complete_disablement(self, name: str, epoch: int) -> None:
        if self.is_active:
            super().complete_disablement(name, epoch)

    # ================================================================== producer ids

    def allocate_producer_id(self) -> int:
        with self._pid_lock:
            if self._next_producer_id >= self._producer_id_block_end:
                start = self.zk.allocate_producer_id_block(self.node_id, 1000)
                self._next_producer_id, self._producer_id_block_end = start, start + 1000
            pid = self._next_producer_id
            self._next_producer_id += 1
            return pid

    async def next_producer_id(self) -> int:
        if self._next_producer_id < self._producer_id_block_end:
            return self.allocate_producer_id()
        return await asyncio.get_running_loop().run_in_executor(None, self.allocate_producer_id)

    # ================================================================== topics asked for by brokers

    async def auto_create_topic(self, name: str) -> TopicImage | None:
        if self.is_active:
            return await self.call(self.create_topic, name)
        self.request_topic_creation(name)
        return None

    def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> None:
        self.request_topic_creation(name, num_partitions, replication_factor, configs)
        raise CoordinatorNotAvailableError(f"{name} is being created")

    def request_topic_creation(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                               configs: Mapping[str, str] | None = None) -> None:
        """Create ``name`` in the background: here when this broker is the controller, else by CreateTopics
        to the controller. One attempt at a time per topic; failures are logged once per attempt."""
        if name in self._creating or self._loop is None:
            return
        self._creating.add(name)

        async def create() -> None:
            try:
                if self.is_active:
                    await self.call(self.create_topic, name, num_partitions, replication_factor, configs=configs)
                    return
                target = self.image.controller_id
                if target < 0:
                    raise NotControllerError("no controller is known yet")
                response = await self.channel.request(target, ApiKey.CREATE_TOPICS, {
                    "topics": [{"name": name, "num_partitions": num_partitions,
                                "replication_factor": replication_factor, "assignments": [],
                                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                    "timeout": 30000, "validate_only": False})
                code = int(response.topics[0].error_code)
                if code and code != TopicAlreadyExistsError.code:
                    raise error_for_code(code)(response.topics[0].error_message or "")
            except Exception as e:  # noqa: BLE001 - the client asks again
                self._creation_failures.warning((name, type(e).__name__), "Creating topic %s failed: %s", name,
                                                describe_error(e) if isinstance(e, KafkaError) else e)
            finally:
                self._creating.discard(name)
        task = self._loop.create_task(create(), name=f"create-{name}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ================================================================== leadership requests

    def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Kafka's ControlledShutdown: move the leaderships of ``broker_id`` (partitions with more than one
        replica) to another ISR member; answers the partitions it still leads."""
        if broker_id not in self.image.brokers:
            return []
        self._shutting_down.add(broker_id)
        led = [(t.name, p) for t in self.image.topics.values() for p, pi in t.partitions.items()
               if pi.leader == broker_id and len(pi.replicas) > 1]
        stuck = [(n, p) for n, p in led if not set(self.image.topics[n].partitions[p].isr) - {broker_id}]
        changes = {}
        for name, p in led:
            pi = self.image.topics[name].partitions[p]
            leader, isr = self._choose_leader(name, pi, avoid={broker_id}, unclean=False)
            if leader != NO_LEADER:
                changes[(name, p)] = replace(pi, leader=leader, isr=isr, leader_epoch=pi.leader_epoch + 1)
        # Where it follows, it leaves the ISR now, so acks=all stops waiting for it (Kafka's OfflineReplica).
        for t in self.image.topics.values():
            for p, pi in t.partitions.items():
                if (pi.leader != broker_id and pi.leader in self.image.brokers and broker_id in pi.isr
                        and len(pi.isr) > 1):
                    changes[(t.name, p)] = replace(pi, isr=tuple(r for r in pi.isr if r != broker_id),
                                                   leader_epoch=pi.leader_epoch + 1)
        if changes:
            self._write_states(changes)
            self._version += 1
            self._on_loop(self._wake_pushers)
        # A partition whose ISR is the stopping leader alone cannot move whatever the broker waits (Kafka would
        # have it retry): it is not reported, so the broker stops without waiting for the impossible.
        moved = sum(1 for tp in led if tp in changes)
        log.info("Controlled shutdown of broker %d: %d leadership(s) moved, %d without another in-sync replica "
                 "stay until it returns, %d ISR(s) left", broker_id, moved, len(stuck), len(changes) - moved)
        return [tp for tp in led if tp not in changes and tp not in stuck]

    def alter_partition(self, broker_id: int,
                        items: Iterable[tuple[uuid.UUID, int, int, tuple[int, ...], int]]) -> dict:
        """AlterPartition from a leader: for each (topic id, partition, leader epoch, new ISR, partition epoch),
        write the new ISR when the leader's view is current (Kafka's rules: the sender leads, its leader epoch
        is the current one, its partition epoch matches the state's znode version; a replica joins the ISR
        only while it is alive and not shutting down). Answers {(topic id, partition): (error code, the
        partition's state or None)}; a retry of a change already written is answered with the state."""
        results: dict = {}
        changes: dict[tuple[str, int], PartitionImage] = {}
        keys: dict[tuple[str, int], tuple] = {}
        live = set(self.image.brokers) - self._shutting_down
        for topic_id, p, leader_epoch, new_isr, partition_epoch in items:
            t = self.image.topic_by_id(topic_id)
            key = (topic_id, p)
            if t is None or p not in t.partitions:
                results[key] = (UnknownTopicOrPartitionError.code, None)
                continue
            pi = t.partitions[p]
            if leader_epoch != pi.leader_epoch:
                results[key] = (FencedLeaderEpochError.code, None)
            elif pi.leader != broker_id:
                results[key] = (NotLeaderOrFollowerError.code, None)
            elif partition_epoch != pi.partition_epoch:
                same = tuple(new_isr) == pi.isr
                results[key] = (0, pi) if same else (InvalidUpdateVersionError.code, None)
            elif broker_id not in new_isr or any(r not in pi.replicas for r in new_isr):
                results[key] = (InvalidRequestError.code, None)
            elif any(r not in live or self._replica_offline(r, t.name, p) for r in set(new_isr) - set(pi.isr)):
                results[key] = (IneligibleReplicaError.code, None)
            else:
                changes[(t.name, p)] = replace(pi, isr=tuple(r for r in pi.replicas if r in new_isr))
                keys[(t.name, p)] = key
        if changes:
            self._write_states(changes)
            self._version += 1
            self._on_loop(self._wake_pushers)
            for name, p in changes:
                state = self.image.topics[name].partitions[p]
                results[keys[(name, p)]] = (0, state)
                log.info("ISR of %s-%d is now %s (leader %d, partition epoch %d)", name, p, list(state.isr),
                         state.leader, state.partition_epoch)
        # A reassignment ends once its target is in sync (a retried request checks again after a failed write).
        names = {t.topic_id: t.name for t in self.image.topics.values()}
        self.reassignments.maybe_complete((names[tid], p) for tid, p in results if tid in names)
        return results

    def run_election(self, election_type: int, partitions: Iterable[tuple[str, int]] | None) -> dict:
        """ElectLeaders: ``election_type`` 0 preferred, 1 unclean. Answers {(topic, partition): error or None}."""
        if partitions is None:  # every partition, each answered (ELECTION_NOT_NEEDED too), as Kafka 3.9's controller
            partitions = [(t.name, p) for t in self.image.topics.values() for p in t.partitions]
        results, changes = {}, {}
        for name, p in partitions:
            t = self.image.topics.get(name)
            if t is None or p not in t.partitions:
                results[(name, p)] = UnknownTopicOrPartitionError("The partition does not exist.")
                continue
            pi = t.partitions[p]
            if election_type == 0:
                preferred = pi.replicas[0]
                if pi.leader == preferred:
                    results[(name, p)] = ElectionNotNeededError("Leader election not needed for topic partition.")
                elif preferred not in self.image.brokers or preferred not in pi.isr:
                    results[(name, p)] = PreferredLeaderNotAvailableError(
                        f"Failed to elect leader for partition {name}-{p} under strategy "
                        f"PreferredReplicaPartitionLeaderElectionStrategy")
                else:
                    changes[(name, p)] = replace(pi, leader=preferred, leader_epoch=pi.leader_epoch + 1)
                    results[(name, p)] = None
            else:
                if pi.leader in self.image.brokers:
                    results[(name, p)] = ElectionNotNeededError("Leader election not needed for topic partition.")
                    continue
                leader, isr = self._choose_leader(name, pi, unclean=True)
                if leader == NO_LEADER:
                    results[(name, p)] = EligibleLeadersNotAvailableError(
                        f"Failed to elect leader for partition {name}-{p} under strategy "
                        f"OfflinePartitionLeaderElectionStrategy(true)")
                else:
                    changes[(name, p)] = replace(pi, leader=leader, isr=isr, leader_epoch=pi.leader_epoch + 1)
                    results[(name, p)] = None
        if changes:
            self._write_states(changes)
            self._version += 1
            self._on_loop(self._wake_pushers)
        return results

    def _imbalanced(self) -> list[tuple[str, int]]:
        """Partitions to move back to their preferred replica: those of every broker whose share of
        partitions led elsewhere exceeds ``leader.imbalance.per.broker.percentage`` (preferred replica alive
        and in the ISR)."""
        pct = self.config["leader.imbalance.per.broker.percentage"]
        by_broker: dict[int, list] = {}
        for t in self.image.topics.values():
            for p, pi in t.partitions.items():
                by_broker.setdefault(pi.replicas[0], []).append((t.name, p, pi))
        out = []
        for broker, parts in by_broker.items():
            if broker not in self.image.brokers or broker in self._shutting_down:
                continue
            off = [(n, p) for n, p, pi in parts if pi.leader != broker and broker in pi.isr]
            if parts and len(off) * 100 > pct * len(parts):
                out += off
        return out

    async def _rebalance_loop(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while self.is_active:
            await asyncio.sleep(interval)
            if not self.is_active:
                return
            try:
                tps = await asyncio.get_running_loop().run_in_executor(self._executor, self._imbalanced)
                if tps:
                    log.info("Preferred replica election for %d imbalanced partition(s)", len(tps))
                    await self.call(self.run_election, 0, tps)
            except asyncio.CancelledError:
                raise
            except (FencedControllerError, NotControllerError, *SESSION_ENDED) as e:
                # A controller paused past its session wakes up here: expected, one line, and it resigns.
                log.info("Automatic preferred replica election skipped: broker %d is no longer the controller "
                         "(%s: %s)", self.node_id, type(e).__name__, e)
                self._submit(self._resign)
                return
            except Exception:  # noqa: BLE001 - tried again next interval
                log.exception("Automatic preferred replica election failed")

    # ================================================================== pushing the image

    def _ensure_pusher(self, broker_id: int) -> None:
        if not self.is_active or broker_id in self._pushers:
            return
        self._push_wake[broker_id] = asyncio.Event()
        self._push_wake[broker_id].set()
        self._pushers[broker_id] = asyncio.get_running_loop().create_task(self._push_to(broker_id),
                                                                          name=f"push-metadata-{broker_id}")

    def _drop_pusher(self, broker_id: int) -> None:
        task = self._pushers.pop(broker_id, None)
        if task is not None:
            task.cancel()
        self._acked.pop(broker_id, None)
        if self.channel is not None:
            self.channel.forget(broker_id)
        self._notify_propagated()

    def _wake_pushers(self) -> None:
        for broker_id in self.image.brokers:
            self._ensure_pusher(broker_id)
        for event in self._push_wake.values():
            event.set()

    async def _push_to(self, broker_id: int) -> None:
        """Send the newest image to ``broker_id`` whenever it has not applied it yet; retried with back-off."""
        wait = PUSH_RETRY_S[0]
        wake = self._push_wake[broker_id]
        while self.is_active:
            await wake.wait()
            wake.clear()
            version, image, fence = self._version, self.image, self.fence
            if fence is None or self._acked.get(broker_id, -1) >= version:
                continue
            try:
                answer = await self.channel.send(broker_id, InternalApi.UPDATE_METADATA,
                                                 image_to_wire(image, fence.epoch),
                                                 timeout_ms=self.config["controller.socket.timeout.ms"])
                if answer.get("error_code"):
                    raise RuntimeError(answer.get("error_message") or f"error {answer['error_code']}")
                offline = frozenset((str(t), int(p)) for t, p in answer.get("offline_replicas") or ())
                if offline != self._offline_replicas.get(broker_id, frozenset()):
                    self._submit(self._replicas_offline, broker_id, offline)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a broker that is starting or dying: retried
                log.debug("Metadata push to broker %d failed: %s", broker_id, e)
                self.channel.forget(broker_id)
                await asyncio.sleep(wait)
                wait = min(wait * 2, PUSH_RETRY_S[1])
                wake.set()
                continue
            wait = PUSH_RETRY_S[0]
            self._acked[broker_id] = version
            if self._version > version:
                wake.set()
            self._notify_propagated()

    def _notify_propagated(self) -> None:
        cond = self._propagated

        async def notify() -> None:
            async with cond:
                cond.notify_all()
        if cond is not None:
            task = asyncio.get_running_loop().create_task(notify())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def wait_propagated(self, version: int, timeout_s: float) -> bool:
        """Wait until every live broker applied ``version`` (or left); False after ``timeout_s``."""
        def done() -> bool:
            return not self.is_active or all(self._acked.get(b, -1) >= version for b in self.image.brokers)
        if done():
            return True
        try:
            async with self._propagated:
                await asyncio.wait_for(self._propagated.wait_for(done), timeout_s)
            return True
        except TimeoutError:
            log.warning("Metadata version %d did not reach every broker within %.0f s", version, timeout_s)
            return False


__all__ = ["NO_LEADER", "ZkController", "image_from_wire", "image_to_wire"]
