"""The code-layout counts issue 38 (the renovation) is judged by, measured on a checkout.

    python scripts/layout_report.py [CHECKOUT]    # default: this repository

Prints one JSON line. Every count is mechanical (ast or a regular expression), so two checkouts compare:
- ``server_loose_modules``: ``.py`` files directly in ``src/tierlog/server`` (``__init__.py`` not counted);
- ``server_lines`` and ``server_share``: lines under ``server/`` and their share of ``src/tierlog``;
- ``broker_lines``; ``broker_late_assignments``: assignments in ``server/broker.py`` to an attribute of a
  collaborator (``rm.x = ...``, ``self.rm.x = ...``), i.e. wiring by mutation after construction;
- ``context_var_channels``: ``ContextVar(`` definitions in ``src/tierlog``;
- ``largest_tiered_class``: the longest class under ``src/tierlog/tiered`` (name and lines), and
  ``tiered_classes_over_500``;
- ``test_rlm_private_calls``: calls of a remote log manager's private methods in tests (``rlm._x(``);
- ``test_wait_loops``: hand-written deadline loops in tests (``deadline = time.monotonic()``).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path


def _py_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _late_assignments(path: Path) -> int:
    """Assignments whose target is ``<name>.<attr>`` with ``<name>`` not ``self``, or ``self.<a>.<b>``."""
    count = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            if (isinstance(owner, ast.Name) and owner.id != "self") or isinstance(owner, ast.Attribute):
                count += 1
    return count


def _classes(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            yield node.name, node.end_lineno - node.lineno + 1


def report(checkout: Path) -> dict:
    src = checkout / "src" / "tierlog"
    server = src / "server"
    all_lines = sum(_lines(p) for p in _py_files(src))
    server_lines = sum(_lines(p) for p in _py_files(server))
    tiered_classes = [(f"{p.relative_to(src)}:{name}", n) for p in _py_files(src / "tiered") for name, n in _classes(p)]
    largest = max(tiered_classes, key=lambda c: c[1])
    tests = [p.read_text(encoding="utf-8") for p in _py_files(checkout / "tests")]
    return {
        "server_loose_modules": sum(1 for p in server.glob("*.py") if p.name != "__init__.py"),
        "server_lines": server_lines,
        "server_share": round(server_lines / all_lines, 3),
        "broker_lines": _lines(server / "broker.py"),
        "broker_late_assignments": _late_assignments(server / "broker.py"),
        "context_var_channels": sum(len(re.findall(r"\bContextVar\(", p.read_text(encoding="utf-8")))
                                    for p in _py_files(src)),
        "largest_tiered_class": {"class": largest[0], "lines": largest[1]},
        "tiered_classes_over_500": sum(1 for _, n in tiered_classes if n > 500),
        "test_rlm_private_calls": sum(len(re.findall(r"\brlm\._[a-z_]+\(", t)) for t in tests),
        "test_wait_loops": sum(len(re.findall(r"deadline = time\.monotonic\(\)", t)) for t in tests),
    }


if __name__ == "__main__":
    print(json.dumps(report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])))
