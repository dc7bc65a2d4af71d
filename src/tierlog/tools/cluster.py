"""What a running cluster looks like from a client: ``tierlog cluster info``."""

from __future__ import annotations

from tierlog.client.admin import Admin


async def info(admin: Admin) -> dict:
    """Cluster id, controller, brokers with their endpoints, and how many topics there are."""
    cluster = await admin.describe_cluster()
    topics = await admin.list_topics(internal=True)
    internal = sum(1 for t in topics.values() if t.internal)
    return {"cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id,
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                         "controller": b.node_id == cluster.controller_id} for b in cluster.brokers],
            "topics": len(topics) - internal, "internal_topics": internal}
