"""``tierlog broker``: run a broker until SIGTERM."""

from __future__ import annotations

import argparse

from tierlog.cli.common import load_config
from tierlog.cli.parser import add_config_args, add_debug


def register(sub: argparse._SubParsersAction) -> None:
    broker = sub.add_parser("broker", help="run the broker")
    add_config_args(broker)
    add_debug(broker)
    broker.set_defaults(handler=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    from tierlog import broker_main

    return int(broker_main.run(cfg, debug=bool(getattr(args, "debug", False))) or 0)
