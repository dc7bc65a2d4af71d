"""``tierlog console``: the web console of a running cluster, in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import os
import sys

from tierlog.cli.parser import EXIT_FAILED, EXIT_OK, add_client_args

#: The console's default port: beside the broker's HTTP endpoint of config/server.properties (9464).
DEFAULT_PORT = 9470


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "console", help="serve a web console of the cluster (topics, tiers, groups), read-only by default",
        description="Serve a web console of the cluster reached with -b (or the listener of -c): brokers, topics "
                    "with their local and remote sizes, each partition's tiers, consumer groups with lag. "
                    "Every asset is served by tierlog itself. Actions (create and delete topics) are on only "
                    "with an admin token (--token or $TIERLOG_ADMIN_TOKEN), which each action must carry. "
                    "See docs/console.md.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                       "only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--token", help="turn actions on, each needing this bearer token (default: "
                                   "$TIERLOG_ADMIN_TOKEN; neither: read-only)")
    p.add_argument("--metrics-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the metrics charts scrape each broker's /metrics once a page asked for them "
                        "(default 5; the last 15 minutes are kept)")
    add_client_args(p)
    p.set_defaults(handler=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    from tierlog.cli.run import connection, run
    from tierlog.console.server import serve
    from tierlog.tools.tier import TOKEN_ENV

    address, seconds = connection(args)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        run(serve(address, args.host, args.port, admin_token=token, timeout_s=seconds,
                  client_config=args.resolved_client_config, on_bound=lambda line: print(line, flush=True),
                  metrics_interval_s=max(0.2, args.metrics_interval)))
    except OSError as e:  # the port is taken, or the address is not this machine's
        print(f"tierlog: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}; pick another "
              f"--port or --host", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
