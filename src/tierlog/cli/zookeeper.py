"""``tierlog zookeeper start``: a ZooKeeper for a development cluster, in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from tierlog.cli.parser import add_debug, positive_int, subcommands

#: Beside the brokers' ``./data/logs`` of config/server.properties, so a restarted ZooKeeper keeps the
#: cluster (its id, topics) the brokers' logs belong to.
DEFAULT_DATA_DIR = "./data/zookeeper"


def register(sub: argparse._SubParsersAction) -> None:
    zk = sub.add_parser("zookeeper", help="run a ZooKeeper for a development cluster")
    zsub = subcommands(zk, "zookeeper_command")
    start = zsub.add_parser("start", help="run a standalone ZooKeeper in the foreground until Ctrl-C or SIGTERM")
    start.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    start.add_argument("--port", type=positive_int, default=2181, help="client port (default 2181)")
    start.add_argument("--data-dir", metavar="DIR", default=DEFAULT_DATA_DIR,
                       help=f"snapshots, transaction logs, zoo.cfg and zookeeper.log (default {DEFAULT_DATA_DIR}); "
                            f"kept when it stops")
    add_debug(start)
    start.set_defaults(handler=cmd_start)


def cmd_start(args: argparse.Namespace) -> int:
    from tierlog.tools import zookeeper

    def ready(server: zookeeper.ZooKeeperServer) -> None:
        print(f"ZooKeeper ready on {server.connect} (pid {server.pid}, data in {server.data_dir}, "
              f"log in {server.log_path}); Ctrl-C stops it", flush=True)

    server = zookeeper.ZooKeeperServer(args.data_dir, args.host, args.port)
    try:
        status = zookeeper.run_foreground(server, ready)
    except zookeeper.ZooKeeperError as e:  # not installed, port taken, or it stopped by itself
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    print("ZooKeeper stopped", file=sys.stderr, flush=True)
    return status
