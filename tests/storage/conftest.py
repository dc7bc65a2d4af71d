import os

import pytest

from tierlog.records import build_batch
from tierlog.storage import Log, LogConfig


def batch(n=1, *, ts=None, size=10, key=b"k", **kw):
    """A batch of ``n`` records with ``size``-byte values and optional fixed timestamp."""
    recs = [(key, bytes([65 + i % 26]) * size, [], ts) if ts is not None else (key, bytes([65 + i % 26]) * size)
            for i in range(n)]
    return build_batch(recs, **kw)


@pytest.fixture
def make_log(tmp_path):
    """Open (or reopen) a log in a temp folder: make_log(**LogConfig fields, clean_shutdown=True)."""
    opened = []

    def _make(name="t-0", clean_shutdown=True, recovery_point=0, log_start_offset=0, **cfg):
        d = os.path.join(tmp_path, name)
        topic, _, part = name.rpartition("-")
        lg = Log.open(d, topic, int(part), LogConfig(**cfg), clean_shutdown=clean_shutdown,
                      recovery_point=recovery_point, log_start_offset=log_start_offset)
        opened.append(lg)
        return lg

    yield _make
    for lg in opened:
        for seg in lg.segments:
            if seg.fd >= 0:
                seg.close()


def crash(lg):
    """Simulate a process kill: drop the log without flushing indexes, snapshots or checkpoints."""
    for seg in lg.segments:
        if seg.fd >= 0:
            os.close(seg._fd)
            seg._fd = -1
