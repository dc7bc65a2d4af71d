"""``tierlog leader-election`` (kafka-leader-election): preferred or unclean leader elections on request."""

from __future__ import annotations

import argparse
import sys

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json

EXIT_FAILED = 1
#: What to do about the controller's answer for a partition, by its error.
ADVICE = {
    "UNKNOWN_TOPIC_OR_PARTITION": "check the topic and partition with `tierlog topic describe`",
    "PREFERRED_LEADER_NOT_AVAILABLE": "its preferred replica must be alive and in the ISR: wait until it caught up",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "an unclean election needs a live replica: start one of its brokers",
}


def _partition(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a partition number (0 or more), got {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("leader-election", help="elect preferred (or, for leaderless partitions, unclean) leaders",
                       description="Ask the controller to elect leaders, as kafka-leader-election: 'preferred' moves "
                                   "leadership back to each partition's first replica when it is alive and in sync; "
                                   "'unclean' elects a live replica outside the ISR for a partition without a leader "
                                   "(records only the lost in-sync replicas had are gone).")
    p.add_argument("--election-type", required=True, type=str.lower, choices=("preferred", "unclean"),
                   help="preferred or unclean (either case)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--topic", metavar="TOPIC", help="the partitions of this topic (all, or --partition's)")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='the partitions of Kafka\'s election file: {"partitions":[{"topic":"orders",'
                            '"partition":0}]}')
    p.add_argument("--partition", type=_partition, metavar="N", help="with --topic: only this partition")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_elect)


def cmd_elect(args: argparse.Namespace) -> int:
    from tierlog.cli.failures import CliError
    from tierlog.cli.run import with_admin
    from tierlog.tools import elections

    if args.partition is not None and args.topic is None:
        raise CliError("--partition goes with --topic; add --topic TOPIC")
    wanted = None
    if args.path_to_json_file:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as f:
                wanted = elections.parse_partitions(f.read())
        except OSError as e:
            raise CliError(f"cannot read {args.path_to_json_file}: {e.strerror or e}; check the path") from None

    async def run(admin):
        partitions = wanted
        if args.topic is not None:
            partitions = await elections.topic_partitions(admin, args.topic, args.partition)
        return await elections.elect(admin, args.election_type, partitions)

    result = with_admin(args, run)
    if args.json:
        output.emit_json(result)
    else:
        kind = result["election_type"]
        names = {k: ", ".join(f"{x['topic']}-{x['partition']}" for x in result[k]) for k in ("elected", "not_needed")}
        if names["elected"]:
            output.lines(f"Successfully completed leader election ({kind}) for partitions {names['elected']}")
        if names["not_needed"]:
            output.lines(f"Valid replica already elected for partitions {names['not_needed']}")
        for x in result["failed"]:
            output.lines(f"Error completing leader election ({kind}) for partition: {x['topic']}-{x['partition']}: "
                         f"{x['message']} ({x['error']})")
        if not any(result[k] for k in ("elected", "not_needed", "failed")):
            output.lines("No partition to elect a leader for")
    if result["failed"]:
        failed = result["failed"]
        codes = sorted({x["error"] for x in failed})
        todo = "; ".join(ADVICE.get(c, "see the broker's answer above") for c in codes)
        print(f"tierlog: error: {len(failed)} partition(s) could not be elected ({', '.join(codes)}); {todo}",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
