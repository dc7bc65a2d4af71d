"""What the command families share: the broker configuration (``-c``), the address to connect to, the
client settings (``--command-config``, ``-X``) of a secured listener."""

from __future__ import annotations

import argparse
import difflib
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


def client_config(args: argparse.Namespace) -> dict[str, str]:
    """The client settings of ``--command-config FILE`` with the ``-X key=value`` on top, checked: a key
    that is no setting of tierlog's client (or of Kafka's) and a value the client refuses raise CliError
    (one line naming the key and where it came from). Values stay text; the clients parse them."""
    from tierlog.cli.failures import CliError
    from tierlog.config.definitions import CLIENT_CONFIGS
    from tierlog.config.properties import PropertiesSyntaxError, load_properties

    given: dict[str, tuple[str, str]] = {}  # key -> (value, where it was given)
    path = getattr(args, "command_config", None)
    if path:
        try:
            props = load_properties(path)
        except OSError as e:
            raise CliError(f"cannot read --command-config {path}: {e.strerror or e}; check the path") from None
        except PropertiesSyntaxError as e:
            raise CliError(f"--command-config {e}; see docs/cli.md for the file's format") from None
        given.update((k, (v, f"--command-config {path}")) for k, v in props.items())
    given.update((k, (v, "-X")) for k, v in getattr(args, "client_override", None) or [])
    _translate_librdkafka_names(given)
    for key, (_value, where) in given.items():
        if key not in CLIENT_CONFIGS:
            close = difflib.get_close_matches(key, list(CLIENT_CONFIGS), n=1, cutoff=0.75)
            hint = f"did you mean {close[0]}?" if close else "docs/client.md lists the client's settings"
            raise CliError(f"unknown client setting {key!r} ({where}); {hint}")
    config = {k: v for k, (v, _) in given.items()}
    _check_client_config(config, {k: where for k, (_, where) in given.items()})
    return config


def _translate_librdkafka_names(given: dict[str, tuple[str, str]]) -> None:
    """librdkafka's (kcat's, confluent-kafka's) names of PEM files, as users of kcat write them with -X:
    ``ssl.ca.location`` becomes a PEM truststore; ``ssl.certificate.location`` with ``ssl.key.location``
    a PEM keystore given inline (Kafka's ssl.keystore.certificate.chain and ssl.keystore.key), the files
    read here. A setting in Kafka's own name wins over its librdkafka spelling."""
    from tierlog.cli.failures import CliError

    if "ssl.ca.location" in given:
        value, where = given.pop("ssl.ca.location")
        given.setdefault("ssl.truststore.type", ("PEM", where))
        given.setdefault("ssl.truststore.location", (value, where))
    cert, key = given.pop("ssl.certificate.location", None), given.pop("ssl.key.location", None)
    if (cert is None) != (key is None):
        where = (cert or key)[1]  # type: ignore[index]
        raise CliError(f"ssl.certificate.location and ssl.key.location go together ({where}); give both")
    if cert is not None and key is not None:
        texts = []
        for name, (path, where) in (("ssl.certificate.location", cert), ("ssl.key.location", key)):
            try:
                with open(path, encoding="ascii") as f:
                    texts.append(f.read())
            except (OSError, UnicodeDecodeError) as e:
                raise CliError(f"cannot read {name} {path} ({where}): {getattr(e, 'strerror', None) or e}; "
                               "check the path") from None
        given.setdefault("ssl.keystore.type", ("PEM", cert[1]))
        given.setdefault("ssl.keystore.certificate.chain", (texts[0], cert[1]))
        given.setdefault("ssl.keystore.key", (texts[1], key[1]))


def _check_client_config(config: dict[str, str], where: dict[str, str]) -> None:
    """Let the client's own checks refuse a bad value (a protocol name, an unreadable truststore, SASL
    without credentials) now, as one line, instead of inside the first connection."""
    from tierlog.cli.failures import CliError
    from tierlog.config.client import validate_client_config
    from tierlog.config.definitions import CLIENT_CONFIGS
    from tierlog.config.values import parse_value

    try:
        for key, value in config.items():  # every value, also the producer's and consumer's own settings
            parse_value(CLIENT_CONFIGS[key], value)
        validate_client_config("admin", {"bootstrap.servers": "127.0.0.1:9092", **for_role("admin", config)})
    except InvalidConfigError as e:
        name = getattr(e, "config_name", None)
        source = where.get(name, "--command-config or -X") if name else "--command-config or -X"
        raise CliError(f"{e.message.rstrip('.')} ({source}); fix the client setting") from None


def for_role(role: str, config: dict[str, str]) -> dict[str, str]:
    """The settings of ``config`` that a producer, consumer or admin client takes (the others are not
    passed, so a consumer setting in a shared file does not make the admin client warn)."""
    from tierlog.config.definitions import CLIENT_CONFIGS

    return {k: v for k, v in config.items() if role in CLIENT_CONFIGS[k].roles}


def bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap-server, else bootstrap.servers of the client settings, else the listener of the broker
    configuration file, else 127.0.0.1:9092. A malformed address (no port) raises CliError naming where it
    was given."""
    if args.bootstrap_server:
        return _checked_addresses(args.bootstrap_server, "--bootstrap-server")
    given = getattr(args, "resolved_client_config", None) or {}
    if given.get("bootstrap.servers"):
        return _checked_addresses(given["bootstrap.servers"], "bootstrap.servers of the client settings")
    if args.config:
        return listener_address(load_config(args))
    return DEFAULT_BOOTSTRAP


def _checked_addresses(addresses: str, where: str) -> str:
    from tierlog.cli.failures import CliError
    from tierlog.client.cluster import parse_bootstrap

    try:
        parse_bootstrap(addresses)
    except InvalidConfigError:
        raise CliError(f"bad broker address {addresses!r} ({where}); give HOST:PORT, e.g. {DEFAULT_BOOTSTRAP} "
                       "(several separated by commas)") from None
    return addresses


def timeout_s(args: argparse.Namespace) -> float:
    return args.timeout or DEFAULT_TIMEOUT
