"""The ``tierlog`` command line.

    tierlog broker [-c server.properties] [-o key=value ...]
    tierlog config docs [--output FILE]
    tierlog config describe [-c server.properties] [-o key=value ...] [--topic-overrides k=v,...] [--json]
    tierlog tier status [-c server.properties | --url http://host:port] [--topic T] [--json]
    tierlog tier reconcile [-c server.properties | --url http://host:port] [--delete [--token T]] [--json]
    tierlog spark export|storage-report|audit [-c server.properties | --bootstrap-server H:P] [--topic T] ...

An invalid configuration prints one line on standard error and exits with status 2 (no traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from tierlog import logs
from tierlog.errors import InvalidConfigError

EXIT_OK = 0
EXIT_INVALID = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}\n")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


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


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", metavar="FILE", help="broker configuration file (.properties)")
    p.add_argument("-o", "--override", metavar="KEY=VALUE", action="append", default=[], type=_key_value,
                   help="set a configuration key, on top of the file (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tierlog", description="A Kafka-compatible log broker with tiered storage.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    broker = sub.add_parser("broker", help="run the broker")
    _add_config_args(broker)

    config = sub.add_parser("config", help="configuration reference and effective values")
    csub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND", parser_class=_Parser)
    csub.required = True
    docs = csub.add_parser("docs", help="print the configuration reference (Markdown)")
    docs.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    describe = csub.add_parser("describe", help="print the effective broker and topic configuration")
    _add_config_args(describe)
    describe.add_argument("--topic-overrides", metavar="K=V,...", type=parse_topic_overrides, default={},
                          help="topic overrides to apply when describing the topic configuration")
    describe.add_argument("--json", action="store_true", help="machine-readable output")

    tier = sub.add_parser("tier", help="tiered storage of a running broker")
    tsub = tier.add_subparsers(dest="tier_command", metavar="SUBCOMMAND", parser_class=_Parser)
    tsub.required = True
    status = tsub.add_parser("status", help="per-partition offsets, local and remote segments, copy lag, errors")
    _add_config_args(status)
    status.add_argument("--url", help="the broker's metrics endpoint, http://host:port (default: from -c)")
    status.add_argument("--topic", help="only this topic")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    reconcile = tsub.add_parser("reconcile", help="find remote objects no metadata references, and segments "
                                                  "whose objects are missing")
    _add_config_args(reconcile)
    reconcile.add_argument("--url", help="the broker's metrics endpoint, http://host:port (default: from -c)")
    reconcile.add_argument("--delete", action="store_true", help="delete the orphaned objects (a POST with the "
                           "admin token; the broker needs metrics.admin.enable=true)")
    reconcile.add_argument("--token", help="the broker's metrics.admin.token for --delete (default: "
                           "$TIERLOG_ADMIN_TOKEN, else from -c)")
    reconcile.add_argument("--json", action="store_true", help="machine-readable output")

    spark = sub.add_parser("spark", help="pipeline jobs on Apache Spark (PySpark)")
    ssub = spark.add_subparsers(dest="spark_command", metavar="JOB", parser_class=_Parser)
    ssub.required = True
    jobs = {
        "export": "new records of the topics to Parquet (partitioned by partition and date), exactly once",
        "storage-report": "remote bytes, segments and ages per topic and partition; table and PNG chart",
        "audit": "remote store listing joined with the metadata: orphaned objects and missing segments",
    }
    for name, text in jobs.items():
        job = ssub.add_parser(name, help=text)
        _add_config_args(job)
        job.add_argument("--bootstrap-server", help="broker address (default: from -c)")
        job.add_argument("--topic", action="append", default=[], help="topic to read (repeatable)")
        job.add_argument("--pattern", help="regular expression of the topics to read")
        job.add_argument("--option", metavar="KEY=VALUE", action="append", default=[], type=_key_value,
                         help="an option of the tierlog data source, e.g. tierlog.rsm.dir=./data/remote")
        job.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
        if name == "export":
            job.add_argument("--output", required=True, help="Parquet folder")
            job.add_argument("--checkpoint", help="checkpoint folder (default: <output>/_checkpoint)")
        if name == "storage-report":
            job.add_argument("--chart", help="PNG file for the chart")
    return parser


class _ConfigFailure(Exception):
    """Raised by :func:`_load` after the one-line message has been printed."""


def _load(args: argparse.Namespace) -> Any:
    """Load and validate the broker configuration; on failure print one line and raise _ConfigFailure."""
    from tierlog.config import BrokerConfig

    try:
        return BrokerConfig.load(args.config, dict(args.override))
    except InvalidConfigError as e:
        message = e.message
    except OSError as e:
        message = f"cannot read configuration file {args.config}: {e.strerror or e}"
    print(f"tierlog: error: {message}", file=sys.stderr)
    raise _ConfigFailure


def _cmd_broker(args: argparse.Namespace) -> int:
    cfg = _load(args)
    from tierlog import broker_main

    return int(broker_main.run(cfg) or 0)


def _cmd_docs(args: argparse.Namespace) -> int:
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


def _cmd_describe(args: argparse.Namespace) -> int:
    cfg = _load(args)
    broker = cfg.describe_broker()
    topic = cfg.describe_topic(args.topic_overrides)
    if args.json:
        json.dump({"broker": [_entry_dict(e) for e in broker], "topic": [_entry_dict(e) for e in topic]},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table("broker", broker)
        print()
        _print_table("topic", topic)
    return EXIT_OK


def _cmd_tier_status(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    try:
        url = args.url or tier.endpoint_url(_load(args))
        status = tier.fetch_status(url, args.topic)
    except tier.StatusError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(status, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(tier.format_table(status, args.topic))
    return EXIT_OK


def _cmd_tier_reconcile(args: argparse.Namespace) -> int:
    from tierlog.tools import tier

    try:
        cfg = _load(args) if args.config or not args.url else None
        url = args.url or tier.endpoint_url(cfg)
        report = tier.reconcile(url, args.delete, token=tier.admin_token(args.token, cfg) if args.delete else None)
    except tier.StatusError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(tier.format_reconcile(report))
    return 1 if "error" in report else EXIT_OK


def _cmd_spark(args: argparse.Namespace) -> int:
    from tierlog.spark import jobs, session
    from tierlog.spark.options import SourceOptionError

    options: dict[str, str] = {}
    if args.config or args.override:
        options.update(_spark_options_from_broker(_load(args)))
    if args.bootstrap_server:
        options["kafka.bootstrap.servers"] = args.bootstrap_server
    if args.pattern:
        options["subscribePattern"] = args.pattern
    elif args.topic:
        options["subscribe"] = ",".join(args.topic)
    options.update(dict(args.option))
    if "kafka.bootstrap.servers" not in options:
        print("tierlog: error: give --bootstrap-server or -c with the broker's configuration", file=sys.stderr)
        return EXIT_INVALID
    if not any(k in options for k in ("subscribe", "subscribePattern", "assign")):
        options["subscribePattern"] = ".*"
    spark = session(args.master, f"tierlog {args.spark_command}")
    try:
        if args.spark_command == "export":
            result = jobs.export(spark, options, args.output, args.checkpoint or f"{args.output}/_checkpoint")
            print(f"exported {result['rows']} record(s) to {result['output']}")
        elif args.spark_command == "storage-report":
            jobs.storage_report(spark, options, args.chart)
        else:
            result = jobs.audit(spark, options)
            return 1 if result["orphans"] or result["missing"] else EXIT_OK
    except SourceOptionError as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        spark.stop()
    return EXIT_OK


def _spark_options_from_broker(cfg: Any) -> dict[str, str]:
    """The data source options that reach a broker and its remote store, from the broker's configuration."""
    listener = cfg.advertised_listeners[0]
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    options = {"kafka.bootstrap.servers": f"{host}:{listener.port}"}
    if cfg["remote.log.storage.system.enable"]:
        options["tierlog.remote.storage.manager"] = cfg["remote.log.storage.manager.class.name"]
        options.update({f"tierlog.rsm.{k}": v for k, v in cfg.rsm_config().items()})
        options["tierlog.metadataTopicPartitions"] = str(cfg["rlmm.config.remote.log.metadata.topic.num.partitions"])
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierlog`` console command; returns the exit status."""
    logs.configure(logging.WARNING, stream=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"broker": _cmd_broker, "config": {"docs": _cmd_docs, "describe": _cmd_describe},
                "tier": {"status": _cmd_tier_status, "reconcile": _cmd_tier_reconcile},
                "spark": {"export": _cmd_spark, "storage-report": _cmd_spark, "audit": _cmd_spark}}
    handler = handlers[args.command]
    if isinstance(handler, dict):
        handler = handler[getattr(args, f"{args.command}_command")]
    try:
        return handler(args)
    except _ConfigFailure:
        return EXIT_INVALID
    except InvalidConfigError as e:  # e.g. invalid --topic-overrides: one line, no traceback
        print(f"tierlog: error: {e.message}", file=sys.stderr)
        return EXIT_INVALID


__all__ = ["EXIT_INVALID", "EXIT_OK", "build_parser", "main", "parse_topic_overrides"]
