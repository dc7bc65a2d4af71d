"""The client's view of the cluster: brokers, topics, partition leaders, from Metadata responses.

Before the first answer the view holds only the bootstrap addresses, as pseudo-nodes with ids
-1, -2, ... (Kafka's convention), which is also what a rebootstrap (KIP-899) goes back to.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from tierlog import errors


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_bootstrap(self) -> bool:
        return self.node_id < 0


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False
    error_code: int = 0
    _available: list[int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def available_partitions(self) -> list[int]:
        """Partitions with a leader; computed once (a TopicInfo is not changed after the metadata
        answer that built it), since the producer asks for every record."""
        if self._available is None:
            self._available = [p for p, info in self.partitions.items() if info.leader >= 0]
        return self._available


def parse_bootstrap(servers: list[str] | str) -> list[Node]:
    """``bootstrap.servers`` as pseudo-nodes; ValueError names a malformed entry."""
    if isinstance(servers, str):
        servers = [s for s in servers.split(",")]
    nodes = []
    for i, raw in enumerate(s.strip() for s in servers if s.strip()):
        host, sep, port = raw.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise errors.InvalidConfigError(f"Invalid url in bootstrap.servers: {raw!r} (expected host:port)")
        nodes.append(Node(-(i + 1), host.strip("[]"), int(port)))
    if not nodes:
        raise errors.InvalidConfigError("bootstrap.servers must name at least one host:port")
    return nodes


class ClusterMetadata:
    """Mutable cache, replaced wholesale by each full answer and merged for topic subsets."""

    def __init__(self, bootstrap: list[Node]) -> None:
        self.bootstrap_nodes = list(bootstrap)
        self.brokers: dict[int, Node] = {n.node_id: n for n in bootstrap}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.bootstrapped = True  # the broker list is the bootstrap list
        self.version = 0  # bumped on every update, so waiters can tell

    def rebootstrap(self) -> None:
        """Forget every broker and go back to the bootstrap list (KIP-899); topics stay known."""
        self.brokers = {n.node_id: n for n in self.bootstrap_nodes}
        self.bootstrapped = True
        self.version += 1

    def update(self, response: Any, *, all_topics: bool) -> None:
        brokers = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port), b.rack) for b in response.brokers}
        if brokers:
            self.brokers = brokers
            self.bootstrapped = False
        self.cluster_id = getattr(response, "cluster_id", None)
        self.controller_id = int(getattr(response, "controller_id", -1))
        topics = {} if all_topics else dict(self.topics)
        for t in response.topics:
            name = t.name
            if name is None:
                continue
            info = TopicInfo(name, getattr(t, "topic_id", None) or uuid.UUID(int=0),
                             internal=bool(getattr(t, "is_internal", False)), error_code=t.error_code.value)
            for p in t.partitions:
                info.partitions[int(p.partition_index)] = PartitionInfo(
                    int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes), p.error_code.value)
            if info.error_code and not info.partitions:
                topics.pop(name, None)
                # keep the error visible to whoever waits for this topic
                topics[name] = info
            else:
                topics[name] = info
        self.topics = topics
        self.version += 1

    def leadership(self) -> tuple:
        """The brokers and every partition's leader and epoch: two answers with the same leadership are
        equivalent (nothing a waiting client could act on changed)."""
        return (tuple(sorted(self.brokers.items())),
                tuple(sorted((t.name, p.partition, p.leader, p.leader_epoch) for t in self.topics.values()
                             for p in t.partitions.values())))

    def leader_for(self, topic: str, partition: int) -> Node | None:
        info = self.topics.get(topic)
        if info is None:
            return None
        p = info.partitions.get(partition)
        if p is None or p.leader < 0:
            return None
        return self.brokers.get(p.leader)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id from the last metadata, or None when unknown (or the zero id of an older broker)."""
        info = self.topics.get(topic)
        if info is None or not info.topic_id.int:
            return None
        return info.topic_id

    def topic_ids(self, topics) -> tuple[dict[str, uuid.UUID | None], dict[uuid.UUID, str]]:
        """Each topic's id (None when unknown) and the known ids' names: for a request that names topics by
        id when every one has an id (KIP-516), and for reading its answer back by name."""
        ids = {t: self.topic_id(t) for t in topics}
        return ids, {i: t for t, i in ids.items() if i is not None}

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        if info is None or (info.error_code and not info.partitions):
            return None
        return len(info.partitions)
