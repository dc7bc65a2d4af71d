"""``tierlog tier status|reconcile``: tiered storage of a running broker, through its HTTP endpoint."""

from __future__ import annotations

import argparse
import sys

from tierlog.cli.common import load_config
from tierlog.cli.output import emit_json
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
    reconcile.add_argument("--delete", action="store_true", help="delete the orphaned objects (a POST with the "
                           "admin token; the broker needs metrics.admin.enable=true)")
    reconcile.add_argument("--token", help="the broker's metrics.admin.token for --delete (default: "
                           "$TIERLOG_ADMIN_TOKEN, else from -c)")
    reconcile.add_argument("--json", action="store_true", help="machine-readable output")
    add_debug(reconcile)
    reconcile.set_defaults(handler=cmd_reconcile)


def _url(args: argparse.Namespace, cfg=None) -> str:
    from tierlog.tools import tier

    if args.url:
        return args.url
    if cfg is not None:
        return tier.endpoint_url(cfg)
    return DEFAULT_URL


def _config(args: argparse.Namespace):
    """The broker configuration given with -c/-o, else None."""
    return load_config(args) if args.config or args.override else None


def _answer(args: argparse.Namespace, ask, text) -> dict | None:
    """Ask the broker's endpoint; print the answer (``--json`` or ``text(answer)``), or one line on failure."""
    from tierlog.tools import tier

    try:
        answer = ask()
    except tier.StatusError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return None
    if args.json:
        emit_json(answer)
    else:
        print(text(answer))
    return answer


def cmd_status(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    status = _answer(args, lambda: tier.fetch_status(_url(args, _config(args)), args.topic),
                     lambda status: tier.format_table(status, args.topic))
    return 1 if status is None else EXIT_OK


def cmd_reconcile(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    def ask() -> dict:
        cfg = _config(args)
        token = tier.admin_token(args.token, cfg) if args.delete else None
        return tier.reconcile(_url(args, cfg), args.delete, token=token)

    report = _answer(args, ask, tier.format_reconcile)
    return 1 if report is None or "error" in report else EXIT_OK
