"""The argument parser of the ``tierlog`` command, with one-line errors and "did you mean" suggestions.

argparse answers a mistake with the usage and one error line. Here a misspelled subcommand or flag is
answered with the usage of the subcommand it was typed into (not the top-level one) and the closest
valid spelling (difflib over the choices or the option strings); a bad value (a count that is no
number, a ``key=value`` without ``=``) gets just the one line, ``tierlog: error: <what>; <what to do>``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

#: The parser that started parsing last: the subcommand the remaining words were typed into.
_active: list[argparse.ArgumentParser] = []

_CHOICE = re.compile(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)")
_USAGE_MISTAKES = ("unrecognized arguments", "the following arguments are required", "one of the arguments")


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors say what to do; every subparser is one too."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        _active.append(self)
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        _active.clear()
        return super().parse_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        # "unrecognized arguments" is raised by the top-level parser after the subcommand's parser left
        # words over: answer with the subcommand's usage and options
        target = _active[-1] if message.startswith("unrecognized arguments") and _active else self
        if not message.startswith("unrecognized arguments"):
            # a misspelled flag often shows first as a missing required one: name the misspelling instead
            unknown = _unknown_options(target)
            if unknown and suggestion(f"unrecognized arguments: {unknown[0]}", target):
                message = f"unrecognized arguments: {' '.join(unknown)}"
        hint = suggestion(message, target)
        usage = hint is not None or ": invalid choice:" in message or message.startswith(_USAGE_MISTAKES) \
            or "not allowed with argument" in message
        if usage:
            target.print_usage(sys.stderr)
        todo = f"did you mean {hint}?" if hint else f"see {target.prog} --help"
        line = message.replace("\n", " ")
        self.exit(EXIT_INVALID, f"tierlog: error: {line}; {todo}\n")


def _unknown_options(parser: argparse.ArgumentParser) -> list[str]:
    known = {s for a in parser._actions for s in a.option_strings}
    words = getattr(parser, "_words", [])
    return [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in known]


def suggestion(message: str, parser: argparse.ArgumentParser) -> str | None:
    """The closest valid word to a misspelled choice or option in an argparse error message."""
    m = _CHOICE.search(message)
    if m:
        choices = [c.strip().strip("'\"") for c in m.group(2).split(",")]
        close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
        return f"'{close[0]}'" if close else None
    if message.startswith("unrecognized arguments"):
        options = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
                if close:
                    return close[0]
    return None


def key_value(text: str) -> tuple[str, str]:
    """``key=value`` (argparse type): a missing ``=`` or key is one line saying how to write it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {n}")
    return n


def seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, got {text}")
    return s


def add_debug(p: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    """``--debug`` before or after the subcommand: the traceback of a failure, and debug logging."""
    p.add_argument("--debug", action="store_true", default=default,
                   help="show the traceback of a failure and log at debug level")


def properties_file(hint: str):
    """The type of ``-c FILE``: a path. ``-c`` names a properties file in every command; a ``key=value``
    that is no file gets one line saying where a setting goes instead (``hint``)."""
    def check(text: str) -> str:
        if "=" in text and not os.path.exists(text):
            raise argparse.ArgumentTypeError(f"-c takes a .properties file (the broker's configuration), not "
                                             f"a setting like {text!r}; {hint}")
        return text
    return check


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``-c FILE`` and ``-o key=value`` of the commands that read the broker's configuration."""
    p.add_argument("-c", "--config", metavar="FILE", type=properties_file("a broker setting is -o KEY=VALUE"),
                   help="broker configuration file (.properties)")
    p.add_argument("-o", "--override", metavar="KEY=VALUE", action="append", default=[], type=key_value,
                   help="set a configuration key, on top of the file (repeatable)")


def add_topic_config(p: argparse.ArgumentParser, what: str, *names: str, dest: str = "topic_config") -> None:
    """``--config KEY=VALUE`` (repeatable): a topic setting, under kafka-topics' name for it."""
    p.add_argument(*names, "--config", dest=dest, metavar="KEY=VALUE", action="append", default=[], type=key_value,
                   help=f"{what}, e.g. --config retention.ms=86400000 (repeatable)")


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT = 5.0


def add_client_args(p: argparse.ArgumentParser, *, idle: bool = False) -> None:
    """The options of every command that talks to a broker as a Kafka client. ``-c FILE`` (long name
    ``--broker-config``) is the broker configuration file, as in every command; ``--config`` is left to the
    commands that take topic settings (kafka-topics' ``--config KEY=VALUE``)."""
    p.add_argument("-b", "--bootstrap-server", metavar="HOST:PORT",
                   help=f"broker to connect to (default: the listener of --broker-config, else {DEFAULT_BOOTSTRAP})")
    p.add_argument("-c", "--broker-config", dest="config", metavar="FILE",
                   type=properties_file("a topic setting is --config KEY=VALUE, where the command takes one"),
                   help="take the broker address from this broker configuration file (server.properties)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client settings (.properties, as Kafka's tools take them): security.protocol, ssl.*, "
                        "sasl.*, ...; see docs/cli.md")
    p.add_argument("-X", dest="client_override", metavar="KEY=VALUE", action="append", default=[],
                   type=key_value, help="a client setting, on top of --command-config (repeatable), e.g. "
                                        "-X security.protocol=SSL")
    if idle:
        p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                       help="exit when no record arrived for SECONDS; also how long to wait for the broker "
                            f"(default {DEFAULT_TIMEOUT:g} s, and no idle exit)")
    else:
        p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                       help=f"give up when the broker does not answer within SECONDS (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(override=[])
    add_debug(p)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON)")


def subcommands(p: argparse.ArgumentParser, dest: str, metavar: str = "SUBCOMMAND") -> argparse._SubParsersAction:
    sub = p.add_subparsers(dest=dest, metavar=metavar, parser_class=Parser)
    sub.required = True
    return sub
