"""Generate ``docs/configuration.md`` from the table in :mod:`tierlog.config.definitions`.

``python -m tierlog.config.docs`` (or ``tierlog config docs``) prints the Markdown;
``--output docs/configuration.md`` writes it. ``tests/config/test_docs.py`` fails when the committed
file differs from what this module renders.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

from tierlog.config.definitions import (
    BROKER_CONFIGS,
    CLIENT_CONFIGS,
    CLIENT_ROLES,
    DELIBERATE_DIFFERENCES,
    PREFIX_FAMILIES,
    TOPIC_CONFIGS,
    ConfigDef,
)
from tierlog.config.values import format_value

REGENERATE = "PYTHONPATH=src python -m tierlog.config.docs --output docs/configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _default(defn: ConfigDef) -> str:
    value = defn.default
    if value is None:
        shown = "null"
    elif value == "" or value == []:
        shown = '""'
    else:
        shown = format_value(value) or ""
    text = _code(shown)
    if defn.role_defaults:
        extra = ", ".join(f"{role}: {format_value(v)}" for role, v in sorted(defn.role_defaults.items()))
        text += f" ({extra})"
    return text


def _doc(defn: ConfigDef) -> str:
    text = defn.doc + (f" *({defn.since})*" if defn.since else "")
    return text + (f" **No effect in tierlog:** {defn.inert}" if defn.inert else "")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _broker_rows(internal: bool) -> list[list[str]]:
    return [
        [_code(d.name), d.type, _default(d), d.allowed(), _yes(d.dynamic), _doc(d)]
        for d in BROKER_CONFIGS.values()
        if d.internal == internal
    ]


def _topic_rows(internal: bool) -> list[list[str]]:
    return [
        [
            _code(d.name),
            d.type,
            _default(d),
            " > ".join(_code(s.name) for s in d.synonyms),
            d.allowed(),
            _yes(d.dynamic),
            _doc(d),
        ]
        for d in TOPIC_CONFIGS.values()
        if d.internal == internal
    ]


def _client_rows() -> list[list[str]]:
    return [
        [
            _code(d.name),
            ", ".join(r for r in CLIENT_ROLES if r in d.roles),
            d.type,
            _default(d),
            d.allowed(),
            _yes(d.dynamic),
            _doc(d),
        ]
        for d in CLIENT_CONFIGS.values()
        if not d.internal
    ]


def render_markdown() -> str:
    """The whole ``docs/configuration.md`` text."""
    out: list[str] = [
        "# Configuration",
        "",
        "<!-- Generated from src/tierlog/config/definitions.py; do not edit. Regenerate with: "
        f"{REGENERATE} -->",
        "",
        "tierlog uses Apache Kafka's setting names, types, defaults and ranges (Kafka 4.x), so a Kafka "
        "`server.properties`, topic configuration or client configuration means the same thing here. The "
        "few places where tierlog deliberately differs are listed at the end with the reason.",
        "",
        "The broker reads a Java `.properties` file (`tierlog broker -c config/server.properties`) and "
        "then `-o key=value` overrides. Values follow Kafka's formats: booleans `true`/`false` in any case, "
        "lists comma-separated, durations in the unit named by the key. An invalid value stops the broker "
        "with a message naming the key, the value and what is allowed; unknown keys are logged and kept. "
        "`tierlog config describe -c FILE` prints the effective values and where they come from.",
        "",
        "Columns: *Dynamic* says whether the setting can be changed while the broker runs (broker settings: "
        "Kafka's dynamic broker configs; topic settings can always be altered). *Allowed values* uses "
        "Kafka's notation: `[1,...]` means at least 1, `[0,...,1]` a closed range.",
        "",
        "## Broker settings",
        "",
    ]
    out += _table(
        ["Name", "Type", "Default", "Allowed values", "Dynamic", "Description"], _broker_rows(False)
    )
    out += [
        "",
        "Settings named `rlmm.config.…` are read by the topic-based remote log metadata manager and "
        "`rsm.config.…` by tierlog's storage plugins; they are written with the prefix, as in Kafka. If "
        "`remote.log.storage.manager.impl.prefix` or `remote.log.metadata.manager.impl.prefix` is changed, "
        "use the new prefix instead.",
        "",
        "### Plugin prefixes",
        "",
    ]
    out += _table(["Prefix", "Meaning"], [[_code(p), text] for p, text in PREFIX_FAMILIES])
    out += [
        "",
        "## Topic settings",
        "",
        "Set per topic with CreateTopics or AlterConfigs (`kafka-topics.sh --config`, `kafka-configs.sh`). "
        "A topic without an override takes the broker default from the keys in *Broker default*, the "
        "first one set winning (`log.retention.ms` > `log.retention.minutes` > `log.retention.hours`). "
        "Unknown topic settings are refused.",
        "",
    ]
    out += _table(
        ["Name", "Type", "Default", "Broker default", "Allowed values", "Dynamic", "Description"],
        _topic_rows(False),
    )
    out += [
        "",
        "## Client settings",
        "",
        "Accepted by tierlog's producer, consumer and admin clients (the *Roles* column). Settings of "
        "another role, or unknown ones, are logged and ignored as Kafka's clients do.",
        "",
    ]
    out += _table(
        ["Name", "Roles", "Type", "Default", "Allowed values", "Dynamic", "Description"], _client_rows()
    )
    out += [
        "",
        "## Internal settings",
        "",
        "Meant for tests; they may change without notice.",
        "",
    ]
    out += _table(
        ["Name", "Scope", "Type", "Default", "Allowed values", "Description"],
        [
            [_code(d.name), d.scope, d.type, _default(d), d.allowed(), _doc(d)]
            for d in list(BROKER_CONFIGS.values()) + list(TOPIC_CONFIGS.values())
            if d.internal
        ],
    )
    out += [
        "",
        "## Deliberate differences from Kafka",
        "",
    ]
    out += _table(
        ["Settings", "Kafka 4.x", "tierlog", "Why"],
        [
            [
                ", ".join(_code(s) if not s.startswith("(") else s for s in d.settings),
                d.kafka,
                d.tierlog,
                d.reason,
            ]
            for d in DELIBERATE_DIFFERENCES
        ],
    )
    out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tierlog.config.docs",
        description="Print (or write) the configuration reference in Markdown.",
    )
    parser.add_argument("--output", "-o", help="write to this file instead of standard output")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
