"""The embedded controller of a single-node cluster.

It owns the metadata image: it validates and applies topic creation and deletion, partition
additions and configuration changes with Kafka's rules and error codes, persists the new image,
and hands every change to its listeners as a :class:`MetadataDelta` (the broker's metadata
publisher creates and deletes logs from it). A clustered controller will offer the same methods.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from tierlog.cluster.acls import AclBinding, AclBindingFilter, add_bindings
from tierlog.cluster.features import FeatureUpdate, FinalizedFeatures, apply_updates, initial_features
from tierlog.cluster.image import (
    INTERNAL_TOPICS,
    BrokerImage,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TieringState,
    TopicImage,
    TopicTiering,
)
from tierlog.cluster.restore import TopicRestore, split_restore
from tierlog.cluster.store import FileMetadataStore
from tierlog.cluster.tiering import DisablementDriver, initial_tiering, next_tiering, topic_log_config
from tierlog.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig
from tierlog.config.broker import listener_override_setting
from tierlog.config.group_configs import validate_group_configs
from tierlog.config.values import check_value, parse_typed
from tierlog.errors import (
    ElectionNotNeededError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    ReassignmentInProgressError,
    StartupError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str
from tierlog.security.password_encoder import PasswordEncoder, PasswordEncoderError, password_encoder
from tierlog.storage import LogConfig

log = logging.getLogger(__name__)


MAX_TOPIC_NAME_LENGTH = 249
PRODUCER_ID_BLOCK_SIZE = 1000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

Listener = Callable[[MetadataDelta, MetadataImage], None]


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: raises INVALID_TOPIC_EXCEPTION with Kafka's reason."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not _LEGAL_TOPIC.match(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return
    raise InvalidTopicError(f"Topic name is invalid: {reason}")


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One IncrementalAlterConfigs operation (Kafka's OpType ids: SET 0, DELETE 1, APPEND 2, SUBTRACT 3)."""

    name: str
    op: int
    value: str | None


def with_endpoints(broker: BrokerImage, endpoints: tuple[tuple[str, str, int], ...]) -> BrokerImage:
    """``broker`` reached at ``endpoints`` ((listener, host, port), the first its default)."""
    return replace(broker, host=endpoints[0][1], port=endpoints[0][2], endpoints=tuple(endpoints))


class Controller:
    #: A broker of a multi-broker cluster (the ZooKeeper-mode controller), not the embedded single node.
    clustered = False
    controller_epoch = 0
    def __init__(self, broker_config: BrokerConfig, store: FileMetadataStore, broker: BrokerImage,
                 cluster_id: str):
        self._init_common(broker_config, broker.node_id)
        self.store = store
        doc = store.load()
        brokers = {broker.node_id: broker}
        if doc is None:
            self.image = MetadataImage(cluster_id, broker.node_id, brokers, {})
            self._persist()
        else:
            self.image = MetadataImage.from_json(doc, brokers)
            if self.image.cluster_id != cluster_id:
                raise StartupError(f"the cluster metadata {store.path} belongs to cluster {self.image.cluster_id} "
                                   f"but meta.properties says {cluster_id}; restore the log dir's meta.properties "
                                   f"or give log.dirs another folder")

    def _init_common(self, broker_config: BrokerConfig, node_id: int) -> None:
        self.config = broker_config
        self.node_id = node_id
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._next_producer_id = self._producer_id_block_end = 0
        self._effective: tuple[object, BrokerConfig] | None = None
        self.disablements: DisablementDriver | None = None
        self._capped_internal_topics: set[str] = set()  # internal topics warned about (once each)
        #: Given by the broker (add_reconfigurable): raises InvalidConfigError when its listeners cannot take a
        #: dynamic change of its own configuration (a TLS keystore that cannot be read, or changes the
        #: certificate's identity).
        self.dynamic_config_check: Callable[[BrokerConfig], None] | None = None
        #: ZooKeeper mode keeps dynamic PASSWORD configs encoded with password.encoder.secret (Kafka's
        #: DynamicBrokerConfig); the embedded controller keeps them as given, as KRaft's metadata does.
        self.encode_passwords = False
        self.password_encoders: tuple[PasswordEncoder, ...] = ()  # the secret's, then the old secret's
        #: KIP-584: feature -> (min, max) level this broker supports, given by the server (support_features)
        self.supported_features: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------ plumbing

    def add_reconfigurable(self, check: Callable[[BrokerConfig], None]) -> None:
        """Kafka's DynamicBrokerConfig.addReconfigurable: ``check(effective)`` is asked before a dynamic change of
        this broker's configuration is accepted. The broker's TLS listeners read the effective configuration
        when they are built, so they come after the controller and are given to it here."""
        self.dynamic_config_check = check

    def advertise(self, endpoints: tuple[tuple[str, str, int], ...]) -> None:
        """This broker in the image with every advertised listener's (name, host, port), bound ports filled in,
        once its listeners are bound, so a client is answered with the addresses of the listener it came in on."""
        image = self.image
        if self.node_id in image.brokers:
            me = with_endpoints(image.brokers[self.node_id], endpoints)
            self.image = replace(image, brokers={**image.brokers, self.node_id: me})

    @property
    def is_active(self) -> bool:
        """Whether this broker's controller makes metadata changes (the embedded one always does)."""
        return True

    async def call(self, fn: Callable, *args, **kwargs):
        """Run a controller operation (``create_topic``, ...) from the event loop. The embedded controller
        runs it at once; a clustered one on its own thread, answering once brokers have the change."""
        return fn(*args, **kwargs)

    async def next_producer_id(self) -> int:
        return self.allocate_producer_id()

    async def auto_create_topic(self, name: str) -> TopicImage | None:
        """A topic a client asked for that does not exist (``auto.create.topics.enable``): the new topic, or
        None when it is being created elsewhere (the client gets LEADER_NOT_AVAILABLE and asks again)."""
        return self.create_topic(name)

    def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> None:
        """An internal topic a coordinator needs; in a cluster the creation is asked of the controller and
        this raises COORDINATOR_NOT_AVAILABLE until the topic exists."""
        self.create_topic(name, num_partitions, replication_factor, configs=configs)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _persist(self, image: MetadataImage | None = None) -> None:
        """Write ``image`` (the current one by default); a write that fails (a full disk) raises
        KAFKA_STORAGE_ERROR, and the change it carried is not made."""
        try:
            self.store.save((image or self.image).to_json())
        except OSError as e:
            log.error("Cannot write the cluster metadata to %s: %s; the change is refused", self.store.path, e)
            raise KafkaStorageError(f"cannot write the cluster metadata ({self.store.path}): {e}") from e

    def _commit(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Persist first, then publish: what brokers and clients see is always on disk."""
        self._persist(image)
        self.image = image
        for listener in self._listeners:
            listener(delta, image)

    def topic_config(self, topic: str):
        """The resolved configuration of a topic (broker defaults, dynamic ones included, plus its overrides)."""
        t = self.image.topics.get(topic)
        return self.effective_config.topic_config(t.configs if t else None)

    def log_config(self, topic: str) -> LogConfig:
        """The log settings of ``topic`` (its configuration and its tiering lifecycle, KIP-950)."""
        return topic_log_config(self.topic_config(topic), self.image.topics.get(topic), topic)

    @property
    def effective_config(self) -> BrokerConfig:
        """The static broker configuration with the dynamic broker configs on top (Kafka's order: this
        node's dynamic configs, then the cluster-wide dynamic defaults, then the static file)."""
        dynamic = self.image.broker_configs
        cached = self._effective
        if cached is not None and cached[0] is dynamic:
            return cached[1]
        config = self._config_with(dynamic)
        self._effective = (dynamic, config)
        return config

    def _config_with(self, dynamic: Mapping[str, Mapping[str, str]]) -> BrokerConfig:
        layers = {**dynamic.get("", {}), **self._decoded(dynamic.get(str(self.node_id), {}))}
        if not layers:
            return self.config
        try:
            return BrokerConfig({**self.config.originals, **layers})
        except InvalidConfigError as e:  # e.g. the static file changed under a stored dynamic value
            # the names only: a dynamic value may be a password (ssl.keystore.password of a listener)
            log.warning("Ignoring the dynamic broker configs %s: %s", ", ".join(sorted(layers)), e)
            return self.config

    def _decoded(self, configs: Mapping[str, str]) -> Mapping[str, str]:
        """A broker's dynamic configs with its PASSWORD ones decoded (ZooKeeper mode). One that this broker's
        password.encoder.secret (or password.encoder.old.secret) cannot decode is left out, with an error, as
        Kafka ignores it."""
        if not self.encode_passwords or not any(is_password_config(k) for k in configs):
            return configs
        out = {}
        for key, value in configs.items():
            if not is_password_config(key):
                out[key] = value
                continue
            reason = "password.encoder.secret is not set"
            for encoder in self.password_encoders:
                try:
                    out[key] = encoder.decode(value)
                    break
                except PasswordEncoderError as e:
                    reason = str(e)
            else:
                log.error("Dynamic password config %s could not be decoded, ignoring it: %s", key, reason)
        return out

    def _encoded(self, resource: str, new: Mapping[str, str], incoming: set[str]) -> tuple[dict, dict]:
        """(stored, plain) of a broker's new dynamic configs: the PASSWORD values this request sets encoded
        for ZooKeeper, those kept from before decoded for the checks; InvalidConfigError as Kafka's ZooKeeper
        mode refuses them (at the cluster-wide default, or without password.encoder.secret)."""
        stored, plain = dict(new), dict(new)
        if not self.encode_passwords:
            return stored, plain
        for key, value in new.items():
            if not is_password_config(key):
                continue
            if key not in incoming:
                del plain[key]
                plain.update(self._decoded({key: value}))
            elif resource == "":
                raise InvalidConfigError(f"Password config can be defined only at broker level: [{key}]")
            elif not self.password_encoders:
                raise InvalidConfigError(f"Password encoder secret not configured: cannot store {key} (set "
                                         "password.encoder.secret, the same on every broker)")
            else:
                stored[key] = self.password_encoders[0].encode(str(value))
        return stored, plain

    # ------------------------------------------------------------------ internal topics

    def replica_hosts(self) -> int:
        """How many brokers can host replicas: the registered ones. The embedded controller is a
        single-node cluster (1); a clustered controller counts the brokers alive."""
        return max(1, len(self.image.brokers))

    def internal_topic_replication_factor(self, topic: str, setting: str, configured: int) -> int:
        """The replication factor to create the internal topic ``topic`` with, when ``setting`` asks for
        ``configured``.

        On a single node nothing but 1 is possible, and Kafka's defaults (3) would leave the topic
        uncreated forever: the factor is capped at 1, with one warning naming the setting. With more
        brokers Kafka's rule stays: the configured factor, whose creation fails with
        INVALID_REPLICATION_FACTOR (and is tried again) until enough brokers are alive."""
        hosts = self.replica_hosts()
        if hosts > 1 or configured <= hosts:
            return configured
        if topic not in self.image.topics and topic not in self._capped_internal_topics:
            self._capped_internal_topics.add(topic)
            log.warning("%s=%d but this is a single-node cluster; creating %s with replication factor %d",
                        setting, configured, topic, hosts)
        return hosts

    # ------------------------------------------------------------------ producer ids

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, also across restarts.

        Ids are reserved in persisted blocks of PRODUCER_ID_BLOCK_SIZE, as Kafka's controller
        hands brokers blocks of 1000; ids of a block left unused at a restart are skipped."""
        with self._lock:
            if self._next_producer_id >= self._producer_id_block_end:
                start = self.image.next_producer_id_block
                image = replace(self.image, next_producer_id_block=start + PRODUCER_ID_BLOCK_SIZE)
                self._persist(image)
                self.image = image
                self._next_producer_id, self._producer_id_block_end = start, start + PRODUCER_ID_BLOCK_SIZE
            pid = self._next_producer_id
            self._next_producer_id += 1
            return pid

    # ------------------------------------------------------------------ leadership

    def elect_leaders(self) -> None:
        """Start-up: this node (re)takes leadership of every partition with a new leader epoch.

        Kafka's controller elects a leader again when a broker comes back; bumping the epoch lets
        clients and (later) followers tell the new leadership term from the old one."""
        with self._lock:
            topics = {}
            for name, t in self.image.topics.items():
                parts = {p: replace(pi, leader=self.node_id, leader_epoch=pi.leader_epoch + 1,
                                    partition_epoch=pi.partition_epoch + 1)
                         for p, pi in t.partitions.items()}
                topics[name] = replace(t, partitions=parts)
            self.image = replace(self.image, topics=topics)
            self._persist()

    def run_election(self, election_type: int, partitions: Iterable[tuple[str, int]] | None) -> dict:
        """ElectLeaders on a single node: its only broker leads every partition already, so no election is
        needed (Kafka's answer for a partition led by its preferred replica)."""
        if partitions is None:
            return {}
        out = {}
        for name, p in partitions:
            t = self.image.topics.get(name)
            out[(name, p)] = (ElectionNotNeededError("Leader election not needed for topic partition.")
                              if t is not None and p in t.partitions
                              else UnknownTopicOrPartitionError("The partition does not exist."))
        return out

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignments: Mapping[int, Iterable[int]] | None = None,
                     configs: Mapping[str, str | None] | None = None, validate_only: bool = False) -> TopicImage:
        """Create a topic; with the reserved restore configs of :mod:`tierlog.cluster.restore`, re-create one
        rebuilt from the remote tier, with its original topic id and restore points."""
        configs, restore = split_restore(configs)
        with self._lock:
            validate_topic_name(name)
            if name in self.image.topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            unified = name.replace(".", "_")
            for other in self.image.topics:
                if other.replace(".", "_") == unified:
                    raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
            nulls = [k for k, v in (configs or {}).items() if v is None]
            if nulls:  # Kafka's ReplicationControlManager.computeConfigChanges
                raise InvalidConfigError("Null value not supported for topic configs: " + ",".join(nulls))
            overrides = dict(configs or {})
            self.effective_config.validate_topic_overrides(overrides)
            if assignments:
                if replication_factor != -1:
                    raise InvalidRequestError("A manual partition assignment was specified, but replication "
                                              "factor was not set to -1.")
                if num_partitions != -1:
                    raise InvalidRequestError("A manual partition assignment was specified, but numPartitions "
                                              "was not set to -1.")
            replicas = self._place(num_partitions, replication_factor, assignments)
            partitions = {p: self._new_partition(p, reps) for p, reps in replicas.items()}
            topic_id, restored = new_kafka_uuid(), {}
            if restore is not None:
                self._check_restore(name, restore, overrides, partitions)
                topic_id, restored = restore.topic_id, restore.points
                partitions = {p: replace(pi, leader_epoch=restore.initial_leader_epoch)
                              for p, pi in partitions.items()}
            topic = TopicImage(name, topic_id, partitions, {k: str(v) for k, v in overrides.items()},
                               initial_tiering(self.effective_config.topic_config(overrides)), restored)
            if not validate_only:
                self._commit(self.image.with_topic(topic), MetadataDelta(created=(topic,)))
                restored_from = "" if restore is None else \
                    f", restored from the remote tier (leader epoch {restore.initial_leader_epoch})"
                log.info("Created topic %s with %d partition(s), id %s%s", name, len(topic.partitions),
                         topic.topic_id, restored_from)
            return topic

    def _check_restore(self, name: str, restore: TopicRestore, overrides: Mapping[str, str | None],
                       partitions: Mapping[int, PartitionImage]) -> None:
        """A restored topic's data lives in the remote tier: it must stay tiered, and its id must be one this
        cluster never used (another topic's objects share the key folder of an id)."""
        if not self.effective_config.topic_config(overrides)["remote.storage.enable"]:
            raise InvalidConfigError(f"Topic '{name}' is restored from the remote tier and needs "
                                     "remote.storage.enable=true")
        known, deleted = self.image.known_topic_ids()
        if restore.topic_id in known:
            what = "a topic this cluster deleted" if restore.topic_id in deleted else "another topic"
            raise InvalidRequestError(f"Topic id {uuid_to_str(restore.topic_id)} of the restored topic '{name}' "
                                      f"is that of {what}")
        outside = sorted(set(restore.points) - set(partitions))
        if outside:
            raise InvalidPartitionsError(f"Topic '{name}' would have {len(partitions)} partition(s) but the "
                                         f"restore names partition {outside[0]}")

    def _place(self, num_partitions: int, replication_factor: int,
               assignments: Mapping[int, Iterable[int]] | None, start: int = 0,
               fixed_rf: int | None = None) -> dict[int, list[int]]:
        brokers = sorted(self.image.brokers)
        if assignments:
            # Kafka's ReplicationControlManager.validateManualPartitionAssignment, partition by partition.
            out = {}
            rf = fixed_rf
            for p, reps in assignments.items():
                reps = list(reps)
                self._check_manual_assignment(reps, rf)
                rf = len(reps)
                out[p] = reps
            if sorted(out) != list(range(start, start + len(out))):
                raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
            return dict(sorted(out.items()))
        if replication_factor < -1 or replication_factor == 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value.")
        if num_partitions < -1 or num_partitions == 0:
            raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.")
        n = self.config["num.partitions"] if num_partitions == -1 else num_partitions
        rf = self.config["default.replication.factor"] if replication_factor == -1 else replication_factor
        if self._log_dirs_all_cordoned():  # KIP-1066: the one broker takes no new partition
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced, or have all "
                f"their log directories cordoned.")
        if rf > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot "
                f"be reached because only {len(brokers)} broker(s) are registered.")
        return {start + p: [brokers[(start + p + r) % len(brokers)] for r in range(rf)] for p in range(n)}

    def _log_dirs_all_cordoned(self) -> bool:
        """This node's ``cordoned.log.dirs`` (in effect) covers every one of its log dirs (KIP-1066)."""
        cordoned = self.effective_config["cordoned.log.dirs"]
        return "*" in cordoned or (bool(cordoned) and set(self.config.log_dirs) <= set(cordoned))

    def _new_partition(self, p: int, replicas: list[int]) -> PartitionImage:
        """A new partition's state: led by its first replica, every replica in sync (one node)."""
        return PartitionImage(p, replicas[0], 0, tuple(replicas), tuple(replicas))

    def _check_broker_resource(self, resource: str) -> None:
        if resource not in ("", str(self.node_id)):
            raise InvalidConfigError(f"Unknown broker {resource}")

    def _check_manual_assignment(self, replicas: list[int], rf: int | None) -> None:
        if not replicas:
            raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
        previous = None
        for broker_id in sorted(replicas):
            if broker_id not in self.image.brokers:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes broker {broker_id}, but no such broker is "
                    f"registered.")
            if broker_id == previous:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes the broker {previous} more than once.")
            previous = broker_id
        if rf is not None and len(replicas) != rf:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {rf} replica(s).")

    def delete_topic(self, name: str) -> TopicImage:
        with self._lock:
            t = self.image.topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(f"This server does not host this topic: {name}")
            if not self.config["delete.topic.enable"]:
                raise TopicDeletionDisabledError("Topic deletion is disabled.")
            self._commit(self.image.without_topic(name), MetadataDelta(deleted=(t,)))
            log.info("Deleted topic %s (id %s)", name, t.topic_id)
            return t

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                          validate_only: bool = False) -> TopicImage:
        with self._lock:
            t = self.image.topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(f"This server does not host this topic: {name}")
            if any(pi.is_reassigning for pi in t.partitions.values()):  # Kafka's ZkAdminManager.createPartitions
                raise ReassignmentInProgressError(f"A partition reassignment is in progress for the topic '{name}'.")
            have = len(t.partitions)
            if count == have:
                raise InvalidPartitionsError(f"Topic already has {have} partition(s).")
            if count < have:
                raise InvalidPartitionsError(
                    f"The topic {name} currently has {have} partition(s); {count} would not be an increase.")
            if assignments is not None and len(assignments) != count - have:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {count - have} additional partition(s), but only {len(assignments)} "
                    f"assignment(s) were specified.")
            rf = len(t.partitions[0].replicas)
            placed = self._place(count - have, rf,
                                 {have + i: a for i, a in enumerate(assignments)} if assignments else None,
                                 start=have, fixed_rf=rf)
            added = {p: self._new_partition(p, reps) for p, reps in placed.items()}
            new = replace(t, partitions={**t.partitions, **added})
            if not validate_only:
                self._commit(self.image.with_topic(new),
                             MetadataDelta(partitions_added=((new, tuple(sorted(added))),)))
            return new

    # ------------------------------------------------------------------ configs

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None],
                            validate_only: bool = False) -> TopicImage:
        """Legacy AlterConfigs: the given settings replace every override of the topic."""
        with self._lock:
            t = self.image.topics.get(name)
            return self._set_topic_configs(name, t, {k: v for k, v in configs.items() if v is not None},
                                           validate_only)

    def incremental_alter_topic_configs(self, name: str, ops: Iterable[ConfigOp],
                                        validate_only: bool = False) -> TopicImage:
        with self._lock:
            t = self.image.topics.get(name)
            overrides = apply_config_ops(t.configs if t else {}, ops, _topic_list_default)
            return self._set_topic_configs(name, t, overrides, validate_only)

    def _set_topic_configs(self, name: str, t: TopicImage | None, overrides: dict[str, str],
                           validate_only: bool) -> TopicImage:
        # Kafka's order (ConfigurationControlManager.validateAlterConfig): the configs, then existence.
        config = self.effective_config
        config.validate_topic_overrides(overrides)
        if t is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        tiering = next_tiering(t, config.topic_config(t.configs), config.topic_config(overrides))
        new = replace(t, configs={k: str(v) for k, v in overrides.items()}, tiering=tiering)
        if not validate_only:
            moved = tiering != t.tiering
            self._commit(self.image.with_topic(new), MetadataDelta(configs_changed=(new,),
                                                                   tiering_changed=(new,) if moved else ()))
            if moved:
                log.info("Tiered storage of topic %s is now %s (policy %s, epoch %d)", name, tiering.state.value,
                         tiering.policy, tiering.epoch)
                if self.disablements is not None:
                    self.disablements.wake()
        return new

    # ------------------------------------------------------------------ tiered storage disablement

    def start_disablements(self, channel) -> None:
        """Drive DISABLING topics (also those left DISABLING by a previous run) through ``channel``."""
        self.disablements = DisablementDriver(self, channel)
        self.disablements.start()

    def complete_disablement(self, name: str, epoch: int) -> None:
        """Every broker acknowledged DisableRemoteTopic for ``epoch``: record DISABLED."""
        with self._lock:
            t = self.image.topics.get(name)
            if t is None or t.tiering is None or t.tiering.epoch != epoch \
                    or t.tiering.state != TieringState.DISABLING:
                return  # deleted or changed meanwhile: nothing to complete
            new = replace(t, tiering=TopicTiering(TieringState.DISABLED, t.tiering.policy, epoch + 1))
            self._commit(self.image.with_topic(new), MetadataDelta(configs_changed=(new,), tiering_changed=(new,)))
            log.info("Tiered storage of topic %s is DISABLED (policy %s)", name, t.tiering.policy)

    def alter_broker_configs(self, resource: str, configs: Mapping[str, str | None],
                             incremental_ops: Iterable[ConfigOp] | None = None,
                             validate_only: bool = False) -> None:
        """Dynamic broker configs for ``resource`` (a node id, or "" for the cluster-wide default)."""
        with self._lock:
            self._check_broker_resource(resource)
            current = dict(self.image.broker_configs.get(resource, {}))
            if incremental_ops is not None:
                new = apply_config_ops(current, incremental_ops, _broker_list_default)
            else:
                new = {k: v for k, v in configs.items() if v is not None}
            for key, value in new.items():
                d = BROKER_CONFIGS.get(listener_override_setting(key) or key)
                if d is None:
                    raise InvalidConfigError(f"Unknown broker config {key}")
                if not d.dynamic:
                    raise InvalidConfigError(f"Cannot update these configs dynamically: [{key}]")
                if resource == "" and d.name == "cordoned.log.dirs" and current.get(key) != value:
                    # KIP-1066: the dirs are the broker's own (Kafka answers INVALID_REQUEST)
                    raise InvalidRequestError(f"Cannot update these configs at default cluster level, broker id "
                                              f"must be specified: [{key}]")
                if resource == "" and d.name.startswith("ssl.") and current.get(key) != value:
                    # Kafka's per-broker configs: each broker has its own keystore and truststore files.
                    raise InvalidConfigError(f"Cannot update these configs at default cluster level, broker id "
                                             f"must be specified: [{key}]")
                check_value(d, parse_typed(d, value, key), key)  # the value alone: type and range
            incoming = set(new) if incremental_ops is None else {op.name for op in incremental_ops if op.op != 1}
            stored, new = self._encoded(resource, new, incoming)
            configs_all = {k: v for k, v in self.image.broker_configs.items() if k != resource}
            if stored:
                configs_all[resource] = {k: str(v) for k, v in stored.items()}
            plain_all = {**configs_all, str(self.node_id): self._decoded(configs_all.get(str(self.node_id), {}))}
            if new:
                plain_all[resource] = {k: str(v) for k, v in new.items()}
            # The rules between settings (log.local.retention.ms <= log.retention.ms, ...) hold for the
            # values in effect once the whole request is applied, as Kafka's DynamicBrokerConfig checks
            # them: static file, then the cluster-wide dynamic defaults, then this node's dynamic configs,
            # with every change of the request in place (never one key at a time against the static file).
            # The new defaults must also keep every topic's configuration valid.
            layers = {**plain_all.get("", {}), **plain_all.get(str(self.node_id), {})}
            effective = BrokerConfig({**self.config.originals, **layers}) if layers else self.config
            for t in self.image.topics.values():
                effective.topic_config(t.configs)
            if resource == str(self.node_id) and self.dynamic_config_check is not None:
                # this broker's own files: its TLS listeners must be able to take the change (a new keystore)
                try:
                    self.dynamic_config_check(effective)
                except InvalidConfigError as e:
                    raise InvalidConfigError(e.message) from None
            if not validate_only:
                # Topics without their own value follow the broker defaults: hand them the change.
                self._commit(replace(self.image, broker_configs=configs_all),
                             MetadataDelta(configs_changed=tuple(self.image.topics.values()),
                                           broker_configs_changed=True))

    def alter_user_scram(self, credentials: Mapping[tuple[str, str], str | None]) -> None:
        """SCRAM credentials: (user, mechanism) -> Kafka's credential text, None deletes (AlterUserScramCredentials;
        checked by the handler). Kept in the metadata like topic configs; ZooKeeper's /config/users in a
        cluster."""
        with self._lock:
            users = {u: dict(m) for u, m in self.image.user_scram.items()}
            for (user, mechanism), text in credentials.items():
                if text is None:
                    users.get(user, {}).pop(mechanism, None)
                else:
                    users.setdefault(user, {})[mechanism] = text
            users = {u: m for u, m in users.items() if m}
            self._commit(replace(self.image, user_scram=users), MetadataDelta(user_scram_changed=True))


    def alter_client_quotas(self, changes: Mapping[str, Mapping[str, float | None]],
                            validate_only: bool = False) -> None:
        """Client quotas: entity path -> {key: value, or None to remove}; validated by the caller."""
        with self._lock:
            quotas = {k: dict(v) for k, v in self.image.client_quotas.items()}
            for path, ops in changes.items():
                entry = quotas.setdefault(path, {})
                for key, value in ops.items():
                    if value is None:
                        entry.pop(key, None)
                    else:
                        entry[key] = _quota_text(value)
                if not entry:
                    del quotas[path]
            if not validate_only and quotas != self.image.client_quotas:
                self._commit(replace(self.image, client_quotas=quotas), MetadataDelta(client_quotas_changed=True))

    # ------------------------------------------------------------------ group configs (GROUP resource)

    def alter_group_configs(self, group_id: str, configs: Mapping[str, str | None] | None = None,
                            ops: Iterable[ConfigOp] | None = None, validate_only: bool = False) -> None:
        """A group's config overrides: replaced by ``configs`` (AlterConfigs) or changed by ``ops``
        (IncrementalAlterConfigs), validated (INVALID_CONFIG) before anything is written. Kafka keeps them for
        any group id, whether the group exists or not."""
        with self._lock:
            current = self.image.group_configs.get(group_id, {})
            if ops is not None:
                new = apply_config_ops(current, ops, lambda _name: None)
            else:
                new = {k: v for k, v in (configs or {}).items() if v is not None}
            validate_group_configs(new)
            if validate_only or new == current:
                return
            groups = {k: dict(v) for k, v in self.image.group_configs.items()}
            if new:
                groups[group_id] = new
            else:
                groups.pop(group_id, None)
            self._commit(replace(self.image, group_configs=groups), MetadataDelta(group_configs_changed=True))

    # ------------------------------------------------------------------ features (KIP-584)

    def support_features(self, supported: Mapping[str, tuple[int, int]]) -> None:
        """The feature levels this broker supports, decided by the server from what it serves (given once its
        APIs are registered). A new cluster's levels are finalized now, as Kafka finalizes them when its
        storage is formatted; later versions of tierlog never change them without an UpdateFeatures."""
        self.supported_features = dict(supported)
        if self.image.features is None and self.is_active:
            self._finalize_new_cluster()

    def _finalize_new_cluster(self) -> None:
        with self._lock:
            if self.image.features is None and self.is_active:
                self._commit(replace(self.image, features=self._new_cluster_features()),
                             MetadataDelta(features_changed=True))

    def _new_cluster_features(self) -> FinalizedFeatures:
        return initial_features(self.supported_features, int(self.config["transaction.version"]))

    @property
    def finalized_features(self) -> FinalizedFeatures:
        """The cluster's finalized features (a new cluster's levels until the controller wrote them)."""
        features = self.image.features
        return features if features is not None else self._new_cluster_features()

    def finalized_level(self, feature: str) -> int:
        """The finalized level of a feature, 0 when it is not finalized: the one question the rest of the broker
        asks (``transaction.version`` for the transaction coordinator, ``group.version`` >= 1 for KIP-848)."""
        return self.finalized_features.level(feature)

    def update_features(self, updates: Iterable[FeatureUpdate], validate_only: bool = False) -> FinalizedFeatures:
        """UpdateFeatures: all updates or none (raises FeatureUpdateError with the first refused one)."""
        with self._lock:
            current = self.finalized_features
            new = apply_updates(current, updates, self.supported_features, self.node_id)
            if not validate_only and new is not current:
                self._commit(replace(self.image, features=new), MetadataDelta(features_changed=True))
            return new

    # ------------------------------------------------------------------ ACLs

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACL bindings (already validated); adding one that exists changes nothing."""
        with self._lock:
            new = add_bindings(self.image.acls, bindings)
            if new != self.image.acls:
                self._commit(replace(self.image, acls=new), MetadataDelta(acls_changed=True))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; for each filter, the bindings it removed."""
        with self._lock:
            filters = list(filters)
            matched = [[b for b in self.image.acls if f.matches(b)] for f in filters]
            gone = {b for m in matched for b in m}
            if gone:
                kept = tuple(b for b in self.image.acls if b not in gone)
                self._commit(replace(self.image, acls=kept), MetadataDelta(acls_changed=True))
            return matched


def _quota_text(value: float) -> str:
    """A quota as Kafka writes it to ZooKeeper: a double's text (1024.0)."""
    return repr(float(value))


def _topic_list_default(key: str) -> str | None:
    return _list_default(TOPIC_CONFIGS.get(key))


def _broker_list_default(key: str) -> str | None:
    return _list_default(BROKER_CONFIGS.get(key))


def _list_default(d) -> str | None:
    if d is None or d.type != "list":
        return None
    return ",".join(d.default) if isinstance(d.default, (list, tuple)) else (d.default or "")


def password_encoders(cfg: BrokerConfig) -> tuple[PasswordEncoder, ...]:
    """The encoder of ``password.encoder.secret`` (encodes and decodes), then the one of
    ``password.encoder.old.secret`` (decodes what was stored before the secret changed); InvalidConfigError
    for settings no encoder can use."""
    out = []
    for key in ("password.encoder.secret", "password.encoder.old.secret"):
        secret = cfg[key]
        secret = getattr(secret, "value", secret)
        try:
            encoder = password_encoder(secret, cfg["password.encoder.keyfactory.algorithm"],
                                       cfg["password.encoder.cipher.algorithm"], cfg["password.encoder.key.length"],
                                       cfg["password.encoder.iterations"])
        except PasswordEncoderError as e:
            raise InvalidConfigError(str(e)) from None
        if encoder is not None:
            out.append(encoder)
    return tuple(out)


def is_password_config(key: str) -> bool:
    """A broker setting of type PASSWORD, also as a listener's override (listener.name.<l>.ssl.key.password,
    listener.name.<l>.<mechanism>.sasl.jaas.config)."""
    d = BROKER_CONFIGS.get(listener_override_setting(key) or key)
    return d is not None and d.type == "password"


def apply_config_ops(current: Mapping[str, str], ops: Iterable[ConfigOp],
                     list_default: Callable[[str], str | None]) -> dict[str, str]:
    """IncrementalAlterConfigs semantics: SET, DELETE, and APPEND / SUBTRACT for list settings.

    ``list_default(key)`` is the default of a list setting as text (None: not a list); APPEND and
    SUBTRACT start from the override, or from that default when there is none, as Kafka does."""
    out = dict(current)
    for op in ops:
        if op.op == 0:
            if op.value is None:
                raise InvalidConfigError(f"Null value not supported for: {op.name}")
            out[op.name] = op.value
        elif op.op == 1:
            out.pop(op.name, None)
        elif op.op in (2, 3):
            default = list_default(op.name)
            if default is None:
                raise InvalidConfigError(f"Config value append/subtract is not allowed for config key: {op.name}")
            items = [x for x in out.get(op.name, default).split(",") if x]
            values = [x.strip() for x in (op.value or "").split(",") if x.strip()]
            if op.op == 2:
                items += [v for v in values if v not in items]
            else:
                items = [x for x in items if x not in values]
            out[op.name] = ",".join(items)
        else:
            raise InvalidConfigError(f"Unknown config operation {op.op} for {op.name}")
    return out


__all__ = ["INTERNAL_TOPICS", "ConfigOp", "Controller", "apply_config_ops", "is_password_config", "password_encoders",
           "validate_topic_name"]
