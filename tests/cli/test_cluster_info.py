"""``tierlog cluster info`` against three brokers in ZooKeeper mode: every broker, one controller, the
partitions each leads and hosts, and once a broker is killed, its partitions listed offline."""

from __future__ import annotations

from tests.cli.clilib import as_json, ok, wait_for
from tests.harness.tierlog_cluster import start_cluster


def test_cluster_info_shows_leaders_per_broker_and_offline_partitions(tmp_path, zookeeper):
    cluster = start_cluster(tmp_path, zookeeper, brokers=3)
    try:
        b = ["-b", cluster.bootstrap]
        ok("topic", "create", "spread", "-p", "6", "-r", "1", *b)
        info = as_json("cluster", "info", *b)
        controller = info["controller_id"]
        assert [(x["id"], x["alive"], x["port"], x["controller"]) for x in info["brokers"]] == [
            (i, True, cluster.brokers[i].port, i == controller) for i in (1, 2, 3)]
        # Kafka's placement of 6 single-replica partitions on 3 brokers: two each
        assert [(x["leaders"], x["partitions"]) for x in info["brokers"]] == [(2, 2)] * 3
        assert info["partitions"] == 6 and info["offline_partitions"] == []

        [spread] = as_json("topic", "describe", "spread", *b)
        victim = next(i for i in (1, 2, 3) if i != controller)
        lost = sorted(p["partition"] for p in spread["partitions"] if p["leader"] == victim)
        cluster.brokers[victim].kill()
        b = ["-b", cluster.bootstrap]  # the brokers still running

        def victim_gone():
            info = as_json("cluster", "info", *b)
            return info if not next(x for x in info["brokers"] if x["id"] == victim)["alive"] else None
        info = wait_for(victim_gone, f"broker {victim} declared dead", timeout=60)
        assert [(p["topic"], p["partition"], p["replicas"], p["offline_replicas"])
                for p in info["offline_partitions"]] == [("spread", p, [victim], [victim]) for p in lost]
        assert next(x for x in info["brokers"] if x["id"] == victim) == {
            "id": victim, "host": None, "port": None, "rack": None, "alive": False, "controller": False,
            "leaders": 0, "partitions": 2}
        text = ok("cluster", "info", *b).stdout
        assert "brokers      2 alive, 1 not alive (named as replicas)" in text
        assert "partitions   6, 2 offline (without a leader)" in text and "Offline partitions:" in text
    finally:
        cluster.stop()
