"""The cluster's metadata in ZooKeeper, in Kafka's ZooKeeper-mode layout (Kafka's ``KafkaZkClient``).

Paths and JSON shapes are Kafka's, so a Kafka engineer finds everything where ZooKeeper-mode Kafka keeps it:

==========================================  =====================================================================
``/cluster/id``                             ``{"version":"1","id":...}``
``/controller``                             ephemeral, ``{"version":1,"brokerid":N,"timestamp":...}``
``/controller_epoch``                       the controller epoch as a number; every controller write checks its
                                            znode version (the fence of a paused old controller)
``/brokers/ids/<id>``                       ephemeral registration (version 5: endpoints, security map, rack)
``/brokers/topics/<topic>``                 ``{"version":3,"topic_id":...,"partitions":{"0":[1,2,3]},...}`` with
                                            ``"adding_replicas"`` and ``"removing_replicas"`` of partitions being
                                            reassigned (KIP-455), plus ``"tiering"`` (the KIP-950 draft's state,
                                            policy and epoch) and ``"restored"`` (tierlog's: where each partition
                                            of a topic rebuilt from the remote tier starts)
``.../partitions/<p>/state``                ``{"version":1,"leader":...,"leader_epoch":...,"isr":[...],
                                            "controller_epoch":...}``; its znode version is the partition epoch
``/config/topics/<topic>``                  ``{"version":1,"config":{...}}`` (overrides only)
``/config/brokers/<id>|<default>``          dynamic broker configs, same shape
``/config/changes/config_change_<seq>``     ``{"version":2,"entity_path":"topics/<topic>"}``
``/admin/delete_topics/<topic>``            a deletion in progress (a new controller finishes it)
``/latest_producer_id_block``               ``{"version":1,"broker":N,"block_start":"0","block_end":"999"}``
``/tierlog/deleted_topics/<topic id>``      tierlog's own: every topic id the cluster deleted (the remote store
                                            reconciler deletes leftovers of these only)
==========================================  =====================================================================

Calls are synchronous kazoo calls: the controller makes them on its own thread (Kafka's controller event
thread), brokers through :meth:`ZkClient.call` off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from tierlog.cluster.acls import (
    ACL_CHANGES,
    ACL_EXTENDED_CHANGES,
    ACL_EXTENDED_ROOT,
    ACL_ROOT,
    AclBinding,
    PatternType,
    add_bindings,
    parse_resource_entry,
    resource_type_names,
)
from tierlog.cluster.features import FEATURE_ZNODE, FinalizedFeatures, decode_feature_znode
from tierlog.cluster.image import (
    BrokerImage,
    PartitionImage,
    TopicImage,
    TopicTiering,
    restore_points_from_json,
    restore_points_to_json,
)
from tierlog.errors import StartupError
from tierlog.kafka_uuid import uuid_from_str, uuid_to_str

log = logging.getLogger(__name__)

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"  # SCRAM credentials (and, in Kafka, user quotas) per user
CONFIG_CHANGES = "/config/changes"
CONFIG_GROUPS = "/config/groups"  # group configs (Kafka's ConfigType GROUP), one znode per group id
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_IPS = "/config/ips"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
DELETED_TOPIC_IDS = "/tierlog/deleted_topics"
LOG_DIR_EVENTS = "/log_dir_event_notification"
#: What a broker creates at first start (Kafka's KafkaZkClient.createTopLevelPaths, plus tierlog's own).
PERSISTENT_PATHS = ("/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/topics", "/config/brokers",
                    "/config/changes", "/admin/delete_topics", "/isr_change_notification", LOG_DIR_EVENTS,
                    DELETED_TOPIC_IDS, CONFIG_USERS, CONFIG_CLIENTS)
DEFAULT_BROKER_CONFIG = "<default>"

#: What a ZooKeeper call raises when this broker's session is gone or suspended (a SIGSTOP, a long pause):
#: the session's own state change handles it, so callers skip the call rather than report a failure.
SESSION_ENDED = (SessionExpiredError, ConnectionLoss)


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def _dump(d: object) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


def _load(data: bytes) -> dict:
    return json.loads(data.decode()) if data else {}


# ---------------------------------------------------------------------------------------------- codecs

def broker_registration(broker: BrokerImage, endpoints: Iterable[tuple[str, str, int, str]]) -> bytes:
    """Kafka's version-5 broker znode; ``endpoints`` are (listener name, host, port, security protocol)."""
    eps = list(endpoints)
    d = {"version": 5, "host": broker.host, "port": broker.port, "jmx_port": -1,
         "timestamp": str(int(time.time() * 1000)), "features": {},
         "endpoints": [f"{name}://{host}:{port}" for name, host, port, _ in eps],
         "listener_security_protocol_map": {name: proto for name, _, _, proto in eps}}
    if broker.rack is not None:
        d["rack"] = broker.rack
    return _dump(d)


def parse_broker_registration(broker_id: int, data: bytes) -> BrokerImage:
    d = _load(data)
    endpoints = []
    for ep in d.get("endpoints", []):
        name, _, rest = ep.partition("://")
        host, _, port = rest.rpartition(":")
        endpoints.append((name, host, int(port)))
    host, port = d.get("host"), d.get("port", -1)
    if (not host or port in (None, -1)) and endpoints:
        _, host, port = endpoints[0]
    return BrokerImage(broker_id, host or "", int(port), d.get("rack"), tuple(endpoints))


def topic_assignment(topic: TopicImage) -> bytes:
    parts = sorted(topic.partitions.items())
    # Kafka's TopicZNode: a partition being reassigned (KIP-455) lists its adding and removing replicas.
    d = {"version": 3, "topic_id": uuid_to_str(topic.topic_id),
         "partitions": {str(p): list(pi.replicas) for p, pi in parts},
         "adding_replicas": {str(p): list(pi.adding_replicas) for p, pi in parts if pi.adding_replicas},
         "removing_replicas": {str(p): list(pi.removing_replicas) for p, pi in parts if pi.removing_replicas}}
    if topic.tiering is not None:
        d["tiering"] = topic.tiering.to_json()
    if topic.restored:
        d["restored"] = restore_points_to_json(topic.restored)
    return _dump(d)


def partition_state(p: PartitionImage, controller_epoch: int) -> bytes:
    return _dump({"version": 1, "leader": p.leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr),
                  "controller_epoch": controller_epoch})


def config_entity(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(configs.items()))})


# ---------------------------------------------------------------------------------------------- client

@dataclass(frozen=True, slots=True)
class ControllerFence:
    """The controller epoch this controller won and the znode version of ``/controller_epoch`` then: every
    write checks the version, so a controller that was paused past its election writes nothing."""

    epoch: int
    zk_version: int


class ZkClient:
    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None):
        self.connect = connect
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self.kazoo = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000,
                                 connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1},
                                 command_retry={"max_tries": 0})
        self._state_listeners: list[Callable[[str], None]] = []
        self._closing = False
        self.kazoo.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if self._closing:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost (%s): this broker's registration and any controllership are gone",
                        self.connect)
        elif state == KazooState.SUSPENDED:
            log.warning("Disconnected from ZooKeeper (%s); reconnecting", self.connect)
        for listener in list(self._state_listeners):
            listener(state)

    def add_state_listener(self, listener: Callable[[str], None]) -> None:
        self._state_listeners.append(listener)

    def start(self) -> None:
        try:
            with warnings.catch_warnings():  # "No chroot path exists": the broker creates it right below
                warnings.simplefilter("ignore", UserWarning)
                self.kazoo.start(timeout=self.connection_timeout_s)
        except Exception as e:  # kazoo raises a plain timeout
            self.kazoo.stop()
            raise StartupError(f"cannot connect to ZooKeeper at {self.connect} within "
                               f"{self.connection_timeout_s * 1000:.0f} ms ({type(e).__name__}); start ZooKeeper "
                               f"(tierlog zookeeper start) or correct zookeeper.connect") from e
        # A chroot must exist before it can be used as the root (Kafka creates it too).
        for path in PERSISTENT_PATHS:
            self.kazoo.ensure_path(path)

    def close(self) -> None:
        self._closing = True
        try:
            self.kazoo.stop()
            self.kazoo.close()
        except Exception:  # noqa: BLE001 - closing must not fail a shutdown
            log.debug("Closing the ZooKeeper client failed", exc_info=True)

    @property
    def session_id(self) -> int | None:
        sid = self.kazoo.client_id
        return sid[0] if sid else None

    def live_session(self) -> int | None:
        """This broker's session while it is connected; None while suspended or lost. A leadership this
        broker holds is only as good as the session it was given in: once that session is gone, the
        controller may have moved it (and the broker hears of it only later)."""
        if self.kazoo.state != KazooState.CONNECTED:
            return None
        return self.session_id

    async def call(self, fn: Callable, *args):
        """Run a blocking ZooKeeper call off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -------------------------------------------------------------- cluster id and brokers

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            self.kazoo.create(CLUSTER_ID, _dump({"version": "1", "id": proposed}), makepath=True)
            return proposed
        except NodeExistsError:
            data, _ = self.kazoo.get(CLUSTER_ID)
            return _load(data)["id"]

    def register_broker(self, broker_id: int, data: bytes) -> None:
        """The ephemeral ``/brokers/ids/<id>``; a registration left by this broker's previous session (a fast
        restart within the session timeout) is replaced, another live broker with the id is refused."""
        path = f"{BROKER_IDS}/{broker_id}"
        while True:
            try:
                self.kazoo.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = self.kazoo.get(path)
                break
            except NoNodeError:
                continue  # the old session expired between the two calls: the id is free now
        if stat.ephemeralOwner == self.session_id:
            return
        raise StartupError(f"broker id {broker_id} is already registered in ZooKeeper by another live broker "
                           f"(session 0x{stat.ephemeralOwner:x}); give this broker another broker.id, or wait "
                           f"zookeeper.session.timeout.ms after a crash of the previous one")

    def live_brokers(self, watch: Callable | None = None) -> tuple[dict[int, BrokerImage], dict[int, int]]:
        """The registered brokers and each one's broker epoch (Kafka's: the creation zxid of its registration,
        which tells a broker that restarted between two looks from one that stayed)."""
        out, epochs = {}, {}
        for child in self.kazoo.get_children(BROKER_IDS, watch=watch):
            try:
                data, stat = self.kazoo.get(f"{BROKER_IDS}/{child}")
            except NoNodeError:  # gone between the listing and the read
                continue
            out[int(child)] = parse_broker_registration(int(child), data)
            epochs[int(child)] = stat.czxid
        return out, epochs

    # -------------------------------------------------------------- log dir failures

    def notify_log_dir_failure(self, broker_id: int) -> None:
        """Kafka's LogDirEventNotification: tell the controller a log dir of ``broker_id`` failed."""
        self.kazoo.create(f"{LOG_DIR_EVENTS}/log_dir_event_",
                          _dump({"version": 1, "broker": broker_id, "event": 1}), sequence=True)

    def take_log_dir_events(self, watch: Callable | None = None) -> set[int]:
        """The brokers named by pending log dir events, which are deleted (the controller's reading of them)."""
        brokers = set()
        for child in self.kazoo.get_children(LOG_DIR_EVENTS, watch=watch):
            path = f"{LOG_DIR_EVENTS}/{child}"
            try:
                data, _ = self.kazoo.get(path)
                brokers.add(int(_load(data)["broker"]))
                self.kazoo.delete(path)
            except (NoNodeError, KeyError, ValueError, TypeError):
                continue
        return brokers

    # -------------------------------------------------------------- controller election

    def controller_id(self, watch: Callable | None = None) -> int | None:
        try:
            data, _ = self.kazoo.get(CONTROLLER, watch=watch)
        except NoNodeError:
            if watch is not None:
                self.kazoo.exists(CONTROLLER, watch=watch)
            return None
        return _load(data).get("brokerid")

    def try_become_controller(self, broker_id: int) -> ControllerFence | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: create the ephemeral ``/controller`` and bump
        ``/controller_epoch`` in one transaction; None when another broker is the controller."""
        while True:
            try:
                data, stat = self.kazoo.get(CONTROLLER_EPOCH)
                epoch, version = int(data.decode() or 0), stat.version
            except NoNodeError:
                try:
                    self.kazoo.create(CONTROLLER_EPOCH, b"0", makepath=True)
                except NodeExistsError:
                    pass
                continue
            tx = self.kazoo.transaction()
            tx.create(CONTROLLER, _dump({"version": 1, "brokerid": broker_id,
                                         "timestamp": str(int(time.time() * 1000))}), ephemeral=True)
            tx.set_data(CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return ControllerFence(epoch + 1, version + 1)
            if isinstance(results[0], NodeExistsError):
                return None
            if isinstance(results[1], BadVersionError):
                continue  # another broker won an election meanwhile: look again
            raise results[0] if isinstance(results[0], Exception) else results[1]

    def own_controller_fence(self, broker_id: int) -> ControllerFence | None:
        """The fence of a ``/controller`` this broker's current session holds (an election whose answer a
        lost connection swallowed: the transaction was applied, so ``/controller_epoch`` is the one it set);
        None when the znode is another session's or absent."""
        try:
            data, stat = self.kazoo.get(CONTROLLER)
            if _load(data).get("brokerid") != broker_id or stat.ephemeralOwner != self.session_id:
                return None
            epoch, epoch_stat = self.kazoo.get(CONTROLLER_EPOCH)
        except NoNodeError:
            return None
        return ControllerFence(int(epoch.decode() or 0), epoch_stat.version)

    def resign_controller(self, broker_id: int) -> None:
        try:
            data, stat = self.kazoo.get(CONTROLLER)
            if _load(data).get("brokerid") == broker_id and stat.ephemeralOwner == self.session_id:
                self.kazoo.delete(CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def controller_epoch(self) -> int:
        try:
            data, _ = self.kazoo.get(CONTROLLER_EPOCH)
            return int(data.decode() or 0)
        except NoNodeError:
            return 0

    # -------------------------------------------------------------- topics

    def topic_names(self, watch: Callable | None = None) -> list[str]:
        return sorted(self.kazoo.get_children(BROKER_TOPICS, watch=watch))

    def read_topic(self, name: str) -> tuple[TopicImage, dict[int, int]] | None:
        """The topic (assignment, partition states, config overrides, tiering) and each partition state's
        znode version; None if it does not exist (any more). A partition without a state znode yet (a creation
        the previous controller did not finish) has leader -1."""
        try:
            data, _ = self.kazoo.get(topic_path(name))
        except NoNodeError:
            return None
        d = _load(data)
        topic_id = uuid_from_str(d["topic_id"]) if d.get("topic_id") else None
        parts, versions = {}, {}
        adding, removing = d.get("adding_replicas") or {}, d.get("removing_replicas") or {}
        for key, replicas in d.get("partitions", {}).items():
            p = int(key)
            moving = {"adding_replicas": tuple(adding.get(key, ())), "removing_replicas": tuple(removing.get(key, ()))}
            try:
                sdata, sstat = self.kazoo.get(partition_state_path(name, p))
                s = _load(sdata)
                parts[p] = PartitionImage(p, s["leader"], s["leader_epoch"], tuple(replicas), tuple(s["isr"]),
                                          sstat.version, **moving)
                versions[p] = sstat.version
            except NoNodeError:
                parts[p] = PartitionImage(p, -1, -1, tuple(replicas), (), -1, **moving)
        try:
            cdata, _ = self.kazoo.get(f"{CONFIG_TOPICS}/{name}")
            configs = {k: str(v) for k, v in _load(cdata).get("config", {}).items()}
        except NoNodeError:
            configs = {}
        tiering = TopicTiering.from_json(d["tiering"]) if d.get("tiering") else None
        return TopicImage(name, topic_id, parts, configs, tiering, restore_points_from_json(d.get("restored"))), \
            versions

    def topics_being_deleted(self, watch: Callable | None = None) -> list[str]:
        return sorted(self.kazoo.get_children(DELETE_TOPICS, watch=watch))

    def deleted_topic_ids(self) -> dict[str, str]:
        out = {}
        for child in self.kazoo.get_children(DELETED_TOPIC_IDS):
            try:
                data, _ = self.kazoo.get(f"{DELETED_TOPIC_IDS}/{child}")
                out[child] = data.decode()
            except NoNodeError:
                continue
        return out

    def broker_configs(self) -> dict[str, dict[str, str]]:
        out = {}
        for child in self.kazoo.get_children(CONFIG_BROKERS):
            try:
                data, _ = self.kazoo.get(f"{CONFIG_BROKERS}/{child}")
            except NoNodeError:
                continue
            configs = {k: str(v) for k, v in _load(data).get("config", {}).items()}
            if configs:
                out["" if child == DEFAULT_BROKER_CONFIG else child] = configs
        return out

    def group_configs(self) -> dict[str, dict[str, str]]:
        """Group config overrides by group id, from ``/config/groups/<group>`` (names URL-quoted)."""
        out: dict[str, dict[str, str]] = {}
        try:
            groups = self.kazoo.get_children(CONFIG_GROUPS)
        except NoNodeError:
            return out
        for quoted in groups:
            try:
                data, _ = self.kazoo.get(f"{CONFIG_GROUPS}/{quoted}")
            except NoNodeError:
                continue
            configs = {k: str(v) for k, v in _load(data).get("config", {}).items()} if data else {}
            if configs:
                out[unquote(quoted)] = configs
        return out

    def client_quotas(self) -> dict[str, dict[str, str]]:
        """Client quotas by entity path (``users/<u>``, ``users/<u>/clients/<c>``, ``clients/<c>``, names as
        stored: sanitized, ``<default>``), read from Kafka's ``/config/users`` and ``/config/clients``."""
        out: dict[str, dict[str, str]] = {}

        def read(path: str) -> None:
            try:
                data, _ = self.kazoo.get(f"/config/{path}")
            except NoNodeError:
                return
            # a user's SCRAM credentials share its znode (user_scram_credentials): they are no quota
            configs = {k: str(v) for k, v in _load(data).get("config", {}).items()
                       if not k.startswith("SCRAM-")} if data else {}
            if configs:
                out[path] = configs

        def children(path: str) -> list[str]:
            try:
                return self.kazoo.get_children(path)
            except NoNodeError:
                return []
        for user in children(CONFIG_USERS):
            read(f"users/{user}")
            for client in children(f"{CONFIG_USERS}/{user}/clients"):
                read(f"users/{user}/clients/{client}")
        for client in children(CONFIG_CLIENTS):
            read(f"clients/{client}")
        for ip in children(CONFIG_IPS):
            read(f"ips/{ip}")
        return out

    # -------------------------------------------------------------- ACLs

    def read_acls(self) -> tuple[AclBinding, ...]:
        """Every ACL binding under Kafka's znodes (literal under /kafka-acl, prefixed under
        /kafka-acl-extended/prefixed), as Kafka's AclAuthorizer or tierlog wrote them."""
        out = []
        for root, pattern in ((ACL_ROOT, PatternType.LITERAL), (ACL_EXTENDED_ROOT, PatternType.PREFIXED)):
            for type_name in resource_type_names():
                parent = f"{root}/{type_name}"
                try:
                    names = self.kazoo.get_children(parent)
                except NoNodeError:
                    continue
                for name in names:
                    try:
                        data, _ = self.kazoo.get(f"{parent}/{name}")
                    except NoNodeError:
                        continue
                    out.extend(parse_resource_entry(type_name, pattern, name, data))
        return add_bindings((), out)

    def watch_acl_changes(self, watch: Callable) -> None:
        """Arm one-shot watches on Kafka's two ACL change notification folders (written by every ACL change,
        also Kafka's ``kafka-acls --authorizer-properties zookeeper.connect=...``)."""
        self.ensure_acl_paths()
        for parent in (ACL_CHANGES, ACL_EXTENDED_CHANGES):
            self.kazoo.get_children(parent, watch=watch)

    def ensure_acl_paths(self) -> None:
        """Kafka's AclAuthorizer creates these at start; tierlog before its first ACL write."""
        for root in (ACL_ROOT, ACL_EXTENDED_ROOT):
            for type_name in resource_type_names():
                self.kazoo.ensure_path(f"{root}/{type_name}")
        self.kazoo.ensure_path(ACL_CHANGES)
        self.kazoo.ensure_path(ACL_EXTENDED_CHANGES)
    def user_scram_credentials(self) -> dict[str, dict[str, str]]:
        """user -> SCRAM mechanism -> credential text, from /config/users/<user> as Kafka stores them
        (other keys of a user's config, quotas, are not SCRAM credentials)."""
        out: dict[str, dict[str, str]] = {}
        if not self.kazoo.exists(CONFIG_USERS):
            return out
        for child in self.kazoo.get_children(CONFIG_USERS):
            try:
                data, _ = self.kazoo.get(f"{CONFIG_USERS}/{child}")
            except NoNodeError:
                continue
            creds = {k: str(v) for k, v in _load(data).get("config", {}).items() if k.startswith("SCRAM-")}
            if creds:
                out[unquote(child)] = creds
        return out

    def finalized_features(self) -> FinalizedFeatures | None:
        """KIP-584's finalized features from Kafka's /feature znode, None when there is none (a new cluster)."""
        try:
            data, stat = self.kazoo.get(FEATURE_ZNODE)
        except NoNodeError:
            return None
        try:
            return decode_feature_znode(data, stat.version)
        except (ValueError, TypeError, KeyError) as e:
            raise StartupError(f"cannot read {FEATURE_ZNODE} in ZooKeeper: {e}") from e

    # -------------------------------------------------------------- producer ids

    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Kafka's ZkProducerIdManager: claim the next block with a compare-and-set on its znode."""
        while True:
            try:
                data, stat = self.kazoo.get(PRODUCER_ID_BLOCK)
                d = _load(data)
                start, version = int(d["block_end"]) + 1, stat.version
            except NoNodeError:
                start, version = 0, None
            body = _dump({"version": 1, "broker": broker_id, "block_start": str(start),
                          "block_end": str(start + size - 1)})
            try:
                if version is None:
                    self.kazoo.create(PRODUCER_ID_BLOCK, body, makepath=True)
                else:
                    self.kazoo.set(PRODUCER_ID_BLOCK, body, version=version)
                return start
            except (NodeExistsError, BadVersionError):
                continue  # another broker took this block: try the next one


class FencedControllerError(Exception):
    """A controller write refused because ``/controller_epoch`` moved: another controller was elected."""


def commit_fenced(zk: ZkClient, fence: ControllerFence, build: Callable[[object], None]) -> list:
    """Run the writes ``build`` adds to a transaction, together with a check that this controller is still the
    one elected (the ``/controller_epoch`` version it won). Raises FencedControllerError if not, and the first
    failing operation's error otherwise."""
    tx = zk.kazoo.transaction()
    tx.check(CONTROLLER_EPOCH, fence.zk_version)
    build(tx)
    results = tx.commit()
    if isinstance(results[0], BadVersionError | NoNodeError):
        raise FencedControllerError(f"controller epoch {fence.epoch} is no longer current")
    for r in results[1:]:
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            raise r
    return results[1:]
