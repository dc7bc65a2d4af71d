"""How the ``tierlog`` command prints: aligned tables (rich), JSON for scripts, sizes and ages for people.

On a terminal tables get a bold header; when standard output is a pipe or a file they are plain text
(no colour or escape codes, no wrapping to a terminal width), so scripts and tests see stable output.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def console() -> Console:
    tty = sys.stdout.isatty()
    # not a terminal: no styles, and a width no table reaches, so rows are never wrapped
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, no_color=not tty,
                   width=None if tty else 100_000, force_terminal=tty or None)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[str] = ()) -> None:
    """Print rows under the column headers, aligned; ``right`` names the numeric columns (right-aligned).
    None prints as ``-``."""
    right = set(right)
    t = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True, overflow="fold")
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    c = console()
    with c.capture() as cap:
        c.print(t)
    # rich pads every cell to its column's width, also the last one: trailing blanks help nobody
    sys.stdout.write("\n".join(line.rstrip() for line in cap.get().splitlines()) + "\n")


def lines(*texts: str) -> None:
    for text in texts:
        sys.stdout.write(text + "\n")


def emit_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def size(n: int | None) -> str | None:
    """Bytes for people: ``512 B``, ``1.5 KiB``, ``10.0 MiB``, ``3.2 GiB``."""
    if n is None:
        return None
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    return f"{n} B"  # pragma: no cover - the loop returns


def age(ms: int | None, now_ms: int | None = None) -> str | None:
    """How long ago a time (ms since the epoch) was: ``just now``, ``42s ago``, ``3m ago``, ``5h ago``,
    ``2d ago``; a time ahead of now reads ``in 3m``."""
    if ms is None or ms < 0:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    delta = (now_ms - ms) / 1000
    ahead = delta < 0
    delta = abs(delta)
    if delta < 1:
        return "just now"
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if delta >= seconds:
            text = f"{int(delta // seconds)}{unit}"
            return f"in {text}" if ahead else f"{text} ago"
    return "just now"  # pragma: no cover
