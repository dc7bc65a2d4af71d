"""``tierlog cluster info``: cluster id, controller, brokers with the partitions they lead and host, the
partitions without a leader (offline) and those whose ISR is short of their replicas (under-replicated)."""

from __future__ import annotations

import argparse

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json, subcommands
from tierlog.cli.run import with_admin


def register(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="the cluster a broker belongs to")
    csub = subcommands(cluster, "cluster_command")
    p = csub.add_parser("info", help="cluster id, controller, brokers with the partitions they lead and host, "
                                     "offline and under-replicated partitions")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from tierlog.tools import cluster

    info = with_admin(args, cluster.info)
    if args.json:
        output.emit_json(info)
        return EXIT_OK
    alive = sum(1 for b in info["brokers"] if b["alive"])
    down = len(info["brokers"]) - alive
    offline, under = info["offline_partitions"], info["under_replicated_partitions"]
    output.lines(f"cluster id   {info['cluster_id']}",
                 f"controller   {info['controller_id'] if info['controller_id'] >= 0 else 'none'}",
                 f"brokers      {alive} alive" + (f", {down} not alive (named as replicas)" if down else ""),
                 f"topics       {info['topics']} (and {info['internal_topics']} internal)",
                 f"partitions   {info['partitions']}, {len(offline)} offline (without a leader), {len(under)} "
                 f"under-replicated (ISR smaller than the replicas)", "")
    output.table(("BROKER", "ADDRESS", "RACK", "STATE", "CONTROLLER", "LEADERS", "PARTITIONS"),
                 [(b["id"], f"{b['host']}:{b['port']}" if b["alive"] else None, b["rack"],
                   "alive" if b["alive"] else "not alive", "yes" if b["controller"] else "", b["leaders"],
                   b["partitions"]) for b in info["brokers"]],
                 right=("BROKER", "LEADERS", "PARTITIONS"))
    for title, rows in (("Offline partitions:", offline), ("Under-replicated partitions:", under)):
        if rows:
            output.lines("", title)
            output.table(("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE"),
                         [(p["topic"], p["partition"], "none" if p["leader"] is None else p["leader"],
                           _ids(p["replicas"]), _ids(p["isr"]) or None, _ids(p["offline_replicas"]) or None)
                          for p in rows], right=("PARTITION", "LEADER"))
    return EXIT_OK


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))
