"""What each console page shows, read from the cluster: one admin client (tierlog's own) for metadata,
offsets, configs and groups, and every broker's HTTP endpoint (``/v1/tier/status``) for the tiers.

The figures are the ones the ``tierlog`` commands print, computed by the same :mod:`tierlog.tools`
functions (``cluster info``, ``topic describe``, ``group describe``, ``tier status``), so a page and a
command never disagree about the same cluster. Every answer is plain data, ready for JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tierlog import errors
from tierlog.client.admin import Admin
from tierlog.client.types import TopicPartition
from tierlog.console import browse
from tierlog.console.metrics_history import MetricsHistory
from tierlog.console.snapshot import Snapshot
from tierlog.tools import clients, cluster, groups, tier, topics


class ConsoleViews:
    """The data behind the console's pages, for the cluster reached at ``bootstrap``."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0, client_config: Mapping[str, Any] | None = None
                 ) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._client_config = dict(client_config or {})
        self._admin: Admin | None = None
        #: the cluster, topics and groups pages' shared picture, refreshed in the background while asked for
        self.snapshot = Snapshot(self.picture, partitions=lambda picture: picture["cluster"]["partitions"])

    async def admin(self) -> Admin:
        # One client for the console's life: its connections and metadata are reused by every poll.
        if self._admin is None or self._admin.closed:
            self._admin = clients.admin(self.bootstrap, self.timeout_s, self._client_config)
            await self._admin.start()
        return self._admin

    async def close(self) -> None:
        await self.snapshot.close()
        await self.stop_metrics()
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    async def _tier_status(self, admin: Admin, topic: str | None = None) -> dict:
        """``tierlog tier status``'s merged answer of every live broker (asked in threads: urllib)."""
        endpoints = await tier.cluster_endpoints(admin)
        return await asyncio.to_thread(tier.cluster_status, endpoints, topic, self.timeout_s)

    # -------------------------------------------------------------------------------------------- pages

    async def topic(self, name: str) -> dict:
        """``tierlog topic describe``, with each partition's leader row of the tier status."""
        admin = await self.admin()
        described, status = await asyncio.gather(topics.describe(admin, [name]), self._tier_status(admin, name))
        out = described[0]
        rows = {r["partition"]: r for r in status["partitions"] if r["role"] == "leader"}
        for p in out["partitions"]:
            p["tier"] = rows.get(p["partition"])
        out["tiering"] = status["topics"][0] if status["topics"] else None
        return out

    async def partition(self, name: str, partition: int) -> dict:
        """The tiers of one partition: every replica's tier status row (the leader's first), the topic's
        tiering state (KIP-950), the high watermark and last stable offset, and when local retention runs."""
        admin = await self.admin()
        described = (await admin.describe_topics([name]))[name]
        if not any(p.partition == partition for p in described.partitions):
            raise errors.UnknownTopicOrPartitionError(f"Topic {name} has no partition {partition}")
        tp = TopicPartition(name, partition)
        status = await self._tier_status(admin, name)
        try:
            hw, lso = await asyncio.gather(admin.list_offsets({tp: "latest"}),
                                           admin.list_offsets({tp: "latest"}, isolation_level="read_committed"))
            offsets = {"high_watermark": hw[tp].offset, "last_stable_offset": lso[tp].offset}
        except errors.KafkaError as e:  # no leader: the picture still shows what the replicas hold
            offsets = {"high_watermark": None, "last_stable_offset": None, "offsets_error": f"{e.name}: {e.message}"}
        replicas = [r for r in status["partitions"] if r["partition"] == partition]
        brokers = {b["node_id"]: b for b in status["brokers"]}
        for r in replicas:
            b = brokers.get(r["broker"], {})
            r["next_retention_check_ms"] = b.get("next_retention_check_ms")
            r["now_ms"] = b.get("now_ms")
        return {"topic": name, "partition": partition, **offsets, "replicas": replicas,
                "tiering": status["topics"][0] if status["topics"] else None,
                "brokers_unanswered": [{"node_id": b["node_id"], "error": b["error"]}
                                       for b in status["brokers"] if b["error"]]}

    async def group(self, name: str) -> dict:
        """``tierlog group describe``: members, assignment, committed offsets and lag per partition."""
        return await groups.describe(await self.admin(), name)

    # ------------------------------------------------------------------------------------------ actions

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> dict:
        return (await topics.create(await self.admin(), [name], partitions, replication_factor, configs))[0]

    async def delete_topic(self, name: str) -> dict:
        await topics.delete(await self.admin(), [name])
        return {"topic": name, "deleted": True}

    # ---------------------------------------------------------------- the shared picture (console/snapshot.py)

    async def picture(self) -> dict:
        """The cluster, topics and groups pages' figures in one go, for every open page at once
        (:class:`~tierlog.console.snapshot.Snapshot` calls it): one DescribeCluster, the topics' Metadata
        (asked once, shared by both pages), every broker's ``/v1/tier/status?summary=topics`` (one row per
        topic, not per partition), ListGroups; DescribeLogDirs only of leaders whose broker's endpoint did
        not answer."""
        admin = await self.admin()
        described = await cluster.describe_all(admin)
        endpoints = await tier.cluster_endpoints(admin)
        info, status, listed = await asyncio.gather(
            cluster.info(admin, described),
            asyncio.to_thread(tier.cluster_status, endpoints, None, self.timeout_s, "topics"),
            groups.list_groups(admin))
        by_id = {b["node_id"]: b for b in status["brokers"]}
        for b in info["brokers"]:
            s = by_id.get(b["id"], {})
            b["endpoint"] = s.get("url")
            b["endpoint_error"] = s.get("error") if b["alive"] else None
            b["tier_state"] = s.get("state")
            b["log_dirs"] = s.get("log_dirs") or []
        info["bootstrap"] = self.bootstrap
        unanswered = {b["node_id"] for b in status["brokers"] if b["error"]}
        user_topics = {n: t for n, t in described.items() if not t.internal}
        # a broker whose endpoint did not answer: its leaders' local sizes from DescribeLogDirs, as before
        fallback = await _leader_sizes(admin, {n: _Led(t, unanswered) for n, t in user_topics.items()}) \
            if unanswered else {}
        return {"cluster": info, "topics": _topic_rows(user_topics, status, unanswered, fallback),
                "groups": sorted(listed, key=lambda g: g["group"]),
                "brokers_unanswered": sorted(unanswered)}

    async def alter_topic_configs(self, name: str, set_: Mapping[str, str], delete: list[str]) -> dict:
        """``tierlog topic alter-config`` (IncrementalAlterConfigs: SET and DELETE); the overrides after."""
        both = sorted(set(set_) & set(delete))
        if both:
            raise errors.InvalidRequestError(f"{', '.join(both)}: set and deleted in one request")
        if not set_ and not delete:
            raise errors.InvalidRequestError("nothing to change: give a setting to set or to delete")
        return await topics.alter_config(await self.admin(), name, set_, delete)

    async def reset_group_offsets(self, group: str, topic: str | None, to: tuple[str, int], execute: bool) -> dict:
        """``tierlog group reset-offsets`` (kafka-consumer-groups --reset-offsets): the new offsets of the
        group's partitions (every partition it committed, or every partition of ``topic``), written only
        when ``execute``. NON_EMPTY_GROUP while the group has members."""
        rows = await groups.reset_offsets(await self.admin(), group, None if topic is None else [topic], to, execute)
        return {"group": group, "topic": topic, "to": to[0], "value": to[1], "executed": execute, "partitions": rows}

    async def disable_tiering(self, name: str, delete_remote: bool) -> dict:
        """KIP-950 as ``tierlog`` takes it: ``remote.storage.enable=false`` with ``remote.log.delete.on.disable``
        true (delete the remote data) or false (retain it until retention expires it). The draft's
        ``remote.log.disable.policy`` is removed in the same request so the choice made here is what happens."""
        admin = await self.admin()
        status = await self._tier_status(admin, name)
        state = status["topics"][0] if status["topics"] else None
        if state is None:
            await admin.describe_topics([name])  # UNKNOWN_TOPIC_OR_PARTITION for a topic that is not there
            raise errors.InvalidConfigError(f"Topic {name} is not tiered (remote.storage.enable=false): "
                                            "there is no tiered storage to disable")
        if state["state"] == "DISABLED" and (state["policy"] == "delete" or not delete_remote):
            raise errors.InvalidConfigError(f"Tiered storage of topic {name} is disabled already "
                                            f"(policy {state['policy']})")
        await admin.incremental_alter_configs({("topic", name): [
            ("remote.storage.enable", "set", "false"),
            ("remote.log.delete.on.disable", "set", "true" if delete_remote else "false"),
            ("remote.log.disable.policy", "delete")]})
        after = await self._tier_status(admin, name)
        return {"topic": name, "policy": "delete" if delete_remote else "retain",
                "tiering": after["topics"][0] if after["topics"] else None}

    # ------------------------------------------------------------------ the message browser, the metrics charts

    #: How often the metrics charts' history scrapes every broker's /metrics (``tierlog console
    #: --metrics-interval``).
    metrics_interval_s = 5.0
    _metrics: MetricsHistory | None = None

    async def records(self, topic: str, partition: int, **page: Any) -> dict:
        """One page of the message browser (:func:`tierlog.console.browse.read_page`)."""
        # asked first with the admin client: an unknown topic is UNKNOWN_TOPIC_OR_PARTITION at once (404),
        # where a consumer would wait for its metadata until the timeout
        described = (await (await self.admin()).describe_topics([topic]))[topic]
        if not any(p.partition == partition for p in described.partitions):
            raise errors.UnknownTopicOrPartitionError(f"Topic {topic} has no partition {partition}")
        return await browse.read_page(self.bootstrap, self.timeout_s, topic, partition,
                                      client_config=self._client_config, **page)

    async def metrics(self) -> dict:
        """The metrics charts' history, scraped in the background from the first call on."""
        if self._metrics is None:
            async def endpoints() -> list[dict]:
                return await tier.cluster_endpoints(await self.admin())
            self._metrics = MetricsHistory(endpoints, self.metrics_interval_s, min(self.timeout_s, 5.0))
        if self._metrics.last_scrape is None:  # the first call: answer with the first scrape
            await self._metrics.scrape_once()
        self._metrics.start()
        return self._metrics.charts()

    async def stop_metrics(self) -> None:
        if self._metrics is not None:
            await self._metrics.stop()


async def _leader_sizes(admin: Admin, described: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """The size of each partition's leader replica (DescribeLogDirs of the leaders); a broker that does not
    answer leaves its partitions out."""
    leaders = {TopicPartition(n, p.partition): p.leader for n, t in described.items() for p in t.partitions
               if p.leader is not None}
    if not leaders:
        return {}
    try:
        dirs = await admin.describe_log_dirs(sorted(set(leaders.values())))
    except errors.KafkaError as e:
        dirs = getattr(e, "results", {}) or {}
    out: dict[TopicPartition, int] = {}
    for broker, by_dir in dirs.items():
        for d in by_dir.values():
            for tp, replica in d.replica_infos.items():
                if leaders.get(tp) == broker and not replica.is_future:
                    out[tp] = replica.size
    return out


def _total(values) -> int | None:
    """The sum, or None when any part is unknown (a page shows "-", never a figure short of a part)."""
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


class _Led:
    """A topic's description cut to the partitions led by the given brokers (for :func:`_leader_sizes`)."""

    def __init__(self, described: Any, brokers: set[int]) -> None:
        self.partitions = [p for p in described.partitions if p.leader in brokers]


def _topic_rows(described: Mapping[str, Any], status: dict, unanswered: set[int],
                fallback: Mapping[TopicPartition, int]) -> list[dict]:
    """The topic list's rows from the Metadata and the brokers' per-topic tier rows: the local size summed
    over the leaders (every topic), the remote size and copy lag over a tiered topic's leaders; None ("-")
    when a part is unknown (a leader's broker did not answer, remote metadata still loading)."""
    tiering = {t["topic"]: t for t in status["topics"]}
    totals: dict[str, list[dict]] = {}
    for row in status.get("topic_totals", []):
        totals.setdefault(row["topic"], []).append(row)
    rows = []
    for name in sorted(described):
        t = described[name]
        parts = totals.get(name, [])
        led_unanswered = [p for p in t.partitions if p.leader in unanswered]
        offline = any(p.leader is None for p in t.partitions)  # its replica's size is not known: "-"
        asked = [fallback.get(TopicPartition(name, p.partition)) for p in led_unanswered]
        local = None if offline else _total([*(r["local_bytes"] for r in parts), *asked])
        tiered = any(r["remote_bytes"] is not None or r["loading_partitions"] for r in parts)
        remote = _total(r["remote_bytes"] for r in parts) if tiered and not led_unanswered else None
        lag = _total(r["copy_lag_bytes"] for r in parts) if tiered and not led_unanswered else None
        state = tiering.get(name)
        rows.append({"topic": name, "topic_id": None if t.topic_id is None else str(t.topic_id),
                     "partitions": len(t.partitions),
                     "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
                     "offline": sum(1 for p in t.partitions if p.leader is None),
                     "under_replicated": sum(1 for p in t.partitions
                                             if p.leader is not None and len(p.isr) < len(p.replicas)),
                     "tiering": state["state"] if state else None,
                     "local_bytes": local, "remote_bytes": remote, "copy_lag_bytes": lag})
    return rows
