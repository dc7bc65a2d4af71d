"""Run Kafka's DumpLogSegments over a partition folder and parse what it prints.

Two passes, as an operator would run them:

1. ``--deep-iteration --index-sanity-check`` over every ``.log``, ``.index``, ``.timeindex`` and
   ``.snapshot`` file: each batch and record of the logs, the startup sanity check of the indexes,
   the producer snapshots.
2. The indexes alone, without the sanity flag: DumpLogSegments then prints every entry and checks
   each one against the log (the first batch at the entry's position must end at the entry's
   offset; time index entries must match the largest timestamp of the batches they point to).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

_FIELD = re.compile(r"(\w+): (\[[^\]]*\]|\S+)")
# What DumpLogSegments prints (to stderr mostly) when something does not add up.
PROBLEM_MARKERS = ("Mismatches in", "Non-consecutive offsets", "mismatch", "out of order", "Exception",
                   "ERROR", "isvalid: false", "corrupt", "Corrupt")


def _fields(line: str) -> dict[str, str]:
    return dict(_FIELD.findall(line))


@dataclass
class DumpedFile:
    name: str
    batches: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    index: list[tuple[int, int]] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)
    producers: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parse_dump(text: str) -> dict[str, DumpedFile]:
    files: dict[str, DumpedFile] = {}
    cur: DumpedFile | None = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            name = Path(line[len("Dumping "):].strip()).name
            cur = files.setdefault(name, DumpedFile(name))
        elif cur is None:
            continue
        elif line.startswith("baseOffset: "):
            cur.batches.append(_fields(line))
        elif line.startswith("| offset: "):
            cur.records.append(_fields(line[2:]))
        elif line.startswith("offset: "):
            f = _fields(line)
            cur.index.append((int(f["offset"]), int(f["position"])))
        elif line.startswith("timestamp: "):
            f = _fields(line)
            cur.time_index.append((int(f["timestamp"]), int(f["offset"])))
        elif line.startswith("producerId: "):
            cur.producers.append(_fields(line))
        elif line.strip():
            cur.notes.append(line.strip())
    return files


_FIRST_BATCH_FLAGGED = re.compile(r"Non-consecutive offsets in .*?(\d{20})\.log\n\s+-1 is followed by (\d+)\n")


def problems(*texts: str) -> list[str]:
    # Kafka 4.4's DumpLogSegments (ported to Java) starts each file's offset check at -1, so a segment whose
    # base offset is not 0 is always reported non-consecutive at its first batch ("-1 is followed by
    # <base>"); Kafka 4.1 did not. That report says nothing about the file and is left out.
    texts = tuple(_FIRST_BATCH_FLAGGED.sub(lambda m: "" if int(m[1]) == int(m[2]) else m[0], t) for t in texts)
    return [line for text in texts for line in text.splitlines() if any(m in line for m in PROBLEM_MARKERS)]


def dump_partition(run_tool, directory: Path) -> tuple[dict[str, DumpedFile], dict[str, DumpedFile], list[str]]:
    """(pass 1 parsed, pass 2 parsed, problem lines of both) for one partition folder."""
    wanted = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".snapshot"))
    # DumpLogSegments opens a time index's offset index too and throws when that file is missing
    # (test_every_segment_has_its_index_files checks that they all exist).
    wanted = [p for p in wanted if p.suffix != ".timeindex" or p.with_suffix(".index").exists()]
    first = run_tool("DumpLogSegments", "--deep-iteration", "--index-sanity-check",
                     "--files", ",".join(map(str, wanted)))
    indexes = [p for p in wanted if p.suffix in (".index", ".timeindex") and p.stat().st_size > 0]
    if indexes:
        second = run_tool("DumpLogSegments", "--files", ",".join(map(str, indexes)))
        second_out, second_err = second.stdout, second.stderr
    else:
        second_out = second_err = ""
    return (parse_dump(first.stdout), parse_dump(second_out),
            problems(first.stdout, first.stderr, second_out, second_err))


def read_offset_index(path: Path) -> list[tuple[int, int]]:
    """(absolute offset, position) entries of a ``.index`` file, read byte by byte."""
    base = int(path.name.split(".")[0])
    data = path.read_bytes()
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", data)]


def read_time_index(path: Path) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) entries of a ``.timeindex`` file."""
    base = int(path.name.split(".")[0])
    data = path.read_bytes()
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", data)]
