"""What a running cluster looks like from a client: ``tierlog cluster info``.

The brokers and the controller come from DescribeCluster, the partitions from Metadata; both list only
live brokers, so a broker that is down shows up through the partitions that still name it as a replica
(Metadata's offline replicas).
"""

from __future__ import annotations

from tierlog import errors
from tierlog.client.admin import Admin, TopicDescription


async def describe_all(admin: Admin) -> dict[str, TopicDescription]:
    """Every topic, internal ones too, described from one Metadata request (a topic still being created
    left out until it has its leaders)."""
    return await admin.describe_all_topics(internal=True)


async def _describe_all(admin: Admin) -> dict[str, TopicDescription]:
    listed = await admin.list_topics(internal=True)
    if not listed:
        return {}
    try:
        return await admin.describe_topics(listed)
    except errors.UnknownTopicOrPartitionError as e:  # deleted between the listing and the description
        failed = getattr(e, "errors", None)
        if not failed or any(not isinstance(err, errors.UnknownTopicOrPartitionError) for err in failed.values()):
            raise
        return e.results


async def info(admin: Admin, topics: dict[str, TopicDescription] | None = None) -> dict:
    """Cluster id, controller, brokers (endpoint, rack, partitions led and hosted), topic counts, the
    partitions without a leader (offline) and those with a leader whose ISR is smaller than their replica set
    (under-replicated, as kafka-topics --under-replicated-partitions counts them). ``topics``: every topic
    described already (:func:`describe_all`), so a caller that needs them too asks once."""
    cluster = await admin.describe_cluster()
    if topics is None:
        topics = await _describe_all(admin)
    live = {b.node_id: b for b in cluster.brokers}
    leaders = dict.fromkeys(live, 0)
    hosted = dict.fromkeys(live, 0)
    offline, under = [], []
    for name, t in sorted(topics.items()):
        for p in t.partitions:
            for r in p.replicas:
                hosted[r] = hosted.get(r, 0) + 1
            row = {"topic": name, "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                   "isr": list(p.isr), "offline_replicas": list(p.offline_replicas)}
            if p.leader is None:
                offline.append(row)
                continue
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
            if len(p.isr) < len(p.replicas):  # Kafka's UnderReplicatedPartitions: led, ISR short of the replicas
                under.append(row)
    brokers = []
    for broker_id in sorted(set(live) | set(hosted)):
        b = live.get(broker_id)
        brokers.append({"id": broker_id, "host": b.host if b else None, "port": b.port if b else None,
                        "rack": b.rack if b else None, "alive": b is not None,
                        "controller": broker_id == cluster.controller_id,
                        "leaders": leaders.get(broker_id, 0), "partitions": hosted.get(broker_id, 0)})
    internal = sum(1 for t in topics.values() if t.internal)
    return {"cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id, "brokers": brokers,
            "topics": len(topics) - internal, "internal_topics": internal,
            "partitions": sum(len(t.partitions) for t in topics.values()), "offline_partitions": offline,
            "under_replicated_partitions": under}
