"""What the command families share: the broker configuration (``-c``), the address to connect to."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tierlog.cli.parser import DEFAULT_BOOTSTRAP, DEFAULT_TIMEOUT
from tierlog.errors import InvalidConfigError


class ConfigFailure(Exception):
    """Raised by :func:`load_config` after the one-line message has been printed."""


def load_config(args: argparse.Namespace) -> Any:
    """Load and validate the broker configuration; on failure print one line and raise ConfigFailure."""
    from tierlog.config import BrokerConfig

    try:
        return BrokerConfig.load(args.config, dict(args.override))
    except InvalidConfigError as e:
        message = e.message
    except OSError as e:
        message = f"cannot read configuration file {args.config}: {e.strerror or e}; check the path given to -c"
    print(f"tierlog: error: {message}", file=sys.stderr)
    raise ConfigFailure


def listener_address(cfg: Any) -> str:
    """host:port of the broker's first advertised listener (a wildcard host means this machine)."""
    listener = cfg.advertised_listeners[0]
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"{host}:{listener.port}"


def bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap-server, else the listener of the broker configuration file, else 127.0.0.1:9092."""
    if args.bootstrap_server:
        return args.bootstrap_server
    if args.config:
        return listener_address(load_config(args))
    return DEFAULT_BOOTSTRAP


def timeout_s(args: argparse.Namespace) -> float:
    return args.timeout or DEFAULT_TIMEOUT
