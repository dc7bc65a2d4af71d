"""Run one scripted scenario against Apache Kafka and against tierlog and compare what a client sees.

A scenario is a function of a bootstrap address returning plain data (``plain`` turns kio answers
into dicts, lists and ints). ``run_both`` runs it on both peers; ``assert_same`` fails with every
differing path listed as ``path: kafka=... tierlog=...`` so a failure reads as a bug report.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from collections.abc import Callable


def plain(x):
    """kio objects to JSON-like values: errors as ints, durations and times as ms, ids as str."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, datetime.timedelta):
        return int(x.total_seconds() * 1000)
    if isinstance(x, datetime.datetime):
        return int(x.timestamp() * 1000)
    if isinstance(x, uuid.UUID):
        return str(x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return [plain(i) for i in x]
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    return x


def differences(kafka, tierlog, path: str = "") -> list[str]:
    if isinstance(kafka, dict) and isinstance(tierlog, dict):
        out = []
        for k in list(kafka) + [k for k in tierlog if k not in kafka]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in tierlog:
                out.append(f"{sub}: kafka={kafka[k]!r} tierlog=<missing>")
            elif k not in kafka:
                out.append(f"{sub}: kafka=<missing> tierlog={tierlog[k]!r}")
            else:
                out += differences(kafka[k], tierlog[k], sub)
        return out
    if isinstance(kafka, list | tuple) and isinstance(tierlog, list | tuple) and len(kafka) == len(tierlog):
        out = []
        for i, (a, b) in enumerate(zip(kafka, tierlog)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if kafka == tierlog else [f"{path}: kafka={kafka!r} tierlog={tierlog!r}"]


def assert_same(kafka, tierlog, what: str = "") -> None:
    diffs = differences(kafka, tierlog)
    assert not diffs, f"{what} differs from Apache Kafka:\n  " + "\n  ".join(diffs)


def run_both(scenario: Callable, kafka_peer, tierlog_peer, *args):
    return scenario(kafka_peer.bootstrap, *args), scenario(tierlog_peer.bootstrap, *args)
