"""kcat consuming from a local tierlog broker: the consumer path (Fetch, sendfile) end to end.

For each source tree given (``--tree``, repeatable; default this repository), starts ``python -m tierlog
broker`` from that tree's ``src`` on 127.0.0.1 (free port, temporary log dir), produces ``--records``
records of ``--record-bytes`` with kcat into a one-partition topic, then times ``--runs`` reads of the
whole topic with ``kcat -C -e`` (output discarded). Trees take turns within each round, so two trees
see the same machine load. Prints one JSON line per tree: every run's MB/s and the median.

    python bench/kcat_consume.py --tree /work/main --tree . --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024


class Broker:
    def __init__(self, tree: Path, work: Path, settings: tuple[str, ...] = ()):
        """``settings``: more ``key=value`` broker settings."""
        self.tree = tree
        self.work = work
        log_dir = work / "logs"
        args = [sys.executable, "-m", "tierlog", "broker", "-o", f"log.dirs={log_dir}",
                "-o", "listeners=PLAINTEXT://127.0.0.1:0", "-o", "num.partitions=1"]
        for setting in settings:
            args += ["-o", setting]
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        self.proc = subprocess.Popen(args, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.port = None
        for line in self.proc.stdout:
            if line.startswith("tierlog broker ready on "):
                self.port = int(line.rsplit(":", 1)[1])
                break
        if self.port is None:
            raise RuntimeError(f"broker from {tree} did not start")
        # keep draining so the broker never blocks on a full pipe
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def started(trees: list[Path], prefix: str, settings: tuple[str, ...] = ()):
    """One broker per source tree, each in a temporary folder of its own; all stopped and removed at the end."""
    works = [Path(tempfile.mkdtemp(prefix=prefix)) for _ in trees]
    brokers: list[Broker] = []
    try:
        for tree, work in zip(trees, works):
            brokers.append(Broker(tree, work, settings))
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        for w in works:
            shutil.rmtree(w, ignore_errors=True)


def alternating(count: int, runs: int):
    """The tree indices of ``runs`` rounds, every tree once a round, the first one alternating between rounds
    so that trees see the same machine load."""
    for r in range(runs):
        yield from (range(count) if r % 2 == 0 else reversed(range(count)))


def produce(bootstrap: str, topic: str, records: int, size: int, work: Path) -> None:
    line = b"x" * (size - 1) + b"\n"
    data = work / "records.txt"
    with open(data, "wb") as f:
        for _ in range(records):
            f.write(line)
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "linger.ms=5", "-l", str(data)],
                   check=True, timeout=600)
    data.unlink()


def consume(bootstrap: str, topic: str, records: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                    "-c", str(records)], check=True, stdout=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path, help="source tree (repeatable)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    if shutil.which("kcat") is None:
        ap.error("kcat is not installed (apt-get install kcat)")
    trees = [t.resolve() for t in (args.tree or [Path(__file__).resolve().parents[1]])]
    with started(trees, "tierlog-kcat-") as brokers:
        for b in brokers:
            produce(b.bootstrap, "bench", args.records, args.record_bytes, b.work)
            consume(b.bootstrap, "bench", args.records)  # warm-up: page cache, first fetch
        mb = args.records * args.record_bytes / MIB
        rates: list[list[float]] = [[] for _ in trees]
        for i in alternating(len(trees), args.runs):
            rates[i].append(mb / consume(brokers[i].bootstrap, "bench", args.records))
        for tree, rs in zip(trees, rates):
            print(json.dumps({"tree": str(tree), "records": args.records, "record_bytes": args.record_bytes,
                              "mb_s": [round(x, 1) for x in rs], "median_mb_s": round(statistics.median(rs), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
