"""``tierlog reassign generate|execute|verify|cancel|list`` (kafka-reassign-partitions): move partitions'
replicas to other brokers, with Kafka's JSON files and throttles."""

from __future__ import annotations

import argparse

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json, subcommands


def _rate(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected bytes per second (a whole number of at least 1), got {text!r}")
    return int(text)


def _plan_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                   help='the plan, Kafka\'s format: {"version":1,"partitions":[{"topic":"orders","partition":0,'
                        '"replicas":[1,2,3]}]} (log_dirs optional, "any" only)')


def register(sub: argparse._SubParsersAction) -> None:
    reassign = sub.add_parser("reassign", help="move partitions to other brokers (plan, execute with a throttle, "
                                               "verify, cancel)")
    rsub = subcommands(reassign, "reassign_command")

    p = rsub.add_parser("generate", help="propose a plan moving topics onto brokers (prints the current and the "
                                         "proposed assignment)",
                        description="Print the current assignment of the topics and a proposed one over the brokers "
                                    "of --broker-list, placed as Kafka places new topics (rack-aware when every "
                                    "broker has a rack). Nothing moves: save the proposal as the plan for execute, "
                                    "and the current assignment for a rollback.")
    p.add_argument("--topics-to-move-json-file", required=True, metavar="FILE",
                   help='the topics, Kafka\'s format: {"version":1,"topics":[{"topic":"orders"}]}')
    p.add_argument("--broker-list", required=True, metavar="IDS", help="the brokers to place them on: 1,2,3")
    p.add_argument("--disable-rack-aware", action="store_true", help="ignore the brokers' racks")
    p.add_argument("--output", metavar="FILE", help="also write the proposed plan to FILE")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_generate)

    p = rsub.add_parser("execute", help="start the plan's reassignments, optionally throttled",
                        description="Start moving each partition of the plan to its replicas "
                                    "(AlterPartitionReassignments). Prints the current assignment: save it to roll "
                                    "back. With --throttle, the copy is limited as Kafka limits it; run verify until "
                                    "it reports every move complete, which removes the throttle.")
    _plan_file(p)
    p.add_argument("--throttle", type=_rate, metavar="BYTES_PER_S",
                   help="limit the copy to this many bytes/s per broker (Kafka's leader and follower "
                        "replication throttles)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=_rate, metavar="BYTES_PER_S",
                   help="not supported: tierlog's brokers do not move replicas between log dirs")
    p.add_argument("--additional", action="store_true",
                   help="start it although other reassignments are in progress (also how to change the throttle of "
                        "a running one: execute it again with the new --throttle)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_execute)

    p = rsub.add_parser("verify", help="show how far the plan is; once nothing moves, remove the throttles",
                        description="For each partition of the plan: still moving, completed, or not moving but on "
                                    "other replicas. When no reassignment is in progress in the cluster, removes the "
                                    "throttles (unless --preserve-throttles). Exits 3 while moves are in progress.")
    _plan_file(p)
    p.add_argument("--preserve-throttles", action="store_true", help="leave the throttles as they are")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_verify)

    p = rsub.add_parser("cancel", help="cancel the plan's reassignments in progress (back to the original replicas)")
    _plan_file(p)
    p.add_argument("--preserve-throttles", action="store_true", help="leave the throttles as they are")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_cancel)

    p = rsub.add_parser("list", help="the partitions being reassigned", aliases=["ls"])
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_list)


#: verify's exit status while moves are in progress (a script loops on it)
EXIT_IN_PROGRESS = 3


def _read(path: str, option: str) -> str:
    from tierlog.cli.failures import CliError

    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {option} {path}: {e.strerror or e}; check the path") from None


def _plan(args: argparse.Namespace):
    from tierlog.tools import reassign

    return reassign.parse_plan(_read(args.reassignment_json_file, "--reassignment-json-file"))


def _cleared(cleared: dict | None) -> None:
    if cleared is not None:
        output.lines(f"Clearing broker-level throttles on brokers {','.join(map(str, cleared['brokers']))}")
        if cleared["topics"]:
            output.lines(f"Clearing topic-level throttles on topics {','.join(cleared['topics'])}")


def cmd_generate(args: argparse.Namespace) -> int:
    from tierlog.cli.run import with_admin
    from tierlog.tools import reassign

    topics = reassign.parse_topics(_read(args.topics_to_move_json_file, "--topics-to-move-json-file"))
    brokers = reassign.parse_broker_list(args.broker_list)
    result = with_admin(args, lambda a: reassign.generate(a, topics, brokers, rack_aware=not args.disable_rack_aware))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(reassign.to_json(result["proposed"]) + "\n")
    if args.json:
        output.emit_json(result)
    else:
        output.lines("Current partition replica assignment", reassign.to_json(result["current"]), "",
                     "Proposed partition reassignment configuration", reassign.to_json(result["proposed"]))
    return EXIT_OK


def cmd_execute(args: argparse.Namespace) -> int:
    from tierlog.cli.failures import CliError
    from tierlog.cli.run import with_admin
    from tierlog.tools import reassign

    if args.replica_alter_log_dirs_throttle is not None:
        raise CliError("--replica-alter-log-dirs-throttle limits moves between a broker's log dirs, which tierlog's "
                       "brokers do not make (no AlterReplicaLogDirs); leave it out (--throttle limits the copy "
                       "between brokers)")
    plan = _plan(args)
    reassign.check_executable(plan)  # before connecting: a bad plan is a bad plan whatever the cluster
    result = with_admin(args, lambda a: reassign.execute(a, plan, additional=args.additional,
                                                         throttle=args.throttle))
    if args.json:
        output.emit_json(result)
        return EXIT_OK
    output.lines("Current partition replica assignment", "", reassign.to_json(result["current"]), "",
                 "Save this to use as the --reassignment-json-file option during rollback")
    if result["throttle"] is not None:
        output.lines("Warning: You must run verify periodically, until the reassignment completes, to ensure the "
                     "throttle is removed.",
                     f"The inter-broker throttle limit was set to {result['throttle']} B/s on brokers "
                     f"{','.join(map(str, result['throttled_brokers']))}")
    started = result["started"]
    output.lines(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for "
                 f"{','.join(started)}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from tierlog.cli.run import with_admin
    from tierlog.tools import reassign

    plan = _plan(args)
    result = with_admin(args, lambda a: reassign.verify(a, plan, preserve_throttles=args.preserve_throttles))
    if args.json:
        output.emit_json(result)
    else:
        output.lines("Status of partition reassignment:")
        for s in result["partitions"]:
            tp = f"{s['topic']}-{s['partition']}"
            if s["state"] == "completed":
                output.lines(f"Reassignment of partition {tp} is completed.")
            elif s["state"] == "in progress":
                output.lines(f"Reassignment of partition {tp} is still in progress.")
            else:
                output.lines(f"There is no active reassignment of partition {tp}, but replica set is "
                             f"{','.join(map(str, s['replicas']))} rather than {','.join(map(str, s['target']))}.")
        _cleared(result["cleared"])
    return EXIT_IN_PROGRESS if any(s["state"] == "in progress" for s in result["partitions"]) else EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    from tierlog.cli.run import with_admin
    from tierlog.tools import reassign

    plan = _plan(args)
    result = with_admin(args, lambda a: reassign.cancel(a, plan, preserve_throttles=args.preserve_throttles))
    if args.json:
        output.emit_json(result)
        return EXIT_OK
    cancelled = result["cancelled"]
    if cancelled:
        output.lines(f"Successfully cancelled partition reassignment{'s' if len(cancelled) > 1 else ''} for: "
                     f"{','.join(cancelled)}")
    else:
        output.lines("None of the specified partition reassignments are active.")
    _cleared(result["cleared"])
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from tierlog.cli.run import with_admin
    from tierlog.tools import reassign

    moving = with_admin(args, reassign.list_moving)
    if args.json:
        output.emit_json(moving)
    elif not moving:
        output.lines("No partition reassignments found.")
    else:
        output.table(("TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"),
                     [(m["topic"], m["partition"], _ids(m["replicas"]), _ids(m["adding"]) or None,
                       _ids(m["removing"]) or None) for m in moving], right=("PARTITION",))
    return EXIT_OK


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))
