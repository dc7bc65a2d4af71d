"""``tierlog cluster info`` and ``topic describe`` against three brokers in ZooKeeper mode: every broker, one
controller, the partitions each leads and hosts; once a broker is killed, the partitions it alone held listed
offline (described without offsets, marked as such, the other partitions' offsets still shown) and those
that lost a follower counted under-replicated."""

from __future__ import annotations

import asyncio

from tests.cli.clilib import as_json, ok, wait_for
from tests.harness.tierlog_cluster import start_cluster
from tierlog.client.admin import Admin
from tierlog.client.types import TopicPartition
from tierlog.errors import NotLeaderOrFollowerError


async def _follower_offsets(bootstrap: str, follower: int, tp: TopicPartition):
    """A follower's offsets asked as Kafka's debugging replica (any replica answers), and the error a consumer's
    ListOffsets gets from that follower."""
    async with Admin({"bootstrap.servers": bootstrap}) as admin:
        answered = await admin.list_replica_offsets(follower, {tp: "latest"})
        node = await admin._broker_node(follower, asyncio.get_running_loop().time() + 30)
        r = await admin._client.send(node, 2, {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": tp.topic, "partitions": [{"partition_index": tp.partition, "current_leader_epoch": -1,
                                              "timestamp": -1}]}]}, timeout_ms=30000)
        return answered, r.topics[0].partitions[0].error_code.value


def test_cluster_info_shows_leaders_per_broker_and_offline_partitions(tmp_path, zookeeper):
    cluster = start_cluster(tmp_path, zookeeper, brokers=3)
    try:
        b = ["-b", cluster.bootstrap]
        ok("topic", "create", "spread", "-p", "6", "-r", "1", *b)
        ok("topic", "create", "mirrored", "-p", "2", "-r", "3", *b)
        for p in range(6):
            ok("produce", "spread", "-p", str(p), *b, input="".join(f"{p}-{i}\n" for i in range(p + 1)))
        info = as_json("cluster", "info", *b)
        controller = info["controller_id"]
        assert [(x["id"], x["alive"], x["port"], x["controller"]) for x in info["brokers"]] == [
            (i, True, cluster.brokers[i].port, i == controller) for i in (1, 2, 3)]
        # Kafka's placement of 6 single-replica partitions on 3 brokers: two each; every broker a replica of both
        # mirrored partitions, one leader each on two of them
        assert [x["partitions"] for x in info["brokers"]] == [4] * 3
        assert sorted(x["leaders"] for x in info["brokers"]) == [2, 3, 3]
        assert info["partitions"] == 8 and info["offline_partitions"] == [] == info["under_replicated_partitions"]

        [spread] = as_json("topic", "describe", "spread", *b)
        assert [(p["log_start_offset"], p["log_end_offset"]) for p in spread["partitions"]] == [
            (0, p + 1) for p in range(6)]
        # While a leader is away, a live follower tells its offsets as Kafka's debugging replica (id -2); a
        # consumer's ListOffsets is still refused there.
        ok("produce", "mirrored", "-p", "0", *b, input="a\nb\nc\n")
        [mirrored] = as_json("topic", "describe", "mirrored", *b)
        p0 = mirrored["partitions"][0]
        follower = next(r for r in p0["isr"] if r != p0["leader"])

        def follower_caught_up():
            answered, refused = asyncio.run(_follower_offsets(cluster.bootstrap, follower,
                                                              TopicPartition("mirrored", 0)))
            result = answered.get(TopicPartition("mirrored", 0))
            return (result, refused) if result is not None and result.offset == 3 else None
        _, refused = wait_for(follower_caught_up, "the follower's high watermark at 3", timeout=60)
        assert refused == NotLeaderOrFollowerError.code
        victim = next(i for i in (1, 2, 3) if i != controller)
        lost = sorted(p["partition"] for p in spread["partitions"] if p["leader"] == victim)
        cluster.brokers[victim].kill()
        b = ["-b", cluster.bootstrap]  # the brokers still running

        def victim_gone():
            info = as_json("cluster", "info", *b)
            settled = not next(x for x in info["brokers"] if x["id"] == victim)["alive"] \
                and len(info["under_replicated_partitions"]) == 2
            return info if settled else None
        info = wait_for(victim_gone, f"broker {victim} declared dead, out of the ISRs", timeout=60)
        assert [(p["topic"], p["partition"], p["replicas"], p["offline_replicas"])
                for p in info["offline_partitions"]] == [("spread", p, [victim], [victim]) for p in lost]
        assert [(p["topic"], p["partition"], victim in p["isr"], len(p["isr"]), p["offline_replicas"])
                for p in info["under_replicated_partitions"]] == [("mirrored", p, False, 2, [victim]) for p in (0, 1)]
        assert next(x for x in info["brokers"] if x["id"] == victim) == {
            "id": victim, "host": None, "port": None, "rack": None, "alive": False, "controller": False,
            "leaders": 0, "partitions": 4}
        text = ok("cluster", "info", *b).stdout
        assert "brokers      2 alive, 1 not alive (named as replicas)" in text
        assert "partitions   8, 2 offline (without a leader), 2 under-replicated (ISR smaller than the replicas)" \
            in text and "Offline partitions:" in text and "Under-replicated partitions:" in text

        # The partitions with a live leader keep their offsets; those the victim alone held have none to show.
        [spread] = as_json("topic", "describe", "spread", *b)
        assert [(p["partition"], p["leader"] is None, p["log_start_offset"], p["log_end_offset"], p["offsets"])
                for p in spread["partitions"]] == [
            (p, True, None, None, "no leader") if p in lost else (p, False, 0, p + 1, "known") for p in range(6)]
        text = ok("topic", "describe", "spread", *b).stdout
        assert f"partition(s) {','.join(map(str, lost))}: without a leader and no live replica answered " \
               f"(offsets unknown)" in text
    finally:
        cluster.stop()
