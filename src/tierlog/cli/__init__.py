"""The ``tierlog`` command line.

    tierlog broker [-c server.properties] [-o key=value ...]
    tierlog zookeeper start [--port 2181] [--data-dir DIR]
    tierlog config docs|describe ...
    tierlog topic create|list|describe|alter-config|add-partitions|delete ...
    tierlog produce TOPIC [--file F] ...          tierlog consume TOPIC [--from earliest] ...
    tierlog group list|describe|reset-offsets|delete ...
    tierlog cluster info
    tierlog reassign generate|execute|verify|cancel|list ...   tierlog leader-election --election-type ...
    tierlog tier status|reconcile ...             tierlog spark export|storage-report|audit ...
    tierlog console [--port 9470] [--token T]
    tierlog completion bash|zsh                   tierlog --version

One module per command family registers its subcommands and prints; what talks to a running broker
lives in :mod:`tierlog.tools`. docs/cli.md describes every command.

A failure a user can cause (an invalid configuration, an unreachable broker, an unknown topic, a bad
value) prints one line on standard error, ``tierlog: error: <what>; <what to do>``, and exits non-zero
(2 for invalid input and configuration, 1 for the rest); the traceback only with ``--debug``.

A reader that stops reading (``tierlog topic describe t | head``) ends the command quietly with status 141,
what a shell reports for a Unix tool ended by SIGPIPE (128 + 13), so ``set -o pipefail`` sees the same as
with ``cat``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from tierlog import logs
from tierlog.cli import (
    broker,
    cluster,
    completion,
    config,
    console,
    consume,
    election,
    group,
    produce,
    reassign,
    spark,
    tier,
    topic,
    zookeeper,
)
from tierlog.cli.common import ConfigFailure
from tierlog.cli.config import parse_topic_overrides
from tierlog.cli.parser import EXIT_FAILED, EXIT_INVALID, EXIT_OK, Parser, add_debug
from tierlog.errors import InvalidConfigError

#: The reader of standard output went away: 128 + SIGPIPE, as the shell reports it for ``cat file | head``.
EXIT_CLOSED_PIPE = 141

#: Command families in the order ``tierlog --help`` lists them.
FAMILIES = (broker, zookeeper, topic, produce, consume, group, cluster, reassign, election, tier, console, config,
            spark, completion)

#: Modules whose absence means an optional extra is not installed, and the pip command that adds it.
EXTRAS = {"pyspark": "spark", "pyarrow": "spark", "pandas": "spark", "matplotlib": "spark", "obstore": "objectstore"}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("tierlog")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tierlog", description="A Kafka-compatible log broker with tiered storage.")
    parser.add_argument("--version", action="version", version=f"tierlog {version()}")
    add_debug(parser, default=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for family in FAMILIES:
        family.register(sub)
    return parser


def closed_pipe() -> int:
    """Standard output's reader is gone: point stdout at /dev/null so the interpreter's last flush does not
    complain, and exit as a Unix tool does (no message)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierlog`` console command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    logs.configure(logging.DEBUG if debug else logging.WARNING, stream=sys.stderr)
    if not debug and args.command not in ("broker", "spark"):
        # the client logs what it retries; the command reports the outcome in one line
        logging.getLogger("tierlog.client").setLevel(logging.CRITICAL)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # what is still buffered fails here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return closed_pipe()
    except ConfigFailure:
        return EXIT_INVALID
    except InvalidConfigError as e:  # e.g. invalid --topic-overrides: one line, no traceback
        if debug:
            raise
        from tierlog.cli.failures import describe

        # a broker's INVALID_CONFIG answer is named as such; a local configuration error is its message
        line = describe(e, args) if hasattr(args, "resolved_bootstrap") else e.message
        print(f"tierlog: error: {line}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as e:
        extra = EXTRAS.get((e.name or "").split(".")[0])
        if debug or extra is None:
            raise
        print(f"tierlog: error: this command needs the {extra} extra ({e.name} is not installed); "
              f"pip install 'tierlog[{extra}]'", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - every failure becomes one line unless --debug
        if debug:
            raise
        from tierlog.cli.failures import CliError, describe

        print(f"tierlog: error: {describe(e, args)}", file=sys.stderr)
        return EXIT_INVALID if isinstance(e, (CliError, ValueError)) else EXIT_FAILED


__all__ = ["EXIT_CLOSED_PIPE", "EXIT_FAILED", "EXIT_INVALID", "EXIT_OK", "build_parser", "closed_pipe", "main",
           "parse_topic_overrides", "version"]
