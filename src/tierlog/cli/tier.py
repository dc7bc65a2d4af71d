"""``tierlog tier status|reconcile``: tiered storage of a running broker, through its HTTP endpoint;
``tierlog tier restore``: topics re-created from the remote tier into a new cluster."""

from __future__ import annotations

import argparse
import sys

from tierlog.cli.common import load_config
from tierlog.cli.output import emit_json
from tierlog.cli.parser import (
    EXIT_OK,
    add_client_args,
    add_config_args,
    add_debug,
    add_json,
    add_topic_config,
    key_value,
    positive_int,
    subcommands,
)

#: The endpoint of the example configuration (config/server.properties: metrics.port=9464), asked when
#: neither --url nor a configuration says where the broker serves it.
DEFAULT_URL = "http://127.0.0.1:9464"


def register(sub: argparse._SubParsersAction) -> None:
    tier = sub.add_parser("tier", help="tiered storage of a running cluster")
    tsub = subcommands(tier, "tier_command")
    status = tsub.add_parser(
        "status", help="per-partition offsets, local and remote segments, copy lag, errors, of every broker",
        description="Every broker's tiering status in one table: the brokers come from the cluster's metadata "
                    "(-b, or the listener of -c), each broker's HTTP endpoint from its own metrics.host and "
                    "metrics.port (DescribeConfigs). --url asks one broker's endpoint only.")
    status.add_argument("--url", help="ask only this broker's metrics endpoint, http://host:port")
    status.add_argument("--topic", help="only this topic (UNKNOWN_TOPIC_OR_PARTITION when the cluster has none)")
    add_json(status)
    add_client_args(status)
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
    restore = tsub.add_parser(
        "restore", help="re-create topics from their remote segments (after their cluster was lost)",
        description="Re-create topics from the remote tier into this cluster, with their original topic ids: "
                    "every tiered record at its original offset, new records after the last one. Reads the "
                    "store named by --broker-config (a broker configuration of the new cluster). Records never "
                    "tiered are not in the store and are not restored. Example: tierlog tier restore "
                    "--broker-config server.properties --topic orders --dry-run")
    which = restore.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", dest="topics", metavar="TOPIC", action="append",
                       help="a topic to restore (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic found in the store")
    restore.add_argument("--source-cluster-id", metavar="ID",
                         help="only segments under the lost cluster's key folder ID (needed when the store holds "
                              "the topic name for several clusters or topic ids)")
    add_topic_config(restore, "a setting of the restored topics (remote.storage.enable=true is always set)")
    restore.add_argument("-p", "--partitions", type=positive_int, default=0,
                         help="at least this many partitions (default: one past the highest partition found in "
                              "the store; a partition that never tiered a segment comes back empty)")
    restore.add_argument("-r", "--replication-factor", type=positive_int, default=-1,
                         help="replicas of each partition (default: the broker's default.replication.factor)")
    restore.add_argument("-o", "--override", metavar="KEY=VALUE", action="append", default=[], type=key_value,
                         help="set a broker configuration key, on top of --broker-config (repeatable)")
    restore.add_argument("--dry-run", action="store_true", help="show what would be restored; change nothing "
                         "(reads only the store)")
    add_json(restore)
    add_client_args(restore)
    restore.set_defaults(handler=cmd_restore, override=[])


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
    from tierlog.cli.run import with_admin
    from tierlog.tools import tier

    if args.url:
        status = _answer(args, lambda: tier.fetch_status(args.url, args.topic),
                         lambda status: tier.format_table(status, args.topic))
        return 1 if status is None else EXIT_OK

    async def endpoints(admin) -> list[dict]:
        if args.topic:
            await admin.describe_topics([args.topic])  # UNKNOWN_TOPIC_OR_PARTITION as every command says it
        return await tier.cluster_endpoints(admin)

    found = with_admin(args, endpoints)
    # --timeout bounds each endpoint's answer too; without it the endpoints get the wait --url gives one
    merged = _answer(args, lambda: tier.cluster_status(found, args.topic, timeout=args.timeout or tier.HTTP_TIMEOUT_S),
                     lambda merged: tier.format_cluster(merged, args.topic))
    # a broker that could not be asked leaves the table incomplete: say so in the exit status too
    return 1 if merged is None or any(b["error"] for b in merged["brokers"]) else EXIT_OK


def cmd_reconcile(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    def ask() -> dict:
        cfg = _config(args)
        token = tier.admin_token(args.token, cfg) if args.delete else None
        return tier.reconcile(_url(args, cfg), args.delete, token=token)

    report = _answer(args, ask, tier.format_reconcile)
    return 1 if report is None or "error" in report else EXIT_OK


#: A restore waits for the metadata topic and the leaders longer than the other commands wait for an answer.
RESTORE_TIMEOUT_S = 30.0


def cmd_restore(args: argparse.Namespace) -> int:
    from tierlog.cli import output
    from tierlog.cli.run import connection, run
    from tierlog.tools import restore

    if not args.config and not args.override:
        print("tierlog: error: restore reads the remote store named by a broker configuration; pass "
              "--broker-config FILE (or its settings with -o)", file=sys.stderr)
        return 1
    cfg = load_config(args)
    try:
        rsm = restore.open_store(cfg)
        try:
            plans = restore.scan(rsm, None if args.all_topics else args.topics, args.source_cluster_id,
                                 args.partitions)
        finally:
            rsm.close()
    except restore.RestoreError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.dry_run:
        results = [p.to_json() for p in plans]
    else:
        address, _ = connection(args)
        try:
            results = run(restore.restore(address, plans, replication_factor=args.replication_factor,
                                          configs=dict(args.topic_config),
                                          timeout_s=args.timeout or RESTORE_TIMEOUT_S,
                                          client_config=args.resolved_client_config))
        except restore.RestoreError as e:
            print(f"tierlog: error: {e}", file=sys.stderr)
            return 1
    if args.json:
        emit_json(results)
    else:
        output.lines(restore.format_plan(results))
    return 1 if any(r.get("status") == "error" for r in results) else EXIT_OK
