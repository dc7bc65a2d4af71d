"""``tierlog spark export|storage-report|audit``: pipeline jobs on Apache Spark (PySpark)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tierlog.cli.common import listener_address, load_config
from tierlog.cli.parser import EXIT_INVALID, EXIT_OK, add_config_args, add_debug, key_value, subcommands


def register(sub: argparse._SubParsersAction) -> None:
    spark = sub.add_parser("spark", help="pipeline jobs on Apache Spark (PySpark)")
    ssub = subcommands(spark, "spark_command", "JOB")
    jobs = {
        "export": "new records of the topics to Parquet (partitioned by partition and date), exactly once",
        "storage-report": "remote bytes, segments and ages per topic and partition; table and PNG chart",
        "audit": "remote store listing joined with the metadata: orphaned objects and missing segments",
    }
    for name, text in jobs.items():
        job = ssub.add_parser(name, help=text)
        _add_job_args(job, name)
        job.set_defaults(handler=cmd_spark)


def _add_job_args(job: argparse.ArgumentParser, name: str) -> None:
    add_config_args(job)
    job.add_argument("--bootstrap-server", help="broker address (default: from -c)")
    job.add_argument("--topic", action="append", default=[], help="topic to read (repeatable)")
    job.add_argument("--pattern", help="regular expression of the topics to read")
    job.add_argument("--option", metavar="KEY=VALUE", action="append", default=[], type=key_value,
                     help="an option of the tierlog data source, e.g. tierlog.rsm.dir=./data/remote")
    job.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    if name == "export":
        job.add_argument("--output", required=True, help="Parquet folder")
        job.add_argument("--checkpoint", help="checkpoint folder (default: <output>/_checkpoint)")
    if name == "storage-report":
        job.add_argument("--chart", help="PNG file for the chart")
    add_debug(job)


def cmd_spark(args: argparse.Namespace) -> int:
    from tierlog.spark import jobs
    from tierlog.spark.options import BrokerUnreachableError, SourceOptionError

    options: dict[str, str] = {}
    given = dict(args.option)
    try:
        if args.config or args.override:
            options.update(spark_options_from_broker(load_config(args), args.config,
                                                     resolve_dir="tierlog.rsm.dir" not in given))
        if args.bootstrap_server:
            options["kafka.bootstrap.servers"] = args.bootstrap_server
        if args.pattern:
            options["subscribePattern"] = args.pattern
        elif args.topic:
            options["subscribe"] = ",".join(args.topic)
        options.update(given)
        if "kafka.bootstrap.servers" not in options:
            print("tierlog: error: give --bootstrap-server or -c with the broker's configuration", file=sys.stderr)
            return EXIT_INVALID
        if not any(k in options for k in ("subscribe", "subscribePattern", "assign")):
            options["subscribePattern"] = ".*"
        result = jobs.run(args.spark_command, options, master=args.master, output=getattr(args, "output", None),
                          checkpoint=getattr(args, "checkpoint", None), chart=getattr(args, "chart", None))
    except SourceOptionError as e:  # also a remote store that is not the broker's
        print(f"tierlog: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except (BrokerUnreachableError, jobs.MissingExtraError, jobs.DataLossJobError) as e:
        print(f"tierlog: error: {e}", file=sys.stderr)
        return 1
    if args.spark_command == "export":
        print(f"exported {result['rows']} record(s) to {result['output']}")
    elif args.spark_command == "audit":
        return 1 if result["orphans"] or result["missing"] else EXIT_OK
    return EXIT_OK


def spark_options_from_broker(cfg: Any, config_file: str | None = None, resolve_dir: bool = True) -> dict[str, str]:
    """The data source options that reach a broker and its remote store, from the broker's configuration;
    a relative ``rsm.config.dir`` becomes absolute (see tierlog.spark.options.resolve_config_path)."""
    from tierlog.spark.options import resolve_config_path

    options = {"kafka.bootstrap.servers": listener_address(cfg)}
    if cfg["remote.log.storage.system.enable"]:
        manager = cfg["remote.log.storage.manager.class.name"]
        options["tierlog.remote.storage.manager"] = manager
        rsm = cfg.rsm_config()
        if manager == "filesystem" and rsm.get("dir") and resolve_dir:
            rsm["dir"] = resolve_config_path(rsm["dir"], config_file, f"{cfg.rsm_prefix}dir")
        options.update({f"tierlog.rsm.{k}": v for k, v in rsm.items()})
        options["tierlog.metadataTopicPartitions"] = str(cfg["rlmm.config.remote.log.metadata.topic.num.partitions"])
    return options
