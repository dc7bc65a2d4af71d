#!/usr/bin/env python3
"""Faults of real S3 stores under a tiering broker, as a matrix (docs/tiered-storage.md, "Stores and what
they lack"): for each server (SeaweedFS, S3Proxy) and each fault of tests/harness/s3_store_faults.py (503
SlowDown, 500s, cuts mid-upload and mid-read, upload timeouts, slow read bodies, deletes failing, the store
down), one topic is half produced and copied, the fault set through an HTTP-aware proxy, the other half
produced while it lasts and read from offset 0, the fault ended, and the topic checked.

Prints a table per server: fault / acknowledged / read back / remote gaps / overlaps / fault hits / storage
errors seen by remote readers / the broker's peak RSS / seconds / verdict; exits 1 when a case lost an
acknowledged record, left a gap or an overlap, or answered a remote reader anything but the retriable
KAFKA_STORAGE_ERROR::

    python scripts/s3_store_faults.py                        # both servers, every fault (a few minutes)
    python scripts/s3_store_faults.py --server s3proxy --fault "store down" --records 5000

The servers come from scripts/s3_servers.py (``install`` first). The suite runs the short version:
tests/tiered/test_store_faults.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness import s3_servers  # noqa: E402
from tests.harness.s3_store_faults import CASES, CaseResult, StoreFaultRun, format_table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", choices=s3_servers.KINDS,
                    help="a server to run on (repeatable; default: every one)")
    ap.add_argument("--fault", action="append", choices=sorted(CASES), help="a fault (repeatable; default: every one)")
    ap.add_argument("--records", type=int, default=2400, help="records produced per case (half during the fault)")
    opts = ap.parse_args()
    failed = False
    for kind in opts.server or s3_servers.KINDS:
        reason = s3_servers.servers_module.missing(kind)
        if reason:
            print(f"{kind}: cannot run: {reason}", file=sys.stderr)
            failed = True
            continue
        work = Path(tempfile.mkdtemp(prefix=f"tierlog-store-faults-{kind}-"))
        rows = []
        with s3_servers.servers_module.start(kind, work / "server", ["tiered"]) as server, \
                StoreFaultRun(server, work / "broker") as run:
            for name in opts.fault or list(CASES):
                try:
                    row = run.case(name, opts.records)
                except AssertionError as e:  # a wait that timed out: the case failed, the others still run
                    row = CaseResult(name, problems=[str(e).splitlines()[0]])
                rows.append(row)
                print(f"{kind}: {name}: {'ok' if row.ok else '; '.join(row.problems)}", file=sys.stderr, flush=True)
        print(f"\n{kind} ({server.endpoint}, work folder {work})")
        print(format_table(rows), flush=True)
        failed = failed or not all(r.ok for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
