"""Helpers of the storage tests: record batches to append, and a simulated process kill."""

import os

from tierlog.records import build_batch


def batch(n=1, *, ts=None, size=10, key=b"k", **kw):
    """A batch of ``n`` records with ``size``-byte values and optional fixed timestamp."""
    recs = [(key, bytes([65 + i % 26]) * size, [], ts) if ts is not None else (key, bytes([65 + i % 26]) * size)
            for i in range(n)]
    return build_batch(recs, **kw)


def crash(lg):
    """Simulate a process kill: drop the log without flushing indexes, snapshots or checkpoints."""
    for seg in lg.segments:
        if seg.fd >= 0:
            os.close(seg._fd)
            seg._fd = -1
