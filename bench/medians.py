"""Medians of bench/before_after.sh's rounds: every numeric figure of every benchmark, before and after.

    python bench/medians.py OUT            # one JSON line: {bench: {figure: [before, after]}}
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def flatten(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = v
    return out


def main(out: Path) -> None:
    figures: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in sorted(out.glob("*.jsonl")):
        side = path.stem.split("-")[0]  # before-1 -> before
        for line in path.read_text().splitlines():
            d = json.loads(line)
            for name, value in flatten(d).items():
                figures[d["bench"]][name][side].append(value)
    result = {bench: {name: [round(statistics.median(sides[s]), 2) if sides.get(s) else None
                             for s in ("before", "after")]
                      for name, sides in sorted(names.items())}
              for bench, names in figures.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
