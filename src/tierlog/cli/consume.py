"""``tierlog consume``: records to standard output (kafka-console-consumer, rpk consume, kcat -C).

``--format`` says how each record is printed; the fields (kcat's and rpk's letters):

    %t topic      %p partition    %o offset       %k key          %v value
    %T timestamp (ms since the epoch)             %d timestamp as ISO-8601 (UTC)
    %h headers as key=value,key=value             %K key length   %V value length (-1: null)
    %% a percent sign;  \\n newline, \\t tab, \\r carriage return, \\\\ backslash

The default is ``%v\\n``: values only, one per line. Keys and values are written as the bytes they are.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tierlog.cli.parser import EXIT_OK, add_client_args, positive_int
from tierlog.cli.run import connection, run

FIELDS = "tpokvTdhKV"
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}

Formatter = Callable[[Any], bytes]


def compile_format(text: str) -> Formatter:
    """A function record -> bytes for a format string; ArgumentTypeError names an unknown field."""
    parts: list[Any] = []  # bytes, or a field letter
    literal = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c in "%\\" and i + 1 < len(text):
            n = text[i + 1]
            if c == "%" and n == "%":
                literal += b"%"
            elif c == "%" and n in FIELDS:
                parts.append(bytes(literal))
                literal.clear()
                parts.append(n)
            elif c == "\\" and n in _ESCAPES:
                literal += _ESCAPES[n]
            elif c == "%":
                raise argparse.ArgumentTypeError(f"unknown field %{n} in the format; the fields are "
                                                 + " ".join(f"%{f}" for f in FIELDS) + " and %%")
            else:
                literal += (c + n).encode()
            i += 2
            continue
        literal += c.encode()
        i += 1
    parts.append(bytes(literal))
    parts = [p for p in parts if p != b""]

    def render(r: Any) -> bytes:
        out = bytearray()
        for p in parts:
            out += p if isinstance(p, bytes) else _field(r, p)
        return bytes(out)

    return render


def _field(r: Any, f: str) -> bytes:
    if f == "v":
        return r.value or b""
    if f == "k":
        return r.key or b""
    if f == "o":
        return str(r.offset).encode()
    if f == "p":
        return str(r.partition).encode()
    if f == "t":
        return r.topic.encode()
    if f == "T":
        return str(r.timestamp).encode()
    if f == "d":
        return datetime.fromtimestamp(r.timestamp / 1000, UTC).isoformat(timespec="milliseconds").encode()
    if f == "h":
        return b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers)
    if f == "K":
        return str(-1 if r.key is None else len(r.key)).encode()
    return str(-1 if r.value is None else len(r.value)).encode()  # V


def _start(text: str) -> Any:
    from tierlog.tools.records import parse_start

    try:
        return parse_start(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records to standard output",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from", dest="start", type=_start, metavar="WHERE",
                   help="earliest, latest, an offset, or @TIME (ms since the epoch or ISO-8601, local time without "
                        "a zone); default: latest, or the group's committed offsets with --group")
    p.add_argument("-p", "--partition", type=int, metavar="N", help="only this partition")
    p.add_argument("-n", "--count", type=positive_int, metavar="N", help="exit after N records")
    p.add_argument("-g", "--group", help="consume as this consumer group, committing what was printed")
    p.add_argument("-f", "--format", type=compile_format, default=compile_format("%v\\n"), metavar="FORMAT",
                   help="how to print each record (default '%%v\\n'); fields listed above")
    add_client_args(p, idle=True)
    p.set_defaults(handler=cmd_consume)


def cmd_consume(args: argparse.Namespace) -> int:
    from tierlog.cli.failures import CliError
    from tierlog.tools import records

    if args.group is not None and args.partition is not None:
        raise CliError("--partition cannot be used with --group (the group assigns partitions); leave one out")
    address, seconds = connection(args)
    out = sys.stdout.buffer
    render = args.format
    start = args.start or (None if args.group else records.Start("latest"))

    def write(batch: list) -> None:
        out.write(b"".join(render(r) for r in batch))
        out.flush()

    # a reader that went away (| head) ends the command quietly: tierlog.cli.main turns BrokenPipeError into 141
    run(records.consume(address, seconds, args.topic, write, start=start, partition=args.partition,
                        count=args.count, group=args.group, idle_s=args.timeout,
                        client_config=args.resolved_client_config))
    return EXIT_OK
