"""``tierlog topic create|list|describe|alter-config|add-partitions|delete`` (kafka-topics, rpk topic)."""

from __future__ import annotations

import argparse

from tierlog.cli import output
from tierlog.cli.parser import EXIT_OK, add_client_args, add_json, add_topic_config, positive_int, subcommands
from tierlog.cli.run import with_admin


def register(sub: argparse._SubParsersAction) -> None:
    topic = sub.add_parser("topic", help="create, list, describe, change and delete topics")
    tsub = subcommands(topic, "topic_command")

    p = tsub.add_parser("create", help="create topics", description="Create topics. Example: tierlog topic create "
                        "demo -p 3 --config remote.storage.enable=true --config segment.bytes=1048576")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("-p", "--partitions", type=positive_int, default=-1,
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("-r", "--replication-factor", type=positive_int, default=-1,
                   help="replicas of each partition (default: the broker's default.replication.factor)")
    add_topic_config(p, "a topic setting")
    p.add_argument("--if-not-exists", action="store_true", help="no error when the topic exists already")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_create)

    p = tsub.add_parser("list", help="list topics", aliases=["ls"])
    p.add_argument("-i", "--internal", action="store_true", help="also internal topics (__consumer_offsets, ...)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_list)

    p = tsub.add_parser("describe", help="partitions (leader, replicas, ISR, offsets) and settings of topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--url", help="also the log cleaner's state of compacted partitions, from this broker's "
                                 "metrics endpoint http://host:port (it shows the partitions it hosts)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_describe)

    p = tsub.add_parser("alter-config", help="set or remove topic settings",
                        description="Set (-s/--set or --config key=value) or remove (-d key) topic settings; a "
                                    "removed setting falls back to the broker's.")
    p.add_argument("topic", metavar="TOPIC")
    add_topic_config(p, "set a topic setting", "-s", "--set", dest="set")
    p.add_argument("-d", "--delete", metavar="KEY", action="append", default=[],
                   help="remove a topic setting (repeatable)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_alter_config)

    p = tsub.add_parser("add-partitions", help="grow a topic to more partitions")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-p", "--partitions", type=positive_int, required=True,
                   help="the new total number of partitions (as kafka-topics --alter --partitions)")
    add_json(p)
    add_client_args(p)
    p.set_defaults(handler=cmd_add_partitions)

    p = tsub.add_parser("delete", help="delete topics and their data (remote data too)")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    add_client_args(p)
    p.set_defaults(handler=cmd_delete)


def cmd_create(args: argparse.Namespace) -> int:
    from tierlog.tools import topics

    configs = dict(args.topic_config)
    result = with_admin(args, lambda a: topics.create(a, args.topics, args.partitions, args.replication_factor,
                                                      configs, args.if_not_exists))
    if args.json:
        output.emit_json(result)
        return EXIT_OK
    for t in result:
        if t["created"]:
            output.lines(f"created topic {t['topic']} ({t['partitions']} partition(s), replication factor "
                         f"{t['replication_factor']})")
        else:
            output.lines(f"topic {t['topic']} exists already")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from tierlog.tools import topics

    result = with_admin(args, lambda a: topics.list_topics(a, args.internal))
    if args.json:
        output.emit_json(result)
    else:
        output.table(("NAME", "PARTITIONS", "REPLICAS", "ID"),
                     [(t["topic"], t["partitions"], t["replication_factor"], t["topic_id"]) for t in result],
                     right=("PARTITIONS", "REPLICAS"))
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from tierlog.tools import topics

    result = with_admin(args, lambda a: topics.describe(a, args.topics))
    if args.url:
        from tierlog.cli.failures import CliError
        from tierlog.tools import tier

        for t in result:
            try:
                t["cleaner"] = tier.fetch_cleaner_status(args.url, t["topic"])["partitions"]
            except tier.StatusError as e:
                raise CliError(str(e)) from None
    if args.json:
        output.emit_json(result)
        return EXIT_OK
    for i, t in enumerate(result):
        if i:
            output.lines("")
        output.lines(f"topic {t['topic']}  id {t['topic_id']}  partitions {len(t['partitions'])}  "
                     f"replication factor {t['replication_factor']}" + ("  internal" if t["internal"] else ""), "")
        output.table(("PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "LOG-END"),
                     [(p["partition"], "none" if p["leader"] is None else p["leader"], _ids(p["replicas"]),
                       _ids(p["isr"]), _ids(p["offline_replicas"]) or None, p["log_start_offset"],
                       p["log_end_offset"]) for p in t["partitions"]],
                     right=("PARTITION", "LEADER", "LOG-START", "LOG-END"))
        _unknown_offsets(t["partitions"])
        output.lines("")
        if t["configs"]:
            output.table(("CONFIG", "VALUE", "SOURCE"),
                         [(c["name"], "[hidden]" if c["sensitive"] else c["value"], c["source"])
                          for c in t["configs"]])
        else:
            output.lines("every setting has Kafka's default")
        if t.get("cleaner"):
            output.lines("")
            output.table(("PARTITION", "FIRST-DIRTY", "DIRTY-RATIO", "CLEANABLE-BYTES", "CLEANING", "LAST-CLEAN-MS",
                          "LAST-CLEAN-S", "UNCLEANABLE"),
                         [(c["partition"], c["first_dirty_offset"], c["dirty_ratio"], c["cleanable_bytes"],
                           "yes" if c["in_progress"] else "no", c["last_clean_ms"], c["last_clean_seconds"],
                           c["uncleanable"]) for c in t["cleaner"]],
                         right=("PARTITION", "FIRST-DIRTY", "DIRTY-RATIO", "CLEANABLE-BYTES"))
    return EXIT_OK


def _unknown_offsets(partitions: list[dict]) -> None:
    """Say where a row's offsets come from when not from its leader, or why it has none."""
    followers = [f"{p['partition']} (broker {p['offsets'].rpartition(' ')[2]})" for p in partitions
                 if p["offsets"].startswith("from replica")]
    if followers:
        output.lines(f"partition(s) {', '.join(followers)}: offsets from a live replica, the leader being away "
                     f"(a follower's high watermark may trail the leader's)")
    for why, text in (("no leader", "without a leader and no live replica answered (offsets unknown)"),
                      ("leader not answering", "whose leader and replicas did not answer in time (offsets unknown)")):
        which = [str(p["partition"]) for p in partitions if p["offsets"] == why]
        if which:
            output.lines(f"partition(s) {','.join(which)}: {text}")


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def cmd_alter_config(args: argparse.Namespace) -> int:
    from tierlog.cli.failures import CliError
    from tierlog.tools import topics

    if not args.set and not args.delete:
        raise CliError("nothing to change; give -s key=value or -d key")
    result = with_admin(args, lambda a: topics.alter_config(a, args.topic, dict(args.set), args.delete))
    if args.json:
        output.emit_json(result)
    else:
        output.lines(f"updated topic {args.topic}; its own settings now:")
        output.table(("CONFIG", "VALUE"), sorted(result["configs"].items()))
    return EXIT_OK


def cmd_add_partitions(args: argparse.Namespace) -> int:
    from tierlog.tools import topics

    result = with_admin(args, lambda a: topics.add_partitions(a, args.topic, args.partitions))
    if args.json:
        output.emit_json(result)
    else:
        output.lines(f"topic {args.topic}: {result['partitions_before']} -> {result['partitions']} partitions")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    from tierlog.tools import topics

    for name in with_admin(args, lambda a: topics.delete(a, args.topics)):
        output.lines(f"deleted topic {name}")
    return EXIT_OK
