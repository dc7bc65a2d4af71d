"""``tierlog tier status|reconcile``: tiered storage of a running broker, through its HTTP endpoint."""

from __future__ import annotations

import argparse
import json
import sys

from tierlog.cli.common import load_config
from tierlog.cli.parser import EXIT_OK, add_config_args, add_debug, subcommands

#: The endpoint of the example configuration (config/server.properties: metrics.port=9464), asked when
#: neither --url nor a configuration says where the broker serves it.
DEFAULT_URL = "http://127.0.0.1:9464"


def register(sub: argparse._SubParsersAction) -> None:
    tier = sub.add_parser("tier", help="tiered storage of a running broker")
    tsub = subcommands(tier, "tier_command")
    status = tsub.add_parser("status", help="per-partition offsets, local and remote segments, copy lag, errors")
    add_config_args(status)
    status.add_argument("--url", help=f"the broker's metrics endpoint, http://host:port (default: from -c, "
                                      f"else {DEFAULT_URL})")
    status.add_argument("--topic", help="only this topic")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    add_debug(status)
    status.set_defaults(handler=cmd_status)
    reconcile = tsub.add_parser("reconcile", help="find remote objects no metadata references, and segments "
                                                  "whose objects are missing")
    add_config_args(reconcile)
    reconcile.add_argument("--url", help=f"the broker's metrics endpoint, http://host:port (default: from -c, "
                                         f"else {DEFAULT_URL})")
    reconcile.add_argument("--delete", action="store_true", help="delete the orphaned objects")
    reconcile.add_argument("--json", action="store_true", help="machine-readable output")
    add_debug(reconcile)
    reconcile.set_defaults(handler=cmd_reconcile)


def _url(args: argparse.Namespace) -> str:
    from tierlog.tools import tier

    if args.url:
        return args.url
    if args.config or args.override:
        return tier.endpoint_url(load_config(args))
    return DEFAULT_URL


def cmd_status(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    try:
        status = tier.fetch_status(_url(args), args.topic)
    except tier.StatusError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(status, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(tier.format_table(status, args.topic))
    return EXIT_OK


def cmd_reconcile(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    try:
        report = tier.reconcile(_url(args), args.delete)
    except tier.StatusError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(tier.format_reconcile(report))
    return 1 if "error" in report else EXIT_OK
