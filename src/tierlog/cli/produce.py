"""``tierlog produce``: lines of standard input (or a file) as records (kafka-console-producer, rpk produce)."""

from __future__ import annotations

import argparse
import sys

from tierlog.cli import output
from tierlog.cli.failures import describe
from tierlog.cli.parser import EXIT_FAILED, EXIT_OK, add_client_args, add_json, key_value
from tierlog.cli.run import connection, run

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send lines of standard input (or a file) as records",
                       description="Send each line of standard input (or of --file) as one record, the line end "
                                   "not included; with --whole the whole input is one record. Reports how many "
                                   "records and bytes were written; when a record fails, how many were "
                                   "acknowledged (exit status 1).")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--file", metavar="FILE", help="read FILE instead of standard input")
    p.add_argument("--whole", action="store_true", help="send the whole input as one record")
    p.add_argument("-K", "--key-separator", metavar="SEP",
                   help="each line is KEY SEP VALUE (a line without SEP has no key)")
    p.add_argument("-H", "--header", metavar="KEY=VALUE", action="append", default=[], type=key_value,
                   help="a header on every record (repeatable)")
    p.add_argument("-p", "--partition", type=int, metavar="N", help="write to this partition (default: by key, "
                                                                     "else spread over the partitions)")
    p.add_argument("--acks", choices=("all", "-1", "1", "0"), default="all",
                   help="answers to wait for: all (default; idempotent), 1 (the leader), 0 (none)")
    p.add_argument("-z", "--compression", choices=CODECS, default="none", help="compression codec (default none)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    from tierlog.tools import records

    address, seconds = connection(args)
    sep = args.key_separator.encode() if args.key_separator else None
    headers = [(k, v.encode()) for k, v in args.header] or None
    stream = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115 - closed below
    try:
        if not args.file and stream.isatty():
            print("reading records from standard input, one per line; end with Ctrl-D", file=sys.stderr)
        result = run(records.produce(address, seconds, args.topic, records.read_chunks(stream, sep, args.whole),
                                     partition=args.partition, headers=headers, acks=args.acks,
                                     compression=args.compression, client_config=args.resolved_client_config))
    except records.DeliveryFailed as e:
        # the acknowledged records are written (each once); say so, and what the others met
        if args.json:
            output.emit_json({"topic": args.topic, "records": e.sent, "acknowledged": e.acknowledged,
                              "not_acknowledged": e.sent - e.acknowledged, "error": str(e.error)})
        print(f"tierlog: error: {e.acknowledged} of {e.sent} record(s) acknowledged, {e.sent - e.acknowledged} "
              f"not acknowledged (they may or may not be written): {describe(e.error, args)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if args.file:
            stream.close()
    if args.json:
        output.emit_json(result)
    else:
        parts = ",".join(map(str, result["partitions"])) or "-"
        output.lines(f"produced {result['records']} record(s), {output.size(result['bytes'])} to {args.topic} "
                     f"(partitions {parts})")
    return EXIT_OK
