"""``tierlog group list|describe|reset-offsets|delete`` (kafka-consumer-groups, rpk group)."""

from __future__ import annotations

import argparse

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json, subcommands
from tierlog.cli.run import with_admin


def _datetime(text: str) -> int:
    from tierlog.tools.records import parse_time

    try:
        return parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _offset(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an offset (a whole number of at least 0), got {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("group", help="consumer groups: list, lag, reset offsets, delete")
    gsub = subcommands(group, "group_command")

    p = gsub.add_parser("list", help="list consumer groups", aliases=["ls"])
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_list)

    p = gsub.add_parser("describe", help="a group's members and, per partition, its offset, the log end and the lag")
    p.add_argument("group", metavar="GROUP")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_describe)

    p = gsub.add_parser("reset-offsets", help="move a group's committed offsets (shows the plan; --execute applies)",
                        description="Compute new committed offsets for a group without members and show them; "
                                    "--execute writes them (as kafka-consumer-groups --reset-offsets: without "
                                    "--execute it is a dry run). An offset outside a partition's records moves to "
                                    "its nearest end.")
    p.add_argument("group", metavar="GROUP")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-t", "--topic", action="append", metavar="TOPIC",
                       help="reset every partition of this topic (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="reset every partition the group has an offset for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", dest="to", action="store_const", const=("earliest", 0),
                    help="the first offset still in the log")
    to.add_argument("--to-latest", dest="to", action="store_const", const=("latest", 0), help="the log end")
    to.add_argument("--to-offset", dest="to", type=lambda t: ("offset", _offset(t)), metavar="N",
                    help="offset N")
    to.add_argument("--to-datetime", dest="to", type=lambda t: ("timestamp", _datetime(t)), metavar="TIME",
                    help="the first record at or after TIME (ISO-8601, local time without a zone; or ms since the "
                         "epoch)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    run.add_argument("--execute", action="store_true", help="write the new offsets")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_reset_offsets)

    p = gsub.add_parser("delete", help="delete groups without members, with their committed offsets")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    add_client_args(p)
    p.set_defaults(handler=cmd_delete)


def cmd_list(args: argparse.Namespace) -> int:
    from tierlog.tools import groups

    result = with_admin(args, groups.list_groups)
    if args.json:
        output.emit_json(result)
    else:
        output.table(("GROUP", "TYPE", "GROUP-TYPE", "STATE"),
                     [(g["group"], g["type"], g["group_type"] or "-", g["state"]) for g in result])
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from tierlog.tools import groups

    d = with_admin(args, lambda a: groups.describe(a, args.group))
    if args.json:
        output.emit_json(d)
        return EXIT_OK
    c = d["coordinator"]
    output.lines(f"group {d['group']}  type {d['group_type']}  state {d['state']}  members {len(d['members'])}  "
                 f"coordinator {c['id']} ({c['host']}:{c['port']})"
                 + (f"  assignor {d['assignor']}" if d["assignor"] else "")
                 + (f"  group epoch {d['group_epoch']}" if d["group_epoch"] is not None else ""), "")
    total = sum(p["lag"] for p in d["partitions"] if p["lag"] is not None)
    output.table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"),
                 [(p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["consumer_id"],
                   p["host"], p["client_id"]) for p in d["partitions"]],
                 right=("PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"))
    output.lines("", f"total lag {total}")
    return EXIT_OK


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    from tierlog.tools import groups

    topics = None if args.all_topics else args.topic
    plan = with_admin(args, lambda a: groups.reset_offsets(a, args.group, topics, args.to, execute=args.execute))
    if args.json:
        output.emit_json({"executed": bool(args.execute), "partitions": plan})
        return EXIT_OK
    output.table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
                 [(p["group"], p["topic"], p["partition"], p["current_offset"], p["new_offset"]) for p in plan],
                 right=("PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"))
    if args.execute:
        output.lines("", f"committed the new offsets of {len(plan)} partition(s)")
    else:
        output.lines("", "dry run: nothing changed; add --execute to write these offsets")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    from tierlog.tools import groups

    for g in with_admin(args, lambda a: groups.delete(a, args.groups)):
        output.lines(f"deleted group {g}")
    return EXIT_OK
