"""Who tiers each partition and how far, as gauges computed when scraped (what ``tierlog tier status`` shows,
for dashboards and alerts across a cluster).

On every broker, for each tiered partition it leads or follows:

- ``tierlog_remote_copier``: the id of the broker that copies and expires the partition (its leader; -1 while
  unknown). Every replica reports it, so one query shows where uploads run and that no two brokers copy.
- ``tierlog_remote_copying``: 1 where this broker copies (its copy task runs), 0 on followers and where copying
  is stopped (KIP-950 retain, KIP-917 size limit, offline log).
- ``tierlog_remote_highest_tiered_offset``: the highest offset this replica knows to be in the remote tier
  within its own leader-epoch lineage (-1 while the partition's remote metadata loads). On a follower it is
  the follower's tiering progress: how far it may delete locally what the leader uploaded; compare it with
  the leader's.
- ``tierlog_remote_local_log_start_offset``: the replica's local log start; below the highest tiered offset
  + 1 by the segments local retention still keeps.

Nothing here touches a hot path: the figures are read from the logs when Prometheus scrapes.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

COPIER = "tierlog_remote_copier"
COPYING = "tierlog_remote_copying"
HIGHEST_TIERED = "tierlog_remote_highest_tiered_offset"
LOCAL_START = "tierlog_remote_local_log_start_offset"


class TieringStateCollector(Collector):
    """The gauges above for the remote log manager ``rlm``'s led and followed partitions."""

    def __init__(self, rlm) -> None:
        self.rlm = rlm

    def describe(self):
        # the names, so that a scrape asking for other families (/metrics?name[]=...) skips this one
        return [GaugeMetricFamily(name, "") for name in (COPIER, COPYING, HIGHEST_TIERED, LOCAL_START)]

    def collect(self):
        labels = ["topic", "partition"]
        copier = GaugeMetricFamily(COPIER, "Id of the broker that copies and expires a tiered partition (its "
                                   "leader), as this replica knows it.", labels=labels)
        copying = GaugeMetricFamily(COPYING, "1 where this broker's copy task runs for the partition, else 0.",
                                    labels=labels)
        highest = GaugeMetricFamily(HIGHEST_TIERED, "Highest offset this replica knows to be in remote storage "
                                    "within its leader-epoch lineage (-1 while loading).", labels=labels)
        start = GaugeMetricFamily(LOCAL_START, "Local log start offset of a tiered partition's replica.",
                                  labels=labels)
        rlm = self.rlm
        rows = [(st.tp, st.log, rlm.broker_id, st.copy_task is not None and not st.copy_stopped, rlm.loaded(st))
                for st in list(rlm.partitions.values())]
        rows += [(tp, partition.log, getattr(partition, "leader_id", -1), False, rlm.rlmm.is_ready(tp))
                 for tp, (partition, _) in list(rlm.followers.items())]
        for tp, lg, leader, copies, loaded in rows:
            values = [tp.topic, str(tp.partition)]
            copier.add_metric(values, leader if leader is not None else -1)
            copying.add_metric(values, int(copies))
            highest.add_metric(values, lg.highest_offset_in_remote_storage if loaded else -1)
            start.add_metric(values, lg.local_log_start_offset)
        yield from (copier, copying, highest, start)
