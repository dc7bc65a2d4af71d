"""``tierlog cluster info``: cluster id, controller, brokers and their endpoints, topic count."""

from __future__ import annotations

import argparse

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json, subcommands
from tierlog.cli.run import with_admin


def register(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="the cluster a broker belongs to")
    csub = subcommands(cluster, "cluster_command")
    p = csub.add_parser("info", help="cluster id, controller, brokers with their endpoints, topic count")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from tierlog.tools import cluster

    info = with_admin(args, cluster.info)
    if args.json:
        output.emit_json(info)
        return EXIT_OK
    output.lines(f"cluster id   {info['cluster_id']}", f"controller   {info['controller_id']}",
                 f"topics       {info['topics']} (and {info['internal_topics']} internal)", "")
    output.table(("BROKER", "HOST", "PORT", "RACK", "CONTROLLER"),
                 [(b["id"], b["host"], b["port"], b["rack"], "yes" if b["controller"] else "")
                  for b in info["brokers"]], right=("BROKER", "PORT"))
    return EXIT_OK
