"""``tierlog config docs|describe``: the configuration reference and the effective values."""

from __future__ import annotations

import argparse
from typing import Any

from tierlog.cli.common import load_config
from tierlog.cli.output import emit_json
from tierlog.cli.parser import EXIT_OK, add_config_args, add_debug, subcommands


def parse_topic_overrides(text: str) -> dict[str, str]:
    """Parse ``k=v,k2=v2``; a piece without ``=`` continues the previous value, so list values such as
    ``cleanup.policy=compact,delete`` work."""
    out: dict[str, str] = {}
    last: str | None = None
    for piece in text.split(","):
        if "=" in piece:
            key, _, value = piece.partition("=")
            last = key.strip()
            if not last:
                raise argparse.ArgumentTypeError(f"expected k=v,... got {text!r}")
            out[last] = value.strip()
        elif last is not None:
            out[last] += "," + piece.strip()
        elif piece.strip():
            raise argparse.ArgumentTypeError(f"expected k=v,... got {text!r}")
    return out


def register(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="configuration reference and effective values")
    csub = subcommands(config, "config_command")
    docs = csub.add_parser("docs", help="print the configuration reference (Markdown)")
    docs.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    add_debug(docs)
    docs.set_defaults(handler=cmd_docs)
    describe = csub.add_parser("describe", help="print the effective broker and topic configuration")
    add_config_args(describe)
    describe.add_argument("--topic-overrides", metavar="K=V,...", type=parse_topic_overrides, default={},
                          help="topic overrides to apply when describing the topic configuration")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    add_debug(describe)
    describe.set_defaults(handler=cmd_describe)


def cmd_docs(args: argparse.Namespace) -> int:
    from tierlog.config.docs import main as docs_main

    return docs_main(["--output", args.output] if args.output else [])


def _entry_dict(entry: Any) -> dict[str, Any]:
    return {
        "name": entry.name, "value": entry.value, "source": entry.source.name, "sensitive": entry.sensitive,
        "read_only": entry.read_only, "type": entry.type,
        "synonyms": [{"name": s.name, "value": s.value, "source": s.source.name} for s in entry.synonyms],
    }


def _print_table(title: str, entries: list[Any]) -> None:
    print(f"# {title}")
    width = max((len(e.name) for e in entries), default=0)
    for e in entries:
        value = "[hidden]" if e.sensitive else ("null" if e.value is None else e.value)
        print(f"{e.name.ljust(width)}  {value}  ({e.source.name})")


def cmd_describe(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    broker = cfg.describe_broker()
    topic = cfg.describe_topic(args.topic_overrides)
    if args.json:
        emit_json({"broker": [_entry_dict(e) for e in broker], "topic": [_entry_dict(e) for e in topic]})
    else:
        _print_table("broker", broker)
        print()
        _print_table("topic", topic)
    return EXIT_OK
