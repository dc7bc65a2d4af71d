"""The cluster metadata image: what every broker knows about the cluster.

An immutable snapshot (cluster id, brokers, topics with their ids, partitions and config
overrides, dynamic broker configs). The controller produces a new image for every change and
hands brokers a :class:`MetadataDelta`; the broker applies deltas to its logs. In a cluster the
controller will run elsewhere and deltas will arrive over the network; the shapes stay the same.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from tierlog.cluster.acls import AclBinding
from tierlog.cluster.features import FinalizedFeatures
from tierlog.kafka_uuid import uuid_from_str, uuid_to_str

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__remote_log_metadata"})
#: The topics Kafka's Topic.isInternal names: clients may not produce to them (the broker's coordinators
#: write them). __remote_log_metadata is written by the metadata manager's own producer, as in Kafka.
COORDINATOR_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    # A reassignment in progress (KIP-455): ``replicas`` is then the target replicas followed by the original
    # ones not in the target; these are the replicas being added (target - original) and removed
    # (original - target).
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    def to_json(self) -> dict:
        d = {"partition": self.partition, "leader": self.leader, "leaderEpoch": self.leader_epoch,
             "replicas": list(self.replicas), "isr": list(self.isr), "partitionEpoch": self.partition_epoch}
        if self.is_reassigning:
            d["addingReplicas"], d["removingReplicas"] = list(self.adding_replicas), list(self.removing_replicas)
        return d

    @classmethod
    def from_json(cls, d: dict) -> PartitionImage:
        return cls(d["partition"], d["leader"], d["leaderEpoch"], tuple(d["replicas"]), tuple(d["isr"]),
                   d.get("partitionEpoch", 0), tuple(d.get("addingReplicas", ())),
                   tuple(d.get("removingReplicas", ())))


class TieringState(enum.Enum):
    """A topic's tiered storage lifecycle (the KIP-950 draft): ENABLED -> DISABLING -> DISABLED, and back
    to ENABLED when tiering is turned on again."""

    ENABLED = "ENABLED"
    DISABLING = "DISABLING"
    DISABLED = "DISABLED"


#: The transitions a topic's tiering state may take (staying put is always allowed): a disablement runs
#: to completion before anything else changes; a disabled topic may be tiered again, or have its retained
#: remote data deleted (a second disablement with the delete policy).
TIERING_NEXT: dict[TieringState, frozenset[TieringState]] = {
    TieringState.ENABLED: frozenset({TieringState.DISABLING}),
    TieringState.DISABLING: frozenset({TieringState.DISABLED}),
    TieringState.DISABLED: frozenset({TieringState.ENABLED, TieringState.DISABLING}),
}


def check_tiering_transition(topic: str, src: TieringState, dst: TieringState) -> None:
    if src != dst and dst not in TIERING_NEXT[src]:
        raise ValueError(f"tiering of topic {topic} cannot go from {src.value} to {dst.value}")


@dataclass(frozen=True, slots=True)
class TopicTiering:
    """Where a topic is in its tiering lifecycle. ``policy`` says what disabling does to remote data
    (``retain`` or ``delete``); ``epoch`` grows with every transition, so a broker can tell a stale
    DisableRemoteTopic request from the current one."""

    state: TieringState
    policy: str = "retain"
    epoch: int = 0

    def to_json(self) -> dict:
        return {"state": self.state.value, "policy": self.policy, "epoch": self.epoch}

    @classmethod
    def from_json(cls, d: dict) -> TopicTiering:
        return cls(TieringState(d["state"]), d.get("policy", "retain"), d.get("epoch", 0))


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """Where a partition rebuilt from the remote tier (``tierlog tier restore``) starts: its log starts
    at ``log_start_offset`` (the oldest restored remote segment), its first local offset is
    ``log_end_offset`` (one past the newest), and ``leader_epochs`` ((epoch, start offset), ascending)
    are the epochs of the restored segments. A replica creating the partition's log positions it there,
    so new records continue after the restored ones and the remote tier serves everything below."""

    log_start_offset: int
    log_end_offset: int
    leader_epochs: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not 0 <= self.log_start_offset < self.log_end_offset:
            raise ValueError(f"restore point offsets {self.log_start_offset}..{self.log_end_offset} are invalid")
        offsets = [o for _, o in self.leader_epochs]
        epochs = [e for e, _ in self.leader_epochs]
        if not self.leader_epochs or epochs != sorted(set(epochs)) or offsets != sorted(offsets) \
                or offsets[-1] >= self.log_end_offset or epochs[0] < 0:
            raise ValueError(f"restore point leader epochs {self.leader_epochs} are invalid")

    @property
    def latest_epoch(self) -> int:
        return self.leader_epochs[-1][0]

    def to_json(self) -> dict:
        return {"log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
                "leader_epochs": [list(e) for e in self.leader_epochs]}

    @classmethod
    def from_json(cls, d: dict) -> RestorePoint:
        return cls(int(d["log_start_offset"]), int(d["log_end_offset"]),
                   tuple((int(e), int(o)) for e, o in d["leader_epochs"]))


def restore_points_to_json(points: dict[int, RestorePoint]) -> dict:
    return {str(p): rp.to_json() for p, rp in sorted(points.items())}


def restore_points_from_json(d: dict | None) -> dict[int, RestorePoint]:
    return {int(p): RestorePoint.from_json(rp) for p, rp in (d or {}).items()}


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage]
    configs: dict[str, str] = field(default_factory=dict)  # overrides only, as strings
    tiering: TopicTiering | None = None  # None: tiering was never turned on
    # A topic rebuilt from the remote tier: where each restored partition starts (kept for the topic's life,
    # so a replica created later, by a reassignment say, starts there too and then follows its leader).
    restored: dict[int, RestorePoint] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def tiering_state(self) -> TieringState | None:
        return self.tiering.state if self.tiering is not None else None

    def to_json(self) -> dict:
        d = {"name": self.name, "topicId": uuid_to_str(self.topic_id),
             "partitions": [p.to_json() for p in sorted(self.partitions.values(), key=lambda p: p.partition)],
             "configs": dict(sorted(self.configs.items()))}
        if self.tiering is not None:
            d["tiering"] = self.tiering.to_json()
        if self.restored:
            d["restored"] = restore_points_to_json(self.restored)
        return d

    @classmethod
    def from_json(cls, d: dict) -> TopicImage:
        parts = {p["partition"]: PartitionImage.from_json(p) for p in d["partitions"]}
        tiering = TopicTiering.from_json(d["tiering"]) if d.get("tiering") else None
        return cls(d["name"], uuid_from_str(d["topicId"]), parts, dict(d.get("configs", {})), tiering,
                   restore_points_from_json(d.get("restored")))


@dataclass(frozen=True, slots=True)
class BrokerImage:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()  # (listener name, host, port); empty: host and port only

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """(host, port) of ``listener`` (the inter-broker one, say); the first advertised when unknown."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerImage]
    topics: dict[str, TopicImage]
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # resource name ("" = all)
    next_producer_id_block: int = 0  # first producer id not yet handed to a broker
    # Every topic this cluster deleted, topic id (text form) -> name: the remote store reconciler deletes
    # leftover objects of these and of current topics only, never of topic ids the cluster never had.
    deleted_topics: dict[str, str] = field(default_factory=dict)
    # Client quotas by Kafka's entity path under /config ("users/<u>/clients/<c>", "clients/<default>", ...)
    client_quotas: dict[str, dict[str, str]] = field(default_factory=dict)
    # The ACL bindings (cluster/acls.py), sorted: every broker's authorizer reads them from its image.
    acls: tuple[AclBinding, ...] = ()
    # SCRAM credentials, user -> mechanism -> Kafka's text form (salt, stored_key, server_key, iterations):
    # ZooKeeper's /config/users/<user> in a cluster.
    user_scram: dict[str, dict[str, str]] = field(default_factory=dict)
    # KIP-584's finalized feature levels (cluster/features.py): ZooKeeper's /feature in a cluster; None until
    # the controller first finalizes them (a new cluster's levels).
    features: FinalizedFeatures | None = None
    # Group configs (KIP-848's GROUP resource, config/group_configs.py), group id -> overrides: ZooKeeper's
    # /config/groups/<group> in a cluster.
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def with_topic(self, topic: TopicImage) -> MetadataImage:
        return replace(self, topics={**self.topics, topic.name: topic})

    def without_topic(self, name: str) -> MetadataImage:
        gone = self.topics.get(name)
        deleted = self.deleted_topics if gone is None else {**self.deleted_topics, uuid_to_str(gone.topic_id): name}
        return replace(self, topics={k: v for k, v in self.topics.items() if k != name}, deleted_topics=deleted)

    def known_topic_ids(self) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """(ids of every topic this cluster has or had, ids of those it deleted)."""
        deleted = {uuid_from_str(i) for i in self.deleted_topics}
        return {t.topic_id for t in self.topics.values()} | deleted, deleted

    def to_json(self) -> dict:
        d = {"version": 1, "clusterId": self.cluster_id, "controllerId": self.controller_id,
             "topics": [t.to_json() for t in sorted(self.topics.values(), key=lambda t: t.name)],
             "brokerConfigs": self.broker_configs, "nextProducerIdBlock": self.next_producer_id_block}
        if self.deleted_topics:
            d["deletedTopics"] = [{"topicId": i, "name": n} for i, n in sorted(self.deleted_topics.items())]
        if self.client_quotas:
            d["clientQuotas"] = self.client_quotas
        if self.acls:
            d["acls"] = [b.to_json() for b in self.acls]
        if self.user_scram:
            d["userScramCredentials"] = self.user_scram
        if self.features is not None:
            d["features"] = self.features.to_json()
        if self.group_configs:
            d["groupConfigs"] = self.group_configs
        return d

    @classmethod
    def from_json(cls, d: dict, brokers: dict[int, BrokerImage]) -> MetadataImage:
        if d.get("version") != 1:
            raise ValueError(f"unsupported metadata version {d.get('version')!r}")
        topics = {t["name"]: TopicImage.from_json(t) for t in d.get("topics", [])}
        deleted = {t["topicId"]: t["name"] for t in d.get("deletedTopics", [])}
        return cls(d["clusterId"], d["controllerId"], brokers, topics, dict(d.get("brokerConfigs", {})),
                   d.get("nextProducerIdBlock", 0), deleted, dict(d.get("clientQuotas", {})),
                   tuple(AclBinding.from_json(a) for a in d.get("acls", ())),
                   dict(d.get("userScramCredentials", {})),
                   FinalizedFeatures.from_json(d["features"]) if "features" in d else None,
                   dict(d.get("groupConfigs", {})))


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """What changed between two images, as the broker needs to act on it."""

    created: tuple[TopicImage, ...] = ()
    deleted: tuple[TopicImage, ...] = ()
    partitions_added: tuple[tuple[TopicImage, tuple[int, ...]], ...] = ()
    configs_changed: tuple[TopicImage, ...] = ()
    broker_configs_changed: bool = False
    tiering_changed: tuple[TopicImage, ...] = ()  # topics whose TopicTiering moved (KIP-950)
    # Topics (existing before and after) with a partition whose leader, leader epoch, ISR or replicas moved.
    partitions_changed: tuple[TopicImage, ...] = ()
    brokers_changed: bool = False
    client_quotas_changed: bool = False
    acls_changed: bool = False
    user_scram_changed: bool = False
    features_changed: bool = False
    group_configs_changed: bool = False


def diff_images(old: MetadataImage, new: MetadataImage) -> MetadataDelta:
    """What a broker must act on to go from ``old`` to ``new`` (a topic recreated under the same name, with
    another id, is a deletion and a creation)."""
    created, deleted, added, configs, tiering, moved = [], [], [], [], [], []
    for name, t in old.topics.items():
        n = new.topics.get(name)
        if n is None or n.topic_id != t.topic_id:
            deleted.append(t)
    broker_configs = old.broker_configs != new.broker_configs
    for name, t in new.topics.items():
        o = old.topics.get(name)
        if o is None or o.topic_id != t.topic_id:
            created.append(t)
            continue
        extra = tuple(sorted(set(t.partitions) - set(o.partitions)))
        if extra:
            added.append((t, extra))
        if broker_configs or o.configs != t.configs or o.tiering != t.tiering:
            configs.append(t)
        if o.tiering != t.tiering:
            tiering.append(t)
        if any(p in o.partitions and o.partitions[p] != pi for p, pi in t.partitions.items()):
            moved.append(t)
    return MetadataDelta(tuple(created), tuple(deleted), tuple(added), tuple(configs), broker_configs,
                         tuple(tiering), tuple(moved), old.brokers != new.brokers,
                         old.client_quotas != new.client_quotas, old.acls != new.acls,
                         old.user_scram != new.user_scram, old.features != new.features,
                         old.group_configs != new.group_configs)
