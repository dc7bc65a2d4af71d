"""A fresh three-broker cluster is usable when its brokers say "ready" (issue 40): a broker's Metadata
names only a controller it lists (-1 until it knows the controller's endpoint, as Kafka answers), and
a CreateTopics sent at once through confluent-kafka completes instead of waiting on a controller the
client cannot reach ("Failed while waiting for controller" in 2 of 15 fresh clusters)."""

from __future__ import annotations

import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import rawclient
from tests.harness.tierlog_cluster import TierlogCluster


def _watch(cluster, i: int, answers: list, done: threading.Event) -> None:
    """Broker ``i``'s Metadata from the moment it says ready until it names a controller among all three."""
    b = cluster.brokers[i]
    while b.port is None and not done.is_set():
        time.sleep(0.005)  # the harness learns the port from the "ready" line
    while not done.is_set():
        try:
            md = rawclient.metadata(b.bootstrap)
        except OSError:
            continue
        answers.append((i, md.controller_id, {x.node_id for x in md.brokers}))
        if md.controller_id in cluster.brokers and len(md.brokers) == 3:
            return


def test_a_fresh_cluster_names_only_controllers_it_lists_and_creates_a_topic_at_once(tmp_path, zookeeper):
    cluster = TierlogCluster(tmp_path, zookeeper, 3, None, None)
    answers: list = []
    done = threading.Event()
    watchers = [threading.Thread(target=_watch, args=(cluster, i, answers, done)) for i in cluster.brokers]
    try:
        for w in watchers:
            w.start()
        cluster.start()  # each broker said "ready"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        creating = admin.create_topics([NewTopic("fresh", 3, 3)], request_timeout=30, operation_timeout=30)
        for w in watchers:
            w.join(60)
        assert not any(w.is_alive() for w in watchers), "a broker never named a controller among three brokers"
        wrong = [a for a in answers if a[1] != -1 and a[1] not in a[2]]
        assert not wrong, f"a controller named but not listed (broker, controller, listed): {wrong[:3]}"
        assert creating["fresh"].result(timeout=60) is None
        assert cluster.metadata(1, ["fresh"]).topics[0].error_code == 0
        print(f"\nfresh cluster: {len(answers)} Metadata answers from ready on, the controller always listed or -1 "
              f"({sum(a[1] == -1 for a in answers)} with -1); the topic created at once")
    finally:
        done.set()
        cluster.stop()
