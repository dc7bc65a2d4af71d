"""The README, docs/*.md and the comments of config/**/*.properties name only settings, ``tierlog`` commands
and flags, and table columns that exist.

What counts as a reference:

* a setting: a backticked dotted name of lowercase words (`remote.storage.enable`, also `key=value`), a
  ``key=value`` argument of a ``tierlog`` command, and in a .properties file every ``key=value`` line (also
  commented out) and every dotted name in a comment. It must be in the config table (src/tierlog/config), be
  the tail of one (`compression.enable` for `rsm.config.compression.enable`), or end in ``*``/``<...>`` after
  the start of one (`ssl.*`). A name of another product that a doc mentions on purpose is in :data:`ELSEWHERE`.
* a command: a backticked `tierlog ...` (or `tier status`: two words or more, the first a command), a line
  of a fenced code block starting with ``tierlog`` or ``$ tierlog``, and an indented ``#   tierlog ...`` line
  of a .properties file. Its subcommands, flags and ``key=value`` settings must be in the argparse parser
  (src/tierlog/cli) and the config table; a command shown followed by its ``tierlog: error`` is a mistake on
  purpose.
* a column: an uppercase word with a hyphen (LOG-END), uppercase words before "column(s)", an uppercase phrase
  starting like a column (REMOTE SEGMENTS), and each word of a header line in a code block. It must be one of
  the headers the CLI's tables print (``output.table(...)`` calls and the ``COLUMNS`` of src/tierlog/tools).
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import pytest

from tierlog.cli import build_parser
from tierlog.config import ALL_CONFIGS
from tierlog.config.definitions import LISTENER_PREFIX, RLMM_PREFIX, RSM_PREFIX
from tierlog.config.group_configs import GROUP_CONFIGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIGS = sorted((ROOT / "config").rglob("*.properties"))

#: Settings of other products (Kafka's own broker, librdkafka, Kafka Streams, Connect, Spark's Kafka source)
#: and names that only look like settings, which the docs name on purpose.
ELSEWHERE = {
    "client.quota.callback.class": "Kafka broker setting tierlog does not implement (security.md)",
    "replica.alter.log.dirs.io.max.bytes.per.second": "Kafka broker setting tierlog refuses (compatibility.md)",
    "sasl.server.callback.handler.class": "Kafka broker setting tierlog does not implement (compatibility.md)",
    "enable.sasl.oauthbearer.unsecure.jwt": "librdkafka client setting (security.md)",
    "sasl.mechanisms": "librdkafka client setting",
    "ssl.ca.location": "librdkafka client setting",
    "ssl.certificate.location": "librdkafka client setting",
    "ssl.key.location": "librdkafka client setting",
    "message.timeout.ms": "librdkafka producer setting",
    "fetch.queue.backoff.ms": "librdkafka consumer setting (benchmarks.md)",
    "processing.guarantee": "Kafka Streams setting",
    "replication.factor": "Kafka Streams setting",
    "exactly.once.source.support": "Kafka Connect worker setting",
    "exactly.once.support": "Kafka Connect connector setting",
    "add.partitions.to.txn.retry.backoff.ms": "Kafka broker setting whose behaviour tierlog fixes (compatibility.md)",
    "partition.assignment.strategy": "Java consumer setting",
    "cluster.id": "a field of meta.properties",
    "log.size": "a field of tierlog-metadata.json (tiered-storage-layout.md)",
    "log.transforms": "a field of tierlog-metadata.json (tiered-storage-layout.md)",
    "indexes.entries": "a field of tierlog-metadata.json (tiered-storage-layout.md)",
    "share.version": "Kafka feature flag (compatibility.md)",
    "errors.deadletterqueue.topic.name": "Kafka 4.4 share group config (KIP-1191, config/group_configs.py)",
    "errors.deadletterqueue.copy.record.enable": "Kafka 4.4 share group config (KIP-1191, config/group_configs.py)",
    "errors.deadletterqueue.auto.create.topics.enable": "Kafka 4.4 broker setting tierlog does not implement "
                                                        "(KIP-1191)",
    "share.coordinator.snapshot.update.records.per.snapshot": "Kafka broker setting tierlog does not implement "
                                                              "(compatibility.md)",
}

#: First words of dotted names that are Python modules and objects, or options of Spark's Kafka source
#: (`kafka.bootstrap.servers`), not settings.
CODE = ("tierlog", "asyncio", "os", "time", "loop", "writer", "ctx", "err", "namedtuple", "offload", "records",
        "kafka")
#: Prefixes under which a setting of the table follows (a listener's own settings, optionally per SASL
#: mechanism; the client settings of the topic-based remote log metadata manager).
PREFIXES = (re.compile(r"listener\.name\.(?:<[a-z-]+>|[a-z0-9_-]+)\.(?:(?:<mechanism>|[a-z0-9-]+)\.(?=sasl\.))?"),
            re.compile(r"(?:rlmm\.config\.)?remote\.log\.metadata\.common\.client\."))
FILE_SUFFIXES = ("py", "md", "sh", "pl", "json", "properties", "yml", "yaml", "cfg", "txt", "out", "log", "jar",
                 "metadata", "toml", "conf", "pem", "jks", "p12", "html", "svg", "png", "csv", "parquet", "index",
                 "timeindex", "txnindex", "snapshot", "checkpoint", "com", "org", "io")
#: Uppercase words with a hyphen that are not columns.
NOT_COLUMNS = {"SCRAM-SHA"}

TICKED = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"[a-z][a-z0-9-]*(?:\.(?:[a-z0-9-]+|\*|<[a-z-]+>))+")
BARE_DOTTED = re.compile(r"(?<![\w./:@-])[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+(?![\w/:@(-]|\.\w)")
HYPHENED = re.compile(r"\b[A-Z]{2,}(?:-[A-Z]{2,})+\b(?!-?\d)")
BEFORE_COLUMNS = re.compile(r"((?:\b[A-Z][A-Z-]+\b(?:,? and |, | or | )?)+) columns?\b")
PHRASE = re.compile(r"\b[A-Z]{2,}(?: [A-Z]{2,})+\b")
HEADER = re.compile(r"^[A-Z][A-Z-]+(?: {2,}[A-Z][A-Z-]+)+$")
FENCE = re.compile(r"^```.*?\n(.*?)^```", re.S | re.M)


# --- what exists --------------------------------------------------------------------------------------------


def settings() -> set[str]:
    return ({c.name for c in ALL_CONFIGS} | {s.name for c in ALL_CONFIGS for s in c.synonyms}
            | set(GROUP_CONFIGS))  # the GROUP config resource's names (config/group_configs.py)


def setting_problem(name: str, known: set[str]) -> str | None:
    if name in known or name in ELSEWHERE:
        return None
    for prefix in PREFIXES:
        m = prefix.match(name)
        if m and len(name) > m.end():
            rest = name[m.end():]
            return None if re.fullmatch(r"\*|<[a-z-]+>", rest) else setting_problem(rest, known)
    wild = re.search(r"\.(\*|<[a-z-]+>)", name)
    if wild:
        start = name[:wild.start() + 1]
        if start in (LISTENER_PREFIX, RSM_PREFIX, RLMM_PREFIX) or any(k.startswith(start) for k in known):
            return None
        return f"no setting starts with {start}"
    if any(k.endswith("." + name) for k in known):
        return None
    return "not a setting"


def columns() -> set[str]:
    """Every header the CLI's tables print: the first argument of each ``table(...)`` call in
    src/tierlog/cli and src/tierlog/tools, and the headers in each ``*COLUMNS`` tuple."""
    found: set[str] = set()
    header = re.compile(r"^[A-Z][A-Z0-9-]*$")
    for path in [*(ROOT / "src/tierlog/cli").glob("*.py"), *(ROOT / "src/tierlog/tools").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            value = None
            if isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                    == "table":
                value = node.args[0]
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("COLUMNS")
                                                      for t in node.targets):
                value = node.value
            if value is not None:
                found |= {c.value for c in ast.walk(value) if isinstance(c, ast.Constant)
                          and isinstance(c.value, str) and header.match(c.value)}
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problems(words: list[str], root: argparse.ArgumentParser, known: set[str]) -> list[str]:
    """What in ``tierlog WORDS`` the parser does not know (subcommands, flags, key=value settings)."""
    problems = []
    parser, path = root, ["tierlog"]
    for word in words:
        if word in ("|", "||", "&&", ";", ">", ">>", "<", "<<<", "2>", "&") or word.startswith(("#", ">", "<")):
            break
        subs = _subparsers(parser)
        if word.startswith("-") and len(word) > 1:
            flag = word.split("=", 1)[0]
            options = {s for a in parser._actions for s in a.option_strings}
            if flag not in options and not (flag[:2] in options and not flag.startswith("--")):  # -p3 style
                problems.append(f"{' '.join(path)} has no option {flag}")
        elif subs and not word.isupper() and word not in ("...", "…"):
            choices = [w for w in word.strip("[]").split("|") if w]
            unknown = [w for w in choices if w not in subs]
            if unknown:
                problems.append(f"{' '.join(path)} has no subcommand {'|'.join(unknown)}")
                break
            if len(choices) > 1:  # `tierlog topic create|list|...`: the rest belongs to one of them
                break
            parser = subs[choices[0]]
            path.append(choices[0])
        elif "=" in word and DOTTED.fullmatch(word.split("=", 1)[0]):
            why = setting_problem(word.split("=", 1)[0], known)
            if why:
                problems.append(f"{' '.join(path)}: {word.split('=', 1)[0]} is {why}")
    return problems


def split_command(text: str) -> list[str] | None:
    text = text.strip().removeprefix("$ ").strip()
    if not text.startswith("tierlog ") and text != "tierlog":
        return None
    text = text.replace("\\\n", " ")
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    return words[1:]


# --- what the docs say --------------------------------------------------------------------------------------


def fenced_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def prose(text: str) -> str:
    return FENCE.sub("", text)


def doc_references(text: str):
    """(kind, reference) pairs of a markdown document; kind is setting, command or column."""
    body = prose(text)
    for span in TICKED.findall(body):
        if span.startswith("tierlog ") or span == "tierlog":
            yield "command", span
            continue
        if len(span.split()) > 1 and span.split()[0] in _subparsers(PARSER):  # `tier status`, `topic create`
            yield "command", "tierlog " + span
            continue
        name = span.split("=", 1)[0].strip()
        if DOTTED.fullmatch(name) and is_setting_like(name):
            yield "setting", name
    for block in fenced_blocks(text):
        lines = block.replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines):
            if split_command(line) is not None:
                shown_failing = i + 1 < len(lines) and lines[i + 1].startswith(("tierlog: error", "usage: tierlog"))
                if not shown_failing:
                    yield "command", line.strip().removeprefix("$ ")
            elif HEADER.match(line.strip()):
                for word in line.split():
                    yield "column", word
    yield from column_mentions(body)


def column_mentions(text: str):
    prefixes = {c.split("-")[0] for c in COLUMNS if "-" in c}
    for word in HYPHENED.findall(text):
        if word not in NOT_COLUMNS:
            yield "column", word
    for group in BEFORE_COLUMNS.findall(text):
        for word in re.split(r",? and |, | or | ", group.strip()):
            if word:
                yield "column", word
    for phrase in PHRASE.findall(text):
        if phrase.split()[0] in prefixes:
            yield "column", phrase


def is_setting_like(name: str) -> bool:
    return name.split(".")[0] not in CODE and name.rsplit(".", 1)[-1] not in FILE_SUFFIXES


def config_references(text: str):
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            continue  # the active keys: tests/config/test_example_configs.py
        comment = stripped.lstrip("#").strip()
        key = re.match(r"([a-z][a-z0-9._-]*)=\S", comment)
        if key:
            if "_" not in key[1]:  # rsm.config.aws_region: an obstore option the storage plugin passes on
                yield "setting", key[1]
            continue
        if re.match(r"#\s{2,}tierlog ", stripped):  # an indented command; "# tierlog always ..." is prose
            yield "command", comment
            continue
        for name in BARE_DOTTED.findall(comment):
            if is_setting_like(name):
                yield "setting", name
        yield from column_mentions(comment)


def problems_in(text: str, references) -> list[str]:
    found = []
    for kind, ref in references:
        if kind == "setting":
            why = setting_problem(ref, SETTINGS)
            if why:
                found.append(f"setting {ref}: {why}")
        elif kind == "command":
            words = split_command(ref)
            for p in command_problems(words or [], PARSER, SETTINGS):
                found.append(f"command `{ref}`: {p}")
        elif ref not in COLUMNS:
            found.append(f"column {ref}: no table prints it")
    return sorted(set(found))


SETTINGS = settings()
COLUMNS = columns()
PARSER = build_parser()


# --- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_what_exists(path):
    text = path.read_text()
    assert problems_in(text, doc_references(text)) == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_comments_name_only_what_exists(path):
    text = path.read_text()
    assert problems_in(text, config_references(text)) == []


def test_the_readme_tour_uses_only_commands_and_settings_that_exist():
    tour = re.search(r"<!-- tour -->\n```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert tour, "README lost its <!-- tour --> block"
    commands = [line for line in tour[1].splitlines() if line.startswith("tierlog ")]
    assert commands
    assert [p for c in commands for p in command_problems(split_command(c), PARSER, SETTINGS)] == []


# --- the check itself finds what it is meant to -------------------------------------------------------------


def test_the_check_finds_unknown_settings_commands_flags_and_columns():
    doc = ("Set `remote.storage.enabled=true`, run `tierlog topic craete demo` and `tierlog tier status --topik x`,\n"
           "`tier stats` or `consume --form earliest`,\n"
           "then wait until REMOTE SEGMENTS and REMOTE-SEGMENTS count them.\n\n"
           "```\ntierlog produce t --partitionz 1 -X segment.byte=1\nTOPIC  PART  LOCAL-SEGMENTS\n```\n")
    assert problems_in(doc, doc_references(doc)) == [
        "column LOCAL-SEGMENTS: no table prints it",
        "column REMOTE SEGMENTS: no table prints it",
        "column REMOTE-SEGMENTS: no table prints it",
        "command `tierlog consume --form earliest`: tierlog consume has no option --form",
        "command `tierlog produce t --partitionz 1 -X segment.byte=1`: tierlog produce has no option --partitionz",
        "command `tierlog produce t --partitionz 1 -X segment.byte=1`: tierlog produce: segment.byte is not a setting",
        "command `tierlog tier stats`: tierlog tier has no subcommand stats",
        "command `tierlog tier status --topik x`: tierlog tier status has no option --topik",
        "command `tierlog topic craete demo`: tierlog topic has no subcommand craete",
        "setting remote.storage.enabled: not a setting",
    ]
    config = ("# Until remote.storage.enable=true and log.dirz are set\n#remote.log.storage.sytem.enable=true\n"
              "#   tierlog brokr -c config/server.properties\n")
    assert problems_in(config, config_references(config)) == [
        "command `tierlog brokr -c config/server.properties`: tierlog has no subcommand brokr",
        "setting log.dirz: not a setting", "setting remote.log.storage.sytem.enable: not a setting"]


def test_the_check_accepts_what_exists():
    doc = ("`remote.storage.enable=true`, `compression.enable` (rsm.config.), `ssl.*`, `rsm.config.<key>`,\n"
           "`tierlog topic create demo --config segment.bytes=1048576`, `tierlog tier status --topic demo`,\n"
           "REMOTE-SEGS and the ROLE and LEADER columns, `docs/cli.md`, `tierlog.client`, `tier status`,\n"
           "`broker -c FILE`.\n\n"
           "```\n$ tierlog topic craete demo\ntierlog: error: invalid choice\nPARTITION  LEADER  LOG-END\n```\n")
    assert problems_in(doc, doc_references(doc)) == []
